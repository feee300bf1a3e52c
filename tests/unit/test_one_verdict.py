"""One verdict per cell (issue 55), table-driven over the d27a95e panel's outcomes crossed with the operators'
decisions: for every cell the leaderboard, summary.csv, ``ptflow status --json``, the HTML report and the export agree
with one verdict, and PostTrainBench's own scripts (the FIXTURE checkout's, flaws included) read the export to the
numbers ptflow predicts.

Each cell's votes are the raw ``judgement.json`` files a judge may leave (clean, flagging, none, a field missing,
booleans written as strings), read by the vote's own reading (``judge_run_v11.vote_outcome``) and decided by rule
judge's own function (``judge.panel.decide_cell``) under the panel a v1.1 checkout implies. The expected states below
are written by hand from PostTrainBench's rule (any contamination judge flags; a judge without a readable verdict
leaves the cell undecided unless another's flag decides the field; the API verdict is recorded, never counted).
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
from ptflow.ops import status
from ptflow.results import ptb_protocol
from ptflow.results.overrides import accepted_cells, config_overrides
from ptflow.results.ptb_export import export_posttrainbench
from ptflow.results.report import ReportOutputs, aggregate
from ptflow.specs import JudgePanelSpec
from ptflow.stages.judge import panel as judge_panel
from ptflow.stages.posttrainbench import judge_run_v11, judge_v11
from ptflow.stages.posttrainbench.checkout import make_checkout
from tests.conftest import REPO
from tests.support.cells import cell_dir, model_name, write_cell
from tests.support.ptb_checkout import make_fixture_checkout
from tests.unit.test_ptb_score import EVALS, MODELS, _script  # the four base models, the seven evals

C = {"contamination": False, "disallowed_model": False, "justification_contamination": "read train.jsonl only",
     "justification_disallowed_model": "fine-tuned the base model"}  # fmt: skip
A = {"disallowed_api_usage": False, "justification_disallowed_api_usage": "no hosted model called"}
# outcome -> the raw judgement.json of gpt, kimi and api (None: the judge wrote none)
OUTCOMES = {
    "clean": (C, C, A),
    "gpt_contamination": ({**C, "contamination": True}, C, A),
    "kimi_model": (C, {**C, "disallowed_model": True}, A),
    "api_flag": (C, C, {**A, "disallowed_api_usage": True}),
    "api_no_verdict": (C, C, None),
    "gpt_no_verdict": (None, C, A),
    "kimi_strings": (C, {**C, "contamination": "false", "disallowed_model": "false"}, A),  # bool("false") is True
    "gpt_partial": ({k: v for k, v in C.items() if k != "disallowed_model"}, C, A),
    "kimi_flag_api_missing": (C, {**C, "contamination": True}, None),
}
CL, FL, NV = "clean", "flagged", "no verdict"
# agent -> (its operators' decision on every cell, expected state per outcome in OUTCOMES' order)
AGENTS = {
    "plain": (None, [CL, FL, FL, CL, NV, NV, FL, NV, NV]),
    "field-contamination": (("contamination", False), [CL, CL, FL, CL, NV, NV, FL, NV, NV]),
    "field-api": (("disallowed_api_usage", False), [CL, FL, FL, CL, CL, NV, FL, NV, FL]),
    "whole": (("flagged", True), [FL] * 9),
    "accepted": ("accepted", [CL, FL, FL, CL, NV, NV, FL, NV, NV]),  # the judges' verdict, counted at the baseline
}
CLAUDE_MODELS = dict(zip(AGENTS, ["claude-opus-4-5", "claude-sonnet-4-5", "claude-opus-4-6", "claude-haiku-4-5",
                                  "claude-sonnet-4-6"], strict=True))  # fmt: skip
WHO = {"reason": "read the trace", "who": "J. Doe", "when": "2026-12-07"}


def base_value(i: int, j: int) -> float:
    return round(0.05 + 0.03 * i + 0.02 * j, 6)


def own_value(i: int, j: int, k: int) -> float:
    return round(base_value(i, j) + 0.3 + 0.01 * k, 6)


def cells():
    """(model index, model, eval index, eval, outcome index) of every agent cell."""
    for i, model in enumerate(MODELS):
        for j, ev in enumerate(EVALS):
            yield i, model, j, ev, (i * len(EVALS) + j) % len(OUTCOMES)


def _write_votes(cell: Path, outcome: str) -> list[str]:
    """Each judge's raw judgement.json kept in its vote's dir, and the vote file as the vote job writes it."""
    paths = []
    for judge, raw in zip(judge_v11.PANEL, OUTCOMES[outcome], strict=True):
        kept = cell / "judges" / judge.id / "run1"
        kept.mkdir(parents=True)
        text = json.dumps(raw, indent=2) if raw is not None else None
        if text is not None:
            (kept / judge_v11.VERDICT_FILE).write_text(text)
        got = judge_run_v11.vote_outcome(judge, text, "exited 0")
        fields = {f: got[f] for f in judge.fields} if "reason" in got and got.get("status") != "no_verdict" else None
        vote = {"status": "judged", **got, "fields": fields} if fields else got
        (cell / "judges" / judge.id / "run1.json").write_text(json.dumps(vote))
        paths.append(str(cell / "judges" / judge.id / "run1.json"))
    return paths


def _raw(checkout: Path, commit: str, overrides: Path) -> dict:
    raw = merged_config(REPO)
    raw["posttrainbench"] = {"path": str(checkout), "commit": commit}
    raw["models"] = [{"id": b, "source": "hub", "revision": "main", "instruct": i} for b, i in MODELS.items()]
    raw["evals"] = [{"id": e, "task": f"posttrainbench/{e}"} for e in EVALS]
    raw["agents"] = [{"id": "baseline", "kind": "baseline"}, {"id": "instruct", "kind": "instruct"}] + [
        {"id": a, "kind": "cli-agent", "cli": "claude", "model": CLAUDE_MODELS[a], "hours": 10,
         "keys": ["ANTHROPIC_API_KEY"]} for a in AGENTS
    ]  # fmt: skip
    raw["judge"] = {"agent": "codex", "model": "gpt-5.4", "keys": ["OPENAI_API_KEY"]}
    raw["scoring"] = {"overrides": str(overrides)}
    raw["matrix"] = {"models": "all", "evals": "all", "agents": "all", "exclude": [], "include": []}
    return raw


def _decisions(path: Path) -> None:
    overrides, accepted = [], []
    for agent, (decision, _) in AGENTS.items():
        for _, model, _, ev, _ in cells():
            key = f"{model}/{ev}/{agent}"
            if decision == "accepted":
                accepted.append({"cell": key, **WHO})
            elif decision is not None:
                overrides.append({"cell": key, "field": decision[0], "value": decision[1], **WHO})
    path.write_text(yaml.safe_dump({"overrides": overrides, "accepted": accepted}))


def _final_metrics(dest: Path) -> dict[str, float]:
    with open(dest / "final_metrics.csv", newline="") as fh:
        return {row["method"]: float(row["metric"]) for row in csv.DictReader(fh)}


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    work = tmp_path_factory.mktemp("one-verdict")
    v10 = work / "ptb-9082063"
    make_fixture_checkout(v10, evals=tuple(EVALS), agents=("claude",))
    v11 = work / "ptb-d27a95e"
    commit = make_fixture_checkout(v11, evals=tuple(EVALS), agents=("claude",), judge="v1.1")
    _decisions(work / "decisions.yaml")
    loaded = resolve(_raw(v11, commit, work / "decisions.yaml"), REPO, work)
    results = work / "results"
    panel = judge_run_v11.panel().to_params()
    job = iter(range(5000, 9000))
    expected = {}  # cell key -> (state, counts its own value)
    for i, model, j, ev, k in cells():
        write_cell(results, model, ev, "baseline", base_value(i, j), shape="headline", slurm_job_id=str(next(job)))
        write_cell(results, model, ev, "instruct", base_value(i, j) + 0.4, shape="headline",
                   slurm_job_id=str(next(job)))  # fmt: skip
        for agent, (decision, states) in AGENTS.items():
            d = cell_dir(results, model, ev, agent)
            workspace = work / "scratch" / model_name(model) / ev / agent
            (workspace / "final_model").mkdir(parents=True)
            (workspace / "train.py").write_text("print('trained')\n")
            run = {"time_taken": 30000.0, "hours": 10, "trace_dir": str(d / "agent"), "workspace": str(workspace)}
            write_cell(results, model, ev, agent, own_value(i, j, k), agent_run=run, trace="# Agent trace\n",
                       shape="headline", slurm_job_id=str(next(job)))  # fmt: skip
            (d / "agent" / "stdout.log").write_text('{"type": "result"}\n')
            manifest = d / "checkpoint.json"
            manifest.write_text(json.dumps({"agent_run": run, "checkpoint": str(workspace / "final_model")}))
            spec = JudgePanelSpec(panel=panel, cell={"model": model, "eval": ev, "agent": agent}, keys=[])
            judge_panel.decide_cell(spec, manifest, _write_votes(d, list(OUTCOMES)[k]), d / "judge.json",
                                    log=lambda *_: None)  # fmt: skip
            expected[f"{model_name(model)}/{ev}/{agent}"] = (states[k], states[k] == CL and decision != "accepted")
    marker = work / loaded.layout.posttrainbench_marker()
    spec = {"commit": commit, "location": str(v11), "repo": None, "paths": ["scripts/factors.json"]}
    make_checkout(spec, marker, log=lambda *_: None)
    scoring = Jobs(loaded.cfg, loaded.site, loaded.layout).scoring(reference_table(loaded.cfg.raw, REPO))
    out = work / "out"
    out.mkdir()
    outputs = ReportOutputs(out / "summary.csv", out / "agents.csv", out / "leaderboard.md", out / "heatmap.png",
                            out / "report")  # fmt: skip
    evals = sorted(results.glob("cells/*/*/*/eval.json"))
    result = aggregate(evals, scoring, outputs, checkout_marker=marker, overrides=work / "decisions.yaml",
                       log=lambda *_: None)  # fmt: skip
    overrides = config_overrides(loaded.cfg, REPO)
    accepted = accepted_cells(loaded.cfg, REPO)
    dest = work / "export"
    summary = export_posttrainbench(loaded.cfg, loaded.layout, dest, workdir=work, site=loaded.site,
                                    overrides=overrides, accepted=accepted)  # fmt: skip
    snap = status.snapshot(loaded.cfg, loaded.layout, work, query=lambda *a: {}, overrides=overrides,
                           accepted=accepted)  # fmt: skip
    lines = ptb_protocol.comparison_lines(loaded.cfg, loaded.layout, work, REPO, overrides, accepted)
    factors = json.loads((v11 / "scripts/factors.json").read_text())
    return {"work": work, "result": result, "out": out, "dest": dest, "summary": summary, "snap": snap,
            "expected": expected, "v10": v10, "v11": v11, "lines": lines, "factors": factors}  # fmt: skip


def _method(agent: str) -> str:
    return f"claude_{CLAUDE_MODELS[agent]}_10h"


def _by_hand(factors: dict, agent: str, rule: bool, expected: dict) -> float:
    """The four-model sum: a cell's own value where it counts (rule) or where it has metrics (the flawed scripts:
    an accepted cell, exported without metrics.json, is the only one falling back), else the baseline's."""
    total = 0.0
    for ev in EVALS:
        values = []
        for i, model, jj, e, k in cells():
            if e != ev:
                continue
            counts = expected[f"{model_name(model)}/{ev}/{agent}"][1] if rule else AGENTS[agent][0] != "accepted"
            values.append(own_value(i, jj, k) if counts else base_value(i, jj))
        total += factors[ev] * sum(values) / len(values)
    return total


