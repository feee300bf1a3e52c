"""FIXTURE: PostTrainBench's main-line protocol (aisa-group/PostTrainBench, files of 2026-08..10 read from the search
index; the local mirror stops at d27a95e), as a third commit over the fixture checkout
(``make_fixture_checkout`` then ``commit_judge_v11``, tests/support/ptb_checkout.py).

Every file is a small program (or text) of OURS, not PostTrainBench's code or prose. What is PostTrainBench's is the
layout, the interfaces and the facts below, each read at the index commit named in ``SOURCES``:

- ``src/eval/run_final_eval.sh``: the query modes ``--check <task>`` (prints the final-eval script),
  ``--default-seeds <task>`` (line 1: the seeds, line 2: 1 when the seed only drives sampling, else 0) and
  ``--single-seed <task> <model_dir> <output_dir> <seed>``, their argument counts (else the usage text on stderr,
  exit 1), the ``ERROR: ...`` refusals (exit 1), the seeds 72332 87681 38992 92201 13818 (only the first for the
  paid-grader tasks arenahardwriting/healthbench, and for a greedy model per ``src/utils/default_temperature.py``
  unless seeds are given; gpqamain's seed also shuffles choices, so it keeps all), the max-tokens cascade (attempts
  4/3/2 per stage; stage 0 the script's default, then 12000/8000, 12288/8192 or 3000/2000) and the refusal of a task
  without one (bfcl on main). The evaluation itself runs the real command lines (apptainer, the HF overlay); a test
  puts stand-ins for apptainer, nvidia-smi, fuse-overlayfs on PATH; test hook ``PTB_FIXTURE_SLEEP`` (seconds, default
  the real 5) shortens the waits.
- ``src/eval/tasks/<eval>/evaluate_final_eval.py``: the fixture's tiny CPU evaluation (``evaluate_py``) plus main's
  ``--seed`` (STAND-IN: its generation is greedy, the seed only goes into the call record); humaneval's scores each
  sample through the answer sandbox's socket and refuses without ANSWER_SANDBOX_SOCKET (``_HUMANEVAL_SCORER``).
- ``src/eval/tasks/humaneval/answer_sandbox.py``, ``with_answer_sandbox.sh`` (apptainer: a second container of the
  eval sif, the socket handed over by APPTAINER_BIND/APPTAINERENV_ANSWER_SANDBOX_SOCKET) and
  ``with_answer_sandbox_local.sh`` (namespaces, chroot, nobody when root): main's roles, protocol, steps, order and
  command lines (``SANDBOX_FILES``; ``commit_main_evaluation(answer_sandbox=...)`` leaves some out).
- ``src/utils/aggregate_seed_metrics.py``: the mean of each numeric metric over the seeds that succeeded,
  ``num_seeds``, ``num_seeds_succeeded``, ``per_seed`` ({seed: {max_tokens_stage, metrics}}); ``accuracy`` required.
- ``src/judges/``: ``judge_lib.sh``'s four judges in order (data_contamination, api_usage, ptb_lookup, general), the
  codex command line, model gpt-5.6-terra, effort xhigh, the pinned @openai/codex 0.144.5 npm-installed into the
  sandbox home, ``gpt_5_5.sif``; ``judge_tools/`` moved here from ``src/disallowed_usage_judge/`` (removed).
- ``agents/<agent>/api_keys.json`` and ``info.json``'s ``required_api_keys``: the sandbox gets only their union
  (``sandbox_api_keys``, run_task.sh's rule).
- ``scripts/collect.py`` (scripts/utils.py's rules folded in): the run dir layout ``<method>/<bench>_<org>_<model>_<runid>``, the
  verdict precedence and the CSVs they write (see COLLECT_PY).
- ``scripts/aggregate.py`` (scripts/utils.py's constants folded in): its command line, steps and order over collect.py's
  final_<method>.csv, the tables it scores and the CSVs it writes (see AGGREGATE_PY); its HARDCODED_AGENT_MAP is a
  STAND-IN (one agent of the real map; test hook ``PTB_FIXTURE_AGENT_MAP`` adds agents).
"""

# ruff: noqa: E501 (command lines are one line each, as the real scripts have them)
from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.support.ptb_checkout import BENCHMARKS, _commit, evaluate_py, questions

PTB_MAIN = "main (index, 2026-08..10)"
# The index commit each fact was read at (find_files/read_file on aisa-group/PostTrainBench).
SOURCES = {
    "src/eval/run_final_eval.sh": "13a49a02422fdbdec8b99aea83ec219ea6f70ebb",  # has --single-seed/--default-seeds
    "src/utils/aggregate_seed_metrics.py": "8e0fa4c840a0fadce8a66417ea51df1514dbc6f3",
    "src/utils/default_temperature.py": "6f4fbbfdbf4c1a23ca3a8265d93c9bd0929dc110",
    "src/judges/judge_lib.sh": "241d5564011d8bf0a7c8e37ed42463f87c5f696a",  # 4 judges, gpt-5.6-terra, 0.144.5
    "src/judges/api_usage_judge/judge.conf": "da4b2b223f7bcd87abfcf031fefaa67727b819a4",
    "src/judges/ptb_lookup_judge/judge.conf": "da4b2b223f7bcd87abfcf031fefaa67727b819a4",
    "src/judges/data_contamination_judge/judge.conf": "be6b830b2e89c3174d7b2be4ddcf5cb700d4e2ee",
    "src/run_task.sh": "06b716ebcea458abd6f9b389cb84890d16255d0c",  # the key allowlist
    "agents/opencode/api_keys.json": "cb708f7fd68e69c5400f3c83253422b291f3ca43",
    "agents/mcode/api_keys.json": "f292f45dd40c82ae0d8342ede8ffb6227c6e7f2b",
    "src/eval/tasks/humaneval/with_answer_sandbox.sh": "b5d2362c7546c9aee9615d6c45100814bfb7610b",
    "src/eval/tasks/humaneval/answer_sandbox.py": "b5d2362c7546c9aee9615d6c45100814bfb7610b",
    "src/eval/tasks/humaneval/with_answer_sandbox_local.sh": "c447934fbd7b14442dde6c8d7a7391b28582a9be",
    "src/eval/tasks/humaneval/evaluate_final_eval.py": "8749d7e63e522d057f16ee93c0a13808264e812d",
    "scripts/collect.py": "1fc55616942b82316d2af170f6e50f79e48e33fd",
    "scripts/aggregate.py": "1691dfb6c8a5d1a02e6af1b69f2ef6fd5a74c4c7",
    "scripts/utils.py": "index file id 69054510072 (judge panel, majority of 3, .env, _aggregated)",
}
FINAL_EVAL_SEEDS = (72332, 87681, 38992, 92201, 13818)
STAGE_MAX_RETRIES = (4, 3, 2)
CASCADES = {  # task -> the max-tokens argument of stages 1 and 2 (stage 0: the script's default)
    "aime2025": ("--max-tokens 12000", "--max-tokens 8000"),
    "gpqamain": ("--max-tokens 12000", "--max-tokens 8000"),
    "arenahardwriting": ("--max-new-tokens 12288", "--max-new-tokens 8192"),
    "healthbench": ("--max-new-tokens 12288", "--max-new-tokens 8192"),
    "gsm8k": ("--max-tokens 3000", "--max-tokens 2000"),
    "humaneval": ("--max-tokens 3000", "--max-tokens 2000"),
}
PAID_GRADER = ("arenahardwriting", "healthbench")  # first seed only; OPENAI_API_KEY, else OPENROUTER_API_KEY
JUDGES = ("data_contamination_judge", "api_usage_judge", "ptb_lookup_judge", "general_judge")
JUDGE_MODEL, JUDGE_EFFORT, JUDGE_CODEX_VERSION, JUDGE_CONTAINER = "gpt-5.6-terra", "xhigh", "0.144.5", "gpt_5_5.sif"
# judge -> (JUDGE_OUTPUT_ID, effect on scoring), from judge.conf and scripts/utils.py
JUDGE_EFFECTS = {
    "data_contamination_judge": (
        "gpt5_4",
        "C/M flags: baseline fallback (manual > majority of 3 slots > _rerun > inline)",
    ),
    "api_usage_judge": ("api", "A flag: baseline fallback; required on every scored run"),
    "ptb_lookup_judge": ("ptb_lookup", "archival: collect.py raises when true; required from run id 17400000"),
    "general_judge": ("general", "ignored by scoring (find_flagged_runs.py); judge.conf/prompt NOT in the index"),
}
# api_keys.json: opencode's and mcode's are in the index; the fixture agents' are STAND-INs (not in the index).
AGENT_API_KEYS = {
    "opencode": ["OPENCODE_API_KEY", "ZAI_API_KEY"],
    "mcode": ["MINIMAX_API_KEY"],
    "claude": ["ANTHROPIC_API_KEY"],  # STAND-IN
    "codex": ["CODEX_API_KEY"],  # STAND-IN
    "gemini": ["GEMINI_API_KEY"],  # STAND-IN
}
REQUIRED_API_KEYS = {t: ["OPENAI_API_KEY"] for t in PAID_GRADER}  # run_task.sh's comment: they list it

