"""The Ray launcher (ptflow.launch.ray) on the real two-node test cluster, with real Ray 2.60 on CPU.

Both Slurm nodes are this one machine (NodeAddr 127.0.0.1 and 127.0.0.2), so "no Ray process left on either node"
is checked over this machine's processes: every process the launcher starts carries PTFLOW_RAY_TAG=ptflow-ray-<job>-…
in its environment and runs under the job's temp dirs /tmp/ptr<job>r<restart>n<i>. No GPU here: Ray runs on CPU and
readiness counts CPUs (the GPU path differs only in --num-gpus and the resource counted).
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import time
import uuid
from pathlib import Path

import pytest

from ptflow.cluster import slurm
from tests.e2e.smk import REPO, snakemake

SITE = REPO / "tests" / "slurm" / "localtest.yaml"
PROBE = REPO / "tests" / "slurm" / "ray_probe.py"
RESUMABLE = REPO / "tests" / "slurm" / "resumable_probe.py"
WORK_ROOT = Path("/var/lib/ptflow-tests")


def job_processes(job_id: str) -> list[str]:
    """Processes of this machine (= both test nodes) that belong to the job's Ray cluster."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            env = (proc / "environ").read_bytes()
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if f"PTFLOW_RAY_TAG=ptflow-ray-{job_id}-".encode() in env or f"/tmp/ptr{job_id}r" in cmd:
            found.append(f"{proc.name}: {cmd[:160]}")
    return found


def wait_gone(job_id: str, seconds: float = 60) -> list[str]:
    deadline = time.monotonic() + seconds
    while (left := job_processes(job_id)) and time.monotonic() < deadline:
        time.sleep(2)
    return left


@pytest.fixture
def work():
    WORK_ROOT.mkdir(parents=True, exist_ok=True)
    path = WORK_ROOT / f"ray-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    yield path
    shutil.rmtree(path, ignore_errors=True)


def sbatch_ray(cluster, work: Path, *launcher_args: str, hold: float = 0, driver: str | None = None) -> str:
    """The launcher as a plain `sbatch -N2` job (how a user runs it without Snakemake)."""
    py = sys.executable
    driver = driver or f"{PROBE} {work}/probe.json {hold}"
    wrap = (
        f"{py} -m ptflow.launch.ray --log-dir {work} --cpus-per-node 2 --ready-timeout 600 {' '.join(launcher_args)} "
        f"-- {py} {driver}"
    )
    out = cluster.run(
        [
            "sbatch",
            "--parsable",
            "-N2",
            "-p",
            "debug",
            "-A",
            "ptflow",
            "-t",
            "15",
            "--mem=2000",
            "-o",
            f"{work}/job.out",
            f"--export=ALL,PYTHONPATH={REPO / 'src'}",
            "--wrap",
            wrap,
        ],
        check=True,
    )
    return out.stdout.strip().split(";")[0]


def job_state(cluster, job_id: str) -> tuple[str, str]:
    out = cluster.run(["sacct", "-j", job_id, "-X", "-n", "-P", "-o", "State,ExitCode"], check=True).stdout.strip()
    state, code = out.splitlines()[0].split("|") if out else ("", "")
    return state, code


def wait_job(cluster, job_id: str, seconds: float = 900) -> tuple[str, str]:
    """(state, exit code) once the job has ended."""
    rec = slurm.wait_job(job_id, poll=5, timeout=seconds)
    return rec.state, rec.exit_code


def test_train_like_rule_brings_up_ray_on_both_nodes_through_the_plugin(slurm_cluster, work):
    out = snakemake(
        work,
        "--config",
        f"site={SITE}",
        env=slurm_cluster.env,
        profile="profiles/slurm",
        snakefile=REPO / "tests" / "slurm" / "ray.smk",
    )
    probe = json.loads((work / "ray" / "probe.json").read_text())
    # one task per node, on two distinct Ray nodes, inside the two Slurm nodes' steps
    assert len(probe["cluster_nodes"]) == 2, probe
    assert {t["node_id"] for t in probe["tasks"]} == set(probe["cluster_nodes"]), probe
    assert {t["slurm_node"] for t in probe["tasks"]} == set(slurm_cluster.hostnames), probe
    (job_dir,) = (work / "ray" / "logs").glob("*-logs")
    job_id = job_dir.name.split("-")[0]
    for name in ("launcher.sh", "ray_node.sh", "ray-ready.log", "ray-driver.log", "ENDED"):
        assert (job_dir / name).is_file(), name
    # NeMo-RL's log names
    assert {p.name for p in job_dir.glob("ray-*.log")} == {
        "ray-head.log",
        "ray-worker-1.log",
        "ray-ready.log",
        "ray-driver.log",
    }
    assert "All workers connected!" in (work / "ray" / "train.log").read_text(), out.stdout[-2000:]
    assert wait_gone(job_id) == []
    assert not list(Path("/tmp").glob(f"ptr{job_id}r*"))


