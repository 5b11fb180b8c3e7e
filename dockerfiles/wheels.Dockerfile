# Wheels flavor: IREE from pinned iree-base-compiler / iree-base-runtime wheels.
#   IREE_VERSION     e.g. 3.13.0 (PyPI), or a nightly such as 3.14.0rc20250601
#   IREE_FIND_LINKS  optional --find-links URL for nightlies
#                    (e.g. https://iree.dev/pip-release-links.html)
# Built by `runner image build --iree wheels:<version>`, which assembles the includes.

# runner:include fragments/python-base.Dockerfile

FROM python-base AS iree-python
ARG IREE_VERSION
ARG IREE_FIND_LINKS=
RUN test -n "$IREE_VERSION" \
    && pip install ${IREE_FIND_LINKS:+--find-links "$IREE_FIND_LINKS"} \
         "iree-base-compiler==$IREE_VERSION" "iree-base-runtime==$IREE_VERSION"

# Nothing outside the venv: the wheels carry the tools.
FROM python-base AS iree-tree
RUN mkdir -p /opt/iree && echo wheels > /opt/iree/FLAVOR

# runner:include fragments/worker.Dockerfile

# The project requires iree-base-runtime of its oldest tested release or newer; for an older
# IREE_VERSION the worker layer replaced the runtime with a newer one. Put the requested pair
# back (a no-op when they agree) so compiler and runtime always match; the verify step below
# checks it.
FROM worker-venv AS final-venv
ARG IREE_VERSION
ARG IREE_FIND_LINKS=
RUN pip install --no-deps ${IREE_FIND_LINKS:+--find-links "$IREE_FIND_LINKS"} \
      "iree-base-compiler==$IREE_VERSION" "iree-base-runtime==$IREE_VERSION"

# runner:include fragments/image.Dockerfile

ARG IREE_VERSION
RUN python3 /opt/runner/verify_iree.py --flavor wheels --expect-version "$IREE_VERSION" \
      --out /opt/runner/iree-provenance.json
