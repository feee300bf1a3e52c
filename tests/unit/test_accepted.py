"""Accepted failures (``accepted:`` in the file of config key scoring.overrides, ptflow.results.overrides): the file's
checks and their one line each, the run's targets without the accepted cells (ptflow.jobs.rule_values.RuleInputs),
the score at the base model's value with the reason whatever files the cell has, and where it shows: summary.csv,
leaderboard.md, the HTML report, ``ptflow status`` and ``ptflow export --posttrainbench`` (read back by the fixture of
PostTrainBench's aggregation scripts). The Snakemake proof (an accepted cell's evaluation is not planned; once no
longer accepted it is) is tests/e2e/test_agent_cells.py's."""

from __future__ import annotations

import csv
import os
import subprocess
import sys

import pytest
import yaml

from ptflow.config.load import resolve
from ptflow.jobs.build import Jobs
from ptflow.jobs.rule_values import RuleInputs
from ptflow.ops import rerun, status
from ptflow.results import ptb_score
from ptflow.results.cells import read_cell
from ptflow.results.overrides import (
    ACCEPTED_RECORD,
    Accepted,
    OverridesError,
    accepted_cells,
    decisions_for_config,
    read_accepted,
    read_overrides,
)
from ptflow.results.ptb_export import export_posttrainbench
from ptflow.results.report_site import build_site
from ptflow.results.scoring import score
from ptflow.results.settings import Settings
from ptflow.results.tables import write_outputs
from tests.conftest import REPO
from tests.support.cells import cell_dir, write_cell
from tests.support.ptb_aggregation import AGGREGATE_FINAL_PY, AGGREGATE_METHODS_PY
from tests.unit.test_ptb_export import BASE, config, run  # noqa: F401 (run: the export's fixture)

M1 = "ptflow/tiny-a-Base"
CELLS = ["ptflow--tiny-a-Base/add/agent", "ptflow--tiny-a-Base/add/agent@run2"]
ENTRY = {"cell": CELLS[0], "reason": "the API refused every try for a week", "who": "J. Doe", "when": "2026-11-30"}
SAID = "the API refused every try for a week (J. Doe, 2026-11-30)"


def write_file(path, *accepted, overrides=None, raw: str | None = None):
    data = {"accepted": list(accepted)} | ({"overrides": overrides} if overrides is not None else {})
    path.write_text(raw if raw is not None else yaml.safe_dump(data, sort_keys=False))
    return path


def test_a_file_of_accepted_cells_alone_reads_with_hub_ids_and_unquoted_dates(tmp_path):
    path = tmp_path / "decisions.yaml"
    path.write_text(
        "accepted:\n"
        "  - {cell: ptflow/tiny-a-Base/add/agent@run2, reason: no GPU on the node twice, who: ops, when: 2026-11-30}\n"
    )
    (entry,) = read_accepted(path, CELLS)
    assert entry == Accepted(CELLS[1], "no GPU on the node twice", "ops", "2026-11-30")
    assert entry.text() == "accepted: no GPU on the node twice (ops, 2026-11-30)"
    assert read_overrides(path, CELLS) == []  # either key may stand alone
    assert read_accepted(write_file(tmp_path / "empty.yaml", raw="")) == []


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"cell": "ptflow--tiny-a-Base/add/agnet"}, "accepted[0].cell: 'ptflow--tiny-a-Base/add/agnet' is not a cell "
         "of the matrix (did you mean 'ptflow--tiny-a-Base/add/agent'?); write <model>/<eval>/<agent>"),
        ({"reason": None}, "at accepted[0]: 'reason' is a required property"),
        ({"who": None}, "at accepted[0]: 'who' is a required property"),
        ({"when": None}, "at accepted[0]: 'when' is a required property"),
        ({"when": "last week"}, "accepted[0].when: 'last week' is not an ISO date; write e.g. 2026-11-30"),
        ({"reason": ""}, "at accepted[0].reason: '' should be non-empty"),
        ({"field": "flagged"}, "at accepted[0]: unknown key 'field'; allowed keys: cell, reason, when, who"),
    ],
)  # fmt: skip
def test_each_mistake_in_an_accepted_entry_is_one_line_naming_it(tmp_path, change, message):
    entry = {k: v for k, v in {**ENTRY, **change}.items() if v is not None}
    path = write_file(tmp_path / "a.yaml", entry)
    with pytest.raises(OverridesError) as err:
        read_accepted(path, CELLS)
    assert message in str(err.value) and str(path) in str(err.value) and "\n" not in str(err.value)