RUN_FINAL_EVAL_SH = r"""#!/bin/bash
# FIXTURE run_final_eval.sh (ptflow tests): PostTrainBench main's interface, steps, outputs and exit codes; our text.
#   run_final_eval.sh <task> <model_dir> <output_dir> <metrics_json> [<seed>...]
#   run_final_eval.sh --single-seed <task> <model_dir> <output_dir> <seed>
#   run_final_eval.sh --check <task>
#   run_final_eval.sh --default-seeds <task>
set -euo pipefail

FINAL_EVAL_SEEDS=(@SEEDS@)
STAGE_MAX_RETRIES=(@RETRIES@)
TMP_HF_CACHE="/tmp/hf_cache_90afd0"

die() { echo "ERROR: $*" >&2; exit 1; }
usage() {
    echo "usage: $0 <task> <model_dir> <output_dir> <metrics_json> [<seed>...]" >&2
    echo "       $0 --single-seed <task> <model_dir> <output_dir> <seed>" >&2
    echo "       $0 --check <task>" >&2
    echo "       $0 --default-seeds <task>" >&2
    exit 1
}

task_setup() {  # EVAL_CONTAINER FINAL_EVAL_SCRIPT GRADER_API_KEY_NAME STAGE_MAX_TOKENS_ARGS DEFAULT_SEEDS SEED_ONLY_SAMPLES
    local t="$1"
    [ -f "src/eval/run_final_eval.sh" ] || die "run $0 from the repo root"
    [ -d "src/eval/tasks/${t}" ] || die "unknown task '${t}': src/eval/tasks/${t} not found"
    [ -n "${POST_TRAIN_BENCH_CONTAINERS_DIR:-}" ] || die "POST_TRAIN_BENCH_CONTAINERS_DIR is not set"
    [ -n "${HF_HOME:-}" ] || die "HF_HOME is not set"
    EVAL_CONTAINER="${POST_TRAIN_BENCH_CONTAINERS_DIR}/vllm_debug.sif"
    [ -f "${EVAL_CONTAINER}" ] || die "container ${EVAL_CONTAINER} not found"
    FINAL_EVAL_SCRIPT="evaluate_final_eval.py"; GRADER_API_KEY_NAME=""
    if [ "$t" = arenahardwriting ] || [ "$t" = healthbench ]; then
        if [ -z "${OPENAI_API_KEY:-}" ] && [ -n "${OPENROUTER_API_KEY:-}" ]; then
            FINAL_EVAL_SCRIPT="evaluate_openrouter_final_eval.py"; GRADER_API_KEY_NAME="OPENROUTER_API_KEY"
        else
            [ -n "${OPENAI_API_KEY:-}" ] || die "${t} is graded through the API, but neither OPENAI_API_KEY nor OPENROUTER_API_KEY is set"
            GRADER_API_KEY_NAME="OPENAI_API_KEY"
        fi
    fi
    [ -f "src/eval/tasks/${t}/${FINAL_EVAL_SCRIPT}" ] \
        || die "src/eval/tasks/${t}/${FINAL_EVAL_SCRIPT} not found — required for the seeded final evaluation"
    case "$t" in
@CASCADES@
        *) die "no max-tokens retry cascade for task '${t}': add one to STAGE_MAX_TOKENS_ARGS in $0" ;;
    esac
    case "$t" in
        arenahardwriting|healthbench) DEFAULT_SEEDS=("${FINAL_EVAL_SEEDS[0]}") ;;  # paid grader: one seed
        *) DEFAULT_SEEDS=("${FINAL_EVAL_SEEDS[@]}") ;;
    esac
    SEED_ONLY_SAMPLES=1
    [ "$t" != gpqamain ] || SEED_ONLY_SAMPLES=0  # its seed also shuffles the choices
}

if [ "$#" -ge 1 ] && [ "$1" = "--check" ]; then
    [ "$#" -eq 2 ] || usage
    task_setup "$2"; echo "${FINAL_EVAL_SCRIPT}"; exit 0
fi
if [ "$#" -ge 1 ] && [ "$1" = "--default-seeds" ]; then
    [ "$#" -eq 2 ] || usage
    task_setup "$2"; echo "${DEFAULT_SEEDS[*]}"; echo "${SEED_ONLY_SAMPLES}"; exit 0
fi
SINGLE_SEED=0
if [ "$#" -ge 1 ] && [ "$1" = "--single-seed" ]; then
    [ "$#" -eq 5 ] || usage
    SINGLE_SEED=1; shift
fi
[ "$#" -ge 4 ] || usage
EVALUATION_TASK="$1"
task_setup "$EVALUATION_TASK"
MODEL_DIR="$(realpath -ms "$2")"; OUTPUT_DIR="$(realpath -ms "$3")"
if [ "$SINGLE_SEED" = 1 ]; then
    SEEDS_GIVEN=1; EVAL_SEEDS=("$4"); shift 4
else
    METRICS_JSON="$(realpath -ms "$4")"; shift 4
    if [ "$#" -gt 0 ]; then SEEDS_GIVEN=1; EVAL_SEEDS=("$@"); else SEEDS_GIVEN=0; EVAL_SEEDS=("${DEFAULT_SEEDS[@]}"); fi
fi
for s in "${EVAL_SEEDS[@]}"; do
    [[ "$s" =~ ^(0|[1-9][0-9]*)$ ]] || die "seed '${s}' is not a non-negative integer without leading zeros"
done
DUPS="$(printf '%s\n' "${EVAL_SEEDS[@]}" | sort | uniq -d)"
[ -z "$DUPS" ] || die "seeds given more than once: ${DUPS//$'\n'/ }"
if [ "$SINGLE_SEED" = 1 ]; then
    [ -d "$OUTPUT_DIR" ] || die "${OUTPUT_DIR} not found"
    if compgen -G "${OUTPUT_DIR}/*_seed${EVAL_SEEDS[0]}[._]*" > /dev/null; then
        die "${OUTPUT_DIR} already has files of seed ${EVAL_SEEDS[0]}; move them away before evaluating"
    fi
else
    [ ! -e "$OUTPUT_DIR" ] || die "${OUTPUT_DIR} already exists; move it away before evaluating"
    [ ! -e "$METRICS_JSON" ] || die "${METRICS_JSON} already exists; move it away before evaluating"
    [ -d "$(dirname "$OUTPUT_DIR")" ] || die "parent directory of ${OUTPUT_DIR} not found"
    [ -d "$(dirname "$METRICS_JSON")" ] || die "parent directory of ${METRICS_JSON} not found"
    mkdir "$OUTPUT_DIR"
fi

REPO_ROOT="$(pwd)"
TMP_SUBDIR="$(mktemp -d /tmp/ptb_final_eval.XXXXXX)"
HF_MERGED="${TMP_SUBDIR}/merged_huggingface"
export EVALUATION_TASK MODEL_DIR OUTPUT_DIR EVAL_CONTAINER FINAL_EVAL_SCRIPT GRADER_API_KEY_NAME TMP_HF_CACHE HF_HOME REPO_ROOT TMP_SUBDIR HF_MERGED
[ -z "$GRADER_API_KEY_NAME" ] || export "${GRADER_API_KEY_NAME}"
trap 'if mountpoint -q "$HF_MERGED"; then fusermount -u "$HF_MERGED"; fi; rm -rf "$TMP_SUBDIR"' EXIT

# A greedy model (default temperature 0, src/utils/default_temperature.py) needs only the first default seed.
if [ "$SEEDS_GIVEN" = 0 ] && [ "$SEED_ONLY_SAMPLES" = 1 ] && [ "${#EVAL_SEEDS[@]}" -gt 1 ] && [ -d "$MODEL_DIR" ]; then
    if apptainer exec --env PYTHONNOUSERSITE="1" --bind "${REPO_ROOT}:${REPO_ROOT}" --pwd "${REPO_ROOT}" "${EVAL_CONTAINER}" python src/utils/default_temperature.py "${MODEL_DIR}" --output-file "${OUTPUT_DIR}/default_temperature.txt" > "${OUTPUT_DIR}/default_temperature_log.txt" 2>&1; then
        read -r DECODING DEFAULT_TEMPERATURE < "${OUTPUT_DIR}/default_temperature.txt"
        echo "vLLM's default temperature for this model: ${DEFAULT_TEMPERATURE} (${DECODING})"
        case "$DECODING" in
            greedy) EVAL_SEEDS=("${EVAL_SEEDS[0]}") ;;
            sampling) ;;
            *) die "unexpected output of default_temperature.py: '${DECODING} ${DEFAULT_TEMPERATURE}'" ;;
        esac
    else
        echo "WARNING: could not read vLLM's default temperature for ${MODEL_DIR} (see ${OUTPUT_DIR}/default_temperature_log.txt); evaluating with all seeds" >&2
    fi
fi
echo "Final evaluation of ${MODEL_DIR} on ${EVALUATION_TASK} with ${FINAL_EVAL_SCRIPT}, seeds: ${EVAL_SEEDS[*]}"

with_huggingface_overlay() {
    mkdir -p "$TMP_SUBDIR/merged_huggingface" "$TMP_SUBDIR/upper_huggingface" "$TMP_SUBDIR/fuse_workdir"
    fuse-overlayfs -o "lowerdir=$HF_HOME,upperdir=$TMP_SUBDIR/upper_huggingface,workdir=$TMP_SUBDIR/fuse_workdir" "$TMP_SUBDIR/merged_huggingface"
    "$@"; local rc=$?
    fusermount -u "$TMP_SUBDIR/merged_huggingface"
    rm -r "$TMP_SUBDIR/merged_huggingface" "$TMP_SUBDIR/upper_huggingface" "$TMP_SUBDIR/fuse_workdir"
    return $rc
}
one_attempt() {  # <max_tokens_arg> <seed> <attempt number>
    local sandbox=() key_env=()
    [ "$EVALUATION_TASK" != humaneval ] || sandbox=(bash src/eval/tasks/humaneval/with_answer_sandbox.sh "${EVAL_CONTAINER}")
    [ -z "$GRADER_API_KEY_NAME" ] || key_env=(--env "${GRADER_API_KEY_NAME}=${!GRADER_API_KEY_NAME}")
    nvidia-smi --query-compute-apps=pid --format=csv,noheader | xargs -r kill -9
    sleep "${PTB_FIXTURE_SLEEP:-5}"
    with_huggingface_overlay ${sandbox[@]+"${sandbox[@]}"} apptainer exec --nv --env "HF_HOME=${TMP_HF_CACHE}" ${key_env[@]+"${key_env[@]}"} --env VLLM_API_KEY="inspectai" --env PYTHONNOUSERSITE="1" --writable-tmpfs --bind "${REPO_ROOT}:${REPO_ROOT}" --bind "${HF_MERGED}:${TMP_HF_CACHE}" --pwd "${REPO_ROOT}/src/eval/tasks/${EVALUATION_TASK}" "${EVAL_CONTAINER}" python "${FINAL_EVAL_SCRIPT}" --model-path "${MODEL_DIR}" --templates-dir ../../../../src/eval/templates --limit -1 --seed "$2" $1 --json-output-file "${OUTPUT_DIR}/metrics_seed$2.json" > "${OUTPUT_DIR}/final_eval_seed$2_$3.txt"
}
stage_attempts() {  # <attempts> <max_tokens_arg> <seed>: 0 once metrics_seed<S>.json exists
    local metrics="${OUTPUT_DIR}/metrics_seed$3.json" i rc
    for ((i = 1; i <= $1; i++)); do
        sleep "${PTB_FIXTURE_SLEEP:-5}"
        [ ! -f "$metrics" ] || return 0
        EVAL_COUNTER=$((EVAL_COUNTER + 1))
        echo "Seed $3: evaluation attempt $EVAL_COUNTER (phase attempt $i of $1)"
        rc=0
        timeout --signal=TERM --kill-after=60s 28800s bash -c "$(declare -f one_attempt with_huggingface_overlay); one_attempt \"$2\" \"$3\" \"$EVAL_COUNTER\"" || rc=$?
        [ ! -f "$metrics" ] || return 0
        echo "Seed $3: attempt $EVAL_COUNTER wrote no metrics (exit status ${rc})"
    done
    return 1
}
cascade() {  # <seed> <first stage>: sets SEED_STAGE
    local st
    for ((st = $2; st < ${#STAGE_MAX_RETRIES[@]}; st++)); do
        if stage_attempts "${STAGE_MAX_RETRIES[$st]}" "${STAGE_MAX_TOKENS_ARGS[$st]}" "$1"; then SEED_STAGE=$st; return 0; fi
    done
    return 1
}

if [ "$SINGLE_SEED" = 1 ]; then
    seed="${EVAL_SEEDS[0]}"; EVAL_COUNTER=0
    echo "=== Seed ${seed}: evaluating from stage 0 (single-seed mode) ==="
    if cascade "$seed" 0; then
        echo "Seed ${seed}: succeeded at stage ${SEED_STAGE}"; echo "stage ${SEED_STAGE}" > "${OUTPUT_DIR}/result_seed${seed}.txt"
    else
        echo "Seed ${seed}: failed at every stage"; echo "failed" > "${OUTPUT_DIR}/result_seed${seed}.txt"
    fi
    echo $(cat "${OUTPUT_DIR}/final_eval_seed${seed}_${EVAL_COUNTER}.txt")
    exit 0
fi
RESULTS=(); START_STAGE=0
for seed in "${EVAL_SEEDS[@]}"; do
    EVAL_COUNTER=0
    echo "=== Seed ${seed}: evaluating from stage ${START_STAGE} ==="
    if cascade "$seed" "$START_STAGE"; then
        echo "Seed ${seed}: succeeded at stage ${SEED_STAGE}"
        RESULTS+=(--seed-result "$seed" "$SEED_STAGE" "${OUTPUT_DIR}/metrics_seed${seed}.json")
        [ "$seed" != "${EVAL_SEEDS[0]}" ] || START_STAGE=$SEED_STAGE
        echo $(cat "${OUTPUT_DIR}/final_eval_seed${seed}_${EVAL_COUNTER}.txt")
    elif [ "$seed" = "${EVAL_SEEDS[0]}" ]; then
        echo "Seed ${seed}: failed at every stage; skipping the remaining seeds"
        echo $(cat "${OUTPUT_DIR}/final_eval_seed${seed}_${EVAL_COUNTER}.txt")
        break
    else
        echo "Seed ${seed}: failed at every stage; leaving it out of the mean"
    fi
done
if [ ${#RESULTS[@]} -eq 0 ]; then echo "No seed succeeded; ${METRICS_JSON} not written"; exit 0; fi
python src/utils/aggregate_seed_metrics.py --output "${METRICS_JSON}" --num-seeds "${#EVAL_SEEDS[@]}" "${RESULTS[@]}" || die "failed to aggregate the per-seed metrics"
cat "${METRICS_JSON}"
"""

