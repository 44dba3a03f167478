#!/usr/bin/env bash
# Start slurmctld and slurmd for a cluster configured by up.sh (also used to
# restart the controller: `start-daemons.sh STATE_DIR slurmctld`). Waits until
# the node is idle. PIDs go to STATE_DIR/pids/.
set -euo pipefail

state=$(cd "${1:?usage: start-daemons.sh STATE_DIR [slurmctld|slurmd ...]}" && pwd)
shift
daemons=("$@")
[ ${#daemons[@]} -gt 0 ] || daemons=(slurmctld slurmd)
export SLURM_CONF=$state/etc/slurm.conf

for daemon in "${daemons[@]}"; do
  case $daemon in
    # -D: stay in the foreground so $! is the daemon itself; setsid: survive this shell.
    # slurmctld recovers its saved state (queued/running jobs) on restart by default.
    slurmctld) setsid /usr/sbin/slurmctld -D -f "$SLURM_CONF" </dev/null >>"$state/log/slurmctld.out" 2>&1 & ;;
    # The executor plugin strips SLURM_* (so SLURM_CONF) before the job's own `srun`,
    # which then reads the compiled-in /etc/slurm/slurm.conf. slurmd (and so every
    # job) therefore runs in a private mount namespace where /etc/slurm is our etc/;
    # the host's /etc/slurm is never touched. unshare and sh exec, so $! is slurmd.
    slurmd)
      [ -d /etc/slurm ] || mkdir -p /etc/slurm
      setsid unshare --mount --propagation private /bin/sh -c \
        'mount --bind "$1/etc" /etc/slurm && exec /usr/sbin/slurmd -D -N localhost -f "$1/etc/slurm.conf"' \
        sh "$state" </dev/null >>"$state/log/slurmd.out" 2>&1 &
      ;;
    *) echo "unknown daemon $daemon" >&2; exit 2 ;;
  esac
  echo $! >"$state/pids/$daemon"
done

# Ready = the controller answers and the node is schedulable.
for _ in $(seq 150); do
  state_now=$(sinfo -h -N -o '%t' 2>/dev/null | head -1 || true)
  case $state_now in
    idle|mix|alloc) exit 0 ;;
  esac
  sleep 0.2
done
echo "local-slurm: node not ready (state '${state_now:-no answer}')" >&2
sinfo -N -l >&2 || true
tail -20 "$state/log/slurmctld.log" "$state/log/slurmd.log" >&2 || true
exit 1
