"""The judge panel run for real on the local profile (issue 49): two stand-in judges (``python -m
tests.support.fake_judge``, a ``cli:`` judge) on a scripted agent's cell that reads the test split. Judge gpt judges
three times, decided by majority (its third run dissents: contamination 2 of 3); judge kimi answers disallowed_model.
Each run is its own file target: deleting one vote judges that run again alone (and decides again), and a judge added
to the config runs only its own votes on the finished cell, never the agent or its evaluation; other decision rules
decide again without judging, and a flagged field whose effect is stop fails rule aggregate in one line.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml

from ptflow.ops.status import cell_verdict
from tests.e2e.smk import REPO, plan, snakemake
from tests.support.codex_sign_in import write_codex_sign_in

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]

OVERLAY = str(REPO / "tests" / "e2e" / "judge_panel.yaml")
MODEL = "ptflow--tiny-llama-h64"
ENV = {"PTFLOW_FAKE_KEY": "sk-ptflow-FAKE-panel-3e5b"}
CELL_RULES = {"train", "evaluate", "preprocess", "cache_model", "cache_dataset"}


@pytest.fixture(scope="module")
def done(tmp_path_factory):
    work = tmp_path_factory.mktemp("panel")
    snakemake(work, "--configfile", OVERLAY, env={**ENV, "TMPDIR": str(tmp_path_factory.mktemp("panel_tmp"))})
    return work


def cell(work: Path) -> Path:
    return work / "results" / "cells" / MODEL / "add" / "scripted-overrun"


def test_two_judges_one_by_majority_decide_the_cell_and_the_report_shows_the_votes(done):
    judge = json.loads((cell(done) / "judge.json").read_text())
    assert judge["status"] == "judged" and judge["flagged"] is True and judge["effect"] == "fallback"
    assert judge["fields"] == {"contamination": True, "disallowed_model": False} and judge["contamination"] is True
    assert [(v["judge"], v["run"], v["fields"]) for v in judge["votes"]] == [
        ("gpt", 1, {"contamination": True, "disallowed_model": False}),
        ("gpt", 2, {"contamination": True, "disallowed_model": False}),
        ("gpt", 3, {"contamination": False, "disallowed_model": False}),  # the dissenting run
        ("kimi", 1, {"disallowed_model": False}),
    ]
    assert judge["judges"]["gpt"]["tally"]["contamination"] == {"flagged": 2, "votes": 3, "value": True}
    assert judge["decision"] == {"across_judges": "any", "across_runs": {"gpt": "majority", "kimi": "majority"}}
    rows = {r["agent"]: r for r in csv.DictReader((done / "results" / "summary.csv").open())}
    overrun = rows["scripted-overrun"]
    assert overrun["judge"] == "flagged" and overrun["fallback"] == "yes"
    assert overrun["fallback_reason"].startswith("judge flagged contamination")
    assert "(votes: gpt 2/3 contamination, kimi 0/1)" in overrun["fallback_reason"]
    assert "votes: gpt 2/3 contamination, kimi 0/1" in (done / "results" / "leaderboard.md").read_text()
    assert cell_verdict(cell(done) / "judge.json").text() == "flagged contamination: gpt 2/3 contamination, kimi 0/1"
    page = next((done / "results" / "report" / "cells").glob("*scripted-overrun*.html")).read_text()
    assert 'id="judge-votes">gpt 2/3 contamination, kimi 0/1' in page


def _counts(jobs) -> dict[str, int]:
    return {rule: len(outputs) for rule, outputs in jobs.items()}


def test_a_deleted_vote_is_judged_again_alone(done):
    vote = cell(done) / "judges" / "gpt" / "run2.json"
    vote.unlink()
    jobs = plan(done, "--configfile", OVERLAY, env=ENV)
    assert jobs["judge_run"] == {str(vote.relative_to(done))}, jobs.text[-3000:]
    assert not CELL_RULES & set(jobs) and set(jobs) <= {"judge_run", "judge", "aggregate", "all"}, jobs.text[-3000:]
    snakemake(done, "--configfile", OVERLAY, env=ENV)
    assert json.loads(vote.read_text())["fields"]["contamination"] is True
    assert json.loads((cell(done) / "judge.json").read_text())["flagged"] is True


def test_a_judge_added_to_the_config_runs_only_its_votes(done, tmp_path):
    added = tmp_path / "third_judge.yaml"
    panel = yaml.safe_load(Path(OVERLAY).read_text())["judge"]
    panel["judges"].append({"id": "extra", "cli": ["{python}", "-m", "tests.support.fake_judge"], "runs": 2})
    added.write_text(json.dumps({"judge": panel}))
    jobs = plan(done, "--configfile", OVERLAY, str(added), env=ENV)
    extra = cell(done).relative_to(done) / "judges" / "extra"
    assert jobs["judge_run"] == {str(extra / "run1.json"), str(extra / "run2.json")}, jobs.text[-3000:]
    assert not CELL_RULES & set(jobs) and set(jobs) <= {"judge_run", "judge", "aggregate", "all"}, jobs.text[-3000:]


def test_a_signed_in_judge_is_planned_alone_and_a_missing_credentials_file_is_refused_before_any_job(done, tmp_path):
    """A judge's ``sign_in`` through Snakemake: the signed-in codex judge's one vote is planned on the finished cell,
    nothing else; the vote itself (the real codex signed in against its stand-in) is
    tests/integration/test_judge_sign_in.py's. Without the file, the run stops at its start naming the judge, the key
    and the path, before any job."""
    auth = write_codex_sign_in(tmp_path / "user" / "auth.json", "fixture-access-token", "fixture-refresh-token")
    signed = tmp_path / "signed.yaml"
    panel = yaml.safe_load(Path(OVERLAY).read_text())["judge"]
    panel["judges"].append({"id": "signed", "agent": "codex", "model": "gpt-5.1-codex",
                            "sign_in": {"credentials": str(auth)}})  # fmt: skip
    signed.write_text(json.dumps({"judge": panel}))
    jobs = plan(done, "--configfile", OVERLAY, str(signed), env=ENV)
    vote = cell(done).relative_to(done) / "judges" / "signed" / "run1.json"
    assert jobs["judge_run"] == {str(vote)}, jobs.text[-3000:]
    assert not CELL_RULES & set(jobs), jobs.text[-3000:]
    auth.unlink()
    refused = snakemake(done, "--configfile", OVERLAY, str(signed), env=ENV, check=False)
    said = refused.stdout + refused.stderr
    assert refused.returncode != 0 and f"judge signed's sign_in.credentials: no credentials file at {auth}" in said
    assert not (done / vote).exists() and "rule judge_run:" not in said, said[-3000:]


def test_other_decision_rules_decide_again_without_judging_and_a_stop_field_stops_the_aggregation(done, tmp_path):
    """Across judges by majority, gpt's runs by any, contamination's effect stop: only the decision and the
    aggregation are planned (no vote is judged again), and rule aggregate fails naming the cell and the field."""
    changed = tmp_path / "stop.yaml"
    panel = yaml.safe_load(Path(OVERLAY).read_text())["judge"]
    panel |= {"decision": "majority", "effects": {"contamination": "stop"}}
    panel["judges"][0]["decision"] = "any"
    changed.write_text(json.dumps({"judge": panel}))
    jobs = plan(done, "--configfile", OVERLAY, str(changed), env=ENV)
    assert set(jobs) <= {"judge", "aggregate", "all"} and "judge" in jobs, jobs.text[-3000:]
    failed = snakemake(done, "--configfile", OVERLAY, str(changed), env=ENV, check=False)
    judge = json.loads((cell(done) / "judge.json").read_text())
    assert judge["effect"] == "stop" and judge["decision"]["across_runs"]["gpt"] == "any"
    assert failed.returncode != 0
    said = failed.stdout + failed.stderr
    assert f"cell {MODEL}/add/scripted-overrun: the judges flagged contamination, whose effect is stop" in said
