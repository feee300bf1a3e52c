"""The cli-agent kind: a coding agent (claude, codex, gemini, or our scripted agent) post-trains the model.

Per cell, as PostTrainBench does it:

1. a private task dir in node-local tmp: ``prompt.md`` (from ``ptflow/templates/agent_prompt.md.j2``), the
   evaluation kit (``evaluate.py`` with PostTrainBench's interface, ``templates/`` and ``evaluate_settings.json``:
   the same task, provider and settings as the final evaluation), the train split, a ``deadline`` file and
   ``timer.sh``;
2. the HF cache as a private writable view (``ptflow.cluster.hfview``) so the agent cannot damage the shared cache;
3. the agent CLI under ``timeout --signal=TERM --kill-after=30s <minutes left + grace>``, on container sites inside
   the agent's image with ``--nv -c --writable-tmpfs --home <the cell's private home>:/home/ben``
   (``ptflow.cluster.runtime``);
4. ``time_taken`` and the exit code recorded; exit 124 (137 after the KILL) means the budget ran out — not an error:
   whatever ``final_model/`` exists is used, and the manifest says so;
5. ``final_model/`` copied to the checkpoint dir on scratch; the trace (stdout/stderr) kept in the cell's results.

A restart (requeue, preemption, NODE_FAIL, a Snakemake retry, a later run) does not cost the cell its budget. The
task dir (the HF view is elsewhere) is synced to ``workspace/`` in the cell's resume dir on scratch every
``sync_minutes`` (default: ``ptflow.config.entries.DEFAULT_SYNC_MINUTES``), when the job gets the time-limit warning
or SIGTERM, and when the agent ends; each attempt's agent time is recorded there as it runs (``attempts.json``,
``ptflow.cluster.preempt.ResumeDir``). The next attempt, with ``on_restart: continue`` (default), restores the
workspace into its task dir, gives the agent the **remaining** budget (the time used by every attempt is summed) and
a prompt saying an earlier session worked there; a ``final_model/`` saved before is kept. ``on_restart: fresh``
starts over with the full budget. An agent
that ended by itself before is not run again. The manifest's ``agent_run`` lists every attempt.

API keys named by the agent's ``keys`` reach the agent through its environment only — never argv, files or logs;
what the agent prints of them is masked (``ptflow.keys.Masker``) on its way into ``stdout.log``/``stderr.log``.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from ptflow import templates
from ptflow.cluster.preempt import ResumeDir, SaveOnWarning, StoppedToResume
from ptflow.config import tasks
from ptflow.config.agent_clis import CONTAINER_HOME as AGENT_HOME
from ptflow.config.entries import DEFAULT_GRACE_MINUTES, DEFAULT_SYNC_MINUTES, ON_RESTART_MODES
from ptflow.files import staged_dir
from ptflow.jobenv import WARNING_SIGNAL, thread_env
from ptflow.keys import DRAIN_SECONDS, Masker, Pump
from ptflow.specs import AgentCliSpec, CellRef, StageRuntime
from ptflow.stages.agent.clis import CLIS, cell_environment, prepare_cli_home
from ptflow.stages.checkpoint import has_weights
from ptflow.stages.evaluate.run import AGENT_KIT_NAMES, with_toy_data, write_agent_kit
from ptflow.stages.evaluate.sources import data_env
from ptflow.stages.posttrainbench import agent as ptb_agent
from ptflow.stages.train.cell import TrainJob

# The agent's argv per cli: the real CLIs' from their modules (``ptflow.stages.agent.clis``); an agent's own
# ``command`` in config replaces it. Placeholders: {model} {task_dir} {hours} {prompt} {prompt_file} {python}. The
# prompt is not secret; keys never appear here.
DEFAULT_COMMANDS: dict[str, list[str]] = {
    **{name: list(cli.command) for name, cli in CLIS.items()},
    # ptflow's scripted agent: a real program run through the same machinery (see ptflow.standins.scripted_agent)
    "scripted": ["{python}", "-m", "ptflow.standins.scripted_agent", "--task-dir", "{task_dir}"],
}
TIMEOUT_EXIT = 124  # timeout(1): the command was stopped with TERM
KILLED_EXIT = 137  # 128 + KILL: it ignored TERM for --kill-after
KILL_AFTER = "30s"
KILL_AFTER_SECONDS = 30
# The agent's defaults are the config entries' (ptflow.config.entries): a job's params leave out a key at its default.
HEARTBEAT_SECONDS = 15  # how often this attempt's agent time is written to attempts.json (what a kill loses)
# Files of the task dir that ptflow writes for each attempt, fresh over a restored workspace (which keeps the
# agent's own files only), the evaluation kit included.
OWN_FILES = ("prompt.md", "deadline", "timer.sh", "task.json", "data", "eval_data", *AGENT_KIT_NAMES)


class AgentCellError(RuntimeError):
    pass


def timeout_minutes(hours: float, grace_minutes: float = DEFAULT_GRACE_MINUTES) -> float:
    return hours * 60 + grace_minutes


def timeout_argv(hours: float, grace_minutes: float = DEFAULT_GRACE_MINUTES) -> list[str]:
    """``timeout --signal=TERM --kill-after=30s <hours*60+grace>m`` (GNU timeout takes fractional durations)."""
    return ["timeout", "--signal=TERM", f"--kill-after={KILL_AFTER}", f"{timeout_minutes(hours, grace_minutes):g}m"]


def agent_command(agent: AgentCliSpec, values: dict) -> list[str]:
    template = agent.command or DEFAULT_COMMANDS.get(agent.cli)
    if template is None:
        raise AgentCellError(
            f"agent {agent.id}: cli {agent.cli!r} has no default command (known: "
            f"{', '.join(sorted(DEFAULT_COMMANDS))}); give the agent a 'command' list in config"
        )
    try:
        return [part.format(**values) for part in template]
    except KeyError as exc:
        raise AgentCellError(
            f"agent {agent.id}: command placeholder {exc} is unknown; use {', '.join('{' + k + '}' for k in values)}"
        ) from None


def build_argv(
    agent: AgentCliSpec,
    values: dict,
    runtime: StageRuntime | None,
    home: str,
    binds: list[str],
    hours: float | None = None,
    workdir: str | None = None,
) -> list[str]:
    """The full argv: timeout (``hours`` left of the budget; default the whole budget), then (container sites) the
    runtime with ``home`` as the agent's private $HOME and ``workdir`` (the task dir) as its working directory,
    then the agent CLI."""
    from ptflow.cluster.runtime import runtime_argv

    command = agent_command(agent, values)
    if runtime:
        command = runtime_argv(
            runtime.site_runtime,
            command,
            image=runtime.image,
            job_dir=home,
            agent_cell=True,
            gpus=runtime.gpus,
            binds=sorted(set(runtime.binds) | set(binds)),
            workdir=workdir,
        )
    left = agent.hours if hours is None else hours
    return timeout_argv(left, agent.grace_minutes) + command


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
        if call["task"] == tasks.TOY_TASK:
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


def _ignore_warning_in_child() -> None:
    """The agent (and timeout in front of it) ignores Slurm's warning: the cell stops it on purpose, after a sync."""
    signal.signal(getattr(signal, f"SIG{WARNING_SIGNAL}"), signal.SIG_IGN)


