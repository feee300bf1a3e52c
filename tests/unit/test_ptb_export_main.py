"""``ptflow export --posttrainbench`` for a checkout whose results part is PostTrainBench main's (``RESULTS_COLLECT``:
scripts/collect.py and scripts/aggregate.py, read at 1fc55616 and 1691dfb6).

The proof: a 4 models x 7 evals matrix (baseline, a codex agent, a claude agent run twice; flagged, unjudged,
model-less, seeded, seeded-and-failed, missing and overridden cells) is scored by ptflow's aggregate stage with a
FIXTURE main checkout's marker (tests/support/ptb_main.py), exported, and the fixture's own collect.py and aggregate.py
run on the export: each method's single metric equals ptflow's leaderboard score of that run, and the agent's mean and
sample sd equal ptflow's, where baselines.json holds ptflow's baseline values. Where it holds other values (the
published ones), the export states the number the scripts print, which is what they print. The codex agent's cells are
judged by main's panel (four votes each, decided by rule judge's own function): the export writes each vote's
judgement_<id>.json as its judge wrote it, the decided fields over it where an override changed the verdict; the
claude agent's by a judge of ptflow's (one judge.json): the files are written from the verdict.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ptflow.config.load import merged_config, reference_table, resolve
from ptflow.jobs.build import Jobs
from ptflow.results import ptb_protocol
from ptflow.results.overrides import config_overrides
from ptflow.results.ptb_export import export_posttrainbench
from ptflow.results.report import ReportOutputs, aggregate
from ptflow.results.scoring import ScoreError
from ptflow.specs import JudgePanelSpec
from ptflow.stages.judge import panel as judge_panel
from ptflow.stages.posttrainbench import judge_main as jm
from tests.conftest import REPO
from tests.support.cells import cell_dir, model_name, write_cell
from tests.support.ptb_checkout import BENCHMARKS, commit_change, make_fixture_checkout
from tests.support.ptb_main import commit_main

INSTRUCT = {
    "google/gemma-3-4b-pt": "google/gemma-3-4b-it",
    "Qwen/Qwen3-4B-Base": "Qwen/Qwen3-4B",
    "Qwen/Qwen3-1.7B-Base": "Qwen/Qwen3-1.7B",
    "HuggingFaceTB/SmolLM3-3B-Base": "HuggingFaceTB/SmolLM3-3B",
}
MODELS = tuple(INSTRUCT)
EVALS = sorted(BENCHMARKS)
CODEX, CLAUDE = "codex-gpt-5.1-codex-max", "claude-opus-4-5"
CODEX_METHOD = "codex_gpt-5.1-codex-max_10h"
CLAUDE_METHODS = ["claude_claude-opus-4-5_10h_run1", "claude_claude-opus-4-5_10h_run2"]
SEEDS = (72332, 87681)
SPECIAL = {
    ("Qwen/Qwen3-4B-Base", "gsm8k", CODEX): "flagged",
    ("Qwen/Qwen3-4B-Base", "bfcl", CODEX): "no_model",
    ("google/gemma-3-4b-pt", "humaneval", CODEX): "seeds_failed",  # every try of the first seed failed
    ("HuggingFaceTB/SmolLM3-3B-Base", "aime2025", CODEX): "unjudged",  # judge.json: skipped
    ("Qwen/Qwen3-1.7B-Base", "gsm8k", CODEX): "seeded",
    ("Qwen/Qwen3-1.7B-Base", "gpqamain", CODEX): "missing",  # no eval.json
    ("google/gemma-3-4b-pt", "gsm8k", f"{CLAUDE}@run2"): "flagged",
    ("Qwen/Qwen3-4B-Base", "aime2025", CODEX): "overridden",  # the votes flag contamination; a person says clean
    ("HuggingFaceTB/SmolLM3-3B-Base", "gsm8k", CODEX): "general",  # the general judge's anomaly: recorded only
}
OVERRIDE = {"cell": f"Qwen/Qwen3-4B-Base/aime2025/{CODEX}", "field": "contamination", "value": False,
            "reason": "the test split it read was a public sample", "who": "J. Doe", "when": "2026-12-07"}  # fmt: skip
# main's judges' judgement.json of a clean cell (judge id -> what it writes); written with indent=1 and no newline,
# so that a file the export re-wrote (indent=2) shows
MAIN_CLEAN = {
    "data-contamination": {"contamination": False, "justification_contamination": "read train.jsonl only",
                           "disallowed_model": False, "justification_disallowed_model": "fine-tuned the base model"},
    "api-usage": {"disallowed_api_usage": False, "justification_disallowed_api_usage": "no hosted model called"},
    "ptb-lookup": {"disallowed_ptb_lookup": False, "justification_disallowed_ptb_lookup": "no benchmark repo read"},
    "general": {"general_anomaly": False, "justification_general_anomaly": "nothing unusual"},
}  # fmt: skip


def row(model: str) -> str:
    return model.split("/")[-1]


def base_value(i: int, j: int) -> float:
    return round(0.02 + 0.031 * i + 0.017 * j, 6)


def agent_value(i: int, j: int, slot: str) -> float:
    bump = {CODEX: 0.2, CLAUDE: 0.25, f"{CLAUDE}@run2": 0.21}[slot]
    return round(base_value(i, j) + bump + 0.003 * ((i + j) % 3), 6)


def _raw(default_raw: dict, checkout: Path, commit: str) -> dict:
    raw = default_raw
    raw["posttrainbench"] = {"path": str(checkout), "commit": commit}
    raw["models"] = [{"id": m, "source": "hub", "revision": "main", "instruct": i} for m, i in INSTRUCT.items()]
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
    raw["scoring"] = {"overrides": str(checkout.parent / "decisions.yaml")}
    raw["matrix"] = {"models": "all", "evals": "all", "agents": "all", "exclude": [], "include": []}
    return raw


def _add_seeds(results: Path, model: str, ev: str, slot: str, outcomes: dict) -> None:
    """The cell's seeds as rules evaluate_seed and seed_mean leave them: seeds/<seed>/eval.json with its tries, and
    the cell eval.json's ``seeds``. ``outcomes``: seed -> value, or None for a seed whose every try failed."""
    cell = cell_dir(results, model, ev, slot)
    per_seed = {}
    for seed, value in outcomes.items():
        tries = [{"max_new_tokens": 100, "ok": False, "error": "CUDA out of memory", "failure_kind": "oom"}] * 9
        if value is not None:
            tries = [{"max_new_tokens": 4096, "ok": False, "error": "context overflow"}, {"max_new_tokens": 2048,
                                                                                        "ok": True}]  # fmt: skip
        made = write_cell(results.parent / "scratch" / str(seed), model, ev, slot, value, attempts=tries,
                          status=None if value is not None else "eval_failed", shape="headline")  # fmt: skip
        record = {**json.loads(made.read_text()), "seed": seed, **({"stage": 1} if value is not None else {})}
        rel = f"seeds/{seed}/eval.json"
        (cell / rel).parent.mkdir(parents=True)
        (cell / rel).write_text(json.dumps(record))
        per_seed[str(seed)] = {"status": record["status"], "eval_json": rel}
        if value is not None:
            per_seed[str(seed)] |= {"stage": 1, "value": value, "stderr": 0.02}
    data = json.loads((cell / "eval.json").read_text())
    data["seeds"] = {"num_seeds": len(outcomes), "num_seeds_succeeded": sum(v is not None for v in outcomes.values()),
                     "per_seed": per_seed, "decoding": "sampling"}  # fmt: skip
    (cell / "eval.json").write_text(json.dumps(data))


