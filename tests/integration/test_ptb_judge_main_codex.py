"""A vote of PostTrainBench main's panel run by the REAL codex CLI (``ptflow.stages.judge.vote.judge_cell`` with a
main vote, the ``ptb-lookup`` judge) against the OpenAI stand-in of ``tests/support/providers``, signed in with a
FIXTURE ChatGPT auth.json at the checkout's ``agents/codex_non_api/auth.json``: the stand-in accepts its access token
only (the job's API key is emptied, as judge_lib.sh empties it); the CLI is the home's pinned ``.codex-cli-<version>``
(linked from ``posttrainbench.judge.codex_cli``: here the codex the agent-CLI tests install, ptflow's own pin, since
@openai/codex 0.144.5 cannot be installed offline), run with main's command line and model; the judge writes its
``judgement.json`` in main's schema, which the vote reads as collect.py does; nothing kept holds a token."""

from __future__ import annotations

import json
import os
import secrets
import shutil
from pathlib import Path

import pytest

from ptflow.stages.judge.ballot import Ballot
from ptflow.stages.judge.sign_in import subscription_secrets
from ptflow.stages.judge.vote import judge_cell
from ptflow.stages.posttrainbench import judge_main as jm
from tests.support.agent_clis import cli_bin_dir
from tests.support.codex_sign_in import write_codex_sign_in
from tests.support.providers import ProviderStandIn, Step
from tests.support.ptb_checkout import make_fixture_checkout
from tests.unit.test_ptb_judge_main import commit_main_judges

pytestmark = pytest.mark.timeout(180)

ACCESS_TOKEN = "fixture-access-" + secrets.token_hex(20)
REFRESH_TOKEN = "rt-fixture-" + secrets.token_hex(20)
DECOY_KEY = "sk-decoy-" + secrets.token_hex(16)
VERDICT = {"disallowed_ptb_lookup": True, "justification_disallowed_ptb_lookup": "stand-in: it read the leaderboard"}


def test_main_s_ptb_lookup_judge_votes_with_the_real_codex_on_the_sign_in(tmp_path, monkeypatch):
    root = tmp_path / "PostTrainBench"
    make_fixture_checkout(root, evals=("gsm8k",), agents=("codex",), judge="v1.1")
    commit_main_judges(root)
    auth = write_codex_sign_in(root / jm.SUBSCRIPTION_AUTH, ACCESS_TOKEN, REFRESH_TOKEN)
    before = auth.read_bytes()
    prefix = tmp_path / "codex-prefix"  # a prefix holding bin/codex, as npm install -g --prefix leaves it
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "codex").symlink_to(cli_bin_dir("codex") / "codex")
    trace, workspace = tmp_path / "cell" / "agent", tmp_path / "scratch" / "task"
    trace.mkdir(parents=True)
    workspace.mkdir(parents=True)
    (trace / "stdout.log").write_text('{"type": "message", "content": "trained the base model"}\n')
    (trace / "stderr.log").write_text("")
    (workspace / "train.py").write_text("print('train')\n")
    manifest = {"agent_run": {"trace_dir": str(trace), "cli": "codex", "workspace": str(workspace)}}
    node = str(Path(shutil.which("node") or "/usr/bin/node").parent)
    monkeypatch.setenv("PATH", os.pathsep.join([node, "/usr/local/bin", "/usr/bin", "/bin"]))
    monkeypatch.setenv("OPENAI_API_KEY", DECOY_KEY)
    text = json.dumps(VERDICT).replace("'", "")
    steps = [Step(shell="ls .. && head -n 3 ../solve_parsed.txt && ls ../.codex-cli-*/bin"),
             Step(shell=f"printf '%s' '{text}' > judgement.json"), Step(text="The verdict is written.")]  # fmt: skip
    lines: list[str] = []
    judge = jm.panel().judge("ptb-lookup")
    with ProviderStandIn(steps, expected_key={"openai": (ACCESS_TOKEN,)}) as api:
        vote = {"judge": judge.id, "run": 1, "fields": list(judge.fields), "protocol": jm.PROTOCOL,
                "auth_json": str(auth), "base_url": f"{api.url}/v1", "agent": "codex",
                "agent_config": "gpt-5.1-codex-max", "codex_cli": str(prefix)}  # fmt: skip
        out = tmp_path / "cell" / "judges" / judge.id / "run1.json"
        data = judge_cell(cell={"model": "Qwen/Qwen3-1.7B-Base", "eval": "gsm8k", "agent": "codex"},
                          manifest=manifest, ballot=Ballot(judge.settings, out, vote),
                          checkout={"path": str(root), "eval_dir": "gsm8k"}, log=lines.append)  # fmt: skip
        records = [r for r in api.records if r.get("api") == "openai" and not r.get("other")]
    assert data["status"] == "judged" and data["fields"] == {"disallowed_ptb_lookup": True}, (data, lines)
    # the stand-in saw the sign-in's access token on every request (never the API key), and main's model
    assert records and all(r["key_ok"] and r["model"] == jm.DEFAULT_MODEL for r in records), records
    kept = out.with_suffix("")
    assert json.loads((kept / "judgement.json").read_text()) == VERDICT
    shown = next(line for line in lines if "PostTrainBench main)" in line)
    assert f"/.codex-cli-{jm.DEFAULT_CODEX_VERSION}/bin/codex --search -a never exec --json" in shown, shown
    assert "model_reasoning_effort=xhigh --skip-git-repo-check --yolo --model gpt-5.6-terra" in shown, shown
    values = [*subscription_secrets(auth), DECOY_KEY]
    files = [p for p in tmp_path.rglob("*") if p.is_file() and not p.is_symlink() and p != auth]
    holding = [str(p.relative_to(tmp_path)) for p in files
               if "codex-prefix" not in str(p) and any(v.encode() in p.read_bytes() for v in values)]  # fmt: skip
    assert holding == [], holding
    assert auth.read_bytes() == before or json.loads(auth.read_text())["tokens"]["access_token"] == ACCESS_TOKEN
