#!/usr/bin/env bash
# ptflow's CUDA paths on a machine with one GPU and no network, in one call of under 10 minutes
# (bench/gpu_check.py: TRL SFT of a tiny random-init model, the hf provider's evaluation, an agent cell's staging).
# The packages that machine's image lacks travel as wheels in .whl/ (git-ignored; 35 MB, under the 64 MiB a device
# call may carry: name .whl in its carry):
#   here (the repo's venv, the network): bench/gpu_check.sh --fetch-wheels
#   there:                               bash bench/gpu_check.sh [--device cpu] [gpu_check.py options]
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=.whl
if [[ ${1:-} == --fetch-wheels ]]; then
  python=${PYTHON:-.venv/bin/python}
  mkdir -p "$WHEELS"
  "$python" bench/gpu_wheels.py >"$WHEELS/requirements.txt"
  "$python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$WHEELS" -r "$WHEELS/requirements.txt"
  "$python" bench/gpu_wheels.py --trim "$WHEELS"
  du -sh "$WHEELS"
  exit 0
fi
if ls "$WHEELS"/*.whl >/dev/null 2>&1; then
  site=$(mktemp -d /tmp/ptflow-gpu-site-XXXX)
  trap 'rm -rf "$site"' EXIT
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "$WHEELS"/*.whl
  export PYTHONPATH="$site:$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}"
else
  export PYTHONPATH="$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 INSPECT_LOG_DIR=/tmp/ptflow-gpu-check-logs
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
exec timeout 540 python3 bench/gpu_check.py "$@"
