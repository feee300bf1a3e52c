"""PostTrainBench from a pinned checkout: its config is refused in one line when wrong, the checkout is verified or
cloned whole, and each path's git object id is what the cells' params carry (ptflow.config.posttrainbench)."""

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from ptflow.config import posttrainbench as ptb
from ptflow.config.matrix import build_config
from ptflow.stages.posttrainbench import checkout_eval as ptb_eval
from ptflow.stages.posttrainbench.checkout import make_checkout, verify
from tests.unit.test_config import error_of

COMMIT = "9082063a" + "0" * 32


def checkout_raw(default_raw, **section):
    default_raw["posttrainbench"] = section or {"commit": COMMIT, "path": "/shared/PostTrainBench"}
    default_raw["evals"] = [{"id": "gsm8k", "task": "posttrainbench/gsm8k", "retry_max_new_tokens": [3000, 2000]}]
    default_raw["agents"] = [
        {"id": "baseline", "kind": "baseline"},
        {"id": "codex", "kind": "cli-agent", "cli": "codex", "model": "gpt-5.1-codex-max", "hours": 1,
         "keys": ["OPENAI_API_KEY"]},
    ]  # fmt: skip
    default_raw.pop("scoring", None)  # one eval: its weight is 1
    return default_raw


def test_a_checkout_eval_and_agent_build(default_raw):
    cfg = build_config(checkout_raw(default_raw))
    assert cfg.posttrainbench.commit == COMMIT and cfg.evals["gsm8k"].from_checkout
    assert cfg.evals["gsm8k"].max_new_tokens is None  # evaluate.py's own default is the first rung
    assert cfg.ptb_agent(cfg.agents["codex"]) == "codex"
    assert cfg.posttrainbench.location("/scratch") == "/shared/PostTrainBench"


@pytest.mark.parametrize(
    "section, key",
    [
        ({"commit": "9082063", "path": "/x"}, "posttrainbench.commit"),
        ({"commit": COMMIT, "path": "/x", "repo": "https://example.org/r"}, "exactly one of path"),
        ({"commit": COMMIT}, "exactly one of path"),
    ],
)
def test_bad_section_is_one_line_naming_the_key(default_raw, section, key):
    assert key in error_of(checkout_raw(default_raw, **section))


def test_a_checkout_eval_refuses_ptflows_own_settings(default_raw):
    raw = checkout_raw(default_raw)
    raw["evals"][0]["max_new_tokens"] = 4000
    msg = error_of(raw)
    assert "evals[0].max_new_tokens" in msg and "checkout's evaluate.py" in msg


def test_a_checkout_eval_needs_the_checkout(default_raw):
    raw = checkout_raw(default_raw)
    del raw["posttrainbench"]
    assert "add posttrainbench:" in error_of(raw)


def test_mixing_ptflows_task_with_checkout_agents_is_refused(default_raw):
    raw = checkout_raw(default_raw)
    raw["evals"] = [{"id": "gsm8k", "task": "inspect_evals/gsm8k", "max_new_tokens": 4000}]
    msg = error_of(raw)
    assert "'gsm8k'" in msg and "posttrainbench/gsm8k" in msg


def test_solve_without_checkout_and_rising_ladder_are_refused(default_raw):
    raw = checkout_raw(default_raw)
    raw["evals"][0]["retry_max_new_tokens"] = [2000, 3000]
    assert "retry_max_new_tokens" in error_of(raw)
    raw = checkout_raw(default_raw)
    del raw["posttrainbench"]
    raw["evals"] = [{"id": "add", "task": "inspect_evals/gsm8k", "max_new_tokens": 10}]
    raw["agents"][1]["solve"] = "codexhigh"
    assert "solve" in error_of(raw)


def test_ladder_and_budget_flag(tmp_path):
    assert ptb_eval.ladder([12000, 8000]) == [None] * 4 + [12000] * 3 + [8000] * 2
    script = tmp_path / "evaluate.py"
    script.write_text('p.add_argument(\n    "--max-new-tokens", type=int)\n')
    assert ptb_eval.budget_flag(script) == "--max-new-tokens"
    script.write_text("p.add_argument('--limit')\n")
    assert ptb_eval.budget_flag(script) is None


def _repo(path: Path) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "PATH": "/usr/bin:/bin"}  # fmt: skip
    (path / "src/eval/tasks/gsm8k").mkdir(parents=True)
    (path / "src/eval/tasks/gsm8k/evaluate.py").write_text("print('fixture')\n")
    (path / "src/eval/templates").mkdir(parents=True)
    (path / "src/eval/templates/qwen3.jinja").write_text("{{ messages }}\n")
    (path / "scripts").mkdir()  # the results part of 9082063 and d27a95e: a checkout is recognised part by part
    for name in ("aggregate_methods", "aggregate_contamination", "aggregate_final"):
        (path / f"scripts/{name}.py").write_text("print('fixture')\n")
    for argv in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "fixture"]):
        subprocess.run(["git", "-C", str(path), *argv], check=True, env=env)
    return subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()


