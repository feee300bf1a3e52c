"""The spend budget's parts (ptflow.config.spend, ptflow.stages.train.agent.spend): dollars from a CLI's usage (its own
price, else tokens x the price table, else unknown with why; a subscription never priced), the shipped price table
against its schema, the caps refused in one line where they cannot work, the live watch over a growing stream and
the matrix cap's not-started marker. The real CLI stopped at its cap: tests/integration/test_spend_cap.py."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from ptflow.config.layout import Layout
from ptflow.config.matrix import build_config
from ptflow.config.spend import (
    DEFAULT_PRICES,
    MATRIX_CAP_REACHED,
    NOT_STARTED_FILE,
    CellSpend,
    load_prices,
    spend_settings,
    train_spend,
    usd_of,
    write_ledger,
)
from ptflow.config.validate import ConfigError
from ptflow.stages.train.agent.context import AgentCellError
from ptflow.stages.train.agent.spend import SpendWatch, check_matrix_cap, matrix_spent
from tests.conftest import REPO

PRICE = {"input": 2.0, "cached_input": 0.5, "output": 10.0}


def test_dollars_from_the_cli_the_table_or_unknown():
    usage = {"input_tokens": 1_000_000, "cached_tokens": 400_000, "output_tokens": 100_000, "cost_usd": None}
    # 600k fresh x $2 + 400k cached x $0.5 + 100k out x $10 = 1.2 + 0.2 + 1.0
    d = usd_of(usage, model="m", price=PRICE)
    assert (d.usd, d.basis) == (2.4, "prices") and d.text() == "$2.40"
    assert usd_of({**usage, "cost_usd": 0.7}, model="m", price=PRICE).to_json()["basis"] == "cli"  # its own price
    unknown = usd_of(usage, model="kimi-k2.6", price=None)
    assert unknown.usd is None and unknown.why == "no price for kimi-k2.6"
    assert unknown.text() == "n/a (tokens only, no price)"
    sub = usd_of({**usage, "cost_usd": 3.0}, model="m", price=PRICE, subscription=True)
    assert sub.usd is None and sub.text() == "subscription"
    assert usd_of(None, model="m", price=PRICE).basis == "none"


def test_the_shipped_price_table_follows_its_schema(tmp_path):
    table = load_prices(REPO / DEFAULT_PRICES)
    assert table["source"].startswith("https://") and table["date"]
    assert all(p["input"] > 0 and p["output"] > 0 for p in table["models"].values())
    bad = tmp_path / "prices.yaml"
    bad.write_text("source: x\ndate: 2026-11-29\nmodels:\n  m: {input: 1}\n")
    with pytest.raises(ConfigError) as err:
        load_prices(bad)
    assert "spend.prices" in str(err.value) and "output" in str(err.value) and "\n" not in str(err.value)


def _agent_raw(default_raw, **agent) -> dict:
    default_raw["agents"].append({"id": "oc", "kind": "cli-agent", "cli": "opencode", "model": "opencode/kimi-k2.6",
                                  "hours": 1, "keys": ["OPENCODE_API_KEY"], **agent})  # fmt: skip
    default_raw["matrix"]["agents"] = "all"
    return default_raw


def _prices(tmp_path, models: dict) -> str:
    path = tmp_path / "prices.yaml"
    path.write_text(json.dumps({"source": "https://example.org/pricing", "date": "2026-11-29", "models": models}))
    return str(path)


@pytest.mark.parametrize(
    ("agent", "spend", "words"),
    [
        ({"max_spend_usd": 5}, {}, ["agents[", "no price for 'opencode/kimi-k2.6'"]),
        ({"max_spend_usd": 5, "subscription": True}, {}, ["subscription", "remove its cap"]),
        ({"cli": "codex", "model": "gpt-5", "max_spend_usd": 5}, {}, ["turn.completed", "remove the cap"]),
        ({}, {"max_usd_per_cell": 5}, ["spend.max_usd_per_cell", "no price"]),
    ],
)
def test_a_cap_that_cannot_work_is_refused_in_one_line(default_raw, agent, spend, words):
    raw = _agent_raw(default_raw, **agent)
    if agent.get("cli") == "codex":
        raw["agents"][-1]["keys"] = ["OPENAI_API_KEY"]
    raw["spend"] = spend
    with pytest.raises(ConfigError) as err:
        spend_settings(build_config(raw), REPO)
    text = str(err.value)
    assert all(w in text for w in words) and "\n" not in text, text


def test_caps_and_prices_as_the_config_gives_them(default_raw, tmp_path):
    raw = _agent_raw(default_raw, max_spend_usd=0.5)
    raw["agents"].append({**raw["agents"][-1], "id": "sub", "subscription": True})
    raw["agents"][-1].pop("max_spend_usd")
    raw["spend"] = {"prices": _prices(tmp_path, {"kimi-k2.6": PRICE}), "max_usd": 2, "max_usd_per_cell": 1}
    settings = spend_settings(build_config(raw), REPO)
    # its own cap; the subscription passed by the default; the model found by its last path part
    assert settings.agent_caps == {"oc": 0.5} and settings.matrix_cap == 2.0 and settings.subscriptions == {"sub"}
    assert settings.price("opencode/kimi-k2.6") == PRICE


def _step(tokens_in: int, tokens_out: int) -> str:
    """One opencode ``step_finish`` event, as its --format json prints it."""
    part = {"type": "step-finish", "tokens": {"input": tokens_in, "output": tokens_out, "cache": {"read": 0}},
            "cost": 0}  # fmt: skip
    return json.dumps({"type": "step_finish", "part": part}) + "\n"


def test_the_watch_reads_the_stream_as_it_grows(tmp_path):
    stdout = tmp_path / "stdout.log"
    spend = CellSpend(cap_usd=0.002, price=PRICE, subscription=False, live=str(tmp_path / "spend.json"))
    watch = SpendWatch(spend, "opencode", "kimi-k2.6", stdout, log=lambda _: None)
    stdout.write_text("=== ptflow: attempt 1 ===\n" + _step(500, 0))  # 500 x $2/M = $0.001
    assert watch.check().usd == 0.001 and not watch.reached.is_set()
    with stdout.open("a") as fh:
        fh.write(_step(500, 0) + '{"type": "step_fin')  # a line being written is skipped
    assert watch.check().usd == 0.002 and watch.reached.is_set()
    live = json.loads((tmp_path / "spend.json").read_text())
    assert live["usd"] == 0.002 and live["cap_usd"] == 0.002 and live["api_usage"]["input_tokens"] == 1000


def test_the_matrix_cap_leaves_a_marker_and_one_line(tmp_path):
    """The cell reads the other agent cells from the run's ledger (its own earlier spend is its own cap's business);
    at the cap it writes its marker and fails in one line; a ledger it cannot read starts no agent either."""
    done, running, own = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    for d in (done, running, own):
        (d / "agent").mkdir(parents=True)
    (done / "checkpoint.json").write_text(json.dumps({"agent_run": {"spend": {"usd": 0.75, "basis": "prices"}}}))
    (running / "agent" / "spend.json").write_text(json.dumps({"usd": 0.5}))
    (own / "agent" / "spend.json").write_text(json.dumps({"usd": 5.0}))  # an earlier attempt of this cell
    cells = [{"cell": d.name, "trace_dir": str(d / "agent"), "manifest": str(d / "checkpoint.json")}
             for d in (done, running, own)]  # fmt: skip
    assert matrix_spent(cells[:2]) == (1.25, 0)
    ledger = tmp_path / "ledger.json"
    ledger.write_text(json.dumps({"cap_usd": 2.0, "cells": cells}))
    trace = own / "agent"
    under = CellSpend(None, None, False, str(trace / "spend.json"), matrix_cap_usd=2.0, ledger=str(ledger))
    check_matrix_cap(under, trace, "oc", print)
    assert not (trace / NOT_STARTED_FILE).exists()
    reached = replace(under, matrix_cap_usd=1.25)
    with pytest.raises(AgentCellError) as err:
        check_matrix_cap(reached, trace, "oc", print)
    assert f"not started: {MATRIX_CAP_REACHED}" in str(err.value) and "\n" not in str(err.value)
    marker = json.loads((trace / NOT_STARTED_FILE).read_text())
    assert marker["reason"] == MATRIX_CAP_REACHED and marker["spent_usd"] == 1.25 and marker["cap_usd"] == 1.25
    check_matrix_cap(under, trace, "oc", print)  # the cap raised: the marker goes, the agent starts
    assert not Path(trace / NOT_STARTED_FILE).exists()
    with pytest.raises(AgentCellError) as err:
        check_matrix_cap(replace(under, ledger=str(tmp_path / "absent.json")), trace, "oc", print)
    assert (
        "the matrix cap's ledger" in str(err.value) and "absent.json" in str(err.value) and "\n" not in str(err.value)
    )


def test_a_cell_is_handed_its_spend_and_the_ledger_is_the_whole_matrix_once(default_raw, tmp_path):
    """What an agent cell's job is handed of the spend (in rule train's one params value) is the same size whatever
    the matrix's: with a matrix cap, the ledger's path; the ledger, written once when the run starts, lists every
    agent cell of the matrix and nothing else."""
    raw = _agent_raw(default_raw)
    raw["spend"] = {"prices": _prices(tmp_path, {"kimi-k2.6": PRICE}), "max_usd": 3.0}
    cfg = build_config(raw)
    layout = Layout(str(tmp_path / "results"), str(tmp_path / "scratch"), str(tmp_path / "hf"))
    settings = spend_settings(cfg, REPO)
    path = write_ledger(settings, cfg, layout)
    ledger = json.loads(Path(path).read_text())
    agent_cells = [c for c in cfg.cells if c.agent == "oc"]
    assert ledger["cap_usd"] == 3.0 and [c["cell"] for c in ledger["cells"]] == [c.key for c in agent_cells]
    cell = agent_cells[0]
    handed = train_spend(settings, cfg.agent_for("oc"), layout.agent_trace_dir(cell.model, cell.eval, "oc"), path)
    assert handed.matrix_cap_usd == 3.0 and handed.ledger == path and handed.price == PRICE
    assert train_spend(settings, cfg.agent_for("sft"), "unused", path) is None  # not an agent CLI's cell
    no_cap = spend_settings(build_config({**raw, "spend": {"prices": raw["spend"]["prices"]}}), REPO)
    assert write_ledger(no_cap, cfg, layout) is None
    assert train_spend(no_cap, cfg.agent_for("oc"), "t", path).ledger is None


def test_the_leaderboard_dollars_say_unknown_as_unknown():
    """An agent's dollars (ptflow.results.scoring.ApiSpend): the sum and mean over the cells that have them, the
    cells without a price named, never filled in with the others' mean; a subscription says so."""
    from ptflow.results.scoring import ApiSpend

    tokens = {"input_tokens": 100, "output_tokens": 10, "cached_tokens": 0, "cost_usd": None}
    priced = {**tokens, "spend": {"usd": 1.5, "basis": "prices"}}
    unpriced = {**tokens, "spend": {"usd": None, "basis": "unpriced"}}
    spend = ApiSpend.of([priced, {**priced, "spend": {"usd": 0.5, "basis": "prices"}}, unpriced])
    assert (spend.usd, spend.usd_cells, spend.cells) == (2.0, 2, 3)
    assert spend.dollars_text() == "$2.00 (mean $1.00 per cell); 1 cell unknown (no price)"
    assert ApiSpend.of([unpriced, tokens]).dollars_text() == "n/a (tokens only, no price)"
    assert ApiSpend.of([{**tokens, "cost_usd": 0.25}]).dollars_text() == "$0.25 (mean $0.25 per cell)"  # claude's
    sub = {**tokens, "cost_usd": 0.3, "spend": {"usd": None, "basis": "subscription"}}
    assert ApiSpend.of([sub]).dollars_text() == "subscription"


