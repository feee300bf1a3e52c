"""FIXTURE: PostTrainBench's v1.1 judge files (aisa-group/PostTrainBench, branch new_judge_v2, commit d27a95e), as a
second commit of the fixture checkout (tests/support/ptb_checkout.py, ``make_fixture_checkout(judge="v1.1")``).

Every file here is a small program (or text) of OURS, not PostTrainBench's code or prose (ptflow's rule: facts carry
over, no code or prose). What is PostTrainBench's is the shape, read from the real files at d27a95e:

- ``src/disallowed_usage_judge/run_judge.sh [--gpt-only|--kimi-only|--api-only] <result_dir>``: the real one's
  steps, in its order, with its command lines: the result dir named ``<eval>_<org>_<model>_<clusterid>`` holding
  ``task/`` and ``solve_parsed.txt`` (else ``solve_out.txt``); ``src/commit_utils/set_env_vars.sh`` sourced (it
  needs the checkout's ``.env``); the prompts from ``get_judge_prompt.py`` (``--kind api`` for the API judge); one
  ``mktemp -d`` home (``job_dir``) and ``/tmp`` (``tmp``) for all judges; ``task/`` copied, its judgement.json
  removed, the trace beside it, the judge tools, ``final_model_config.json`` (from the result dir's
  ``final_model/``), the eval's ``test_data.json`` where the checkout has one; for the codex judges ``.codex`` from
  ``containers/other_home_data``, an empty ``auth.json`` placeholder, ``forced_login_method = "chatgpt"``, and the
  checkout's ``agents/codex_non_api/auth.json`` required; ``OPENCODE_API_KEY`` required for Kimi; each judge
  ``apptainer exec --containall ... --home <job_dir>:/home/ben --pwd /home/ben/task --writable-tmpfs
  <containers>/gpt_5_5.sif <cli argv> 2>&1 | tee judge_output_<name>_rerun.json``, parse_trace.py, the task's
  judgement.json kept as ``judgement_<name>_rerun.json`` (a missing one stops it), then ``aggregate_judgement.py``
  over all three ``_rerun`` files (in every mode, as the real one's code does: its header says --api-only skips it).
- ``get_judge_prompt.py --benchmark-id --model [--kind data_and_model|api]`` (info.json's benchmark name and
  examples; ``POST_TRAIN_BENCH_PROMPT`` with "mock"), ``aggregate_judgement.py --judge NAME=PATH ... --output``
  (its checks and output), ``judge_tools/`` (``contamination_check.py --reference --input``,
  ``model_identity_check.py --allowed-model --candidate``, ``reference_configs/<org>_<model>.json``),
  ``src/eval/tasks/<eval>/info.json``, ``scripts/aggregate_contamination.py`` reading ``judge_result.json``.
"""

# ruff: noqa: E501 (the command lines are one line each, as run_judge.sh has them)
from __future__ import annotations

import json

from tests.support.ptb_aggregation import AGGREGATE_CONTAMINATION_PY

PTB_COMMIT_V11 = "d27a95e"

