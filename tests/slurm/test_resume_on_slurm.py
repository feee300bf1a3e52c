"""Lost work and idle GPUs on the real two-node test cluster (PTFLOW_SLURM_EXISTING=1), through the workflow as a
user runs it (snakemake + the slurm plugin, profiles/slurm):

- a real TRL training requeued mid-run (``scontrol requeue``) resumes at its step; warned mid-run (``scancel
  --signal=USR1`` to the job steps: what ``--signal=USR1@N`` delivers) it saves, stops, and Snakemake's retry
  resumes — the plugin's job-step Snakemake survives the warning;
- on a supervised (pyxis-style) site the internal timeout ends in a save and a resubmission that resumes at the
  saved step;
- an agent cell (scripted agent: the stand-in for claude/codex/gemini) requeued mid-run continues in its synced
  workspace with the remaining budget, and ``time_taken`` sums both attempts;
- a driver killed with ``kill -9`` mid-training: ``--unlock`` and a rerun adopt the live job instead of
  submitting it again; a second live driver is refused naming the first (the job suspended meanwhile, so a short
  training outlives them);
- SkyRL: the runtime server job first, the trainer job with ``--dependency=after:<server>``, the seed's
  coordination dir.

Kept short: one working directory whose upstream outputs (cache, preprocess) a local run makes first; one driver
run that is requeued, warned and serves SkyRL at once (read by three tests), one supervised run (internal
timeout and two nodes: its first job suspended past the window, so one resubmission proves it on any machine), and
the killed driver. The trainings are as short as the points where the test acts on them allow (resume.yaml), and no
evaluation is made that no test reads (the agent cell's is read: it carries the requeued attempts).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import yaml

from ptflow.cluster import ownership, slurm
from tests.e2e.smk import REPO, command, job_env, snakemake

pytestmark = pytest.mark.timeout(1500)

SITE = REPO / "tests" / "slurm" / "localtest.yaml"
OVERLAY = REPO / "tests" / "slurm" / "resume.yaml"
WORK_ROOT = Path("/var/lib/ptflow-tests")
CELL = ("ptflow--tiny-llama-h64", "add")
# The supervised site's internal timeout: 4-minute train jobs x internal_timeout_fraction 0.25
INTERNAL_TIMEOUT = 60
# The TRL trainings' lengths and the points where the test acts on them: resume.yaml says why each is as long as it is.
STEPS = {a["id"]: a["params"] for a in yaml.safe_load(OVERLAY.read_text())["agents"] if "params" in a}
LONG_REQUEUE_AT = 60
PYX_FIRST_LOG = STEPS["sft-pyx"]["steps"] // 10


def cell_dir(work: Path, agent: str) -> Path:
    return work / "results" / "cells" / CELL[0] / CELL[1] / agent


def rule_log(work: Path, agent: str) -> Path:
    return work / "results" / "logs" / "train" / CELL[0] / CELL[1] / f"{agent}.log"


def write_site(path: Path, **changes) -> Path:
    site = yaml.safe_load(SITE.read_text())
    site["name"] = path.stem
    site["resources"]["runtime_server"] = {"partition": "cpu", "threads": 1, "mem_mb": 500, "runtime": 10}
    for key, value in changes.items():
        if key == "train":
            site["resources"]["train"].update(value)
        else:
            site[key] = value
    path.write_text(yaml.safe_dump(site))
    return path


class WorkDir(type(Path())):
    """The module's working directory, with the two site files its runs use."""

    plugin_site: Path
    supervised_site: Path
    overlay: Path


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    WORK_ROOT.mkdir(parents=True, exist_ok=True)
    path = WorkDir(WORK_ROOT / f"resume-{uuid.uuid4().hex[:8]}")
    path.mkdir()
    sites = tmp_path_factory.mktemp("sites")
    path.overlay = OVERLAY
    # warn_seconds: the plugin asks Slurm for the warning (its delivery is simulated with scancel --signal)
    path.plugin_site = write_site(sites / "warned.yaml", train={"warn_seconds": 600})
    # pyxis-style: supervised, 4-minute train jobs stopping themselves after INTERNAL_TIMEOUT (60 s,
    # internal_timeout_fraction). The window is wall time from the batch script's start, imports included; the
    # supervised_run fixture suspends the first job past it (see there). 60 s, not 15 s: under load a job's start-up
    # took most of 15 s (11 jobs of a few steps each in the full suite); a resubmitted job now has time to finish.
    # max_resumes stays high: a resume more on a machine slower than any seen must not fail the run.
    path.supervised_site = write_site(
        sites / "supervised.yaml",
        infra_retries=1,
        internal_timeout_fraction=0.25,
        max_resumes=40,
        train={"runtime": 4},
        # (the agent cell of the overlay needs its budget's time; preflight checks every agent of the matrix)
        agent_resources={"cli-agent": {"runtime": 10}, "sft-2node": {"nodes": 2, "tasks_per_node": 1, "runtime": 10}},
    )
    yield path
    shutil.rmtree(path, ignore_errors=True)


