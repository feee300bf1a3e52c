"""Supervised training jobs: a ``train`` rule that runs on the login node as a light supervisor, submits the GPU job
itself, resubmits it after infrastructure failures and after a stop it saved for, and records all of it.

Who is supervised (``ptflow.config.sites.Site.supervises``): every train job on sites with ``infra_retries``
(pyxis/TAO clusters), and agent kinds whose job needs a helper job submitted before it (the SkyRL server). Why
not the plugin: a node failure kills the rule's own allocation, so whatever decides to retry must live outside it,
and Snakemake's ``retries`` cannot tell a dead node from a Python traceback (see ``infra_retry``); a SkyRL server
on a CPU partition cannot be expressed beside its GPU consumer either (Snakemake's ``service()`` outputs run in their
consumer's job group, hence in its allocation).

The supervisor renders a batch script that runs the rule's own script again (Snakemake's generated script with the
job's inputs, outputs and params) under ``sbatch`` with the flags of the stage's request (``Request.sbatch_options``:
the same resources the plugin would have used), named and commented so ``ptflow status``/``cancel`` and a restarted
driver see it as the rule's job (``ptflow.cluster.ownership``), and hands it to
:func:`ptflow.cluster.infra_retry.run_with_retries`, which writes ``status.json`` beside the manifest.

In the job (:func:`render_batch_script`), the batch shell forwards Slurm's time-limit warning (``--signal=B:USR1@N``
for these jobs) and SIGTERM to the script, and at the site's internal timeout (pyxis/TAO: 3.8 h of 4 h) sends it the
warning itself: a resumable trainer saves, writes its stop marker and exits; the supervisor resubmits (bounded by
``max_resumes``) and the next job resumes from the saved step.

The supervisor stops its jobs (scancel) when it is stopped itself (SIGTERM, SIGINT, SIGHUP: Ctrl-C on the driver,
scancel of nothing else); when its driver dies (``kill -9``), it leaves the running job alone and exits, and the next
driver adopts the job (``ptflow.ops.driver``) instead of submitting the same training again.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ptflow.cluster import ownership, preempt, slurm
from ptflow.config.request import Request
from ptflow.files import atomic_path
from ptflow.jobenv import signals_raise

ATTEMPT_ENV = "PTFLOW_ATTEMPT"  # set by infra_retry.sbatch_submitter in each submitted job
POLL_SECONDS = 5
# how long the supervisor waits for a Slurm that does not answer (a busy controller) before it gives up on a job
SLURM_PATIENCE_SECONDS = 600


def inside_supervised_job() -> bool:
    return ATTEMPT_ENV in os.environ


def render_batch_script(
    path: str | Path,
    script: str,
    python: str = sys.executable,
    internal_timeout: int | None = None,
    kill_after: int = 60,
    poll: int = POLL_SECONDS,
) -> Path:
    """``#!/bin/bash`` that re-runs the rule's script (absolute paths: the job starts in the submit dir) and forwards
    the warning and SIGTERM to it. A warning, once received, is sent again at every ``poll`` until the script ends:
    the script starts with it ignored (a warning during its start-up must not kill it) and its trainer hears it once
    its handler is installed. With ``internal_timeout`` (seconds) the job warns the script itself that long after it
    started (pyxis/TAO: 3.8 h of 4 h) and kills it ``kill_after`` seconds later if it has not ended: a resumable
    trainer saves and stops, so the job ends with its own status before Slurm's limit."""
    run = f"{shlex.quote(python)} {shlex.quote(str(Path(script).resolve()))}"
    lines = [
        "#!/bin/bash",
        "# ptflow supervised train job (ptflow.cluster.supervise): the rule's own script, run again in the allocation.",
        "set -uo pipefail",
        f': "${{{ATTEMPT_ENV}:?submitted by the ptflow supervisor, which sets {ATTEMPT_ENV}}}"',
        'child=""',
        "pending=''",
        "warned=0",
        "sent=0",
        "# Slurm's time-limit warning reaches this shell (--signal=B:USR1@N); scancel and requeue send TERM: both go",
        "# on to the script, whose trainer saves and stops (ptflow.cluster.preempt). A signal that comes before the",
        "# script has a pid is sent as soon as it has one.",
        "forward() {",
        '  if [[ -z "$child" ]]; then pending=$1; return; fi',
        '  kill -"$1" "$child" 2>/dev/null || true',
        "  if [[ $1 == USR1 ]]; then sent=$SECONDS; fi",
        "}",
        "trap 'forward TERM' TERM",
        "# the script is born ignoring the warning: the shell ignores it across the fork only. A subshell's own",
        "# trap '' would leave the child a moment after the fork with the default action, which kills it (seen in CI",
        "# as exit 138: a warning just after the start). A warning inside those few microseconds is not kept.",
        "trap '' USR1",
        f"{run} &",
        "trap 'warned=1; forward USR1' USR1",
        "child=$!",
        'if [[ -n "$pending" ]]; then forward "$pending"; fi',
    ]
    if internal_timeout:
        lines += [f"internal_timeout={int(internal_timeout)}", f"kill_after={int(kill_after)}"]
    lines += ['while kill -0 "$child" 2>/dev/null; do']
    if internal_timeout:
        lines += [
            "  if ((SECONDS >= internal_timeout + kill_after)); then",
            '    echo "ptflow: the trainer did not stop ${kill_after} s after the internal timeout; killing it" >&2',
            '    kill -KILL "$child" 2>/dev/null || true',
            "  elif ((SECONDS >= internal_timeout && !warned)); then",
            '    echo "ptflow: internal timeout (${internal_timeout} s): asking the trainer to save and stop" >&2',
            "    warned=1",
            "    forward USR1",
            "  fi",
        ]
    lines += [
        "  # the warning again every poll until the script ends: a trainer still starting up ignores it (no handler",
        "  # yet). Never twice at once: a trainer that stops on the first must not get the second while it exits.",
        f"  if ((warned && SECONDS - sent >= {int(poll)})); then forward USR1; fi",
        "  # a look every second (the job ends within a second of the script), never a wait on the script itself:",
        "  # the one wait below is what returns its exit status, on every bash (a second wait may not know it)",
        "  sleep 1 &",
        '  wait "$!"',
        "done",
        "# the script has ended: its own exit status (bash keeps it until this wait)",
        'wait "$child"',
        'exit "$?"',
    ]
    with atomic_path(path) as tmp:
        Path(tmp).write_text("\n".join(lines) + "\n")
        os.chmod(tmp, 0o755)
    return Path(path)