def run_agent(argv, cwd, env, stdout, stderr, warning: SaveOnWarning, log, masker: Masker | None = None):
    """Run the agent; on the warning or SIGTERM stop it (TERM, KILL after 30 s). (exit code, stopped by us).
    Its stdout and stderr reach the files ``stdout``/``stderr`` through ``masker`` (default: the values of every
    secret-looking variable of ``env``): whatever the agent script prints of a key is kept as ***."""
    masker = Masker.for_env(env) if masker is None else masker
    proc = subprocess.Popen(  # stdin: nothing (a CLI in --print mode would read a pipe left open as more prompt)
        argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        preexec_fn=_ignore_warning_in_child,
    )  # fmt: skip
    pump = Pump(masker, [(proc.stdout, stdout), (proc.stderr, stderr)]).start()
    try:
        while True:
            try:
                rc = proc.wait(timeout=1)
                return rc, warning.requested  # an agent ending as the warning comes (it may catch it too): stopped
            except subprocess.TimeoutExpired:
                pass
            if warning.requested:
                log(f"{warning.reason} received: stopping the agent (TERM, KILL after {KILL_AFTER_SECONDS} s)")
                proc.terminate()  # timeout(1) passes TERM on to the agent
                try:
                    rc = proc.wait(timeout=KILL_AFTER_SECONDS)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    rc = proc.wait()
                return rc, True
    finally:
        # the rest of the output, masked; a process the agent left behind may hold a pipe open: read it a while
        if not pump.finish(DRAIN_SECONDS):
            log(f"the agent's output pipes were still open {DRAIN_SECONDS} s after it ended (a leftover process)")