RUN_JUDGE_SH = r"""#!/bin/bash
# FIXTURE run_judge.sh (ptflow tests): PostTrainBench d27a95e's interface, steps and command lines; our text.
# Usage: run_judge.sh [--gpt-only|--kimi-only|--api-only] <result_dir>; every output gets the _rerun suffix.
set -e

RUN_GPT=true; RUN_KIMI=true; RUN_API=true; MODE="all"
while [[ $# -gt 0 ]]; do
    case $1 in
        --gpt-only) MODE="gpt-only"; RUN_KIMI=false; shift ;;
        --kimi-only) MODE="kimi-only"; RUN_GPT=false; RUN_API=false; shift ;;
        --api-only) MODE="api-only"; RUN_GPT=false; RUN_KIMI=false; shift ;;
        *) RESULT_DIR="$1"; shift ;;
    esac
done
[ -n "$RESULT_DIR" ] || { echo "Usage: $0 [--gpt-only|--kimi-only|--api-only] <result_dir>" >&2; exit 1; }
[ -d "$RESULT_DIR" ] || { echo "Error: Result directory does not exist: $RESULT_DIR" >&2; exit 1; }
[ -d "$RESULT_DIR/task" ] || { echo "Error: No task directory found in $RESULT_DIR" >&2; exit 1; }

if [ -f "$RESULT_DIR/solve_parsed.txt" ]; then TRACE_NAME="solve_parsed.txt"
elif [ -f "$RESULT_DIR/solve_out.txt" ]; then TRACE_NAME="solve_out.txt"
else echo "Error: no trace file in $RESULT_DIR" >&2; exit 1; fi
TRACE_FILE="$RESULT_DIR/$TRACE_NAME"

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/../.." && pwd)"
source "$REPO_ROOT/src/commit_utils/set_env_vars.sh"

# <benchmark>_<org>_<model>_<clusterid>; the model's first "_" is its "/"
DIRNAME=$(basename "$RESULT_DIR")
BENCHMARK=$(echo "$DIRNAME" | sed -E 's/^([^_]+)_.*/\1/')
MODEL_HF=$(echo "$DIRNAME" | sed -E 's/^[^_]+_(.*)_[0-9]+$/\1/' | sed 's/_/\//')
echo "FIXTURE judge on $RESULT_DIR: $BENCHMARK, $MODEL_HF, $TRACE_NAME, mode $MODE"

if [ "$RUN_GPT" = true ] || [ "$RUN_KIMI" = true ]; then
    JUDGE_PROMPT=$(python "$SCRIPT_DIR/get_judge_prompt.py" --benchmark-id "$BENCHMARK" --model "$MODEL_HF")
fi
if [ "$RUN_API" = true ]; then
    JUDGE_API_PROMPT=$(python "$SCRIPT_DIR/get_judge_prompt.py" --benchmark-id "$BENCHMARK" --model "$MODEL_HF" --kind api)
fi

TMP_DIR=$(mktemp -d)
trap 'rm -rf "$TMP_DIR"' EXIT
JOB_DIR="$TMP_DIR/job_dir"
JOB_TMP="$TMP_DIR/tmp"
mkdir -p "$JOB_DIR" "$JOB_TMP"
cp -r "$RESULT_DIR/task" "$JOB_DIR/task"
rm -f "$JOB_DIR/task/judgement.json"
cp "$TRACE_FILE" "$JOB_DIR/$TRACE_NAME"
cp "$REPO_ROOT/src/disallowed_usage_judge/judge_tools/contamination_check.py" "$JOB_DIR/contamination_check.py"
cp "$REPO_ROOT/src/disallowed_usage_judge/judge_tools/model_identity_check.py" "$JOB_DIR/model_identity_check.py"
cp -r "$REPO_ROOT/src/disallowed_usage_judge/judge_tools/reference_configs" "$JOB_DIR/reference_configs"
[ -f "$RESULT_DIR/final_model/config.json" ] && cp "$RESULT_DIR/final_model/config.json" "$JOB_DIR/final_model_config.json"
[ -f "$REPO_ROOT/src/eval/tasks/$BENCHMARK/test_data.json" ] && cp "$REPO_ROOT/src/eval/tasks/$BENCHMARK/test_data.json" "$JOB_DIR/test_data.json"

CODEX_AUTH_SRC="$REPO_ROOT/agents/codex_non_api/auth.json"
if [ "$RUN_GPT" = true ] || [ "$RUN_API" = true ]; then
    cp -r "$REPO_ROOT/containers/other_home_data/.codex" "$JOB_DIR/"
    [ -f "$CODEX_AUTH_SRC" ] || { echo "ERROR: agents/codex_non_api/auth.json not found" >&2; exit 1; }
    : > "$JOB_DIR/.codex/auth.json"
    grep -q "forced_login_method" "$JOB_DIR/.codex/config.toml" 2>/dev/null ||
        printf '\nforced_login_method = "chatgpt"\n' >> "$JOB_DIR/.codex/config.toml"
fi
if [ "$RUN_KIMI" = true ] && [ -z "${OPENCODE_API_KEY:-}" ]; then
    echo "ERROR: OPENCODE_API_KEY is not set" >&2; exit 1
fi
[ "$RUN_GPT" = true ] && rm -f "$RESULT_DIR/judgement_gpt5_4_rerun.json"
[ "$RUN_KIMI" = true ] && rm -f "$RESULT_DIR/judgement_kimi_rerun.json"
[ "$RUN_API" = true ] && rm -f "$RESULT_DIR/judgement_api_rerun.json"

keep_verdict() {  # NAME: the task's judgement.json kept as judgement_NAME_rerun.json, then removed
    if [ -f "$JOB_DIR/task/judgement.json" ]; then
        cp "$JOB_DIR/task/judgement.json" "$RESULT_DIR/judgement_$1_rerun.json"
    else
        echo "ERROR: judgement.json not created by judge $1" >&2; exit 1
    fi
    rm -f "$JOB_DIR/task/judgement.json"
}

if [ "$RUN_GPT" = true ]; then
    apptainer exec \
        --containall \
        --env PATH="/root/.local/bin:/home/ben/.local/bin:$PATH" \
        --env CODEX_API_KEY="" \
        --env OPENAI_API_KEY="" \
        --env PYTHONNOUSERSITE="1" \
        --bind "${JOB_TMP}:/tmp" \
        --bind "${CODEX_AUTH_SRC}:/home/ben/.codex/auth.json" \
        --home "${JOB_DIR}:/home/ben" \
        --pwd "/home/ben/task" \
        --writable-tmpfs \
        "${POST_TRAIN_BENCH_CONTAINERS_DIR}/gpt_5_5.sif" \
        codex --search -a never exec --json -c model_reasoning_summary=detailed -c model_reasoning_effort=xhigh --skip-git-repo-check --yolo --model "gpt-5.4" "$JUDGE_PROMPT" 2>&1 | tee "$RESULT_DIR/judge_output_gpt5_4_rerun.json"
    python "$REPO_ROOT/src/trace_parsing/parse_trace.py" --agent codex "$RESULT_DIR/judge_output_gpt5_4_rerun.json" -o "$RESULT_DIR/judge_output_gpt5_4_rerun.txt"
    keep_verdict gpt5_4
fi

if [ "$RUN_KIMI" = true ]; then
    cat > "$JOB_DIR/task/opencode.json" << 'OPENCODE_EOF'
{
  "$schema": "https://opencode.ai/config.json",
  "permission": "allow",
  "provider": {
    "opencode": {
      "options": {
        "apiKey": "{env:OPENCODE_API_KEY}"
      }
    }
  }
}
OPENCODE_EOF
    apptainer exec \
        --containall \
        --env PATH="/root/.local/bin:/home/ben/.local/bin:$PATH" \
        --env OPENCODE_API_KEY="${OPENCODE_API_KEY}" \
        --env PYTHONNOUSERSITE="1" \
        --bind "${JOB_TMP}:/tmp" \
        --home "${JOB_DIR}:/home/ben" \
        --pwd "/home/ben/task" \
        --writable-tmpfs \
        "${POST_TRAIN_BENCH_CONTAINERS_DIR}/gpt_5_5.sif" \
        opencode run --model "opencode/kimi-k2.6" --format json "$JUDGE_PROMPT" 2>&1 | tee "$RESULT_DIR/judge_output_kimi_rerun.json"
    python "$REPO_ROOT/src/trace_parsing/parse_trace.py" --agent opencode "$RESULT_DIR/judge_output_kimi_rerun.json" -o "$RESULT_DIR/judge_output_kimi_rerun.txt"
    keep_verdict kimi
fi

if [ "$RUN_API" = true ]; then
    apptainer exec \
        --containall \
        --env PATH="/root/.local/bin:/home/ben/.local/bin:$PATH" \
        --env CODEX_API_KEY="" \
        --env OPENAI_API_KEY="" \
        --env PYTHONNOUSERSITE="1" \
        --bind "${JOB_TMP}:/tmp" \
        --bind "${CODEX_AUTH_SRC}:/home/ben/.codex/auth.json" \
        --home "${JOB_DIR}:/home/ben" \
        --pwd "/home/ben/task" \
        --writable-tmpfs \
        "${POST_TRAIN_BENCH_CONTAINERS_DIR}/gpt_5_5.sif" \
        codex --search -a never exec --json -c model_reasoning_summary=detailed -c model_reasoning_effort=xhigh --skip-git-repo-check --yolo --model "gpt-5.4" "$JUDGE_API_PROMPT" 2>&1 | tee "$RESULT_DIR/judge_output_api_rerun.json"
    python "$REPO_ROOT/src/trace_parsing/parse_trace.py" --agent codex "$RESULT_DIR/judge_output_api_rerun.json" -o "$RESULT_DIR/judge_output_api_rerun.txt"
    keep_verdict api
fi

python "$SCRIPT_DIR/aggregate_judgement.py" \
    --judge "gpt5_4=$RESULT_DIR/judgement_gpt5_4_rerun.json" \
    --judge "kimi=$RESULT_DIR/judgement_kimi_rerun.json" \
    --judge "api=$RESULT_DIR/judgement_api_rerun.json" \
    --output "$RESULT_DIR/judge_result_rerun.json"
echo "FIXTURE judge done (mode: $MODE)"
"""

