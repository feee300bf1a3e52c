"""A cell evaluated by the PostTrainBench checkout's evaluate.py (ptflow.stages.evaluate.run.evaluate_checkout_cell)
through run_task.sh's ladder, on the FIXTURE checkout (tests/support/ptb_checkout.py) and a tiny random model: a try
that leaves no metrics.json steps on (any failure, as run_task.sh), the budget flag is the one the checkout's
evaluate.py declares, metrics.json is kept verbatim and becomes eval.json's metric; a ladder with no success is
eval_failed, not a failed job. A baseline or instruct cell is evaluated as run_baseline.sh does it: one try."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ptflow.specs import CellRef, CheckoutCall, EvaluateSpec
from ptflow.stages.evaluate.run import (
    EvalInputs,
    EvalOutputs,
    ModelUnderTest,
    evaluate_checkout_cell,
    validate_eval_json,
)
from ptflow.stages.tiny_model import build_char_tokenizer, create_tiny_llama
from tests.support.ptb_checkout import fill_hf_cache, make_fixture_checkout

CELL = CellRef("ptflow/tiny-llama-h64", "ptflow--tiny-llama-h64", "humaneval", "baseline")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("ptb-ladder")
    checkout = root / "PostTrainBench"
    commit = make_fixture_checkout(checkout, evals=("humaneval",), agents=("codex",))
    model = root / "tiny-qwen3"  # the checkout's evaluate.py picks its qwen3.jinja by the path (it has no llama3)
    create_tiny_llama(model, build_char_tokenizer(["What is 12 + 34?"]), layers=1, hidden=16, heads=2, seed=0)
    fill_hf_cache(root, ("humaneval",))  # its dataset, as the cache rule fetches it: the evaluation runs offline
    marker = root / "checkout.json"
    marker.write_text(json.dumps({"path": str(checkout), "commit": commit}))
    return {"checkout": {"path": str(checkout), "commit": commit}, "marker": marker, "model": model, "root": root}


def _call(lower):
    return {"eval_id": "humaneval", "task": "posttrainbench/humaneval", "retry_max_tokens": lower, "limit": 2,
            "posttrainbench": {"eval_dir": "humaneval", "objects": {}}}  # fmt: skip


def _evaluate(setup, name, lower, monkeypatch, fail_above=None, call=None):
    calls = setup["root"] / f"{name}.calls.jsonl"
    monkeypatch.setenv("PTB_FIXTURE_CALLS", str(calls))
    if fail_above is not None:
        monkeypatch.setenv("PTB_FIXTURE_FAIL_ABOVE", str(fail_above))
    out = setup["root"] / name
    monkeypatch.chdir(setup["root"])  # paths.hf_home is relative to the run dir, as in a run: "." here
    call = CheckoutCall.from_params(call or _call(lower))  # the params as build.py writes them
    job = EvaluateSpec(CELL, call, model_revision="fixture", hf_home=".", evals_cache=".")
    model = str(setup["model"])
    data = evaluate_checkout_cell(
        job,
        ModelUnderTest(model, {"path": model, "kind": "base", "commit_or_hash": "fixture", "step": None}),
        EvalOutputs(str(out / "eval.json"), str(out / "inspect")),
        EvalInputs(checkout=str(setup["marker"])),
        log=lambda *_: None,
    )
    records = [json.loads(line) for line in calls.read_text().splitlines()]
    helps = [r for r in records if r["argv"] == ["--help"]]  # how ptflow reads the budget flag it declares
    assert len(helps) <= 1
    return data, [r for r in records if r not in helps], out


def test_any_failure_steps_down_to_the_next_budget(setup, monkeypatch):
    data, calls, out = _evaluate(setup, "ok", [12, 8], monkeypatch, fail_above=12)
    validate_eval_json(data)
    assert data["status"] == "scored" and data["metrics"]["name"] == "accuracy"
    assert [a["max_new_tokens"] for a in data["attempts"]] == [None] * 4 + [12]
    assert [a["ok"] for a in data["attempts"]] == [False] * 4 + [True]
    argvs = [c["argv"] for c in calls]
    assert all("--max-tokens" not in a for a in argvs[:4])  # evaluate.py's own default first, as run_task.sh
    assert argvs[4][argvs[4].index("--max-tokens") + 1] == "12" and argvs[4][argvs[4].index("--limit") + 1] == "2"
    assert {c["cwd"] for c in calls} == {str(Path(setup["checkout"]["path"]) / "src/eval/tasks/humaneval")}
    kept = json.loads((out / data["posttrainbench"]["metrics_file"]).read_text())
    assert (
        kept["accuracy"] == data["metrics"]["value"] and data["posttrainbench"]["commit"] == setup["checkout"]["commit"]
    )


def test_a_ladder_with_no_metrics_is_eval_failed(setup, monkeypatch):
    data, calls, _ = _evaluate(setup, "failed", [12, 8], monkeypatch, fail_above=4)
    validate_eval_json(data)
    assert data["status"] == "eval_failed" and data["metrics"] is None
    assert len(calls) == 4 + 3 + 2 and [a["max_new_tokens"] for a in data["attempts"]][-2:] == [8, 8]


def test_a_baseline_cell_is_tried_once_as_run_baseline_sh_tries(setup, monkeypatch):
    # build.py's call for a baseline or instruct cell of a checkout eval (tests/unit/test_posttrainbench_checkout.py)
    once = {
        "eval_id": "humaneval",
        "task": "posttrainbench/humaneval",
        "tries": 1,
        "limit": 2,
        "posttrainbench": {"eval_dir": "humaneval", "objects": {}},
    }
    data, calls, out = _evaluate(setup, "once-failed", [], monkeypatch, fail_above=4, call=once)
    validate_eval_json(data)
    assert data["status"] == "eval_failed" and len(calls) == 1 and len(data["attempts"]) == 1
    assert (out / "inspect" / "error.log").read_text().strip()  # evaluate.py's stderr, as run_baseline.sh keeps it
    monkeypatch.delenv("PTB_FIXTURE_FAIL_ABOVE")
    data, calls, out = _evaluate(setup, "once-ok", [], monkeypatch, call=once)
    validate_eval_json(data)
    assert data["status"] == "scored" and len(calls) == 1 and data["attempts"][0]["max_new_tokens"] is None
    argv = calls[0]["argv"]  # run_baseline.sh's arguments: no budget flag
    assert "--max-tokens" not in argv and argv[argv.index("--json-output-file") + 1] == str(
        (out / "inspect" / "metrics.json").resolve()
    )
    assert sorted(p.name for p in (out / "inspect").iterdir()) == ["error.log", "final_eval.txt", "metrics.json"]
    assert data["posttrainbench"]["metrics_file"] == "inspect/metrics.json"
