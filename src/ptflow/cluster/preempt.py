"""Time-limit warnings, stop signals and resumable training.

The warning: a site asks Slurm for it with ``warn_seconds`` in a stage request, which becomes
``sbatch --signal=USR1@<warn_seconds>`` (no ``B:``: the warning goes to every process of every job step, not to the
batch shell). How it reaches a trainer and nothing else, in every stage:

- every ptflow process in a job ignores USR1 (``ptflow.jobenv.ignore_time_limit_warning``: the Snakefile does it
  for Snakemake's own processes, so the plugin's job-step Snakemake no longer dies of it, and every rule script
  does it through ``rule_log``); children inherit the ignored signal, so an evaluation, a cache copy or an agent CLI
  just goes on;
- a trainer that can save catches it (:class:`SaveOnWarning`): ptflow's TRL trainers and agent cells save at the
  next step boundary and stop with :class:`StoppedToResume`; a process that sits between the step and the trainer
  (a re-exec into a container, the supervised batch script) forwards it;
- verl and NeMo-RL have no signal hook: the launcher runs them with USR1 ignored and they get the same deadline
  through their own options (:func:`deadline_settings`).

Resuming: TRL trainers save every ``save_freq`` steps and on the warning into a :class:`ResumeDir` on scratch
(``<checkpoints>/<model>/<eval>/.<agent>.resume/<config hash>/step_<n>``, each promoted whole from the attempt's
own staging dir). A requeued job (``scontrol requeue``, ``--requeue`` sites), a Snakemake retry, a supervised
resubmission or a later run resumes from the newest step with optimizer, scheduler and RNG state
(transformers' ``resume_from_checkpoint``); verl resumes with ``resume_mode=auto``, NeMo-RL from its checkpoint dir.
A stop that saved first ends the job with :data:`RESUME_EXIT` and a marker file (:func:`write_stop_marker`), so a
supervisor can tell "saved, resubmit me" from a failure without asking sacct.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from ptflow.files import write_json_atomic
from ptflow.jobenv import WARNING_SIGNAL

# A trainer that saved and stopped before the end (warning, SIGTERM, internal timeout) exits with this (EX_TEMPFAIL):
# "try again, it resumes". Snakemake treats it as a failure (its retry resumes); a supervisor reads the marker.
RESUME_EXIT = 75
STOP_MARKER = "stopped-{job}.json"


class StoppedToResume(RuntimeError):
    """The trainer saved its state and stopped before finishing (time-limit warning, SIGTERM, internal timeout);
    the next attempt resumes from what it saved."""

    def __init__(self, message: str, *, step: int | None = None, reason: str = "warning"):
        super().__init__(message)
        self.step = step
        self.reason = reason


_SIGNAL_OPTION = re.compile(r"--signal=(?:[BR]+:)?(?:SIG)?(\w+)@(\d+)")


def warning_seconds(slurm_extra: str | None) -> int | None:
    """The warning a job asked for, read back from its own sbatch flags (one place holds the number: the site)."""
    m = _SIGNAL_OPTION.search(slurm_extra or "")
    if not m:
        return None
    if m.group(1).upper() != WARNING_SIGNAL:
        raise ValueError(
            f"slurm_extra asks for --signal={m.group(1)}; ptflow's trainers save on {WARNING_SIGNAL} — use "
            "warn_seconds in the site request instead of a hand-written --signal"
        )
    return int(m.group(2))


@dataclass(frozen=True)
class Deadline:
    """When Slurm ends the job (epoch seconds) and how long before it the trainer must have saved."""

    end: float
    warn_seconds: int

    @property
    def save_by(self) -> float:
        return self.end - self.warn_seconds

    def remaining_to_save(self, now: float | None = None) -> int:
        return max(int(self.save_by - (time.time() if now is None else now)), 0)


def job_deadline(job_id: str, warn_seconds: int | None) -> Deadline | None:
    """The running job's deadline from ``scontrol show job`` (EndTime moves when a requeued job restarts)."""
    if not warn_seconds:
        return None
    from ptflow.cluster import slurm

    end = slurm.job_end_time(job_id)
    return None if end is None else Deadline(end, int(warn_seconds))  # None: no time limit, nothing to warn about


def nemo_duration(seconds: int) -> str:
    """NeMo-RL's ``checkpoint_must_save_by`` format, DD:HH:MM:SS."""
    days, rest = divmod(max(int(seconds), 0), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{days:02d}:{hours:02d}:{minutes:02d}:{secs:02d}"


def deadline_settings(trainer: str, deadline: Deadline | None, now: float | None = None) -> tuple[dict, dict]:
    """(environment, trainer settings) that make verl or NeMo-RL save before the deadline; empty without one."""
    if deadline is None:
        return {}, {}
    if trainer == "verl":
        return (
            {"MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP": str(int(deadline.end))},
            {"trainer.esi_redundant_time": deadline.warn_seconds},
        )
    if trainer == "nemo":
        return {}, {"checkpoint_must_save_by": nemo_duration(deadline.remaining_to_save(now))}
    raise ValueError(f"no deadline recipe for trainer {trainer!r}; known: verl, nemo")


def stopped_by_deadline(deadline: Deadline | None, now: float | None = None) -> bool:
    """Did a trainer that ended normally stop because of its save deadline rather than finish? NeMo-RL stops a
    step's time early (it predicts the next step), so anything within one warning period before save-by counts;
    a run that truly finished that late costs one retry, which resumes at the last step and ends at once."""
    if deadline is None:
        return False
    return (time.time() if now is None else now) >= deadline.save_by - deadline.warn_seconds


class SaveOnWarning:
    """``with SaveOnWarning() as warn:`` — USR1 (Slurm's time-limit warning; with ``term=True`` also SIGTERM, what a
    requeue, a preemption or scancel sends first) sets ``warn.requested``; the training loop saves at its next step
    boundary (never inside the handler, where a half-written checkpoint could result). The previous handlers are
    restored on exit."""

    def __init__(self, signum: int = getattr(signal, f"SIG{WARNING_SIGNAL}"), *, term: bool = False):
        self.signals = (signum, signal.SIGTERM) if term else (signum,)
        self.signum = signum
        self.requested = False
        self.received_at: float | None = None
        self.received: int | None = None
        self._previous: dict = {}

    @property
    def reason(self) -> str:
        if self.received is None:
            return "none"
        return "the time-limit warning" if self.received == self.signum else signal.Signals(self.received).name

    def _handle(self, signum, frame) -> None:
        self.requested = True
        self.received_at = time.time()
        self.received = signum

    def __enter__(self) -> SaveOnWarning:
        for sig in self.signals:
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)


