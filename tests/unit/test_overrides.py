"""Overrides with reasons (ptflow.results.overrides, config key scoring.overrides): the file's checks and their one
line each, how an override decides a cell's verdict over judge.json, and where it shows: summary.csv,
leaderboard.md, the HTML report, ``ptflow status`` and ``ptflow export --posttrainbench`` (read back by the fixture
of PostTrainBench's aggregate_contamination.py). The Snakemake proof (only rule aggregate reruns when the file
changes) is tests/e2e/test_agent_cells.py's."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest
import yaml

from ptflow.config.load import resolve
from ptflow.ops import status
from ptflow.results.cells import JUDGE_CLEAN, JUDGE_FLAGGED, read_cell
from ptflow.results.overrides import (
    OVERRIDES_RECORD,
    OverridesError,
    config_overrides,
    decide,
    declared_fields,
    overrides_for_config,
    read_overrides,
)
from ptflow.results.ptb_export import export_posttrainbench
from ptflow.results.report_site import build_site
from ptflow.results.scoring import score
from ptflow.results.settings import Settings
from ptflow.results.tables import write_outputs
from tests.conftest import REPO
from tests.support.cells import cell_dir, write_cell
from tests.support.ptb_aggregation import AGGREGATE_CONTAMINATION_PY
from tests.unit.test_ptb_export import BASE, config, run  # noqa: F401 (run: the export's fixture)

M1 = "ptflow/tiny-a-Base"
CELLS = ["ptflow--tiny-a-Base/add/agent", "ptflow--tiny-a-Base/add/agent@run2"]
ENTRY = {
    "cell": CELLS[0],
    "field": "contamination",
    "value": False,
    "reason": "reads test.parquet only to count its rows",
    "who": "J. Doe",
    "when": "2026-11-30",
}


def write_overrides(path, *entries, raw: str | None = None):
    path.write_text(raw if raw is not None else yaml.safe_dump({"overrides": list(entries)}, sort_keys=False))
    return path


def test_a_valid_file_reads_with_hub_ids_and_unquoted_dates(tmp_path):
    path = tmp_path / "overrides.yaml"
    path.write_text(
        "overrides:\n"
        "  - {cell: ptflow/tiny-a-Base/add/agent@run2, field: flagged, value: true, reason: cheated, who: ops,"
        " when: 2026-12-01}\n"
    )
    [entry] = read_overrides(path, CELLS, declared_fields(None))
    assert (entry.cell, entry.field, entry.value, entry.when) == (CELLS[1], "flagged", True, "2026-12-01")
    assert entry.text() == "flagged=true (ops, 2026-12-01): cheated"
    assert read_overrides(write_overrides(tmp_path / "empty.yaml", raw="")) == []


@pytest.mark.parametrize(
    "change, message",
    [
        ({"cell": "ptflow--tiny-a-Base/add/agnet"}, "overrides[0].cell: 'ptflow--tiny-a-Base/add/agnet' is not a cell "
         "of the matrix (did you mean 'ptflow--tiny-a-Base/add/agent'?)"),
        ({"field": "contamnation"}, "overrides[0].field: 'contamnation' is no verdict field of this config's judge "
         "(did you mean 'contamination'?); known: contamination, disallowed_model, flagged"),
        ({"reason": None}, "at overrides[0]: 'reason' is a required property"),
        ({"who": None}, "at overrides[0]: 'who' is a required property"),
        ({"when": None}, "at overrides[0]: 'when' is a required property"),
        ({"value": "false"}, "at overrides[0].value: 'false' is not of type 'boolean'"),
        ({"when": "last week"}, "overrides[0].when: 'last week' is not an ISO date; write e.g. 2026-11-30"),
        ({"reason": ""}, "at overrides[0].reason: '' should be non-empty"),
        ({"by": "me"}, "at overrides[0]: unknown key 'by'; allowed keys: cell, field, reason, value, when, who"),
    ],
)  # fmt: skip
def test_a_bad_entry_is_refused_in_one_line_naming_it(tmp_path, change, message):
    entry = {k: v for k, v in {**ENTRY, **change}.items() if v is not None}
    path = write_overrides(tmp_path / "o.yaml", entry)
    with pytest.raises(OverridesError) as err:
        read_overrides(path, CELLS, declared_fields(None))
    assert message in str(err.value) and str(path) in str(err.value) and "\n" not in str(err.value)


def test_a_file_that_is_no_mapping_or_names_one_field_twice_is_refused(tmp_path):
    with pytest.raises(OverridesError, match="write a mapping with the keys overrides: \\[entries\\] and/or accepted"):
        read_overrides(write_overrides(tmp_path / "list.yaml", raw="- cell: x\n"))
    twice = write_overrides(tmp_path / "twice.yaml", ENTRY, {**ENTRY, "value": True})
    with pytest.raises(OverridesError, match=r"overrides\[1\]: cell .*/agent field contamination is overridden "
                       r"already \(overrides\[0\]\)"):  # fmt: skip
        read_overrides(twice, CELLS)
    with pytest.raises(OverridesError, match="cannot read .*missing.yaml"):
        read_overrides(tmp_path / "missing.yaml")


def test_a_panel_judges_declared_fields_may_be_overridden():
    judge = {"judges": [{"id": "gpt", "fields": ["contamination"]}, {"id": "api", "fields": ["api_usage"]}]}
    assert declared_fields(judge) == ("contamination", "disallowed_model", "api_usage")


def test_a_checkout_evals_cells_may_have_the_v11_panels_fields_overridden():
    """A cell of a checkout eval may be judged by d27a95e's panel (its protocol known only after the checkout rule
    at times): its disallowed_api_usage is a field an override may name; without a checkout it is not."""
    from types import SimpleNamespace

    from ptflow.results.overrides import config_fields

    def cfg(checkout, judge=True):
        evals = {"gsm8k": SimpleNamespace(from_checkout=checkout)}
        raw = {"judge": {"agent": "codex", "model": "m"} if judge else None}
        return SimpleNamespace(raw=raw, posttrainbench=object() if checkout else None, judge=judge, evals=evals)

    assert config_fields(cfg(True)) == ("contamination", "disallowed_model", "disallowed_api_usage")
    assert config_fields(cfg(False)) == ("contamination", "disallowed_model")
    assert config_fields(cfg(True, judge=False)) == ("contamination", "disallowed_model")


JUDGED = {"status": "judged", "contamination": True, "disallowed_model": False, "flagged": True, "reason": "r"}


def entry(field, value, cell=CELLS[0]):
    from ptflow.results.overrides import Override

    return Override(cell, field, value, "why", "ops", "2026-11-30")


def test_decide_applies_overrides_over_the_judges_decided_fields():
    cleared = decide(JUDGED, [entry("contamination", False)])
    assert (cleared.state, cleared.flagged) == (JUDGE_CLEAN, False)
    assert cleared.fields == {"contamination": False, "disallowed_model": False}
    assert cleared.reason == "override: contamination=false (ops, 2026-11-30): why"
    # a panel's judge.json: its decided `fields` are read, not the top-level keys; a `stop` field keeps its effect
    fields = {"contamination": False, "benchmark_lookup": False}
    panel = {**JUDGED, "fields": fields, "effects": {"benchmark_lookup": "stop"}}
    stopped = decide(panel, [entry("benchmark_lookup", True)])
    assert stopped.flagged and stopped.effect == "stop" and stopped.reason.startswith("benchmark_lookup (override: ")
    # flagged: false clears the whole verdict; flagged: true flags a cell whose fields are all clean
    assert decide(JUDGED, [entry("flagged", False)]).fields == {"contamination": False, "disallowed_model": False}
    whole = decide({**JUDGED, "contamination": False, "flagged": False}, [entry("flagged", True)])
    assert whole.state == JUDGE_FLAGGED and whole.effect == "fallback" and whole.reason.startswith("flagged (override")
    # a cell no judge decided: the override is the whole verdict
    for judge in (None, {"status": "skipped"}, {"status": "no_verdict", "reason": "exit 1"}):
        assert decide(judge, [entry("disallowed_model", False)]).state == JUDGE_CLEAN
        assert decide(judge, [entry("disallowed_model", True)]).fields == {"disallowed_model": True}


@pytest.fixture
def scored(tmp_path):
    """baseline 0.2 and an agent whose run 1 the judge flagged (0.9 measured) and whose run 2 is clean (0.7)."""
    results = tmp_path / "results"
    paths = [
        write_cell(results, M1, "add", "baseline", 0.2),
        write_cell(results, M1, "add", "agent", 0.9, judge="flagged", trace="# trace\n"),
        write_cell(results, M1, "add", "agent@run2", 0.7, run=2, judge="clean"),
    ]
    return tmp_path, [read_cell(p) for p in paths]


def test_an_override_flips_the_score_and_every_output_says_why(scored):
    root, cells = scored
    settings = Settings(overrides=[entry("contamination", False), entry("flagged", True, CELLS[1])])
    result = score(cells, settings)
    by_key = {c.key: c for c in result.cells}
    own, forced = by_key[CELLS[0]], by_key[CELLS[1]]
    assert own.score == 0.9 and not own.fallback and own.judge == JUDGE_CLEAN
    assert forced.score == 0.2 and forced.fallback and forced.fallback_reason.startswith("flagged flagged (override: ")
    assert json.loads((cell_dir(root / "results", M1, "add", "agent") / "judge.json").read_text())["flagged"] is True
    out = root / "out"
    write_outputs(result, out / "summary.csv", out / "agents.csv", out / "leaderboard.md")
    rows = {(r["agent"], r["run"]): r for r in csv.DictReader((out / "summary.csv").open())}
    assert rows["agent", "1"]["override"] == "contamination=false (ops, 2026-11-30): why [judges: flagged]"
    assert rows["agent", "1"]["judge"] == "clean" and rows["baseline", "1"]["override"] == ""
    board = (out / "leaderboard.md").read_text()
    assert "## Overrides" in board
    said = "contamination=false (ops, 2026-11-30): why [judges: flagged]"
    assert f"| {CELLS[0]} | {said} | clean | 0.900 (its own score) |" in board
    said = "flagged=true (ops, 2026-11-30): why [judges: clean]"
    assert f"| {CELLS[1]} | {said} | flagged | 0.200 (base model) |" in board
    build_site(result, root / "report")
    index = (root / "report" / "index.html").read_text()
    assert "overridden: contamination=false (ops, 2026-11-30): why [judges: flagged]" in index
    page = next((root / "report" / "cells").glob("*__agent__run1.html")).read_text()
    assert 'id="override"' in page and "contamination=false (ops, 2026-11-30): why" in page
    # without overrides, nothing of it shows
    plain = score([read_cell(c.eval_json) for c in cells], Settings())
    write_outputs(plain, out / "summary.csv", out / "agents.csv", out / "leaderboard.md")
    assert "## Overrides" not in (out / "leaderboard.md").read_text()


def test_the_config_names_the_file_relative_to_the_workflow_and_refuses_reference_cells(run, tmp_path):  # noqa: F811
    loaded, work, _ = run
    raw = loaded.cfg.raw
    assert overrides_for_config(loaded.cfg, REPO) is None and config_overrides(loaded.cfg, REPO) == []
    base_cell = "Qwen--Qwen3-1.7B-Base/add/baseline"
    write_overrides(tmp_path / "o.yaml", {**ENTRY, "cell": base_cell})
    raw["scoring"] = {"overrides": "o.yaml"}
    cfg = resolve(raw, REPO, work).cfg
    with pytest.raises(OverridesError, match=f"{base_cell} is a cell of reference agent baseline"):
        overrides_for_config(cfg, tmp_path)  # the workflow directory: tmp_path here


def test_status_and_the_posttrainbench_export_carry_the_decided_verdict(run, tmp_path):  # noqa: F811
    loaded, work, _ = run
    opus = "Qwen--Qwen3-1.7B-Base/add/opus"
    sft = "Qwen--Qwen3-1.7B-Base/add/sft"
    write_overrides(
        tmp_path / "o.yaml",
        {**ENTRY, "cell": f"{BASE}/add/opus", "value": True, "reason": "test split copied"},
        {**ENTRY, "cell": sft, "field": "flagged", "value": True, "reason": "distilled"},
    )
    raw = loaded.cfg.raw
    raw["scoring"] = {"overrides": str(tmp_path / "o.yaml")}  # an absolute path is taken as it is
    cfg = resolve(raw, REPO, work).cfg
    overrides = config_overrides(cfg, REPO)
    snap = status.snapshot(cfg, loaded.layout, work, query=lambda *a: {}, overrides=overrides)
    text = status.table(snap)
    assert f"override {opus}: contamination=true (J. Doe, 2026-11-30): test split copied" in text
    assert {c.key: c.override for c in snap.cells}[sft] == "flagged=true (J. Doe, 2026-11-30): distilled"

    dest = tmp_path / "ptb"
    summary = export_posttrainbench(cfg, loaded.layout, dest, workdir=work, site=loaded.site, overrides=overrides)
    run_dir = dest / "claude_claude-opus-4-5_10h_run1" / "add_Qwen_Qwen3-1.7B-Base_2001"
    assert (run_dir / "contamination_judgement.txt").read_text() == "contamination detected\n"
    assert (run_dir / "disallowed_model_judgement.txt").read_text() == "only allowed use detected\n"
    record = (run_dir / OVERRIDES_RECORD).read_text()
    assert f"{opus}: contamination=true (J. Doe, 2026-11-30): test split copied" in record
    assert "judges' own verdict: clean (judge.json unchanged)" in record
    assert any(n.startswith(f"{opus}: verdict overridden, exported as decided") for n in summary.notes)
    sft_dir = dest / "trl-sft_sft_0h" / "add_Qwen_Qwen3-1.7B-Base_0"
    assert sorted(p.name for p in sft_dir.iterdir() if "judgement" in p.name) == []  # no judge reads such cells
    assert "flagged=true (J. Doe, 2026-11-30): distilled" in (sft_dir / OVERRIDES_RECORD).read_text()
    # PostTrainBench's aggregation (the fixture of its aggregate_contamination.py) reads the decided verdict
    script = tmp_path / "aggregate_contamination.py"
    script.write_text(AGGREGATE_CONTAMINATION_PY)
    env = {"POST_TRAIN_BENCH_RESULTS_DIR": str(dest), "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, str(script)], check=True, env=env, capture_output=True)
    table = list(csv.reader((dest / "contamination_claude_claude-opus-4-5_10h_run1.csv").open()))
    assert table == [["model", "add"], ["Qwen3-1.7B-Base", "C"]]


def test_a_whole_verdict_flag_is_exported_as_an_answer_the_aggregation_counts_as_baseline(run, tmp_path):  # noqa: F811
    loaded, work, _ = run
    write_overrides(tmp_path / "o.yaml", {**ENTRY, "cell": "Qwen--Qwen3-1.7B-Base/add/opus", "field": "flagged",
                                          "value": True})  # fmt: skip
    raw = loaded.cfg.raw
    raw["scoring"] = {"overrides": str(tmp_path / "o.yaml")}
    cfg = resolve(raw, REPO, work).cfg
    dest = tmp_path / "ptb"
    export_posttrainbench(cfg, loaded.layout, dest, workdir=work, overrides=config_overrides(cfg, REPO))
    script = tmp_path / "aggregate_contamination.py"
    script.write_text(AGGREGATE_CONTAMINATION_PY)
    env = {"POST_TRAIN_BENCH_RESULTS_DIR": str(dest), "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, str(script)], check=True, env=env, capture_output=True)
    table = list(csv.reader((dest / "contamination_claude_claude-opus-4-5_10h_run1.csv").open()))
    assert table == [["model", "add"], ["Qwen3-1.7B-Base", "C:IMPORTANT ERR"]]  # not empty: the baseline's score


def test_the_leaderboards_own_score_reads_the_decided_verdict(scored):
    """A checkout run's leaderboard score (ptflow.results.ptb_score) counts a cell as judged clean as the export's
    decided judgement files do."""
    from ptflow.results import ptb_score

    root, cells = scored
    agent_dir = cell_dir(root / "results", M1, "add", "agent") / "agent"
    (agent_dir / "contamination_judgement.txt").write_text("contamination detected\n")
    (agent_dir / "disallowed_model_judgement.txt").write_text("only allowed use detected\n")
    flagged = cells[1]
    assert not ptb_score._judged_clean(flagged)
    score(cells, Settings(overrides=[entry("contamination", False)]))
    assert ptb_score._judged_clean(flagged)
    score(cells, Settings(overrides=[entry("contamination", False), entry("flagged", True)]))
    assert not ptb_score._judged_clean(flagged)
