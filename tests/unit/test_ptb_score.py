"""The leaderboard's own score of a checkout run (ptflow.results.ptb_score, shown by the aggregate stage).

The proof: a FULL 4 models x 7 evals matrix (baseline, instruct, a codex agent and a claude agent run twice; hand-made
cells with flagged, unjudged, wrongly judged, model-less, failed and missing cells) is scored by ptflow's aggregate
stage with the FIXTURE checkout's marker, exported with ``ptflow export --posttrainbench``, and the FIXTURE checkout's
own ``aggregate_*.py`` and ``compute_single_metrics.py`` run on the export: every agent's headline score equals the
script's number for its method(s). The same numbers are also computed here by hand from the cell values. Then what
the leaderboard shows when the script's preconditions do not hold.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from ptflow.config.load import merged_config, reference_table, resolve
from ptflow.jobs.build import Jobs
from ptflow.results import ptb_score
from ptflow.results.cells import read_cell
from ptflow.results.ptb_export import export_posttrainbench
from ptflow.results.report import ReportOutputs, aggregate, score_cells, write_report
from ptflow.results.scoring import score
from ptflow.results.settings import Settings, settings_from_config
from ptflow.results.tables import board_text, leaderboard_markdown
from ptflow.stages.posttrainbench.checkout import make_checkout
from tests.conftest import REPO
from tests.support.cells import cell_dir, write_cell
from tests.support.ptb_aggregation import constants_py
from tests.support.ptb_checkout import BENCHMARKS, commit_change, make_fixture_checkout

MODELS = {
    "google/gemma-3-4b-pt": "google/gemma-3-4b-it",
    "Qwen/Qwen3-4B-Base": "Qwen/Qwen3-4B",
    "Qwen/Qwen3-1.7B-Base": "Qwen/Qwen3-1.7B",
    "HuggingFaceTB/SmolLM3-3B-Base": "HuggingFaceTB/SmolLM3-3B",
}
EVALS = sorted(BENCHMARKS)
CODEX, CLAUDE = "codex-gpt-5.1-codex-max", "claude-opus-4-5"
CLEAN = {"contamination_judgement.txt": "no contamination detected\n",
         "disallowed_model_judgement.txt": "only allowed use detected\n"}  # fmt: skip
FLAGGED = {**CLEAN, "contamination_judgement.txt": "contamination detected\n"}
# the answer and then a reason: PostTrainBench compares the whole file, so this is an error there ("IMPORTANT ERR")
WORDY = {**CLEAN, "disallowed_model_judgement.txt": "only allowed use detected\nit loaded the base model only\n"}

# (model, eval, agent slot) -> what is special about that cell; every other agent cell is scored and judged clean
SPECIAL = {
    ("Qwen/Qwen3-4B-Base", "gsm8k", CODEX): "flagged",
    ("Qwen/Qwen3-4B-Base", "bfcl", CODEX): "no_model",
    ("google/gemma-3-4b-pt", "humaneval", CODEX): "eval_failed",
    ("HuggingFaceTB/SmolLM3-3B-Base", "aime2025", CODEX): "unjudged",  # no judgement files
    ("Qwen/Qwen3-1.7B-Base", "healthbench", CODEX): "wordy",
    ("Qwen/Qwen3-1.7B-Base", "gpqamain", CODEX): "missing",  # no eval.json at all
    ("google/gemma-3-4b-pt", "gsm8k", f"{CLAUDE}@run2"): "flagged",
}
FALLS_BACK = {"flagged", "no_model", "eval_failed", "unjudged", "wordy", "missing"}


def base_value(i: int, j: int) -> float:
    return round(0.02 + 0.031 * i + 0.017 * j, 6)


def agent_value(i: int, j: int, slot: str) -> float:
    bump = {CODEX: 0.2, CLAUDE: 0.25, f"{CLAUDE}@run2": 0.21}[slot]
    return round(base_value(i, j) + bump + 0.003 * ((i + j) % 3), 6)


def _raw(default_raw: dict, checkout: Path, commit: str) -> dict:
    raw = default_raw
    raw["posttrainbench"] = {"path": str(checkout), "commit": commit}
    raw["models"] = [{"id": b, "source": "hub", "revision": "main", "instruct": i} for b, i in MODELS.items()]
    raw["evals"] = [{"id": e, "task": f"posttrainbench/{e}"} for e in EVALS]
    raw["agents"] = [
        {"id": "baseline", "kind": "baseline"},
        {"id": "instruct", "kind": "instruct"},
        {"id": CODEX, "kind": "cli-agent", "cli": "codex", "model": "gpt-5.1-codex-max", "hours": 10,
         "keys": ["OPENAI_API_KEY"]},
        {"id": CLAUDE, "kind": "cli-agent", "cli": "claude", "model": "claude-opus-4-5", "hours": 10, "repeats": 2,
         "keys": ["ANTHROPIC_API_KEY"]},
    ]  # fmt: skip
    raw["judge"] = {"agent": "codex", "model": "gpt-5.1-codex", "keys": ["OPENAI_API_KEY"]}
    raw["scoring"] = {}
    raw["matrix"] = {"models": "all", "evals": "all", "agents": "all", "exclude": [], "include": []}
    return raw


def _write_matrix(results: Path) -> dict:
    """Every cell's files; returns (model, eval, slot) -> the value the script's final table holds for it."""
    job = iter(range(5000, 9000))
    final = {}
    for i, model in enumerate(MODELS):
        for j, ev in enumerate(EVALS):
            b = base_value(i, j)
            write_cell(results, model, ev, "baseline", b, slurm_job_id=str(next(job)))
            write_cell(results, model, ev, "instruct", b + 0.4, slurm_job_id=str(next(job)))
            for slot in (CODEX, CLAUDE, f"{CLAUDE}@run2"):
                kind = SPECIAL.get((model, ev, slot), "clean")
                final[model, ev, slot] = b if kind in FALLS_BACK else agent_value(i, j, slot)
                if kind == "missing":
                    continue
                value = None if kind in ("no_model", "eval_failed") else agent_value(i, j, slot)
                status = "eval_failed" if kind == "eval_failed" else None
                attempts = [{"max_new_tokens": 100, "ok": False, "error": "CUDA out of memory"}] * 9 if status else None
                verdict = "flagged" if kind == "flagged" else {"status": "no_verdict", "flagged": None} if kind in (
                    "wordy", "unjudged") else "clean"  # fmt: skip
                write_cell(
                    results, model, ev, slot, value, status=status, attempts=attempts,
                    agent_run={"time_taken": 30000.0, "hours": 10}, judge=verdict, trace="# Agent trace\n",
                    slurm_job_id=str(next(job)),
                )  # fmt: skip
                files = {"flagged": FLAGGED, "wordy": WORDY, "unjudged": {}}.get(kind, CLEAN)
                for name, text in files.items():
                    (cell_dir(results, model, ev, slot) / "agent" / name).write_text(text)
    return final


def _by_hand(final: dict, factors: dict, slot: str) -> float:
    return sum(factors[e] * sum(final[m, e, slot] for m in MODELS) / len(MODELS) for e in EVALS)


def _script(checkout: Path, dest: Path, *scripts: str) -> None:
    env = {**os.environ, "POST_TRAIN_BENCH_RESULTS_DIR": str(dest)}
    for script in scripts:
        proc = subprocess.run([sys.executable, f"scripts/{script}"], cwd=checkout, env=env, capture_output=True,
                              text=True)  # fmt: skip
        assert proc.returncode == 0, (script, proc.stderr)


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    work = tmp_path_factory.mktemp("ptb-score")
    checkout = work / "PostTrainBench"
    commit = make_fixture_checkout(checkout, evals=tuple(EVALS), agents=("claude", "codex"))
    loaded = resolve(_raw(merged_config(REPO), checkout, commit), REPO, work)
    final = _write_matrix(work / "results")
    marker = work / "results" / "posttrainbench" / "checkout.json"
    spec = {"commit": commit, "location": str(checkout), "repo": None, "paths": ["scripts/factors.json"]}
    make_checkout(spec, marker, log=lambda *_: None)
    scoring = Jobs(loaded.cfg, loaded.site, loaded.layout).scoring(reference_table(loaded.cfg.raw, REPO))
    out = work / "out"
    out.mkdir()
    lines = []
    outputs = ReportOutputs(out / "summary.csv", out / "agents.csv", out / "leaderboard.md", out / "heatmap.png",
                            out / "report")  # fmt: skip
    cells = sorted((work / "results" / "cells").rglob("eval.json"))
    result = aggregate(cells, scoring, outputs, checkout_marker=marker, log=lines.append)
    dest = work / "ptb-results"
    summary = export_posttrainbench(loaded.cfg, loaded.layout, dest, workdir=work, site=loaded.site)
    _script(checkout, dest, "aggregate_methods.py", "aggregate_contamination.py", "aggregate_final.py",
            "compute_single_metrics.py")  # fmt: skip
    with open(dest / "final_metrics.csv", newline="") as fh:
        theirs = {row["method"]: float(row["metric"]) for row in csv.DictReader(fh)}
    factors = json.loads((checkout / "scripts/factors.json").read_text())
    return {"result": result, "theirs": theirs, "final": final, "factors": factors, "out": out, "log": lines,
            "methods": summary.methods, "checkout": checkout, "dest": dest, "scoring": scoring,
            "cells": cells}  # fmt: skip


def test_the_headline_equals_compute_single_metrics_on_the_export(full):
    board, theirs = full["result"].leaderboard, full["theirs"]
    codex = "codex_gpt-5.1-codex-max_10h"
    claude = ["claude_claude-opus-4-5_10h_run1", "claude_claude-opus-4-5_10h_run2"]
    assert sorted(theirs) == sorted([codex, *claude])  # every agent method scored; baseline_zeroshot is not one
    assert board.agents[CODEX].run_scores == [theirs[codex]]
    assert board.agents[CODEX].score == theirs[codex]
    assert board.agents[CLAUDE].run_scores == [theirs[m] for m in claude]
    assert board.agents[CLAUDE].score == pytest.approx((theirs[claude[0]] + theirs[claude[1]]) / 2, abs=1e-15)
    sd = abs(theirs[claude[0]] - theirs[claude[1]]) / math.sqrt(2)
    assert board.agents[CLAUDE].sd == pytest.approx(sd, abs=1e-15)
    assert board.notes == []  # all seven evals of factors.json, nothing else


def test_the_fallbacks_are_the_baselines_value_as_by_hand(full):
    """Flagged, unjudged (no files), wrongly worded, model-less, failed and missing cells take the base model's
    zero-shot value; the sum is not renormalised and uses the checkout's factors.json."""
    board, final, factors = full["result"].leaderboard, full["final"], full["factors"]
    assert board.factors == factors and str(full["checkout"] / "scripts/factors.json") in board.source
    assert board.agents[CODEX].score == pytest.approx(_by_hand(final, factors, CODEX), abs=1e-12)
    for slot, run in ((CLAUDE, 0), (f"{CLAUDE}@run2", 1)):
        assert board.agents[CLAUDE].run_scores[run] == pytest.approx(_by_hand(final, factors, slot), abs=1e-12)
    # the reference rows: the same sum over their own cells
    base = {k: v for k, v in final.items()}
    for i, m in enumerate(MODELS):
        for j, e in enumerate(EVALS):
            base[m, e, "baseline"] = base_value(i, j)
    assert board.agents["baseline"].score == pytest.approx(_by_hand(base, factors, "baseline"), abs=1e-12)
    assert board.agents["instruct"].score == pytest.approx(board.agents["baseline"].score + 0.4, abs=1e-12)