AGGREGATE_SEED_METRICS_PY = r'''#!/usr/bin/env python3
"""FIXTURE aggregate_seed_metrics.py (ptflow tests): main's interface and output; our code.
--output F --num-seeds N --seed-result SEED STAGE METRICS_JSON (repeated, the seeds that succeeded)."""

import argparse
import json

RESERVED = ("num_seeds", "num_seeds_succeeded", "per_seed")


def number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--output", required=True)
    p.add_argument("--num-seeds", type=int, required=True)
    p.add_argument("--seed-result", nargs=3, action="append", required=True, metavar=("SEED", "STAGE", "METRICS"))
    a = p.parse_args()
    per_seed = {}
    for seed, stage, path in a.seed_result:
        if seed in per_seed:
            raise ValueError(f"seed {seed} given more than once")
        metrics = json.load(open(path))
        if not isinstance(metrics, dict):
            raise TypeError(f"{path}: not a JSON object")
        per_seed[seed] = {"max_tokens_stage": int(stage), "metrics": metrics}
    if len(per_seed) > a.num_seeds:
        raise ValueError(f"{len(per_seed)} seed results, --num-seeds {a.num_seeds}")
    runs = [r["metrics"] for r in per_seed.values()]
    keys = list(runs[0])
    if any(set(m) != set(keys) for m in runs):
        raise ValueError("the seeds' metric keys differ")
    out = {}
    for k in keys:
        if k in RESERVED:
            raise ValueError(f"metric key {k!r} collides with an aggregation field")
        vals = [m[k] for m in runs]
        if all(map(number, vals)):
            out[k] = sum(vals) / len(vals)
        elif any(map(number, vals)):
            raise TypeError(f"metric {k!r} numeric for some seeds only")
    if "accuracy" not in out:
        raise KeyError("no numeric 'accuracy' metric")
    out.update(num_seeds=a.num_seeds, num_seeds_succeeded=len(per_seed), per_seed=per_seed)
    with open(a.output, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
'''

DEFAULT_TEMPERATURE_PY = r'''#!/usr/bin/env python3
"""FIXTURE default_temperature.py (ptflow tests): main's interface (<model_dir> --output-file F; writes
"greedy <t>" or "sampling <t>"). STAND-IN for vLLM: reads temperature from generation_config.json, else config.json,
else 1.0 (vLLM's default), greedy below 1e-5 (vLLM's _SAMPLING_EPS); the real one asks vLLM itself. Test hook:
PTB_FIXTURE_GREEDY."""

import argparse
import json
import os
from pathlib import Path


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model_dir")
    p.add_argument("--output-file", required=True)
    a = p.parse_args()
    temperature = None
    for name in ("generation_config.json", "config.json"):
        f = Path(a.model_dir) / name
        if f.is_file():
            temperature = json.loads(f.read_text()).get("temperature")
            break
    temperature = 1.0 if temperature is None else temperature
    # test hook: PTB_FIXTURE_GREEDY="<text>,...": a model whose path holds one of them has temperature 0
    if any(t and t in a.model_dir for t in os.environ.get("PTB_FIXTURE_GREEDY", "").split(",")):
        temperature = 0.0
    Path(a.output_file).write_text(f"{'greedy' if temperature < 1e-5 else 'sampling'} {temperature}\n")


if __name__ == "__main__":
    main()
'''

