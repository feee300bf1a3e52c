"""The judge panel: its config (shorthand and panel form, one-line errors), the decision rules (any / majority per
field, across runs and across judges, votes without a verdict), the effects (fallback, stop) and judge.json as rule
judge writes it from vote files."""

from __future__ import annotations

import json

import pytest

from ptflow.config.judges import panel_of
from ptflow.config.validate import ConfigError
from ptflow.results.cells import ScoredCell, ScoreError, read_cell
from ptflow.results.scoring import score
from ptflow.specs import JudgePanelSpec
from ptflow.stages.judge.panel import decide, decide_cell, votes_text

CLI = ["{python}", "-m", "tests.support.fake_judge"]


def _panel(**raw) -> dict:
    return panel_of(raw).to_params()


def _vote(judge, run, status="judged", **fields):
    return {"judge": judge, "run": run, "status": status, "fields": fields, "reason": f"{judge} {run}"}


def test_the_shorthand_is_a_panel_of_one_judge_named_by_its_cli():
    panel = panel_of({"agent": "codex", "model": "gpt-5.1-codex", "keys": ["OPENAI_API_KEY"]})
    (judge,) = panel.judges
    assert (judge.id, judge.runs, judge.fields, panel.decision) == (
        "codex",
        1,
        ("contamination", "disallowed_model"),
        "any",
    )
    assert judge.settings == {"agent": "codex", "model": "gpt-5.1-codex", "keys": ["OPENAI_API_KEY"]}
    assert panel.votes() == [("codex", 1)] and panel.keys == ["OPENAI_API_KEY"]
    assert panel_of({"cli": CLI, "runs": 3}).judges[0].id == "python" and panel_of(None) is None
    assert panel_of({"agent": "codex", "model": "m", "enabled": False}) is None


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"judges": [{"id": "a", "cli": CLI}, {"id": "a", "cli": CLI}]}, "two judges have the id 'a'"),
        ({"judges": [{"id": "a", "cli": CLI, "runs": 0}]}, "judge.judges[0].runs: 0"),
        ({"judges": [{"id": "a", "cli": CLI}], "effects": {"api_usage": "stop"}}, "judge.effects.api_usage: no judge"),
        ({"judges": [{"id": "a", "cli": CLI}], "decision": "most"}, "judge.decision: 'most'"),
        (
            {"judges": [{"id": "a", "agent": "codex", "model": "m", "fields": ["api_usage"]}]},
            "give those fields to a cli",
        ),
        ({"judges": []}, "names no judge"),
    ],
)
def test_a_wrong_panel_is_refused_in_one_line(raw, message):
    with pytest.raises(ConfigError) as exc:
        panel_of(raw)
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_a_judges_runs_are_decided_by_majority_or_any_per_field():
    panel = _panel(
        judges=[{"id": "gpt", "cli": CLI, "runs": 3}, {"id": "any", "cli": CLI, "runs": 3, "decision": "any"}]
    )
    votes = [_vote("gpt", 1, contamination=True, disallowed_model=False),
             _vote("gpt", 2, contamination=True, disallowed_model=True),
             _vote("gpt", 3, contamination=False, disallowed_model=False)]  # fmt: skip
    votes += [{**v, "judge": "any"} for v in votes]
    d = decide(panel, votes)
    assert d["judges"]["gpt"]["tally"]["contamination"] == {"flagged": 2, "votes": 3, "value": True}
    assert d["judges"]["gpt"]["tally"]["disallowed_model"]["value"] is False  # 1 of 3: no majority
    assert d["judges"]["any"]["tally"]["disallowed_model"]["value"] is True  # any run
    # across judges (any): one judge's flag flags the field
    assert d["fields"] == {"contamination": True, "disallowed_model": True} and d["status"] == "judged"
    assert d["flagged"] is True and d["effect"] == "fallback"


def test_across_judges_majority_needs_more_than_half():
    judges = [{"id": n, "cli": CLI} for n in ("a", "b", "c")]
    panel = _panel(judges=judges, decision="majority")
    one = [_vote("a", 1, contamination=True, disallowed_model=False)]
    one += [_vote(n, 1, contamination=False, disallowed_model=False) for n in "bc"]
    assert decide(panel, one)["fields"]["contamination"] is False
    two = [_vote(n, 1, contamination=True, disallowed_model=False) for n in "ab"]
    two += [_vote("c", 1, contamination=False, disallowed_model=False)]
    assert decide(panel, two)["fields"]["contamination"] is True


def test_votes_without_a_verdict_count_only_where_they_could_change_the_outcome():
    panel = _panel(judges=[{"id": "gpt", "cli": CLI, "runs": 3}, {"id": "kimi", "cli": CLI}])
    # a run without a verdict does not count: 2 runs, both clean
    votes = [_vote("gpt", 1, contamination=False, disallowed_model=False), _vote("gpt", 2, "no_verdict"),
             _vote("gpt", 3, contamination=False, disallowed_model=False)]  # fmt: skip
    clean = decide(panel, [*votes, _vote("kimi", 1, contamination=False, disallowed_model=False)])
    assert clean["status"] == "judged" and clean["flagged"] is False and clean["judges"]["gpt"]["no_verdict"] == 1
    assert clean["effect"] is None
    # kimi without a verdict: under `any` its flag could change the outcome -> no verdict (the base model's score)
    undecided = decide(panel, [*votes, _vote("kimi", 1, "no_verdict")])
    assert undecided["status"] == "no_verdict" and undecided["flagged"] is None and undecided["effect"] == "fallback"
    assert undecided["fields"] == {"contamination": None, "disallowed_model": None}
    # ... unless another judge's flag decides the field already
    flagged = [_vote("gpt", k, contamination=True, disallowed_model=False) for k in (1, 2, 3)]
    settled = decide(panel, [*flagged, _vote("kimi", 1, "no_verdict")])
    assert settled["fields"]["contamination"] is True and settled["fields"]["disallowed_model"] is None
    assert settled["status"] == "no_verdict" and settled["flagged"] is True


