# ---- image (shared): the final stage. It starts again from the base image, so no layer of
# the build stages (and none of their secrets) is part of it; it receives only the venv, the
# IREE tree (empty for the wheels flavor) and the project's wheel, installed with no index
# and no dependencies (they are in the venv already), so nothing here touches the network.
FROM ${BASE_IMAGE} AS image
COPY --from=final-venv /opt/venv /opt/venv
COPY --from=iree-tree /opt/iree /opt/iree
ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1
COPY --from=project-wheel /wheels/ /tmp/runner-wheels/
RUN pip install --no-deps --no-index --no-cache-dir /tmp/runner-wheels/*.whl \
    && rm -rf /tmp/runner-wheels
COPY runner-build/verify_iree.py /opt/runner/verify_iree.py
WORKDIR /opt/runner
