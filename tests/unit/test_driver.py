"""One driver per working directory, and a restarted driver adopting the live jobs of earlier runs
(ptflow.cluster.ownership, ptflow.ops.driver). Slurm records as squeue prints them; the real thing (kill -9 of a
driver mid-training, --unlock, rerun): tests/slurm/test_resume_on_slurm.py."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from ptflow.cluster import ownership, slurm
from ptflow.ops import driver


def test_comments_follow_the_plugin_and_roles_split_off():
    assert ownership.job_comment("train", ["m--x", "add", "sft"]) == "rule_train_wildcards_m--x_add_sft"
    c = ownership.job_comment("train", ["m", "e", "a_b"], role="skyrl-server")
    assert ownership.split_comment(c) == ("rule_train_wildcards_m_e_a_b", "skyrl-server")
    assert ownership.split_comment("rule_aggregate") == ("rule_aggregate", None)
    job = SimpleNamespace(name="train", wildcards=["m", "e", "a_b"], output=[])
    assert driver.plugin_comment(job) == "rule_train_wildcards_m_e_a_b"  # the plugin's own wildcard string
    assert ownership.owned_job_name("/w/a") != ownership.owned_job_name("/w/b")


def test_a_second_live_driver_is_refused_naming_the_holder(tmp_path):
    code = (
        "import sys, time; from ptflow.cluster.ownership import DriverLock;"
        f"DriverLock({str(tmp_path)!r}).acquire('snakemake --profile p'); print('held', flush=True); time.sleep(30)"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ownership.DriverLocked) as exc:
            ownership.DriverLock(tmp_path).acquire("snakemake again")
        msg = str(exc.value)
        assert f"pid {holder.pid} on host {socket.gethostname()}" in msg and "snakemake --profile p" in msg
        assert "--unlock` does not stop it" in msg
    finally:
        holder.kill()
        holder.wait()
    # the holder is gone (kill -9 leaves its lock file behind): the directory is free again
    mine = ownership.DriverLock(tmp_path).acquire("snakemake third")
    assert mine.pid == os.getpid()
    ownership.DriverLock(tmp_path).acquire("the same process again (a re-exec)")  # no conflict with itself
    ownership.DriverLock(tmp_path).release()
    assert not (tmp_path / ".ptflow" / "driver.lock").exists()


def test_a_driver_on_another_host_counts_while_its_heartbeat_is_fresh(tmp_path):
    lock = ownership.DriverLock(tmp_path)
    lock.path.parent.mkdir(parents=True)
    other = {"pid": 1, "host": "login2", "started": "x", "command": "snakemake", "heartbeat": time.time()}
    lock.path.write_text(json.dumps(other))
    with pytest.raises(ownership.DriverLocked, match="on host login2"):
        lock.acquire("me")
    lock.path.write_text(json.dumps({**other, "heartbeat": time.time() - ownership.HEARTBEAT_STALE - 1}))
    assert lock.acquire("me").host == socket.gethostname()
    lock.release()


def _planned(tmp_path, agent: str):
    out = tmp_path / "results" / agent / "checkpoint.json"
    return SimpleNamespace(name="train", wildcards=["m", "e", agent], output=[str(out)], out=out,
                           __str__=lambda: agent)  # fmt: skip


def _query(*rounds):
    """squeue as the driver sees it on successive refreshes (the last one repeats)."""
    calls = []

    def query(names, since):
        calls.append(names)
        return {r.id: r for r in rounds[min(len(calls), len(rounds)) - 1]}

    query.calls = calls
    return query


def test_adopt_waits_for_earlier_jobs_and_takes_what_they_completed(tmp_path):
    a, b, c = (_planned(tmp_path, x) for x in ("a", "b", "c"))
    comment = driver.plugin_comment
    running = [
        slurm.JobRecord("1", "old-run", "RUNNING", comment=comment(a)),
        slurm.JobRecord("2", ownership.owned_job_name(tmp_path), "PENDING", comment=comment(b)),
        slurm.JobRecord("3", "old-run", "RUNNING", comment="rule_train_wildcards_m_e_other"),  # not planned now
    ]
    ended = [slurm.JobRecord("1", "old-run", "COMPLETED", comment=comment(a)),
             slurm.JobRecord("2", "x", "FAILED", comment=comment(b)), running[2]]  # fmt: skip
    a.out.parent.mkdir(parents=True)
    a.out.write_text("{}")  # job 1 completed its output; job 2 failed and wrote none
    done, lines = [], []
    res = driver.adopt(tmp_path, [a, b, c], mark_done=done.append, outputs_exist=lambda j: j.out.exists(),
                       query=_query(running, ended), poll=0, log=lines.append)  # fmt: skip
    assert res.adopted == ["1", "2"] and res.left == ["3"] and done == [a] and res.rerun
    assert any("waiting for them instead of submitting it again" in ln for ln in lines)
    assert any("left alone: 3" in ln for ln in lines)


def test_adopt_cancels_instead_when_configured(tmp_path, monkeypatch):
    a = _planned(tmp_path, "a")
    live = [slurm.JobRecord("7", "old", "RUNNING", comment=driver.plugin_comment(a))]
    cancelled = []
    monkeypatch.setattr(slurm, "cancel", cancelled.extend)
    res = driver.adopt(tmp_path, [a], mode="cancel", mark_done=pytest.fail, outputs_exist=lambda j: True,
                       query=_query(live, []), poll=0, log=lambda m: None)  # fmt: skip
    assert cancelled == ["7"] and res.cancelled == ["7"] and not res.rerun
    with pytest.raises(ValueError, match="earlier_jobs"):
        driver.adopt(tmp_path, [a], mode="ignore", mark_done=print, outputs_exist=bool, query=_query([]))


def test_supervised_train_jobs_are_matched_under_the_rules_name(tmp_path):
    job = SimpleNamespace(name="train_supervised", wildcards=["m", "e", "a"], output=[])
    assert "rule_train_wildcards_m_e_a" in driver.job_comments(job)


def test_a_supervisor_notices_its_driver_is_gone(tmp_path):
    """kill -9 of the driver: its supervisors stop supervising (no resubmission the next driver would not see) and
    leave the running job to be adopted."""
    from ptflow.cluster import supervise

    code = (
        "import time; from ptflow.cluster.ownership import DriverLock;"
        f"DriverLock({str(tmp_path)!r}).acquire('snakemake'); print('held', flush=True); time.sleep(60)"
    )
    drv = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert drv.stdout.readline().strip() == "held"
        check = supervise.driver_watch(tmp_path)
        check()  # alive: nothing happens
        drv.kill()
        drv.wait()
        with pytest.raises(supervise.DriverGone, match=f"pid {drv.pid}"):
            check()
    finally:
        if drv.poll() is None:
            drv.kill()
    assert supervise.driver_watch(tmp_path / "nowhere")() is None  # no driver lock: a supervisor run by hand


def test_remote_run_wait_passes_a_preflight_refusal_on(monkeypatch, capsys):
    """`ptflow remote run --wait` ends with the driver's PREFLIGHT_REFUSED (78), any other failure with 1."""
    from ptflow.ops import remote

    class Stub:
        def __init__(self, rc):
            self.rc = rc

        def preflight(self, profile):
            return []

        def missing_paths(self, paths):
            return []

        def host(self):
            return "login1"

        def start(self, args, profile):
            return {"host": "login1", "pid": 7, "log": "/w/.ptflow/driver.log"}

        def driver(self):
            return {"pid": 7, "alive": False, "rc": self.rc, "log": "/w/.ptflow/driver.log"}

    monkeypatch.setattr(remote, "remote_inputs", lambda r, args, here: ([], []))
    monkeypatch.setattr(remote, "_save", lambda r, extra: None)
    ns = SimpleNamespace(remote_command="run", snakemake_args=[], profile="profiles/slurm", no_stage=True, wait=True,
                         interval=0)  # fmt: skip
    for rc, expected in ((driver.PREFLIGHT_REFUSED, 78), (1, 1), (0, 0)):
        monkeypatch.setattr(remote, "remote_from_args", lambda ns, rc=rc: Stub(rc))
        assert remote.main(ns) == expected
    assert "the preflight refused the run" in capsys.readouterr().out


