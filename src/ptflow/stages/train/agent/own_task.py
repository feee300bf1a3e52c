"""ptflow's own task for an agent cell (``ptflow.stages.agent_task.AgentTask``): the task dir is the cell's dir and
holds ptflow's own files (prompt, evaluation kit, train data, deadline file and timer); the agent's home is a
private dir of each attempt beside it, removed after the attempt (never synced: ptflow rewrites it); the agent runs
its CLI's command, offline from the hub. A PostTrainBench checkout's task is the adapter's
(``ptflow.stages.posttrainbench.agent.CheckoutTask``).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from ptflow import templates
from ptflow.config import tasks
from ptflow.specs import AgentCliSpec
from ptflow.stages.agent_task import TaskSetup
from ptflow.stages.checkpoint import has_weights
from ptflow.stages.evaluate.run import AGENT_KIT_NAMES, with_toy_data, write_agent_kit

# Files of the task dir that ptflow writes for each attempt, fresh over a restored workspace (which keeps the
# agent's own files only), the evaluation kit included.
OWN_FILES = ("prompt.md", "deadline", "timer.sh", "task.json", "data", "eval_data", *AGENT_KIT_NAMES)


class OwnTask:
    """ptflow's own task (see the module)."""

    task_files = OWN_FILES
    empty_data_dir = True
    keeps_whole = False

    def task_dir(self, cell_dir: Path) -> Path:
        return cell_dir

    def own_dir(self, task_dir: Path) -> Path:
        return task_dir

    def fill(self, task_dir: Path, setup: TaskSetup) -> None:
        """The evaluation kit and ptflow's timer."""
        agent = setup.agent
        call = agent.eval_call
        if call:
            if call.task == tasks.TOY_TASK:
                # The toy task's data is the workflow's test parquet (PostTrainBench's evals read theirs from the
                # caches): the agent measures on it, as the final evaluation does, and must not train on it.
                (task_dir / "eval_data").mkdir()
                shutil.copyfile(agent.eval_test_parquet, task_dir / "eval_data" / "test.parquet")
                call = with_toy_data(call, task_dir / "eval_data" / "test.parquet")
            write_agent_kit(task_dir, call)
        shutil.copyfile(templates.path("agent_timer.sh"), task_dir / "timer.sh")
        (task_dir / "timer.sh").chmod(0o755)

    def prompt(self, task_dir: Path, setup: TaskSetup, train_data: Path | None) -> str:
        """ptflow's template."""
        agent, cell = setup.agent, setup.cell
        return templates.render(
            "agent_prompt.md.j2",
            model_id=cell.model,
            eval_id=cell.eval,
            eval_task=agent.eval_task or cell.eval,
            max_new_tokens=agent.max_new_tokens if agent.max_new_tokens is not None else "?",
            hours_text=setup.hours_text,
            deadline_iso=datetime.fromtimestamp(setup.deadline, UTC).isoformat(timespec="seconds"),
            task_dir=str(task_dir),
            base_model=setup.base_model,
            train_data=str(train_data) if train_data else "(none: bring your own data)",
            earlier=setup.earlier or "",
            has_final_model=has_weights(task_dir / "final_model"),
        )

    @contextmanager
    def home(self, task_dir: Path) -> Iterator[Path]:
        """A private home of this attempt beside the task dir, removed after it."""
        host_home = Path(tempfile.mkdtemp(prefix="ptflow-agent-home-", dir=task_dir.parent))
        try:
            yield host_home
        finally:
            shutil.rmtree(host_home, ignore_errors=True)

    def task_seen(self, task_dir: Path, host_home: Path, home: str, bound: bool) -> str:
        return str(task_dir)  # bound into a container at its own path

    def task_binds(self, task_dir: Path, bound: bool) -> list[str]:
        return [str(task_dir)]

    def hf_mount(self, host_home: Path, bound: bool) -> str | None:
        return None

    def install(self, agent: AgentCliSpec, host_home: Path, home: str, runtime_kind: str) -> AgentCliSpec:
        return agent  # (the CLI's own settings are ptflow's: launch.prepare_cli_home, for every task)

    def hub_env(self) -> dict[str, str]:
        return {"HF_HUB_OFFLINE": "1"}

    def agent_env(self, agent: AgentCliSpec, prompt: str, home: str, path: str) -> dict[str, str]:
        return {}

    def sandbox_env(self, agent: AgentCliSpec, env: dict[str, str], environ: dict[str, str]) -> dict[str, str]:
        return env  # ptflow's key scoping (clis.cell_environment)


OWN_TASK = OwnTask()
