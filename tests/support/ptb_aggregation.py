"""FIXTURE: the ``scripts/`` of the stand-in PostTrainBench checkout (``tests.support.ptb_checkout``): its
aggregation, from a results directory of run dirs to the leaderboard's number, and over repeated runs.

Every script here is a small program of OURS with the interface, outputs and flaws of PostTrainBench's own at
commit 9082063 (aisa-group/PostTrainBench): the file names, ``$POST_TRAIN_BENCH_RESULTS_DIR``, the CSVs they write
and where they stop. They are run from the checkout's root as ``python scripts/<name>.py``, as PostTrainBench runs
them.

Repeats, as PostTrainBench aggregates them at 9082063: every run of an agent is a method of its own
(``<agent>_<model>_<N>h_run<k>``), and ``scripts/constants.py``'s ``HARDCODED_AGENT_MAP`` names which methods are
runs of one agent (to add an agent one adds its run dirs' names there; the shipped map names PostTrainBench's own
runs). ``compute_single_metrics_avg_stddev.py`` scores each four-model ``final_<method>.csv`` as
``compute_single_metrics.py`` does, then writes each agent's mean and sample sd (n-1) over its runs;
``aggregate_avg_stddev_over_benchmarks.py`` writes, per benchmark, the mean and sample sd over runs of each run's mean
over its models. Both stop on a method of the map that has no table or no score (a KeyError there) and on an agent
of one run (the n-1 divides by zero there). Not imitated: ``aggregate_avg_stddev.py`` (the same per model and
benchmark) and ``aggregate_time_avg_stddev.py``.
"""

from __future__ import annotations

import json

from tests.support.posttrainbench import FACTORS

AGGREGATE_METHODS_PY = r'''#!/usr/bin/env python3
"""FIXTURE aggregate_methods.py (ptflow tests): PostTrainBench's interface and aggregated_<method>.csv.

Every directory in $POST_TRAIN_BENCH_RESULTS_DIR (default results) is a method; its run directories are named
<benchmark>_<org>_<model>_<runid>, and the newest run id of each (benchmark, model) is the one that counts.
"""

import argparse
import csv
import json
import os
from pathlib import Path

BASELINE = "baseline_zeroshot"


def latest_runs(method_dir, min_run_id=None, max_run_id=None):
    runs = {}
    for run in sorted(method_dir.iterdir()):
        if not run.is_dir():
            continue
        parts = run.name.split("_")
        if len(parts) != 4 or not parts[3].isdigit():
            raise ValueError(f"{run}: not named <benchmark>_<org>_<model>_<runid>")
        benchmark, _, model, run_id = parts[0], parts[1], parts[2], int(parts[3])
        if (min_run_id is not None and run_id < min_run_id) or (max_run_id is not None and run_id >= max_run_id):
            continue
        if (benchmark, model) not in runs or run_id > runs[benchmark, model][0]:
            runs[benchmark, model] = (run_id, run)
    return {key: run for key, (_, run) in runs.items()}


def cell(run, method):
    try:
        accuracy = json.loads((run / "metrics.json").read_text()).get("accuracy")
    except (OSError, ValueError, AttributeError):
        accuracy = None
    if accuracy is not None:
        return str(accuracy)
    if method == BASELINE:
        return "ERR"
    if not (run / "time_taken.txt").exists():
        return "not avl."
    if not (run / "final_model").is_dir():
        return "not stored"
    return "ERR"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--min-run-id", type=int, default=None, help="inclusive")
    parser.add_argument("--max-run-id", type=int, default=None, help="exclusive")
    args = parser.parse_args()
    results = Path(os.environ.get("POST_TRAIN_BENCH_RESULTS_DIR", "results"))
    for method_dir in sorted(p for p in results.iterdir() if p.is_dir()):
        runs = latest_runs(method_dir, args.min_run_id, args.max_run_id)
        if not runs:
            continue
        benchmarks = sorted({b for b, _ in runs})
        models = sorted({m for _, m in runs})
        out = results / f"aggregated_{method_dir.name}.csv"
        with open(out, "w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(["model", *benchmarks])
            for model in models:
                row = [cell(runs[b, model], method_dir.name) if (b, model) in runs else "" for b in benchmarks]
                writer.writerow([model, *row])
        print(f"Written: {out}")


if __name__ == "__main__":
    main()
'''