def test_a_stopped_runs_jobs_left_live_are_cancelled_by_its_run_uuid(tmp_path):
    """Snakemake's cancel misses the jobs whose status check is in flight (the executor interface empties its
    ``active_jobs`` while it asks Slurm): onerror scancels what squeue still lists under this run's UUID."""
    run_log = tmp_path / "2026-12-07T230000.000000.snakemake.log"
    run_log.write_text(
        "SLURM run ID: 0f1e2d3c-run\n"
        "Job 3 has been submitted with SLURM jobid 101 (log: /w/.snakemake/slurm_logs/rule_add/m_e/101.log).\n"
        "Terminating processes on user request, this might take some time.\n"
    )
    asked, cancelled, said = [], [], []

    def query(names, since, accounting=None):
        asked.append((names, accounting))
        return {
            "101": slurm.JobRecord("101", "0f1e2d3c-run", "RUNNING"),
            "102": slurm.JobRecord("102", "0f1e2d3c-run", "PENDING"),
            "100": slurm.JobRecord("100", "0f1e2d3c-run", "CANCELLED"),
        }

    left = driver.cancel_left(run_log, query=query, cancel=cancelled.append, log=said.append)
    assert left == ["101", "102"] and cancelled == [["101", "102"]]
    assert asked == [(["0f1e2d3c-run"], False)]  # squeue alone: a live job is in slurmctld's queue
    assert said == ["ptflow: the run stopped with 2 of its Slurm job(s) still live; scancel 101 102"]
    # nothing live, no log, a log without a run UUID (a local run): nothing cancelled, nothing said
    cancelled.clear(), said.clear()
    assert driver.cancel_left(run_log, query=lambda *a, **k: {}, cancel=cancelled.append, log=said.append) == []
    assert driver.cancel_left(None, query=query, cancel=cancelled.append, log=said.append) == []
    (tmp_path / "local.log").write_text("Building DAG of jobs...\n")
    assert driver.cancel_left(tmp_path / "local.log", query=query, cancel=cancelled.append, log=said.append) == []
    assert cancelled == [] and said == []


def test_a_failed_scancel_of_the_left_jobs_says_what_to_do(tmp_path):
    run_log = tmp_path / "run.snakemake.log"
    run_log.write_text("SLURM run ID: r1\n")

    def cancel(ids):
        raise slurm.SlurmUnavailable("scancel 7 failed and jobs 7 are still live: slurmctld down")

    said = []
    query = lambda names, since, accounting=None: {"7": slurm.JobRecord("7", "r1", "RUNNING")}  # noqa: E731
    assert driver.cancel_left(run_log, query=query, cancel=cancel, log=said.append) == []
    assert said[-1] == (
        "ptflow: could not cancel the stopped run's jobs left live (scancel 7 failed and jobs 7 are still live: "
        "slurmctld down): `ptflow cancel` them"
    )
