"""Every failure by its cause, and a rerun by cause, on the real test cluster (issue 50): ONE Snakemake run through
the Slurm profile fails five cells, each for a cause of its own, and ``ptflow status`` names each from facts only:

- ``badkey``: the real opencode CLI against its provider stand-in, which refuses the key (HTTP 401): the CLI's error
  event -> ``api_key_refused``; ``ptflow rerun`` refuses it with its what-to-do line (the key variable named);
- ``storm``: the real claude CLI against a stand-in answering 429 to every request (a 429 storm; retry-after 0, so
  claude's five retries take a second): claude gives up, no final model -> ``rate_limited``;
- ``sft-oom``: a training that runs out of GPU memory: the stand-in trainer of tests/support/oom_trainer.py raises
  torch's OutOfMemoryError inside the real train job, as TRL does on a GPU too small (this cluster cannot make a real
  one: no GPUs, and without cgroups Slurm enforces no --mem) -> ``out_of_memory``;
- ``lost``: the scripted agent running on the spare node when the test sets that node DOWN (``scontrol update
  state=down``, what slurmctld does to a node that stops answering): Slurm ends the job NODE_FAIL (no requeue asked:
  ``--no-requeue`` in the agent's request; the run has ``--retries 0``, so Snakemake does not resubmit it either)
  -> ``node_failure``;
- ``sft``: a trained cell whose evaluation fails every try (tests/support/ladder_tasks.py ``out_of_memory_while``:
  torch's OutOfMemoryError on each of the ladder's 4 tries while a marker file exists) -> ``eval_failed``.

Then the marker is removed and ``ptflow rerun --cause eval_failed --run`` reruns that one cell's evaluation alone: the
test counts the new run's Slurm jobs by rule (one evaluate job; no cache, preprocess or train job, no other cell). A
cell accepted as a failure (scoring.overrides' ``accepted``) is not rerun by its cause.

Lean on purpose (the suite's budget): one model, one eval, the upstream outputs (dataset, model cache, train split)
made by a local run first as tests/slurm/test_real_agent_clis_on_slurm.py makes them, SFT at 2 steps.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest
import yaml

from tests.e2e.smk import REPO, command, job_env, snakemake
from tests.slurm.test_workflow_on_slurm import SITE, WORK_ROOT, rule_of, run_id, scontrol_jobs
from tests.support import slurm_admin
from tests.support.agent_clis import cli_bin_dir
from tests.support.local_slurm import SPARE_NODE
from tests.support.oom_trainer import AGENTS_ENV
from tests.support.providers import Faults, ProviderStandIn

pytestmark = pytest.mark.timeout(900)

PTFLOW = str(Path(sys.executable).with_name("ptflow"))
MODEL = "ptflow--tiny-llama-h64"
EVAL = "flaky"
CELLS = Path("results") / "cells" / MODEL / EVAL
# (the eval's cache too: every agent cell's task dir waits for it)
UPSTREAM = (
    f"results/data/{EVAL}/train.parquet",
    f"results/cache/models/{MODEL}.json",
    f"results/cache/evals/{EVAL}.json",
)
TASK = f"{REPO / 'tests' / 'support' / 'ladder_tasks.py'}@out_of_memory_while"
OPENCODE_KEYS = {"given": "oc-FAKE-refused-1e4a", "accepted": "oc-FAKE-valid-9b27"}
EXPECTED_CAUSES = {
    "badkey": "api_key_refused",
    "storm": "rate_limited",
    "sft-oom": "out_of_memory",
    "lost": "node_failure",
    "sft": "eval_failed",
}
SFT_PARAMS = {"steps": 2, "batch_size": 8, "learning_rate": 3.0e-3, "seed": 0, "gradient_checkpointing": False}


def overlay(work: Path, refusing: str, storming: str) -> Path:
    default = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    add = next(e for e in default["evals"] if e["id"] == "add")
    flaky = {
        **add,
        "id": EVAL,
        "task": TASK,
        "task_args": {"marker": str(work / "eval-fails")},
        "retry_max_new_tokens": [],
    }  # fmt: skip  (the ladder's first stage only: 4 tries)
    cli = {"kind": "cli-agent", "hours": 0.05, "grace_minutes": 0.1}
    agents = [
        {"id": "sft", "kind": "trl-sft", "params": SFT_PARAMS},
        {"id": "sft-oom", "kind": "trl-sft", "params": SFT_PARAMS},
        {**cli, "id": "badkey", "cli": "opencode", "model": "opencode/kimi-k2.6", "keys": ["OPENCODE_API_KEY"],
         "base_url": refusing + "/v1"},
        {**cli, "id": "storm", "cli": "claude", "model": "claude-sonnet-4-5", "keys": ["ANTHROPIC_API_KEY"],
         "base_url": storming},
        {**cli, "id": "lost", "cli": "scripted", "model": "scripted-overrun", "keys": ["PTFLOW_FAKE_KEY"],
         "command": ["{python}", "-m", "ptflow.standins.scripted_agent", "--task-dir", "{task_dir}", "--overrun",
                     "--no-model"]},
    ]  # fmt: skip
    path = work / "causes.yaml"
    path.write_text(yaml.safe_dump({
        "agents": agents,
        "evals": [flaky],
        "matrix": {"models": [default["models"][0]["id"]], "evals": [EVAL], "agents": "all"},
        # the operators' file: no accepted failure until test_an_accepted_cell_is_not_rerun accepts one
        "scoring": {"reference": {"zeroshot": {"tiny-llama-h64": {EVAL: 0.0}}}, "overrides": str(work / "ops.yaml")},
    }))  # fmt: skip
    (work / "ops.yaml").write_text(yaml.safe_dump({"accepted": []}))
    return path


def site_file(work: Path) -> Path:
    """The test site, with the ``lost`` cell's train job pinned to the spare node (partition nodefail, where no other
    module's job runs) and not requeued by Slurm after a node failure."""
    site = yaml.safe_load(SITE.read_text())
    site["partitions"]["nodefail"] = {"max_runtime": 60, "gpus_per_node": 4}
    site["agent_resources"]["lost"] = {"partition": "nodefail", "extra": f"--nodelist={SPARE_NODE} --no-requeue"}
    path = work / "site.yaml"
    path.write_text(yaml.safe_dump(site))
    return path


