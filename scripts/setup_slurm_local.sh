#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for tests/test_slurm_launcher.py (run as root on a
# Debian/Ubuntu test machine; safe to run again: what already runs is left running).
#   slurm-wlm + munge  - slurmctld, slurmd, srun/salloc/sbatch, and munge for their credentials
# The node is this machine (NodeName = `hostname -s`, reached on 127.0.0.1, CPUs from nproc);
# state, spool, pid and log files live under SEEDQ_SLURM_STATE (default /var/lib/seedq-slurm).
# No cgroups: processes are tracked through /proc and tasks are not pinned. An existing
# /etc/slurm/slurm.conf not written by this script is refused rather than overwritten.
# Tests skip with the reason when Slurm is missing or not answering; .ci/run never runs this.
set -euo pipefail
if [ "$(id -u)" != 0 ]; then
  echo "run as root (apt-get, daemons)" >&2
  exit 1
fi
STATE=${SEEDQ_SLURM_STATE:-/var/lib/seedq-slurm}
CONF=/etc/slurm/slurm.conf
MARK="# written by seedq scripts/setup_slurm_local.sh"
NODE=$(hostname -s)

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null \
    || ! command -v munged >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends slurm-wlm munge
fi

mkdir -p "$STATE/ctld" "$STATE/spool" /etc/slurm
if [ -e "$CONF" ] && ! grep -qF "$MARK" "$CONF"; then
  echo "$CONF exists and was not written by this script; move it away first" >&2
  exit 1
fi
cat > "$CONF.new" <<EOF
$MARK
ClusterName=seedq-local
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
# A requeued job waits this long before it starts again (120 s by default); short for tests.
AuthInfo=cred_expire=10
CredType=cred/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
# Steps get SIGTERM, then SIGKILL this many seconds later (srun --overlap steps included).
KillWait=5
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
if ! cmp -s "$CONF.new" "$CONF" 2>/dev/null; then
  mv "$CONF.new" "$CONF"
  CHANGED=1
else
  rm "$CONF.new"
  CHANGED=0
fi

running() {  # running PIDFILE: the pid file names a live process
  [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}

# munge: its key comes with the Debian package; the daemon runs as the munge user.
[ -s /etc/munge/munge.key ] || runuser -u munge -- mungekey --create
mkdir -p /run/munge && chown munge:munge /run/munge && chmod 755 /run/munge
running /run/munge/munged.pid || runuser -u munge -- /usr/sbin/munged
munge -n | unmunge >/dev/null

if [ "$CHANGED" = 1 ]; then
  # A changed config needs fresh daemons; a first start finds none.
  for pidfile in "$STATE/slurmd.pid" "$STATE/slurmctld.pid"; do
    if running "$pidfile"; then
      kill "$(cat "$pidfile")"
      while running "$pidfile"; do sleep 0.2; done
    fi
  done
fi
running "$STATE/slurmctld.pid" || slurmctld
running "$STATE/slurmd.pid" || slurmd

for _ in $(seq 1 120); do
  state=$(sinfo -h -n "$NODE" -o %T 2>/dev/null || true)
  case "$state" in
    idle|mixed|allocated) break ;;
    down*|drain*) scontrol update nodename="$NODE" state=resume 2>/dev/null || true ;;
  esac
  sleep 0.5
done
sinfo -h -n "$NODE" -o "%N %T %c" | grep -Eq " (idle|mixed|allocated) " || {
  echo "node $NODE did not come up; see $STATE/slurmctld.log and $STATE/slurmd.log" >&2
  sinfo >&2 || true
  exit 1
}
echo "ready: $(sinfo -h -o '%P %N %T cpus=%c') ($(srun --version))"
