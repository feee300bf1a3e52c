"""The Snakemake driver of a working directory: one at a time, and a restarted one never duplicates a running job.

Called from the workflow's ``onstart`` (``common.smk``: Snakemake runs it only in a real run's driver, after the
DAG is built and before any job is submitted; never in a dry run or a job), so it covers every way a run is started
— ``snakemake`` typed by hand, ``make demo``, ``ptflow remote run`` — with no wrapper to forget:

1. :class:`ptflow.cluster.ownership.DriverLock` is taken: a second driver while the first is alive (after a
   ``snakemake --unlock`` by mistake) stops here with one line naming the process and host that hold the directory.
2. On a Slurm site, the live jobs of earlier runs of this directory are found: the plugin's jobs by the run UUIDs in
   ``.snakemake/log`` and ptflow's own (supervised train jobs, SkyRL servers) by the directory's job name; their
   comments name rule and wildcards (``ownership``). Those that do work this run planned are **adopted** (default,
   config ``earlier_jobs: wait``): the driver waits for them, records every planned job whose outputs they completed
   as done (Snakemake's own metadata, as the dead driver would have), and re-runs this same command so Snakemake
   plans again with those outputs. ``earlier_jobs: cancel`` scancels them and waits until they are gone instead.
   Jobs of earlier runs that this run did not plan are left alone (named in the log).

Between the two, the **preflight** (``ptflow.cluster.preflight``, and the cluster limits read for the driver's caps,
``ptflow.cluster.limits``): a :class:`~ptflow.cluster.preflight.PreflightError` or
:class:`~ptflow.cluster.limits.LimitsError` **refuses** the run. The refusal prints its problems alone, through
Snakemake's logger (no traceback: they name what to fix), gives the directory back and ends the process with exit status
:data:`PREFLIGHT_REFUSED` (78, ``EX_CONFIG`` of ``sysexits.h``), so a script or ``ptflow remote run --wait`` can tell
"refused, nothing submitted" from a run that failed (Snakemake's 1). It is a ``SystemExit``, which Snakemake 9 does not
catch: its own locks are released on the way out and it prints nothing more (tests/unit/test_snakemake_contract.py pins
that).

Why the re-run: Snakemake fixed its plan before ``onstart``; planned jobs whose outputs appear later would still run.
Why not Snakemake alone: a new run has a new run UUID and does not see the old run's jobs (the Slurm plugin names the
jobs it submits after its run's UUID and follows only those).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from ptflow.cluster import ownership, slurm
from ptflow.ops.status import read_run_logs

EARLIER_JOBS = ("wait", "cancel")
PREFLIGHT_REFUSED = 78  # exit status of a run the preflight refused, nothing submitted (sysexits.h EX_CONFIG)
POLL_SECONDS = 10
READOPT_ENV = "PTFLOW_ADOPTED"  # set for the re-run after adopting, so its log says why it started again


def earlier_run_names(workdir: Path) -> list[str]:
    """Job names of every run of this directory: the run UUIDs Snakemake logged, and ptflow's own name."""
    names = [r.run_id for r in read_run_logs(workdir) if r.run_id]
    return sorted(set(names)) + [ownership.owned_job_name(workdir)]


def live_jobs(names: list[str], query=slurm.run_jobs) -> list[slurm.JobRecord]:
    jobs = query(names, "now-30days")
    return [j for j in jobs.values() if j.base_state and j.base_state not in slurm.TERMINAL_STATES]


def plugin_comment(job) -> str:
    """The comment the slurm plugin gives this Snakemake job (the plugin's own wildcard string)."""
    from snakemake_executor_plugin_slurm.utils import get_job_wildcards

    wc = get_job_wildcards(job)
    return f"rule_{job.name}_wildcards_{wc}" if wc else f"rule_{job.name}"


def job_comments(job) -> set[str]:
    """Comments under which earlier runs may have submitted this job: the plugin's, and a supervised train job's
    (its rule here is ``train_supervised``, its Slurm job says ``train``)."""
    out = {plugin_comment(job)}
    if job.name == "train_supervised":
        out.add(ownership.job_comment("train", list(job.wildcards)))
    return out


class Adoption:
    """What :func:`adopt` found and did; ``rerun`` says whether the driver must plan again."""

    def __init__(self):
        self.adopted: list[str] = []
        self.taken: list[str] = []
        self.left: list[str] = []
        self.cancelled: list[str] = []

    @property
    def rerun(self) -> bool:
        return bool(self.taken)


