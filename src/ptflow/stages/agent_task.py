"""An agent cell's task, as the train room's cli-agent cell makes and runs it: ``TaskSetup`` (what an attempt's task
dir is made of) and ``AgentTask``, the one interface between the generic cell (``ptflow.stages.train.agent``) and
the two tasks it runs: ptflow's own (``ptflow.stages.train.agent.own_task.OwnTask``) and a PostTrainBench
checkout's as its ``run_task.sh`` makes it (``ptflow.stages.posttrainbench.agent.CheckoutTask``, the adapter).

The cell picks its task once (``ptflow.stages.train.agent.context.agent_task``) and calls it: where the agent's home
is and whether it is removed after the attempt, where the task dir is in the cell's dir and as the agent sees it,
where ptflow's own files go, how the task dir is filled and the prompt made, what is installed in the home and
which command runs, the task dir's bind and the HF view's mount, and the environment the task adds. Both sides
import this module; neither imports the other's room.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ptflow.specs import AgentCliSpec, CellRef


@dataclass(frozen=True)
class TaskSetup:
    """What an attempt's task dir is made of: the agent and cell, the base model as the agent sees it (in its HF
    view), the train split, when the attempt started, the budget that remains (None: all of it), an earlier
    session's ``workspace`` to restore first and its description for the prompt (``earlier``), a PostTrainBench
    cell's checkout, and the environment its keys come from."""

    agent: AgentCliSpec
    cell: CellRef
    base_model: str
    train_parquet: str | None
    started: float
    hours_left: float | None = None
    workspace: Path | None = None
    earlier: str | None = None
    checkout: Path | None = None
    env: dict | None = None  # the environment the cell's keys come from (None: this process's)

    @property
    def hours(self) -> float:
        return self.agent.hours if self.hours_left is None else self.hours_left

    @property
    def deadline(self) -> float:
        return self.started + self.hours * 3600

    @property
    def hours_text(self) -> str:
        """The budget left as the prompts say it: "2 hours", "30 minutes"."""
        return f"{self.hours:g} hours" if self.hours >= 1 else f"{self.hours * 60:g} minutes"


class AgentTask(Protocol):
    """A cell's task as its agent meets it. ``task_files``: ptflow's files in the task dir (written fresh over a
    restored workspace, so removed from it first); ``empty_data_dir``: ptflow's ``data/`` is made even without a
    train split; ``keeps_whole``: the judge reads the workspace whole (``task_dir.keep_workspace``'s ``whole``)."""

    task_files: tuple[str, ...]
    empty_data_dir: bool
    keeps_whole: bool

    def task_dir(self, cell_dir: Path) -> Path:
        """The agent's task dir in the cell's dir (made by the caller)."""
        ...

    def own_dir(self, task_dir: Path) -> Path:
        """Where ptflow's own files of the cell are (prompt.md, task.json, deadline, data/)."""
        ...

    def fill(self, task_dir: Path, setup: TaskSetup) -> None:
        """The task dir's files besides ptflow's own: the evaluation kit and timer."""
        ...

    def prompt(self, task_dir: Path, setup: TaskSetup, train_data: Path | None) -> str:
        """The agent's prompt."""
        ...

    def home(self, task_dir: Path) -> AbstractContextManager[Path]:
        """The agent's home on the host for one attempt (entered around the run; left: removed where it is the
        attempt's own)."""
        ...

    def task_seen(self, task_dir: Path, host_home: Path, home: str, bound: bool) -> str:
        """The task dir as the agent sees it, its home being ``home`` (bound into a container where ``bound``)."""
        ...

    def task_binds(self, task_dir: Path, bound: bool) -> list[str]:
        """The task dir's binds into the agent's container (none where it comes with the bound home)."""
        ...

    def hf_mount(self, host_home: Path, bound: bool) -> str | None:
        """Where the HF view is mounted as the agent sees it (its mount point made in the home); None: at its own
        path."""
        ...

    def install(self, agent: AgentCliSpec, host_home: Path, home: str, runtime_kind: str) -> AgentCliSpec:
        """What the task puts in the agent's home, checked first; the agent to run (its command may be the task's)."""
        ...

    def hub_env(self) -> dict[str, str]:
        """The HF hub's variables for the agent (ptflow's own cells are offline)."""
        ...

    def agent_env(self, agent: AgentCliSpec, prompt: str, home: str, path: str) -> dict[str, str]:
        """The variables the task's own command is given (``agent``: as configured, before :meth:`install`)."""
        ...

    def sandbox_env(self, agent: AgentCliSpec, env: dict[str, str], environ: dict[str, str]) -> dict[str, str]:
        """The agent's environment ``env`` with the task's rule for API keys applied (``environ``: the job's, where
        the values come from): ptflow's key scoping as it is, or the keys the task's sandbox holds in their place.
        Raises (one line) where a key the task requires is not set."""
        ...
