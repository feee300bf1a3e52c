"""PostTrainBench from a pinned checkout: its config is refused in one line when wrong, the checkout is verified or
cloned whole, and each path's git object id is what the cells' params carry (ptflow.config.posttrainbench)."""

import json
import subprocess
from pathlib import Path

import pytest

from ptflow.config import posttrainbench as ptb
from ptflow.config.model import build_config
from ptflow.stages.posttrainbench import evaluate as ptb_eval
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