def main_votes(results: Path, model: str, ev: str, slot: str, flags: dict[str, dict]) -> Path:
    """The cell judged by main's panel: each judge's judgement.json kept in its vote's dir (MAIN_CLEAN with
    ``flags``: judge id -> fields over it), the vote file as the vote job writes it (read by jm.vote_outcome), and
    judge.json decided by rule judge's own function. Returns the cell dir."""
    cell = cell_dir(results, model, ev, slot)
    paths = []
    for judge in jm.PANEL:
        kept = cell / "judges" / judge.id / "run1"
        kept.mkdir(parents=True)
        text = json.dumps({**MAIN_CLEAN[judge.id], **flags.get(judge.id, {})}, indent=1)
        (kept / jm.VERDICT_FILE).write_text(text)
        got = jm.vote_outcome(judge, text, "exited 0")
        vote = {"status": "judged", **got, "fields": {f: got[f] for f in judge.fields}}
        (cell / "judges" / judge.id / "run1.json").write_text(json.dumps(vote))
        paths.append(str(cell / "judges" / judge.id / "run1.json"))
    trace = results.parent / "scratch" / "traces" / model_name(model) / ev / slot
    trace.mkdir(parents=True)
    manifest = trace / "manifest.json"
    manifest.write_text(json.dumps({"agent_run": {"trace_dir": str(trace)}}))
    spec = JudgePanelSpec(panel=jm.panel().to_params(), cell={"model": model, "eval": ev, "agent": slot}, keys=[])
    judge_panel.decide_cell(spec, manifest, paths, cell / "judge.json", log=lambda *_: None)
    return cell