@dataclass(frozen=True)
class AgentJob:
    """One agent cell as its train job runs it: the training as every trainer gets it (``training``: the rule's
    spec, the job's files, where the final model goes, the cell's resume state and this attempt's id), the
    PostTrainBench cell's checkout (from the rule's marker) and the environment the keys come from (None: this
    process's). The rest is read from the training, never copied."""

    training: TrainJob
    checkout: Path | None = None
    env: dict | None = None

    @property
    def agent(self) -> AgentCliSpec:
        return self.training.spec.agent_cli

    @property
    def cell(self) -> CellRef:
        return self.training.spec.cell

    @property
    def runtime(self) -> StageRuntime | None:
        """The train job's runtime (None: this machine)."""
        return self.training.spec.runtime

    @property
    def start_model(self) -> str:
        return self.training.run.start_model

    @property
    def train_parquet(self) -> str | None:
        return self.training.run.train_parquet

    @property
    def out(self) -> Path:
        return self.training.out

    @property
    def resume(self) -> ResumeDir | None:
        return self.training.resume

    @property
    def attempt(self) -> str | None:
        return self.training.attempt

    @property
    def log(self) -> Callable[[str], None]:
        return self.training.run.log

    @property
    def threads(self) -> int | None:
        """The job's CPU threads: the agent's OpenMP/MKL threads unless its environment sets them."""
        return self.training.run.threads

    @property
    def workspace(self) -> Path | None:
        """Where the task dir is synced on scratch (what the next attempt continues in)."""
        return self.resume.root / "workspace" if self.resume is not None else None


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


@dataclass(frozen=True)
class AttemptContext:
    """This attempt's agent run: the cell's job, its task dir (in a checkout cell's home), the private HF view (None:
    none), the trace dir in the cell's results, the seconds of budget left, and the earlier attempts that count."""

    job: AgentJob
    task_dir: Path
    view: object | None
    trace_dir: Path
    left: float
    earlier: list[dict]

    @property
    def agent(self) -> AgentCliSpec:
        return self.job.agent


@dataclass(frozen=True)
class AgentEnd:
    """How this attempt's agent ended: its exit code (for an agent not run again: its earlier one, or the timeout's),
    the seconds it ran, and whether ptflow stopped it for a restart."""

    rc: int | None
    time_taken: float = 0.0
    stopped: bool = False


def train_agent_cell(job: AgentJob) -> dict:
    """Run the agent (continuing an earlier attempt's workspace with the budget left); put its final_model (if any)
    into ``job.out``. Returns the trainer result for the manifest; raises StoppedToResume when the warning or
    SIGTERM stopped it (after a sync: the next attempt continues). The steps: the budget, the staging (HF view and
    task dir), the run, the final model and workspace kept, the manifest's record."""
    _check_job(job)
    budget = budget_of(job)
    trace_dir = Path(job.agent.trace_dir)
    if budget.first_attempt:  # (a restart, fresh or not, appends to the trace: every attempt's stays readable)
        shutil.rmtree(trace_dir, ignore_errors=True)
    trace_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    from ptflow.jobenv import node_tmp

    tmp_root = node_tmp()  # $TMPDIR (Slurm's node-local SSD) when set, else /tmp: PostTrainBench's choice
    view = task_dir = None
    try:
        view, base_model = _open_view(job, tmp_root)
        task_dir = make_task_dir(tmp_root, _task_setup(job, budget, base_model, started))
        staging_seconds = time.time() - started
        if budget.earlier:
            job.log(
                f"continuing {budget.described} in {task_dir} (workspace {job.workspace}): "
                f"{max(budget.left, 0) / 60:.1f} of {budget.seconds / 60:.1f} minutes left"
            )
        ctx = AttemptContext(job, task_dir, view, trace_dir, budget.left, budget.earlier)
        end = _run_or_skip(ctx, budget)
        has_model, kept = _keep_results(ctx, budget, end)
    finally:
        if view is not None:
            from ptflow.cluster import hfview

            hfview.close_view(view, log=job.log)
        if task_dir is not None:
            shutil.rmtree(own_dir(task_dir, job.agent), ignore_errors=True)
    return {
        "step": None,
        "train_loss": None,
        "final_model": has_model,
        "agent_run": agent_run_record(ctx, budget, end, has_model, kept, staging_seconds),
    }