def test_the_outputs_show_the_leaderboard_score_with_ptflow_weights_beside_it(full):
    result, out = full["result"], full["out"]
    board = result.leaderboard
    text = (out / "leaderboard.md").read_text()
    assert "Score: PostTrainBench's own" in text and "ptflow weights:" in text
    assert "| rank | agent | score | ptflow weights |" in text
    rows = [line.split(" | ")[1] for line in text.splitlines() if re.match(r"\| \d+ \| ", line)]
    # ranked by the leaderboard score: instruct (+0.4), claude (about +0.23), codex (+0.2, six fallbacks), baseline
    assert rows == ["instruct (reference)", CLAUDE, CODEX, "baseline (reference)"]
    assert f" | {CODEX} | {board.agents[CODEX].score:.3f} | {result.agent(CODEX).score:.3f} ±" in text
    with open(out / "agents.csv", newline="") as fh:
        agents = {row["agent"]: row for row in csv.DictReader(fh)}
    assert float(agents[CODEX]["leaderboard_score"]) == pytest.approx(board.agents[CODEX].score, rel=1e-5)
    assert float(agents[CODEX]["score"]) == pytest.approx(result.agent(CODEX).score, rel=1e-5)  # ptflow weights
    assert result.agent(CODEX).score != pytest.approx(board.agents[CODEX].score, abs=1e-4)  # two different numbers
    index = (out / "report" / "index.html").read_text()
    assert "ptflow weights" in index and f"{board.agents[CLAUDE].score:.3f}" in index
    scores = next(line for line in full["log"] if line.startswith("scores: "))
    assert scores.startswith(f"scores: instruct {board.agents['instruct'].score:.3f} (ptflow weights ")
    assert f"{CLAUDE} {board_text(result, result.agent(CLAUDE))} (ptflow weights " in scores