def _write_matrix(results: Path) -> None:
    job = iter(range(5000, 9000))
    for i, model in enumerate(MODELS):
        for j, ev in enumerate(EVALS):
            write_cell(results, model, ev, "baseline", base_value(i, j), slurm_job_id=str(next(job)))
            write_cell(results, model, ev, "instruct", base_value(i, j) + 0.4, slurm_job_id=str(next(job)))
            for slot in (CODEX, CLAUDE, f"{CLAUDE}@run2"):
                kind = SPECIAL.get((model, ev, slot), "clean")
                if kind == "missing":
                    continue
                value = agent_value(i, j, slot)
                if kind == "seeded":  # the mean of two seeds that succeeded
                    value = (value + 0.01 + value - 0.01) / 2
                judge = {"flagged": "flagged", "unjudged": "skipped"}.get(kind, "clean")
                write_cell(
                    results, model, ev, slot, None if kind in ("no_model", "seeds_failed") else value,
                    status="eval_failed" if kind == "seeds_failed" else None, agent_run={"time_taken": 30000.0,
                    "hours": 10}, judge=judge, slurm_job_id=str(next(job)),
                )  # fmt: skip
                if kind == "seeded":
                    _add_seeds(results, model, ev, slot, {SEEDS[0]: value + 0.01, SEEDS[1]: value - 0.01})
                if kind == "seeds_failed":
                    _add_seeds(results, model, ev, slot, {SEEDS[0]: None})
                if slot == CODEX and kind != "unjudged":  # judged by main's panel
                    flags = {"flagged": {"data-contamination": {"contamination": True}},
                             "overridden": {"data-contamination": {"contamination": True}},
                             "general": {"general": {"general_anomaly": True}}}.get(kind, {})  # fmt: skip
                    main_votes(results, model, ev, slot, flags)


def _baselines(value) -> str:
    table = {row(m): {e: value(i, j) for j, e in enumerate(EVALS)} for i, m in enumerate(MODELS)}
    return json.dumps({"zeroshot": table, "fewshot": {}}, indent=2) + "\n"