def _check_job(job: AgentJob) -> None:
    """The agent's keys are in the environment and its restart mode is known."""
    agent = job.agent
    missing = [k for k in agent.keys if not (job.env or os.environ).get(k)]
    if missing:
        raise AgentCellError(
            f"agent {agent.id} needs environment variable(s) {', '.join(missing)}; export them before running"
        )
    if agent.on_restart not in ON_RESTART_MODES:
        raise AgentCellError(
            f"agent {agent.id}: on_restart {agent.on_restart!r} is not one of {', '.join(ON_RESTART_MODES)}"
        )


def budget_of(job: AgentJob) -> Budget:
    """The budget this attempt finds: the earlier attempts' agent time counts, unless ``on_restart: fresh`` discards
    them (their workspace removed, each marked discarded in attempts.json)."""
    earlier = previous_agent_runs(job.resume, job.attempt)
    first_attempt = not earlier
    if earlier and job.agent.on_restart == "fresh":
        job.log(f"on_restart fresh: starting over with the full budget ({_describe_earlier(earlier)} discarded)")
        shutil.rmtree(job.workspace, ignore_errors=True)
        job.resume.record_attempt({"id": job.attempt, "fresh_after": [a["id"] for a in earlier]})
        for a in earlier:
            job.resume.record_attempt({"id": a["id"], "discarded": True})
        earlier = []
    return Budget(job.agent.on_restart, job.agent.hours * 3600, earlier, first_attempt)


def _open_view(job: AgentJob, tmp_root: str):
    """The HF cache as the agent's private writable view (None without a cache), and the base model's path in it."""
    from ptflow.cluster import hfview

    hf_home = job.agent.hf_home
    if not (hf_home and Path(hf_home).is_dir()):
        return None, job.start_model
    # an agent always gets a private view (it may write to the cache); the site picks overlay or copy
    method = job.runtime.site_runtime.hf_view if job.runtime else "auto"
    method = "auto" if method == "none" else method
    view_root = Path(tempfile.mkdtemp(prefix="ptflow-hfview-", dir=tmp_root))
    # a copy takes the base model's repo only (the agent may load no other model; datasets come whole)
    view = hfview.open_view(hf_home, view_root, method=method, log=job.log, models=[job.cell.model])
    rel = os.path.relpath(os.path.abspath(job.start_model), os.path.abspath(hf_home))
    return view, (job.start_model if rel.startswith("..") else str(view.path / rel))


def _task_setup(job: AgentJob, budget: Budget, base_model: str, started: float) -> TaskSetup:
    return TaskSetup(
        agent=job.agent,
        cell=job.cell,
        base_model=base_model,
        train_parquet=job.train_parquet,
        started=started,
        hours_left=max(budget.left, 0) / 3600,
        workspace=job.workspace if budget.earlier else None,
        earlier=budget.described,
        checkout=job.checkout,
    )


def _run_or_skip(ctx: AttemptContext, budget: Budget) -> AgentEnd:
    """This attempt's agent run, or none where an earlier agent ended by itself or the budget is used up."""
    if not (budget.finished_before or budget.left <= 0):
        return _run_attempt(ctx)
    done = [a["agent"] for a in budget.earlier if a["agent"].get("finished")]
    ctx.job.log(
        f"agent {ctx.agent.id} is not run again: "
        + ("it ended by itself in an earlier attempt" if budget.finished_before else "its budget is used up")
    )
    return AgentEnd(done[-1].get("exit_code", 0) if done else TIMEOUT_EXIT)


def _budget_exhausted(budget: Budget, end: AgentEnd) -> bool:
    return end.rc in (TIMEOUT_EXIT, KILLED_EXIT) or (budget.left <= 0 and not budget.finished_before)