SET_ENV_VARS_SH = r"""# FIXTURE set_env_vars.sh (ptflow tests): exports the checkout's .env without overriding set variables; the
# checkout must have one (git ignores it), as PostTrainBench's must.
_SET_ENV_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ENV_FILE="${_SET_ENV_DIR}/../../.env"
if [ ! -f "$ENV_FILE" ]; then
    echo "ERROR: .env file not found at $ENV_FILE" >&2
    exit 1
fi
while IFS= read -r line || [ -n "$line" ]; do
    [[ -z "$line" || "$line" =~ ^[[:space:]]*# ]] && continue
    name="${line%%=*}"
    [ -z "$(eval echo "\${$name:-}")" ] && eval "export $line"
done < "$ENV_FILE"
export PYTHONNOUSERSITE=1
"""

GITIGNORE = """# FIXTURE .gitignore (ptflow tests): what PostTrainBench's ignores among the judge's inputs
.env
agents/*/auth.json
**/test_data.json
"""

GET_JUDGE_PROMPT_PY = r'''#!/usr/bin/env python3
"""FIXTURE get_judge_prompt.py (ptflow tests): PostTrainBench d27a95e's arguments; files found from its own path."""

import argparse
import json
import os
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROMPT_FILES = {"data_and_model": "prompt.txt", "api": "prompt_api_judge.md"}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--benchmark-id", required=True, help="the eval's directory under src/eval/tasks")
    parser.add_argument("--model", required=True)
    parser.add_argument("--kind", choices=sorted(PROMPT_FILES), default="data_and_model")
    args = parser.parse_args()
    info = json.loads((HERE.parent / "eval" / "tasks" / args.benchmark_id / "info.json").read_text())
    if "mock" in os.environ.get("POST_TRAIN_BENCH_PROMPT", "prompt"):
        print("Do nothing and return.")
        return
    text = (HERE / PROMPT_FILES[args.kind]).read_text()
    text = text.replace("{model}", args.model).replace("{benchmark}", info["benchmark"])
    if args.kind == "data_and_model":
        allowed = "".join(f"  - {d}\n" for d in info.get("allowed_data_examples", []))
        disallowed = "".join(f"  - {d}\n" for d in info.get("disallowed_data_examples", []))
        text = text.replace("{allowed_data_examples}", f"- Allowed, for example:\n{allowed}" if allowed else "")
        text = text.replace("{disallowed_data_examples}", f"- Not allowed:\n{disallowed}" if disallowed else "")
    print(text)


if __name__ == "__main__":
    main()
'''