AGGREGATE_CONTAMINATION_PY = r'''#!/usr/bin/env python3
"""FIXTURE aggregate_contamination.py (ptflow tests): PostTrainBench's contamination_<method>.csv.

A cell is "" (clean), "C" (contamination), "M" (disallowed model use), "MC" (both), or the errors, such as
"C:ERR M:ERR" (judgement file missing) or "C:IMPORTANT ERR" (a file that holds neither phrase).
"""

import csv
import os
from pathlib import Path

# letter -> (file, phrase when flagged, phrase when clean)
JUDGEMENTS = {
    "C": ("contamination_judgement.txt", "contamination detected", "no contamination detected"),
    "M": ("disallowed_model_judgement.txt", "disallowed use detected", "only allowed use detected"),
}


def latest_runs(method_dir):
    runs = {}
    for run in sorted(method_dir.iterdir()):
        if not run.is_dir():
            continue
        parts = run.name.split("_")
        if len(parts) != 4:
            raise ValueError(f"{run}: not named <benchmark>_<org>_<model>_<runid>")
        # compared as text, as PostTrainBench's aggregate_contamination.py does ('9' > '10'); aggregate_methods.py
        # compares numbers, so with run ids of different lengths the two may pick different runs
        key, run_id = (parts[0], parts[2]), parts[3]
        if key not in runs or run_id > runs[key][0]:
            runs[key] = (run_id, run)
    return {key: run for key, (_, run) in runs.items()}


def judgement(run, name, flagged, clean):
    try:
        text = (run / name).read_text().strip()
    except OSError:
        return "ERR"
    return True if text == flagged else False if text == clean else "IMPORTANT ERR"


def cell(run):
    verdicts = {letter: judgement(run, *spec) for letter, spec in JUDGEMENTS.items()}
    errors = [f"{letter}:{v}" for letter, v in verdicts.items() if isinstance(v, str)]
    if errors:
        return " ".join(errors)
    return ("M" if verdicts["M"] else "") + ("C" if verdicts["C"] else "")


def main():
    results = Path(os.environ.get("POST_TRAIN_BENCH_RESULTS_DIR", "results"))
    for method_dir in sorted(p for p in results.iterdir() if p.is_dir()):
        runs = latest_runs(method_dir)
        if not runs:
            continue
        benchmarks = sorted({b for b, _ in runs})
        models = sorted({m for _, m in runs})
        out = results / f"contamination_{method_dir.name}.csv"
        with open(out, "w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(["model", *benchmarks])
            for model in models:
                writer.writerow([model, *[cell(runs[b, model]) if (b, model) in runs else "" for b in benchmarks]])
        print(f"Written: {out}")


if __name__ == "__main__":
    main()
'''

AGGREGATE_FINAL_PY = r'''#!/usr/bin/env python3
"""FIXTURE aggregate_final.py (ptflow tests): PostTrainBench's final_<method>.csv.

A method's cell is replaced by baseline_zeroshot's cell of the same model and benchmark when it is not a number or
its contamination cell is not empty.
"""

import argparse
import csv
import os
from pathlib import Path

BASELINE = "baseline_zeroshot"


def read_table(path):
    """({model: {benchmark: cell}}, benchmarks) of a CSV, or ({}, []) when it does not exist."""
    if not path.exists():
        return {}, []
    with open(path, newline="") as fh:
        rows = [row for row in csv.reader(fh) if row]
    if not rows:
        return {}, []
    benchmarks = rows[0][1:]
    width = len(rows[0])
    padded = [row + [""] * (width - len(row)) for row in rows[1:]]
    return {row[0]: dict(zip(benchmarks, row[1:width], strict=True)) for row in padded}, benchmarks


def is_number(text):
    try:
        float(text)
    except ValueError:
        return False
    return True


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--methods", nargs="*", default=None, help="default: every aggregated_<method>.csv")
    args = parser.parse_args()
    results = Path(os.environ.get("POST_TRAIN_BENCH_RESULTS_DIR", "results"))
    baseline, _ = read_table(results / f"aggregated_{BASELINE}.csv")
    if not baseline:
        print(f"Warning: no baseline data in {results / f'aggregated_{BASELINE}.csv'}")
    methods = args.methods or [p.stem[len("aggregated_") :] for p in results.glob("aggregated_*.csv")]
    for method in sorted(m for m in methods if m != BASELINE):
        table, benchmarks = read_table(results / f"aggregated_{method}.csv")
        if not table:
            continue
        flags, _ = read_table(results / f"contamination_{method}.csv")
        out = results / f"final_{method}.csv"
        with open(out, "w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(["model", *benchmarks])
            for model in sorted(table):
                row = []
                for bench in benchmarks:
                    value = table[model].get(bench, "")
                    if not is_number(value) or flags.get(model, {}).get(bench, "").strip():
                        value = baseline.get(model, {}).get(bench, "")
                    row.append(value)
                writer.writerow([model, *row])
        print(f"Written: {out}")


if __name__ == "__main__":
    main()
'''