def _csv_rows(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_posttrainbench_aggregation_over_repeats_gives_ptflows_mean_and_sample_sd(full):
    """PostTrainBench's own aggregation of repeats (scripts/compute_single_metrics_avg_stddev.py and
    aggregate_avg_stddev_over_benchmarks.py at 9082063; constants.py's HARDCODED_AGENT_MAP says which methods are
    runs of one agent) on the export of the claude agent's two runs: the headline's mean and sample sd over runs are
    ptflow's (its scoring with PostTrainBench's factors as weights, and the leaderboard score), and so is every
    benchmark's mean over models, averaged over runs, with its sd."""
    checkout, dest, factors, result = full["checkout"], full["dest"], full["factors"], full["result"]
    runs = ["claude_claude-opus-4-5_10h_run1", "claude_claude-opus-4-5_10h_run2"]
    assert set(runs) <= set(full["methods"])
    env = {**os.environ, "POST_TRAIN_BENCH_RESULTS_DIR": str(dest)}

    def script(name: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, f"scripts/{name}"], cwd=checkout, env=env, capture_output=True,
                              text=True)  # fmt: skip

    # the shipped map names PostTrainBench's own runs, which this export lacks: it stops, as the real one does
    failed = script("compute_single_metrics_avg_stddev.py")
    assert failed.returncode != 0 and "claude_claude-opus-4-6_10h_run1_old_container" in failed.stderr
    # an agent of one run: its n-1 is 0
    commit_change(checkout, "scripts/constants.py", constants_py({"codex": ["codex_gpt-5.1-codex-max_10h"]}),
                  "group the codex agent's one run")  # fmt: skip
    failed = script("compute_single_metrics_avg_stddev.py")
    assert failed.returncode != 0 and "one run" in failed.stderr
    # one adds an agent by naming its runs' methods in constants.py
    commit_change(checkout, "scripts/constants.py", constants_py({"Opus-4.5": runs}), "add ptflow's repeated agent")
    for name in ("compute_single_metrics_avg_stddev.py", "aggregate_avg_stddev_over_benchmarks.py"):
        proc = script(name)
        assert proc.returncode == 0, (name, proc.stderr)

    [theirs] = _csv_rows(dest / "single_metrics_aggregated.csv")
    assert theirs["agent"] == "Opus-4.5" and theirs["n"] == "2"
    board = result.leaderboard.agents[CLAUDE]
    assert float(theirs["avg"]) == pytest.approx(board.score, abs=1e-12)
    assert float(theirs["std"]) == pytest.approx(board.sd, abs=1e-12)
    scoring = full["scoring"]
    settings = replace(settings_from_config(scoring.raw, scoring.reference), weights=factors)
    ours = score_cells(full["cells"], settings, scoring.expected, scoring.model_ids, log=lambda *_: None)
    claude = ours.agent(CLAUDE)
    assert claude.runs == 2 and claude.sd > 0.001  # the two runs differ (run 2's bump, one flagged cell)
    assert float(theirs["avg"]) == pytest.approx(claude.score, abs=1e-12)
    assert float(theirs["std"]) == pytest.approx(claude.sd, abs=1e-12)

    avg = {r["benchmark"]: float(r["Opus-4.5"]) for r in _csv_rows(dest / "aggregated_avg_over_models.csv")}
    std = {r["benchmark"]: float(r["Opus-4.5"]) for r in _csv_rows(dest / "aggregated_std_over_models.csv")}
    assert sorted(avg) == sorted(std) == EVALS
    for e in EVALS:  # weights play no part here: the run's scoring above and the aggregate stage's agree
        assert avg[e] == pytest.approx(result.agent(CLAUDE).per_eval[e].mean, abs=1e-12), e
        assert std[e] == pytest.approx(result.agent(CLAUDE).per_eval[e].sd, abs=1e-12), e
        assert claude.per_eval[e].mean == pytest.approx(avg[e], abs=1e-12)