def _scripts(checkout: Path, dest: Path, out: Path) -> tuple[dict, dict, str]:
    """collect.py then aggregate.py, as main runs them; (single_metrics, single_metrics_aggregated, collect's
    stdout)."""
    env = {**os.environ, "PTB_FIXTURE_AGENT_MAP": json.dumps({"Claude": CLAUDE_METHODS})}
    said = ""
    for argv in (["scripts/collect.py", "--data-dir", str(dest), "--output-dir", str(out)],
                 ["scripts/aggregate.py", "--data-dir", str(out)]):  # fmt: skip
        proc = subprocess.run([sys.executable, *argv], cwd=checkout, env=env, capture_output=True, text=True)
        assert proc.returncode == 0, (argv, proc.stdout, proc.stderr)
        said += proc.stdout
    with open(out / "single_metrics.csv", newline="") as fh:
        metrics = {r["method"]: float(r["metric"]) for r in csv.DictReader(fh)}
    with open(out / "single_metrics_aggregated.csv", newline="") as fh:
        agents = {r["agent"]: r for r in csv.DictReader(fh)}
    return metrics, agents, said


@pytest.fixture(scope="module")
def main_run(tmp_path_factory):
    work = tmp_path_factory.mktemp("ptb-main-export")
    checkout = work / "PostTrainBench"
    v11 = make_fixture_checkout(checkout, evals=tuple(EVALS), agents=("claude", "codex"), judge="v1.1")
    (work / "decisions.yaml").write_text(yaml.safe_dump({"overrides": [OVERRIDE]}))
    # the config is resolved at the d27a95e-like commit: main's other parts are refused (intended); the run's marker
    # then names main's commit, whose results part the export reads
    loaded = resolve(_raw(merged_config(REPO), checkout, v11), REPO, work)
    commit_main(checkout, evals=tuple(EVALS), agents=("claude", "codex"))
    main = commit_change(checkout, "scripts/baselines.json", _baselines(base_value), "ptflow's baseline values")
    _write_matrix(work / "results")
    marker = work / loaded.layout.posttrainbench_marker()
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps({"commit": main, "path": str(checkout)}))  # the checkout rule's record, by hand
    scoring = Jobs(loaded.cfg, loaded.site, loaded.layout).scoring(reference_table(loaded.cfg.raw, REPO))
    out = work / "out"
    out.mkdir()
    outputs = ReportOutputs(out / "summary.csv", out / "agents.csv", out / "leaderboard.md", out / "heatmap.png",
                            out / "report")  # fmt: skip
    cells = sorted(p for p in (work / "results" / "cells").rglob("eval.json") if "seeds" not in p.parts)
    result = aggregate(cells, scoring, outputs, checkout_marker=marker, overrides=work / "decisions.yaml",
                       log=lambda *_: None)  # fmt: skip
    part = ptb_protocol.results_part(work, loaded.layout)
    dest = work / "ptb-results"
    overrides = config_overrides(loaded.cfg, REPO)
    summary = export_posttrainbench(loaded.cfg, loaded.layout, dest, workdir=work, site=loaded.site,
                                    overrides=overrides, results=part.layout)  # fmt: skip
    metrics, agents, said = _scripts(checkout, dest, dest / "_aggregated")
    return {"work": work, "checkout": checkout, "loaded": loaded, "board": result.leaderboard, "part": part,
            "dest": dest, "summary": summary, "metrics": metrics, "agents": agents, "said": said,
            "overrides": overrides, "scoring": scoring, "result": result}  # fmt: skip


def test_main_s_results_part_runs_and_is_probed_by_its_collect_py(main_run):
    from ptflow.config import posttrainbench as ptb

    part = main_run["part"]
    assert part.layout == ptb_protocol.COLLECT and part.applies_verdicts and part.reads == (ptb_protocol.JSON,)
    commit = ptb.git(main_run["checkout"], "rev-parse", "HEAD")
    found = ptb.checkout_protocol(str(main_run["checkout"]), commit)
    assert found.part("results") is ptb.RESULTS_COLLECT and ptb.RESULTS_COLLECT.runs
    assert "results" not in dict(found.refusals)