def test_given_checkout_is_verified_and_its_objects_recorded(tmp_path):
    src = tmp_path / "ptb"
    src.mkdir()
    commit = _repo(src)
    marker = tmp_path / "checkout.json"
    spec = {"commit": commit, "location": str(src), "repo": None, "paths": ptb.eval_paths("gsm8k")}
    data = make_checkout(spec, marker, log=lambda *_: None)
    assert json.loads(marker.read_text()) == data
    assert set(data["objects"]) == {"src/eval/tasks/gsm8k", "src/eval/templates"}
    (src / "src/eval/tasks/gsm8k/evaluate.py").write_text("changed\n")
    with pytest.raises(ptb.CheckoutError, match="local changes"):
        verify(src, commit)
    with pytest.raises(ptb.CheckoutError, match="not posttrainbench.commit"):
        verify(src, "f" * 40)
    with pytest.raises(ptb.CheckoutError, match="has no src/eval/tasks/bfcl"):
        ptb.object_ids(src, commit, ptb.eval_paths("bfcl"))


def test_repo_is_cloned_at_the_commit_whole(tmp_path):
    src = tmp_path / "upstream"
    src.mkdir()
    commit = _repo(src)
    dest = tmp_path / "scratch" / "posttrainbench" / commit
    spec = {"commit": commit, "location": str(dest), "repo": str(src), "paths": ptb.eval_paths("gsm8k")}
    data = make_checkout(spec, tmp_path / "m.json", log=lambda *_: None)
    assert data["path"] == str(dest) and (dest / "src/eval/tasks/gsm8k/evaluate.py").is_file()
    assert not [p for p in dest.parent.iterdir() if p.name.startswith(".")]  # no staging dir left behind
    bad = {**spec, "commit": "e" * 40, "location": str(tmp_path / "other")}
    with pytest.raises(ptb.CheckoutError, match="has no commit"):
        make_checkout(bad, tmp_path / "m2.json", log=lambda *_: None)
    assert not (tmp_path / "m2.json").exists() and not (tmp_path / "other").exists()


# A checkout eval whose evaluate.py fails at its default budget (the first rung), hangs on its second call, and
# scores once given a budget (the second rung): a stand-in for a slow vLLM evaluation, in the checkout's layout.
LADDER_EVALUATE_PY = """
import argparse, json, sys, time
from pathlib import Path
p = argparse.ArgumentParser()
p.add_argument("--model-path"); p.add_argument("--templates-dir"); p.add_argument("--limit")
p.add_argument("--max-tokens"); p.add_argument("--json-output-file")
a = p.parse_args()
calls = Path(__file__).with_name("calls")
calls.write_text(calls.read_text() + "x" if calls.exists() else "x")
if a.max_tokens:
    Path(a.json_output_file).write_text(json.dumps({"accuracy": 0.5}))
    sys.exit(0)
if len(calls.read_text()) == 2:
    time.sleep(60)
sys.exit(1)
"""


def test_a_ladder_cut_by_the_jobs_end_goes_on_where_it_stopped(tmp_path, monkeypatch):
    """An evaluation job that reaches its end mid-ladder keeps the tries made (beside eval.json) and its retry goes
    on at the try that was cut, not at the first: PostTrainBench's ladder of up to 9 tries of 8 h each outlasts an
    evaluate request of a few hours."""
    monkeypatch.setattr(ptb_eval, "MIN_TRY_S", 0.5)  # a real job keeps 300 s; this test's deadline is seconds
    checkout, model = tmp_path / "checkout", tmp_path / "model"
    eval_dir = checkout / "src" / "eval" / "tasks" / "gsm8k"
    eval_dir.mkdir(parents=True)
    (eval_dir / "evaluate.py").write_text(LADDER_EVALUATE_PY)
    model.mkdir()
    (model / "config.json").write_text("{}")
    progress = tmp_path / ptb_eval.PROGRESS_FILE
    identity = {"model": str(model), "step": 3}
    task = ptb_eval.CheckoutEval("gsm8k", lower=[8000])
    carry = ptb_eval.LadderCarry(progress, identity)
    common = {"checkout": checkout, "task": task, "model_path": model, "env": dict(os.environ), "carry": carry,
              "log": lambda _m: None}  # fmt: skip
    with pytest.raises(ptb_eval.OutOfJobTime, match="gsm8k: .*try 2 of the ladder.*the job's retry makes it"):
        cut = ptb_eval.LadderCarry(progress, identity, deadline=time.time() + 8)
        ptb_eval.evaluate(out_dir=tmp_path / "job1", **{**common, "carry": cut})
    kept = json.loads(progress.read_text())
    assert kept["identity"] == identity and [a["ok"] for a in kept["attempts"]] == [False]  # the cut try not counted
    # the retry: tries 2-4 at the default budget (they fail), the fifth at 8000 scores
    out = ptb_eval.evaluate(out_dir=tmp_path / "job2", **common)
    assert out["ok"] and [a["max_new_tokens"] for a in out["attempts"]] == [None] * 4 + [8000]
    assert len((eval_dir / "calls").read_text()) == 6 and not progress.exists()  # 1, the cut 2, then 2-5 again
    # another model's (or call's) tries are not carried over
    ptb_eval._keep_progress(progress, {"model": "other"}, kept["attempts"])
    again = ptb_eval.evaluate(out_dir=tmp_path / "job3", **common)
    assert len(again["attempts"]) == 5
