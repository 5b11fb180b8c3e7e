# ---- worker-venv and project-wheel (shared): this project, as `pip install .` with no extras.
#
# It is the same for every flavor; only the stage it starts from (iree-python) differs. Split
# in two so that editing the runner's code never re-resolves dependencies or rewrites the
# 600 MB venv layer:
#   worker-venv    installs the project's dependencies, from a stub of the project that has
#                  only its pyproject.toml (project-deps/), so this layer changes only when
#                  the dependencies do. It pulls iree-base-runtime in (the project depends on
#                  it); each flavor's final-venv stage then decides what to do about that.
#   project-wheel  builds the project's own wheel (with build isolation, so the base
#                  image's setuptools does not matter); the final stage installs it offline.
FROM iree-python AS worker-venv
COPY project-deps/ /tmp/runner-deps/
RUN pip install /tmp/runner-deps && pip uninstall -y iree-sdxl-runner && rm -rf /tmp/runner-deps

FROM python-base AS project-wheel
COPY project/ /tmp/runner-project/
RUN pip wheel --no-deps --wheel-dir /wheels /tmp/runner-project