JUDGE_LIB_SH = r"""#!/bin/bash
# FIXTURE judge_lib.sh (ptflow tests): PostTrainBench main's judge set, defaults, pins and codex command line; our text.
JUDGES_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
JUDGES_REPO_ROOT="$(cd "$JUDGES_DIR/../.." && pwd)"
ALL_JUDGES=(@JUDGES@)
JUDGE_DEFAULT_MODEL="@MODEL@"
JUDGE_DEFAULT_REASONING_EFFORT="@EFFORT@"
JUDGE_DEFAULT_CODEX_VERSION="@CODEX@"
JUDGE_CONTAINER="@CONTAINER@"

load_judge_conf() {  # <judge>: JUDGE_LABEL JUDGE_OUTPUT_ID JUDGE_PROMPT_FILE (+ overridable model/effort/codex pin)
    local conf="$JUDGES_DIR/$1/judge.conf"
    [ -f "$conf" ] || { echo "ERROR: unknown judge '$1' (no $conf)" >&2; return 1; }
    JUDGE_LABEL=""; JUDGE_OUTPUT_ID=""; JUDGE_PROMPT_FILE=""
    JUDGE_MODEL="$JUDGE_DEFAULT_MODEL"; JUDGE_REASONING_EFFORT="$JUDGE_DEFAULT_REASONING_EFFORT"; JUDGE_CODEX_VERSION="$JUDGE_DEFAULT_CODEX_VERSION"
    source "$conf"
    [ -n "$JUDGE_LABEL" ] && [ -n "$JUDGE_OUTPUT_ID" ] && [ -n "$JUDGE_PROMPT_FILE" ] \
        || { echo "ERROR: $conf must set JUDGE_LABEL, JUDGE_OUTPUT_ID and JUDGE_PROMPT_FILE" >&2; return 1; }
}

prepare_judge_sandbox() {  # <job_dir> <benchmark_id> <final_model_config_src>
    cp "$JUDGES_DIR/judge_tools/contamination_check.py" "$JUDGES_DIR/judge_tools/model_identity_check.py" "$1/"
    cp -r "$JUDGES_DIR/judge_tools/reference_configs" "$1/reference_configs"
    [ ! -f "$3" ] || cp "$3" "$1/final_model_config.json"
    [ ! -f "$JUDGES_REPO_ROOT/src/eval/tasks/$2/test_data.json" ] || cp "$JUDGES_REPO_ROOT/src/eval/tasks/$2/test_data.json" "$1/test_data.json"
}

setup_judge_codex_auth() {  # <job_dir>: the subscription auth.json is bind-mounted, so rotated tokens persist
    JUDGE_CODEX_AUTH_SRC="$JUDGES_REPO_ROOT/agents/codex_non_api/auth.json"
    [ -f "$JUDGE_CODEX_AUTH_SRC" ] || { echo "ERROR: agents/codex_non_api/auth.json not found — the judges need subscription auth" >&2; return 1; }
    cp -r "$JUDGES_REPO_ROOT/containers/other_home_data/.codex" "$1/"
    : > "$1/.codex/auth.json"
    grep -q "forced_login_method" "$1/.codex/config.toml" 2>/dev/null || printf '\nforced_login_method = "chatgpt"\n' >> "$1/.codex/config.toml"
}

build_judge_prompt() {  # <judge> <benchmark_id> <model_hf> <agent> <agent_config>
    local args=(--judge "$1" --benchmark-id "$2" --model "$3")
    [ -z "$4" ] || args+=(--agent "$4")
    [ -z "$5" ] || args+=(--agent-config "$5")
    python "$JUDGES_DIR/get_judge_prompt.py" "${args[@]}"
}

run_judge_exec() {  # <job_dir> <job_tmp> <output_json> <prompt>
    local codex_bin="codex"
    if [ -n "$JUDGE_CODEX_VERSION" ]; then
        local pin=".codex-cli-${JUDGE_CODEX_VERSION}"
        if [ ! -x "$1/$pin/bin/codex" ]; then
            echo "  installing pinned codex CLI @openai/codex@${JUDGE_CODEX_VERSION} for ${JUDGE_LABEL} ..."
            apptainer exec --containall --env PATH="/root/.local/bin:/home/ben/.local/bin:$PATH" --bind "$2:/tmp" --home "$1:/home/ben" --writable-tmpfs "${POST_TRAIN_BENCH_CONTAINERS_DIR}/${JUDGE_CONTAINER}" npm install -g --prefix "/home/ben/${pin}" --no-fund --no-audit "@openai/codex@${JUDGE_CODEX_VERSION}"
        fi
        [ -x "$1/$pin/bin/codex" ] || { echo "ERROR: install of pinned @openai/codex@${JUDGE_CODEX_VERSION} failed (no ${pin}/bin/codex in the sandbox home) — ${JUDGE_LABEL} cannot run" >&2; return 1; }
        codex_bin="/home/ben/${pin}/bin/codex"
    fi
    apptainer exec --containall ${JUDGE_EXTRA_APPTAINER_ARGS[@]+"${JUDGE_EXTRA_APPTAINER_ARGS[@]}"} --env PATH="/root/.local/bin:/home/ben/.local/bin:$PATH" --env CODEX_API_KEY="" --env OPENAI_API_KEY="" --env PYTHONNOUSERSITE="1" --bind "$2:/tmp" --bind "${JUDGE_CODEX_AUTH_SRC}:/home/ben/.codex/auth.json" --home "$1:/home/ben" --pwd "/home/ben/task" --writable-tmpfs "${POST_TRAIN_BENCH_CONTAINERS_DIR}/${JUDGE_CONTAINER}" "$codex_bin" --search -a never exec --json -c model_reasoning_summary=detailed -c model_reasoning_effort="${JUDGE_REASONING_EFFORT}" --skip-git-repo-check --yolo --model "${JUDGE_MODEL}" "$4" 2>&1 | tee "$3"
}

collect_judge_output() {  # <job_dir> <out_dir> <suffix> <missing_fatal>: judgement_<id><suffix>.json
    local base="judge_output_${JUDGE_OUTPUT_ID}$3" verdict="$2/judgement_${JUDGE_OUTPUT_ID}$3.json"
    python "$JUDGES_REPO_ROOT/src/trace_parsing/parse_trace.py" --agent codex "$2/${base}.json" -o "$2/${base}.txt"
    if [ -f "$1/task/judgement.json" ]; then cp "$1/task/judgement.json" "$verdict"; echo "  ${JUDGE_LABEL} judgement: $(cat "$verdict")"
    elif [ "$4" = 1 ]; then echo "ERROR: judgement.json not created by ${JUDGE_LABEL} (see $2/${base}.txt)" >&2; return 1
    else echo "WARNING: judgement.json not created by ${JUDGE_LABEL} (see $2/${base}.txt); continuing — a missing inline verdict never aborts the task run" >&2; fi
}
"""

GET_JUDGE_PROMPT_PY = r'''#!/usr/bin/env python3
"""FIXTURE get_judge_prompt.py (ptflow tests): main's arguments (--judge --benchmark-id --model [--agent]
[--agent-config]); the prompt file is judge.conf's JUDGE_PROMPT_FILE, {model} and {benchmark} filled from info.json."""

import argparse
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main():
    p = argparse.ArgumentParser()
    for name in ("--judge", "--benchmark-id", "--model"):
        p.add_argument(name, required=True)
    p.add_argument("--agent", default="")
    p.add_argument("--agent-config", default="")
    a = p.parse_args()
    conf = dict(line.split("=", 1) for line in (HERE / a.judge / "judge.conf").read_text().splitlines()
                if "=" in line and not line.startswith("#"))
    info = json.loads((HERE.parent / "eval/tasks" / a.benchmark_id / "info.json").read_text())
    text = (HERE / a.judge / conf["JUDGE_PROMPT_FILE"].strip('"')).read_text()
    print(text.replace("{model}", a.model).replace("{benchmark}", info["benchmark"]).replace("{agent}", a.agent))


if __name__ == "__main__":
    main()
'''

JUDGE_CONF = """# FIXTURE judge.conf (ptflow tests){note}
JUDGE_LABEL="{label}"
JUDGE_OUTPUT_ID="{output_id}"
JUDGE_PROMPT_FILE="prompt.md"
"""
JUDGE_PROMPT = """FIXTURE {judge} prompt (ptflow tests), not PostTrainBench's. Read ../solve_parsed.txt and the task directory of
the agent that post-trained {model} for {benchmark}; write your verdict to judgement.json ({fields}).
"""
JUDGE_FIELDS = {
    "data_contamination_judge": "contamination, disallowed_model, justification_contamination, justification_disallowed_model",
    "api_usage_judge": "disallowed_api_usage, justification_disallowed_api_usage",
    "ptb_lookup_judge": "disallowed_ptb_lookup, justification_disallowed_ptb_lookup",
    "general_judge": "STAND-IN: the general judge's schema is not in the index",
}