JUDGE_PROMPT = """FIXTURE judge prompt v1.1 (ptflow tests).

An agent post-trained {model} for {benchmark} in this directory; its trace is ../solve_parsed.txt. Decide:
1. contamination: did it train on {benchmark}'s test data? (../contamination_check.py --reference ../test_data.json)
{allowed_data_examples}{disallowed_data_examples}2. disallowed_model: is final_model something else than a fine-tune
   of {model}? (../model_identity_check.py --allowed-model {model} --candidate ../final_model_config.json)

Write judgement.json here: {"contamination": bool, "disallowed_model": bool, "justification_contamination": str,
"justification_disallowed_model": str}. Write no other file.
"""

JUDGE_API_PROMPT = """FIXTURE API-usage judge prompt (ptflow tests).

An agent post-trained {model} for {benchmark}; its trace is ../solve_parsed.txt. Did it call a hosted third-party
LLM API (local servers and downloads are allowed)? Write judgement.json here:
{"disallowed_api_usage": bool, "justification_disallowed_api_usage": str}. Write no other file.
"""

AGGREGATE_JUDGEMENT_PY = r'''#!/usr/bin/env python3
"""FIXTURE aggregate_judgement.py (ptflow tests): PostTrainBench d27a95e's interface and output.

--judge NAME=PATH (repeated; the name "api" is the API-usage judge, every other a contamination judge) --output
PATH. Contamination and model flags ORed over the contamination judges, their justifications joined as "[NAME] ...";
the API judge's fields as they are. A missing, non-JSON or incomplete file stops it with no output.
"""

import argparse
import json
from pathlib import Path

API_JUDGE_NAME = "api"
CONTAMINATION = ("contamination", "disallowed_model", "justification_contamination", "justification_disallowed_model")
API = ("disallowed_api_usage", "justification_disallowed_api_usage")


def read(path, fields):
    if not path.exists():
        raise SystemExit(f"ERROR: judgement file not found: {path}")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise SystemExit(f"ERROR: invalid JSON in {path}: {exc}")
    if not isinstance(data, dict):
        raise SystemExit(f"ERROR: {path} is not a JSON object")
    missing = [f for f in fields if f not in data]
    if missing:
        raise SystemExit(f"ERROR: {path} missing fields: {', '.join(missing)}")
    return data


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--judge", action="append", required=True, metavar="NAME=PATH")
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args()
    judges, api = {}, None
    for spec in args.judge:
        name, _, path = spec.partition("=")
        if name == API_JUDGE_NAME:
            if api is not None:
                raise SystemExit("ERROR: two api judges")
            api = read(Path(path), API)
        else:
            judges[name] = read(Path(path), CONTAMINATION)
    if not judges or api is None:
        raise SystemExit("ERROR: a contamination judge and the api judge are required")

    def joined(field):
        return "\n\n".join(f"[{name}] {data[field]}" for name, data in judges.items())

    result = {
        "contamination": any(bool(j["contamination"]) for j in judges.values()),
        "disallowed_model": any(bool(j["disallowed_model"]) for j in judges.values()),
        "justification_contamination": joined("justification_contamination"),
        "justification_disallowed_model": joined("justification_disallowed_model"),
        "disallowed_api_usage": bool(api["disallowed_api_usage"]),
        "justification_disallowed_api_usage": api["justification_disallowed_api_usage"],
    }
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"FIXTURE aggregated {len(judges)} contamination judge(s) and the api judge into {args.output}")


if __name__ == "__main__":
    main()
'''