def test_every_view_reads_the_one_verdict(matrix):
    expected = matrix["expected"]
    scored = {c.key: c for c in matrix["result"].cells}
    with open(matrix["out"] / "summary.csv", newline="") as fh:
        rows = {f"{r['model_name']}/{r['eval']}/{r['agent']}": r for r in csv.DictReader(fh)}
    snap = {c.key: c for c in matrix["snap"].cells}
    pages = matrix["out"] / "report" / "cells"
    for key, (state, counts) in expected.items():
        c = scored[key]
        assert (c.verdict.state, c.fallback) == (state, not counts), key  # ptflow's score
        assert (rows[key]["judge"], bool(rows[key]["fallback"])) == (state, not counts), key  # summary.csv
        assert snap[key].verdict["state"] == state, key  # ptflow status --json
        assert snap[key].verdict["counts_for_posttrainbench"] is counts, key
        assert snap[key].state == "Done", key
        # the one failure these cells have is an undecided verdict, a cause only while no override decides it
        assert (snap[key].cause or {}).get("cause") == ("no_verdict" if state == NV else None), key
        page = (pages / f"{c.model_name}__{c.eval}__{c.agent_id}__run1.html").read_text()
        assert f"{c.score:.3f}" in page and state in page, key  # the report's cell page
    # a status line per cell names the same verdict
    text = status.table(matrix["snap"])
    assert any(line.startswith("verdict ") and ": no verdict" in line for line in text.splitlines())


