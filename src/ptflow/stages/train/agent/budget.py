"""The agent cell's budget over its attempts: what this attempt finds (``Budget``: the earlier attempts that count,
the time left, an agent that ended by itself), ``on_restart: fresh``'s discarding of them (``budget_of``), this
attempt's agent time and workspace sync while it runs (``AttemptClock``, into the resume dir's ``attempts.json``),
and every attempt as the manifest lists it. A restart does not cost the cell its budget: the time of every attempt
is summed.
"""

from __future__ import annotations

import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ptflow.cluster.preempt import ResumeDir
from ptflow.stages.train.agent.context import AgentCell, AgentEnd
from ptflow.stages.train.agent.task_dir import sync_workspace

TIMEOUT_EXIT = 124  # timeout(1): the command was stopped with TERM
KILLED_EXIT = 137  # 128 + KILL: it ignored TERM for --kill-after
HEARTBEAT_SECONDS = 15  # how often this attempt's agent time is written to attempts.json (what a kill loses)


class AttemptClock:
    """This attempt's agent time, written to ``attempts.json`` every ``HEARTBEAT_SECONDS`` (what a kill can lose)
    and the workspace synced every ``sync_seconds``, from a background thread while the agent runs."""

    def __init__(self, resume: ResumeDir, attempt: str, task_dir: Path, workspace: Path, sync_seconds: float, log):
        self.resume, self.attempt, self.task_dir, self.workspace = resume, attempt, task_dir, workspace
        self.sync_seconds = sync_seconds
        self.log = log
        self.started = time.time()
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ptflow-agent-sync", daemon=True)

    def elapsed(self) -> float:
        return time.time() - self.started

    def beat(self, **fields) -> None:
        agent = {"time_taken": round(self.elapsed(), 3), **fields}
        self.resume.record_attempt({"id": self.attempt, "agent": agent})

    def sync(self, why: str) -> None:
        with self.lock:
            try:
                t0 = time.monotonic()
                counts = sync_workspace(self.task_dir, self.workspace)
                self.resume.record_attempt({"id": self.attempt, "synced": time.time()})
                self.log(
                    f"workspace synced to {self.workspace} ({why}) in {time.monotonic() - t0:.2f} s: "
                    f"{counts['copied']} files copied ({counts['copied_bytes'] / 2**20:.1f} MiB), "
                    f"{counts['linked']} unchanged"
                )
            except OSError as exc:  # a file vanishing mid-copy: the next sync takes it
                self.log(f"workspace sync ({why}) failed: {exc}; keeping the previous copy")

    def _run(self) -> None:
        next_sync = time.monotonic() + self.sync_seconds
        while not self._stop.wait(min(HEARTBEAT_SECONDS, self.sync_seconds)):
            self.beat()
            if time.monotonic() >= next_sync:
                self.sync("periodic")
                next_sync = time.monotonic() + self.sync_seconds

    def __enter__(self) -> AttemptClock:
        self.beat()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def previous_agent_runs(resume: ResumeDir | None, attempt: str | None) -> list[dict]:
    """Earlier attempts that ran the agent (each with ``agent.time_taken``), oldest first."""
    if resume is None:
        return []
    return [a for a in resume.attempts() if a.get("id") != attempt and isinstance(a.get("agent"), dict)]


def _describe_earlier(runs: list[dict]) -> str:
    used = sum(a["agent"]["time_taken"] for a in runs)
    return f"{len(runs)} earlier session{'s' if len(runs) > 1 else ''}, {used / 60:.1f} minutes used"


@dataclass(frozen=True)
class Budget:
    """The cell's budget as this attempt finds it: the restart mode, the whole budget in seconds, and the earlier
    attempts that count (none after an ``on_restart: fresh`` start)."""

    mode: str
    seconds: float
    earlier: list[dict]
    first_attempt: bool

    @property
    def used(self) -> float:
        return sum(a["agent"]["time_taken"] for a in self.earlier)

    @property
    def left(self) -> float:
        return self.seconds - self.used

    @property
    def finished_before(self) -> bool:
        """An earlier attempt's agent ended by itself: it is not run again."""
        return any(a["agent"].get("finished") for a in self.earlier)

    @property
    def described(self) -> str | None:
        return _describe_earlier(self.earlier) if self.earlier else None


def budget_of(agent_cell: AgentCell) -> Budget:
    """The budget this attempt finds: the earlier attempts' agent time counts, unless ``on_restart: fresh`` discards
    them (their workspace removed, each marked discarded in attempts.json)."""
    earlier = previous_agent_runs(agent_cell.resume, agent_cell.attempt)
    first_attempt = not earlier
    if earlier and agent_cell.agent.on_restart == "fresh":
        agent_cell.log(f"on_restart fresh: starting over with the full budget ({_describe_earlier(earlier)} discarded)")
        shutil.rmtree(agent_cell.workspace, ignore_errors=True)
        agent_cell.resume.record_attempt({"id": agent_cell.attempt, "fresh_after": [a["id"] for a in earlier]})
        for a in earlier:
            agent_cell.resume.record_attempt({"id": a["id"], "discarded": True})
        earlier = []
    return Budget(agent_cell.agent.on_restart, agent_cell.agent.hours * 3600, earlier, first_attempt)


def budget_exhausted(budget: Budget, end: AgentEnd) -> bool:
    return end.rc in (TIMEOUT_EXIT, KILLED_EXIT) or (budget.left <= 0 and not budget.finished_before)


def attempt_records(resume: ResumeDir | None) -> list[dict]:
    """Every attempt that ran the agent, as the manifest lists them."""
    runs = previous_agent_runs(resume, None) if resume is not None else []
    return [
        {
            "attempt": a["id"],
            "slurm_job_id": a.get("slurm_job_id"),
            "host": a.get("host"),
            "started": a.get("started"),
            "time_taken": a["agent"]["time_taken"],
            "exit_code": a["agent"].get("exit_code"),
            "ended_by": a["agent"].get("ended_by", "killed (no end recorded)"),
            **({"discarded": True} if a.get("discarded") else {}),  # before an on_restart: fresh start
        }
        for a in runs
    ]
