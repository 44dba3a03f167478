#!/usr/bin/env bash
# Stop what up.sh / start-daemons.sh started: exactly the PIDs recorded in
# STATE_DIR/pids/ (optionally only the named daemons), after checking each PID
# still runs a command that mentions STATE_DIR (guards against PID reuse).
# Then remove STATE_DIR unless daemons were named or --keep is given.
#   tests/slurm/down.sh STATE_DIR [--keep] [slurmctld|slurmd|munged ...]
set -uo pipefail

state=$(cd "${1:?usage: down.sh STATE_DIR [--keep] [daemon ...]}" 2>/dev/null && pwd) || exit 0
shift
keep=0
if [ "${1:-}" = "--keep" ]; then keep=1; shift; fi
daemons=("$@")
partial=0
if [ ${#daemons[@]} -eq 0 ]; then
  daemons=(slurmd slurmctld munged)  # slurmd first: it may still be reporting to the controller
else
  partial=1
fi

ours() {  # PID is alive and its command line names our state dir
  local pid=$1
  [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$state"
}

# Cancel our cluster's jobs first so their steps end cleanly (SLURM_CONF = this cluster only).
if [ "$partial" -eq 0 ] && [ -f "$state/pids/slurmctld" ]; then
  export SLURM_CONF=$state/etc/slurm.conf
  jobs=$(timeout 5 squeue -h -o %i 2>/dev/null || true)
  if [ -n "$jobs" ]; then
    # shellcheck disable=SC2086
    timeout 5 scancel $jobs 2>/dev/null || true
    for _ in $(seq 30); do [ -z "$(timeout 5 squeue -h -t R,CG -o %i 2>/dev/null)" ] && break; sleep 0.2; done
  fi
fi

for daemon in "${daemons[@]}"; do
  file="$state/pids/$daemon"
  [ -f "$file" ] || continue
  pid=$(cat "$file")
  if ours "$pid"; then
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 50); do ours "$pid" || break; sleep 0.1; done
    if ours "$pid"; then kill -KILL "$pid" 2>/dev/null; fi
  fi
  rm -f "$file"
done

# Job steps whose slurmstepd outlived slurmd: only ours, recognised by the
# SLURM_CONF they inherited from our slurmd.
if [ "$partial" -eq 0 ]; then
  for proc in /proc/[0-9]*; do
    pid=${proc#/proc/}
    if [ "$(cat "$proc/comm" 2>/dev/null)" = "slurmstepd" ] \
      && tr '\0' '\n' <"$proc/environ" 2>/dev/null | grep -qxF "SLURM_CONF=$state/etc/slurm.conf"; then
      kill -KILL "$pid" 2>/dev/null
    fi
  done
fi

if [ "$partial" -eq 0 ] && [ "$keep" -eq 0 ]; then
  rm -rf -- "$state"
fi
exit 0