def lose_node_under(cluster, work: Path, proc: subprocess.Popen, timeout: float = 400) -> dict:
    """Once the ``lost`` cell's agent runs on the spare node, set that node DOWN; resume it once Slurm has ended the
    job. The job's last state as scontrol showed it."""
    stdout = work / CELLS / "lost" / "agent" / "stdout.log"
    deadline, job, downed = time.monotonic() + timeout, None, False
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            mine = [j for j in scontrol_jobs(cluster) if j.get("WorkDir") == str(work) and rule_of(j) == "train"
                    and "_lost" in j["Comment"]]  # fmt: skip
            job = mine[-1] if mine else None
            if job and downed and job["JobState"] not in ("RUNNING", "COMPLETING"):
                return job
            if job and not downed and job["JobState"] == "RUNNING" and stdout.is_file() and stdout.stat().st_size:
                cluster.run(["scontrol", "update", f"nodename={SPARE_NODE}", "state=down",
                             "reason=ptflow-test-node-lost"], check=True)  # fmt: skip
                downed = True
            time.sleep(0.5)
        raise AssertionError(f"the lost cell's job was not ended by the node going down: {job}")
    finally:
        if downed:
            cluster.run(["scontrol", "update", f"nodename={SPARE_NODE}", "state=resume"], check=False)


def ptflow(env: dict, work: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PTFLOW, args[0], "-d", str(work), *args[1:]], capture_output=True, text=True, env=env,
                          cwd=work, timeout=600)  # fmt: skip


