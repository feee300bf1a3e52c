"""The login-node supervisor of train jobs (ptflow.cluster.supervise): the batch script it submits and which sites
use it. Its sbatch flags are the request's (tests/unit/test_sites.py)."""

from __future__ import annotations

import subprocess

from ptflow.cluster import supervise
from ptflow.config.sites import Supervision, load_site
from tests.conftest import REPO

SITES = REPO / "config" / "sites"


def test_batch_script_is_shellcheck_clean_and_stops_before_the_limit(tmp_path):
    plain = supervise.render_batch_script(tmp_path / "a.sbatch", "/w/.snakemake/scripts/tmp1.train.py", "/v/python")
    assert plain.read_text().splitlines()[-1] == "exec /v/python /w/.snakemake/scripts/tmp1.train.py"
    timed = supervise.render_batch_script(tmp_path / "b.sbatch", "/w/s.py", "/v/python", internal_timeout=13680)
    assert "timeout --signal=TERM --kill-after=60 13680 /v/python /w/s.py || rc=$?" in timed.read_text()
    assert supervise.internal_timeout_seconds(240, 0.95) == 13680  # 3.8 h of 4 h
    assert supervise.internal_timeout_seconds(240, None) is None
    for script in (plain, timed):
        out = subprocess.run([str(REPO / ".venv" / "bin" / "shellcheck"), str(script)], capture_output=True, text=True)
        assert out.returncode == 0, out.stdout


def test_batch_script_refuses_to_run_unsupervised(tmp_path):
    script = supervise.render_batch_script(tmp_path / "a.sbatch", "/nonexistent.py", "/bin/true")
    out = subprocess.run(["bash", str(script)], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert out.returncode != 0 and "submitted by the ptflow supervisor" in out.stderr


def test_only_slurm_sites_with_infra_retries_supervise_train():
    assert load_site("generic", SITES).supervises("train") is None
    assert load_site("local", SITES).supervises("train") is None


def test_pyxis_site_supervises_train(monkeypatch):
    monkeypatch.setenv("PTFLOW_ACCOUNT", "acct")
    site = load_site("pyxis", SITES)
    assert site.supervises("train") == Supervision(max_retries=10, internal_timeout_fraction=0.95)
    assert site.supervises("evaluate") is None