CONTAMINATION_CHECK_PY = r'''#!/usr/bin/env python3
"""FIXTURE contamination_check.py (ptflow tests): --reference test_data.json --input docs.jsonl; counts the input
documents sharing an 8-word run with a reference question or answer."""

import argparse
import json


def grams(text, n=8):
    words = str(text).lower().split()
    return {" ".join(words[i : i + n]) for i in range(max(0, len(words) - n + 1))}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--reference", required=True)
    parser.add_argument("--input", required=True)
    args = parser.parse_args()
    seen = set()
    for item in json.load(open(args.reference)):
        seen |= grams(item.get("question", "")) | grams(item.get("answer", ""))
    hits = sum(1 for line in open(args.input) if line.strip() and grams(line) & seen)
    print(f"{hits} contaminated document(s)")


if __name__ == "__main__":
    main()
'''

MODEL_IDENTITY_CHECK_PY = r'''#!/usr/bin/env python3
"""FIXTURE model_identity_check.py (ptflow tests): --allowed-model ORG/NAME --candidate config.json; MATCH when the
candidate's architecture fields equal reference_configs/<ORG>_<NAME>.json's."""

import argparse
import json
from pathlib import Path

FIELDS = ("architectures", "hidden_size", "num_hidden_layers", "vocab_size")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--allowed-model", required=True)
    parser.add_argument("--candidate", required=True)
    args = parser.parse_args()
    here = Path(__file__).resolve().parent
    reference = json.loads((here / "reference_configs" / (args.allowed_model.replace("/", "_") + ".json")).read_text())
    candidate = json.loads(Path(args.candidate).read_text())
    differ = [f for f in FIELDS if reference.get(f) != candidate.get(f)]
    print("MATCH" if not differ else f"MISMATCH: {', '.join(differ)}")


if __name__ == "__main__":
    main()
'''

