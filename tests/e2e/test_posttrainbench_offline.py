"""config/posttrainbench-offline.yaml end to end, with the README's two commands: PostTrainBench's seven evals x
{baseline, sft} on one tiny model, offline (HF_HUB_OFFLINE=1, an unreachable HF_ENDPOINT), through the real task
definitions on FIXTURES published by ``python -m tests.support.evalfixtures`` (a tiny local model is the STAND-IN
for the LLM graders). One module-scoped run; the tests read it."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pandas as pd
import pytest

from ptflow.stages.evaluate.run import validate_eval_json
from tests.e2e.smk import REPO, job_env, plan, snakemake

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(2400)]

OVERLAY = str(REPO / "config" / "posttrainbench-offline.yaml")
RESULTS = Path("results/posttrainbench-offline")
MODEL = "ptflow--tiny-llama-h64"
# eval -> (headline metric, scorer reporting it)
HEADLINE = {
    "aime2025": ("accuracy", "aime_scorer"),
    "arenahardwriting": ("winrate", "pairwise_judge"),
    "bfcl": ("accuracy", "bfcl_scorer"),
    "gpqamain": ("accuracy", "choice"),
    "gsm8k": ("accuracy", "match"),
    "humaneval": ("accuracy", "verify"),
    "healthbench": ("bootstrap_score", "_scorer"),
}


def offline_env(work: Path) -> dict:
    return {
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_ENDPOINT": "http://127.0.0.1:9",  # discard port: any attempt to reach a hub fails at once
        "XDG_CACHE_HOME": str(work / ".xdg"),
    }


@pytest.fixture(scope="module")
def done(tmp_path_factory):
    work = tmp_path_factory.mktemp("ptb_offline")
    publish = [sys.executable, "-m", "tests.support.evalfixtures", "--hf-home", ".scratch/ptb-offline/hf_home",
               "--evals-cache", ".scratch/ptb-offline/inspect_evals"]  # fmt: skip
    subprocess.run(publish, cwd=work, env=job_env(), check=True, capture_output=True, text=True)
    env = offline_env(work)
    proc = snakemake(work, "--configfile", OVERLAY, env=env)
    return work, env, proc


def load(work: Path, ev: str, agent: str) -> dict:
    return json.loads((work / RESULTS / "cells" / MODEL / ev / agent / "eval.json").read_text())


def test_every_cell_scored_with_its_task_headline_metric(done):
    work, _, _ = done
    for ev, (metric, scorer) in HEADLINE.items():
        for agent in ("baseline", "sft"):
            data = load(work, ev, agent)
            validate_eval_json(data)
            assert data["status"] == "scored" and data["schema_version"] == 2, (ev, agent)
            assert data["metrics"]["name"] == metric and data["scorer"] == scorer, (ev, agent, data["metrics"])
            n = data["metrics"]["n"]
            assert n == 2 if ev != "arenahardwriting" else 0 <= n <= 2  # Arena-Hard: judged questions only
            assert data["provider"] == "hf" and data["attempts"][-1]["ok"] is True
            assert data["checkpoint"]["kind"] == ("base" if agent == "baseline" else "trained")
    gsm = load(work, "gsm8k", "sft")
    assert gsm["task"] == "inspect_evals/gsm8k" and gsm["task_args"] == {"fewshot": 2}


def test_cache_marker_records_each_evals_data_found_offline(done):
    work, _, _ = done
    marker = json.loads((work / RESULTS / "cache" / "hf_cache.json").read_text())
    data = {d["eval"]: d for d in marker["eval_data"]}
    assert sorted(data) == sorted(HEADLINE)
    assert not any(d["fetched"] for d in data.values())  # everything was there: nothing downloaded
    assert any("openai/gsm8k data_dir main splits test,train @cc7b047b" in p for p in data["gsm8k"]["pieces"])
    assert any(p.startswith("model ptflow-standin/tiny-grader") for p in data["healthbench"]["pieces"])


def test_leaderboard_names_each_metric(done):
    work, _, _ = done
    board = (work / RESULTS / "leaderboard.md").read_text()
    # each eval's headline metric by name: in the per-eval table's header and in the weights table
    assert "healthbench (bootstrap_score)" in board and "arenahardwriting (winrate)" in board
    assert "| healthbench | bootstrap_score |" in board and "| arenahardwriting | winrate |" in board
    df = pd.read_csv(work / RESULTS / "summary.csv")
    assert len(df) == 14 and set(df["status"]) == {"scored"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_each_cell_log_opens_with_inspect_view(done):
    """`inspect view` itself (its HTTP API, as the browser uses it) lists and opens every cell's log."""
    work, _, _ = done
    cells = work / RESULTS / "cells"
    port = _free_port()
    inspect = str(Path(sys.executable).with_name("inspect"))
    server = subprocess.Popen(
        [inspect, "view", "--log-dir", str(cells), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        base = f"http://127.0.0.1:{port}/api"
        deadline = time.time() + 60
        while True:
            try:
                listing = json.loads(urllib.request.urlopen(f"{base}/log-files", timeout=5).read())
                break
            except OSError:
                if time.time() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.5)
        names = [f["name"] for f in listing["files"]]
        for ev in HEADLINE:
            for agent in ("baseline", "sft"):
                assert load(work, ev, agent)["inspect_log"] == f"inspect/{ev}.eval"
                found = [n for n in names if n.endswith(f"/{MODEL}/{ev}/{agent}/inspect/{ev}.eval")]
                assert len(found) == 1, (ev, agent, names)
                url = f"{base}/logs/{urllib.parse.quote(found[0], safe='')}"  # the whole log, as the viewer loads it
                log = json.loads(urllib.request.urlopen(url, timeout=60).read())
                assert log["status"] == "success" and len(log["samples"]) == 2, (ev, agent)
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_second_run_plans_nothing(done):
    work, env, _ = done
    jobs = plan(work, "--configfile", OVERLAY, env=env)
    assert not jobs, f"a second run would redo {sorted(jobs)}:\n{jobs.text[-2000:]}"


def test_missing_data_offline_refused_at_preflight_one_line_each(tmp_path):
    """No fixtures in the caches and no network: preflight names every missing piece and nothing runs. The refusal
    is its problems alone (no traceback frames after them) and exit status 78 (ptflow.ops.driver.PREFLIGHT_REFUSED)."""
    from ptflow.ops.driver import PREFLIGHT_REFUSED

    two = tmp_path / "two_evals.yaml"
    two.write_text("matrix: {models: all, evals: [gsm8k, healthbench], agents: [baseline]}\n")
    proc = snakemake(tmp_path, "--configfile", OVERLAY, str(two), env=offline_env(tmp_path), check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == PREFLIGHT_REFUSED and "preflight found 3 problem(s)" in out, out[-3000:]
    assert 'File "' not in out and "Traceback" not in out, out[-3000:]
    refusal = out[out.index("preflight found") :].rstrip().splitlines()
    assert len(refusal) == 4 and all(line.startswith("  - evals[") for line in refusal[1:]), out[-3000:]
    lines = [line for line in out.splitlines() if line.strip().startswith("- evals[")]
    assert any("evals[gsm8k]: missing dataset openai/gsm8k data_dir main" in line for line in lines), out[-3000:]
    assert any("evals[healthbench]: missing file healthbench/full_" in line for line in lines)
    assert any("evals[healthbench]: missing model ptflow-standin/tiny-grader@main" in line for line in lines)
    assert all("HF_HUB_OFFLINE is set" in line for line in lines)
    assert not (tmp_path / RESULTS / "cells").exists()  # nothing was run