def test_collect_and_aggregate_read_the_export_to_ptflow_s_leaderboard_numbers(main_run):
    board, metrics, agents = main_run["board"], main_run["metrics"], main_run["agents"]
    # final_avg/std_<agent>.csv are final_*.csv too: aggregate.py scores them as methods, as the real one does
    assert sorted(metrics) == sorted([CODEX_METHOD, *CLAUDE_METHODS, "avg_Claude", "std_Claude"])
    assert board.agents[CODEX].run_scores == [metrics[CODEX_METHOD]]
    assert board.agents[CODEX].score == metrics[CODEX_METHOD]
    assert board.agents[CLAUDE].run_scores == [metrics[m] for m in CLAUDE_METHODS]
    claude = agents["Claude"]
    assert int(claude["n"]) == 2
    assert float(claude["avg"]) == pytest.approx(board.agents[CLAUDE].score, abs=1e-15)
    assert float(claude["std"]) == pytest.approx(board.agents[CLAUDE].sd, abs=1e-15)
    loaded, work = main_run["loaded"], main_run["work"]
    assert ptb_protocol.comparison_lines(loaded.cfg, loaded.layout, work, REPO, main_run["overrides"]) == []


def test_the_run_dirs_are_main_s(main_run):
    dest = main_run["dest"]

    def run_dir(method: str, model: str, ev: str) -> Path:
        (found,) = (dest / method).glob(f"{ev}_{model.replace('/', '_')}_*")
        return found

    clean = run_dir(CODEX_METHOD, MODELS[0], "gsm8k")
    assert json.loads((clean / "judgement_gpt5_4.json").read_text())["contamination"] is False
    assert not list(dest.rglob("*_judgement.txt")) and not list(dest.rglob("judge_result.json"))
    flagged = json.loads((run_dir(CODEX_METHOD, MODELS[1], "gsm8k") / "judgement_gpt5_4.json").read_text())
    assert flagged["contamination"] is True and flagged["disallowed_model"] is False
    seeded = run_dir(CODEX_METHOD, MODELS[2], "gsm8k")
    mean = json.loads((seeded / "metrics.json").read_text())
    assert mean["num_seeds"] == 2 and mean["num_seeds_succeeded"] == 2 and sorted(mean["per_seed"]) == sorted(
        map(str, SEEDS))  # fmt: skip
    for seed in SEEDS:
        assert (seeded / f"metrics_seed{seed}.json").is_file()
        assert sorted(p.name for p in seeded.glob(f"final_eval_seed{seed}_*.txt")) == [
            f"final_eval_seed{seed}_1.txt", f"final_eval_seed{seed}_2.txt"]  # fmt: skip
    failed = run_dir(CODEX_METHOD, MODELS[0], "humaneval")
    assert not (failed / "metrics.json").exists() and (failed / f"final_eval_seed{SEEDS[0]}_9.txt").is_file()
    assert (failed / "judgement_gpt5_4.json").is_file()
    # an unjudged cell: no judgement file; collect.py reads it as a broken run (a warning) and counts baselines.json's
    unjudged = run_dir(CODEX_METHOD, MODELS[3], "aime2025")
    assert not list(unjudged.glob("judgement*")) and (unjudged / "metrics.json").is_file()
    # collect.py warns of each run dir it reads as broken: the unjudged one, the one without a model and the one whose
    # seeds all failed (its glob *final_eval_9.txt, which silences the warning, does not match final_eval_seed<S>_9.txt)
    warned = {line.split()[4].rstrip(":") for line in main_run["said"].splitlines()
              if line.startswith("WARNING: skipping broken run")}  # fmt: skip
    assert warned == {str(unjudged), str(failed), str(run_dir(CODEX_METHOD, MODELS[1], "bfcl"))}
    (note,) = [n for n in main_run["summary"].notes if "no contamination judgement" in n]
    assert note.startswith("1 run dir(s)") and "scripts/baselines.json's value" in note
    final = {r["model"]: r for r in csv.DictReader((dest / "_aggregated" / f"final_{CODEX_METHOD}.csv").open())}
    assert float(final[row(MODELS[3])]["aime2025"]) == base_value(3, EVALS.index("aime2025"))