def run_args(work: WorkDir, site: Path, *targets: str) -> list[str]:
    return ["--configfile", str(work.overlay), "--config", f"site={site}", "--", *targets]


def start(work: WorkDir, slurm_cluster, site: Path, *targets: str) -> subprocess.Popen:
    return subprocess.Popen(
        command(work, *run_args(work, site, *targets), profile="profiles/slurm"),
        cwd=work,
        env=job_env(slurm_cluster.env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def jobs_of(cluster, work: Path, comment_prefix: str) -> list[dict]:
    out = cluster.run(["scontrol", "show", "job", "-o"], check=True).stdout
    found = []
    for line in out.splitlines():
        fields = dict(m.groups() for m in re.finditer(r"(\w[\w:/]*)=(\S*)", line))
        if fields.get("WorkDir") == str(work) and fields.get("Comment", "").startswith(comment_prefix):
            found.append(fields)
    return sorted(found, key=lambda j: int(j["JobId"]))


def wait_for(predicate, what: str, seconds: float = 400, proc: subprocess.Popen | None = None):
    deadline = time.monotonic() + seconds
    while True:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the driver ended before {what}:\n{proc.stdout.read()[-4000:]}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(1)


RESUMED = re.compile(r"resuming from \S+ \(step (\d+)\)")


def read(path: Path) -> str:
    """A rule log's text, or "" while it does not exist (Snakemake deletes a job's log before each attempt)."""
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


def logged_step(path: Path, at_least: int, after: str = "") -> int | None:
    """The newest ``step N:`` the trainer logged (after the line ``after``, if given), if it is >= at_least."""
    text = read(path)
    if after:
        if after not in text:
            return None
        text = text.split(after, 1)[1]
    steps = [int(s) for s in re.findall(r"step (\d+): loss=", text)]
    return steps[-1] if steps and steps[-1] >= at_least else None


def release_requeued(cluster, job_id: str) -> None:
    """slurmctld holds a requeued batch job for 120 s; release it as a user in a hurry would."""
    for _ in range(120):
        state = cluster.run(["squeue", "-h", "-j", job_id, "-o", "%T"]).stdout.strip()
        if state == "PENDING":
            cluster.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], check=True)
            return
        time.sleep(1)
    raise AssertionError(f"job {job_id} never came back PENDING after the requeue")


def finish(proc: subprocess.Popen, seconds: float = 900) -> str:
    out, _ = proc.communicate(timeout=seconds)
    assert proc.returncode == 0, out[-5000:]
    return out


def step_of(path: Path, step: int) -> bool:
    return f"step {step}:" in read(path)