def adopt(
    workdir: Path,
    planned: list,
    *,
    mode: str = "wait",
    mark_done: Callable[[object], None],
    outputs_exist: Callable[[object], bool],
    query=slurm.run_jobs,
    poll: float = POLL_SECONDS,
    log=print,
) -> Adoption:
    """Wait for (or cancel) the live jobs of earlier runs that do work of ``planned`` (Snakemake jobs). For each
    planned job whose outputs exist once they ended, ``mark_done(job)``."""
    if mode not in EARLIER_JOBS:
        raise ValueError(f"config error at earlier_jobs: {mode!r} is not one of {', '.join(EARLIER_JOBS)}")
    result = Adoption()
    names = earlier_run_names(workdir)
    by_comment: dict[str, object] = {}
    for job in planned:
        for c in job_comments(job):
            by_comment[c] = job
    live = live_jobs(names, query)
    mine = [j for j in live if ownership.split_comment(j.comment)[0] in by_comment]
    result.left = [j.id for j in live if j not in mine]
    if result.left:
        log(
            f"ptflow: {len(result.left)} job(s) of earlier runs still run but do no work of this run; left alone: "
            + ", ".join(f"{j.id} ({j.comment})" for j in live if j not in mine)
        )
    if not mine:
        return result
    described = ", ".join(f"{j.id} ({j.comment}, {j.base_state})" for j in mine)
    if mode == "cancel":
        log(f"ptflow: earlier_jobs=cancel: scancel {len(mine)} job(s) of earlier runs: {described}")
        slurm.cancel([j.id for j in mine])
        result.cancelled = [j.id for j in mine]
    else:
        log(
            f"ptflow: {len(mine)} job(s) of earlier runs are doing work this run planned; waiting for them instead "
            f"of submitting it again: {described}"
        )
    result.adopted = [j.id for j in mine]
    touched = {id(by_comment[ownership.split_comment(j.comment)[0]]): by_comment[ownership.split_comment(j.comment)[0]]
               for j in mine}  # fmt: skip
    while True:
        still = [j for j in live_jobs(names, query) if ownership.split_comment(j.comment)[0] in by_comment]
        for j in still:  # a supervisor of an earlier run may have resubmitted: follow it too
            touched.setdefault(id(by_comment[ownership.split_comment(j.comment)[0]]),
                               by_comment[ownership.split_comment(j.comment)[0]])  # fmt: skip
        if not still:
            break
        time.sleep(poll)
    if mode == "cancel":
        log("ptflow: the earlier jobs are gone; this run does their work")
        return result
    for job in touched.values():
        if outputs_exist(job):
            mark_done(job)
            result.taken.append(str(job))
    log(
        f"ptflow: the adopted jobs ended; {len(result.taken)} planned job(s) completed by them are taken as done"
        + (f": {', '.join(result.taken)}" if result.taken else " (the others run again now)")
    )
    return result


# ---- while the run goes on: never silent while Slurm keeps it waiting; SIGTERM stops it as Ctrl-C does ----

WATCH_SECONDS = 5.0  # how often the waits of the patient Slurm commands are read
REPEAT_SECONDS = 60.0  # how often a wait that goes on is said again

_WHY = {
    "controller": "slurmctld does not answer",
    "submit cap": "the submit cap is full",
    "transient": "sbatch failed but the job is valid",
}