def test_other_baselines_give_the_difference_the_export_states(main_run, tmp_path):
    """baselines.json's published values (here other stand-ins) are what collect.py falls back to: the export states
    the number the scripts print beside ptflow's leaderboard's, and the scripts print exactly it."""
    checkout, loaded, work = main_run["checkout"], main_run["loaded"], main_run["work"]
    head = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    try:
        other = commit_change(checkout, "scripts/baselines.json", _baselines(lambda i, j: 0.5), "other baselines")
        marker = work / loaded.layout.posttrainbench_marker()
        marker.write_text(json.dumps({"commit": other, "path": str(checkout)}))
        lines = ptb_protocol.comparison_lines(loaded.cfg, loaded.layout, work, REPO, main_run["overrides"])
        metrics, _, _ = _scripts(checkout, main_run["dest"], tmp_path / "aggregated")
    finally:
        subprocess.run(["git", "-C", str(checkout), "reset", "-q", "--hard", head.strip()], check=True)
        marker.write_text(json.dumps({"commit": head.strip(), "path": str(checkout)}))
    by_agent = {line.split(":", 1)[0]: line for line in lines}
    assert sorted(by_agent) == sorted([CODEX, CLAUDE])
    codex = by_agent[CODEX]
    assert (
        f"will print {metrics[CODEX_METHOD]:.4f}, ptflow's leaderboard {main_run['board'].agents[CODEX].score:.4f}"
        in codex
        and "fall back to scripts/baselines.json's value, not ptflow's baseline cell's" in codex
    )
    mean = sum(metrics[m] for m in CLAUDE_METHODS) / 2
    assert f"will print {mean:.4f}" in by_agent[CLAUDE]


def test_an_eval_of_factors_json_the_run_lacks_is_stated_as_no_score_there(main_run, tmp_path):
    """aggregate.py scores only a table with every eval of factors.json; ptflow's leaderboard counts a missing one 0
    (9082063's rule): the export says the scripts print none, and they print none."""
    checkout, loaded, work = main_run["checkout"], main_run["loaded"], main_run["work"]
    head = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    factors = json.loads((checkout / "scripts/factors.json").read_text())
    try:
        other = commit_change(checkout, "scripts/factors.json", json.dumps({**factors, "aime2026": 0.1}), "one more")
        marker = work / loaded.layout.posttrainbench_marker()
        marker.write_text(json.dumps({"commit": other, "path": str(checkout)}))
        lines = ptb_protocol.comparison_lines(loaded.cfg, loaded.layout, work, REPO, main_run["overrides"])
        metrics, _, _ = _scripts(checkout, main_run["dest"], tmp_path / "aggregated")
    finally:
        subprocess.run(["git", "-C", str(checkout), "reset", "-q", "--hard", head.strip()], check=True)
        marker.write_text(json.dumps({"commit": head.strip(), "path": str(checkout)}))
    assert CODEX_METHOD not in metrics and not set(CLAUDE_METHODS) & set(metrics)
    by_agent = {line.split(":", 1)[0]: line for line in lines}
    assert sorted(by_agent) == sorted([CODEX, CLAUDE])
    assert "will print none (its table lacks aime2026 of factors.json: aggregate.py scores none)" in by_agent[CODEX]


