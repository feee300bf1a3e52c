"""PostTrainBench's retry ladder through the real ``evaluate``: each attempt a real inspect eval of a tiny CPU model in
its own process, failing the way servers and GPUs fail (stand-in tasks in tests/support/ladder_tasks.py): a
context-length rejection moves to the next lower budget at once, an out-of-memory error retries the same budget,
and an error no budget cures ends the evaluation after one attempt."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ptflow.config.entries import eval_from_entry
from ptflow.stages.evaluate.run import EvalCaches, EvalFailed, evaluate
from ptflow.stages.evaluate.settings import Provider, build_call

# The attempts start warm from one broker for the module (warm_kit, tests/conftest.py); the tests share one data
# environment (caches) so that they share its zygote; logs stay per test.
pytestmark = pytest.mark.usefixtures("warm_kit")

LADDER_TASKS = Path(__file__).resolve().parents[1] / "support" / "ladder_tasks.py"


@pytest.fixture(scope="module")
def data_dirs(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("ladder-data")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from ptflow.stages.tiny_model import build_char_tokenizer, create_tiny_llama

    out = tmp_path_factory.mktemp("ladder") / "model"
    create_tiny_llama(out, build_char_tokenizer(["What is 1+1? 2+2?"]), layers=2, hidden=32, heads=2, seed=0)
    return out


def ladder_env(data_dirs: Path) -> dict:
    """The tests' one environment: (PYTEST_CURRENT_TEST differs per test, the HF_/INSPECT_ settings are the parent's
    own) the tests would not share the zygote of one environment otherwise."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "INSPECT_", "PYTEST_CURRENT_TEST"))}
    env["XDG_CACHE_HOME"] = str(data_dirs / "xdg")
    return env


def run(tiny_model, data_dirs, tmp_path, task: str, task_args: dict, retry=(8,), env: dict | None = None):
    ev = eval_from_entry(
        {"id": "ladder", "task": f"{LADDER_TASKS}@{task}", "task_args": task_args, "max_new_tokens": 16,
         "retry_max_new_tokens": list(retry), "limit": 2, "sampling": "greedy", "max_connections": 2}
    )  # fmt: skip
    env = {**ladder_env(data_dirs), **(env or {})}
    messages: list[str] = []
    try:
        caches = EvalCaches(data_dirs / "hf", data_dirs / "cache")
        return evaluate(build_call(ev, Provider()), tiny_model, tmp_path / "logs", caches, env=env,
                        log=messages.append), messages  # fmt: skip
    except EvalFailed as exc:
        return exc, messages


def test_context_length_rejection_moves_to_the_next_budget(tiny_model, data_dirs, tmp_path):
    out, _ = run(tiny_model, data_dirs, tmp_path, "context_limited", {"context_tokens": 8})
    # 16 tokens overflow: the other three tries at 16 are skipped, 8 fits
    assert [(a["max_new_tokens"], a["ok"], a.get("failure_kind")) for a in out.attempts] == [
        (16, False, "context"),
        (8, True, None),
    ]
    assert "BadRequestError" in out.attempts[0]["error"] and out.max_new_tokens == 8
    assert out.headline["name"] == "accuracy" and out.headline["n"] == 2
    assert Path(out.log_path) == tmp_path / "logs" / "ladder.eval"


def test_out_of_memory_retries_the_same_budget(tiny_model, data_dirs, tmp_path):
    out, _ = run(tiny_model, data_dirs, tmp_path, "out_of_memory_once", {"marker": str(tmp_path / "raised")})
    assert [(a["max_new_tokens"], a["ok"], a.get("failure_kind")) for a in out.attempts] == [
        (16, False, "memory"),
        (16, True, None),
    ]