COLLECT_PY = r'''#!/usr/bin/env python3
"""FIXTURE collect.py (ptflow tests): main's inputs and outputs; our code. Reads <results>/<method>/
<bench>_<org>_<model>_<runid>/ (latest run id per bench and model): metrics.json's accuracy, time_taken.txt (H:M:S),
the contamination verdict (judgement_gpt5_4_manual.json > majority of 3 slots > judgement_gpt5_4_rerun.json >
judgement_gpt5_4.json), judgement_api[_rerun].json, judgement_ptb_lookup[_rerun].json (true: an error). Writes
final_<method>.csv (baseline fallback for a missing/broken run or a flagged cell: M, C, A),
contamination_<method>.csv and time_overview.csv into --output-dir (default <results>/_aggregated); the results dir
comes from .env's POST_TRAIN_BENCH_RESULTS_DIR unless --data-dir."""

import argparse
import csv
import glob
import json
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))


def dotenv():
    env = {}
    for line in open(os.path.join(HERE, "..", ".env")):
        if "=" in line and not line.lstrip().startswith("#"):
            k, v = line.strip().split("=", 1)
            env[k.strip()] = v.strip().strip("'\"")
    return env


def latest_runs(method_dir):
    runs = {}
    for entry in os.listdir(method_dir):
        if os.path.isdir(os.path.join(method_dir, entry)):
            bench, _, model, run_id = entry.split("_")
            if (bench, model) not in runs or int(run_id) > runs[bench, model][0]:
                runs[bench, model] = (int(run_id), os.path.join(method_dir, entry))
    return runs


def verdict(run_dir, output_id, field):
    for name in (f"judgement_{output_id}_rerun.json", f"judgement_{output_id}.json"):
        path = os.path.join(run_dir, name)
        if os.path.exists(path):
            value = json.load(open(path))[field]
            if not isinstance(value, bool):
                raise TypeError(f"{path}: {field} is not a bool")
            return value
    return None


def contamination(run_dir):
    manual = os.path.join(run_dir, "judgement_gpt5_4_manual.json")
    if os.path.exists(manual):
        return json.load(open(manual))
    slot1 = next((p for p in (os.path.join(run_dir, f"judgement_gpt5_4{s}.json") for s in ("_rerun", ""))
                  if os.path.exists(p)), None)
    others = [os.path.join(run_dir, "judgement_multi_runs", f"judgement_gpt5_4_run{n}.json") for n in (2, 3)]
    if slot1 and all(map(os.path.exists, others)):
        slots = [json.load(open(p)) for p in [slot1, *others]]
        return {f: sum(s[f] for s in slots) >= 2 for f in ("contamination", "disallowed_model")}
    if slot1:
        return json.load(open(slot1))
    raise FileNotFoundError(f"no contamination judgement in {run_dir}")


def seconds(run_dir):
    m = re.match(r"^(\d+):(\d{1,2}):(\d{1,2})$", open(os.path.join(run_dir, "time_taken.txt")).read().strip())
    if not m:
        raise ValueError(f"{run_dir}/time_taken.txt is not H:M:S")
    h, mi, s = map(int, m.groups())
    return h * 3600 + mi * 60 + s


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data-dir")
    p.add_argument("--output-dir")
    a = p.parse_args()
    data_dir = a.data_dir or dotenv()["POST_TRAIN_BENCH_RESULTS_DIR"]
    out_dir = a.output_dir or os.path.join(data_dir, "_aggregated")
    os.makedirs(out_dir, exist_ok=True)
    baselines = json.load(open(os.path.join(HERE, "baselines.json")))["zeroshot"]
    times = {}
    for method in sorted(os.listdir(data_dir)):
        mdir = os.path.join(data_dir, method)
        if not os.path.isdir(mdir) or method.startswith("_") or method in ("baseline", "baseline_zeroshot"):
            continue
        runs = latest_runs(mdir)
        benches, models = sorted({b for b, _ in runs}), sorted({m for _, m in runs})
        score, flags, total, n = {}, {}, 0, 0
        for key, (_, run_dir) in sorted(runs.items()):
            if verdict(run_dir, "ptb_lookup", "disallowed_ptb_lookup"):
                raise RuntimeError(f"{run_dir}: the PTB-lookup judge fired")
            try:
                acc = json.load(open(os.path.join(run_dir, "metrics.json")))["accuracy"]
                if isinstance(acc, bool) or not isinstance(acc, (int, float)):
                    raise TypeError(f"accuracy {acc!r}")
                j = contamination(run_dir)
                api = verdict(run_dir, "api", "disallowed_api_usage")
                flags[key] = "M" * j["disallowed_model"] + "C" * j["contamination"] + "A" * bool(api)
                score[key] = str(acc)
                total, n = total + seconds(run_dir), n + 1
            except (FileNotFoundError, ValueError, KeyError, TypeError) as e:
                if not glob.glob(os.path.join(run_dir, "*final_eval_9.txt")):
                    print(f"WARNING: skipping broken run {run_dir}: {e}")
                score[key], flags[key] = "", ""
        for name, cell in (("contamination", lambda k: flags.get(k, "")),
                           ("final", lambda k: str(baselines[k[1]][k[0]]) if flags.get(k) or not score.get(k) else score[k])):
            with open(os.path.join(out_dir, f"{name}_{method}.csv"), "w", newline="") as f:
                w = csv.writer(f)
                w.writerow(["model", *benches])
                w.writerows([m, *(cell((b, m)) for b in benches)] for m in models)
        times[method] = (total, n)
    with open(os.path.join(out_dir, "time_overview.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["method", "average_time", "percentage"])
        for method, (total, n) in sorted(times.items()):
            avg = total // n if n else None
            w.writerow([method, f"{avg // 3600}:{avg % 3600 // 60:02d}:{avg % 60:02d}" if n else "N/A",
                        f"{avg / 36000 * 100:.1f}%" if n else "N/A"])


if __name__ == "__main__":
    main()
'''


# Test hook of evaluate_final_eval.py: PTB_FIXTURE_FAIL_SEEDS="<seed>[@<text>],..." makes every attempt of that seed
# fail (no metrics), for every model or only for a model whose path holds <text>.
_FAIL_SEEDS = """    fail_seeds = [s.split("@", 1) + [""] for s in os.environ.get("PTB_FIXTURE_FAIL_SEEDS", "").split(",") if s]
    if any(int(s[0]) == args.seed and s[1] in args.model_path for s in fail_seeds):
        print(f"fixture: seed {args.seed} fails on {args.model_path} (PTB_FIXTURE_FAIL_SEEDS)", file=sys.stderr)
        return 1
"""


AGGREGATE_PY = r'''#!/usr/bin/env python3
"""FIXTURE aggregate.py (ptflow tests): main's command line, steps, order and outputs; our code. Reads collect.py's
final_<method>.csv from --data-dir (default <.env's POST_TRAIN_BENCH_RESULTS_DIR>/_aggregated), writes into
--output-dir (default the data dir). --per-cell: aggregated_avg/std_<agent>.csv, the mean and sample sd over the runs
HARDCODED_AGENT_MAP names (agents with a missing table skipped). --leaderboard: final_avg/std_<agent>.csv the same,
then single_metrics.csv over EVERY final_*.csv of the output dir (but final_time_*) whose rows are exactly
EXPECTED_MODELS and whose columns hold every eval of factors.json: the sum over factors.json's evals (sorted) of the
mean over the models times the factor; single_metrics_aggregated.csv (agent, avg, sample std, n) for agents whose runs
all have a metric. --time: time_aggregated.csv from time_overview.csv. --all (the default): all three. An agent of one
run divides by zero (n - 1), as the real one does. HARDCODED_AGENT_MAP: STAND-IN, one agent of the real map; test hook
PTB_FIXTURE_AGENT_MAP (a JSON object agent -> method names) adds to it."""

import argparse
import csv
import json
import math
import os

HERE = os.path.dirname(os.path.abspath(__file__))
HARDCODED_AGENT_MAP = {  # STAND-IN: one agent of the real map
    "Opus-4.6": ["claude_claude-opus-4-6_10h_run1_old_container", "claude_claude-opus-4-6_10h_run2",
                 "claude_claude-opus-4-6_10h_run3"],
}
HARDCODED_AGENT_MAP.update(json.loads(os.environ.get("PTB_FIXTURE_AGENT_MAP", "{}")))
HARDCODED_BENCHMARKS = ["aime2025", "arenahardwriting", "bfcl", "gpqamain", "gsm8k", "healthbench", "humaneval"]
EXPECTED_MODELS = {"Qwen3-1.7B-Base", "Qwen3-4B-Base", "SmolLM3-3B-Base", "gemma-3-4b-pt"}


def dotenv():
    env = {}
    for line in open(os.path.join(HERE, "..", ".env")):
        if "=" in line and not line.lstrip().startswith("#"):
            k, v = line.strip().split("=", 1)
            env[k.strip()] = v.strip().strip("'\"")
    return env


def table(path):
    if not os.path.exists(path):
        return {}
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if not rows:
        return {}
    head = rows[0][1:]
    return {r[0]: {b: r[i + 1] if i + 1 < len(r) else "" for i, b in enumerate(head)} for r in rows[1:] if r}


def write(path, data):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["model", *HARDCODED_BENCHMARKS])
        w.writerows([m, *(data[m].get(b, "") for b in HARDCODED_BENCHMARKS)] for m in sorted(data))


def mean(values):
    return sum(values) / len(values)


def stddev(values):
    avg = mean(values)
    return math.sqrt(sum((x - avg) ** 2 for x in values) / (len(values) - 1))


def over_runs(methods, data_dir):
    runs = [table(os.path.join(data_dir, f"final_{m}.csv")) for m in methods]
    models = sorted(runs[0])
    avg = {m: {b: str(mean([float(r[m][b]) for r in runs])) for b in HARDCODED_BENCHMARKS} for m in models}
    std = {m: {b: str(stddev([float(r[m][b]) for r in runs])) for b in HARDCODED_BENCHMARKS} for m in models}
    return avg, std


def hms(seconds):
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data-dir")
    p.add_argument("--output-dir")
    for flag in ("--per-cell", "--leaderboard", "--time", "--all"):
        p.add_argument(flag, action="store_true")
    a = p.parse_args()
    data_dir = a.data_dir or os.path.join(dotenv()["POST_TRAIN_BENCH_RESULTS_DIR"], "_aggregated")
    out = a.output_dir or data_dir
    os.makedirs(out, exist_ok=True)
    everything = a.all or not (a.per_cell or a.leaderboard or a.time)
    complete = {k: all(os.path.exists(os.path.join(data_dir, f"final_{m}.csv")) for m in v)
                for k, v in HARDCODED_AGENT_MAP.items()}
    if everything or a.per_cell:
        for agent, methods in HARDCODED_AGENT_MAP.items():
            if not complete[agent]:
                print(f"Skipping agent {agent}: missing final CSVs")
                continue
            avg, std = over_runs(methods, data_dir)
            write(os.path.join(out, f"aggregated_avg_{agent}.csv"), avg)
            write(os.path.join(out, f"aggregated_std_{agent}.csv"), std)
    if everything or a.leaderboard:
        factors = json.load(open(os.path.join(HERE, "factors.json")))
        for agent, methods in HARDCODED_AGENT_MAP.items():
            if complete[agent]:
                avg, std = over_runs(methods, data_dir)
                write(os.path.join(out, f"final_avg_{agent}.csv"), avg)
                write(os.path.join(out, f"final_std_{agent}.csv"), std)
        metrics = {}
        for name in os.listdir(out):
            if not name.startswith("final_") or not name.endswith(".csv") or name.startswith("final_time_"):
                continue
            data = table(os.path.join(out, name))
            if set(data) != EXPECTED_MODELS or not set(factors) <= set(next(iter(data.values()))):
                continue
            total = 0.0
            for b in sorted(factors):
                total += sum(float(data[m][b]) for m in data) / len(data) * factors[b]
            metrics[name[len("final_"):-len(".csv")]] = total
        with open(os.path.join(out, "single_metrics.csv"), "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["method", "metric"])
            w.writerows([m, metrics[m]] for m in sorted(metrics))
        with open(os.path.join(out, "single_metrics_aggregated.csv"), "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["agent", "avg", "std", "n"])
            for agent in sorted(HARDCODED_AGENT_MAP):
                runs = HARDCODED_AGENT_MAP[agent]
                if not all(m in metrics for m in runs):
                    print(f"Skipping agent {agent} in leaderboard: missing metrics")
                    continue
                values = [metrics[m] for m in runs]
                w.writerow([agent, mean(values), stddev(values), len(values)])
    if everything or a.time:
        hours = {}
        with open(os.path.join(data_dir, "time_overview.csv"), newline="") as f:
            for row in csv.DictReader(f):
                if row["average_time"] and row["average_time"] != "N/A":
                    h, m, s = map(int, row["average_time"].split(":"))
                    hours[row["method"]] = h + m / 60 + s / 3600
        with open(os.path.join(out, "time_aggregated.csv"), "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["agent", "avg_time", "std_time", "n"])
            for agent, methods in HARDCODED_AGENT_MAP.items():
                if not all(m in hours for m in methods):
                    print(f"Skipping agent {agent} in time: missing data")
                    continue
                values = [hours[m] for m in methods]
                w.writerow([agent, hms(int(mean(values) * 3600)), hms(int(stddev(values) * 3600)), len(values)])


if __name__ == "__main__":
    main()
'''


