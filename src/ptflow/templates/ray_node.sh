#!/usr/bin/env bash
# One Ray node (head or worker) of a ptflow job, run by ray_launcher.sh as `srun --overlap ... ray_node.sh`.
# Usage: ray_node.sh TAG TMPDIR RETRIES ENDED_FILE -- RAY_START_ARGV...
# Every Ray process it starts carries PTFLOW_RAY_TAG=TAG in its environment; on exit (normal, error, TERM from
# scancel or the time limit) every process of this host with that tag is killed and the node-local temp dir removed,
# so nothing of the job survives it even where Slurm's process tracking loses re-parented daemons.
set -euo pipefail
here=${SLURMD_NODENAME:-$(hostname)}
tag=${1:?ray_node.sh needs TAG}
tmp=${2:?ray_node.sh needs TMPDIR}
retries=${3:?ray_node.sh needs RETRIES}
ended=${4:?ray_node.sh needs the ENDED file}
shift 4
[[ ${1:-} == -- ]] && shift
(($# > 0)) || { echo "ray_node.sh: no ray start command after --" >&2; exit 2; }

tagged_pids() {
  local f pid
  for f in /proc/[0-9]*/environ; do
    pid=${f#/proc/}
    pid=${pid%/environ}
    [[ $pid == "$$" || $pid == "$BASHPID" ]] && continue
    if { tr '\0' '\n' <"$f"; } 2>/dev/null | grep -qxF "PTFLOW_RAY_TAG=$tag"; then echo "$pid"; fi
  done
}

sweep() {
  local pids n
  mapfile -t pids < <(tagged_pids)
  ((${#pids[@]} == 0)) && return 0
  echo "ray_node: stopping ${#pids[@]} Ray process(es) tagged $tag on $here"
  kill -TERM "${pids[@]}" 2>/dev/null || true
  for ((n = 0; n < 5; n++)); do
    mapfile -t pids < <(tagged_pids)
    ((${#pids[@]} == 0)) && return 0
    sleep 1
  done
  kill -KILL "${pids[@]}" 2>/dev/null || true
}

finish() {
  local rc=$?
  trap - EXIT TERM INT HUP
  # Temp dir first: after scancel Slurm sends SIGKILL KillWait seconds after SIGTERM, maybe before the sweep ends.
  rm -rf -- "$tmp" 2>/dev/null || true
  sweep
  rm -rf -- "$tmp"
  exit "$rc"
}
trap finish EXIT
trap 'exit 143' TERM INT HUP
# Slurm's --signal warning goes to every process of a step: Ray's own processes inherit "ignore" and live on,
# the driver step decides what a warning means.
trap '' USR1

mkdir -p -- "$tmp"
attempt=0
while :; do
  attempt=$((attempt + 1))
  echo "ray_node: attempt $attempt/$retries on $here: $*"
  PTFLOW_RAY_TAG=$tag "$@" &
  ray_pid=$!
  # ENDED (written by the launcher on any exit) stops this node even if signals do not reach it.
  while kill -0 "$ray_pid" 2>/dev/null; do
    if [[ -e $ended ]]; then
      kill -TERM "$ray_pid" 2>/dev/null || true
      break
    fi
    sleep 2 &
    wait $! || true
  done
  rc=0
  wait "$ray_pid" || rc=$?
  [[ -e $ended ]] && exit 0
  echo "ray_node: ray start exited with $rc before the job ended (attempt $attempt/$retries)" >&2
  sweep
  if ((attempt >= retries)); then
    echo "ray_node: giving up on $here after $retries attempts" >&2
    exit $((rc == 0 ? 1 : rc))
  fi
  sleep 5
done