# ---- what the leaderboard shows when the script's preconditions do not hold ----


def _cells(root: Path, models, evals, *, baseline=True, agent_value=0.5):
    paths = []
    for i, m in enumerate(models):
        for j, e in enumerate(evals):
            if baseline:
                paths.append(write_cell(root, m, e, "baseline", 0.1 + 0.01 * i + 0.001 * j))
            paths.append(write_cell(root, m, e, "agent", agent_value, judge="clean", trace="# trace\n"))
            for name, text in CLEAN.items():
                (cell_dir(root, m, e, "agent") / "agent" / name).write_text(text)
    return paths


def _board(paths, factors, settings=None):
    settings = settings or Settings(weights={e: 1.0 for e in EVALS})
    result = score([read_cell(p, settings) for p in paths], settings)
    result.leaderboard = ptb_score.leaderboard(result.cells, factors, "factors.json at test", settings)
    return result


def test_a_matrix_that_is_not_the_four_models_gets_no_leaderboard_score_and_says_why(tmp_path):
    factors = {"gsm8k": 0.6, "humaneval": 0.4}
    result = _board(_cells(tmp_path, ["ptflow/tiny-llama-h64"], ["gsm8k", "humaneval"]), factors)
    board = result.leaderboard
    assert not board.computed and all(a.score is None for a in board.agents.values())
    text = leaderboard_markdown(result)
    why = "its models are tiny-llama-h64, not scripts/compute_single_metrics.py's Qwen3-1.7B-Base"
    assert [line for line in text.splitlines() if "no leaderboard score" in line] == [f"- no leaderboard score: {why}"
        + ", Qwen3-4B-Base, SmolLM3-3B-Base, gemma-3-4b-pt"]  # fmt: skip
    assert "- ranked by ptflow weights" in text
    ranked_rows = [line for line in text.splitlines() if line.startswith("| 1 |")]
    assert "| agent | — | 0.500 ±" in ranked_rows[0]  # ptflow weights: ranked and shown; no renormalised stand-in