def read_waits(state_dir: Path) -> list[dict]:
    """What the patient Slurm commands (ptflow.cluster.patience) are waiting for now; a vanished file is skipped."""
    import json

    from ptflow.cluster.patience import is_stale

    out, now = [], time.time()
    for path in sorted(Path(state_dir).glob("*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if is_stale(record, now):
            path.unlink(missing_ok=True)
        else:
            out.append(record)
    return out


def describe_waits(waits: list[dict], now: float) -> str:
    """One line: per reason, for how long and which commands wait."""
    by_why: dict[str, list[dict]] = {}
    for w in waits:
        by_why.setdefault(w.get("why", "?"), []).append(w)
    parts = []
    for why, group in sorted(by_why.items()):
        since = min(w.get("since", now) for w in group)
        names = sorted({w.get("command", "?") for w in group})
        detail = sorted({w.get("detail", "") for w in group} - {""})
        parts.append(
            f"{_WHY.get(why, why)} for {now - since:.0f} s ({', '.join(detail)}); waiting: "
            + ", ".join(f"{n} x{sum(w.get('command') == n for w in group)}" for n in names)
        )
    return "ptflow: waiting on Slurm: " + "; ".join(parts)


class SlurmWatch:
    """A daemon thread that says what the run waits on Slurm for, when it starts, every minute while it lasts, and
    when Slurm answers again."""

    def __init__(self, state_dir: Path, log=print, every: float = WATCH_SECONDS, repeat: float = REPEAT_SECONDS):
        import threading

        self.state_dir, self.log, self.every, self.repeat = Path(state_dir), log, every, repeat
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ptflow-slurm-watch", daemon=True)

    def start(self) -> SlurmWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        said_kinds: frozenset = frozenset()
        said_at = 0.0
        began: float | None = None
        while not self._stop.wait(self.every):
            now = time.time()
            waits = read_waits(self.state_dir)
            kinds = frozenset(w.get("why") for w in waits)
            if waits:
                began = began or min(w.get("since", now) for w in waits)
                if kinds != said_kinds or now - said_at >= self.repeat:
                    self.log(describe_waits(waits, now))
                    said_kinds, said_at = kinds, now
            elif said_kinds:
                self.log(f"ptflow: Slurm answers again; the run goes on (it waited {now - (began or now):.0f} s)")
                said_kinds, began = frozenset(), None


def stop_on_sigterm(log=print) -> None:
    """SIGTERM stops the driver as Ctrl-C does. Snakemake's own handler only marks a graceful stop and waits for every
    running job to end (hours of training), which looks like SIGTERM ignored; Ctrl-C (KeyboardInterrupt) makes it
    cancel the run's jobs and exit."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return

    def handler(signum, frame):
        log("ptflow: SIGTERM: stopping as on Ctrl-C (the run's Slurm jobs are cancelled)")
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


WATCH: SlurmWatch | None = None


def refuse(problem: Exception) -> NoReturn:
    """End the driver for a refusal: its problems alone on Snakemake's log, exit status :data:`PREFLIGHT_REFUSED`."""
    from snakemake.logging import logger

    from ptflow.cluster.preflight import PreflightError, format_problems

    logger.error(str(problem) if isinstance(problem, PreflightError) else format_problems([str(problem)]))
    raise SystemExit(PREFLIGHT_REFUSED)


def on_start(workflow, *, scheduler: str, earlier_jobs: str = "wait", log=print, preflight=lambda: None) -> None:
    """The driver's start (``onstart``): take the directory, run the preflight (a refusal ends the process with
    :data:`PREFLIGHT_REFUSED`), adopt earlier runs' jobs, re-run if they did work."""
    from snakemake.exceptions import WorkflowError

    workdir = Path.cwd()
    lock = ownership.DriverLock(workdir)
    try:
        lock.acquire(" ".join(sys.argv))
    except ownership.DriverLocked as exc:
        raise WorkflowError(str(exc)) from None
    from ptflow.cluster.limits import LimitsError
    from ptflow.cluster.preflight import PreflightError

    try:
        preflight()
    except (PreflightError, LimitsError) as exc:
        lock.release()
        refuse(exc)
    if os.environ.get(READOPT_ENV):
        log(f"ptflow: planning again after adopting earlier jobs ({os.environ[READOPT_ENV]})")
    if scheduler != "slurm":
        return
    stop_on_sigterm(log)
    from ptflow.cluster import patience

    global WATCH
    state = os.environ.get(patience.STATE_ENV)
    if state and WATCH is None:
        WATCH = SlurmWatch(Path(state), log).start()

    def outputs_exist(job) -> bool:
        return all(Path(str(f)).exists() for f in job.output)

    def mark_done(job) -> None:
        workflow.async_run(workflow.persistence.finished(job))

    try:
        res = adopt(
            workdir,
            list(workflow.dag.needrun_jobs()),
            mode=earlier_jobs,
            mark_done=mark_done,
            outputs_exist=outputs_exist,
            log=log,
        )
    except slurm.SlurmUnavailable as exc:
        log(f"ptflow: could not look for jobs of earlier runs ({exc}); going on")
        return
    if res.rerun:
        # Snakemake planned before these outputs existed: plan again. Our lock stays ours (same pid after exec);
        # Snakemake's own locks are released, as it would on exit.
        workflow.persistence.unlock()
        os.environ[READOPT_ENV] = ",".join(res.adopted)
        log("ptflow: re-running this command so Snakemake plans with the adopted jobs' outputs")
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(sys.executable, [sys.executable, *sys.argv])


def cancel_left(run_log: Path | None, *, query=slurm.run_jobs, cancel=slurm.cancel, log=print) -> list[str]:
    """``onerror`` on a Slurm site: scancel the jobs of this run (named after its run UUID) still live, and name them.

    Snakemake's cancel on Ctrl-C (and on SIGTERM, :func:`stop_on_sigterm`) scancels the executor's ``active_jobs``
    only, and the executor interface empties that list while its status check asks Slurm
    (``RemoteExecutor._wait_for_jobs``, snakemake-interface-executor-plugins): a stop in that window cancelled
    nothing and left the run's jobs running with no driver (seen on CI: a busy cluster's squeue takes seconds). After
    a failure Snakemake waits for the running jobs, so there this finds none."""
    from ptflow.ops.status import read_run_log

    if run_log is None or not Path(run_log).is_file():
        return []
    run_id = read_run_log(Path(run_log)).run_id
    if not run_id:
        return []
    try:
        live = live_jobs([run_id], lambda names, since: query(names, since, accounting=False))
        ids = sorted(j.id for j in live)
        if ids:
            log(f"ptflow: the run stopped with {len(ids)} of its Slurm job(s) still live; scancel {' '.join(ids)}")
            cancel(ids)
    except slurm.SlurmUnavailable as exc:
        log(f"ptflow: could not cancel the stopped run's jobs left live ({exc}): `ptflow cancel` them")
        return []
    return ids


def on_end() -> None:
    """``onsuccess``/``onerror``: give the directory back."""
    if WATCH is not None:
        WATCH.stop()
    ownership.DriverLock(Path.cwd()).release()