def test_worker_that_cannot_start_fails_the_job_naming_the_node(slurm_cluster, work):
    # A real start failure: Ray refuses an object store below its minimum, on the worker only.
    job_id = sbatch_ray(slurm_cluster, work, "--worker-retries", "2", "--worker-arg=--object-store-memory=1")
    state, code = wait_job(slurm_cluster, job_id)
    text = (work / "job.out").read_text()
    assert state == "FAILED" and code != "0:0", (state, code, text[-3000:])
    head = re.search(r"head (\S+) \(", text).group(1)
    (worker,) = set(slurm_cluster.hostnames) - {head}
    assert f"the Ray step on node {worker} ended" in text and "ray-worker-1.log" in text, text[-3000:]
    worker_log = (work / f"{job_id}-logs" / "ray-worker-1.log").read_text()
    assert "giving up" in worker_log and "attempt 2/2" in worker_log
    assert not (work / "probe.json").exists()
    assert wait_gone(job_id) == []


def test_scancel_mid_run_leaves_no_ray_process_on_either_node(slurm_cluster, work):
    job_id = sbatch_ray(slurm_cluster, work, hold=600)
    deadline = time.monotonic() + 600
    driver_log = work / f"{job_id}-logs" / "ray-driver.log"
    while not (driver_log.is_file() and "Connected to Ray cluster" in driver_log.read_text()):
        assert time.monotonic() < deadline, "the driver never connected"
        assert job_state(slurm_cluster, job_id)[0] in ("PENDING", "RUNNING", ""), (work / "job.out").read_text()
        time.sleep(3)
    time.sleep(5)  # the probe's tasks are running on both nodes now
    running = job_processes(job_id)
    assert len(running) >= 4, running  # raylets, gcs, workers ... on both nodes
    slurm_cluster.run(["scancel", job_id], check=True)
    state, _ = wait_job(slurm_cluster, job_id)
    assert state == "CANCELLED" or state.startswith("CANCELLED"), state
    assert wait_gone(job_id) == []
    assert not (work / "probe.json").exists()
    assert not list(Path("/tmp").glob(f"ptr{job_id}r*"))  # node-local temp dirs removed on both nodes


def wait_for_line(path: Path, text: str, cluster, job_id: str, seconds: float = 600) -> str:
    deadline = time.monotonic() + seconds
    while not (path.is_file() and text in (content := path.read_text())):
        assert time.monotonic() < deadline, f"{text!r} never appeared in {path}"
        assert job_state(cluster, job_id)[0] in ("PENDING", "RUNNING", "REQUEUED", ""), f"job ended before {text!r}"
        time.sleep(2)
    return content


def test_time_limit_warning_saves_and_requeued_job_resumes(slurm_cluster, work):
    """Slurm's warning (what --signal=USR1@N sends: USR1 to every job step, not the batch shell) reaches the
    driver, whose Ray nodes ignore it and keep working; the driver saves; the requeued job starts a second Ray
    cluster (restart 1) whose driver resumes from the saved step and finishes with the full result."""
    total = 45
    job_id = sbatch_ray(slurm_cluster, work, driver=f"{RESUMABLE} {work}/ckpt {total} {work}/result.json")
    first = work / f"{job_id}-logs" / "ray-driver.log"
    wait_for_line(first, "step 3\n", slurm_cluster, job_id)
    # scancel --signal without --batch/--full signals the job steps only: Slurm's own delivery of the warning.
    slurm_cluster.run(["scancel", "--signal=USR1", job_id], check=True)
    text = wait_for_line(first, "time-limit warning: saved step", slurm_cluster, job_id)
    saved = int(re.search(r"saved step (\d+)", text).group(1))
    # the Ray cluster survived the warning: later steps still run on it
    wait_for_line(first, f"step {saved + 2}\n", slurm_cluster, job_id)
    assert (work / "ckpt" / f"step_{saved}" / "state.json").is_file()
    slurm_cluster.run(["scontrol", "requeue", job_id], check=True)
    # slurmctld holds a requeued batch job back for 120 s (its begin time); a user in a hurry releases it like this:
    for _ in range(60):  # once the first run has ended and the job is PENDING again
        state = slurm_cluster.run(["squeue", "-h", "-j", job_id, "-o", "%T"]).stdout.strip()
        if state == "PENDING":
            slurm_cluster.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], check=True)
            break
        time.sleep(1)
    state, code = wait_job(slurm_cluster, job_id)
    assert state == "COMPLETED", (state, code, (work / "job.out").read_text()[-3000:])
    second = (work / f"{job_id}-logs" / "restart-1" / "ray-driver.log").read_text()
    assert f"resumed from step {saved}" in second, second[-2000:]
    assert f"step {saved + 1}\n" in second and "step 1\n" not in second
    result = json.loads((work / "result.json").read_text())
    assert result == {"state": result["expected"], "expected": total * (total + 1) // 2, "resumed_from": saved}
    assert (work / f"{job_id}-logs" / "ENDED").is_file() and (work / f"{job_id}-logs" / "restart-1" / "ENDED").is_file()
    assert wait_gone(job_id) == []