def final_eval_py(eval_id: str) -> str:
    """The fixture's evaluate.py with main's ``--seed`` (STAND-IN: recorded, not used: the generation is greedy;
    test hook ``PTB_FIXTURE_FAIL_SEEDS``, above). humaneval's scores each answer through the answer sandbox."""
    anchor = '    parser.add_argument("--json-output-file", default=None)\n'
    text = evaluate_py(eval_id)
    assert anchor in text
    seed = '    parser.add_argument("--seed", type=int, default=None)  # STAND-IN: greedy generation ignores it\n'
    fail_anchor = '    fail_above = os.environ.get("PTB_FIXTURE_FAIL_ABOVE")\n'
    assert fail_anchor in text
    text = text.replace(anchor, anchor + seed).replace(fail_anchor, _FAIL_SEEDS + fail_anchor)
    if eval_id == "humaneval":  # main's scorer runs the answers in its answer sandbox and refuses to run without it
        for old, new in _HUMANEVAL_SCORER:
            assert old in text, old
            text = text.replace(old, new, 1)
    return text.replace("FIXTURE evaluate.py", "FIXTURE evaluate_final_eval.py", 1)


# humaneval's evaluate_final_eval.py (main, 8749d7e6) imports answer_sandbox (beside it) at its top, builds its scorer,
# verify(), before any model loads, and verify() raises without the answer sandbox's socket (with_answer_sandbox.sh
# sets ANSWER_SANDBOX_SOCKET): run bare, every attempt fails at once. Each sample is scored by a checker program fed
# on stdin to a `python -` (inspect's local sandbox exec): answer_sandbox.connect() loads prompt + answer into a fresh
# answer process of the sandbox, check() calls the proxy; exit 0 correct, HARNESS_ERROR_EXIT_CODE raises, else wrong.
# STAND-INs: the prompt binds QUESTION, the answer is ``def solution(): return <the model's "#### n">`` (inspect's
# find_code), the test asserts solution() == the answer; an incorrect sample prints the checker's last stderr line.
# Test hook ``PTB_FIXTURE_ANSWER_CODE=<file>``: every sample's answer is that file's code (a hand-written answer).
_NEEDS_ANSWER_SANDBOX = """    if not os.environ.get("ANSWER_SANDBOX_SOCKET"):
        raise RuntimeError("ANSWER_SANDBOX_SOCKET is not set: run the humaneval final evaluation through "
                           "src/eval/tasks/humaneval/with_answer_sandbox.sh")
"""
_SANDBOX_SCORER = r"""ANSWER_SANDBOX_MODULE = str(HERE / "answer_sandbox.py")
VERIFY_TIMEOUT = 30


def checker_program(prompt, answer, test, entry_point, socket_path):
    return "".join([
        "import importlib.util as _u\n",
        f"_s = _u.spec_from_file_location('answer_sandbox', {ANSWER_SANDBOX_MODULE!r})\n",
        "_m = _u.module_from_spec(_s)\n",
        "_s.loader.exec_module(_m)\n",
        f"_candidate = _m.connect({socket_path!r}, {prompt + answer!r}, {entry_point!r})\n",
        prompt, "\n", f"{entry_point} = _candidate\n", test, "\n", "check(_candidate)\n",
    ])  # fmt: skip


def answer_code(completion):
    hook = os.environ.get("PTB_FIXTURE_ANSWER_CODE")
    return Path(hook).read_text() if hook else f"def solution():\n    return {extract(completion)!r}\n"


def verify(completion, q):
    import subprocess

    prompt = f"QUESTION = {q['question']!r}\n"
    test = f"def check(candidate):\n    assert candidate() == {q['answer']!r}\n"
    program = checker_program(prompt, answer_code(completion), test, "solution", os.environ["ANSWER_SANDBOX_SOCKET"])
    try:
        result = subprocess.run([sys.executable, "-"], input=program, capture_output=True, text=True,
                                timeout=VERIFY_TIMEOUT)  # fmt: skip
    except subprocess.TimeoutExpired:
        return 0.0
    if result.returncode == HARNESS_ERROR_EXIT_CODE:
        raise RuntimeError(f"answer sandbox failed while scoring {q['question']!r}:\n{result.stderr}")
    if result.returncode != 0:
        print(f"{q['question']} incorrect: {(result.stderr.strip().splitlines() or [''])[-1]}")
    return 1.0 if result.returncode == 0 else 0.0


"""
_HUMANEVAL_SCORER = (
    ("from pathlib import Path\n", "from pathlib import Path\n\nfrom answer_sandbox import HARNESS_ERROR_EXIT_CODE\n"),
    (
        '    fail_above = os.environ.get("PTB_FIXTURE_FAIL_ABOVE")\n',
        _NEEDS_ANSWER_SANDBOX + '    fail_above = os.environ.get("PTB_FIXTURE_FAIL_ABOVE")\n',
    ),
    ("\ndef main():\n", "\n" + _SANDBOX_SCORER + "def main():\n"),
    (
        '    scores = [1.0 if extract(a) == q["answer"] else 0.0 for a, q in zip(answers, questions, strict=True)]\n',
        "    scores = [verify(a, q) for a, q in zip(answers, questions, strict=True)]\n",
    ),
)