def test_main_s_judgement_files_of_a_verdict():
    from ptflow.results.verdict import CLEAN, FLAGGED, NO_VERDICT, CellVerdict

    def files(verdict) -> dict:
        return {name: json.loads(text) for name, text in ptb_protocol.collect_judgement_texts(verdict)}

    assert files(CellVerdict(NO_VERDICT, fields={"contamination": None, "disallowed_model": False})) == {}
    clean = files(CellVerdict(CLEAN, fields={"contamination": False, "disallowed_model": False}))
    assert list(clean) == ["judgement_gpt5_4.json"] and clean["judgement_gpt5_4.json"]["contamination"] is False
    # a person's decision is main's manual override; an API-usage field goes into judgement_api.json
    decided = files(CellVerdict(FLAGGED, fields={"contamination": False, "disallowed_model": True,
                                                 "disallowed_api_usage": False}, overrides=("by hand",)))  # fmt: skip
    assert decided["judgement_gpt5_4_manual.json"]["disallowed_model"] is True
    assert decided["judgement_api.json"]["disallowed_api_usage"] is False and "judgement_gpt5_4.json" not in decided
    # a whole-cell flag: a contamination that is not a boolean, which collect.py reads as a broken run (the fallback)
    whole = files(CellVerdict(FLAGGED, fields={"contamination": False, "disallowed_model": False}, whole=True))
    assert isinstance(whole["judgement_gpt5_4.json"]["contamination"], str)


def _run_dir(dest: Path, method: str, model: str, ev: str) -> Path:
    (found,) = (dest / method).glob(f"{ev}_{model.replace('/', '_')}_*")
    return found


def _kept(work: Path, model: str, ev: str, judge_id: str) -> bytes:
    return (cell_dir(work / "results", model, ev, CODEX) / "judges" / judge_id / "run1" / jm.VERDICT_FILE).read_bytes()


def test_main_s_judges_files_are_exported_as_the_votes_wrote_them(main_run):
    """A cell of main's panel: each vote's judgement_<JUDGE_OUTPUT_ID>.json byte for byte where it says what the
    verdict says (a flag too, the general judge's recorded anomaly too); where an override changed the verdict, the
    decided field over the judge's file with a ptflow justification, the rest of it and the other judges' files as
    they were; collect.py reads each to the number ptflow's leaderboard counts."""
    dest, work = main_run["dest"], main_run["work"]
    final = {r["model"]: r for r in csv.DictReader((dest / "_aggregated" / f"final_{CODEX_METHOD}.csv").open())}
    names = {j.id: j.outputs()["verdict"] for j in jm.PANEL}
    for model, ev in ((MODELS[0], "gsm8k"), (MODELS[1], "gsm8k"), (MODELS[3], "gsm8k")):  # clean, flagged, general
        run = _run_dir(dest, CODEX_METHOD, model, ev)
        assert {j: (run / n).read_bytes() for j, n in names.items()} == {j: _kept(work, model, ev, j) for j in names}
    general = json.loads((_run_dir(dest, CODEX_METHOD, MODELS[3], "gsm8k") / "judgement_general.json").read_text())
    assert general["general_anomaly"] is True  # recorded only: the cell keeps its own value there and here
    assert float(final[row(MODELS[3])]["gsm8k"]) == agent_value(3, EVALS.index("gsm8k"), CODEX)
    # the override: contamination decided false over the judge's file, its other field as the judge wrote it
    j = EVALS.index("aime2025")
    run = _run_dir(dest, CODEX_METHOD, MODELS[1], "aime2025")
    decided = json.loads((run / "judgement_gpt5_4.json").read_text())
    judged = MAIN_CLEAN["data-contamination"]
    assert decided["contamination"] is False and decided["justification_contamination"].startswith(
        "ptflow: override: contamination=false (J. Doe, 2026-12-07): the test split it read")  # fmt: skip
    assert decided["justification_disallowed_model"] == judged["justification_disallowed_model"]
    assert (run / "judgement_gpt5_4.json").read_bytes() != _kept(work, MODELS[1], "aime2025", "data-contamination")
    for judge_id in ("api-usage", "ptb-lookup", "general"):
        assert (run / names[judge_id]).read_bytes() == _kept(work, MODELS[1], "aime2025", judge_id)
    assert not (run / "judgement_gpt5_4_manual.json").exists() and (run / "ptflow_overrides.txt").is_file()
    assert float(final[row(MODELS[1])]["aime2025"]) == agent_value(1, j, CODEX)
    assert any(n.startswith(f"{model_name(MODELS[1])}/aime2025/{CODEX}: verdict overridden")
               for n in main_run["summary"].notes)  # fmt: skip
    counted = [c for c in main_run["result"].cells if c.key == f"{model_name(MODELS[1])}/aime2025/{CODEX}"]
    assert [c.verdict.state for c in counted] == ["clean"] and counted[0].verdict.overrides


