"""ptflow.launch.skyrl (coordination dir, server sbatch argv, rendered job script, the trainer side) and the REAL
runtime server / trainer stand-in processes, run locally. The two-job flow on Slurm: tests/slurm/test_skyrl_twojob.py
and, through the workflow, tests/slurm/test_resume_on_slurm.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from ptflow.config.matrix import build_config
from ptflow.config.request import Request
from ptflow.config.sites import RuntimeSpec, load_site
from ptflow.launch import skyrl
from tests.conftest import REPO

SITES = REPO / "config" / "sites"
SHELLCHECK = REPO / ".venv" / "bin" / "shellcheck"


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.setenv("PTFLOW_ACCOUNT", "acct")
    monkeypatch.setenv("USER", "alice")


def test_coord_dir_has_private_fresh_key(tmp_path):
    c1 = skyrl.make_coord(tmp_path / "c")
    (tmp_path / "c" / "runtime_ready.flag").write_text("stale")
    k1 = c1.key()
    c2 = skyrl.make_coord(tmp_path / "c")
    assert oct(c2.key_file.stat().st_mode & 0o777) == "0o600"
    assert oct(c2.root.stat().st_mode & 0o777) == "0o700"
    assert c2.key() != k1 and len(c2.key()) >= 32
    assert not c2.ready_flag.exists()


def test_fasrc_server_sbatch_options_come_from_runtime_server_request(tmp_path):
    site = load_site("fasrc", SITES)
    opts = skyrl.server_sbatch_options(skyrl.ServerSite.from_site(site), tmp_path, "20260101_120000", job_name="srv")
    assert "--partition=test" in opts and "--account=acct" in opts
    assert "--cpus-per-task=32" in opts and "--mem=65536M" in opts and "--time=720" in opts
    # the seed's coordination dir: <base>/<date>_<time>_<server job id>/runtime_<id>.out|.err
    assert f"--output={tmp_path}/20260101_120000_%j/runtime_%j.out" in opts
    assert f"--error={tmp_path}/20260101_120000_%j/runtime_%j.err" in opts
    assert "--no-requeue" in opts and "--hold" in opts  # released once its coordination dir exists


def test_site_without_runtime_server_fails_clearly():
    site = load_site("local", SITES)
    with pytest.raises(skyrl.SkyRLError, match="no resources.runtime_server request; add one"):
        skyrl.ServerSite.from_site(site)


@pytest.mark.parametrize("podman", [False, True])
def test_server_script_shellcheck_clean_site_env_no_secret(tmp_path, podman):
    site = load_site("fasrc", SITES)
    script = skyrl.render_server_script(
        skyrl.ServerSite.from_site(site), tmp_path, "20260101_120000", {"podman_socket": podman,
                                                                         "sandbox_image": "sbx:1"}, tmp_path / "s.sh"
    )  # fmt: skip
    text = script.read_text()
    assert "export FI_PROVIDER=tcp" in text and "set -euo pipefail" in text
    assert f'COORD={tmp_path}/20260101_120000_"$SLURM_JOB_ID"' in text
    assert "/n/holylabs/alice/ptflow/.venv/bin/python -m ptflow.launch.skyrl_server" in text
    assert '--coord "$COORD"' in text
    assert ("podman system service" in text) is podman
    proc = subprocess.run([str(SHELLCHECK), str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


def test_secret_looking_site_env_refused(tmp_path):
    site = skyrl.ServerSite(Request({}), RuntimeSpec("s"), {"MY_TOKEN": "x"})
    with pytest.raises(skyrl.SkyRLError, match="MY_TOKEN.*looks like a secret"):
        skyrl.render_server_script(site, tmp_path, "s", {}, tmp_path / "s.sh")


def _start_server(coord: skyrl.Coord) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "ptflow.launch.skyrl_server", "--coord", str(coord.root),
                             "--host", "127.0.0.1", "--advertise", "127.0.0.1", "--poll", "0.1"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    for _ in range(100):
        if coord.ready_flag.exists():
            return proc
        time.sleep(0.1)
    proc.kill()
    raise AssertionError(proc.communicate()[0])


def _post(url, body, key=None):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    if key:
        req.add_header("X-API-Key", key)
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def test_runtime_server_health_key_execute_timeout_and_stop(tmp_path):
    coord = skyrl.make_coord(tmp_path / "c")
    proc = _start_server(coord)
    try:
        url = coord.url_file.read_text().strip()
        with urllib.request.urlopen(url + "/health", timeout=5) as r:
            assert json.loads(r.read())["status"] == "ok"
        with pytest.raises(urllib.error.HTTPError) as e:
            _post(url + "/execute", {"command": ["true"]}, key="wrong")
        assert e.value.code == 401
        ans = _post(url + "/execute", {"command": [sys.executable, "-c", "print(6*7)"]}, coord.key())
        assert ans["returncode"] == 0 and ans["stdout"].strip() == "42"
        ans = _post(url + "/execute", {"command": ["sleep", "5"], "timeout": 0.5}, coord.key())
        assert ans["timed_out"] is True
        coord.complete_flag.write_text("done")
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    out = proc.stdout.read()
    assert "training_complete.flag found" in out and coord.key() not in out


def test_standin_fails_clearly_when_server_is_gone(tmp_path):
    coord = skyrl.make_coord(tmp_path / "c")
    proc = _start_server(coord)
    url = coord.url_file.read_text().strip()
    proc.kill()
    proc.wait()
    env = {**os.environ, "SKYRL_RUNTIME_URL": url, "SKYRL_API_KEY": coord.key()}
    res = subprocess.run([sys.executable, "-m", "ptflow.standins.skyrl_trainer", "--out", str(tmp_path / "o")],
                         env=env, capture_output=True, text=True)  # fmt: skip
    assert res.returncode == 3
    assert f"runtime server at {url}/health stopped answering" in res.stderr


def test_runtime_url_reuse_needs_key_in_env(tmp_path, monkeypatch):
    monkeypatch.delenv("SKYRL_API_KEY", raising=False)
    site = skyrl.ServerSite.from_site(load_site("fasrc", SITES))
    companion = skyrl.ServerCompanion(site, tmp_path, {"runtime_url": "http://h:1"}, job_name="x")
    with pytest.raises(skyrl.SkyRLError, match="export SKYRL_API_KEY"):
        companion.prepare(1)
    monkeypatch.setenv("SKYRL_API_KEY", "k")
    opts, env = companion.prepare(1)
    assert opts == []  # no server job, no dependency
    coord = skyrl.Coord(Path(env[skyrl.COORD_ENV]))
    assert coord.root.name.endswith("_external") and coord.url_file.read_text().strip() == "http://h:1"
    assert coord.ready_flag.exists() and not coord.key_file.exists()  # the key stays in the environment only


def test_trainer_side_waits_for_ready_trains_and_always_flags_completion(tmp_path):
    """The GPU job's side with a real local server: URL and key reach the stand-in through its environment; the
    waited seconds are recorded; training_complete.flag is written on success and on failure."""
    coord = skyrl.make_coord(tmp_path / "c")
    proc = _start_server(coord)
    try:
        argv = [sys.executable, "-m", "ptflow.standins.skyrl_trainer", "--out", str(tmp_path / "o"), "--calls", "2",
                "--interval", "0.1"]  # fmt: skip
        res = skyrl.run_trainer_side(coord.root, argv, log=lambda m: None)
        assert res["returncode"] == 0 and res["waited_for_runtime_s"] < 5
        (info,) = coord.root.glob("trainer_*.json")
        recorded = json.loads(info.read_text())["waited_for_runtime_s"]
        assert recorded == pytest.approx(res["waited_for_runtime_s"], abs=1e-3)
        assert coord.complete_flag.exists()
        assert proc.wait(timeout=10) == 0  # the server saw the flag and stopped
        coord.complete_flag.unlink()
        with pytest.raises(skyrl.SkyRLError, match="exited"):
            skyrl.run_trainer_side(coord.root, [sys.executable, "-c", "raise SystemExit(4)"], log=lambda m: None)
        assert coord.complete_flag.exists()
    finally:
        if proc.poll() is None:
            proc.kill()


def test_skyrl_overlay_validates(default_raw):
    raw = {**default_raw, **yaml.safe_load((REPO / "config" / "skyrl.yaml").read_text())}  # --configfile overlay
    cfg = build_config(raw)
    assert cfg.agents["skyrl-gsm8k"].kind == "skyrl"
    assert cfg.agents["skyrl-gsm8k"].params["ready_timeout"] == 600


def test_dry_run_prints_the_server_first_and_the_trainer_after_it(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert skyrl.main(["--site", "fasrc", "--sites-dir", str(SITES), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "--partition=test" in out and "--hold" in out and "runtime_server.sbatch" in out
    assert "--dependency=after:<server id>" in out
    assert not list(tmp_path.iterdir()), "a dry run writes nothing"
    assert skyrl.main(["--site", "fasrc", "--sites-dir", str(SITES), "--dry-run", "--runtime-url", "http://h:1"]) == 0
    assert "no server job" in capsys.readouterr().out
