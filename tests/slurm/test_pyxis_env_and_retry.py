"""pyxis jobs on the shared two-node test cluster (PTFLOW_SLURM_EXISTING=1).

pyxis/enroot cannot run here: the per-node steps run with the local runtime (no --container-* flags) to prove the
rendezvous env on both nodes; the pyxis command line itself is checked as text (tests/unit/test_pyxis.py).
The retry classification runs on REAL failures we cause: a training error (exit 1 with a traceback), a log line
showing a bad GPU, and a real NODE_FAIL from killing the slurmd of the cluster's spare node (partition ``nodefail``
only, so no other test's job runs there while the suite runs in parallel).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from ptflow.cluster import infra_retry as pyxis
from ptflow.cluster import multinode, slurm
from ptflow.files import write_json_atomic
from tests.support import slurm_admin
from tests.support.local_slurm import SPARE_NODE
from tests.support.slurm_session import cluster_workdir

BASE = Path("/var/lib/ptflow-tests/skyrl-pyxis")
REPO = Path(__file__).resolve().parents[2]
STATE = cluster_workdir() / "state.json"


def _script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/bash\nset -euo pipefail\n" + body)
    return path


def _opts(d: Path, name: str, extra=()) -> list[str]:
    return [f"--job-name={name}", f"--output={d}/job-%j.log", "--partition=debug", "--account=ptflow",
            "--mem=200M", "--time=5", "--no-requeue", *extra]  # fmt: skip


def _log_of(d: Path):
    def log_of(job_id: str) -> str:
        p = d / f"job-{job_id}.log"
        return p.read_text(errors="replace") if p.exists() else ""

    return log_of


def test_rendezvous_env_on_two_nodes(slurm_cluster):
    d = BASE / f"env-{uuid.uuid4().hex[:8]}"
    d.mkdir(parents=True)
    probe = (
        "import json,os,socket;"
        "print('ENV '+json.dumps({k: os.environ.get(k) for k in "
        "['WORLD_SIZE','MASTER_ADDR','MASTER_PORT','NODE_RANK','NUM_GPU_PER_NODE','SLURMD_NODENAME']}))"
    )
    runner = (
        "import sys; from ptflow.cluster import multinode; from ptflow.config.sites import RuntimeSpec;"
        f"sys.exit(multinode.run_nodes(RuntimeSpec('localtest'), [{sys.executable!r}, '-c', {probe!r}], {str(d)!r},"
        " gpus_per_node=4))"
    )
    script = _script(d / "job.sh", f"export PYTHONPATH={REPO / 'src'}\n{sys.executable} -c {json.dumps(runner)}\n")
    job = slurm.submit(slurm.sbatch_argv(str(script), options=_opts(d, "ptflow-pyxis-env", ["--nodes=2"])))
    rec = slurm.wait_job(job, poll=1, timeout=240)
    log = (d / f"job-{job}.log").read_text()
    assert rec.base_state == "COMPLETED", log
    envs = [json.loads(line[4:]) for line in log.splitlines() if line.startswith("ENV ")]
    assert sorted(e["NODE_RANK"] for e in envs) == ["0", "1"]
    assert {e["SLURMD_NODENAME"] for e in envs} == set(slurm.hostnames(rec.nodes))
    for e in envs:
        assert e["WORLD_SIZE"] == "2" and e["NUM_GPU_PER_NODE"] == "4"
        assert e["MASTER_PORT"] == str(multinode.master_port(job))
    first = slurm.hostnames(rec.nodes)[0]
    assert {e["MASTER_ADDR"] for e in envs} == {slurm.node_addresses([first])[first].addr}
    assert next(e for e in envs if e["NODE_RANK"] == "0")["SLURMD_NODENAME"] == first
    status = json.loads((d / "nodes.json").read_text())
    assert status["status"] == "succeeded" and status["returncodes"] == [0, 0]
    assert [r["NODE_RANK"] for r in status["rendezvous"]] == ["0", "1"]


def test_training_error_is_not_retried(slurm_cluster):
    d = BASE / f"train-{uuid.uuid4().hex[:8]}"
    d.mkdir(parents=True)
    script = _script(d / "job.sh", 'echo "Traceback (most recent call last):"; echo "ValueError: bad lr"; exit 1\n')
    submit = pyxis.sbatch_submitter(script, _opts(d, "ptflow-pyxis-train"))
    with pytest.raises(pyxis.TrainingFailed, match="not retried"):
        pyxis.run_with_retries(submit, _log_of(d), d, wait=lambda j: slurm.wait_job(j, 1, 120))
    status = json.loads((d / "status.json").read_text())
    assert status["failure"] == "training" and len(status["history"]) == 1


def test_bad_gpu_log_line_is_retried_elsewhere(slurm_cluster):
    """Attempt 1 (pinned to node2) prints an Xid line naming its node and fails: retried with --exclude=node2."""
    d = BASE / f"xid-{uuid.uuid4().hex[:8]}"
    d.mkdir(parents=True)
    body = (
        'if [[ "$PTFLOW_ATTEMPT" == 1 ]]; then\n'
        '  echo "NVRM: Xid 79, GPU has fallen off the bus on node $SLURMD_NODENAME"; exit 1\n'
        "fi\n"
        'echo "trained on $SLURMD_NODENAME"\n'
    )
    script = _script(d / "job.sh", body)
    base = pyxis.sbatch_submitter(script, _opts(d, "ptflow-pyxis-xid"))

    def submit(attempt, exclude):
        return base(attempt, exclude) if attempt > 1 else pyxis.sbatch_submitter(
            script, _opts(d, "ptflow-pyxis-xid", ["--nodelist=node2"]))(attempt, exclude)  # fmt: skip

    res = pyxis.run_with_retries(submit, _log_of(d), d, wait=lambda j: slurm.wait_job(j, 1, 120))
    assert res["status"] == "succeeded" and res["attempts"] == 2
    assert res["exclude"] == ["node2"]
    assert res["history"][0]["kind"] == "infra" and "Xid" in res["history"][0]["reason"]
    assert res["history"][1]["nodes"] != ["node2"]


def _spare_slurmd() -> tuple[int, list[str], dict]:
    """The spare node's slurmd as the cluster started it: pid, argv, environment, cwd and output file."""
    procs = json.loads(STATE.read_text())["procs"]
    name = next(n for n, (pid, _) in procs.items() if n.startswith("slurmd-") and _is_spare(pid))
    pid = procs[name][0]
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    env = dict(
        kv.split(b"=", 1) for kv in Path(f"/proc/{pid}/environ").read_bytes().rstrip(b"\0").split(b"\0") if b"=" in kv
    )
    cwd = os.readlink(f"/proc/{pid}/cwd")
    out = os.readlink(f"/proc/{pid}/fd/1")  # the cluster sends slurmd's output to a log file: keep appending there
    env = {k.decode(): v.decode() for k, v in env.items()}
    return pid, [a.decode() for a in argv], {"env": env, "cwd": cwd, "out": out, "name": name}