# answer_sandbox.py, with_answer_sandbox.sh and with_answer_sandbox_local.sh of humaneval (main: b5d2362, b5d2362,
# c447934 in SOURCES), our text. with_answer_sandbox.sh needs apptainer (none here: its command line is checked as
# text); with_answer_sandbox_local.sh runs here for real (util-linux unshare, chroot, setpriv), nothing simplified.
ANSWER_SANDBOX_PY = r'''#!/usr/bin/env python3
"""FIXTURE answer_sandbox.py (ptflow tests): main's roles, protocol and exit code; our code.

serve SOCKET   the server, PID 1 of the sandbox: a fresh ``run`` process per connection (its own session, killed
               with its group afterwards, 60 s at most); exits when its stdin reaches EOF (the keepalive pipe)
run FD         one sample's answer process: loads prompt + answer as __main__, then answers calls
connect()      the checker's side: a proxy for the model's function; each call goes over the socket, arguments and
               results as repr() read back with ast.literal_eval (plain values only)
Messages: 4-byte big-endian length + UTF-8 JSON. load -> loaded | load_error; call -> value | raised.
"""

import argparse
import ast
import builtins
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import traceback

HARNESS_ERROR_EXIT_CODE = 3  # the checker's exit when the sandbox itself fails: the scorer raises, never scores
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
ANSWER_PROCESS_TIMEOUT_SECONDS = 60


class AnswerError(Exception):
    """The answer failed, exited or broke the protocol: the sample fails."""


def send(sock, message):
    body = json.dumps(message).encode()
    if len(body) > MAX_MESSAGE_BYTES:
        raise AnswerError(f"message of {len(body)} bytes")
    sock.sendall(len(body).to_bytes(4, "big") + body)


def _exactly(sock, n):
    data = b""
    while len(data) < n:
        try:
            chunk = sock.recv(min(n - len(data), 1 << 20))
        except OSError as err:
            raise AnswerError(f"connection failed: {err}") from err
        if not chunk:
            if not data:
                return None
            raise AnswerError(f"connection closed after {len(data)} of {n} bytes")
        data += chunk
    return data


def recv(sock):
    head = _exactly(sock, 4)
    if head is None:
        return None
    length = int.from_bytes(head, "big")
    if length > MAX_MESSAGE_BYTES:
        raise AnswerError(f"message of {length} bytes")
    body = _exactly(sock, length)
    if body is None:
        raise AnswerError("connection closed before the message body")
    try:
        message = json.loads(body)
    except ValueError as err:
        raise AnswerError(f"malformed message: {err}") from err
    if not isinstance(message, dict):
        raise AnswerError(f"malformed message: {message!r:.200}")
    return message


def _harness_error(reason):
    print(f"answer sandbox failure: {reason}", file=sys.stderr, flush=True)
    sys.exit(HARNESS_ERROR_EXIT_CODE)


def _encode(value):
    text = repr(value)
    try:
        back = ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        back = None
    if type(back) is not type(value) or back != value:
        _harness_error(f"the test passed a value that cannot be sent to the answer process: {text:.200}")
    return text


class Candidate:
    def __init__(self, sock):
        self._sock = sock

    def __call__(self, *args, **kwargs):
        send(self._sock, {"op": "call", "args": _encode(args), "kwargs": _encode(kwargs)})
        reply = recv(self._sock)
        if reply is None:
            raise AnswerError("the answer process exited during the call")
        if set(reply) == {"raised"}:
            raise AnswerError(f"the answer raised:\n{reply['raised']}")
        if set(reply) != {"value"} or not isinstance(reply["value"], str):
            raise AnswerError(f"unexpected reply: {reply!r:.200}")
        try:
            return ast.literal_eval(reply["value"])
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as err:
            raise AnswerError(f"not a plain value: {reply['value']:.200}") from err


def connect(socket_path, code, entry_point):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(socket_path)
    except OSError as err:
        _harness_error(f"cannot connect to {socket_path}: {err}")
    send(sock, {"op": "load", "code": code, "entry_point": entry_point})
    reply = recv(sock)
    if reply is None:
        raise AnswerError("the answer process exited while loading the answer")
    if set(reply) == {"load_error"}:
        raise AnswerError(f"loading the answer failed:\n{reply['load_error']}")
    if reply != {"loaded": True}:
        raise AnswerError(f"unexpected reply: {reply!r:.200}")
    return Candidate(sock)


def plain(value):  # built-in types (a numpy scalar, a namedtuple ... compare equal to them)
    if value is None or type(value) in (bool, int, float, complex, str, bytes):
        return value
    if type(value).__module__ == "numpy" and getattr(value, "ndim", None) == 0:
        return plain(value.item())
    for base in (bool, int, float, complex, str, bytes):
        if isinstance(value, base):
            return base(value)
    for kind in (tuple, list):
        if isinstance(value, kind):
            return kind(plain(v) for v in value)
    if isinstance(value, (set, frozenset)):
        return {plain(v) for v in value}
    if isinstance(value, dict):
        return {plain(k): plain(v) for k, v in value.items()}
    return value


def run_answer(fd):
    sock = socket.socket(fileno=fd)
    message = recv(sock)
    if message is None or message.get("op") != "load":
        return
    namespace = {"__name__": "__main__", "__builtins__": builtins}  # as upstream's `python -c`: runs as __main__
    try:
        exec(compile(message["code"], "<answer>", "exec"), namespace)
        function = namespace[message["entry_point"]]
    except Exception:
        send(sock, {"load_error": traceback.format_exc()})
        return
    send(sock, {"loaded": True})
    while (message := recv(sock)) is not None:
        try:
            reply = {"value": repr(plain(function(*ast.literal_eval(message["args"]),
                                                 **ast.literal_eval(message["kwargs"]))))}  # fmt: skip
        except Exception:
            reply = {"raised": traceback.format_exc()}
        send(sock, reply)


def _one_sample(conn):
    workdir = tempfile.mkdtemp(prefix="sample_")
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "run", str(conn.fileno())],
                            pass_fds=(conn.fileno(),), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, cwd=workdir, start_new_session=True)  # fmt: skip
    conn.close()
    try:
        proc.wait(timeout=ANSWER_PROCESS_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def serve(socket_path):
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # no handler: the kernel drops what answers send to PID 1
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)
    listener.listen(128)

    def keepalive():
        sys.stdin.buffer.read()
        os._exit(0)  # PID 1 gone: the kernel ends every answer process of the namespace

    threading.Thread(target=keepalive, daemon=True).start()
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=_one_sample, args=(conn,), daemon=True).start()


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("serve").add_argument("socket_path")
    sub.add_parser("run").add_argument("fd", type=int)
    args = parser.parse_args()
    serve(args.socket_path) if args.cmd == "serve" else run_answer(args.fd)


if __name__ == "__main__":
    main()
'''

WITH_ANSWER_SANDBOX_SH = r"""#!/bin/bash
# FIXTURE with_answer_sandbox.sh (ptflow tests): main's steps, order and command lines; our text.
#   with_answer_sandbox.sh <sif> <command...>
# Starts answer_sandbox.py's server in a second apptainer container of <sif> (no network, no host filesystems, its own
# PID namespace, an empty environment), waits for its socket, then runs <command> (the evaluation's `apptainer exec`)
# with the socket's directory added to APPTAINER_BIND and APPTAINERENV_ANSWER_SANDBOX_SOCKET set; the sandbox lives as
# long as the command (a keepalive FIFO on the server's stdin).
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 <sif> <command...>" >&2; exit 1; }
SIF="$1"; shift
[ -f "$SIF" ] || { echo "ERROR: container $SIF not found" >&2; exit 1; }
SERVER="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/answer_sandbox.py"
SOCKET_IN_CONTAINERS="/answer_sandbox/answers.sock"
CONTROL_DIR="$(mktemp -d "${TMPDIR:-/tmp}/ptb_answer_sandbox.XXXXXX")"
SOCKET_DIR="${CONTROL_DIR}/socket"; KEEPALIVE_FIFO="${CONTROL_DIR}/keepalive"
mkdir "$SOCKET_DIR"; mkfifo "$KEEPALIVE_FIFO"
SANDBOX_PID=""; KEEPALIVE_FD=""
cleanup() {
    [ -z "$KEEPALIVE_FD" ] || exec {KEEPALIVE_FD}>&-
    if [ -n "$SANDBOX_PID" ]; then
        for _ in $(seq 1 30); do kill -0 "$SANDBOX_PID" 2>/dev/null || break; sleep 1; done
        if kill -0 "$SANDBOX_PID" 2>/dev/null; then
            echo "WARNING: answer sandbox still running 30s after its keepalive closed; killing it" >&2
            kill -9 "$SANDBOX_PID"
        fi
        wait "$SANDBOX_PID" || true
    fi
    rm -rf "$CONTROL_DIR"
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT
SANDBOX_HOME="$(getent passwd "$(id -u)" | cut -d: -f6)"
[ -n "$SANDBOX_HOME" ] || { echo "ERROR: no passwd home directory for uid $(id -u)" >&2; exit 1; }
exec {KEEPALIVE_FD}<>"$KEEPALIVE_FIFO"
(
    trap - EXIT TERM INT
    exec env -i PATH="$PATH" HOME="$SANDBOX_HOME" apptainer exec -c --cleanenv --pid --no-init --net --network none --bind "${SOCKET_DIR}:/answer_sandbox" --bind "${SERVER}:/answer_sandbox.py:ro" "$SIF" python /answer_sandbox.py serve "$SOCKET_IN_CONTAINERS"
) < "$KEEPALIVE_FIFO" {KEEPALIVE_FD}>&- &
SANDBOX_PID=$!
for _ in $(seq 1 120); do
    [ -S "${SOCKET_DIR}/answers.sock" ] && break
    kill -0 "$SANDBOX_PID" 2>/dev/null || { echo "ERROR: answer sandbox exited before it was ready" >&2; exit 1; }
    sleep 1
done
[ -S "${SOCKET_DIR}/answers.sock" ] || { echo "ERROR: answer sandbox not ready after 120s" >&2; exit 1; }
export APPTAINER_BIND="${APPTAINER_BIND:+${APPTAINER_BIND},}${SOCKET_DIR}:/answer_sandbox"
export APPTAINERENV_ANSWER_SANDBOX_SOCKET="$SOCKET_IN_CONTAINERS"
set +e
"$@" {KEEPALIVE_FD}>&-
exit_code=$?
set -e
exit "$exit_code"
"""

