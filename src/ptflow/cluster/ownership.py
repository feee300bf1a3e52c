"""Which Slurm jobs and which driver belong to a working directory.

- Jobs. The slurm executor plugin names every job of one Snakemake run after the run's UUID and comments it
  ``rule_<rule>_wildcards_<wildcard values joined by _>``. Jobs ptflow submits itself (a supervised train job, its
  resubmissions, a SkyRL server) are named :func:`owned_job_name` of the working directory, a name every run
  of that directory shares, and carry the same comment as the plugin would give the rule's job, plus ``#<role>`` for
  a helper job (:func:`job_comment`). ``ptflow status``/``cancel`` and a restarted driver find them all with one
  ``squeue --name`` of the run UUIDs (from Snakemake's logs) and this name.
- The driver. :class:`DriverLock` is ``.ptflow/driver.lock`` in the working directory: the pid, host, start time and
  command line of the Snakemake driver running there. Snakemake's own locks do not keep a second driver out (after
  ``snakemake --unlock`` both would run and submit the same trainings); this one is checked for liveness (same host:
  the pid with the same start time; another host: a heartbeat younger than :data:`HEARTBEAT_STALE` seconds).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ptflow.files import write_json_atomic

ROLE_SEPARATOR = "#"  # never in a rule name or wildcard value (ids are letters, digits, _ . + -)
LOCK_FILE = Path(".ptflow") / "driver.lock"
HEARTBEAT_SECONDS = 30
HEARTBEAT_STALE = 180


def owned_job_name(workdir: str | Path) -> str:
    """The job name of every job ptflow submits itself from ``workdir`` (the same for all its runs)."""
    digest = hashlib.sha1(str(Path(workdir).resolve()).encode()).hexdigest()[:12]
    return f"ptflow-{digest}"


def wildcard_string(values) -> str:
    """The plugin's wildcard string: the values in pattern order joined by ``_`` (``/`` made ``_``)."""
    return "_".join(str(v) for v in values).replace("/", "_")


def job_comment(rule: str, wildcard_values, role: str | None = None) -> str:
    """The plugin's comment for the rule's job (``role`` None: the job doing the rule's work), or a helper job's."""
    wc = wildcard_string(wildcard_values)
    base = f"rule_{rule}_wildcards_{wc}" if wc else f"rule_{rule}"
    return f"{base}{ROLE_SEPARATOR}{role}" if role else base


def split_comment(comment: str) -> tuple[str, str | None]:
    """(the rule job's comment, role or None)."""
    base, sep, role = (comment or "").partition(ROLE_SEPARATOR)
    return base, (role if sep else None)


# ---- the driver lock ----


def _start_time(pid: int) -> str | None:
    """The process' start time in clock ticks since boot (/proc/<pid>/stat field 22): tells a reused pid apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


@dataclass
class Holder:
    pid: int
    host: str
    started: str
    command: str
    proc_start: str | None = None
    heartbeat: float = 0.0

    def describe(self) -> str:
        return f"pid {self.pid} on host {self.host} (started {self.started}: {self.command[:160]})"


class DriverLocked(RuntimeError):
    """Another live driver holds the working directory."""


class DriverLock:
    def __init__(self, workdir: str | Path):
        self.workdir = Path(workdir).resolve()
        self.path = self.workdir / LOCK_FILE
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def holder(self) -> Holder | None:
        try:
            data = json.loads(self.path.read_text())
            return Holder(**{k: data.get(k) for k in Holder.__dataclass_fields__ if k in data})
        except (OSError, ValueError, TypeError):
            return None

    def alive(self, holder: Holder, now: float | None = None) -> bool:
        if holder.host == socket.gethostname():
            return holder.proc_start is not None and _start_time(holder.pid) == holder.proc_start
        return (time.time() if now is None else now) - (holder.heartbeat or 0) < HEARTBEAT_STALE

    def live_holder(self) -> Holder | None:
        """The driver holding the directory now, or None (no lock, or the holder is gone)."""
        holder = self.holder()
        return holder if holder is not None and self.alive(holder) else None

    def acquire(self, command: str) -> Holder:
        """Take the directory for this process; DriverLocked naming the holder if another live driver has it. The
        same process taking it again (a re-exec after adopting earlier jobs) is no conflict."""
        holder = self.live_holder()
        me = os.getpid()
        if holder is not None and not (holder.pid == me and holder.host == socket.gethostname()):
            raise DriverLocked(
                f"another ptflow driver runs in {self.workdir}: {holder.describe()}; wait for it to end or stop it "
                f"(kill {holder.pid} on {holder.host}) — `snakemake --unlock` does not stop it"
            )
        mine = Holder(me, socket.gethostname(), time.strftime("%Y-%m-%dT%H:%M:%S%z"), command, _start_time(me))
        self._write(mine)
        self._start_heartbeat(mine)
        return mine

    def _write(self, holder: Holder) -> None:
        holder.heartbeat = time.time()
        write_json_atomic(self.path, holder.__dict__)

    def _start_heartbeat(self, holder: Holder) -> None:
        if self._thread is not None:
            return

        def beat() -> None:
            while not self._stop.wait(HEARTBEAT_SECONDS):
                current = self.holder()
                if current is None or current.pid != holder.pid or current.host != holder.host:
                    return  # released, or taken over after we were declared gone
                self._write(holder)

        self._thread = threading.Thread(target=beat, name="ptflow-driver-heartbeat", daemon=True)
        self._thread.start()

    def release(self) -> None:
        self._stop.set()
        holder = self.holder()
        if holder is not None and holder.pid == os.getpid() and holder.host == socket.gethostname():
            self.path.unlink(missing_ok=True)
