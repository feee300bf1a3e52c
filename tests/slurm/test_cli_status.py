"""ptflow status / cancel / logs on the real two-node Slurm test cluster, each state caused for real.

A reduced matrix (h64 x add x {baseline, sft, bad}) where `bad` trains 100000 steps under a 1-minute time
limit: Slurm ends it with TIMEOUT (a real limit hit). Two workflow runs through the plugin (minutes).
Run 1 gives Done and Error; run 2 (evaluations redone) is held behind a blocker that takes every GPU of the gpu
partition (Pending), then runs (Running), then one cell is cancelled with `ptflow cancel` (Canceled) while the
other keeps running.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from tests.e2e.smk import REPO, command, default_agents

SITE = REPO / "tests" / "slurm" / "localtest.yaml"
WORK_ROOT = Path("/var/lib/ptflow-tests")
PTFLOW = str(Path(sys.executable).with_name("ptflow"))
pytestmark = pytest.mark.timeout(2400)  # two workflow runs on a shared 2-core machine
MODEL = "ptflow--tiny-llama-h64"
# `bad` trains far longer than its 1-minute time limit (site agent_resources): Slurm ends it with TIMEOUT.
BAD = {"id": "bad", "kind": "trl-sft", "params": {"steps": 100000, "batch_size": 8, "learning_rate": 1e-3, "seed": 0}}


def smk_args(work: Path) -> list[str]:
    return ["--config", f"site={work / 'site.yaml'}", "--configfile", str(work / "matrix.yaml"), "--retries", "0"]


def ptflow(cluster, work: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [PTFLOW, "-v", *args[:1], "-d", str(work), *args[1:]],
        capture_output=True,
        text=True,
        env={**os.environ, **cluster.env},
        timeout=120,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"ptflow {args} -> {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def status(cluster, work: Path) -> dict[str, dict]:
    out = json.loads(ptflow(cluster, work, "status", "--json").stdout)
    return {c["agent"]: c for c in out["cells"]}


def squeue_state(cluster, job_id: str) -> str:
    return cluster.run(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"], check=True).stdout.strip()


def wait_for(what: str, check, timeout: float = 300, every: float = 1.0):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}; last: {last}")


@pytest.fixture(scope="module")
def work(slurm_cluster):
    WORK_ROOT.mkdir(parents=True, exist_ok=True)
    path = WORK_ROOT / f"cli-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    matrix = {
        "agents": default_agents(sft_steps=20) + [BAD],  # the cells' states are under test, not the model
        "matrix": {"models": ["ptflow/tiny-llama-h64"], "evals": ["add"], "agents": ["baseline", "sft", "bad"]},
    }
    (path / "matrix.yaml").write_text(yaml.safe_dump(matrix))
    site = yaml.safe_load(SITE.read_text())
    site.setdefault("agent_resources", {})["bad"] = {"runtime": 1}
    (path / "site.yaml").write_text(yaml.safe_dump(site))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def first_run(slurm_cluster, work):
    proc = subprocess.run(
        command(work, *smk_args(work), profile="profiles/slurm"),
        cwd=work,
        capture_output=True,
        text=True,
        env={**os.environ, **slurm_cluster.env},
    )
    assert proc.returncode != 0, "the bad cell must fail"
    return proc


def test_done_and_error_after_a_run(slurm_cluster, work, first_run):
    cells = status(slurm_cluster, work)
    assert cells["baseline"]["state"] == "Done" and cells["sft"]["state"] == "Done", cells
    bad = cells["bad"]
    assert bad["state"] == "Error", bad
    assert bad["slurm_state"] == "TIMEOUT" and bad["exit_code"], bad
    assert "TIMEOUT" in bad["detail"] and f"exit {bad['exit_code']}" in bad["detail"]
    assert bad["retried"] is False and "not retried" in bad["detail"]
    assert bad["log"].endswith(f"results/logs/train/{MODEL}/add/bad.log") and Path(bad["log"]).is_file()
    assert bad["slurm_log"].endswith(f".snakemake/slurm_logs/rule_train/{MODEL}_add_bad/{bad['job_id']}.log")
    assert (work / "results" / "status.png").read_bytes()[:4] == b"\x89PNG"
    # the table names the same
    text = ptflow(slurm_cluster, work, "status").stdout
    assert f"{MODEL}/add/bad" in text and "Error" in text and "TIMEOUT" in text

    logs = ptflow(slurm_cluster, work, "logs", f"{MODEL}/add/bad", "-n", "5").stdout
    assert f"==> {bad['log']} <==" in logs and f"==> {bad['slurm_log']} <==" in logs
    slurm_tail = Path(bad["slurm_log"]).read_text().splitlines()[-1]
    assert slurm_tail in logs


def test_pending_running_cancel_one_cell_leaves_others(slurm_cluster, work, first_run):
    for agent in ("baseline", "sft"):
        (work / "results" / "cells" / MODEL / "add" / agent / "eval.json").unlink()
    # A blocker that takes every GPU of both nodes of the gpu partition: our GPU jobs queue behind it.
    blocker = slurm_cluster.run(
        [
            "sbatch",
            "--parsable",
            "-p",
            "gpu",
            "-N2",
            "--ntasks-per-node=1",
            "-c1",
            "--mem=100M",
            "--gres=gpu:h100:4",
            "-t",
            "3",
            "-J",
            "ptflow-test-blocker",
            "-o",
            "/dev/null",
            "--wrap",
            "sleep 170",
        ],
        check=True,
    ).stdout.strip()
    driver_log = open(work / "run2.log", "w")  # a file, not a pipe: an unread pipe fills up and blocks snakemake
    # Only the two cells under test: `bad` would train again for its whole minute, a core's worth of CPU that the
    # rest of the suite needs.
    targets = [f"results/cells/{MODEL}/add/{agent}/eval.json" for agent in ("baseline", "sft")]
    proc = subprocess.Popen(
        command(work, *smk_args(work), *targets, profile="profiles/slurm"),
        cwd=work,
        stdout=driver_log,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **slurm_cluster.env},
    )
    try:
        # Pending: status says so, and Slurm agrees for the same job
        def pending():
            c = status(slurm_cluster, work)["baseline"]
            return c if c["state"] == "Pending" and c["job_id"] else None

        cell = wait_for("baseline Pending", pending, timeout=180)
        assert squeue_state(slurm_cluster, cell["job_id"]) in ("PENDING", "RUNNING")
        slurm_cluster.run(["scancel", blocker], check=True)

        # Running, with node and elapsed
        def both_running():
            cells = status(slurm_cluster, work)
            ok = all(cells[a]["state"] == "Running" for a in ("baseline", "sft"))
            return cells if ok else None

        cells = wait_for("baseline and sft Running", both_running, timeout=300)
        for a in ("baseline", "sft"):
            assert cells[a]["node"] in slurm_cluster.hostnames and cells[a]["elapsed"], cells[a]
        sft_job, base_job = cells["sft"]["job_id"], cells["baseline"]["job_id"]

        out = ptflow(slurm_cluster, work, "cancel", "--cell", "ptflow/tiny-llama-h64/add/sft").stdout
        assert f"cancelled 1 job(s): {sft_job}" in out, out
        assert slurm_cluster.wait_job(sft_job, timeout=60) == "CANCELLED"
        assert squeue_state(slurm_cluster, base_job) in ("RUNNING", "COMPLETING", "COMPLETED"), "other cell stopped"
        cells = status(slurm_cluster, work)
        assert cells["sft"]["state"] == "Canceled" and cells["sft"]["job_id"] == sft_job, cells["sft"]

        # A second cancel of the same cell: its job has ended, which counts as done.
        again = ptflow(slurm_cluster, work, "cancel", "--cell", f"{MODEL}/add/sft").stdout
        assert "cancelled 0 job(s)" in again and sft_job in again

        # The other cell finishes on its own.
        cells = wait_for(
            "baseline Done", lambda: (c := status(slurm_cluster, work))["baseline"]["state"] == "Done" and c
        )
        assert cells["sft"]["state"] == "Canceled"
    finally:
        slurm_cluster.run(["scancel", blocker])
        if proc.poll() is None:
            ptflow(slurm_cluster, work, "cancel", "--all", check=False)  # whatever of ours is still queued
            proc.terminate()
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        driver_log.close()