def _keep_results(ctx: AttemptContext, budget: Budget, end: AgentEnd) -> tuple[bool, Path | None]:
    """After the run: a stopped agent stops the job (its workspace is synced); else ``final_model/`` to scratch and
    the workspace kept for the judge. (Whether there is a final model, the kept workspace.)"""
    job, agent = ctx.job, ctx.agent
    if end.stopped:
        raise StoppedToResume(
            f"agent {agent.id} stopped after {end.time_taken:.0f} s of this attempt "
            f"({(budget.used + end.time_taken) / 60:.1f} of {budget.seconds / 60:.1f} minutes used); its workspace "
            f"is synced to {job.workspace}: the next attempt continues there",
            reason="agent stopped for a restart",
        )
    final = ctx.task_dir / "final_model"
    has_model = has_weights(final)
    if has_model:
        moved = copy_final_model(final, job.out, job.workspace / "final_model" if job.workspace is not None else None)
        job.log(f"final_model/ to scratch: {moved['linked']} files linked from the workspace just synced, "
                f"{moved['copied']} copied")  # fmt: skip
    else:
        job.out.mkdir(parents=True, exist_ok=True)
    kept = None
    if job.resume is not None:
        kept = keep_workspace(
            ctx.task_dir, job.resume.kept_workspace, job.log, whole=bool(agent.posttrainbench),
            final_model=job.out if has_model else None,
        )  # fmt: skip
    status = "budget exhausted (timeout)" if _budget_exhausted(budget, end) else f"exit {end.rc}"
    job.log(
        f"agent {agent.id}: {status} after {end.time_taken:.1f} s this attempt, "
        f"{budget.used + end.time_taken:.1f} s in all; "
        "final_model: " + ("copied to scratch" if has_model else "none — the cell will show 'no final model'")
    )
    return has_model, kept


def agent_run_record(
    ctx: AttemptContext, budget: Budget, end: AgentEnd, has_model: bool, kept: Path | None, staging_seconds: float
) -> dict:
    """The manifest's ``agent_run``: how the agent ended, its time over every attempt, its settings, the API spend
    the CLI reported, the staging cost and the workspace kept for the judge."""
    agent, view = ctx.agent, ctx.view
    attempts = _attempt_records(ctx.job.resume)
    counted = [a for a in attempts if not a.get("discarded")]
    return {
        "exit_code": end.rc,
        "budget_exhausted": _budget_exhausted(budget, end),
        "time_taken": round(sum(a["time_taken"] for a in counted) if counted else end.time_taken, 3),
        "hours": agent.hours,
        "timeout_minutes": timeout_minutes(agent.hours, agent.grace_minutes),
        "final_model": has_model,
        "trace_dir": str(ctx.trace_dir),
        "cli": agent.cli,
        "model": agent.model,
        "on_restart": budget.mode,
        "attempts": attempts,
        "api_usage": api_usage(agent.cli, ctx.trace_dir / "stdout.log"),  # tokens (and USD) the CLI reported
        # staging in this GPU job before the agent started: task dir and HF view (a copy when no overlay)
        "staging_seconds": round(staging_seconds, 3),
        "hf_view": {
            "method": view.method if view else "none",
            "seconds": round(view.seconds, 3) if view else 0,
            "bytes": view.bytes if view else 0,
        },
        **({"workspace": str(kept)} if kept else {}),  # what the judge reads
        **({"cli_version": agent.cli_version} if agent.cli_version else {}),
    }


def _attempt_records(resume: ResumeDir | None) -> list[dict]:
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


def keep_path_in_login_shells(home: Path, path: str) -> None:
    """codex (and other CLIs) run commands in login shells (``bash -lc``), and /etc/profile resets PATH: without
    this the agent would not find the job's ``python`` on a venv site. Login shells read ~/.bash_profile (bash) or
    ~/.profile (sh) after /etc/profile, in the cell's private home. (In a container the image's PATH is right.)"""
    line = f"# written by ptflow: login shells keep the job's PATH\nexport PATH={shlex.quote(path)}\n"
    for name in (".bash_profile", ".profile"):
        (home / name).write_text(line)


def stream_events(stdout: Path, offset: int = 0) -> list[dict]:
    """The JSONL events of the agent's stdout.log from ``offset`` (its other lines skipped)."""
    events = []
    try:
        fh = open(stdout, "rb")  # noqa: SIM115 - closed below; a missing log is no events
    except FileNotFoundError:
        return []
    with fh:
        fh.seek(offset)
        for raw in fh:  # a line at a time: a long run's log is not held whole
            if raw.startswith(b"{"):
                try:
                    ev = json.loads(raw.decode(errors="replace"))
                except json.JSONDecodeError:
                    continue
                if isinstance(ev, dict):
                    events.append(ev)
    return events