AGGREGATE_SUMMARY_PY = r'''#!/usr/bin/env python3
"""FIXTURE aggregate_summary.py (ptflow tests): PostTrainBench's summary.csv over the given methods.

Rows: the benchmarks common to the baseline and every method. Columns: benchmark, baseline_base and
baseline_instruct (baseline_zeroshot's mean over those model lists), then each method's mean over its models.
PTB_FIXTURE_BASE_MODELS / PTB_FIXTURE_INSTRUCT_MODELS (comma-separated) replace the two model lists.
"""

import argparse
import csv
import os
import sys
from pathlib import Path

BASE_MODELS = ["Qwen3-1.7B-Base", "Qwen3-4B-Base", "SmolLM3-3B-Base", "gemma-3-4b-pt"]
INSTRUCT_MODELS = ["Qwen3-1.7B", "Qwen3-4B", "SmolLM3-3B", "gemma-3-4b-it"]


def models_from_env(name, default):
    value = os.environ.get(name)
    return [m.strip() for m in value.split(",") if m.strip()] if value else default


def read_table(path):
    if not path.exists():
        return {}, []
    with open(path, newline="") as fh:
        rows = [row for row in csv.reader(fh) if row]
    if not rows:
        return {}, []
    benchmarks = rows[0][1:]
    width = len(rows[0])
    padded = [row + [""] * (width - len(row)) for row in rows[1:]]
    return {row[0]: dict(zip(benchmarks, row[1:width], strict=True)) for row in padded}, benchmarks


def mean(table, bench, models=None):
    values = []
    for model in table if models is None else models:
        try:
            values.append(float(table.get(model, {}).get(bench, "")))
        except ValueError:
            pass
    return f"{sum(values) / len(values):.4f}" if values else ""


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("methods", nargs="+")
    parser.add_argument("-o", "--output", default=None, help="default: summary.csv in the results directory")
    args = parser.parse_args()
    results = Path(os.environ.get("POST_TRAIN_BENCH_RESULTS_DIR", "results"))
    base_models = models_from_env("PTB_FIXTURE_BASE_MODELS", BASE_MODELS)
    instruct_models = models_from_env("PTB_FIXTURE_INSTRUCT_MODELS", INSTRUCT_MODELS)
    baseline, common = read_table(results / "aggregated_baseline_zeroshot.csv")
    if not baseline:
        sys.exit(f"Error: no baseline data in {results / 'aggregated_baseline_zeroshot.csv'}")
    common = set(common)
    tables = {}
    for method in args.methods:
        table, benchmarks = read_table(results / f"final_{method}.csv")
        if not table:
            print(f"Warning: no data for method {method!r}", file=sys.stderr)
            continue
        tables[method] = table
        common &= set(benchmarks)
    if not tables or not common:
        sys.exit("Error: no method data, or no benchmark common to the baseline and every method")
    out = Path(args.output) if args.output else results / "summary.csv"
    with open(out, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["benchmark", "baseline_base", "baseline_instruct", *tables])
        for bench in sorted(common):
            row = [mean(baseline, bench, base_models), mean(baseline, bench, instruct_models)]
            writer.writerow([bench, *row, *[mean(table, bench) for table in tables.values()]])
    print(f"Written: {out}")


if __name__ == "__main__":
    main()
'''

_SINGLE_METRICS_HEAD = r'''#!/usr/bin/env python3
"""FIXTURE compute_single_metrics.py (ptflow tests): PostTrainBench's single number per method.

Reads every final_<method>.csv (not final_time_*) in $POST_TRAIN_BENCH_RESULTS_DIR (default results) and the
factors.json beside this script. A table is scored only when its rows are exactly the four base models below (any
other table is left out, silently); its score is the sum, over its columns that factors.json names, of the column's
mean over the four rows times the factor. Nothing is renormalised: a benchmark the table lacks adds nothing. A cell
that is not a number stops the script (read before the rows are checked, so in any table), an empty one when its
table is scored. Writes "method,metric" rows (sorted by method) to --output (default
final_metrics.csv in the results directory) and prints "Written: <path>".
"""

import argparse
import csv
import json
import os
import sys
from pathlib import Path

'''