@pytest.fixture(scope="module")
def failed(slurm_cluster):
    started = time.monotonic()
    WORK_ROOT.mkdir(parents=True, exist_ok=True)
    work = WORK_ROOT / f"causes-{uuid.uuid4().hex[:8]}"
    work.mkdir()
    (work / "eval-fails").write_text("every evaluation try fails while this file exists\n")
    bins = [str(cli_bin_dir(name)) for name in ("claude", "opencode")]
    refusing = ProviderStandIn(
        expected_key={"openai_chat": OPENCODE_KEYS["accepted"], "openai": OPENCODE_KEYS["accepted"]}
    )
    storming = ProviderStandIn(faults=Faults(errors=[429] * 500))
    with refusing, storming, slurm_admin.spare_node_held():
        config, site = overlay(work, refusing.url, storming.url), site_file(work)
        env = {**job_env(slurm_cluster.env), "OPENCODE_API_KEY": OPENCODE_KEYS["given"],
               "ANTHROPIC_API_KEY": "sk-ant-FAKE-5c1d", "PTFLOW_FAKE_KEY": "fake", AGENTS_ENV: "sft-oom"}  # fmt: skip
        env["PATH"] = ":".join([*bins, env["PATH"]])
        env["PYTHONPATH"] = ":".join([str(REPO / "tests" / "support" / "oom_site"), env["PYTHONPATH"]])
        args = ("--configfile", str(config), "--config", f"site={site}", "--retries", "0")
        snakemake(work, *UPSTREAM, *args, env=env)  # the upstream outputs, locally
        ran = time.monotonic()
        targets = [str(CELLS / agent / "eval.json") for agent in EXPECTED_CAUSES]
        with tempfile.TemporaryFile("w+") as log:
            proc = subprocess.Popen(command(work, *targets, *args, profile="profiles/slurm"), cwd=work, env=env,
                                    stdout=log, stderr=subprocess.STDOUT, text=True)  # fmt: skip
            try:
                lost_job = lose_node_under(slurm_cluster, work, proc)
                proc.wait(timeout=600)
            finally:
                if proc.poll() is None:
                    proc.kill()
            log.seek(0)
            out = log.read()
        took = f"upstream {ran - started:.0f} s, failing run {time.monotonic() - ran:.0f} s"
        print(f"\ntest_failure_causes_on_slurm: {took}")
        (work / "snakemake.out").write_text(out)
        assert proc.returncode != 0, out[-3000:]  # --keep-going: every cell ran as far as it could, four failed
        records = {"refusing": list(refusing.records), "storming": list(storming.records)}
    yield {"work": work, "env": env, "out": out, "lost_job": lost_job, "records": records}
    print(f"\ntest_failure_causes_on_slurm: the module {time.monotonic() - started:.0f} s")
    if not os.environ.get("PTFLOW_KEEP_TEST_WORK"):
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="module")
def status(failed):
    proc = ptflow(failed["env"], failed["work"], "status", "--json", "--no-png")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_status_names_each_cells_cause(failed, status):
    causes = {c["agent"]: (c.get("cause") or {}).get("cause") for c in status["cells"]}
    assert causes == EXPECTED_CAUSES, json.dumps(status["causes"], indent=1)[-4000:]
    groups = {g["name"]: g for g in status["causes"]}
    assert set(groups) == set(EXPECTED_CAUSES.values())
    # each cause from its facts: Slurm's record, the CLI's event, the job's exception, the cell's eval.json
    assert failed["lost_job"]["JobState"] == "NODE_FAIL"
    assert "NODE_FAIL" in groups["node_failure"]["cells"][0]["detail"]
    assert "HTTP 401" in groups["api_key_refused"]["cells"][0]["detail"]
    assert "HTTP 429" in groups["rate_limited"]["cells"][0]["detail"]
    assert "OutOfMemoryError" in groups["out_of_memory"]["cells"][0]["detail"]
    assert groups["eval_failed"]["cells"][0]["detail"].startswith("4 evaluation tries")
    # the stand-ins saw what the causes say: every opencode request refused, every claude request answered 429
    assert {r["status"] for r in failed["records"]["refusing"] if not r.get("other")} == {401}
    assert {r["status"] for r in failed["records"]["storming"] if r.get("main")} == {429}
    # the steps the causes name
    assert {g["name"]: g["step"] for g in status["causes"]} == {
        "node_failure": "train", "api_key_refused": "train", "rate_limited": "train", "out_of_memory": "train",
        "eval_failed": "evaluate"}  # fmt: skip


def test_a_refused_key_is_not_rerun(failed, status):
    proc = ptflow(failed["env"], failed["work"], "rerun", "--cause", "api_key_refused")
    assert proc.returncode == 1, proc.stdout + proc.stderr[-2000:]
    assert "refused: 1 cell(s) of cause api_key_refused: set a valid OPENCODE_API_KEY" in proc.stdout
    assert "nothing to rerun" in proc.stdout and "it will run" not in proc.stdout


def test_rerun_of_a_cause_reruns_only_its_cells_at_the_failed_step(slurm_cluster, failed, status):
    work = failed["work"]
    (work / "eval-fails").unlink()  # the fix: the evaluation no longer runs out of memory
    started = time.monotonic()
    proc = ptflow(failed["env"], work, "rerun", "--cause", "eval_failed", "--run")
    print(f"\ntest_failure_causes_on_slurm: rerun {time.monotonic() - started:.0f} s")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert re.search(rf"rerun {MODEL}/{EVAL}/sft: cause eval_failed, step evaluate", out), out[-3000:]
    assert "it will run: evaluate 1" in out, out[-3000:]
    # the rerun's Slurm jobs: the cell's evaluation alone (its training, the cache and the other cells untouched)
    jobs = [j for j in scontrol_jobs(slurm_cluster) if j.get("JobName") == run_id(out)]
    assert sorted(map(rule_of, jobs)) == ["evaluate"], [j["Comment"] for j in jobs]
    assert jobs[0]["Comment"].split("_wildcards_")[1].split("_") == [MODEL, EVAL, "sft"]
    data = json.loads((work / CELLS / "sft" / "eval.json").read_text())
    assert data["status"] == "scored", data


def test_an_accepted_cell_is_not_rerun(failed, status):
    work = failed["work"]
    accepted = {"cell": f"{MODEL}/{EVAL}/storm", "reason": "the provider's limit; counted as the base model",
                "who": "ptflow tests", "when": "2026-11-29"}  # fmt: skip
    (work / "ops.yaml").write_text(yaml.safe_dump({"accepted": [accepted]}))
    try:
        proc = ptflow(failed["env"], work, "rerun", "--cause", "rate_limited")
    finally:
        (work / "ops.yaml").write_text(yaml.safe_dump({"accepted": []}))
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    assert f"accepted as failures, not rerun: {MODEL}/{EVAL}/storm" in proc.stdout
    assert "nothing to rerun" in proc.stdout and "it will run" not in proc.stdout
