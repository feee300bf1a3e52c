"""config/posttrainbench-offline.yaml end to end, with the README's two commands (the second with one overlay more):
PostTrainBench's seven evals on one tiny model, offline (HF_HUB_OFFLINE=1, an unreachable HF_ENDPOINT), through the
real task definitions on FIXTURES published by ``python -m tests.support.evalfixtures`` (a tiny local model is the
STAND-IN for the LLM graders). One module-scoped run; the tests read it.

The overlay (SFT_ON_ONE_EVAL) keeps the baseline on all seven evals and the sft agent on gsm8k only: 8 cells, not the
file's 14. What is under test per eval is its real task evaluated offline and scored with its headline metric; a
trained checkpoint goes through the same evaluation on every eval (only the model path differs), so one sft cell
proves that a trained model is evaluated, and the six others cost a training and an evaluation each (issue 34).

This module is where each real task's offline evaluation is proved. It was proved a second time outside the workflow,
in tests/integration/test_evals_offline.py (removed); its tests live here now: each cell's headline metric read back
from its inspect log, the pinned inputs recorded in the log, the agent's copy of the evaluation kit against the final
evaluation."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pandas as pd
import pytest
import yaml

from ptflow.config.entries import eval_from_entry
from ptflow.specs import EvalCall
from ptflow.stages.evaluate.kit import evaluate as kit
from ptflow.stages.evaluate.run import validate_eval_json, write_agent_kit
from ptflow.stages.evaluate.settings import Provider, build_call
from ptflow.stages.evaluate.sources import data_env
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
# The run's cells: the baseline on every eval, the sft agent on gsm8k (see the module's docstring)
SFT_ON_ONE_EVAL = "matrix: {exclude: [{agent: sft}], include: [{eval: gsm8k, agent: sft}]}\n"
CELLS = [(ev, "baseline") for ev in HEADLINE] + [("gsm8k", "sft")]
CONFIGS = ("--configfile", OVERLAY, "sft_on_one_eval.yaml")  # relative to the work dir (Snakemake's cwd)


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
    published = subprocess.run(publish, cwd=work, env=job_env(), check=True, capture_output=True, text=True)
    # the Hub datasets went through ptflow's fetch (their pins: test_cache_marker_records_each_evals_data_found_offline)
    assert "fixtures: 4 Hub datasets" in published.stdout, published.stdout
    (work / "sft_on_one_eval.yaml").write_text(SFT_ON_ONE_EVAL)
    env = offline_env(work)
    proc = snakemake(work, *CONFIGS, env=env)
    return work, env, proc


def call_of(ev: str) -> EvalCall:
    """The eval's call as the workflow builds it from the config (its headline metric's spec, its settings)."""
    entry = next(e for e in yaml.safe_load(Path(OVERLAY).read_text())["evals"] if e["id"] == ev)
    return build_call(eval_from_entry(entry), Provider())


def load(work: Path, ev: str, agent: str) -> dict:
    return json.loads((work / RESULTS / "cells" / MODEL / ev / agent / "eval.json").read_text())


def test_every_cell_scored_with_its_task_headline_metric(done):
    work, _, _ = done
    assert sorted(str(p.relative_to(work / RESULTS / "cells" / MODEL).parent) for p in
                  (work / RESULTS / "cells").rglob("eval.json")) == sorted(f"{ev}/{a}" for ev, a in CELLS)  # fmt: skip
    for ev, agent in CELLS:
        metric, scorer = HEADLINE[ev]
        data = load(work, ev, agent)
        validate_eval_json(data)
        assert data["status"] == "scored" and data["schema_version"] == 2, (ev, agent)
        assert data["metrics"]["name"] == metric and data["scorer"] == scorer, (ev, agent, data["metrics"])
        m = data["metrics"]
        assert 0.0 <= m["value"] <= 1.0 and m["stderr"] is not None and m["stderr"] >= 0.0, (ev, agent, m)
        assert m["n"] == 2 if ev != "arenahardwriting" else 0 <= m["n"] <= 2  # Arena-Hard: judged questions only
        assert data["provider"] == "hf" and [a["ok"] for a in data["attempts"]] == [True], (ev, agent)
        assert data["max_new_tokens"] == 16
        assert data["checkpoint"]["kind"] == ("base" if agent == "baseline" else "trained")
        # the headline metric read back from the cell's inspect log is the one eval.json reports
        head = kit.headline_metric(work / RESULTS / "cells" / MODEL / ev / agent / data["inspect_log"],
                                   call_of(ev).headline)  # fmt: skip
        assert head == {**m, "scorer": data["scorer"]}, (ev, agent, head, m)
    gsm = load(work, "gsm8k", "sft")
    assert gsm["task"] == "inspect_evals/gsm8k" and gsm["task_args"] == {"fewshot": 2}


def test_logs_record_the_pinned_inputs(done):
    """The cell's inspect log records the inputs of its evaluation (the call's task args, greedy decoding, budget)."""
    from inspect_ai.log import read_eval_log

    work, _, _ = done
    log = read_eval_log(str(work / RESULTS / "cells" / MODEL / "gsm8k" / "baseline" / "inspect" / "gsm8k.eval"),
                        header_only=True)  # fmt: skip
    assert log.eval.task == "inspect_evals/gsm8k" and log.eval.task_args["fewshot"] == 2
    assert log.eval.model.startswith("hf/") and log.eval.model_args["do_sample"] is False
    assert log.plan.config.max_tokens == 16


def test_agent_kit_measures_what_is_scored(done, tmp_path):
    """The agent's copy of evaluate.py, run with PostTrainBench's interface on the same call and model, reports the
    same headline metric as the cell's final evaluation (greedy decoding: the same numbers)."""
    work, env, _ = done
    final = load(work, "gpqamain", "baseline")
    script = write_agent_kit(tmp_path / "task", call_of("gpqamain"))
    assert sorted(p.name for p in (tmp_path / "task").iterdir()) == [
        "evaluate.py", "evaluate_settings.json", "ptflow_tasks.py", "templates",
    ]  # fmt: skip
    scratch = work / ".scratch" / "ptb-offline"
    agent_env = {**job_env(env), **data_env(scratch / "hf_home", scratch / "inspect_evals")}
    proc = subprocess.run(
        [sys.executable, str(script), "--model-path", final["checkpoint"]["path"], "--limit", "2", "--max-tokens",
         "16", "--json-output-file", "metrics.json"],
        cwd=tmp_path / "task", env=agent_env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads((tmp_path / "task" / "metrics.json").read_text())
    m = final["metrics"]
    assert metrics == {"accuracy": m["value"], "stderr": m["stderr"], "n": m["n"], "metric": m["name"],
                       "scorer": final["scorer"]}  # fmt: skip


def test_cache_marker_records_each_evals_data_found_offline(done):
    work, _, _ = done
    marker = json.loads((work / RESULTS / "cache" / "hf_cache.json").read_text())
    data = {d["eval"]: d for d in marker["eval_data"]}
    assert sorted(data) == sorted(HEADLINE)
    assert not any(d["fetched"] for d in data.values())  # everything was there: nothing downloaded
    # the four Hub datasets, each found at its pinned commit (the publish step fetched them through ptflow's fetch)
    hub = [p for d in data.values() for p in d["pieces"] if p.startswith("dataset ")]
    assert len(hub) == 4 and all(re.search(r" @[0-9a-f]{40}$", p) for p in hub), hub
    assert any("openai/gsm8k data_dir main splits test,train @cc7b047b" in p for p in data["gsm8k"]["pieces"])
    assert any(p.startswith("model ptflow-standin/tiny-grader") for p in data["healthbench"]["pieces"])


def test_leaderboard_names_each_metric(done):
    work, _, _ = done
    board = (work / RESULTS / "leaderboard.md").read_text()
    # each eval's headline metric by name: in the per-eval table's header and in the weights table
    assert "healthbench (bootstrap_score)" in board and "arenahardwriting (winrate)" in board
    assert "| healthbench | bootstrap_score |" in board and "| arenahardwriting | winrate |" in board
    df = pd.read_csv(work / RESULTS / "summary.csv")
    assert len(df) == len(CELLS) and set(df["status"]) == {"scored"}


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
        for ev, agent in CELLS:
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
    jobs = plan(work, *CONFIGS, env=env)
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