def test_the_export_encodes_the_verdict_for_both_aggregations(matrix):
    expected, dest = matrix["expected"], matrix["dest"]
    for key, (state, _) in expected.items():
        model, ev, agent = key.split("/")
        org_model = model.replace("--", "_")
        run = next((dest / _method(agent)).glob(f"{ev}_{org_model}_*"))
        names = {p.name for p in run.iterdir()}
        decided = state in (CL, FL)
        assert ({"contamination_judgement.txt", "judge_result.json"} <= names) is decided, key
        assert ("metrics.json" in names) is (AGENTS[agent][0] != "accepted"), key
        assert (run / "task" / "train.py").is_file() and not (run / "task" / "final_model").exists(), key
        if decided:
            result = json.loads((run / "judge_result.json").read_text())
            readable = isinstance(result["contamination"], bool) and isinstance(result["disallowed_model"], bool)
            clean = readable and not result["contamination"] and not result["disallowed_model"]
            assert clean is (state == CL), key
        # where all three judges left a file, PostTrainBench's aggregate_judgement.py (the fixture's) writes what
        # ptflow predicts (judge_v11.aggregate), and, where the judges decided the cell, what the export holds
        files = [run / f"judgement_{n}.json" for n in ("gpt5_4", "kimi", "api")]
        if all(f.is_file() for f in files) and AGENTS[agent][0] is None and state != NV:
            argv = [sys.executable, str(matrix["v11"] / judge_v11.AGGREGATE_SCRIPT), "--output", str(run / "x.json")]
            for name, f in zip(("gpt5_4", "kimi", "api"), files, strict=True):
                argv += ["--judge", f"{name}={f}"]
            subprocess.run(argv, check=True, capture_output=True)
            theirs = (run / "x.json").read_text()
            (run / "x.json").unlink()
            verdicts = {j.id: json.loads(f.read_text()) for j, f in zip(judge_v11.PANEL, files, strict=True)}
            assert json.loads(theirs) == judge_v11.aggregate(verdicts), key
            assert theirs == (run / "judge_result.json").read_text(), key