def api_usage(cli_name: str | None, stdout: Path) -> dict | None:
    """The API spend the CLI reported over every attempt of the cell (stdout.log holds them all), as the manifest
    and eval.json keep it; None where the CLI reports none (the scripted stand-in, a session killed before any)."""
    cli = CLIS.get(cli_name)
    spent = cli.usage(stream_events(stdout)) if cli is not None and cli.usage is not None else None
    return None if spent is None else {**spent.to_json(), "source": f"{cli.name} stream output"}


def refused_key(agent: AgentCliSpec, rc: int, stdout: Path, offset: int) -> str | None:
    """One line naming the key when the CLI's own output says the provider refused it (401/403), else None: the
    cell fails at once instead of being scored as 'no final model' or retried for hours."""
    cli = CLIS.get(agent.cli)
    if cli is None or cli.auth_failed is None or rc in (0, TIMEOUT_EXIT, KILLED_EXIT):
        return None
    if not cli.auth_failed(rc, stream_events(stdout, offset)):
        return None
    names = [k for k in agent.keys if k in cli.accepted_keys] or [cli.key_var]
    via = f" (passed to {cli.name} as {cli.key_var})" if names[0] != cli.key_var else ""
    return (
        f"agent {agent.id}: the provider refused the API key in {names[0]}{via} (HTTP 401/403, {cli.name} exit "
        f"{rc}); export a valid key and run again — see {stdout.parent}/stderr.log"
    )


def _run_attempt(ctx: AttemptContext) -> AgentEnd:
    """This attempt's agent run, in its home: a checkout cell's is run_task.sh's job dir, which holds the task dir
    (removed with the cell's dir); any other agent's a private one of this attempt beside the task dir (never
    synced: ptflow rewrites it)."""
    if ctx.agent.posttrainbench:
        return _run_in_home(ctx, ctx.task_dir.parent)
    host_home = Path(tempfile.mkdtemp(prefix="ptflow-agent-home-", dir=ctx.task_dir.parent))
    try:
        return _run_in_home(ctx, host_home)
    finally:
        shutil.rmtree(host_home, ignore_errors=True)


@dataclass(frozen=True)
class AgentHome:
    """The agent's home and task dir, on the host and as the agent sees them: the runtime's kind, whether it is a
    container and whether the home is bound at ``AGENT_HOME`` (/home/ben) in it."""

    host: Path
    kind: str
    container: bool
    bound: bool
    home: str  # $HOME as the agent sees it
    task_in: str  # the task dir as the agent sees it

    @classmethod
    def of(cls, ctx: AttemptContext, host_home: Path) -> AgentHome:
        from ptflow.cluster.runtime import HOME_BOUND

        kind = ctx.job.runtime.kind if ctx.job.runtime else "venv"
        bound = kind in HOME_BOUND
        home = AGENT_HOME if bound else str(host_home)
        # the task dir as the agent sees it: a checkout cell's is in its home (/home/ben/task in a container)
        checkout = bool(ctx.agent.posttrainbench)
        task_in = f"{home}/{ctx.task_dir.relative_to(host_home)}" if checkout and bound else str(ctx.task_dir)
        return cls(host_home, kind, kind == "apptainer", bound, home, task_in)