# the final tables as compute_single_metrics.py reads and scores them; compute_single_metrics_avg_stddev.py reads them
# so too (PostTrainBench's two scripts hold the same functions)
_FINAL_TABLES = r"""
FOUR_BASE_MODELS = frozenset({"Qwen3-1.7B-Base", "Qwen3-4B-Base", "SmolLM3-3B-Base", "gemma-3-4b-pt"})


def table(path, factors):
    # ({row: {column: number}}, columns named in factors.json, in the file's order). Read before the rows are
    # checked, as PostTrainBench's is: a text that is not a number stops the script even in a table it would skip; an
    # empty cell is left out here and stops it only when the table is scored.
    with open(path, newline="") as fh:
        header, *rows = [row for row in csv.reader(fh) if row]
    columns = [c for c in header[1:] if c in factors]
    out = {}
    for row in rows:
        cells = dict(zip(header[1:], row[1:]))
        try:
            out[row[0]] = {c: float(cells[c]) for c in columns if cells.get(c, "") != ""}
        except ValueError as exc:
            sys.exit(f"{path}: row {row[0]} holds a value that is not a number ({exc})")
    return out, columns


def score(rows, columns, factors, path):
    total = 0.0
    for column in columns:
        missing = [model for model in rows if column not in rows[model]]
        if missing:
            sys.exit(f"{path}: no value for {column} in row(s) {', '.join(missing)}")
        total += sum(rows[model][column] for model in rows) / len(rows) * factors[column]
    return total


"""

COMPUTE_SINGLE_METRICS_PY = (
    _SINGLE_METRICS_HEAD
    + _FINAL_TABLES
    + r"""def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--output", default=None, help="default: final_metrics.csv in the results directory")
    args = parser.parse_args()
    results = Path(os.environ.get("POST_TRAIN_BENCH_RESULTS_DIR", "results"))
    factors = json.loads((Path(__file__).resolve().parent / "factors.json").read_text())
    metrics = {}
    for path in sorted(results.glob("final_*.csv")):
        if path.name.startswith("final_time_"):
            continue
        rows, columns = table(path, factors)
        if set(rows) != FOUR_BASE_MODELS:
            continue
        metrics[path.name[len("final_") : -len(".csv")]] = score(rows, columns, factors, path)
    out = Path(args.output) if args.output else results / "final_metrics.csv"
    with open(out, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["method", "metric"])
        writer.writerows(sorted(metrics.items()))
    print(f"Written: {out}")


if __name__ == "__main__":
    main()
"""
)

AGGREGATE_SH = """#!/bin/bash
# FIXTURE aggregate.sh (ptflow tests): methods, contamination, then final, over $POST_TRAIN_BENCH_RESULTS_DIR
# (default results, relative to the working directory). With METHOD arguments, also the summary of those methods.
# The single number per method is compute_single_metrics.py, run on its own. $PYTHON (default python3) runs them.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PY="${PYTHON:-python3}"
"$PY" "$HERE/aggregate_methods.py"
"$PY" "$HERE/aggregate_contamination.py"
"$PY" "$HERE/aggregate_final.py"
if [ "$#" -gt 0 ]; then
    "$PY" "$HERE/aggregate_summary.py" "$@"
fi
"""

# --- repeats: which methods are runs of one agent, and the mean and sd over them ----------------------------------

# scripts/constants.py's map as shipped: PostTrainBench's own runs (its shape at 9082063; the names are its run dirs')
SHIPPED_AGENT_MAP = {
    "Opus-4.6": [
        "claude_claude-opus-4-6_10h_run1_old_container",
        "claude_claude-opus-4-6_10h_run2",
        "claude_claude-opus-4-6_10h_run3",
    ],
    "GPT-5.3-Codex_Med": [
        "codex_non_api_gpt-5.3-codex_10h_run1",
        "codex_non_api_gpt-5.3-codex_10h_run2",
        "codex_non_api_gpt-5.3-codex_10h_run3",
    ],
}

