"""The agent's task dir and its workspace: what an attempt's task dir is made of (``TaskSetup``), the dir made in
node-local tmp (prompt, evaluation kit, train data, deadline file, timer; an earlier session's files restored
first), and the copies that leave it: the workspace synced to scratch as the agent works (``sync_workspace``), the
final model to the checkpoint dir (``copy_final_model``) and the workspace kept for the judge (``keep_workspace``).

A PostTrainBench checkout cell's task dir is run_task.sh's, in the agent's home, with ptflow's own files beside that
home (``own_dir``; the checkout's parts in ``ptflow.stages.posttrainbench.agent``).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ptflow import templates
from ptflow.config import tasks
from ptflow.files import staged_dir
from ptflow.specs import AgentCliSpec, CellRef
from ptflow.stages.checkpoint import has_weights
from ptflow.stages.evaluate.run import AGENT_KIT_NAMES, with_toy_data, write_agent_kit
from ptflow.stages.posttrainbench import agent as ptb_agent

# Files of the task dir that ptflow writes for each attempt, fresh over a restored workspace (which keeps the
# agent's own files only), the evaluation kit included.
OWN_FILES = ("prompt.md", "deadline", "timer.sh", "task.json", "data", "eval_data", *AGENT_KIT_NAMES)


def _hours_text(hours: float) -> str:
    minutes = hours * 60
    return f"{hours:g} hours" if hours >= 1 else f"{minutes:g} minutes"


def own_dir(task_dir: Path, agent: AgentCliSpec) -> Path:
    """Where ptflow's own files of a cell are (prompt.md, task.json, deadline): beside a checkout cell's home, which
    holds its task dir (``ptflow.stages.posttrainbench.agent``), else in the task dir."""
    return task_dir.parent.parent if agent.posttrainbench else task_dir


@dataclass(frozen=True)
class TaskSetup:
    """What an attempt's task dir is made of: the agent and cell, the base model as the agent sees it (in its HF
    view), the train split, when the attempt started, the budget that remains (None: all of it), an earlier
    session's ``workspace`` to restore first and its description for the prompt (``earlier``), and a PostTrainBench
    cell's checkout."""

    agent: AgentCliSpec
    cell: CellRef
    base_model: str
    train_parquet: str | None
    started: float
    hours_left: float | None = None
    workspace: Path | None = None
    earlier: str | None = None
    checkout: Path | None = None

    @property
    def hours(self) -> float:
        return self.agent.hours if self.hours_left is None else self.hours_left

    @property
    def deadline(self) -> float:
        return self.started + self.hours * 3600


def make_task_dir(root: str | None, setup: TaskSetup) -> Path:
    """The agent's private task dir under ``root``: prompt, evaluation kit (``evaluate.py``: the final evaluation's
    call), train data, deadline file and timer; an earlier session's files restored first (ptflow's own files are
    then written fresh over them). A PostTrainBench checkout cell's task dir holds run_task.sh's files only, in the
    agent's home, with ptflow's files beside that home (:func:`own_dir`)."""
    agent = setup.agent
    checkout = bool(agent.posttrainbench)
    cell_dir = Path(tempfile.mkdtemp(prefix=f"ptflow-agent-{agent.id}-", dir=root))
    task_dir = cell_dir / ptb_agent.HOME_NAME / ptb_agent.TASK_NAME if checkout else cell_dir
    task_dir.mkdir(parents=True, exist_ok=True)
    _restore_workspace(task_dir, setup)
    own = own_dir(task_dir, agent)
    train_data = _copy_train_data(own, setup)
    _fill_task_dir(task_dir, setup)
    (own / "deadline").write_text(f"{int(setup.deadline)}\n")
    (own / "prompt.md").write_text(_prompt(task_dir, setup, train_data))
    (own / "task.json").write_text(
        json.dumps(
            {
                "base_model": setup.base_model,
                "train_data": str(train_data) if train_data else None,
                "deadline": setup.deadline,
                "earlier_session": bool(setup.earlier),
            }
        )
    )
    return task_dir