def _is_spare(pid: int) -> bool:
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    return SPARE_NODE.encode() in argv


def test_node_fail_is_retried_with_node_excluded(slurm_cluster):
    """REAL slurmd kill on the spare node while attempt 1 runs there. SlurmdTimeout is 300 s, so after the kill we
    mark the node DOWN ourselves (what slurmctld does when the timeout passes); then slurmd is restarted with its
    original argv and the node resumed. Attempt 2 excludes it and runs on node2 (partition nodefail)."""
    assert SPARE_NODE in slurm_cluster.all_nodes, (
        f"this cluster has no spare node {SPARE_NODE} (started by an older tests/support/local_slurm: restart it)"
    )
    d = BASE / f"nodefail-{uuid.uuid4().hex[:8]}"
    d.mkdir(parents=True)
    body = 'echo "started on $SLURMD_NODENAME"\nif [[ "$PTFLOW_ATTEMPT" == 1 ]]; then sleep 300; fi\n'
    script = _script(d / "job.sh", body)
    restarted = {}

    def submit(attempt, exclude):
        extra = ["--partition=nodefail"] + ([f"--nodelist={SPARE_NODE}"] if attempt == 1 else [])
        return pyxis.sbatch_submitter(script, _opts(d, "ptflow-pyxis-nodefail", extra))(attempt, exclude)

    def wait(job_id):
        if restarted:  # later attempts: just wait
            return slurm.wait_job(job_id, 1, 180)
        for _ in range(120):
            rec = slurm.job_state(job_id)
            if rec and rec.base_state == "RUNNING" and "started on" in _log_of(d)(job_id):
                break
            time.sleep(1)
        pid, argv, ctx = _spare_slurmd()
        restarted["argv"] = argv
        os.kill(pid, signal.SIGKILL)
        try:
            slurm_admin.update_node(SPARE_NODE, "down", "ptflow-test-slurmd-killed")
            rec = slurm.wait_job(job_id, 1, 120)
        finally:
            with open(ctx["out"] if ctx["out"].startswith("/") else os.devnull, "ab") as out:
                proc = subprocess.Popen(argv, cwd=ctx["cwd"], env=ctx["env"], start_new_session=True,
                                        stdin=subprocess.DEVNULL, stdout=out, stderr=out)  # fmt: skip
            restarted["pid"] = proc.pid
            # keep the cluster's own record right, so its status/down find the new slurmd (pid + start time)
            from tests.support.local_slurm import _proc_start_time

            state = json.loads(STATE.read_text())
            state["procs"][ctx["name"]] = [proc.pid, _proc_start_time(proc.pid)]
            write_json_atomic(STATE, state)
            for _ in range(60):  # ReturnToService=2 may bring it back by itself once slurmd registers
                time.sleep(1)
                state = slurm_admin.node_state(SPARE_NODE)
                if "DOWN" not in state and "DRAIN" not in state:
                    break
                with contextlib.suppress(slurm.SlurmUnavailable):  # "invalid transition" until slurmd is back
                    slurm_admin.update_node(SPARE_NODE, "resume")
        restarted["state"] = rec.base_state
        return rec

    with slurm_admin.spare_node_held():  # tests/slurm/test_failure_causes_on_slurm.py takes the spare node down too
        res = pyxis.run_with_retries(submit, _log_of(d), d, wait=wait)
    assert restarted["state"] == "NODE_FAIL"
    assert res["history"][0]["kind"] == "infra" and "NODE_FAIL" in res["history"][0]["reason"]
    assert res["exclude"] == [SPARE_NODE] and res["status"] == "succeeded"
    retry = res["history"][1]
    assert "started on node2" in _log_of(d)(retry["job_id"])  # the retry ran on the other node of the partition
    # what Slurm reported: [] seen under CI load, where the finished job's record came without its node list
    assert retry["nodes"] in (["node2"], [])
    assert "DOWN" not in slurm_admin.node_state(SPARE_NODE)