CONSTANTS_PY = '''"""FIXTURE constants.py (ptflow tests): which methods are runs of one agent, and the benchmarks,
for the scripts that aggregate repeated runs. One adds an agent by naming its run dirs here."""

HARDCODED_AGENT_MAP = @AGENT_MAP@

HARDCODED_BENCHMARKS = @BENCHMARKS@
'''


def constants_py(agent_map: dict[str, list[str]] | None = None) -> str:
    """``scripts/constants.py`` with ``agent_map`` (agent -> its runs' method names) as HARDCODED_AGENT_MAP, as one
    edits it to add an agent (default: the shipped map)."""
    agent_map = SHIPPED_AGENT_MAP if agent_map is None else agent_map
    return CONSTANTS_PY.replace("@AGENT_MAP@", json.dumps(agent_map, indent=4)).replace(
        "@BENCHMARKS@", json.dumps(sorted(FACTORS), indent=4)
    )


COMPUTE_SINGLE_METRICS_AVG_STDDEV_PY = (
    r'''#!/usr/bin/env python3
"""FIXTURE compute_single_metrics_avg_stddev.py (ptflow tests): PostTrainBench's single number per method, then per
agent of constants.py's HARDCODED_AGENT_MAP the mean and sample sd (n-1) of its runs' numbers.

Each final_<method>.csv is scored as compute_single_metrics.py scores it. Writes single_metrics.csv ("method,metric",
sorted by method), then single_metrics_aggregated.csv ("agent,avg,std,n", sorted by agent), both in the results
directory; no options. A method of the map with no score (no final table, or not one of the four base models) stops
it after single_metrics.csv, and so does an agent of one run (its n-1 is 0).
"""

import csv
import json
import math
import os
import sys
from pathlib import Path

from constants import HARDCODED_AGENT_MAP

'''
    + _FINAL_TABLES
    + r"""def mean_and_sd(agent, values):
    if len(values) < 2:
        sys.exit(f"agent {agent}: one run; its sample sd divides by n-1 = 0")
    avg = sum(values) / len(values)
    return avg, math.sqrt(sum((v - avg) ** 2 for v in values) / (len(values) - 1))


def main():
    results = Path(os.environ.get("POST_TRAIN_BENCH_RESULTS_DIR", "results"))
    factors = json.loads((Path(__file__).resolve().parent / "factors.json").read_text())
    metrics = {}
    for path in sorted(results.glob("final_*.csv")):
        if path.name.startswith("final_time_"):
            continue
        rows, columns = table(path, factors)
        if set(rows) == FOUR_BASE_MODELS:
            metrics[path.name[len("final_") : -len(".csv")]] = score(rows, columns, factors, path)
    out = results / "single_metrics.csv"
    with open(out, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["method", "metric"])
        writer.writerows(sorted(metrics.items()))
    print(f"Written: {out}")
    groups = {}
    for agent, methods in HARDCODED_AGENT_MAP.items():
        unscored = [m for m in methods if m not in metrics]
        if unscored:
            sys.exit(f"agent {agent}: no metric for {', '.join(unscored)} (no final table of the four base models)")
        groups[agent] = (*mean_and_sd(agent, [metrics[m] for m in methods]), len(methods))
    out = results / "single_metrics_aggregated.csv"
    with open(out, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["agent", "avg", "std", "n"])
        writer.writerows([agent, *groups[agent]] for agent in sorted(groups))
    print(f"Written: {out}")


if __name__ == "__main__":
    main()
"""
)