def test_a_fallback_without_a_baseline_value_and_evals_outside_factors_are_said(tmp_path):
    models = list(MODELS)
    paths = _cells(tmp_path, models, ["gsm8k", "mmlu"])
    # one cell flagged where the baseline cell failed: compute_single_metrics.py would stop on that table
    write_cell(tmp_path, models[0], "gsm8k", "baseline", None, status="eval_failed",
               attempts=[{"max_new_tokens": 9, "ok": False, "error": "boom"}])  # fmt: skip
    flagged = {"status": "judged", "flagged": True, "contamination": True, "disallowed_model": False, "reason": "r"}
    (cell_dir(tmp_path, models[0], "gsm8k", "agent") / "judge.json").write_text(json.dumps(flagged))
    settings = Settings(weights={"gsm8k": 1.0, "mmlu": 1.0}, reference={"zeroshot": {"gemma-3-4b-pt": {"gsm8k": 0.1}}})
    board = _board(paths, {"gsm8k": 0.5, "humaneval": 0.5}, settings).leaderboard
    assert board.agents["agent"].score is None
    assert board.agents["agent"].why.startswith("cell gemma-3-4b-pt/gsm8k falls back to baseline_zeroshot's value")
    assert board.notes == [
        "evals of factors.json not in this run count 0 (no renormalising): humaneval",
        "evals that factors.json does not name are not counted: mmlu",
    ]


def test_evals_absent_count_zero_and_a_broken_factors_file_leaves_ptflow_weights(tmp_path):
    paths = _cells(tmp_path / "cells", list(MODELS), ["gsm8k"], agent_value=0.8)
    board = _board(paths, {"gsm8k": 0.25, "humaneval": 0.75}).leaderboard
    assert board.agents["agent"].score == pytest.approx(0.25 * 0.8)  # humaneval adds 0: not 0.8
    checkout = tmp_path / "ptb"
    (checkout / "scripts").mkdir(parents=True)
    (checkout / "scripts/factors.json").write_text('{"gsm8k": "high"}')
    marker = tmp_path / "checkout.json"
    marker.write_text(json.dumps({"path": str(checkout), "commit": "a" * 40}))
    with pytest.raises(ptb_score.FactorsError, match=r"factor of 'gsm8k' = 'high' is not a finite number"):
        ptb_score.from_marker(marker)
    out = tmp_path / "out"
    out.mkdir()
    settings = Settings(weights={"gsm8k": 1.0})
    result = score_cells(paths, settings, model_ids={}, log=lambda *_: None)
    outputs = ReportOutputs(out / "s.csv", out / "a.csv", out / "l.md", out / "h.png", out / "report")
    write_report(result, settings, outputs, checkout_marker=marker, log=lambda *_: None)
    text = (out / "l.md").read_text()
    assert "- not computed: " in text and "- ranked by ptflow weights" in text
    assert result.leaderboard.agents == {}
    with open(out / "a.csv", newline="") as fh:
        row = next(r for r in csv.DictReader(fh) if r["agent"] == "agent")
    assert row["leaderboard_score"] == "" and row["leaderboard_why"].startswith("not computed: ")
