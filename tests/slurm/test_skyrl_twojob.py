"""SkyRL two-job training on the shared test cluster, at the level of its login-node supervisor
(ptflow.cluster.supervise + ptflow.launch.skyrl.ServerCompanion): a REAL runtime server job
(ptflow.launch.skyrl_server) on partition ``cpu`` submitted first, a trainer job on ``gpu`` submitted with
``--dependency=after:<server>`` that runs the trainer STAND-IN (ptflow.standins.skyrl_trainer — SkyRL itself needs
GPUs). The whole cell through the workflow: tests/slurm/test_resume_on_slurm.py. Run with PTFLOW_SLURM_EXISTING=1."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from ptflow.cluster import infra_retry, slurm, supervise
from ptflow.config.request import Request
from ptflow.config.sites import RuntimeSpec
from ptflow.launch import skyrl
from tests.e2e.smk import REPO, job_env

BASE = Path("/var/lib/ptflow-tests/skyrl-pyxis")
JOB = REPO / "tests" / "slurm" / "skyrl_trainer_job.py"
# The runtime server's side of a site: its request on partition `cpu`, this machine's Python, the site's env.
SITE = skyrl.ServerSite(
    Request({"partition": "cpu", "threads": 1, "mem_mb": 500, "runtime": 10}, scheduler="slurm", account="ptflow"),
    RuntimeSpec("localtest-skyrl"),
    {"FI_PROVIDER": "tcp"},
)
TRAIN = Request({"partition": "gpu", "gpus": 1, "threads": 1, "mem_mb": 1000, "runtime": 10}, scheduler="slurm",
                account="ptflow")  # fmt: skip


def script(d: Path, calls: int, interval: float) -> Path:
    """What the supervisor resubmits: a script running the trainer side (the rule's script in the workflow)."""
    path = d / "train_job.py"
    path.write_text(
        f"import runpy, sys; sys.argv = [{str(JOB)!r}, {str(d / 'out')!r}, {str(calls)!r}, {str(interval)!r}]\n"
        f"runpy.run_path({str(JOB)!r}, run_name='__main__')\n"
    )
    return path


def run_supervised(d: Path, calls: int, interval: float, site=SITE):
    d.mkdir(parents=True, exist_ok=True)
    companion = skyrl.ServerCompanion(site, d / ".skyrl_jobs", {"ready_timeout": 300}, job_name=f"ptflow-t-{d.name}",
                                      comment="rule_train_wildcards_m_e_skyrl#skyrl-server")  # fmt: skip
    job = supervise.SupervisedJob(str(script(d, calls, interval)), TRAIN, "train", ["m", "e", "skyrl"], d,
                                  max_retries=0, workdir=d)  # fmt: skip
    return supervise.supervise(job, companion=companion, log=lambda m: None)


def coord_of(d: Path) -> skyrl.Coord:
    (root,) = (d / ".skyrl_jobs").iterdir()
    return skyrl.Coord(root)


def test_server_dying_mid_run_fails_training_and_is_cleaned_up(slurm_cluster, monkeypatch):
    monkeypatch.setattr(supervise, "POLL_SECONDS", 1)
    d = BASE / f"die-{uuid.uuid4().hex[:8]}"
    killed = []

    def kill_server_when_training():
        for _ in range(900):
            logs = list((d / ".skyrl_jobs").glob("*/training_*.out")) if (d / ".skyrl_jobs").is_dir() else []
            if logs and "call 2/" in logs[0].read_text():
                job = coord_of(d).server_job()
                killed.append(job)
                slurm.cancel([job])
                return
            time.sleep(0.3)

    t = threading.Thread(target=kill_server_when_training, daemon=True)
    t.start()
    with pytest.raises(infra_retry.TrainingFailed):
        run_supervised(d, 200, 0.5)
    t.join()
    assert killed, "never saw the trainer call the server"
    coord = coord_of(d)
    (job_log,) = (d / "slurm").glob("train-*.out")
    assert f"runtime server job {killed[0]} ended" in job_log.read_text()
    assert coord.complete_flag.exists() and not (d / "out" / "skyrl_standin.json").exists()
    status = json.loads((d / "status.json").read_text())
    assert status["status"] == "failed" and status["failure"] == "training"


def test_server_that_never_gets_ready_fails_clearly(slurm_cluster, monkeypatch):
    """A server that cannot start (its venv does not exist): the trainer job, started after it, says so at once."""
    monkeypatch.setattr(supervise, "POLL_SECONDS", 1)
    d = BASE / f"bad-{uuid.uuid4().hex[:8]}"
    site = dataclasses.replace(SITE, runtime=RuntimeSpec("localtest-skyrl", venv="/nonexistent-venv"))
    with pytest.raises(infra_retry.TrainingFailed):
        run_supervised(d, 2, 0.1, site=site)
    coord = coord_of(d)
    (job_log,) = (d / "slurm").glob("train-*.out")
    assert re.search(r"ended \((FAILED|COMPLETED)\) before writing .*runtime_ready.flag", job_log.read_text())
    assert "nonexistent-venv" in coord.server_log(coord.server_job()).with_suffix(".err").read_text()


def test_sigterm_to_the_supervisor_cancels_both_jobs(slurm_cluster):
    """A killed supervisor (scancel of the driver, Ctrl-C) leaves no orphan: trainer and server jobs end."""
    d = BASE / f"sig-{uuid.uuid4().hex[:8]}"
    d.mkdir(parents=True)
    code = (
        "from pathlib import Path; from tests.slurm.test_skyrl_twojob import run_supervised;"
        f"run_supervised(Path({str(d)!r}), 500, 1)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=job_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        for _ in range(900):
            logs = list((d / ".skyrl_jobs").glob("*/training_*.out")) if (d / ".skyrl_jobs").is_dir() else []
            if logs and "call 2/" in logs[0].read_text():
                break
            time.sleep(0.3)
        else:
            raise AssertionError("the trainer never ran")
        coord = coord_of(d)
        trainer = json.loads(next(coord.root.glob("trainer_*.json")).read_text())["trainer_job"]
        server = coord.server_job()
        proc.send_signal(15)
        out = proc.communicate(timeout=120)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0, out
    for job in (trainer, server):
        assert slurm.wait_job(job, poll=1, timeout=60).base_state in ("CANCELLED", "COMPLETED"), job
    assert coord.complete_flag.exists()


def test_runtime_only_starts_a_server_and_says_how_to_use_it(slurm_cluster, tmp_path):
    """`python -m ptflow.launch.skyrl --runtime-only`: the server alone, its URL and key file printed."""
    import yaml

    site = yaml.safe_load((REPO / "tests" / "slurm" / "localtest.yaml").read_text())
    site["resources"]["runtime_server"] = {"partition": "cpu", "threads": 1, "mem_mb": 500, "runtime": 5}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(site))
    base = BASE / f"only-{uuid.uuid4().hex[:8]}"
    out = subprocess.run([sys.executable, "-m", "ptflow.launch.skyrl", "--site", str(tmp_path / "s.yaml"),
                          "--coord-base", str(base), "--runtime-only"], cwd=REPO, env=job_env(), capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr
    job = re.search(r"runtime server job (\d+) serves (http://\S+)", out.stdout)
    assert job and "export SKYRL_API_KEY=$(cat " in out.stdout
    coord = skyrl.Coord(next(base.iterdir()))
    assert coord.url_file.read_text().strip() == job.group(2)
    coord.complete_flag.write_text("done")  # how the printed instructions stop it
    assert slurm.wait_job(job.group(1), poll=1, timeout=60).base_state == "COMPLETED"
