"""Time-limit warnings and resumable training.

A site asks Slurm for a warning before a training job's end with ``warn_seconds`` in a stage request, which
becomes ``sbatch --signal=USR1@<warn_seconds>`` (no ``B:``: the warning goes to every job step, not to the batch
shell, whose ``sh --wrap`` from the plugin would die of it). Those jobs run their rule body in the batch step
(``ptflow.config.sites``), so Snakemake is not signalled; the trainer runs in a step of its own and is:

- a ptflow driver: :class:`SaveOnWarning` turns USR1 into "save now" at the next step boundary;
- verl or NeMo-RL, which have no signal hook: the launcher runs them with USR1 ignored and they get the same
  deadline through their own options instead (:func:`deadline_settings`): verl saves when the job's end is
  nearer than a step plus ``trainer.esi_redundant_time`` (its ESI check reads the expiry from
  ``MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP``), NeMo-RL saves and stops at
  ``checkpointing.checkpoint_must_save_by`` after its loop starts.

Either way the newest checkpoint is on scratch, and a requeued job (``--requeue`` sites, ``scontrol requeue``)
resumes from it: verl ``resume_mode=auto``, NeMo-RL's checkpoint dir, :func:`newest_step` for ours.
"""

from __future__ import annotations

import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from ptflow.config.sites import WARNING_SIGNAL

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
    from datetime import datetime

    from ptflow.cluster import slurm

    end = slurm.job_fields(job_id).get("EndTime", "")
    try:
        return Deadline(datetime.fromisoformat(end).timestamp(), int(warn_seconds))
    except ValueError:  # "Unknown" (no time limit): nothing to warn about
        return None


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
    """``with SaveOnWarning() as warn:`` — USR1 sets ``warn.requested``; the training loop saves at its next step
    boundary (never inside the handler, where a half-written checkpoint could result). The previous handler is
    restored on exit."""

    def __init__(self, signum: int = getattr(signal, f"SIG{WARNING_SIGNAL}")):
        self.signum = signum
        self.requested = False
        self.received_at: float | None = None
        self._previous = None

    def _handle(self, signum, frame) -> None:
        self.requested = True
        self.received_at = time.time()

    def __enter__(self) -> SaveOnWarning:
        self._previous = signal.signal(self.signum, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        signal.signal(self.signum, self._previous)


_STEP = re.compile(r"step_(\d+)")


def newest_step(checkpoint_dir: str | Path) -> tuple[int, Path] | None:
    """(step, path) of the highest complete ``step_<n>`` under ``checkpoint_dir`` (written via a temp name and a
    rename, so a ``step_<n>`` that exists is complete), or None."""
    root = Path(checkpoint_dir)
    steps = [(int(m.group(1)), p) for p in root.glob("step_*") if (m := _STEP.fullmatch(p.name)) and p.is_dir()]
    return max(steps) if steps else None
