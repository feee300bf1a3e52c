"""SkyRL two-job training on the shared test cluster: a REAL runtime server job (ptflow.launch.skyrl_server) on
partition ``cpu``, and the trainer STAND-IN (ptflow.standins.skyrl_trainer — SkyRL itself needs GPUs) calling it from
this process, which runs the launcher (ptflow.launch.skyrl) as the train rule does. Run with PTFLOW_SLURM_EXISTING=1."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from ptflow.cluster import slurm
from ptflow.config.sites import Request, RuntimeSpec
from ptflow.launch import skyrl
from tests.e2e.smk import REPO, job_env

BASE = Path("/var/lib/ptflow-tests/skyrl-pyxis")
# The runtime server's side of a site: its request on partition `cpu`, this machine's Python, the site's env.
SITE = skyrl.ServerSite(
    Request({"partition": "cpu", "threads": 1, "mem_mb": 500, "runtime": 10}, scheduler="slurm", account="ptflow"),
    RuntimeSpec("localtest-skyrl"),
    {"FI_PROVIDER": "tcp"},
)


def _standin(out: Path, calls: int, interval: float) -> list[str]:
    return [sys.executable, "-m", "ptflow.standins.skyrl_trainer", "--out", str(out), "--calls", str(calls),
            "--interval", str(interval)]  # fmt: skip


def _all_text(coord: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in coord.iterdir() if p.is_file() and p.name != "api_key")


def test_server_job_on_cpu_serves_standin_and_stops(slurm_cluster):
    """Real server job on `cpu`, stand-in trainer calls it; key never in argv/script/logs; server ends by itself."""
    coord = BASE / f"ok-{uuid.uuid4().hex[:8]}"
    out = coord / "out"
    seen_ps = []
    stop = threading.Event()

    def watch_ps():  # every process' argv while the run goes on (ps), to prove the key is not in any
        while not stop.is_set():
            seen_ps.append(subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout)
            time.sleep(0.5)

    t = threading.Thread(target=watch_ps, daemon=True)
    t.start()
    try:
        res = skyrl.run_two_job(SITE, coord, _standin(out, 4, 1.0), params={"ready_timeout": 300})
    finally:
        stop.set()
        t.join()
    key = (coord / "api_key").read_text().strip()
    assert oct((coord / "api_key").stat().st_mode & 0o777) == "0o600"
    assert res["returncode"] == 0 and res["runtime_url"].startswith("http://")
    assert (out / "skyrl_standin.json").is_file()
    rec = slurm.job_state(res["server_job"])
    assert rec.partition == "cpu"
    assert (coord / "runtime_ready.flag").exists() and (coord / "training_complete.flag").exists()
    assert "call 4/4 ok" in (coord / "trainer.log").read_text()
    # the server stops on training_complete.flag (or scancel) — either way it ends
    slurm.wait_job(res["server_job"], poll=1, timeout=30)
    assert "POST /execute" in (coord / "server.log").read_text()
    assert key not in _all_text(coord)  # script, both logs, config copies
    assert seen_ps and not any(key in s for s in seen_ps)


def test_server_dying_mid_run_fails_training_and_is_cleaned_up(slurm_cluster):
    coord = BASE / f"die-{uuid.uuid4().hex[:8]}"
    out = coord / "out"
    killer_log = []

    def kill_server_when_ready():
        for _ in range(600):
            if (coord / "runtime_ready.flag").exists() and (coord / "server.json").exists():
                time.sleep(2)
                jobs = [j for j in slurm.run_jobs(["ptflow-skyrl-die"]).values() if j.base_state == "RUNNING"]
                killer_log.append([j.id for j in jobs])
                slurm.cancel([j.id for j in jobs])
                return
            time.sleep(0.2)

    t = threading.Thread(target=kill_server_when_ready, daemon=True)
    t.start()
    with pytest.raises(skyrl.SkyRLError, match=r"runtime server job \d+ ended|exited 3"):
        skyrl.run_two_job(SITE, coord, _standin(out, 200, 0.5), params={"ready_timeout": 300},
                          job_name="ptflow-skyrl-die")  # fmt: skip
    t.join()
    assert killer_log and killer_log[0]
    assert not (out / "skyrl_standin.json").exists()


def test_server_that_never_gets_ready_fails_clearly(slurm_cluster):
    """A server that crashes at start (its key file made unreadable for others check: mode 644) -> clear error."""
    coord = BASE / f"bad-{uuid.uuid4().hex[:8]}"
    site = dataclasses.replace(SITE, runtime=RuntimeSpec("localtest-skyrl", venv="/nonexistent-venv"))
    with pytest.raises(skyrl.SkyRLError, match=r"ended \((FAILED|COMPLETED)\) before writing .*runtime_ready.flag"):
        skyrl.run_two_job(site, coord, ["true"], params={"ready_timeout": 300})
    assert "nonexistent-venv" in (coord / "server.log").read_text()


def test_runtime_url_reuses_running_server(slurm_cluster, tmp_path):
    """runtime_url: no job submitted; the stand-in uses the given server (a local one of ours)."""
    coord = BASE / f"reuse-{uuid.uuid4().hex[:8]}"
    srv = skyrl.make_coord(coord / "srv")
    proc = subprocess.Popen([sys.executable, "-m", "ptflow.launch.skyrl_server", "--coord", str(srv.root),
                             "--host", "127.0.0.1", "--advertise", "127.0.0.1", "--poll", "0.2"])  # fmt: skip
    try:
        for _ in range(100):
            if srv.ready_flag.exists():
                break
            time.sleep(0.1)
        url = srv.url_file.read_text().strip()
        os.environ[skyrl.KEY_ENV] = srv.key()
        res = skyrl.run_two_job(SITE, coord / "run", _standin(coord / "out", 2, 0.1), params={"runtime_url": url})
    finally:
        os.environ.pop(skyrl.KEY_ENV, None)
        proc.terminate()
        proc.wait(timeout=10)
    assert res["server_job"] is None and res["runtime_url"] == url
    assert not (coord / "run" / "server.sbatch").exists()


def test_sigterm_to_launcher_cancels_server_job(slurm_cluster):
    """scancel/Ctrl-C of the train job: the launcher's handlers run the cleanup, the server job ends."""
    coord = BASE / f"sig-{uuid.uuid4().hex[:8]}"
    name = f"ptflow-skyrl-sig-{uuid.uuid4().hex[:6]}"
    code = (
        "import sys; from ptflow.launch import skyrl; from tests.slurm.test_skyrl_twojob import SITE, _standin;"
        f"skyrl.run_two_job(SITE, {str(coord)!r}, _standin(__import__('pathlib').Path({str(coord)!r}) / 'out', 500, 1),"
        f" params={{'ready_timeout': 300}}, job_name={name!r})"
    )
    env = job_env()
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        for _ in range(600):
            if (coord / "trainer.log").exists() and "call 2/" in (coord / "trainer.log").read_text():
                break
            time.sleep(0.2)
        jobs = slurm.run_jobs([name])
        assert len(jobs) == 1
        (job_id,) = jobs
        proc.send_signal(15)
        out = proc.communicate(timeout=120)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0, out
    assert (coord / "training_complete.flag").exists()
    slurm.wait_job(job_id, poll=1, timeout=30)


def test_train_cell_dispatches_skyrl_kind(slurm_cluster):
    """The train stage's entry (ptflow.stages.train.cell.train_cell, kind skyrl) runs the two-job flow and writes a
    manifest; the stand-in's "checkpoint" is a copy of the start model (it learns nothing)."""
    import json

    from ptflow.stages.train.cell import train_cell

    d = BASE / f"cell-{uuid.uuid4().hex[:8]}"
    start = d / "start"
    start.mkdir(parents=True)
    (start / "model.safetensors").write_bytes(b"not-a-real-model")
    manifest = train_cell(
        cell={"model": "m", "eval": "e", "agent": "skyrl-x"},
        kind="skyrl",
        params={"steps": 2, "ready_timeout": 300},
        start_model=str(start),
        train_parquet=None,
        checkpoint_dir=str(d / "ckpt"),
        config_hash="h",
        manifest_path=str(d / "checkpoint.json"),
        threads=0,
        agent={"coord_dir": str(d / "skyrl"), "server": SITE.to_dict()},
    )
    assert manifest["kind"] == "skyrl" and manifest["step"] == 2
    assert json.loads((d / "ckpt" / "skyrl_standin.json").read_text())["standin"] is True
    assert (d / "skyrl" / "training_complete.flag").exists()