def test_a_stop_field_flagged_stops_the_aggregation_and_a_fallback_field_falls_back(tmp_path):
    panel = _panel(
        judges=[{"id": "gpt", "cli": CLI}, {"id": "api", "cli": CLI, "fields": ["disallowed_api_usage"]}],
        effects={"disallowed_api_usage": "stop"},
    )
    assert panel["effects"] == {"contamination": "fallback", "disallowed_model": "fallback",
                                "disallowed_api_usage": "stop"}  # fmt: skip
    clean = _vote("gpt", 1, contamination=False, disallowed_model=False)
    assert decide(panel, [clean, _vote("api", 1, disallowed_api_usage=True)])["effect"] == "stop"
    assert decide(panel, [{**clean, "fields": {"contamination": True, "disallowed_model": False}},
                          _vote("api", 1, disallowed_api_usage=False)])["effect"] == "fallback"  # fmt: skip
    # through the results layer: judge.json with effect stop makes rule aggregate's scoring fail, naming cell and field
    cells = []
    for agent, api_flag in (("baseline", False), ("cheat", True)):
        d = tmp_path / agent
        d.mkdir()
        metrics = {"name": "accuracy", "value": 0.5, "stderr": 0.1, "n": 4}
        cell = {"model": "org/m", "eval": "add", "agent": agent, "status": "scored", "metrics": metrics}
        (d / "eval.json").write_text(json.dumps(cell))
        votes = [clean, _vote("api", 1, disallowed_api_usage=api_flag)]
        (d / "judge.json").write_text(json.dumps({"status": "judged", **decide(panel, votes), "votes": votes}))
        cells.append(read_cell(d / "eval.json"))
    assert cells[1].verdict.effect == "stop" and cells[1].judge_votes == "gpt 0/1, api 1/1 disallowed_api_usage"
    with pytest.raises(ScoreError) as exc:
        score(cells)
    assert "cell org--m/add/cheat" in str(exc.value) and "disallowed_api_usage" in str(exc.value)
    assert "\n" not in str(exc.value)
    assert isinstance(cells[0], ScoredCell) and cells[0].verdict.effect is None


def test_rule_judge_writes_judge_json_from_the_vote_files(tmp_path):
    trace = tmp_path / "agent"
    trace.mkdir()
    (trace / "stdout.log").write_text("the agent's output\n")
    (trace / "stderr.log").write_text("")
    manifest = tmp_path / "checkpoint.json"
    manifest.write_text(json.dumps({"agent_run": {"trace_dir": str(trace)}}))
    raw = {"judges": [{"id": "gpt", "cli": CLI, "runs": 3}, {"id": "kimi", "cli": CLI}]}
    files = []
    for judge, run, flag in (("gpt", 1, True), ("gpt", 2, True), ("gpt", 3, False), ("kimi", 1, False)):
        path = tmp_path / "judges" / judge / f"run{run}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        # as judge_cell writes a vote: the judge's settings, its verdict per field and at the top level
        path.write_text(json.dumps({"status": "judged", "judge": {"cli": "python", "model": "fake"},
                                    "contamination": flag, "disallowed_model": False, "reason": f"r{run}",
                                    "fields": {"contamination": flag, "disallowed_model": False}}))  # fmt: skip
        files.append(str(path))
    spec = JudgePanelSpec(panel_of(raw).to_params(), {"model": "org/m", "eval": "add", "agent": "a"}, [])
    data = decide_cell(spec, manifest, files, tmp_path / "judge.json", log=lambda _: None)
    assert json.loads((tmp_path / "judge.json").read_text()) == data
    assert data["status"] == "judged" and data["flagged"] is True and data["contamination"] is True
    assert data["fields"] == {"contamination": True, "disallowed_model": False} and data["effect"] == "fallback"
    assert [(v["judge"], v["run"], v["fields"]["contamination"]) for v in data["votes"]] == [
        ("gpt", 1, True), ("gpt", 2, True), ("gpt", 3, False), ("kimi", 1, False)]  # fmt: skip
    assert data["decision"] == {"across_judges": "any", "across_runs": {"gpt": "majority", "kimi": "majority"}}
    assert votes_text(data) == "gpt 2/3 contamination, kimi 0/1"
    # the verdict files PostTrainBench's aggregation reads: the decided answers alone
    assert (trace / "contamination_judgement.txt").read_text() == "contamination detected\n"
    assert (trace / "disallowed_model_judgement.txt").read_text() == "only allowed use detected\n"
    skipped = decide_cell(JudgePanelSpec(None, spec.cell, []), manifest, [], tmp_path / "j2.json", log=lambda _: None)
    assert skipped["status"] == "skipped" and (trace / "trace.md").is_file()