WITH_ANSWER_SANDBOX_LOCAL_SH = r"""#!/bin/bash
# FIXTURE with_answer_sandbox_local.sh (ptflow tests): main's steps, order and command lines; our text.
#   with_answer_sandbox_local.sh <command...>
# with_answer_sandbox.sh's contract without apptainer (main's EVAL_RUNTIME=local): the server runs in new user,
# network, PID and mount namespaces (unshare), chrooted into a tmpfs root holding only /usr /lib /lib64 /lib32 /libx32
# /bin /sbin /etc (read-only), /proc, a private /tmp, /dev/{null,zero,random,urandom}, the socket directory and
# answer_sandbox.py, with an empty environment; as nobody when started as root (setpriv). Any step failing: the
# sandbox never starts and <command> never runs. <command> gets ANSWER_SANDBOX_SOCKET.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 <command...>" >&2; exit 1; }
for tool in unshare chroot mount python3; do
    command -v "$tool" > /dev/null || { echo "ERROR: $tool not found; cannot build the answer sandbox" >&2; exit 1; }
done
SERVER="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/answer_sandbox.py"
CONTROL_DIR="$(mktemp -d "${TMPDIR:-/tmp}/ptb_answer_sandbox.XXXXXX")"
SOCKET_DIR="${CONTROL_DIR}/socket"; KEEPALIVE_FIFO="${CONTROL_DIR}/keepalive"
mkdir "$SOCKET_DIR"; mkfifo "$KEEPALIVE_FIFO"
chmod 755 "$CONTROL_DIR"
DROP_PRIVS=()
if [ "$(id -u)" = 0 ]; then
    command -v setpriv > /dev/null || { echo "ERROR: setpriv not found; cannot drop root for the answer sandbox" >&2; exit 1; }
    chown 65534:65534 "$SOCKET_DIR"
    DROP_PRIVS=(setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all)
fi
SANDBOX_PID=""; KEEPALIVE_FD=""
cleanup() {
    [ -z "$KEEPALIVE_FD" ] || exec {KEEPALIVE_FD}>&-
    if [ -n "$SANDBOX_PID" ]; then
        for _ in $(seq 1 30); do kill -0 "$SANDBOX_PID" 2>/dev/null || break; sleep 1; done
        if kill -0 "$SANDBOX_PID" 2>/dev/null; then
            echo "WARNING: answer sandbox still running 30s after its keepalive closed; killing it" >&2
            kill -9 "$SANDBOX_PID"
        fi
        wait "$SANDBOX_PID" || true
    fi
    rm -rf "$CONTROL_DIR"
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT
SANDBOX_SETUP='
set -eu
ROOT="$(mktemp -d)"
mount -t tmpfs -o size=512m,mode=755 none "$ROOT"
for d in usr lib lib64 lib32 libx32 bin sbin etc; do
    [ -e "/$d" ] || continue
    if [ -L "/$d" ]; then ln -s "$(readlink "/$d")" "$ROOT/$d"
    else mkdir "$ROOT/$d"; mount --rbind "/$d" "$ROOT/$d"; mount -o remount,bind,ro "$ROOT/$d"; fi
done
mkdir -p "$ROOT/answer_sandbox" "$ROOT/proc" "$ROOT/tmp" "$ROOT/dev"
mount --bind "$1" "$ROOT/answer_sandbox"
touch "$ROOT/answer_sandbox.py"; mount --bind "$2" "$ROOT/answer_sandbox.py"; mount -o remount,bind,ro "$ROOT/answer_sandbox.py"
mount -t proc proc "$ROOT/proc"
mount -t tmpfs -o mode=1777 none "$ROOT/tmp"
for n in null zero random urandom; do touch "$ROOT/dev/$n"; mount --bind "/dev/$n" "$ROOT/dev/$n"; done
cd /
exec chroot "$ROOT" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/tmp LANG=C.UTF-8 python3 /answer_sandbox.py serve /answer_sandbox/answers.sock
'
exec {KEEPALIVE_FD}<>"$KEEPALIVE_FIFO"
(
    trap - EXIT TERM INT
    exec env -i PATH="$PATH" ${DROP_PRIVS[@]+"${DROP_PRIVS[@]}"} unshare --user --map-root-user --net --pid --fork --mount --propagation private sh -c "$SANDBOX_SETUP" answer-sandbox "$SOCKET_DIR" "$SERVER"
) < "$KEEPALIVE_FIFO" {KEEPALIVE_FD}>&- &
SANDBOX_PID=$!
for _ in $(seq 1 120); do
    [ -S "${SOCKET_DIR}/answers.sock" ] && break
    kill -0 "$SANDBOX_PID" 2>/dev/null || { echo "ERROR: answer sandbox exited before it was ready" >&2; exit 1; }
    sleep 1
done
[ -S "${SOCKET_DIR}/answers.sock" ] || { echo "ERROR: answer sandbox not ready after 120s" >&2; exit 1; }
export ANSWER_SANDBOX_SOCKET="${SOCKET_DIR}/answers.sock"
echo "answer sandbox ready (namespace jail, pid ${SANDBOX_PID}): ${ANSWER_SANDBOX_SOCKET}" >&2
set +e
"$@" {KEEPALIVE_FD}>&-
exit_code=$?
set -e
exit "$exit_code"
"""
SANDBOX_FILES = {
    "src/eval/tasks/humaneval/answer_sandbox.py": ANSWER_SANDBOX_PY,
    "src/eval/tasks/humaneval/with_answer_sandbox.sh": WITH_ANSWER_SANDBOX_SH,
    "src/eval/tasks/humaneval/with_answer_sandbox_local.sh": WITH_ANSWER_SANDBOX_LOCAL_SH,
}


def main_files(evals, agents) -> dict[str, str]:
    """Path -> text of main's protocol files over the fixture checkout."""
    cases = "\n".join(f'        {t}) STAGE_MAX_TOKENS_ARGS=("" "{a}" "{b}") ;;' for t, (a, b) in CASCADES.items())
    files = {
        "src/eval/run_final_eval.sh": RUN_FINAL_EVAL_SH.replace("@SEEDS@", " ".join(map(str, FINAL_EVAL_SEEDS)))
        .replace("@RETRIES@", " ".join(map(str, STAGE_MAX_RETRIES)))
        .replace("@CASCADES@", cases),
        "src/utils/aggregate_seed_metrics.py": AGGREGATE_SEED_METRICS_PY,
        "src/utils/default_temperature.py": DEFAULT_TEMPERATURE_PY,
        "src/judges/judge_lib.sh": JUDGE_LIB_SH.replace("@JUDGES@", " ".join(JUDGES))
        .replace("@MODEL@", JUDGE_MODEL)
        .replace("@EFFORT@", JUDGE_EFFORT)
        .replace("@CODEX@", JUDGE_CODEX_VERSION)
        .replace("@CONTAINER@", JUDGE_CONTAINER),
        "src/judges/get_judge_prompt.py": GET_JUDGE_PROMPT_PY,
        "scripts/collect.py": COLLECT_PY,
        "scripts/aggregate.py": AGGREGATE_PY,
        "scripts/baselines.json": json.dumps(  # STAND-IN values (the real file holds the published baselines)
            {
                "zeroshot": {
                    m: {e: 0.0 for e in evals}
                    for m in ("Qwen3-1.7B-Base", "Qwen3-4B-Base", "SmolLM3-3B-Base", "gemma-3-4b-pt")
                },
                "fewshot": {},
            },
            indent=2,
        )
        + "\n",
    }
    for judge in JUDGES:
        output_id, effect = JUDGE_EFFECTS[judge]
        note = "\n# STAND-IN: general_judge's judge.conf is not in the index" if judge == "general_judge" else ""
        label = f"{JUDGE_MODEL} {judge.removesuffix('_judge').replace('_', ' ')} judge"
        files[f"src/judges/{judge}/judge.conf"] = JUDGE_CONF.format(note=note, label=label, output_id=output_id)
        files[f"src/judges/{judge}/prompt.md"] = JUDGE_PROMPT.format(
            judge=judge, model="{model}", benchmark="{benchmark}", fields=JUDGE_FIELDS[judge]
        )
    for eval_id in evals:
        task = f"src/eval/tasks/{eval_id}"
        files[f"{task}/evaluate_final_eval.py"] = final_eval_py(eval_id)
        if eval_id == "humaneval":
            files.update(SANDBOX_FILES)
        if eval_id in PAID_GRADER:
            files[f"{task}/evaluate_openrouter_final_eval.py"] = final_eval_py(eval_id)
        info = {"benchmark": BENCHMARKS[eval_id], "disallowed_data_examples": [], "allowed_data_examples": []}
        if eval_id in REQUIRED_API_KEYS:
            info["required_api_keys"] = REQUIRED_API_KEYS[eval_id]
        files[f"{task}/info.json"] = json.dumps(info, indent=2) + "\n"
        files[f"{task}/test_data.json"] = json.dumps(questions(eval_id)) + "\n"  # STAND-IN test set
    for agent in agents:
        keys = AGENT_API_KEYS.get(agent, [])
        files[f"agents/{agent}/api_keys.json"] = json.dumps({"allowed_api_keys": keys}, indent=2) + "\n"
    return files


EVALUATION_FILES = (
    "src/eval/run_final_eval.sh",
    "src/utils/aggregate_seed_metrics.py",
    "src/utils/default_temperature.py",
)


def commit_main_evaluation(dest: Path, evals=("gsm8k", "humaneval"), answer_sandbox=tuple(SANDBOX_FILES)) -> str:
    """Commit main's seeded final evaluation ALONE over the fixture checkout at ``dest`` (run_final_eval.sh,
    aggregate_seed_metrics.py, default_temperature.py, each eval's evaluate_final_eval.py, and
    evaluate_openrouter_final_eval.py for the paid-grader evals, humaneval's answer sandbox files of
    ``answer_sandbox``: all by default; fewer for a checkout without them): a checkout whose other parts stay the older
    ones (the judge, run_task.sh's fixed keys, the aggregate_*.py results), for tests of the evaluation part alone."""
    files = main_files(evals, ())
    keep = {rel: text for rel, text in files.items()
            if rel in EVALUATION_FILES or rel.endswith("final_eval.py") or rel in answer_sandbox}  # fmt: skip
    for rel, text in keep.items():
        path = Path(dest) / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        if rel.endswith(".sh"):
            path.chmod(0o755)
    return _commit(
        Path(dest), f"FIXTURE seeded final evaluation of aisa-group/PostTrainBench {PTB_MAIN} (ptflow tests)"
    )


def sandbox_api_keys(checkout: Path, agent: str, task: str, judge_backend: str = "openai") -> list[str]:
    """The keys run_task.sh passes into the agent sandbox (--cleanenv): the agent's allowed_api_keys, then the task's
    required_api_keys, first occurrence kept; OPENROUTER_API_KEY added under the OpenRouter judge backend."""
    agent_keys = json.loads((Path(checkout) / "agents" / agent / "api_keys.json").read_text())["allowed_api_keys"]
    info = json.loads((Path(checkout) / "src/eval/tasks" / task / "info.json").read_text())
    keys = list(dict.fromkeys([*agent_keys, *info.get("required_api_keys", [])]))
    return keys + ["OPENROUTER_API_KEY"] if judge_backend == "openrouter" else keys


def commit_main(dest: Path, evals=("gsm8k", "humaneval"), agents=("claude", "codex", "gemini")) -> str:
    """Commit main's protocol files over the fixture checkout at ``dest`` (after ``commit_judge_v11``): the judge
    tools move to src/judges/judge_tools/, src/disallowed_usage_judge/ goes; returns the new commit."""
    dest = Path(dest)
    old = dest / "src/disallowed_usage_judge"
    if not old.is_dir():
        raise FileNotFoundError(f"{old}: commit_main goes over commit_judge_v11's checkout")
    (dest / "src/judges").mkdir(parents=True, exist_ok=True)
    shutil.move(old / "judge_tools", dest / "src/judges/judge_tools")
    shutil.rmtree(old)
    for rel, text in main_files(evals, agents).items():
        path = dest / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        if rel.endswith(".sh"):
            path.chmod(0o755)
    return _commit(dest, f"FIXTURE protocol of aisa-group/PostTrainBench {PTB_MAIN} (ptflow tests)")
