"""The agent's task dir and its workspace: what an attempt's task dir is made of (``TaskSetup``), the dir made in
node-local tmp (prompt, evaluation kit, train data, deadline file, timer; an earlier session's files restored
first), and the copies that leave it: the workspace synced to scratch as the agent works (``sync_workspace``), the
final model to the checkpoint dir (``copy_final_model``) and the workspace kept for the judge (``keep_workspace``).

The task is the cell's (``ptflow.stages.agent_task.AgentTask``: ptflow's own, or a PostTrainBench checkout's as
its adapter makes it): where the task dir and ptflow's own files are, how the task dir is filled, the prompt.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from pathlib import Path

from ptflow.files import staged_dir
from ptflow.stages.agent_task import AgentTask, TaskSetup
from ptflow.stages.train.agent.context import agent_task


def make_task_dir(root: str | None, setup: TaskSetup) -> Path:
    """The agent's private task dir under ``root``: prompt, evaluation kit (``evaluate.py``: the final evaluation's
    call), train data, deadline file and timer; an earlier session's files restored first (ptflow's own files are
    then written fresh over them). Where the task dir and ptflow's own files are in the cell's dir, what fills the
    task dir and the prompt are the cell's task's (``agent_task``: a checkout cell's task dir holds run_task.sh's
    files only, in the agent's home, with ptflow's files beside that home)."""
    agent = setup.agent
    task = agent_task(agent, setup.checkout)
    cell_dir = Path(tempfile.mkdtemp(prefix=f"ptflow-agent-{agent.id}-", dir=root))
    task_dir = task.task_dir(cell_dir)
    task_dir.mkdir(parents=True, exist_ok=True)
    _restore_workspace(task_dir, setup, task)
    own = task.own_dir(task_dir)
    train_data = _copy_train_data(own, setup, task)
    task.fill(task_dir, setup)
    (own / "deadline").write_text(f"{int(setup.deadline)}\n")
    (own / "prompt.md").write_text(task.prompt(task_dir, setup, train_data))
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


def _restore_workspace(task_dir: Path, setup: TaskSetup, task: AgentTask) -> None:
    """An earlier session's files into the task dir, less ptflow's own (written fresh for this attempt)."""
    if setup.workspace is None or not setup.workspace.is_dir():
        return
    shutil.copytree(setup.workspace, task_dir, symlinks=True, dirs_exist_ok=True)
    for name in task.task_files:
        target = task_dir / name
        shutil.rmtree(target, ignore_errors=True) if target.is_dir() else target.unlink(missing_ok=True)


def _copy_train_data(own: Path, setup: TaskSetup, task: AgentTask) -> Path | None:
    """The train split as ``data/train.parquet`` among ptflow's own files (an empty ``data/`` without one, where the
    task has it)."""
    if task.empty_data_dir or setup.train_parquet:
        (own / "data").mkdir()
    if not setup.train_parquet:
        return None
    train_data = own / "data" / "train.parquet"
    shutil.copyfile(setup.train_parquet, train_data)
    return train_data


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