@pytest.fixture(scope="module")
def plugin_run(work, slurm_cluster):
    """One driver (the plugin's jobs): a TRL training requeued mid-run and then warned, an agent cell requeued
    mid-run and evaluated, a SkyRL cell; returns what the tests read."""
    sft = cell_dir(work, "sft-long") / "checkpoint.json"
    agent_eval = cell_dir(work, "scripted-slow") / "eval.json"
    skyrl_manifest = cell_dir(work, "skyrl-x") / "checkpoint.json"
    targets = [str(p.relative_to(work)) for p in (sft, agent_eval, skyrl_manifest)]
    log = rule_log(work, "sft-long")
    trace = cell_dir(work, "scripted-slow") / "agent" / "stdout.log"
    # The upstream outputs (both datasets, the model, the eval's split) from a local run of the same workflow first:
    # no test here reads how they were made (test_workflow_on_slurm runs those rules on Slurm), and as four Slurm jobs
    # (two Snakemake starts each) they cost ~30 CPU-s and three status waits, locally about half of that
    upstream = ["results/data/add/train.parquet", "results/cache/models/ptflow--tiny-llama-h64.json"]
    snakemake(work, *run_args(work, work.plugin_site, *upstream), env=slurm_cluster.env)
    proc = start(work, slurm_cluster, work.plugin_site, *targets)
    got: dict = {}
    # The two trainings are driven independently, each as soon as it is far enough: under load one may start long
    # after the other (in CI the TRL training, held back until the agent reached its step, ended before its warning).

    def requeue(agent: str) -> str:
        (job,) = jobs_of(slurm_cluster, work, "rule_train_wildcards_" + "_".join([*CELL, agent]))
        slurm_cluster.run(["scontrol", "requeue", job["JobId"]], check=True)
        release_requeued(slurm_cluster, job["JobId"])
        return job["JobId"]

    def trl_steps():
        """The TRL training's script, one condition per step: requeued at its logged step 60, then warned at its
        first logged step after the resume (as Slurm delivers --signal=USR1@N: to every process of the job's steps,
        not the batch shell)."""
        yield lambda: logged_step(log, LONG_REQUEUE_AT)
        got["trl_job"] = requeue("sft-long")
        yield lambda: RESUMED.search(read(log))
        resumed = RESUMED.search(read(log))
        got["requeued_at"] = int(resumed.group(1))
        yield lambda: logged_step(log, got["requeued_at"] + 1, after=resumed.group(0))
        slurm_cluster.run(["scancel", "--signal=USR1", got["trl_job"]], check=True)
        marker = cell_dir(work, "sft-long") / "slurm" / f"stopped-{got['trl_job']}.json"
        # (the requeue's SIGTERM left a marker too: the trainer saved on it; the warning's replaces it)
        yield lambda: marker.is_file() and "warning" in json.loads(marker.read_text())["reason"]
        got["stop"] = json.loads(marker.read_text())

    def agent_steps():
        yield lambda: step_of(trace, 40)
        synced = time.monotonic() + 3  # a periodic sync of the agent's workspace (every 6 s) holds that checkpoint
        yield lambda: time.monotonic() >= synced
        got["agent_job"] = requeue("scripted-slow")

    scripts = [trl_steps(), agent_steps()]
    waiting = {steps: next(steps) for steps in scripts}

    def advance() -> bool:
        for steps, condition in list(waiting.items()):
            if condition():
                try:
                    waiting[steps] = next(steps)
                except StopIteration:
                    del waiting[steps]
        return not waiting

    try:
        wait_for(advance, "the TRL training's requeue and warning, and the agent cell's requeue", 600, proc=proc)
        got["out"] = finish(proc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
    return got


def test_trl_training_requeued_then_warned_resumes_at_its_step(work, slurm_cluster, plugin_run):
    """Snakemake deletes a job's rule log before each attempt, so what earlier attempts did is read from their
    records: the stop markers and the manifest's ``attempts``."""
    manifest = cell_dir(work, "sft-long") / "checkpoint.json"
    stop, requeued_at, job_id = plugin_run["stop"], plugin_run["requeued_at"], plugin_run["trl_job"]
    assert stop["reason"] == "the time-limit warning" and stop["step"] > requeued_at, stop
    assert re.search(rf"resuming from \S+ \(step {stop['step']}\)", read(rule_log(work, "sft-long")))
    jobs = jobs_of(slurm_cluster, work, "rule_train_wildcards_" + "_".join([*CELL, "sft-long"]))
    assert [j["JobId"] for j in jobs][0] == job_id and len(jobs) == 2, [(j["JobId"], j["JobState"]) for j in jobs]
    assert jobs[0]["Restarts"] == "1" and jobs[1]["JobState"] == "COMPLETED", jobs
    # the warned job ended by itself (its script exited 75 after saving): its job-step Snakemake survived USR1
    assert jobs[0]["JobState"] == "FAILED" and jobs[0]["ExitCode"] == "1:0", jobs[0]
    data = json.loads(manifest.read_text())
    assert data["step"] == STEPS["sft-long"]["steps"] and data["slurm_job_id"] == jobs[1]["JobId"]
    attempts = data["attempts"]
    assert len(attempts) == 3 and [a["slurm_job_id"] for a in attempts] == [job_id, job_id, jobs[1]["JobId"]]
    # the requeue's SIGTERM usually lets the trainer save at once (else the periodic step before it is resumed)
    assert attempts[0].get("stopped") in ("SIGTERM", None) and attempts[0].get("saved_step", requeued_at) == requeued_at
    assert attempts[1]["stopped"] == "the time-limit warning" and attempts[1]["saved_step"] == stop["step"]
    assert attempts[2]["completed"] and attempts[2]["resumed_from"] == stop["step"]
    # the requeued attempt resumed from what the first one saved, at or after the step the requeue came at
    assert LONG_REQUEUE_AT <= requeued_at < stop["step"]
    assert not list((work / ".scratch" / "checkpoints").rglob(".sft-long.resume")), "resume state left behind"


def test_agent_cell_requeued_continues_with_the_remaining_budget(work, plugin_run):
    data = json.loads((cell_dir(work, "scripted-slow") / "checkpoint.json").read_text())
    run = data["agent_run"]
    assert run["exit_code"] == 0 and run["final_model"] and len(run["attempts"]) == 2, run
    assert run["time_taken"] == pytest.approx(sum(a["time_taken"] for a in run["attempts"]), abs=0.01)
    first, second = run["attempts"]
    assert first["slurm_job_id"] == second["slurm_job_id"] == plugin_run["agent_job"]  # the same job, requeued
    assert first["time_taken"] > 10 and second["ended_by"] == "exit"
    trace = read(cell_dir(work, "scripted-slow") / "agent" / "stdout.log")
    assert "An earlier session worked here: continuing its training from step" in trace, trace[-3000:]
    log = read(rule_log(work, "scripted-slow"))
    left = float(re.search(r"continuing 1 earlier session, [\d.]+ minutes used .*: ([\d.]+) of 6.0 minutes left", log)
                 .group(1))  # fmt: skip
    assert 6.0 - left == pytest.approx(first["time_taken"] / 60, abs=0.1)
    prompt2 = (cell_dir(work, "scripted-slow") / "agent" / "prompt-2.md").read_text()
    assert "An earlier session worked on this task before you" in prompt2
    ev = json.loads((cell_dir(work, "scripted-slow") / "eval.json").read_text())
    assert ev["agent_run"]["attempts"] == run["attempts"] and ev["agent_run"]["time_taken"] == run["time_taken"]


def test_skyrl_server_first_trainer_after_it_started(work, plugin_run):
    manifest = cell_dir(work, "skyrl-x") / "checkpoint.json"
    (coord,) = (cell_dir(work, "skyrl-x") / ".skyrl_jobs").iterdir()
    assert re.fullmatch(r"\d{8}_\d{6}_\d+", coord.name)
    server_id = coord.name.rsplit("_", 1)[1]
    names = {p.name for p in coord.iterdir()}
    seed = ["runtime_url.txt", "runtime_api_key.txt", "runtime_ready.flag", "training_complete.flag", "config.json"]
    seed += [f"runtime_{server_id}.out", f"runtime_{server_id}.err", "runtime_server.sbatch"]
    for need in seed:
        assert need in names, (need, names)
    assert oct((coord / "runtime_api_key.txt").stat().st_mode & 0o777) == "0o600"
    (trainer_json,) = coord.glob("trainer_*.json")
    info = json.loads(trainer_json.read_text())
    trainer = slurm.job_fields(info["trainer_job"])
    server = slurm.job_fields(server_id)
    assert server["Partition"] == "cpu" and trainer["Partition"] == "gpu"
    assert f"--dependency=after:{server_id}" in rule_log(work, "skyrl-x").read_text()
    assert trainer["StartTime"] >= server["StartTime"]  # Slurm started the GPU job only once the server ran
    assert info["waited_for_runtime_s"] < 30  # the server was running when the trainer started
    assert slurm.wait_job(server_id, poll=1, timeout=60).base_state in ("COMPLETED", "CANCELLED")
    key = (coord / "runtime_api_key.txt").read_text().strip()
    for p in coord.iterdir():
        if p.is_file() and p.name != "runtime_api_key.txt":
            assert key not in p.read_text(errors="replace"), p
    assert json.loads(manifest.read_text())["step"] == 3


@pytest.fixture(scope="module")
def supervised_run(work, slurm_cluster):
    """One driver on the supervised (pyxis-style) site: a training stopped by the internal timeout and resubmitted,
    and a two-node training; returns the driver's run and the id of the job that was suspended.

    The internal timeout counts wall time from the batch script's start, a training's progress is CPU: sized by
    steps alone, the same training took 2 jobs on a quiet machine and 11 in the full suite (each one re-importing
    torch). So once the first job trains, the test suspends it (``scontrol suspend``: SIGSTOP to every process of the
    job, batch shell included) until its window has passed; on ``scontrol resume`` the batch shell finds its
    internal timeout passed and warns the trainer itself, which saves and stops: the same path as a slow training,
    on any machine, with a short training. The resubmitted job resumes and has a whole window for the rest."""
    targets = [cell_dir(work, a) / "checkpoint.json" for a in ("sft-pyx", "sft-2node")]
    log = rule_log(work, "sft-pyx")
    proc = start(work, slurm_cluster, work.supervised_site, *(str(t.relative_to(work)) for t in targets))
    try:
        # (its first logged step, a tenth of the run: its warning handler is installed, the training runs)
        wait_for(lambda: logged_step(log, PYX_FIRST_LOG), "the supervised training to run", 600, proc=proc)
        jobs = jobs_of(slurm_cluster, work, "rule_train_wildcards_" + "_".join([*CELL, "sft-pyx"]))
        job = jobs[0]  # the first train job (by id): the one the internal timeout stops
        # (from the job's RunTime, not its StartTime: no time zone to get wrong; the batch shell started after it)
        window = time.time() - run_seconds(job["RunTime"]) + INTERNAL_TIMEOUT + 3
        # A second job already: on a slow machine the first one's start-up and first steps took its whole window, its
        # internal timeout came by itself and the supervisor resubmitted (seen in a full run); nothing to suspend.
        if len(jobs) == 1:
            suspend = slurm_cluster.run(["scontrol", "suspend", job["JobId"]])
            if suspend.returncode == 0:
                wait_for(
                    lambda: time.time() >= window, "the internal timeout to pass", INTERNAL_TIMEOUT + 30, proc=proc
                )
                slurm_cluster.run(["scontrol", "resume", job["JobId"]], check=True)
            else:  # only where the job's start-up took its whole window: the internal timeout came by itself
                assert time.time() >= window - 3, f"scontrol suspend {job['JobId']}: {suspend.stderr}"
        out = finish(proc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
    return {"run": subprocess.CompletedProcess(proc.args, proc.returncode, out, ""), "suspended": job["JobId"]}


def run_seconds(runtime: str) -> int:
    """Slurm's ``RunTime`` ([D-]HH:MM:SS) in seconds."""
    days, _, clock = runtime.rpartition("-")
    hours, minutes, seconds = (int(x) for x in clock.split(":"))
    return int(days or 0) * 86400 + hours * 3600 + minutes * 60 + seconds


def evidence(work: Path, agent: str, run: subprocess.CompletedProcess) -> str:
    """What a failed assertion on a supervised cell shows: its status, every job's log, the supervisor's and the
    trainer's lines of the rule log (not the steps) and the end of the driver's output."""
    cell = cell_dir(work, agent)
    parts = [f"status.json: {read(cell / 'status.json')}"]
    parts += [f"{p.name}: {read(p)[-2000:]}" for p in sorted((cell / "slurm").glob("*")) if p.suffix != ".sbatch"]
    rule = [line for line in read(rule_log(work, agent)).splitlines() if not re.search(r"step \d+: loss=", line)]
    parts += ["rule log:", *rule[-60:], "driver:", ((run.stdout or "") + (run.stderr or ""))[-6000:]]
    return "\n".join(parts)


def test_internal_timeout_saves_and_the_supervisor_resubmits(work, supervised_run):
    manifest = cell_dir(work, "sft-pyx") / "checkpoint.json"
    status = json.loads((manifest.parent / "status.json").read_text())
    shown = evidence(work, "sft-pyx", supervised_run["run"])
    # (one resume on any machine so far; more are allowed: how far a resubmitted job gets is the machine's speed)
    assert status["status"] == "succeeded" and status["resumes"] >= 1, shown
    assert [h["kind"] for h in status["history"]] == ["resume"] * status["resumes"] + ["ok"]
    first = status["history"][0]
    assert first["job_id"] == supervised_run["suspended"], shown
    job_log = (manifest.parent / "slurm" / f"train-{first['job_id']}.out").read_text()
    assert f"ptflow: internal timeout ({INTERNAL_TIMEOUT} s): asking the trainer to save and stop" in job_log
    data = json.loads(manifest.read_text())
    assert data["step"] == STEPS["sft-pyx"]["steps"] and len(data["attempts"]) == status["resumes"] + 1
    # the stopped job saved where the warning stopped it, and the job that finished resumed at the last step saved.
    # (On a slow machine a resubmitted job can itself reach the internal timeout, during its start-up or after a
    # few steps: then the attempts between are stopped ones too, each saving no earlier step than the one before.)
    stopped, finished = data["attempts"][0], data["attempts"][-1]
    assert stopped["slurm_job_id"] == first["job_id"] and stopped["stopped"] == "the time-limit warning", stopped
    assert PYX_FIRST_LOG <= stopped["saved_step"] < data["step"], data["attempts"]
    saved = [a["saved_step"] for a in data["attempts"][:-1] if a.get("saved_step") is not None]
    assert saved == sorted(saved) and finished.get("completed"), data["attempts"]
    assert finished["resumed_from"] == saved[-1], data["attempts"]
    assert f"saved step {stopped['saved_step']} and stopped (the time-limit warning)" in first["reason"], first
    # the operator sees every attempt as the cell's train job (ptflow status reads the directory's own job name)
    from ptflow.ops.cli import SmkArgs, load_context
    from ptflow.ops.status import snapshot

    ctx = load_context(
        SmkArgs(configfiles=(str(work.overlay),), config=(f"site={work.supervised_site}",), directory=work)
    )
    snap = snapshot(ctx.cfg, ctx.layout, work)
    mine = {jid for jid, (rule, cell) in snap.job_cells.items() if cell.agent == "sft-pyx"}
    assert {h["job_id"] for h in status["history"]} <= mine, snap.job_cells


def test_two_node_train_job_gets_the_rendezvous_env_on_both_nodes(work, slurm_cluster, supervised_run):
    """A supervised (pyxis-style) train job over 2 nodes, without pyxis: each node runs the rule's script under
    torchrun with WORLD_SIZE, MASTER_ADDR, MASTER_PORT, NODE_RANK and NUM_GPU_PER_NODE (TAO's contract); the two ranks
    train together (DDP, gloo on CPU) and rank 0 writes the checkpoint."""
    from ptflow.cluster import multinode

    manifest = cell_dir(work, "sft-2node") / "checkpoint.json"
    status = json.loads((manifest.parent / "status.json").read_text())
    job_id = status["job_id"]
    nodes = json.loads((manifest.parent / "nodes.json").read_text())
    assert nodes["status"] == "succeeded" and sorted(nodes["nodes"]) == sorted(slurm_cluster.hostnames), nodes
    first = nodes["nodes"][0]
    addr = slurm.node_addresses([first])[first].addr
    log = read(rule_log(work, "sft-2node"))  # the node steps' output goes to the rule's log
    for rank, node in enumerate(nodes["nodes"]):
        line = (f"ptflow node {node}: WORLD_SIZE=2 MASTER_ADDR={addr} MASTER_PORT={multinode.master_port(job_id)} "
                f"NODE_RANK={rank} NUM_GPU_PER_NODE=1")  # fmt: skip
        assert line in log, log[-3000:]
    data = json.loads(manifest.read_text())
    assert data["step"] == 40 and data["slurm_job_id"] == job_id and len(data["attempts"]) == 1


def test_killed_driver_is_adopted_not_duplicated(work, slurm_cluster):
    """The training job is suspended (``scontrol suspend``) from its first logged step until the third driver was
    refused: a live job whatever the machine's speed, so a short training outlives the killed driver and keeps the
    second one waiting (before, 800 steps and the cell's evaluation as the second driver's target did that)."""
    manifest = cell_dir(work, "sft-adopt") / "checkpoint.json"
    log = rule_log(work, "sft-adopt")
    target = str(manifest.relative_to(work))
    comment = "rule_train_wildcards_" + "_".join([*CELL, "sft-adopt"])
    first = start(work, slurm_cluster, work.plugin_site, target)
    try:
        (job,) = wait_for(lambda: jobs_of(slurm_cluster, work, comment), "the training job", proc=first)
        wait_for(lambda: logged_step(log, STEPS["sft-adopt"]["steps"] // 10), "the training to run", proc=first)
        held = slurm_cluster.run(["scontrol", "suspend", job["JobId"]])
        assert held.returncode == 0, f"scontrol suspend {job['JobId']} (ended already?): {held.stderr}"
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the driver (and its process group), not the Slurm job
        first.wait()
    snakemake(work, "--unlock", *run_args(work, work.plugin_site, target), env=slurm_cluster.env,
              profile="profiles/slurm")  # fmt: skip
    second = start(work, slurm_cluster, work.plugin_site, target)
    try:
        lock = ownership.DriverLock(work)
        wait_for(lambda: (h := lock.live_holder()) and h.pid == second.pid and h, "the second driver's lock", 120)
        # a third driver after another --unlock by mistake: refused, naming the live one
        snakemake(work, "--unlock", *run_args(work, work.plugin_site, target), env=slurm_cluster.env,
                  profile="profiles/slurm")  # fmt: skip
        third = snakemake(work, *run_args(work, work.plugin_site, target), env=slurm_cluster.env,
                          profile="profiles/slurm", check=False)  # fmt: skip
        text = third.stdout + third.stderr
        assert third.returncode != 0 and f"pid {second.pid} on host" in text and "another ptflow driver" in text
        slurm_cluster.run(["scontrol", "resume", job["JobId"]], check=True)
        out = finish(second)
    finally:
        if second.poll() is None:
            os.killpg(second.pid, signal.SIGINT)
    assert "waiting for them instead of submitting it again" in out, out[-4000:]
    assert "planned job(s) completed by them are taken as done" in out
    jobs = jobs_of(slurm_cluster, work, comment)
    assert len(jobs) == 1 and jobs[0]["JobState"] == "COMPLETED", jobs  # one training, never two
    assert json.loads(manifest.read_text())["slurm_job_id"] == jobs[0]["JobId"] == job["JobId"]
    again = snakemake(work, "-n", *run_args(work, work.plugin_site, target), env=slurm_cluster.env,
                      profile="profiles/slurm")  # fmt: skip
    assert "Nothing to be done" in again.stdout + again.stderr  # the adopted output is complete, not rerun