def test_one_cell_accepted_twice_and_a_reference_cell_are_refused(run, tmp_path):  # noqa: F811
    twice = write_file(tmp_path / "twice.yaml", ENTRY, {**ENTRY, "reason": "again"})
    with pytest.raises(OverridesError, match=r"accepted\[1\]: cell .*/agent is accepted already \(accepted\[0\]\)"):
        read_accepted(twice, CELLS)
    loaded, work, _ = run
    raw = loaded.cfg.raw
    raw["scoring"] = {"overrides": "a.yaml"}
    cfg = resolve(raw, REPO, work).cfg
    write_file(tmp_path / "a.yaml", {**ENTRY, "cell": f"{BASE}/add/instruct"})
    refused = r"at accepted\[0\]\.cell: .*/add/instruct is a cell of reference agent instruct \(kind instruct\): its"
    with pytest.raises(OverridesError, match=refused + " score is the reference and no fallback replaces it"):
        decisions_for_config(cfg, tmp_path)  # the workflow directory: tmp_path here
    write_file(tmp_path / "a.yaml", {**ENTRY, "cell": f"{BASE}/add/opus@run2"})
    assert list(accepted_cells(cfg, tmp_path)) == ["Qwen--Qwen3-1.7B-Base/add/opus@run2"]
    assert decisions_for_config(cfg, tmp_path).path == tmp_path / "a.yaml"


def test_an_accepted_cell_is_no_target_of_the_run_and_no_input_of_rule_aggregate(run):  # noqa: F811
    loaded, _, _ = run
    cfg, layout = loaded.cfg, loaded.layout
    accepted = "Qwen--Qwen3-1.7B-Base/add/opus"
    every = RuleInputs(Jobs(cfg, loaded.site, layout))
    without = RuleInputs(Jobs(cfg, loaded.site, layout), {accepted})
    cell_files = {str(layout.eval_json(*accepted.split("/"))), str(layout.judge_json(*accepted.split("/")))}
    assert cell_files <= set(every.final_outputs())  # an agent cell's eval.json and judge.json are targets
    assert not cell_files & set(without.final_outputs())
    assert not set(cell_files) & {*without.eval_jsons(), *without.judge_jsons(), *without.judge_vote_jsons()}
    assert len(without.eval_jsons()) == len(every.eval_jsons()) - 1
    assert loaded.layout.summary() in without.final_outputs()  # the aggregation still runs


@pytest.fixture
def scored(tmp_path):
    """baseline 0.2, an agent's run 1 scored 0.9 (judged clean) and its run 2 without eval.json."""
    results = tmp_path / "results"
    paths = [
        write_cell(results, M1, "add", "baseline", 0.2),
        write_cell(results, M1, "add", "agent", 0.9, judge="clean", trace="# trace\n"),
    ]
    slots = ("baseline", "agent", "agent@run2")
    expected = [{"model": "ptflow--tiny-a-Base", "eval": "add", "agent": a} for a in slots]
    return tmp_path, [read_cell(p) for p in paths], expected


def test_an_accepted_cell_counts_at_its_base_models_score_whatever_its_files_and_every_output_says_why(scored):
    root, cells, expected = scored
    accepted = [Accepted(CELLS[0], ENTRY["reason"], ENTRY["who"], ENTRY["when"]),
                Accepted(CELLS[1], "no GPU on the node", "ops", "2026-12-01")]  # fmt: skip
    result = score(cells, Settings(accepted=accepted), expected)
    by_key = {c.key: c for c in result.cells}
    finished, missing = by_key[CELLS[0]], by_key[CELLS[1]]
    assert finished.status == "scored" and finished.metric.value == 0.9  # its file is kept, not counted
    assert (finished.score, finished.fallback, finished.score_source) == (0.2, True, "baseline cell")
    assert finished.fallback_reason == f"accepted: {SAID}"
    assert missing.status == "missing" and missing.score == 0.2
    assert missing.fallback_reason == "accepted: no GPU on the node (ops, 2026-12-01)"
    assert {a.agent_id: a.score for a in result.agents}["agent"] == pytest.approx(0.2)
    out = root / "out"
    write_outputs(result, out / "summary.csv", out / "agents.csv", out / "leaderboard.md")
    rows = {(r["agent"], r["run"]): r for r in csv.DictReader((out / "summary.csv").open())}
    assert rows["agent", "1"]["accepted"] == SAID and rows["agent", "1"]["fallback"] == "yes"
    assert rows["baseline", "1"]["accepted"] == ""
    board = (out / "leaderboard.md").read_text()
    assert "## Accepted failures" in board
    assert f"| {CELLS[0]} | {SAID} | scored | 0.200 (base model) |" in board
    assert f"| {CELLS[1]} | accepted: no GPU on the node (ops, 2026-12-01) | 0.200 (baseline cell) |" in board
    build_site(result, root / "report")
    assert f"accepted: {SAID}" in (root / "report" / "index.html").read_text()
    page = next((root / "report" / "cells").glob("*__agent__run1.html")).read_text()
    assert 'id="accepted"' in page and SAID in page
    plain = score([read_cell(c.eval_json) for c in cells], Settings(), expected[:2])
    write_outputs(plain, out / "summary.csv", out / "agents.csv", out / "leaderboard.md")
    assert "## Accepted failures" not in (out / "leaderboard.md").read_text()


