#!/usr/bin/env bash
# Bring up a one-node Slurm cluster on loopback, for `runner run --executor slurm` tests/CI.
#
# Idempotent: every step checks first, so CI and the test session fixture can call it every
# time; on a machine where the cluster already answers with this config it only checks.
# Needs root (apt, munge key, daemons). Slurm needs munge and both daemons on one host.
#
#   1. slurm-wlm + munge from apt (only if missing; `apt-get update` first).
#   2. /etc/munge/munge.key: 1024 random bytes, owner munge, mode 400; munged runs as munge.
#   3. /etc/slurm/slurm.conf: this host as controller and only node, on 127.0.0.1.
#   4. slurmctld + slurmd, then wait (bounded) until `sinfo` shows the node idle.
#
# Several "nodes" on one machine: the node declares CPUs=$(nproc) (2 here) and cores, not
# memory, are the consumable (SelectTypeParameters=CR_Core), so array tasks that each ask
# for `--cpus-per-task=1` run side by side, one per core, like one task per node; a task
# that finds no free core waits in the queue, as on a full cluster. No OverSubscribe: two
# simulated nodes never share a core, so their timings mean something.
#
# Environment: SLURM_SETUP_TIMEOUT (seconds to wait for the node to be idle, default 60),
# SLURM_SETUP_PARTITION (default partition name, default "debug").
set -euo pipefail

WAIT="${SLURM_SETUP_TIMEOUT:-60}"
PARTITION="${SLURM_SETUP_PARTITION:-debug}"
CONF=/etc/slurm/slurm.conf
KEY=/etc/munge/munge.key
STATE=/var/lib/slurm
LOGS=/var/log/slurm
HOST="$(hostname -s)"

log() { echo "slurm_setup: $*" >&2; }
die() { log "$*"; exit 1; }
[ "$(id -u)" -eq 0 ] || die "needs root (apt, munge key, slurm daemons)"

pid_alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

# 1. Packages.
if ! command -v slurmctld >/dev/null 2>&1 || ! command -v slurmd >/dev/null 2>&1 \
        || ! command -v munged >/dev/null 2>&1 || ! command -v sbatch >/dev/null 2>&1; then
    log "installing slurm-wlm munge"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq slurm-wlm munge >/dev/null
fi

# 2. Munge: a key every daemon and client on the cluster shares (here: just this host).
MUNGE_PID=/run/munge/munged.pid
mkdir -p /run/munge /var/log/munge /var/lib/munge
chown munge:munge /run/munge /var/log/munge /var/lib/munge /etc/munge
chmod 0755 /run/munge
key_ok() {
    [ -f "$KEY" ] && [ "$(stat -c '%s %U %a' "$KEY")" = "1024 munge 400" ]
}
if ! key_ok; then
    log "writing a new 1024-byte munge key"
    umask 077
    dd if=/dev/urandom of="$KEY.tmp" bs=1024 count=1 status=none
    chown munge:munge "$KEY.tmp"
    chmod 0400 "$KEY.tmp"
    mv "$KEY.tmp" "$KEY"
    if pid_alive "$MUNGE_PID"; then  # it holds the old key: restart the one it recorded
        kill "$(cat "$MUNGE_PID")"
        for _ in $(seq 50); do pid_alive "$MUNGE_PID" || break; sleep 0.1; done
    fi
fi
if ! pid_alive "$MUNGE_PID"; then
    log "starting munged as munge"
    rm -f /run/munge/munge.socket.2.lock
    runuser -u munge -- /usr/sbin/munged
fi
for _ in $(seq 50); do munge -n </dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
munge -n </dev/null | unmunge >/dev/null 2>&1 || die "munge does not round-trip a credential"

# 3. Config. RealMemory must not exceed what the machine has, or slurmd drains the node.
mem_mb=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 ))
real_mem=$(( mem_mb < 20000 ? mem_mb : 20000 ))
# The cores this process may use: nproc also obeys OMP_NUM_THREADS, which a pytest-xdist
# worker sets to its share of the cores (tests/conftest.py); the cluster gets them all.
cpus="$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)"
mkdir -p "$STATE/slurmctld" "$STATE/slurmd" "$LOGS" /etc/slurm
conf="$(cat <<EOF
# Written by iree-sdxl-runner scripts/slurm_setup.sh: a one-node cluster on loopback.
ClusterName=runner
SlurmctldHost=${HOST}(127.0.0.1)
AuthType=auth/munge
CryptoType=crypto/munge
SlurmUser=root
SlurmdUser=root
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
ReturnToService=2
MpiDefault=none
KillWait=5
StateSaveLocation=$STATE/slurmctld
SlurmdSpoolDir=$STATE/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd.log
NodeName=${HOST} NodeAddr=127.0.0.1 CPUs=${cpus} RealMemory=${real_mem} State=UNKNOWN
PartitionName=${PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
)"
changed=0
if [ ! -f "$CONF" ] || [ "$(cat "$CONF")" != "$conf" ]; then
    log "writing $CONF"
    printf '%s\n' "$conf" >"$CONF.tmp"
    mv "$CONF.tmp" "$CONF"
    changed=1
fi

# 4. Daemons. A config change reaches running daemons by restarting the ones we recorded
# (node CPUs/memory are only read at start).
restart() {  # pidfile
    if pid_alive "$1"; then
        kill "$(cat "$1")"
        for _ in $(seq 100); do pid_alive "$1" || break; sleep 0.1; done
    fi
}
if [ "$changed" -eq 1 ]; then
    restart /run/slurmd.pid
    restart /run/slurmctld.pid
fi
if ! pid_alive /run/slurmctld.pid; then
    log "starting slurmctld (log: $LOGS/slurmctld.log)"
    slurmctld
fi
if ! pid_alive /run/slurmd.pid; then
    log "starting slurmd (log: $LOGS/slurmd.log)"
    slurmd
fi

deadline=$((SECONDS + WAIT))
state=""
while :; do
    state="$(sinfo -h -n "$HOST" -o '%t' 2>/dev/null | head -n 1 || true)"
    case "$state" in
        idle|mix|alloc) break ;;
        down*|drain*|drng*|fail*)
            # A node slurmctld marked down earlier (e.g. by an old config) comes back here.
            scontrol update NodeName="$HOST" State=RESUME >/dev/null 2>&1 || true ;;
    esac
    if [ "$SECONDS" -ge "$deadline" ]; then
        log "node $HOST not idle within ${WAIT}s (state: ${state:-none}); last log lines:"
        tail -n 10 "$LOGS/slurmctld.log" "$LOGS/slurmd.log" >&2 || true
        exit 1
    fi
    sleep 0.5
done
log "cluster ready: node $HOST ($cpus CPUs) $state in partition $PARTITION"
