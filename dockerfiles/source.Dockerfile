# Source flavor: IREE built from a git commit with CMake/Ninja, as AMD's from-source SDXL
# harness image does, then used through PATH/PYTHONPATH with the wheels removed.
#   IREE_GIT_URL          repository (default upstream)
#   IREE_COMMIT           commit SHA (7-40 hex) or tag/branch; validated by the runner
#   IREE_TARGET_BACKENDS  compiler targets, e.g. "LLVM_CPU ROCM"  -> -DIREE_TARGET_BACKEND_<X>=ON
#   IREE_HAL_DRIVERS      runtime drivers, e.g. "LOCAL_SYNC LOCAL_TASK HIP" -> -DIREE_HAL_DRIVER_<X>=ON
#   CMAKE_BUILD_TYPE      Release by default
# The labs build with ROCM + HIP (-DIREE_TARGET_BACKEND_ROCM=ON -DIREE_HAL_DRIVER_HIP=ON).

# runner:include fragments/python-base.Dockerfile

# ---- iree-tree: toolchain, checkout, build. Only the build outputs leave this stage.
FROM python-base AS iree-tree
# A ROCm dev image already has most of these; apt skips what is installed.
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
         git ca-certificates cmake ninja-build ccache clang lld python3-dev \
    && rm -rf /var/lib/apt/lists/*
ARG IREE_GIT_URL=https://github.com/iree-org/iree.git
ARG IREE_COMMIT
# A full SHA is fetched alone (GitHub serves any reachable commit); a short SHA, tag or
# branch needs the history to resolve, so it gets a blob-less clone instead.
RUN test -n "$IREE_COMMIT" && mkdir -p /src/iree && cd /src/iree \
    && git init -q && git remote add origin "$IREE_GIT_URL" \
    && if printf '%s' "$IREE_COMMIT" | grep -Eq '^[0-9a-f]{40}$'; then \
         git fetch -q --depth 1 origin "$IREE_COMMIT" && git checkout -q --detach FETCH_HEAD; \
       else \
         git fetch -q --filter=blob:none --tags origin '+refs/heads/*:refs/remotes/origin/*' \
         && { git checkout -q --detach "$IREE_COMMIT" \
              || git checkout -q --detach "origin/$IREE_COMMIT"; }; \
       fi \
    && git submodule update -q --init --depth 1 --jobs 8 \
    && mkdir -p /opt/iree && git rev-parse HEAD > /opt/iree/COMMIT \
    && echo "IREE at $(cat /opt/iree/COMMIT)"
RUN pip install -r /src/iree/runtime/bindings/python/iree/runtime/build_requirements.txt
# ccache: the classic builder has no cache mounts, so the cache is seeded from the context
# (`runner image build --ccache-dir DIR`; empty otherwise) and lives in this stage only.
COPY ccache/ /ccache/
ENV CCACHE_DIR=/ccache
ARG IREE_TARGET_BACKENDS="LLVM_CPU ROCM"
ARG IREE_HAL_DRIVERS="LOCAL_SYNC LOCAL_TASK HIP"
ARG CMAKE_BUILD_TYPE=Release
RUN flags="" \
    && for b in $IREE_TARGET_BACKENDS; do flags="$flags -DIREE_TARGET_BACKEND_$b=ON"; done \
    && for d in $IREE_HAL_DRIVERS; do flags="$flags -DIREE_HAL_DRIVER_$d=ON"; done \
    && echo "cmake backend/driver flags:$flags" \
    && cmake -G Ninja -S /src/iree -B /src/iree-build \
         -DCMAKE_BUILD_TYPE="$CMAKE_BUILD_TYPE" \
         -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DIREE_ENABLE_LLD=ON \
         -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
         -DIREE_BUILD_PYTHON_BINDINGS=ON -DPython3_EXECUTABLE=/opt/venv/bin/python \
         -DIREE_BUILD_TESTS=OFF -DIREE_BUILD_SAMPLES=OFF \
         -DIREE_TARGET_BACKEND_DEFAULTS=OFF -DIREE_HAL_DRIVER_DEFAULTS=OFF $flags \
    && cmake --build /src/iree-build \
    && { ccache --show-stats || true; }
# Keep what a worker needs, in the same layout as the build-dir flavor: tools/, lib/ and the
# two binding trees, symlinks into /src resolved, build intermediates dropped.
RUN test -x /src/iree-build/tools/iree-compile \
    && for d in tools lib compiler/bindings/python runtime/bindings/python; do \
         if [ -e "/src/iree-build/$d" ]; then \
           mkdir -p "/opt/iree/build/$(dirname "$d")" \
           && cp -rL "/src/iree-build/$d" "/opt/iree/build/$d"; \
         fi; \
       done \
    && find /opt/iree/build \( -name CMakeFiles -o -name '*.o' -o -name '*.a' \) -prune \
         -exec rm -rf {} + \
    && echo source > /opt/iree/FLAVOR

# No IREE in the venv: it comes from the tree, through PATH and PYTHONPATH.
FROM python-base AS iree-python

# runner:include fragments/worker.Dockerfile

# The worker layer pulled iree-base-runtime in as a dependency. Remove both wheels last, when
# nothing else will install them again, so the source build is the only IREE in the image.
FROM worker-venv AS final-venv
RUN pip uninstall -y iree-base-compiler iree-base-runtime

# runner:include fragments/image.Dockerfile

ENV PATH=/opt/iree/build/tools:$PATH \
    PYTHONPATH=/opt/iree/build/compiler/bindings/python:/opt/iree/build/runtime/bindings/python
ARG IREE_COMMIT
RUN python3 /opt/runner/verify_iree.py --flavor source --tree /opt/iree/build \
      --expect-commit "$IREE_COMMIT" --out /opt/runner/iree-provenance.json