def _restore_workspace(task_dir: Path, setup: TaskSetup) -> None:
    """An earlier session's files into the task dir, less ptflow's own (written fresh for this attempt)."""
    if setup.workspace is None or not setup.workspace.is_dir():
        return
    shutil.copytree(setup.workspace, task_dir, symlinks=True, dirs_exist_ok=True)
    for name in () if setup.agent.posttrainbench else OWN_FILES:  # (a checkout cell's own files are elsewhere)
        target = task_dir / name
        shutil.rmtree(target, ignore_errors=True) if target.is_dir() else target.unlink(missing_ok=True)


def _copy_train_data(own: Path, setup: TaskSetup) -> Path | None:
    """The train split as ``data/train.parquet`` among ptflow's own files (an empty ``data/`` without one)."""
    if not setup.agent.posttrainbench or setup.train_parquet:
        (own / "data").mkdir()
    if not setup.train_parquet:
        return None
    train_data = own / "data" / "train.parquet"
    shutil.copyfile(setup.train_parquet, train_data)
    return train_data


def _fill_task_dir(task_dir: Path, setup: TaskSetup) -> None:
    """A checkout cell: run_task.sh's copies and timer. ptflow's task: the evaluation kit and ptflow's timer."""
    agent = setup.agent
    if agent.posttrainbench:  # PostTrainBench's task dir from its checkout (run_task.sh's copies and timer)
        ptb_agent.fill_task_dir(task_dir, agent, setup.checkout, setup.hours, setup.deadline)
        return
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


def _prompt(task_dir: Path, setup: TaskSetup, train_data: Path | None) -> str:
    """The agent's prompt: a checkout's own (its get_prompt.py), else ptflow's template."""
    agent, cell, hours = setup.agent, setup.cell, setup.hours
    if agent.posttrainbench:
        prompt = ptb_agent.prompt(agent, setup.checkout, cell.model, hours)
        if setup.earlier:  # (PostTrainBench restarts nothing: ptflow's note for a cell that continues a workspace)
            prompt += (
                f"\nNote: {setup.earlier} worked in this directory before; its files are here. "
                f"{_hours_text(hours)} remain.\n"
            )
        return prompt
    return templates.render(
        "agent_prompt.md.j2",
        model_id=cell.model,
        eval_id=cell.eval,
        eval_task=agent.eval_task or cell.eval,
        max_new_tokens=agent.max_new_tokens if agent.max_new_tokens is not None else "?",
        hours_text=_hours_text(hours),
        deadline_iso=datetime.fromtimestamp(setup.deadline, UTC).isoformat(timespec="seconds"),
        task_dir=str(task_dir),
        base_model=setup.base_model,
        train_data=str(train_data) if train_data else "(none: bring your own data)",
        earlier=setup.earlier or "",
        has_final_model=has_weights(task_dir / "final_model"),
    )


def sync_workspace(task_dir: Path, workspace: Path) -> dict[str, int]:
    """Copy the task dir to ``workspace`` on scratch, whole or not at all (a staging dir swapped in), at the cost of
    what changed: a file whose size and modification time equal its previous copy's is hard-linked from that copy
    (rsync's ``--link-dest`` with its quick check), every other file copied (``copy2``, so its time is kept for the
    next comparison). The previous copy is never written, only linked from and then replaced, so a sync that fails
    leaves it whole. Returns the counts of files linked and copied, and the bytes copied."""
    counts = {"linked": 0, "copied": 0, "copied_bytes": 0}
    previous = workspace if workspace.is_dir() and not workspace.is_symlink() else None

    def copy(src: str, dst: str) -> None:
        if previous is not None:
            try:
                new, old = os.stat(src), os.lstat(previous / Path(src).relative_to(task_dir))
                if stat.S_ISREG(old.st_mode) and (old.st_size, old.st_mtime_ns) == (new.st_size, new.st_mtime_ns):
                    os.link(previous / Path(src).relative_to(task_dir), dst)
                    counts["linked"] += 1
                    return
            except OSError:
                pass  # no previous copy of this file, or a filesystem without hard links: copy it
        shutil.copy2(src, dst)
        counts["copied"] += 1
        counts["copied_bytes"] += os.path.getsize(dst)

    with staged_dir(workspace) as tmp:
        shutil.copytree(task_dir, tmp, symlinks=True, dirs_exist_ok=True, copy_function=copy)
    return counts