AGGREGATE_AVG_STDDEV_OVER_BENCHMARKS_PY = r'''#!/usr/bin/env python3
"""FIXTURE aggregate_avg_stddev_over_benchmarks.py (ptflow tests): per benchmark of constants.py's
HARDCODED_BENCHMARKS and agent of its HARDCODED_AGENT_MAP, the mean and sample sd (n-1) over the agent's runs of each
run's mean over the models of its final_<method>.csv; and per model, the same over that model's values.

Writes aggregated_avg_over_models.csv and aggregated_std_over_models.csv (rows: benchmarks, columns: agents in the
map's order) and aggregated_avg_<model>.csv / aggregated_std_<model>.csv for each model of the first agent's first
run, in the results directory; no options. A run without its final table, a table without one of the benchmarks, a
value that is not a number (an empty one too), a run without one of those models and an agent of one run stop it.
"""

import csv
import math
import os
import sys
from pathlib import Path

from constants import HARDCODED_AGENT_MAP, HARDCODED_BENCHMARKS


def mean(values):
    return sum(values) / len(values)


def sd(agent, values):
    if len(values) < 2:
        sys.exit(f"agent {agent}: one run; its sample sd divides by n-1 = 0")
    avg = mean(values)
    return math.sqrt(sum((v - avg) ** 2 for v in values) / (len(values) - 1))


def run_table(results, method):
    """{model: {benchmark: number}} of one run, every benchmark of HARDCODED_BENCHMARKS."""
    path = results / f"final_{method}.csv"
    if not path.is_file():
        sys.exit(f"{path}: no such file")
    with open(path, newline="") as fh:
        header, *rows = [row for row in csv.reader(fh) if row]
    absent = [b for b in HARDCODED_BENCHMARKS if b not in header[1:]]
    if absent:
        sys.exit(f"{path}: no column {', '.join(absent)}")
    out = {}
    for row in rows:
        cells = dict(zip(header[1:], row[1:]))
        try:
            out[row[0]] = {b: float(cells.get(b, "")) for b in HARDCODED_BENCHMARKS}
        except ValueError as exc:
            sys.exit(f"{path}: row {row[0]} holds a value that is not a number ({exc})")
    return out


def write(path, columns, rows):
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["benchmark", *columns])
        writer.writerows([bench, *[rows[bench][c] for c in columns]] for bench in HARDCODED_BENCHMARKS)
    print(f"Written: {path}")


def main():
    results = Path(os.environ.get("POST_TRAIN_BENCH_RESULTS_DIR", "results"))
    agents = list(HARDCODED_AGENT_MAP)
    avg = {b: {} for b in HARDCODED_BENCHMARKS}
    std = {b: {} for b in HARDCODED_BENCHMARKS}
    models, model_avg, model_std = None, {}, {}
    for agent, methods in HARDCODED_AGENT_MAP.items():
        runs = [run_table(results, m) for m in methods]
        models = models or sorted(runs[0])
        for method, run in zip(methods, runs):
            lacking = [m for m in models if m not in run]
            if lacking:
                sys.exit(f"final_{method}.csv: no row {', '.join(lacking)}")
        for bench in HARDCODED_BENCHMARKS:
            per_run = [mean([run[model][bench] for model in run]) for run in runs]
            avg[bench][agent], std[bench][agent] = mean(per_run), sd(agent, per_run)
            for model in models:
                values = [run[model][bench] for run in runs]
                model_avg.setdefault(model, {b: {} for b in HARDCODED_BENCHMARKS})[bench][agent] = mean(values)
                model_std.setdefault(model, {b: {} for b in HARDCODED_BENCHMARKS})[bench][agent] = sd(agent, values)
    write(results / "aggregated_avg_over_models.csv", agents, avg)
    write(results / "aggregated_std_over_models.csv", agents, std)
    for model in models or []:
        write(results / f"aggregated_avg_{model}.csv", agents, model_avg[model])
        write(results / f"aggregated_std_{model}.csv", agents, model_std[model])


if __name__ == "__main__":
    main()
'''


def script_files(agent_map: dict[str, list[str]] | None = None) -> dict[str, str]:
    """Path (relative to the checkout) -> text of the checkout's aggregation scripts (factors.json is written beside
    them by ``ptb_checkout.checkout_files``); ``agent_map``: constants.py's HARDCODED_AGENT_MAP (default: shipped)."""
    return {
        "scripts/aggregate_methods.py": AGGREGATE_METHODS_PY,
        "scripts/aggregate_contamination.py": AGGREGATE_CONTAMINATION_PY,
        "scripts/aggregate_final.py": AGGREGATE_FINAL_PY,
        "scripts/aggregate_summary.py": AGGREGATE_SUMMARY_PY,
        "scripts/compute_single_metrics.py": COMPUTE_SINGLE_METRICS_PY,
        "scripts/aggregate.sh": AGGREGATE_SH,
        "scripts/constants.py": constants_py(agent_map),
        "scripts/compute_single_metrics_avg_stddev.py": COMPUTE_SINGLE_METRICS_AVG_STDDEV_PY,
        "scripts/aggregate_avg_stddev_over_benchmarks.py": AGGREGATE_AVG_STDDEV_OVER_BENCHMARKS_PY,
    }