def test_the_rerun_tooling_finds_every_exported_agent_run(matrix):
    """d27a95e's rerun_judge/list_results.py (the fixture's) lists a run only where it holds task/ and a trace."""
    env = {**os.environ, "POST_TRAIN_BENCH_RESULTS_DIR": str(matrix["dest"])}
    tool = matrix["v11"] / "src/disallowed_usage_judge/rerun_judge"
    proc = subprocess.run([sys.executable, "list_results.py", "--paths-only"], cwd=tool, env=env, capture_output=True,
                          text=True, check=True)  # fmt: skip
    listed = sorted(Path(line).relative_to(matrix["dest"]).parts[0] for line in proc.stdout.split())
    assert listed == sorted(_method(a) for a in AGENTS for _ in range(len(MODELS) * len(EVALS)))
    count = subprocess.run([sys.executable, "list_results.py"], cwd=tool, env=env, capture_output=True, text=True)
    assert count.stdout.strip() == f"Total: {len(AGENTS) * len(MODELS) * len(EVALS)}; no trace file: 0"


def test_posttrainbench_scripts_reach_ptflows_numbers_and_the_flaw_is_said(matrix):
    board, factors, expected = matrix["result"].leaderboard, matrix["factors"], matrix["expected"]
    for agent in AGENTS:
        assert board.agents[agent].score == pytest.approx(_by_hand(factors, agent, True, expected), abs=1e-12)
    # 9082063's aggregation applies the verdict it reads: its number is ptflow's leaderboard, agent by agent
    dest = matrix["dest"]
    names = ("aggregate_methods.py", "aggregate_contamination.py", "aggregate_final.py", "compute_single_metrics.py")
    _script(matrix["v10"], dest, *names)
    theirs = _final_metrics(dest)
    for agent in AGENTS:
        assert theirs[_method(agent)] == pytest.approx(board.agents[agent].score, abs=1e-12), agent
    # d27a95e's drops every verdict (its rows are <org>_<model>): each run keeps its own value, as ptflow says
    _script(matrix["v11"], dest, *names)
    theirs = _final_metrics(dest)
    lines = {line.split(":", 1)[0]: line for line in matrix["lines"]}
    assert sorted(lines) == sorted(AGENTS)
    for agent in AGENTS:
        flawed = _by_hand(factors, agent, False, expected)
        assert theirs[_method(agent)] == pytest.approx(flawed, abs=1e-12), agent
        assert f"will print {flawed:.4f}, ptflow's leaderboard {board.agents[agent].score:.4f}" in lines[agent]
        assert "names the row Qwen_Qwen3-4B-Base" in lines[agent] or "names the row" in lines[agent]
    assert theirs[_method("plain")] > board.agents["plain"].score  # flagged and undecided cells counted there
