#!/usr/bin/env bash
# A one-node Slurm on this machine, for trying fabflow under srun and for the tests that do:
# munged, slurmctld and slurmd on localhost with a minimal configuration in a private folder.
#   scripts/slurm-local.sh start    start (or reuse) it; prints `export SLURM_CONF=...`
#   scripts/slurm-local.sh stop     stop it and remove its folder
#   scripts/slurm-local.sh status   exit 0 when srun can place a job on it
# Needs root (slurmd runs jobs as their users) and Debian's slurm-wlm and munge
# (scripts/setup.sh installs them). Then, for example:
#   eval "$(scripts/slurm-local.sh start)"
#   srun --mpi=pmix -n 2 build/fabflow bench raw -p shm
set -euo pipefail

dir=${FABFLOW_SLURM_DIR:-/tmp/fabflow-slurm}
conf=$dir/slurm.conf
node=$(hostname -s)

die() { echo "slurm-local: $*" >&2; exit 1; }

stop() {
  local pids=()
  for d in slurmd slurmctld; do
    [ -f "$dir/$d.pid" ] && pids+=("$(cat "$dir/$d.pid")")
  done
  if ((${#pids[@]})); then
    kill "${pids[@]}" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "${pids[@]}" 2>/dev/null || break; sleep 0.1; done
    kill -9 "${pids[@]}" 2>/dev/null || true
  fi
  rm -rf "$dir"
}

ready() {
  SLURM_CONF=$conf timeout 10 srun -n 1 -t 1 true >/dev/null 2>&1
}

start() {
  [ "$(id -u)" -eq 0 ] || die "needs root (slurmd starts jobs as their users)"
  for b in munged slurmctld slurmd srun; do
    command -v "$b" >/dev/null || die "$b not found (install slurm-wlm and munge: scripts/setup.sh --deps)"
  done
  if [ -f "$conf" ] && ready; then echo "export SLURM_CONF=$conf"; return; fi
  stop
  mkdir -p "$dir/state" "$dir/spool"

  # munge authenticates slurmctld, slurmd and srun to each other.
  [ -f /etc/munge/munge.key ] || die "no /etc/munge/munge.key (reinstall munge)"
  if ! munge -n >/dev/null 2>&1; then
    install -d -o munge -g munge -m 0755 /run/munge
    # Two starts at once (two test Slurms) may both get here: the second munged refuses to run
    # beside the first, which is fine as long as one answers.
    runuser -u munge -- munged 2>/dev/null || true
    for _ in $(seq 50); do munge -n >/dev/null 2>&1 && break; sleep 0.1; done
    munge -n >/dev/null 2>&1 || die "munged does not answer"
  fi

  local cpus mem
  cpus=$(nproc)
  mem=$(($(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2))
  cat > "$conf" <<CONF
ClusterName=fabflow-local
SlurmctldHost=$node
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
SlurmctldPort=${FABFLOW_SLURM_PORT:-6817}
SlurmdPort=$(( ${FABFLOW_SLURM_PORT:-6817} + 1 ))
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
NodeName=$node CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=local Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
CONF
  SLURM_CONF=$conf slurmctld || die "slurmctld did not start (see $dir/slurmctld.log)"
  SLURM_CONF=$conf slurmd || die "slurmd did not start (see $dir/slurmd.log)"
  for _ in $(seq 100); do ready && break; sleep 0.2; done
  ready || die "srun cannot place a job (see $dir/slurmctld.log and $dir/slurmd.log)"
  echo "export SLURM_CONF=$conf"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) [ -f "$conf" ] && ready ;;
  *) echo "usage: scripts/slurm-local.sh start|stop|status" >&2; exit 2 ;;
esac
