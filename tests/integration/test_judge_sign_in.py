"""A judge of the panel signed in with a subscription (config ``judge``'s ``sign_in: {credentials: <auth.json>}``):
the REAL codex CLI judges an agent cell through ``judge_cell`` (rule judge_run's job) against the OpenAI stand-in of
``tests/support/providers``, signed in with a FIXTURE ChatGPT auth.json in codex's format. The stand-in accepts the
sign-in's access token only: a decoy API key in the job's environment is emptied, so a vote at all proves the CLI
used the subscription. The judge prints the auth.json (what a careless CLI might); no file the vote left holds a
token, and the user's auth.json is unchanged and nowhere copied."""

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
from tests.support.agent_clis import cli_bin_dir
from tests.support.codex_sign_in import write_codex_sign_in
from tests.support.providers import ProviderStandIn, Step
from tests.support.providers.server import judge_trajectory

pytestmark = pytest.mark.timeout(180)

ACCESS_TOKEN = "fixture-access-" + secrets.token_hex(20)
REFRESH_TOKEN = "rt-fixture-" + secrets.token_hex(20)
DECOY_KEY = "sk-decoy-" + secrets.token_hex(16)  # in the job's environment: the signed-in judge must not send it
MODEL = "gpt-5.1-codex"


def test_a_signed_in_codex_judge_votes_with_the_subscription(tmp_path, monkeypatch):
    auth = write_codex_sign_in(tmp_path / "user" / ".codex" / "auth.json", ACCESS_TOKEN, REFRESH_TOKEN)
    before = auth.read_bytes()
    cell_dir = tmp_path / "cell"
    trace, kept = cell_dir / "agent", tmp_path / "scratch" / "workspace"
    trace.mkdir(parents=True)
    kept.mkdir(parents=True)
    (trace / "stdout.log").write_text("the agent trained the base model\n")
    (trace / "stderr.log").write_text("")
    (kept / "train.py").write_text("print('train')\n")
    (kept / "final_model.listing.txt").write_text("config.json\n")
    manifest = {"agent_run": {"trace_dir": str(trace), "cli": "codex", "workspace": str(kept)}}
    node = str(Path(shutil.which("node") or "/usr/bin/node").parent)
    monkeypatch.setenv("PATH", os.pathsep.join([str(cli_bin_dir("codex")), node, "/usr/local/bin", "/usr/bin", "/bin"]))
    monkeypatch.setenv("OPENAI_API_KEY", DECOY_KEY)
    monkeypatch.setenv("TMPDIR", str(tmp_path / "node-tmp"))  # the judge's private home and task copy
    (tmp_path / "node-tmp").mkdir()
    # the judge shows its home's sign-in (masked in what is kept), then writes both verdicts
    steps = [Step(shell='cat "$CODEX_HOME/auth.json"'), *judge_trajectory()]
    lines: list[str] = []
    with ProviderStandIn(steps, expected_key={"openai": (ACCESS_TOKEN,)}) as api:
        judge = {"agent": "codex", "model": MODEL, "base_url": f"{api.url}/v1", "sign_in": {"credentials": str(auth)}}
        vote = {"judge": "codex", "run": 1, "fields": ["contamination", "disallowed_model"]}
        data = judge_cell(cell={"model": "Qwen/Qwen3-1.7B-Base", "eval": "gsm8k", "agent": "codex"},
                          manifest=manifest, ballot=Ballot(judge, cell_dir / "judges/codex/run1.json", vote),
                          log=lines.append)  # fmt: skip
        records = [r for r in api.records if r.get("api") == "openai" and not r.get("other")]
    assert data["status"] == "judged" and data["flagged"] is False, data
    # the stand-in saw the subscription's access token on every request, never the API key
    assert records and all(r["key_ok"] and r["model"] == MODEL for r in records), records
    kept_dir = cell_dir / "judges/codex/run1"
    stdout = (kept_dir / "judge_stdout.log").read_text()
    shown = "".join(json.loads(line).get("item", {}).get("aggregated_output", "") for line in stdout.splitlines())
    assert '"access_token": "***"' in shown, stdout  # the judge printed the auth.json: its tokens masked
    # no token (nor the decoy key) in any file of the cell dir or the log, and no copy of the sign-in anywhere
    values = [*subscription_secrets(auth), DECOY_KEY]
    assert ACCESS_TOKEN in values and REFRESH_TOKEN in values
    files = [p for p in tmp_path.rglob("*") if p.is_file() and not p.is_symlink() and p != auth]
    holding = [str(p.relative_to(tmp_path)) for p in files if any(v.encode() in p.read_bytes() for v in values)]
    assert holding == [], holding
    assert not any(v in line for v in values for line in lines)
    assert auth.read_bytes() == before and not list((tmp_path / "node-tmp").iterdir())  # the judge's home is gone
