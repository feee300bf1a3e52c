"""An agent cell's evaluation staged by its train job and adopted by its evaluate job (ptflow.stages.evaluate.
in_train_job): adopted only for the same params and manifest and a final status; nothing half-staged."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from ptflow.cluster.runtime import run_in_runtime
from ptflow.stages.evaluate import in_train_job

PARAMS = {"cell": {"model": "m", "eval": "gsm8k", "agent": "claude"}, "call": {"task": "t", "limit": [1, 2]}}


def _evaluator(status: str = "scored", ok: bool = True):
    def evaluate(eval_json: Path, inspect_dir: Path) -> bool:
        inspect_dir.mkdir(parents=True)
        (inspect_dir / "log.eval").write_text("inspect log")
        eval_json.write_text(json.dumps({"status": status, "inspect_log": "inspect/log.eval", "slurm_job_id": "7"}))
        return ok

    return evaluate


@pytest.fixture
def cell(tmp_path):
    manifest = tmp_path / "checkpoint.json"
    manifest.write_text(json.dumps({"config_hash": "abc", "step": 3}))
    return tmp_path / "eval.json", tmp_path / "inspect", manifest


def test_staged_evaluation_is_adopted_once_and_then_gone(cell):
    eval_json, inspect_dir, manifest = cell
    assert in_train_job.stage_evaluation(eval_json, PARAMS, manifest, _evaluator())
    assert in_train_job.has_staged(eval_json) and not eval_json.exists()
    assert in_train_job.staged_stamp(eval_json, manifest) is not None  # what the workflow's cached answer holds for
    # the job's params as Snakemake hands them (a tuple where JSON has a list) compare equal
    as_given = {**PARAMS, "call": {"task": "t", "limit": (1, 2)}}
    assert in_train_job.why_not_adoptable(eval_json, as_given, manifest) is None
    data = in_train_job.adopt(eval_json, inspect_dir, log=lambda _m: None)
    assert data["status"] == "scored"
    assert json.loads(eval_json.read_text())["evaluated_in"] == "train_job"
    assert (inspect_dir / "log.eval").read_text() == "inspect log"  # where eval.json's relative inspect_log points
    assert not in_train_job.staged_dir(eval_json).exists() and in_train_job.staged_stamp(eval_json, manifest) is None
    # deleting eval.json later evaluates again: nothing is left to adopt
    assert in_train_job.why_not_adoptable(eval_json, PARAMS, manifest) == "its train job left no evaluation"


def test_not_adopted_for_other_params_another_model_or_a_failed_evaluation(cell):
    eval_json, _, manifest = cell
    in_train_job.stage_evaluation(eval_json, PARAMS, manifest, _evaluator())
    changed = {**PARAMS, "call": {"task": "t", "limit": [1, 3]}}
    assert in_train_job.why_not_adoptable(eval_json, changed, manifest) == (
        "the evaluation's settings changed after the train job"
    )
    manifest.write_text(json.dumps({"config_hash": "abc", "step": 4}))  # retrained since
    assert in_train_job.why_not_adoptable(eval_json, PARAMS, manifest) == (
        "the model is not the one the train job evaluated"
    )
    assert in_train_job.why_not_adoptable(eval_json, PARAMS, None) == "the cell has no train job"
    in_train_job.stage_evaluation(eval_json, PARAMS, manifest, _evaluator("eval_failed"))
    assert in_train_job.why_not_adoptable(eval_json, PARAMS, manifest) == "the train job's evaluation ended eval_failed"


def test_an_evaluation_that_fails_or_raises_leaves_nothing_staged(cell):
    eval_json, _, manifest = cell
    in_train_job.stage_evaluation(eval_json, PARAMS, manifest, _evaluator())
    lines: list[str] = []
    assert not in_train_job.stage_evaluation(eval_json, PARAMS, manifest, _evaluator(ok=False), log=lines.append)
    assert not in_train_job.has_staged(eval_json)  # the earlier one was for an earlier manifest: gone too
    assert lines == ["the evaluation in the train job left no result: the evaluate job evaluates by itself"]

    def crash(_json, _inspect):
        raise RuntimeError("vLLM died")

    with pytest.raises(RuntimeError):
        in_train_job.stage_evaluation(eval_json, PARAMS, manifest, crash)
    assert not in_train_job.staged_dir(eval_json).exists()
    assert not in_train_job.staged_dir(eval_json).with_name(f"{in_train_job.STAGED}.tmp").exists()


def test_the_evaluation_child_is_stopped_at_its_deadline(tmp_path):
    """The train job's evaluation child runs under a deadline before the job's end: stopped there, not waited for."""
    script = tmp_path / "slow.py"
    script.write_text("import time\ntime.sleep(60)\n")
    started = time.monotonic()
    rc = run_in_runtime(None, str(script), timeout=1)
    assert rc != 0 and time.monotonic() - started < 30
    ok = tmp_path / "ok.py"
    ok.write_text(f"import sys\nsys.exit(0 if sys.executable == {sys.executable!r} else 3)\n")
    assert run_in_runtime(None, str(ok), timeout=30) == 0