def _run_in_home(ctx: AttemptContext, host_home: Path) -> AgentEnd:
    """The agent in ``host_home``: its home made, its command line and environment, the run, how it ended."""
    h = AgentHome.of(ctx, host_home)
    agent = _install_home(ctx, h)
    own = own_dir(ctx.task_dir, agent)
    values = {
        "model": agent.model,
        "task_dir": h.task_in,
        "hours": f"{ctx.left / 3600:g}",
        "prompt": (own / "prompt.md").read_text(),
        "prompt_file": str(own / "prompt.md"),
        "python": sys.executable,
    }
    checkout = bool(agent.posttrainbench)
    hf_in = f"{AGENT_HOME}/hf_cache" if ctx.view and checkout and h.bound else None  # run_task.sh's HF_HOME_NEW
    binds = ([] if checkout and h.bound else [str(ctx.task_dir)]) + ([str(ctx.view.workdir)] if ctx.view else [])
    binds += ([] if h.bound else [str(host_home)]) + ([f"{ctx.view.path}:{hf_in}"] if hf_in else [])
    if hf_in:
        (host_home / "hf_cache").mkdir(exist_ok=True)  # the mount point in the bound home
    argv = build_argv(agent, values, ctx.job.runtime, str(host_home), binds, hours=ctx.left / 3600, workdir=h.task_in)
    prompt_copy = "prompt.md" if not ctx.earlier else f"prompt-{len(ctx.earlier) + 1}.md"
    shutil.copyfile(own / "prompt.md", ctx.trace_dir / prompt_copy)
    job_env, child_env = _environment(ctx, h, agent, values["prompt"], hf_in)
    shown = [a if a != values["prompt"] else "<prompt.md>" for a in argv]
    ctx.job.log(
        f"agent {agent.id} in {ctx.task_dir} ({ctx.left / 3600:g} h of {agent.hours:g} h left): $ " + " ".join(shown)
    )
    # the agent's keys, the CLI's own variable, every secret-looking variable of the job and the child: ***
    masker = Masker.for_env({**job_env, **child_env}, agent.keys)
    if masker.notice():
        ctx.job.log(f"agent {agent.id}: {masker.notice()}")
    return _launch(ctx, argv, child_env, masker)


def _install_home(ctx: AttemptContext, h: AgentHome) -> AgentCliSpec:
    """A checkout cell's home as run_task.sh makes it (.codex, agent_solve.sh), checked first; the agent to run:
    one that runs the checkout's solve.sh gets it as its command."""
    agent = ctx.agent
    if not agent.posttrainbench:
        return agent
    ptb_agent.check_home(agent, ctx.job.checkout, h.kind)
    ptb_agent.install_home(agent, ctx.job.checkout, h.host)  # run_task.sh's copies into its job dir
    if agent.posttrainbench.solve and not agent.command:  # agents/<agent>/solve.sh, where run_task.sh puts it
        return replace(agent, command=["bash", f"{h.home}/{ptb_agent.SOLVE_NAME}"])
    return agent


def _solving(ctx: AttemptContext) -> bool:
    """The agent runs the checkout's solve.sh (a checkout cell without a command of its own)."""
    return bool(ctx.agent.posttrainbench and ctx.agent.posttrainbench.solve) and not ctx.agent.command


def _environment(
    ctx: AttemptContext, h: AgentHome, agent: AgentCliSpec, prompt: str, hf_in: str | None
) -> tuple[dict, dict]:
    """The job's environment and the agent's: the job's less the secrets the agent may not see, the CLI's home
    settings, its temp dir, the task's variables, solve.sh's (run_task.sh's), the evaluation's caches, the HF view."""
    checkout = bool(agent.posttrainbench)
    root = os.geteuid() == 0  # the CLI runs as the job's user in every runtime ptflow builds (docs: agent cells)
    job_env = dict(ctx.job.env or os.environ)
    if not h.container:  # the job's python first (a venv site's interpreter need not be on the job's PATH)
        job_env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), job_env.get("PATH", "")])
    hf_home = hf_in or (str(ctx.view.path) if ctx.view else None)
    # what the checkout's codex config sets for the agent's commands, where the home is a host dir: the real paths
    host_values = {"HOME": h.home, "HF_HOME": hf_home, "PATH": job_env["PATH"], "LD_LIBRARY_PATH": None}
    host_values = None if h.bound else host_values
    cli_env = prepare_cli_home(agent.to_params(), h.host, h.home, h.task_in, root, host_values=host_values)
    if root and agent.cli in CLIS:
        ctx.job.log(
            f"agent {agent.id}: the job runs as root; {agent.cli} gets its sandbox switch (see docs/concepts.md)"
        )
    (h.host / "tmp").mkdir(exist_ok=True)  # the agent's own temp dir (the CLIs leave error reports there)
    if not h.container:
        keep_path_in_login_shells(h.host, job_env["PATH"])
    # the variables run_task.sh gives solve.sh
    solve_env = ptb_agent.solve_environment(agent, prompt, h.home, job_env["PATH"]) if _solving(ctx) else {}
    child_env = {
        **cell_environment(agent.to_params(), job_env),
        **cli_env,
        "TMPDIR": f"{h.home}/tmp",
        # ptflow's own cells are offline; a checkout's agents are not (run_task.sh's prompt: internet unrestricted)
        **({} if checkout else {"HF_HUB_OFFLINE": "1"}),
        "PTFLOW_TASK_DIR": h.task_in,
        "PTFLOW_CELL_DIR": str(own_dir(ctx.task_dir, agent)),  # ptflow's own files (the scripted agent's task.json)
        "PTFLOW_AGENT_KEYS": ",".join(agent.keys),  # names only: the values are in the env already
        **solve_env,
    }
    if ctx.job.threads:
        # The agent's torch (its training, its evaluate.py) as many threads as the job has CPUs, as ptflow's own
        # trainings and evaluations are (bench/RESULTS.md, "the second cut"); a value the job's environment sets (in
        # child_env already, from cell_environment) wins.
        for name, value in thread_env(ctx.job.threads).items():
            child_env.setdefault(name, value)
    if agent.evals_cache and agent.hf_home:  # evaluate.py reads offline from the evaluation's caches
        child_env.update(data_env(agent.hf_home, agent.evals_cache))
    if hf_home:
        child_env["HF_HOME"] = hf_home
    if ctx.job.runtime:
        from ptflow.cluster.runtime import container_env

        # apptainer: HOME is the user's real home for --home's handling; the container sees /home/ben
        child_env = container_env(ctx.job.runtime.site_runtime, child_env)
    return job_env, child_env