def copy_final_model(final: Path, out: Path, synced: Path | None) -> dict[str, int]:
    """``final_model/`` to the checkpoint dir on scratch, leaving the allocation once: a file the workspace sync has
    just copied (the same size and modification time under ``synced``) is hard-linked from there, any other copied
    (symlinks followed: the checkpoint holds files). Neither copy is ever written in place, so sharing is safe."""
    counts = {"linked": 0, "copied": 0}

    def copy(src: str, dst: str) -> None:
        if synced is not None:
            twin = synced / Path(src).relative_to(final)
            try:
                new, old = os.stat(src), os.lstat(twin)
                if stat.S_ISREG(old.st_mode) and (old.st_size, old.st_mtime_ns) == (new.st_size, new.st_mtime_ns):
                    os.link(twin, dst)
                    counts["linked"] += 1
                    return
            except OSError:
                pass  # not synced, or another filesystem: copy it
        shutil.copy2(src, dst)
        counts["copied"] += 1

    shutil.copytree(final, out, symlinks=False, copy_function=copy)
    return counts


KEEP_MAX_BYTES = 50 * 2**20  # a bigger file of the workspace is listed for the judge, not copied


def keep_workspace(
    task_dir: Path, dest: Path, log, *, whole: bool = False, final_model: Path | None = None
) -> Path | None:
    """The task dir as the agent left it, kept on scratch for the judge: everything but ``final_model/`` (listed
    in ``final_model.listing.txt``) and files over ``KEEP_MAX_BYTES`` (listed in ``.ptflow-not-copied.txt``).

    ``whole`` (a cell of a PostTrainBench checkout, whose judge runs in the task dir as run_task.sh leaves it): every
    file, whatever its size, and ``final_model/`` too, nothing added. Its files are hard links to ``final_model``
    (the train rule's copy of it on scratch, the same filesystem as ``dest``) where they are the same file, so the
    model is on scratch once; a copy where the filesystem refuses the link."""
    if whole:
        return _keep_whole(task_dir, dest, final_model, log)
    skipped: list[str] = []

    def ignore(directory: str, names: list[str]) -> list[str]:
        out = []
        for name in names:
            path = Path(directory, name)
            if Path(directory) == task_dir and name == "final_model":
                out.append(name)
            elif path.is_file() and not path.is_symlink() and path.stat().st_size > KEEP_MAX_BYTES:
                skipped.append(f"{path.stat().st_size}\t{path.relative_to(task_dir)}")
                out.append(name)
        return out

    try:
        with staged_dir(dest) as tmp:
            shutil.copytree(task_dir, tmp, symlinks=True, dirs_exist_ok=True, ignore=ignore)
            final = task_dir / "final_model"
            listing = [
                f"{p.stat().st_size}\t{p.relative_to(final)}" for p in sorted(final.rglob("*")) if p.is_file()
            ] if final.is_dir() else ["(no final_model/)"]  # fmt: skip
            (tmp / "final_model.listing.txt").write_text("\n".join(listing) + "\n")
            if skipped:
                (tmp / ".ptflow-not-copied.txt").write_text("\n".join(skipped) + "\n")
    except OSError as exc:
        log(f"could not keep the workspace for the judge ({exc}); the judge will say so")
        return None
    return dest


def _keep_whole(task_dir: Path, dest: Path, final_model: Path | None, log) -> Path | None:
    from ptflow.files import link_or_copy

    counts: dict[str, int] = {}
    model_dir = task_dir / "final_model"

    def copy(src: str, dst: str) -> None:
        twin = None
        if final_model is not None and Path(src).is_relative_to(model_dir):
            twin = final_model / Path(src).relative_to(model_dir)  # the train rule's copy of this very file
        same = twin is not None and twin.is_file() and not twin.is_symlink()
        if same and twin.stat().st_size == os.stat(src).st_size:
            link_or_copy(twin, dst, counts)
        else:
            shutil.copy2(src, dst)

    try:
        with staged_dir(dest) as tmp:
            shutil.copytree(task_dir, tmp, symlinks=True, dirs_exist_ok=True, copy_function=copy)
    except OSError as exc:
        log(f"could not keep the workspace for the judge ({exc}); the judge will say so")
        return None
    if counts:
        log(f"workspace kept for the judge: final_model/ files {counts} from {final_model}")
    return dest