def test_an_accepted_cell_is_a_failed_run_in_the_leaderboards_own_score(scored):
    """ptflow.results.ptb_score counts an accepted cell as ptflow export writes it: a run without metrics.json,
    whose value is its baseline's, even where the cell has no eval.json."""
    _, cells, expected = scored
    result = score(cells, Settings(accepted=[Accepted(CELLS[0], "r", "ops", "2026-11-30")]), expected)
    agent = next(c for c in result.cells if c.key == CELLS[0])
    assert ptb_score._value(agent) is None
    table, _, why = ptb_score._method_table([agent], {("tiny-a-Base", "add"): 0.2}, fallback=True)
    assert why.startswith("its models are tiny-a-Base")  # the four-model rule still applies; the row is counted


def test_status_and_the_posttrainbench_export_treat_an_accepted_cell_as_a_failed_run(run, tmp_path):  # noqa: F811
    loaded, work, _ = run
    opus = "Qwen--Qwen3-1.7B-Base/add/opus"
    sft = "Qwen--Qwen3-1.7B-Base/add/sft"
    write_file(tmp_path / "a.yaml", {**ENTRY, "cell": f"{BASE}/add/opus"}, {**ENTRY, "cell": sft, "reason": "OOM"})
    raw = loaded.cfg.raw
    raw["scoring"] = {"overrides": str(tmp_path / "a.yaml")}
    cfg = resolve(raw, REPO, work).cfg
    accepted = accepted_cells(cfg, REPO)
    (cell_dir(work / "results", BASE, "add", "sft") / "eval.json").unlink()  # accepted with no eval.json at all
    snap = status.snapshot(cfg, loaded.layout, work, query=lambda *a: {}, accepted=accepted)
    text = status.table(snap)
    assert f"accepted {opus}: {SAID} (counted at the base model's score, not run again)" in text
    assert {c["cell"]: c["accepted"] for c in (c.to_dict() for c in snap.cells)}[sft] == "OOM (J. Doe, 2026-11-30)"
    # ptflow rerun leaves accepted cells alone, whatever their cause, and says so (the status carries the decision)
    by_key = {st.key: st for st in snap.cells}
    by_key[sft].cause = {"cause": "out_of_memory", "step": "train"}
    plan = rerun.plan_rerun(cfg, loaded.layout, work, snap.cells, ["out_of_memory"], [])
    assert plan.cells == [] and plan.accepted == [sft]
    assert f"accepted as failures, not rerun: {sft}" in rerun.describe(plan)

    dest = tmp_path / "ptb"
    summary = export_posttrainbench(cfg, loaded.layout, dest, workdir=work, site=loaded.site, accepted=accepted)
    run_dir = dest / "claude_claude-opus-4-5_10h_run1" / "add_Qwen_Qwen3-1.7B-Base_2001"
    files = sorted(p.name for p in run_dir.iterdir())
    assert "metrics.json" not in files and {ACCEPTED_RECORD, "time_taken.txt", "final_model"} <= set(files)
    assert (run_dir / ACCEPTED_RECORD).read_text().startswith(f"{opus}: accepted: {SAID}\n")
    sft_dir = dest / "trl-sft_sft_0h" / "add_Qwen_Qwen3-1.7B-Base_0"
    assert sorted(p.name for p in sft_dir.iterdir()) == ["final_model", ACCEPTED_RECORD, "time_taken.txt"]
    assert f"{opus}: accepted: {SAID}; exported as a failed run, no metrics.json" in summary.notes
    # PostTrainBench's aggregation (the fixture's aggregate_methods.py, then aggregate_final.py) counts both as the
    # baseline's value, as ptflow's score does
    scripts = tmp_path / "checkout" / "scripts"
    scripts.mkdir(parents=True)
    (scripts / "aggregate_methods.py").write_text(AGGREGATE_METHODS_PY)
    (scripts / "aggregate_final.py").write_text(AGGREGATE_FINAL_PY)
    env = {**os.environ, "POST_TRAIN_BENCH_RESULTS_DIR": str(dest)}
    for script in ("aggregate_methods.py", "aggregate_final.py"):
        proc = subprocess.run([sys.executable, f"scripts/{script}"], cwd=scripts.parent, env=env, capture_output=True,
                              text=True)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
    assert (dest / "aggregated_claude_claude-opus-4-5_10h_run1.csv").read_text().splitlines()[1].endswith(",ERR")
    for method in ("claude_claude-opus-4-5_10h_run1", "trl-sft_sft_0h"):
        assert (dest / f"final_{method}.csv").read_text().splitlines() == ["model,add", "Qwen3-1.7B-Base,0.2"]