def test_status_and_plan_show_spend_caps_and_unstarted_cells(default_raw, tmp_path):
    """ptflow status's and plan's spend lines (ptflow.ops.spend_view) over a matrix's files: one cell's dollars,
    one with tokens but no price said as unknown, one left unstarted by the matrix cap; the most the matrix may
    spend is the per-cell caps summed, at most the matrix cap."""
    from ptflow.config.layout import Layout
    from ptflow.ops.spend_view import spend_view

    raw = _agent_raw(default_raw, max_spend_usd=0.5)
    raw["matrix"] = {"models": "all", "evals": ["add"], "agents": ["oc"]}
    raw["spend"] = {"prices": _prices(tmp_path, {"kimi-k2.6": PRICE}), "max_usd": 10}
    cfg = build_config(raw)
    layout = Layout.from_config(raw, {})
    first, second = cfg.cells[:2]
    trace = tmp_path / layout.agent_trace_dir(first.model, first.eval, first.agent)
    trace.mkdir(parents=True)
    (trace / "spend.json").write_text(json.dumps({"usd": 0.3, "basis": "prices"}))
    other = tmp_path / layout.agent_trace_dir(second.model, second.eval, second.agent)
    other.mkdir(parents=True)
    (other / NOT_STARTED_FILE).write_text(json.dumps({"reason": MATRIX_CAP_REACHED}))
    view = spend_view(cfg, layout, tmp_path, REPO)
    status = "\n".join(view.status_lines())
    assert f"spend so far: $0.30 over 1 of {len(cfg.cells)} agent cells" in status
    assert "matrix $10.00 (spend.max_usd); oc $0.50 per cell" in status
    assert f"not started: {MATRIX_CAP_REACHED} (1 cells: {second.key})" in status
    assert view.most == min(0.5 * len(cfg.cells), 10)
    assert f"most the matrix may spend: ${view.most:.2f}" in "\n".join(view.plan_lines())