def internal_timeout_seconds(runtime_minutes, fraction: float | None) -> int | None:
    if not fraction or not runtime_minutes:
        return None
    return int(float(runtime_minutes) * 60 * fraction)


def batch_signal_options(options: list[str]) -> list[str]:
    """The request's ``--signal=USR1@N`` (job steps only) as ``--signal=B:USR1@N``: the rule's script runs in the
    batch step of a supervised job, and the batch shell forwards the warning to it."""
    return [o.replace("--signal=", "--signal=B:", 1) if o.startswith("--signal=") and ":" not in o else o
            for o in options]  # fmt: skip


class DriverGone(RuntimeError):
    """The Snakemake driver that ran this supervisor is gone: the job is left to the next driver to adopt."""


def driver_watch(workdir: str | Path):
    """A check that raises DriverGone once the driver holding ``workdir`` (``ownership.DriverLock``) has died; a
    no-op when no live driver holds it now (a supervisor started by hand, or a driver on another host)."""
    lock = ownership.DriverLock(workdir)
    holder = lock.live_holder()
    if holder is None:
        return lambda: None

    def check() -> None:
        if not lock.alive(holder):
            raise DriverGone(f"the driver ({holder.describe()}) is gone")

    return check


@dataclass(frozen=True)
class SupervisedJob:
    """What the supervisor submits: the rule's ``script`` with its ``request`` (at the rule's ``attempt``), named and
    commented as the rule's job (``rule``, ``wildcards``: ``ptflow.cluster.ownership``), its ``results_dir`` (the
    cell's, where ``slurm/`` and ``status.json`` go), the workflow's ``workdir``, and how often it is resubmitted
    after infrastructure failures and after saved stops (at the site's internal timeout, a fraction of the
    request's time limit)."""

    script: str
    request: Request
    rule: str
    wildcards: list[str]
    results_dir: Path
    max_retries: int
    attempt: int = 1
    workdir: str | Path = "."
    max_resumes: int = 10
    internal_timeout_fraction: float | None = None

    @property
    def jobs_dir(self) -> Path:
        return Path(self.results_dir) / "slurm"


