"""PostTrainBench agent cells, run for real on the local profile with our scripted agent.

The scripted agent (``python -m ptflow.standins.scripted_agent``) is a real program standing in for
claude/codex/gemini (no agent API is reachable here); the judge is ``python -m tests.support.fake_judge``, a
stand-in for an LLM judge that flags traces reading ``test.parquet``. Everything else is the production path: task
dir in node-local tmp, private HF cache view, ``timeout --signal=TERM --kill-after=30s``, trace, final_model copy,
evaluation, judge, leaderboard.
Matrix: one tiny model x eval ``add`` x {baseline, scripted, scripted-overrun, scripted-nomodel}.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

from ptflow.stages.evaluate.run import validate_eval_json
from tests.e2e.smk import REPO, plan, snakemake

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]

OVERLAY = str(REPO / "tests" / "e2e" / "agents_scripted.yaml")
MODEL = "ptflow--tiny-llama-h64"
FAKE_KEY = "sk-ptflow-FAKE-7d1c0e5b9a"  # must appear nowhere: not in argv, logs, results, scratch or task dir


@pytest.fixture(scope="module")
def done(tmp_path_factory):
    work = tmp_path_factory.mktemp("agents")
    tmp = tmp_path_factory.mktemp("agents_tmp")  # the task dirs and HF views go here (node-local tmp)
    proc = snakemake(work, "--configfile", OVERLAY, env={"PTFLOW_FAKE_KEY": FAKE_KEY, "TMPDIR": str(tmp)})
    return work, tmp, proc


def cell(work: Path, agent: str) -> Path:
    return work / "results" / "cells" / MODEL / "add" / agent


def load(work, agent, name):
    return json.loads((cell(work, agent) / name).read_text())


def test_scripted_agent_beats_baseline(done):
    work, _, _ = done
    base, agent = load(work, "baseline", "eval.json"), load(work, "scripted", "eval.json")
    validate_eval_json(agent)
    assert agent["status"] == "scored" and agent["checkpoint"]["kind"] == "trained"
    assert agent["agent_run"]["exit_code"] == 0 and agent["agent_run"]["budget_exhausted"] is False
    assert agent["agent_run"]["time_taken"] > 0
    assert agent["metrics"]["name"] == "accuracy" and base["metrics"]["name"] == "accuracy"
    # The overlay's 200 SFT steps are what this needs, with a margin: 0.64 on the 64 problems (the baseline scores 0);
    # 150 steps scored 0.30 and 100 steps 0.14 (measured 2026-11-27), too close or below
    assert agent["metrics"]["value"] > base["metrics"]["value"] + 0.3
    # before saving, the agent measured its model with the task dir's evaluate.py (the final evaluation's call)
    trace = (cell(work, "scripted") / "agent" / "stdout.log").read_text()
    assert "Measuring with evaluate.py (--limit 8)." in trace and "evaluate.py: accuracy " in trace
    assert "on 8 samples (scorer gsm8k_strict)" in trace
    manifest = load(work, "scripted", "checkpoint.json")
    assert manifest["agent_run"]["timeout_minutes"] == pytest.approx(0.1 * 60 + 0.2)
    assert manifest["weights"]  # final_model/ copied to scratch, hashed
    assert Path(manifest["checkpoint"]).resolve().is_relative_to((work / ".scratch").resolve())


def test_evaluated_in_the_train_job_and_deleting_eval_json_evaluates_alone(done):
    """One allocation per agent cell: the train job evaluated the model after the agent, the evaluate job adopted it.
    Deleting eval.json evaluates again in an evaluate job of its own; an evaluation that fails there, then succeeds,
    never runs the agent again."""
    work, _, _ = done
    agent = load(work, "scripted", "eval.json")
    train_log, evaluate_log = (work / "results" / "logs" / rule / MODEL / "add" / "scripted.log" for rule in
                               ("train", "evaluate"))  # fmt: skip
    assert agent["evaluated_in"] == "train_job" and load(work, "scripted-nomodel", "eval.json")["status"] == "no_model"
    assert "evaluation in the train job's allocation ended with exit 0" in train_log.read_text()
    assert "adopted the evaluation its train job made" in evaluate_log.read_text()
    (cell(work, "scripted") / "eval.json").unlink()
    trained = (cell(work, "scripted") / "checkpoint.json").stat().st_mtime_ns
    # the evaluation fails first (its weights unreadable), then succeeds: the train job never runs again
    manifest = load(work, "scripted", "checkpoint.json")
    weights = Path(manifest["checkpoint"]) / manifest["weights"][0]["path"]
    weights.rename(weights.with_name("moved-away"))
    # each rerun has one job that imports the heavy libraries: it starts cold (ptflow.ops.run_hooks.warm_start_pays)
    failed = snakemake(work, "--configfile", OVERLAY, env={"PTFLOW_FAKE_KEY": FAKE_KEY}, check=False)
    assert failed.returncode != 0 and "rule train:" not in failed.stdout + failed.stderr
    weights.with_name("moved-away").rename(weights)
    # The second run targets the cell's eval.json (named before --configfile, which takes every word after it): what
    # is under test is that cell's evaluation (and that its train job does not run again), not the aggregate after
    # it, which the module's own run made and the other tests read (that a deleted eval.json replans the aggregate:
    # tests/e2e/test_default_matrix.py, its rerun test)
    target = str((cell(work, "scripted") / "eval.json").relative_to(work))
    proc = snakemake(work, target, "--configfile", OVERLAY, env={"PTFLOW_FAKE_KEY": FAKE_KEY})
    again = load(work, "scripted", "eval.json")
    assert "evaluated_in" not in again and again["metrics"]["value"] == agent["metrics"]["value"]
    assert (cell(work, "scripted") / "checkpoint.json").stat().st_mtime_ns == trained
    assert "rule evaluate:" in proc.stdout + proc.stderr and "rule train:" not in proc.stdout + proc.stderr
    assert "evaluating in this job: its train job left no evaluation" in evaluate_log.read_text()


def test_overrun_is_recorded_and_partial_model_evaluated(done):
    work, _, _ = done
    manifest = load(work, "scripted-overrun", "checkpoint.json")
    assert manifest["agent_run"]["exit_code"] == 124 and manifest["agent_run"]["budget_exhausted"] is True
    data = load(work, "scripted-overrun", "eval.json")
    assert data["status"] == "scored" and data["agent_run"]["budget_exhausted"] is True
    log = next((work / "results" / "logs" / "train").rglob("scripted-overrun*")).read_text()
    assert "--signal=TERM --kill-after=30s 0.22m" in log and "budget exhausted (timeout)" in log


def test_overrun_without_model_says_no_final_model(done):
    work, _, _ = done
    manifest = load(work, "scripted-nomodel", "checkpoint.json")
    assert manifest["agent_run"]["exit_code"] == 124 and manifest["final_model"] is False
    data = load(work, "scripted-nomodel", "eval.json")
    validate_eval_json(data)
    assert data["status"] == "no_model" and data["metrics"] is None


def test_judge_flags_contaminating_trace_and_leaderboard_shows_it(done):
    work, _, _ = done
    assert load(work, "scripted", "judge.json")["flagged"] is False
    flagged = load(work, "scripted-overrun", "judge.json")
    assert flagged["status"] == "judged" and flagged["flagged"] is True and flagged["contamination"] is True
    assert "test.parquet" in (cell(work, "scripted-overrun") / "agent" / "trace.md").read_text()
    df = pd.read_csv(work / "results" / "summary.csv", keep_default_na=False).set_index("agent")
    assert df.loc["scripted", "judge"] == "clean" and df.loc["scripted", "fallback"] == ""
    # flagged and no-model cells count as the base model's score (PostTrainBench), said so
    base = float(df.loc["baseline", "score"])
    overrun, nomodel = df.loc["scripted-overrun"], df.loc["scripted-nomodel"]
    assert overrun["judge"] == "flagged" and overrun["fallback"] == "yes" and float(overrun["score"]) == base
    assert overrun["fallback_reason"].startswith("judge flagged contamination")
    assert nomodel["status"] == "no_model" and nomodel["fallback"] == "yes" and float(nomodel["score"]) == base
    md = (work / "results" / "leaderboard.md").read_text()
    assert "## Fallbacks" in md and "scripted-overrun | judge flagged contamination" in md


def test_key_reaches_agent_by_environment_only(done):
    work, tmp, proc = done
    trace = (cell(work, "scripted") / "agent" / "stdout.log").read_text()
    assert "keys in my environment: PTFLOW_FAKE_KEY" in trace
    assert "key values found in task dir files: 0 []" in trace  # checked by the agent inside its task dir
    needle = FAKE_KEY.encode()
    leaks = [str(p) for root in (work, tmp) for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]
    assert leaks == []
    assert FAKE_KEY not in proc.stdout + proc.stderr
    assert not list(tmp.glob("ptflow-*"))  # task dirs and HF views are removed after each cell


def test_missing_key_refused_at_start_naming_it(tmp_path, monkeypatch):
    monkeypatch.delenv("PTFLOW_FAKE_KEY", raising=False)
    proc = snakemake(tmp_path, "--configfile", OVERLAY, check=False)
    assert proc.returncode != 0
    assert "PTFLOW_FAKE_KEY is not set" in proc.stdout + proc.stderr
    assert not (tmp_path / "results").exists()  # no job ran


def test_an_override_flips_the_flagged_cell_and_reruns_only_the_aggregation(done, capsys):
    """scoring.overrides: an override contamination=false of the cell the judge flagged scores it by its own value,
    the leaderboard shows the override and its reason, judge.json stays the judge's, and editing the file afterwards
    plans rule aggregate alone (one job besides the target rule all); flagging it then runs rule aggregate alone and
    summary.csv, the leaderboard, the report, ptflow status --json and ptflow export all say flagged at once."""
    work, _, _ = done
    overrun = f"{MODEL}/add/scripted-overrun"
    entry = {"cell": overrun, "field": "contamination", "value": False, "reason": "it read the test split's size only",
             "who": "J. Doe", "when": "2026-11-30"}  # fmt: skip
    overrides = work / "overrides.yaml"
    overrides.write_text(yaml.safe_dump({"overrides": [entry]}))
    overlay = work / "with_overrides.yaml"
    overlay.write_text(yaml.safe_dump({"scoring": {"overrides": str(overrides)}}))
    args, env = ("--configfile", OVERLAY, str(overlay)), {"PTFLOW_FAKE_KEY": FAKE_KEY}
    proc = snakemake(work, *args, env=env)
    assert "rule train:" not in proc.stdout + proc.stderr and "rule judge" not in proc.stdout + proc.stderr
    df = pd.read_csv(work / "results" / "summary.csv", keep_default_na=False).set_index("agent")
    row = df.loc["scripted-overrun"]
    assert row["judge"] == "clean" and row["fallback"] == "" and float(row["score"]) == float(row["value"])
    said = "contamination=false (J. Doe, 2026-11-30): it read the test split's size only [judges: flagged]"
    assert row["override"] == said
    assert f"| {overrun} | {said} | clean |" in (work / "results" / "leaderboard.md").read_text()
    assert load(work, "scripted-overrun", "judge.json")["flagged"] is True  # the judge's record, unchanged
    entry["reason"] = "it read the test split's size only (checked twice)"
    overrides.write_text(yaml.safe_dump({"overrides": [entry]}))
    planned = plan(work, *args, env=env)
    jobs = dict(re.findall(r"^(\w+)\s+(\d+)$", planned.text, re.M))
    assert set(planned) == {"aggregate", "all"} and jobs.get("aggregate") == "1", planned.text[-3000:]
    assert jobs.get("total") == "2", planned.text[-3000:]
    # the operators flag it after all: one edit, rule aggregate alone runs, and every place says the same verdict
    entry.update(value=True, reason="it did train on the test split")
    overrides.write_text(yaml.safe_dump({"overrides": [entry]}))
    proc = snakemake(work, *args, env=env)
    ran = re.findall(r"^(?:local)?rule (\w+):", proc.stdout + proc.stderr, re.M)
    assert sorted(set(ran)) == ["aggregate", "all"] and ran.count("aggregate") == 1, ran
    df = pd.read_csv(work / "results" / "summary.csv", keep_default_na=False).set_index("agent")
    row = df.loc["scripted-overrun"]
    assert row["judge"] == "flagged" and row["fallback_reason"].startswith("flagged contamination (override: ")
    base = df.loc["baseline"]
    assert float(row["score"]) == float(base["score"]) and row["score_source"] != "cell"  # the base model's score
    said = "contamination=true (J. Doe, 2026-11-30): it did train on the test split [judges: flagged]"
    assert f"| {overrun} | {said} | flagged |" in (work / "results" / "leaderboard.md").read_text()
    page = next((work / "results" / "report" / "cells").glob("*scripted-overrun*.html")).read_text()
    assert "it did train on the test split" in page and "flagged" in page
    from ptflow.ops import cli

    smk = ["--smk", "--configfile", OVERLAY, str(overlay)]
    assert cli.main(["status", "--json", "--no-png", "-d", str(work), *smk]) == 0
    cells = {c["cell"]: c for c in json.loads(capsys.readouterr().out)["cells"]}
    verdict = cells[overrun]["verdict"]
    assert (verdict["state"], verdict["source"], verdict["counts_for_posttrainbench"]) == ("flagged", "override", False)
    assert cells[overrun]["override"] == said.split(" [judges")[0]
    dest = work / "ptb-export"
    # the scripted agents share one PostTrainBench method name (cli, model, hours): the export takes this one alone
    alone = work / "export_overrun.yaml"
    alone.write_text(yaml.safe_dump({"matrix": {"agents": ["baseline", "scripted-overrun"]}}))
    argv = ["export", "--posttrainbench", str(dest), "-d", str(work), *smk, str(alone)]
    assert cli.main(argv) == 0, capsys.readouterr()
    judged = list(dest.rglob("ptflow_overrides.txt"))
    assert len(judged) == 1 and "it did train on the test split" in judged[0].read_text(), sorted(dest.rglob("*"))
    assert (judged[0].parent / "contamination_judgement.txt").read_text() == "contamination detected\n"


def test_an_accepted_cell_is_not_rerun_and_counts_at_the_base_models_score(done):
    """scoring.overrides' accepted: the scripted-nomodel cell accepted with its eval.json deleted is no target of the
    run (the dry run plans rule aggregate alone, not its evaluation), and the leaderboard counts it at the baseline's
    score with the reason; once no longer accepted, the dry run plans its evaluation again (not its agent)."""
    work, _, _ = done
    nomodel = f"{MODEL}/add/scripted-nomodel"
    eval_json = cell(work, "scripted-nomodel") / "eval.json"
    kept = eval_json.read_bytes()
    eval_json.unlink()
    decisions = work / "accepted.yaml"
    entry = {"cell": nomodel, "reason": "overran without a model twice", "who": "J. Doe", "when": "2026-11-30"}
    decisions.write_text(yaml.safe_dump({"accepted": [entry]}))
    overlay = work / "with_accepted.yaml"
    overlay.write_text(yaml.safe_dump({"scoring": {"overrides": str(decisions)}}))
    args, env = ("--configfile", OVERLAY, str(overlay)), {"PTFLOW_FAKE_KEY": FAKE_KEY}
    try:
        planned = plan(work, *args, env=env)
        assert set(planned) == {"aggregate", "all"}, planned.text[-3000:]
        snakemake(work, *args, env=env)
        df = pd.read_csv(work / "results" / "summary.csv", keep_default_na=False).set_index("agent")
        row, said = df.loc["scripted-nomodel"], "overran without a model twice (J. Doe, 2026-11-30)"
        assert row["accepted"] == said and row["fallback_reason"] == f"accepted: {said}" and row["fallback"] == "yes"
        assert row["status"] == "missing" and float(row["score"]) == float(df.loc["baseline"]["score"])
        board = (work / "results" / "leaderboard.md").read_text()
        assert "## Accepted failures" in board and f"| {nomodel} | {said} | missing |" in board
        decisions.write_text(yaml.safe_dump({"accepted": []}))
        again = plan(work, *args, env=env)
        assert "evaluate" in again and "train" not in again and "aggregate" in again, again.text[-3000:]
    finally:
        eval_json.write_bytes(kept)