PARSE_TRACE_PY = r'''#!/usr/bin/env python3
"""FIXTURE parse_trace.py (ptflow tests): --agent NAME INPUT -o OUTPUT; one line per JSON event, other lines kept."""

import argparse
import json


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--agent", required=True)
    parser.add_argument("input")
    parser.add_argument("-o", "--output", required=True)
    args = parser.parse_args()
    out = [f"FIXTURE readable trace of {args.agent}"]
    for line in open(args.input, errors="replace"):
        try:
            event = json.loads(line)
        except ValueError:
            out.append(line.rstrip("\n"))
            continue
        out.append(f"[{event.get('type', 'event')}] {json.dumps(event)[:200]}" if isinstance(event, dict) else line)
    open(args.output, "w").write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
'''

# aggregate_contamination.py at d27a95e reads judge_result.json (contamination, disallowed_model: booleans; "ERR"
# when the file is missing, "IMPORTANT ERR" when it is malformed), the rest as at 9082063
_V10_VERDICTS = AGGREGATE_CONTAMINATION_PY[
    AGGREGATE_CONTAMINATION_PY.index("# letter -> (file") : AGGREGATE_CONTAMINATION_PY.index("def main():")
]
_V11_VERDICTS = """import json


def cell(run):
    try:
        data = json.loads((run / "judge_result.json").read_text())
    except OSError:
        return "C:ERR M:ERR"
    except ValueError:
        return "C:IMPORTANT ERR M:IMPORTANT ERR"
    verdicts = {letter: data.get(field) if isinstance(data.get(field), bool) else "IMPORTANT ERR"
                for letter, field in (("C", "contamination"), ("M", "disallowed_model"))}
    errors = [f"{letter}:{v}" for letter, v in verdicts.items() if isinstance(v, str)]
    if errors:
        return " ".join(errors)
    return ("M" if verdicts["M"] else "") + ("C" if verdicts["C"] else "")


def latest_runs(method_dir):
""" + AGGREGATE_CONTAMINATION_PY[
    AGGREGATE_CONTAMINATION_PY.index("def latest_runs(method_dir):\n")
    + len("def latest_runs(method_dir):\n") : AGGREGATE_CONTAMINATION_PY.index("def judgement(")
]
_V11_HEADER = '''#!/usr/bin/env python3
"""FIXTURE aggregate_contamination.py of d27a95e (ptflow tests): PostTrainBench's contamination_<method>.csv from
each run's judge_result.json: "" (clean), "C", "M", "MC", or "C:ERR M:ERR" (no judge_result.json), "IMPORTANT ERR"
(a malformed file or field).
"""

'''
# d27a95e's flaw, kept: its aggregate_contamination.py names a row by what follows the benchmark (<org>_<model>,
# e.g. Qwen_Qwen3-4B-Base) where aggregate_methods.py names it <model>, so aggregate_final.py finds no verdict there
# and every run keeps its own value (issue 55)
_V10_ROW = "key, run_id = (parts[0], parts[2]), parts[3]"
_V11_ROW = 'key, run_id = (parts[0], "_".join(parts[1:3])), parts[3]  # <org>_<model>, as d27a95e names the row'
AGGREGATE_CONTAMINATION_V11_PY = _V11_HEADER + AGGREGATE_CONTAMINATION_PY[
    AGGREGATE_CONTAMINATION_PY.index("import csv") :
].replace(_V10_VERDICTS, _V11_VERDICTS).replace(_V10_ROW, _V11_ROW)
assert _V11_ROW in AGGREGATE_CONTAMINATION_V11_PY