def supervise(job: SupervisedJob, companion=None, log=print) -> dict:
    """Submit the rule's script as a job with its request, resubmit it after infrastructure failures and saved
    stops, and return the final status dict.

    ``companion``: a helper job's manager with ``prepare(attempt) -> (sbatch options, env)`` (called before each
    submission) and ``finish(log)`` (on every exit) — the SkyRL server (``ptflow.launch.skyrl``)."""
    from ptflow.cluster import infra_retry

    jobs_dir = job.jobs_dir
    jobs_dir.mkdir(parents=True, exist_ok=True)
    batch, options = _batch_and_options(job, log)
    current: dict = {}

    def log_of(job_id: str) -> str:
        out = jobs_dir / f"train-{job_id}.out"
        return out.read_text(errors="replace") if out.is_file() else ""

    submit_job = infra_retry.sbatch_submitter(batch, options, prepare=companion.prepare if companion else None)

    def submit(n: int, exclude: list[str]) -> str:
        current["job"] = submit_job(n, exclude)
        return current["job"]

    done = driver_gone = False
    try:
        with signals_raise():
            result = infra_retry.run_with_retries(
                submit,
                log_of,
                Path(job.results_dir),
                max_retries=job.max_retries,
                max_resumes=job.max_resumes,
                stopped=lambda job_id: preempt.stop_marker(jobs_dir, job_id),
                wait=_waiter(driver_watch(job.workdir), log),
                log=log,
            )
        done = True
        return result
    except DriverGone as exc:
        driver_gone = True  # nothing to cancel: the job goes on (with its helper job) and the next driver adopts it
        log(f"supervisor: {exc}; leaving job {current.get('job')} running for the next run to adopt")
        raise
    finally:
        if not (done or driver_gone) and current.get("job"):
            log(f"supervisor stopped: scancel job {current['job']}")
            with contextlib.suppress(slurm.SlurmUnavailable):
                slurm.cancel([current["job"]])
        if companion is not None and not driver_gone:
            companion.finish(log)


def _batch_and_options(job: SupervisedJob, log) -> tuple[Path, list[str]]:
    """The batch script (with the internal timeout of the request's time limit) and its sbatch flags."""
    runtime = job.request.scaled(job.attempt).get("runtime")
    internal = internal_timeout_seconds(runtime, job.internal_timeout_fraction)
    # until a minute before Slurm's own limit: the trainer's save gets what the internal timeout left
    kill_after = max(60, int(float(runtime) * 60) - internal - 60) if internal and runtime else 60
    batch = render_batch_script(
        job.jobs_dir / "train.sbatch", job.script, internal_timeout=internal, kill_after=kill_after
    )
    name = ownership.owned_job_name(job.workdir)
    comment = ownership.job_comment(job.rule, job.wildcards)
    options = job.request.sbatch_options(job_name=name, output=str(job.jobs_dir / "train-%j.out"), attempt=job.attempt)
    options = batch_signal_options(options) + [f"--comment={comment}"]
    log(
        f"supervising {comment}: sbatch {shlex.join(options)} {batch} (up to {job.max_retries} resubmissions after "
        f"infrastructure failures, {job.max_resumes} after saved stops)"
    )
    return batch, options


def _waiter(check_driver, log):
    """``wait(job_id)``: the job's record once it has ended, asking Slurm every ``POLL_SECONDS`` and bearing with a
    Slurm that does not answer for ``SLURM_PATIENCE_SECONDS``; ``check_driver`` raises once the driver is gone."""

    def wait(job_id: str) -> slurm.JobRecord:
        unanswered_since = None
        while True:
            try:
                rec = slurm.job_state(job_id)
                unanswered_since = None
            except slurm.SlurmUnavailable as exc:
                # a busy slurmctld times out now and then: the job goes on, so the supervisor waits for it too
                now = time.monotonic()
                if unanswered_since is None:
                    unanswered_since = now
                    log(f"supervisor: Slurm did not answer ({exc}); asking again for {SLURM_PATIENCE_SECONDS} s")
                elif now - unanswered_since > SLURM_PATIENCE_SECONDS:
                    raise slurm.SlurmUnavailable(
                        f"Slurm has not answered for {SLURM_PATIENCE_SECONDS} s about job {job_id} ({exc}); the "
                        "supervisor cancels it — check the controller (scontrol ping) and run the workflow again: "
                        "the training resumes from its last checkpoint"
                    ) from exc
                rec = None
            if rec and rec.base_state in slurm.TERMINAL_STATES:
                return rec
            check_driver()
            time.sleep(POLL_SECONDS)

    return wait