def test_uncurable_failure_ends_after_one_attempt(tiny_model, data_dirs, tmp_path):
    exc, messages = run(tiny_model, data_dirs, tmp_path, "crashing", {})
    assert isinstance(exc, EvalFailed)
    text = str(exc)
    assert "\n" not in text and "cannot cure" in text and "ValueError: stand-in failure" in text
    assert sorted(p.name for p in (tmp_path / "logs" / "attempts").iterdir() if p.is_dir()) == ["1"]
    assert len(messages) == 1


def test_the_model_is_loaded_once(tiny_model, data_dirs, tmp_path):
    """inspect looks up every model event's model in its model-info database and, for a local path it lacks, builds
    the provider again (an hf model loaded twice, both copies kept); the kit registers the model's facts first
    (evaluate.register_model_info). Each sample is scored by the copies alive once it is generated."""
    out, _ = run(tiny_model, data_dirs, tmp_path, "model_copies", {})
    assert out.headline["n"] == 2 and out.headline["value"] == 1.0, out.headline


def test_inspects_control_server_is_off_unless_its_variable_says_on(tiny_model, data_dirs, tmp_path):
    """An attempt is a batch job: inspect's control server (default on: FastAPI on a socket in inspect's data dir,
    ~1 CPU-s an attempt) is off, and INSPECT_EVAL_CTL_SERVER, inspect's own switch, still turns it on. Each sample
    scores whether the attempt's control server had published itself."""
    off, _ = run(tiny_model, data_dirs, tmp_path / "off", "control_channel", {})
    assert off.headline["n"] == 2 and off.headline["value"] == 0.0, off.headline
    on, _ = run(tiny_model, data_dirs, tmp_path / "on", "control_channel", {}, env={"INSPECT_EVAL_CTL_SERVER": "true"})
    assert on.headline["n"] == 2 and on.headline["value"] == 1.0, on.headline


def test_ladder_exhausted_on_curable_errors_writes_eval_failed(tiny_model, data_dirs, tmp_path, monkeypatch):
    """Context overflow at every budget: one try per budget (the rest are skipped); the cell's eval.json then says
    eval_failed with every attempt's error, and the matrix goes on (no exception)."""
    import json

    from ptflow.specs import CellRef, EvaluateSpec
    from ptflow.stages.evaluate.run import EvalOutputs, ModelUnderTest, evaluate_cell, validate_eval_json

    ev = eval_from_entry(
        {"id": "ladder", "task": f"{LADDER_TASKS}@context_limited", "task_args": {"context_tokens": 4},
         "max_new_tokens": 16, "retry_max_new_tokens": [8], "limit": 2, "sampling": "greedy"}
    )  # fmt: skip
    cell = CellRef("org/tiny", "org--tiny", "ladder", "baseline")
    caches = {"hf_home": str(data_dirs / "hf"), "evals_cache": str(data_dirs / "cache")}
    job = EvaluateSpec(cell, build_call(ev, Provider()), model_revision="x", **caches)
    model = ModelUnderTest(
        str(tiny_model), {"path": str(tiny_model), "kind": "base", "commit_or_hash": "x", "step": None}
    )
    outputs = EvalOutputs(str(tmp_path / "eval.json"), str(tmp_path / "inspect"))
    # evaluate_cell evaluates in the job's own environment (os.environ): the other tests' one here, so that its
    # attempts fork from their zygote instead of importing inspect-ai and torch in a zygote of their own (~10 CPU-s)
    env = ladder_env(data_dirs)
    for name in set(os.environ) - set(env):
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    data = evaluate_cell(job, model, outputs, log=lambda _: None)
    assert data == json.loads((tmp_path / "eval.json").read_text())
    validate_eval_json(data)
    assert data["status"] == "eval_failed" and data["metrics"] is None and data["inspect_log"] is None
    assert [(a["max_new_tokens"], a["ok"], a["failure_kind"]) for a in data["attempts"]] == [
        (16, False, "context"),
        (8, False, "context"),
    ]
    assert all("BadRequestError" in a["error"] for a in data["attempts"]) and data["max_new_tokens"] == 8
