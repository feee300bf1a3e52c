"""ptflow status / cancel / logs on the real two-node Slurm test cluster, each state caused for real.

One workflow run through the plugin over a reduced matrix, h64 x add x {baseline, bad, stop}. Its cell jobs are
submitted held (`sbatch --hold`, through the site's `extra` flags), so each stays Pending, for a reason Slurm gives,
until the test releases it (Pending); released, they run (Running); `stop` is cancelled with `ptflow cancel`
(Canceled) while `baseline` keeps running and ends Done; `bad` runs past its job's time limit, which Slurm ends with
TIMEOUT (a real limit hit: Error). `bad` and `stop` are cli-agent cells whose agent is `sleep`: their train jobs wait
on Slurm without burning a core (the states are under test here, not what a job computes).
The first test watches the run live; the second (and the first's last checks) read one `ptflow status` taken once
the run has ended.
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

from tests.e2e.smk import REPO, command

SITE = REPO / "tests" / "slurm" / "localtest.yaml"
WORK_ROOT = Path("/var/lib/ptflow-tests")
PTFLOW = str(Path(sys.executable).with_name("ptflow"))
pytestmark = pytest.mark.timeout(1800)  # one workflow run on a shared 2-core machine, queued behind other modules
MODEL = "ptflow--tiny-llama-h64"
CELLS = ("baseline", "bad", "stop")


def sleeping_agent(agent_id: str, hours: float) -> dict:
    """A cli-agent cell whose agent only sleeps: a real train job (task dir, HF view, the agent under its budget's
    timeout) that takes no CPU while Slurm decides its fate."""
    return {"id": agent_id, "kind": "cli-agent", "cli": "scripted", "model": "sleeper",
            "command": ["sleep", "3600"], "hours": hours, "grace_minutes": 0.1}  # fmt: skip


# `bad`: a 15-minute budget (the preflight wants a train request that outlives it: the site's 30 minutes); the
# fixture lowers its job's time limit to 1 minute (`scontrol update TimeLimit`, a limit Slurm enforces as any other),
# so Slurm ends it with TIMEOUT long before the agent's own timeout. `stop`: cancelled by the test seconds after it
# starts; its 3-minute budget only bounds a run where nobody cancels it (the Done/Error test run alone).
AGENTS = [{"id": "baseline", "kind": "baseline"}, sleeping_agent("bad", 0.25), sleeping_agent("stop", 0.05)]


def add_eval() -> dict:
    """The default's `add`, evaluated on 8 of its 64 problems, as the only eval: the baseline's eval.json is valid
    all the same (Done), and without `sub` its dataset is not cached (a local tiny model's tokenizer is built from
    the config's local datasets)."""
    evals = yaml.safe_load((REPO / "config" / "config.yaml").read_text())["evals"]
    return {**next(e for e in evals if e["id"] == "add"), "limit": 8}


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


def queued(cluster, work: Path) -> dict[str, tuple[str, str, str]]:
    """This directory's jobs that slurmctld holds, by the plugin's comment (``rule_<rule>_wildcards_<...>``): the
    newest job id, its state and squeue's reason code. One squeue call (no Snakemake start, unlike `ptflow status`):
    the cheap way to wait for a state, which `ptflow status` is then asked to show once."""
    out = cluster.run(["squeue", "-h", "-t", "all", "-o", "%i|%T|%r|%k|%Z"], check=True).stdout
    jobs: dict[str, tuple[str, str, str]] = {}
    for line in out.splitlines():
        job_id, state, reason, comment, workdir = line.strip().split("|", 4)
        if workdir == str(work) and (comment not in jobs or int(job_id) > int(jobs[comment][0])):
            jobs[comment] = (job_id, state, reason)
    return jobs


ENDED = {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED", "DEADLINE"}


def end_state(cluster, job_id: str, timeout: float) -> str:
    """The state a job ended in (squeue every 2 s: waiting costs next to no CPU)."""
    return wait_for(f"job {job_id} to end", lambda: (s := squeue_state(cluster, job_id)) in ENDED and s, timeout, 2)


def held(cluster, work: Path) -> list[str]:
    """This directory's jobs that Slurm holds (reason code JobHeldUser or JobHeldAdmin: who submitted them decides)."""
    return [
        job_id
        for job_id, state, reason in queued(cluster, work).values()
        if state == "PENDING" and reason.startswith("JobHeld")
    ]


def release(cluster, *job_ids: str) -> None:
    cluster.run(["scontrol", "release", ",".join(job_ids)], check=True)


def cell_job(rule: str, agent: str) -> str:
    return f"rule_{rule}_wildcards_{MODEL}_add_{agent}"


def wait_for(what: str, check, timeout: float = 300, every: float = 1.0, proc: subprocess.Popen | None = None):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the run ended (exit {proc.returncode}) before {what}")
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}; last: {last}")


@pytest.fixture(scope="module")
def work(slurm_cluster):
    WORK_ROOT.mkdir(parents=True, exist_ok=True)
    path = WORK_ROOT / f"cli-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    matrix = {
        "evals": [add_eval()],
        "agents": AGENTS,
        "matrix": {"models": ["ptflow/tiny-llama-h64"], "evals": ["add"], "agents": list(CELLS)},
    }
    (path / "matrix.yaml").write_text(yaml.safe_dump(matrix))
    # The cells' jobs are submitted held: Pending until the test releases them, whatever GPUs are free. (A job that
    # held every GPU raced them: on a busy cluster it queued behind other modules' jobs, and Slurm's backfill
    # started baseline's evaluate job first, which never showed Pending.)
    site = yaml.safe_load(SITE.read_text())
    for stage in ("train", "evaluate"):
        site["resources"][stage]["extra"] = "--hold"
    (path / "site.yaml").write_text(yaml.safe_dump(site))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def run(slurm_cluster, work):
    """The run, started; `bad`'s train job given its 1-minute limit and released; the other cells' jobs held."""
    driver_log = open(work / "run.log", "w")  # a file, not a pipe: an unread pipe fills up and blocks snakemake
    # The cells only (no hf_cache job, no aggregate: nothing here reads them).
    targets = [f"results/cells/{MODEL}/add/{agent}/eval.json" for agent in CELLS]
    proc = subprocess.Popen(
        command(work, *smk_args(work), *targets, profile="profiles/slurm"),
        cwd=work,
        stdout=driver_log,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **slurm_cluster.env},
    )
    try:
        bad = cell_job("train", "bad")
        bad_job = wait_for("bad's train job", lambda: queued(slurm_cluster, work).get(bad), 600, 2, proc=proc)[0]
        # A time limit shorter than the agent's budget: Slurm, not the agent's timeout, ends the job (TIMEOUT). Set
        # while the job is held, so it holds from the job's first second.
        slurm_cluster.run(["scontrol", "update", f"JobId={bad_job}", "TimeLimit=1"], check=True)
        limit = slurm_cluster.run(["squeue", "-h", "-j", bad_job, "-o", "%l"], check=True).stdout.strip()
        assert limit == "1:00", f"job {bad_job}: time limit {limit}"
        release(slurm_cluster, bad_job)
        yield proc
    finally:
        if proc.poll() is None:
            ptflow(slurm_cluster, work, "cancel", "--all", check=False)  # whatever of ours is still queued
            proc.terminate()
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        driver_log.close()


