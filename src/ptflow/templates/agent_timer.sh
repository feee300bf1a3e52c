#!/usr/bin/env bash
# Time left before this agent cell's budget runs out (PostTrainBench's timer.sh); the deadline file is epoch seconds.
set -euo pipefail
deadline_file="$(dirname "$0")/deadline"
: "${deadline_file:?}"
deadline=$(cat "$deadline_file")
left=$((deadline - $(date +%s)))
if ((left <= 0)); then
  echo "time is up: the budget ended $((-left)) s ago; only final_model/ counts"
  exit 0
fi
printf 'remaining: %dh %02dm %02ds\n' $((left / 3600)) $((left % 3600 / 60)) $((left % 60))
