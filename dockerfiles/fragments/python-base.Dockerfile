# ---- python-base (shared): the base image, a virtualenv, and the build-only network secrets.
#
# Secrets. docker-py drives the engine's classic builder (its build API has no BuildKit
# session), and this docker.io has no buildx, so `RUN --mount=type=secret` is unavailable.
# The classic builder cannot read a context file without COPY, and a COPY is a layer: a file
# "removed later" would stay in the image. So the host's CA bundle and pip index settings
# (runner-build/secrets/, written by runner.docker.buildenv) are copied only into the build
# stages that need the network; the final stage (fragments/image.Dockerfile) starts again
# FROM the base image and takes only /opt/venv and /opt/iree from them. The secrets therefore
# never reach a layer of the image that is tagged, pushed or run; they stay in the engine's
# build cache, as BuildKit's would. Build args are not used for them because build args are
# recorded in `docker history`. Proxies arrive as docker's predefined *_PROXY build args,
# which the engine keeps out of history.
ARG BASE_IMAGE=runner-base:bookworm
FROM ${BASE_IMAGE} AS python-base
ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_ROOT_USER_ACTION=ignore
# A venv, not the system python: Debian/Ubuntu pythons refuse `pip install` (PEP 668), and a
# ROCm dev image's system site-packages must not be where iree.* is imported from. Some
# base images lack the venv module; it is installed only then.
RUN python3 -m venv /opt/venv \
    || { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y \
         --no-install-recommends python3-venv && rm -rf /var/lib/apt/lists/* \
         && python3 -m venv /opt/venv; }
COPY runner-build/secrets/ /run/runner-build-secrets/
ENV PIP_CONFIG_FILE=/run/runner-build-secrets/pip.conf \
    PIP_CERT=/run/runner-build-secrets/ca-bundle.crt \
    SSL_CERT_FILE=/run/runner-build-secrets/ca-bundle.crt \
    REQUESTS_CA_BUNDLE=/run/runner-build-secrets/ca-bundle.crt \
    CURL_CA_BUNDLE=/run/runner-build-secrets/ca-bundle.crt \
    GIT_SSL_CAINFO=/run/runner-build-secrets/ca-bundle.crt