def test_pending_running_cancel_one_cell_leaves_others(slurm_cluster, work, run, request):
    # Pending: status says so, and Slurm agrees for the same job
    base = cell_job("evaluate", "baseline")
    base_job = wait_for("baseline's evaluate job", lambda: queued(slurm_cluster, work).get(base), 600, proc=run)[0]
    assert base_job in held(slurm_cluster, work), f"job {base_job} was not submitted held"
    cell = status(slurm_cluster, work)["baseline"]
    assert cell["state"] == "Pending" and cell["job_id"] == base_job, cell
    assert "JobHeld" in cell["detail"], cell  # the reason Slurm gives, shown
    stop = cell_job("train", "stop")
    stop_job = wait_for("stop's train job", lambda: queued(slurm_cluster, work).get(stop), 600, 2, proc=run)[0]
    release(slurm_cluster, base_job, stop_job)

    # Running, with node and elapsed
    def both_running_in_slurm():
        jobs = queued(slurm_cluster, work)
        return all(
            jobs.get(cell_job(r, a), ("", "", ""))[1] == "RUNNING"
            for r, a in (("evaluate", "baseline"), ("train", "stop"))
        )

    wait_for("baseline's and stop's jobs RUNNING", both_running_in_slurm, timeout=300, every=2, proc=run)

    def both_running():
        cells = status(slurm_cluster, work)
        return cells if all(cells[a]["state"] == "Running" for a in ("baseline", "stop")) else None

    cells = wait_for("baseline and stop Running", both_running, timeout=120, every=3)
    for a in ("baseline", "stop"):
        assert cells[a]["node"] in slurm_cluster.hostnames and cells[a]["elapsed"], cells[a]
    assert cells["baseline"]["job_id"] == base_job and cells["stop"]["job_id"] == stop_job, cells

    out = ptflow(slurm_cluster, work, "cancel", "--cell", "ptflow/tiny-llama-h64/add/stop").stdout
    assert f"cancelled 1 job(s): {stop_job}" in out, out
    assert end_state(slurm_cluster, stop_job, timeout=60) == "CANCELLED"
    assert squeue_state(slurm_cluster, base_job) in ("RUNNING", "COMPLETING", "COMPLETED"), "other cell stopped"

    # A second cancel of the same cell: its job has ended, which counts as done.
    again = ptflow(slurm_cluster, work, "cancel", "--cell", f"{MODEL}/add/stop").stdout
    assert "cancelled 0 job(s)" in again and stop_job in again

    # The other cell finishes on its own; the cancelled one stays Canceled (read once the run has ended: the same
    # `ptflow status` the next test reads).
    assert end_state(slurm_cluster, base_job, timeout=600) == "COMPLETED"
    _, cells = request.getfixturevalue("ended")
    assert cells["baseline"]["state"] == "Done" and cells["baseline"]["job_id"] == base_job, cells["baseline"]
    assert cells["stop"]["state"] == "Canceled" and cells["stop"]["job_id"] == stop_job, cells["stop"]


@pytest.fixture(scope="module")
def ended(slurm_cluster, work, run) -> tuple[int, dict[str, dict]]:
    """The run's exit status and `ptflow status` once it has ended. Any job of the run still held is released
    meanwhile (all of them when the Done/Error test runs alone; none after the first test)."""
    deadline = time.monotonic() + 1200
    while run.poll() is None:
        if time.monotonic() > deadline:
            raise AssertionError("the run did not end in 1200 s")
        if jobs := held(slurm_cluster, work):
            release(slurm_cluster, *jobs)
        time.sleep(2)
    return run.returncode, status(slurm_cluster, work)


def test_done_and_error_after_a_run(slurm_cluster, work, ended):
    rc, cells = ended
    assert rc != 0, "the bad cell must fail"
    # Done is decided by the cell's eval.json whichever of its jobs came last (ptflow.results.cell_state.cell_state), so
    # a baseline cell shows it as a trained one would.
    assert cells["baseline"]["state"] == "Done", cells
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