def test_the_matrix_cap_reached_at_parse_leaves_the_unstarted_cells_out_of_the_run(default_raw, tmp_path, monkeypatch,
                                                                                   capsys):  # fmt: skip
    """When the workflow is parsed (common.smk's RuleInputs, ptflow.stages.train.agent.spend.matrix_cap_reached):
    below the cap every cell is a target; at the cap the agent cells without a manifest leave the run's targets and rule
    aggregate's inputs, before any allocation, said in one line (the driver only), and aggregate's scoring params
    mark them so the leaderboard says why; a finished cell (its manifest) stays and is evaluated and scored."""
    from ptflow.config.load import resolve
    from ptflow.jobs.build import Jobs
    from ptflow.jobs.rule_values import RuleInputs
    from ptflow.ops.spend_view import spend_view

    raw = _agent_raw(default_raw, max_spend_usd=0.5)
    raw["matrix"] = {"models": "all", "evals": ["add"], "agents": ["baseline", "oc"]}
    raw["spend"] = {"prices": _prices(tmp_path, {"kimi-k2.6": PRICE}), "max_usd": 1.0}
    monkeypatch.chdir(tmp_path)  # the workflow's working directory: the layout's paths are relative to it
    loaded = resolve(raw, REPO, tmp_path)
    cfg, layout = loaded.cfg, loaded.layout
    settings = spend_settings(cfg, REPO)
    finished, running, *waiting = [c for c in cfg.cells if c.agent == "oc"]
    Path(layout.manifest(finished.model, finished.eval, finished.agent)).parent.mkdir(parents=True)
    Path(layout.manifest(finished.model, finished.eval, finished.agent)).write_text(
        json.dumps({"agent_run": {"spend": {"usd": 0.6, "basis": "prices"}}}))  # fmt: skip
    live = Path(layout.agent_trace_dir(running.model, running.eval, running.agent)) / "spend.json"
    live.parent.mkdir(parents=True)
    live.write_text(json.dumps({"usd": 0.3}))  # started, stopped before its manifest: $0.90 in all, under the cap

    def inputs(announce=True):
        return RuleInputs(Jobs(cfg, loaded.site, layout), (), settings, announce=announce)

    under = inputs()
    assert under.capped is None and len(under.eval_jsons()) == len(cfg.cells) and capsys.readouterr().err == ""
    live.write_text(json.dumps({"usd": 0.45}))  # $1.05: the cap reached
    capped = inputs()
    line = (f"matrix spend cap $1.00 reached ($1.05 spent by 2 cells): {1 + len(waiting)} agent cells not started; "
            "raise spend.max_usd to go on")  # fmt: skip
    assert capsys.readouterr().err == line + "\n"
    left = {running.key, *(c.key for c in waiting)}
    assert set(capped.capped.waiting) == left
    files = {layout.eval_json(*k.split("/")) for k in left} | {layout.judge_json(*k.split("/")) for k in left}
    assert not files & set(capped.final_outputs()) and not files & {*capped.eval_jsons(), *capped.judge_jsons()}
    assert layout.eval_json(finished.model, finished.eval, finished.agent) in capped.eval_jsons()
    assert layout.summary() in capped.final_outputs()  # the aggregation still runs
    inputs(announce=False)  # a job step's parse: nothing said
    assert capsys.readouterr().err == ""
    # aggregate's params: unchanged below the cap; at it, the unstarted cells' reason, which the score shows
    spec = Jobs(cfg, loaded.site, layout).scoring(None)
    assert under.scoring(spec) == spec.to_params()
    expected = capped.scoring(spec)["expected"]
    notes = {f"{e['model']}/{e['eval']}/{e['agent']}": e.get("not_started") for e in expected}
    assert {k for k, v in notes.items() if v} == left
    assert notes[running.key] == f"not started: {MATRIX_CAP_REACHED} ($1.05 spent of the matrix's $1.00, spend.max_usd)"
    # (summary.csv's fallback_reason from it: tests/e2e/test_spend_budget.py)
    # ptflow status and plan say the same, over the same files
    view = spend_view(cfg, layout, tmp_path, REPO)
    assert sorted(view.not_started) == sorted(left) and view.cap_reached == line
    assert f"  {line}" in view.plan_lines()
