#!/usr/bin/env bash
# Bring up a docker engine and the runner's base image on a machine that has neither.
#
# Idempotent: every step checks first, so CI and the test session fixture can call it every
# time and a second call returns in well under a second. Needs root for apt and dockerd.
#
#   1. docker.io + debootstrap from apt (only if missing; `apt-get update` first).
#   2. dockerd without a bridge or iptables rules (these machines allow neither), logging to
#      $RUNNER_CACHE_DIR/docker/dockerd.log; containers and builds use host networking.
#   3. runner-base:bookworm, a minbase Debian with python3/venv/pip/ca-certificates, imported
#      from a debootstrap tarball cached under $RUNNER_CACHE_DIR so a fresh engine (CI) only
#      re-imports it instead of re-running debootstrap.
#
# Environment: RUNNER_CACHE_DIR (default ~/.cache/iree-sdxl-runner), RUNNER_BASE_IMAGE
# (default runner-base:bookworm), DOCKER_SETUP_TIMEOUT (seconds to wait for dockerd, 60).
set -euo pipefail

CACHE_DIR="${RUNNER_CACHE_DIR:-$HOME/.cache/iree-sdxl-runner}"
BASE_IMAGE="${RUNNER_BASE_IMAGE:-runner-base:bookworm}"
SUITE="bookworm"
WAIT="${DOCKER_SETUP_TIMEOUT:-60}"
STATE_DIR="$CACHE_DIR/docker"
mkdir -p "$STATE_DIR"

log() { echo "docker_setup: $*" >&2; }

as_root() {
    if [ "$(id -u)" -ne 0 ]; then
        log "this step needs root: $*"
        exit 1
    fi
}

engine_answers() { timeout 10 docker info >/dev/null 2>&1; }

# 1. Packages, each only when its step will run. The docker CLI may exist without a daemon
# (e.g. a static client in /usr/local/bin), so check for dockerd itself.
apt_updated=0
apt_install() {
    as_root "apt-get install $*"
    log "installing $*"
    export DEBIAN_FRONTEND=noninteractive
    if [ "$apt_updated" -eq 0 ]; then
        apt-get update -qq
        apt_updated=1
    fi
    apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
if ! engine_answers && ! command -v dockerd >/dev/null 2>&1; then
    apt_install docker.io
fi

# 2. Engine. Only started when nothing answers, so an engine the machine already runs (or
# one DOCKER_HOST points at) is used as it is.
if ! engine_answers; then
    as_root "start dockerd"
    # A containerd/dockerd left over from a killed session holds the pid files and socket.
    for pidfile in /var/run/docker.pid /var/run/docker/containerd/containerd.pid; do
        if [ -f "$pidfile" ] && ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
            rm -f "$pidfile"
        fi
    done
    log "starting dockerd (log: $STATE_DIR/dockerd.log)"
    nohup dockerd --bridge=none --iptables=false --ip-masq=false \
        >>"$STATE_DIR/dockerd.log" 2>&1 </dev/null &
    echo $! >"$STATE_DIR/dockerd.pid"
    deadline=$((SECONDS + WAIT))
    until engine_answers; do
        if ! kill -0 "$(cat "$STATE_DIR/dockerd.pid")" 2>/dev/null; then
            log "dockerd exited; last lines of $STATE_DIR/dockerd.log:"
            tail -n 20 "$STATE_DIR/dockerd.log" >&2
            exit 1
        fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            log "dockerd did not answer within ${WAIT}s; see $STATE_DIR/dockerd.log"
            exit 1
        fi
        sleep 0.5
    done
fi

# 3. Base image. The tarball is the expensive part (a few minutes of apt downloads); the
# import is seconds, so a fresh engine with a warm cache is quick.
if ! docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
    tarball="$STATE_DIR/debootstrap-$SUITE-minbase.tar"
    if [ ! -s "$tarball" ]; then
        command -v debootstrap >/dev/null 2>&1 || apt_install debootstrap
        as_root "debootstrap"
        root="$(mktemp -d "$STATE_DIR/rootfs.XXXXXX")"
        trap 'rm -rf "$root"' EXIT
        log "debootstrap $SUITE into $root (minutes)"
        debootstrap --variant=minbase \
            --include=python3,python3-venv,python3-pip,ca-certificates \
            "$SUITE" "$root" >"$STATE_DIR/debootstrap.log" 2>&1 || {
            log "debootstrap failed; last lines of $STATE_DIR/debootstrap.log:"
            tail -n 20 "$STATE_DIR/debootstrap.log" >&2
            exit 1
        }
        # apt caches are dead weight in every image built from this one.
        rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
        tar -C "$root" -cf "$tarball.tmp" .
        mv "$tarball.tmp" "$tarball"
        rm -rf "$root"
        trap - EXIT
    fi
    log "importing $tarball as $BASE_IMAGE"
    docker import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["/bin/bash"]' \
        "$tarball" "$BASE_IMAGE" >/dev/null
fi

log "engine ready: $(docker version --format '{{.Server.Version}}' 2>/dev/null)," \
    "base image $BASE_IMAGE"