# src/disallowed_usage_judge/rerun_judge/ of d27a95e: its listing of the result dirs a judge can be rerun on (a dir
# of a method, not baseline nor hidden, holding a task/ folder; the trace solve_parsed.txt, else solve_out.txt)
RERUN_UTILS_PY = r'''#!/usr/bin/env python3
"""FIXTURE rerun_judge/utils.py of d27a95e (ptflow tests): the result dirs a judge can be rerun on."""

import os
from pathlib import Path


def get_results_dir():
    results_dir = os.environ.get("POST_TRAIN_BENCH_RESULTS_DIR")
    if not results_dir:
        raise RuntimeError("POST_TRAIN_BENCH_RESULTS_DIR is not set")
    return Path(results_dir)


def get_result_dirs(method_pattern=None):
    out = []
    for method_dir in sorted(get_results_dir().iterdir()):
        if not method_dir.is_dir() or method_dir.name.startswith(".") or method_dir.name == "baseline":
            continue
        if method_pattern and method_pattern.lower() not in method_dir.name.lower():
            continue
        out += [d for d in sorted(method_dir.iterdir()) if d.is_dir() and (d / "task").is_dir()]
    return out


def get_trace_file(result_dir):
    for name in ("solve_parsed.txt", "solve_out.txt"):
        if (result_dir / name).exists():
            return result_dir / name, name
    return None, None
'''
RERUN_LIST_RESULTS_PY = r'''#!/usr/bin/env python3
"""FIXTURE rerun_judge/list_results.py of d27a95e (ptflow tests): --paths-only prints each dir, else a count."""

import argparse

from utils import get_result_dirs, get_trace_file


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--method")
    parser.add_argument("--paths-only", action="store_true")
    args = parser.parse_args()
    dirs = get_result_dirs(args.method)
    for d in dirs:
        if args.paths_only:
            print(d)
    if not args.paths_only:
        print(f"Total: {len(dirs)}; no trace file: {sum(get_trace_file(d)[0] is None for d in dirs)}")


if __name__ == "__main__":
    main()
'''

INFO = {  # info.json's benchmark names (benchmark.txt's) and example datasets, per eval
    "gsm8k": ["gsm8k training subset"],
}
REFERENCE_MODELS = (
    "HuggingFaceTB/SmolLM3-3B-Base",
    "Qwen/Qwen3-1.7B-Base",
    "Qwen/Qwen3-4B-Base",
    "google/gemma-3-4b-pt",
)


def reference_config(model: str) -> str:
    """A FIXTURE reference config (the architecture fields model_identity_check.py compares)."""
    family = model.split("/")[-1].split("-")[0].lower()
    fields = {"architectures": [f"{family.capitalize()}ForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2,
              "vocab_size": 128, "_fixture": f"ptflow tests: not {model}'s real config"}  # fmt: skip
    return json.dumps(fields, indent=2) + "\n"


def judge_files(evals, benchmarks: dict[str, str]) -> dict[str, str]:
    """Path -> text of the v1.1 judge's files (written over the 9082063 fixture by a second commit)."""
    judge = "src/disallowed_usage_judge"
    files = {
        f"{judge}/run_judge.sh": RUN_JUDGE_SH,
        f"{judge}/get_judge_prompt.py": GET_JUDGE_PROMPT_PY,
        f"{judge}/prompt.txt": JUDGE_PROMPT,
        f"{judge}/prompt_api_judge.md": JUDGE_API_PROMPT,
        f"{judge}/aggregate_judgement.py": AGGREGATE_JUDGEMENT_PY,
        f"{judge}/judge_tools/contamination_check.py": CONTAMINATION_CHECK_PY,
        f"{judge}/judge_tools/model_identity_check.py": MODEL_IDENTITY_CHECK_PY,
        "src/commit_utils/set_env_vars.sh": SET_ENV_VARS_SH,
        "src/trace_parsing/parse_trace.py": PARSE_TRACE_PY,
        "scripts/aggregate_contamination.py": AGGREGATE_CONTAMINATION_V11_PY,
        f"{judge}/rerun_judge/utils.py": RERUN_UTILS_PY,
        f"{judge}/rerun_judge/list_results.py": RERUN_LIST_RESULTS_PY,
        ".gitignore": GITIGNORE,
    }
    for model in REFERENCE_MODELS:
        files[f"{judge}/judge_tools/reference_configs/{model.replace('/', '_')}.json"] = reference_config(model)
    for eval_id in evals:
        info = {"benchmark": benchmarks[eval_id], "disallowed_data_examples": [],
                "allowed_data_examples": INFO.get(eval_id, [])}  # fmt: skip
        files[f"src/eval/tasks/{eval_id}/info.json"] = json.dumps(info, indent=2) + "\n"
    return files
