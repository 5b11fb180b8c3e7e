# Build-dir flavor: IREE from an existing build tree on the host (a developer's own build).
# `runner image build --iree build-dir:<path>` stages the tree's tools/, lib/ and the two
# Python binding trees into the context as iree-build/ (symlinks that leave the tree are
# resolved, object files and CMakeFiles/ are left out).

# runner:include fragments/python-base.Dockerfile

# No IREE in the venv: it comes from the tree, through PATH and PYTHONPATH.
FROM python-base AS iree-python

FROM scratch AS iree-tree
COPY iree-build/ /opt/iree/build/

# runner:include fragments/worker.Dockerfile

# The worker layer pulled iree-base-runtime in as a dependency. Remove both wheels last, when
# nothing else will install them again, so the tree is the only IREE in the image: a wheel
# left in site-packages shadows nothing today but would the moment PYTHONPATH is dropped.
FROM worker-venv AS final-venv
RUN pip uninstall -y iree-base-compiler iree-base-runtime

# runner:include fragments/image.Dockerfile

ENV PATH=/opt/iree/build/tools:$PATH \
    PYTHONPATH=/opt/iree/build/compiler/bindings/python:/opt/iree/build/runtime/bindings/python
RUN python3 /opt/runner/verify_iree.py --flavor build-dir --tree /opt/iree/build \
      --out /opt/runner/iree-provenance.json