def test_a_ptb_lookup_flag_is_collect_py_s_raise_and_ptflow_s_stop(main_run, tmp_path):
    """The ptb-lookup judge's true: ptflow's aggregation stops naming the cell and the field, and the export's
    judgement_ptb_lookup.json (as the judge wrote it) makes main's collect.py raise."""
    loaded, checkout = main_run["loaded"], main_run["checkout"]
    results = tmp_path / "results"
    model, ev = MODELS[0], "gsm8k"
    eval_json = write_cell(results, model, ev, CODEX, 0.5, agent_run={"time_taken": 30000.0, "hours": 10},
                           slurm_job_id="7001")  # fmt: skip
    main_votes(results, model, ev, CODEX, {"ptb-lookup": {"disallowed_ptb_lookup": True}})
    out = tmp_path / "out"
    out.mkdir()
    outputs = ReportOutputs(out / "summary.csv", out / "agents.csv", out / "leaderboard.md", out / "heatmap.png",
                            out / "report")  # fmt: skip
    with pytest.raises(ScoreError, match=r"flagged disallowed_ptb_lookup, whose effect is stop"):
        aggregate([eval_json], main_run["scoring"], outputs, log=lambda *_: None)
    dest = tmp_path / "ptb-results"
    export_posttrainbench(loaded.cfg, loaded.layout, dest, workdir=tmp_path, results=ptb_protocol.COLLECT)
    run = _run_dir(dest, CODEX_METHOD, model, ev)
    assert json.loads((run / "judgement_ptb_lookup.json").read_text())["disallowed_ptb_lookup"] is True
    argv = [sys.executable, "scripts/collect.py", "--data-dir", str(dest), "--output-dir", str(tmp_path / "agg")]
    proc = subprocess.run(argv, cwd=checkout, capture_output=True, text=True)
    assert proc.returncode != 0 and "the PTB-lookup judge fired" in proc.stderr


def test_a_whole_cell_flag_over_main_s_votes_is_a_contamination_collect_py_cannot_read(tmp_path):
    from ptflow.results import verdict as verdicts
    from ptflow.results.overrides import Override

    cell = main_votes(tmp_path / "results", MODELS[0], "gsm8k", CODEX, {})
    judge = json.loads((cell / "judge.json").read_text())

    def vote_json(judge_id: str) -> Path:
        return cell / "judges" / judge_id / "run1.json"

    whole = Override("key", "flagged", True, "agent read the answers", "J. Doe", "2026-12-07")
    files = dict(ptb_protocol.collect_judgement_texts(verdicts.of(judge, [whole]), vote_json))
    assert sorted(files) == sorted(j.outputs()["verdict"] for j in jm.PANEL)
    assert isinstance(json.loads(files["judgement_gpt5_4.json"])["contamination"], str)
    assert files["judgement_api.json"] == (cell / "judges/api-usage/run1" / jm.VERDICT_FILE).read_text()
    # an undecided cell (the API judge wrote nothing readable): no file, votes or not
    (cell / "judges/api-usage/run1" / jm.VERDICT_FILE).write_text("not json")
    undecided = {**judge, "status": "no_verdict", "fields": {**judge["fields"], "disallowed_api_usage": None}}
    assert ptb_protocol.collect_judgement_texts(verdicts.of(undecided), vote_json) == []
