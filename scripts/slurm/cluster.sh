#!/usr/bin/env bash
# A single-node SLURM cluster on this machine (controller and compute node are both this host), for the test tier
# and for trying `hydra/launcher=slurm` without a cluster. Needs root and free ports 6817/6818.
#
#   scripts/slurm/cluster.sh up      install (Debian packages, once), configure and start munge, slurmctld, slurmd
#   scripts/slurm/cluster.sh down    cancel the cluster's jobs and stop the daemons this script started
#   scripts/slurm/cluster.sh status  "up" (exit 0) or "down" (exit 1)
#   eval "$(scripts/slurm/cluster.sh env)"   point sbatch/squeue/sacct at this cluster
#
# Both `up` and `down` are idempotent: the daemons are found by their pid files under $UB_SLURM_DIR (default
# /tmp/unlearnbench-slurm), never by name. Accounting is off, so bin/sacct answers submitit's state queries from
# squeue. The configuration lives in $UB_SLURM_DIR/slurm.conf (SLURM_CONF), never in /etc/slurm.
set -euo pipefail

DIR=${UB_SLURM_DIR:-/tmp/unlearnbench-slurm}
HERE=$(cd "$(dirname "$0")" && pwd)
CONF=$DIR/slurm.conf
HOST=$(hostname -s)
export SLURM_CONF=$CONF

say() { echo "slurm cluster: $*" >&2; }
die() { say "$*"; exit 1; }

# A pid file's process, if it is alive (a zombie is not: a stopped daemon may linger as one).
alive() {
    local pid
    [[ -s $1 ]] || return 1
    pid=$(cat "$1")
    [[ -r /proc/$pid/stat ]] || return 1
    [[ $(awk '{print $3}' "/proc/$pid/stat") != Z ]]
}

wait_for() {  # wait_for SECONDS COMMAND...: until COMMAND succeeds
    local deadline=$((SECONDS + $1)); shift
    until "$@" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || return 1
        sleep 0.05
    done
}

install_packages() {
    command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null \
        && command -v munged >/dev/null && return
    command -v apt-get >/dev/null || die "slurmctld, slurmd, sbatch and munged are missing and there is no apt-get"
    say "installing slurmctld slurmd slurm-client munge (Debian packages)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        slurmctld slurmd slurm-client munge >/dev/null 2>&1 \
        || { apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
             --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null; } \
        || die "apt-get could not install slurmctld slurmd slurm-client munge"
}

start_munge() {
    munge -n >/dev/null 2>&1 && return  # a munged already runs (ours or the system's)
    install -d -o munge -g munge -m 755 /run/munge
    [[ -s /etc/munge/munge.key ]] || die "/etc/munge/munge.key is missing (reinstall the munge package)"
    runuser -u munge -- /usr/sbin/munged --pid-file="$DIR/munged.pid" 2>/dev/null \
        || runuser -u munge -- /usr/sbin/munged
    [[ -s $DIR/munged.pid ]] || pgrep -n -u munge munged >"$DIR/munged.pid"
    wait_for 10 munge -n || die "munged did not start"
}

write_conf() {
    local node memory
    node=$(slurmd -C | head -n 1 | sed -E 's/ RealMemory=[0-9]+//')
    memory=$(awk '/MemTotal/ {printf "%d", $2 / 1024 * 0.9}' /proc/meminfo)
    mkdir -p "$DIR/state" "$DIR/spool"
    cat >"$CONF" <<CONF
# written by scripts/slurm/cluster.sh: a one-node cluster without cgroups, systemd or accounting
ClusterName=unlearnbench
SlurmctldHost=$HOST
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1000
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MailProg=/bin/true
ReturnToService=2
KillWait=5
MinJobAge=3600
MpiDefault=none
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
$node RealMemory=$memory State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
}

port_taken() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

up() {
    [[ $(id -u) == 0 ]] || die "needs root (packages, /run/munge, the daemons)"
    mkdir -p "$DIR"
    if alive "$DIR/slurmctld.pid" && alive "$DIR/slurmd.pid"; then
        wait_for 10 idle && { say "already up ($DIR)"; return; }
    fi
    for port in 6817 6818; do
        port_taken "$port" && die "port $port is taken by another program (another SLURM?)"
    done
    install_packages
    start_munge
    write_conf
    slurmctld -c -f "$CONF"  # -c: empty state, job ids restart at 1
    slurmd -f "$CONF"
    wait_for 20 idle || die "the node did not become idle; see $DIR/slurmctld.log and $DIR/slurmd.log"
    say "up: partition debug on $HOST ($DIR)"
}

idle() { [[ $(sinfo -h -n "$HOST" -o %t 2>/dev/null) == idle ]]; }

stop() {  # stop PIDFILE: TERM the process, wait until it is gone
    alive "$1" || { rm -f "$1"; return; }
    local pid; pid=$(cat "$1")
    kill -TERM "$pid" 2>/dev/null || true
    wait_for 10 bash -c "! [[ -r /proc/$pid/stat ]] || [[ \$(awk '{print \$3}' /proc/$pid/stat) == Z ]]" \
        || kill -KILL "$pid" 2>/dev/null || true
    rm -f "$1"
}

down() {
    if alive "$DIR/slurmctld.pid"; then
        scancel --full --quiet --user=root 2>/dev/null || true
        scancel --quiet --state=PENDING 2>/dev/null || true
    fi
    stop "$DIR/slurmd.pid"
    stop "$DIR/slurmctld.pid"
    stop "$DIR/munged.pid"
    say "down"
}

case ${1:-} in
    up) up ;;
    down) down ;;
    status) if alive "$DIR/slurmctld.pid" && alive "$DIR/slurmd.pid"; then echo up; else echo down; exit 1; fi ;;
    env) echo "export SLURM_CONF=$CONF PATH=$HERE/bin:\$PATH" ;;
    *) die "usage: $0 up|down|status|env" ;;
esac