_STEP = re.compile(r"step_(\d+)")


def newest_step(checkpoint_dir: str | Path) -> tuple[int, Path] | None:
    """(step, path) of the highest complete ``step_<n>`` under ``checkpoint_dir`` (written via a temp name and a
    rename, so a ``step_<n>`` that exists is complete), or None."""
    root = Path(checkpoint_dir)
    steps = [(int(m.group(1)), p) for p in root.glob("step_*") if (m := _STEP.fullmatch(p.name)) and p.is_dir()]
    return max(steps) if steps else None


def attempt_id() -> str:
    """Who writes: the Slurm job (and this process, which differs after a requeue) or this host's process."""
    job = os.environ.get("SLURM_JOB_ID")
    return f"{socket.gethostname()}-{os.getpid()}" + (f"-job{job}" if job else "")


@dataclass(frozen=True)
class ResumeDir:
    """A training's resume state on scratch: complete ``step_<n>`` checkpoints, each written by one attempt in its
    own staging dir (``.attempt-<id>``) and promoted with one rename, and ``attempts.json`` (who ran when, from
    which step). Keyed by the training's config hash, so a changed config never resumes a stale state."""

    root: Path

    @classmethod
    def for_checkpoint(cls, checkpoint_dir: str | Path, config_hash: str) -> ResumeDir:
        ckpt = Path(checkpoint_dir).resolve()
        return cls(ckpt.parent / f".{ckpt.name}.resume" / config_hash)

    @property
    def cell_root(self) -> Path:
        """Every config's resume state of this cell (removed once the cell's checkpoint is in place)."""
        return self.root.parent

    @property
    def kept_workspace(self) -> Path:
        """An agent cell's task dir as the agent left it, for the judge: beside the resume state, not inside it
        (that is removed once the checkpoint is in place)."""
        return self.cell_root.with_name(self.cell_root.name.removesuffix(".resume") + ".workspace")

    def newest(self) -> tuple[int, Path] | None:
        return newest_step(self.root)

    def attempt_dir(self, attempt: str | None = None) -> Path:
        path = self.root / f".attempt-{attempt or attempt_id()}"
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        return path

    def promote_step(self, src: str | Path, step: int, keep: int = 2) -> Path | None:
        """Make ``src`` (a finished checkpoint of this attempt) ``step_<step>``; keep the newest ``keep``. Returns
        the step dir, or None when another attempt promoted that step first (its copy is as good)."""
        dest = self.root / f"step_{int(step)}"
        try:
            os.replace(src, dest)
        except OSError:
            if not dest.is_dir():
                raise
            shutil.rmtree(src, ignore_errors=True)
            return None
        steps = sorted((int(m.group(1)), p) for p in self.root.glob("step_*") if (m := _STEP.fullmatch(p.name)))
        for _, old in steps[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
        return dest

    @property
    def attempts_file(self) -> Path:
        return self.root / "attempts.json"

    def attempts(self) -> list[dict]:
        try:
            return json.loads(self.attempts_file.read_text())
        except (OSError, ValueError):
            return []

    def record_attempt(self, entry: dict) -> list[dict]:
        """Add one attempt's entry, or update the fields given (by ``id``); the whole list, written atomically."""
        history = self.attempts()
        old = next((a for a in history if a.get("id") == entry["id"]), {})
        history = [a for a in history if a.get("id") != entry["id"]] + [{**old, **entry}]
        history.sort(key=lambda a: a.get("started", 0))
        self.root.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.attempts_file, history)
        return history

    def clear(self) -> None:
        """Once the cell's checkpoint is promoted: the resume state (optimizer included: large) is not needed."""
        shutil.rmtree(self.cell_root, ignore_errors=True)


def write_stop_marker(directory: str | Path, job_id: str | None, info: dict) -> Path:
    """``stopped-<job>.json``: this job saved and stopped to be resumed (read by ``ptflow.cluster.infra_retry``)."""
    path = Path(directory) / STOP_MARKER.format(job=job_id or "local")
    write_json_atomic(path, {"time": time.time(), **info})
    return path


def stop_marker(directory: str | Path, job_id: str) -> dict | None:
    try:
        return json.loads((Path(directory) / STOP_MARKER.format(job=job_id)).read_text())
    except (OSError, ValueError):
        return None
