"""One agent cell and one attempt of it, as the other modules of the agent cell read them: ``AgentCell`` (what the
cell reads of the train job's ``Training``, one flat value, with the cell's task that ``agent_task`` picks),
``AttemptContext`` (this attempt's task dir, HF view, trace dir and budget left), ``AgentEnd`` (how the attempt's
agent ended) and ``AgentCellError`` (a cell that cannot run, in one line).

They sit below the cell's steps (``cell``), its task dir (``task_dir``), its budget (``budget``) and the CLI's
launch (``launch``), which all take them: the steps are in ``ptflow.stages.train.agent.cell``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from ptflow.cluster.preempt import ResumeDir
from ptflow.config.spend import CellSpend
from ptflow.specs import AgentCliSpec, CellRef, StageRuntime
from ptflow.stages.agent_task import AgentTask
from ptflow.stages.posttrainbench.agent import CheckoutTask
from ptflow.stages.train.agent.own_task import OWN_TASK
from ptflow.stages.train.cell import Training


def agent_task(agent: AgentCliSpec, checkout: Path | None) -> AgentTask:
    """The cell's task, picked in this one place: a PostTrainBench checkout's as run_task.sh makes it (the
    adapter's), else ptflow's own. The task dir, the home, the launch and the environment call it
    (``ptflow.stages.agent_task``)."""
    return CheckoutTask(checkout) if agent.posttrainbench else OWN_TASK


class AgentCellError(RuntimeError):
    pass


@dataclass(frozen=True)
class AgentCell:
    """One agent cell as its train job runs it, built once from the job's ``Training`` (:meth:`of`): the agent's
    spec, the cell, the train job's runtime (None: this machine), the model it starts from and the train split,
    where the final model goes, the cell's resume state and this attempt's id, the log, the job's CPU threads (the
    agent's OpenMP/MKL threads unless its environment sets them), its spend settings (None: none handed), the
    PostTrainBench cell's checkout (from the rule's marker) and the environment the keys come from (None: this
    process's). A flat value: the agent's steps read these fields, not the job's nested values."""

    agent: AgentCliSpec
    cell: CellRef
    runtime: StageRuntime | None
    start_model: str
    train_parquet: str | None
    out: Path
    resume: ResumeDir | None
    attempt: str | None
    log: Callable[[str], None]
    threads: int | None
    spend: CellSpend | None = None
    checkout: Path | None = None
    env: dict | None = None

    @classmethod
    def of(cls, training: Training, checkout: Path | None = None, env: dict | None = None) -> AgentCell:
        spec, run = training.spec, training.run
        return cls(spec.agent_cli, spec.cell, spec.runtime, run.start_model, run.train_parquet, training.out,
                   training.resume, training.attempt, run.log, run.threads, run.spend, checkout, env)  # fmt: skip

    @cached_property
    def task(self) -> AgentTask:
        """The cell's task (:func:`agent_task`)."""
        return agent_task(self.agent, self.checkout)

    @property
    def workspace(self) -> Path | None:
        """Where the task dir is synced on scratch (what the next attempt continues in)."""
        return self.resume.root / "workspace" if self.resume is not None else None


@dataclass(frozen=True)
class AttemptContext:
    """This attempt's agent run: the cell's job, its task dir (in a checkout cell's home), the private HF view (None:
    none), the trace dir in the cell's results, the seconds of budget left, and the earlier attempts that count."""

    agent_cell: AgentCell
    task_dir: Path
    view: object | None
    trace_dir: Path
    left: float
    earlier: list[dict]

    @property
    def agent(self) -> AgentCliSpec:
        return self.agent_cell.agent


@dataclass(frozen=True)
class AgentEnd:
    """How this attempt's agent ended: its exit code (for an agent not run again: its earlier one, or the timeout's),
    the seconds it ran, whether ptflow stopped it for a restart, and whether its spend cap stopped it."""

    rc: int | None
    time_taken: float = 0.0
    stopped: bool = False
    api_error: dict | None = None  # the API error the CLI reported ending this attempt (launch.api_error)
    spend_capped: bool = False