def _launch(ctx: AttemptContext, argv: list[str], child_env: dict, masker: Masker) -> AgentEnd:
    """Run the agent with its output into the trace (masked), this attempt's time and workspace synced as it runs
    (with a resume dir), stopped on the warning or SIGTERM; a refused key or a command that could not run fails the
    cell; how it ended goes to attempts.json."""
    job, agent = ctx.job, ctx.agent
    header = (
        f"=== ptflow: attempt {len(ctx.earlier) + 1} ({socket.gethostname()}, job {os.environ.get('SLURM_JOB_ID')}) ==="
    )
    sync_minutes = agent.sync_minutes if agent.sync_minutes is not None else DEFAULT_SYNC_MINUTES
    clock = None
    with open(ctx.trace_dir / "stdout.log", "ab") as so, open(ctx.trace_dir / "stderr.log", "ab") as se:
        for fh in (so, se):
            fh.write((header + "\n").encode())
            fh.flush()
        stdout_from = so.tell()  # this attempt's events start here
        with SaveOnWarning(term=True) as warning:
            if job.resume is not None:
                clock = AttemptClock(
                    job.resume, job.attempt, ctx.task_dir, job.workspace, float(sync_minutes) * 60, job.log
                )
                clock.__enter__()
            t0 = time.time()
            try:
                rc, stopped = run_agent(argv, ctx.task_dir, child_env, so, se, warning, job.log, masker)
            finally:
                if clock is not None:
                    clock.__exit__(None, None, None)
            time_taken = time.time() - t0
    refused = refused_key(agent, rc, ctx.trace_dir / "stdout.log", stdout_from) if not stopped else None
    if refused:
        raise AgentCellError(refused)
    if rc in (126, 127):
        raise AgentCellError(
            f"agent {agent.id}: {argv[len(timeout_argv(1))]!r} could not be run (exit {rc}, see "
            f"{ctx.trace_dir}/stderr.log); install the agent CLI in the image or fix the agent's command"
        )
    if clock is not None:
        clock.sync("agent stopped for a restart" if stopped else "agent ended")
        ended_by = "stopped for a restart" if stopped else ("timeout" if rc in (TIMEOUT_EXIT, KILLED_EXIT) else "exit")
        job.resume.record_attempt(
            {
                "id": job.attempt,
                "agent": {
                    "time_taken": round(time_taken, 3),
                    "exit_code": rc,
                    "ended_by": ended_by,
                    "finished": not stopped,
                },
            }
        )
    return AgentEnd(rc, time_taken, stopped)


def run(training: TrainJob) -> dict:
    """Kind ``cli-agent``: a coding agent under a time budget (PostTrainBench)."""
    agent = training.spec.agent_cli
    checkout = ptb_agent.checkout_of(training.run.checkout_marker) if agent.posttrainbench else None
    return train_agent_cell(AgentJob(training, checkout=checkout))
