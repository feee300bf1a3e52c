"""The agent CLI's launch: its command line (``timeout`` with the budget left, then on container sites the runtime,
then the CLI), its home and environment (the CLI's home settings, the task's variables, the evaluation's caches,
the HF view; the agent's keys through the environment only), and the run itself (``run_agent``: its output masked
into the trace, stopped on the time-limit warning or SIGTERM, the workspace synced as it runs). After the run: a
key the provider refused (``refused_key``) and the API spend the CLI reported (``api_usage``), read from its
stream output.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ptflow.cluster.preempt import SaveOnWarning
from ptflow.config.agent_clis import CONTAINER_HOME as AGENT_HOME
from ptflow.config.entries import DEFAULT_GRACE_MINUTES, DEFAULT_SYNC_MINUTES
from ptflow.jobenv import WARNING_SIGNAL, record_fact, thread_env
from ptflow.keys import DRAIN_SECONDS, Masker, Pump
from ptflow.specs import AgentCliSpec, StageRuntime
from ptflow.stages.evaluate.sources import data_env
from ptflow.stages.train.agent.budget import KILLED_EXIT, TIMEOUT_EXIT, AttemptClock
from ptflow.stages.train.agent.clis import CLIS, cell_environment, prepare_cli_home
from ptflow.stages.train.agent.context import AgentCellError, AgentEnd, AttemptContext
from ptflow.stages.train.agent.spend import SpendWatch

# The agent's argv per cli: the real CLIs' from their modules (``ptflow.stages.train.agent.clis``); an agent's own
# ``command`` in config replaces it. Placeholders: {model} {task_dir} {hours} {prompt} {prompt_file} {python}. The
# prompt is not secret; keys never appear here.
DEFAULT_COMMANDS: dict[str, list[str]] = {
    **{name: list(cli.command) for name, cli in CLIS.items()},
    # ptflow's scripted agent: a real program run through the same machinery (see ptflow.standins.scripted_agent)
    "scripted": ["{python}", "-m", "ptflow.standins.scripted_agent", "--task-dir", "{task_dir}"],
}
KILL_AFTER = "30s"
KILL_AFTER_SECONDS = 30


# The agent's defaults are the config entries' (ptflow.config.entries): a job's params leave out a key at its default.
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
    # exit 0 is no proof: opencode ends a refused key with exit 0 (each auth_failed reads its own exit codes)
    if cli is None or cli.auth_failed is None or rc in (TIMEOUT_EXIT, KILLED_EXIT):
        return None
    if not cli.auth_failed(rc, stream_events(stdout, offset)):
        return None
    names = [k for k in agent.keys if k in cli.accepted_keys] or [cli.key_var]
    via = f" (passed to {cli.name} as {cli.key_var})" if names[0] != cli.key_var else ""
    return (
        f"agent {agent.id}: the provider refused the API key in {names[0]}{via} (HTTP 401/403, {cli.name} exit "
        f"{rc}); export a valid key and run again — see {stdout.parent}/stderr.log"
    )


def api_error(agent: AgentCliSpec, rc: int, stdout: Path, offset: int) -> dict | None:
    """The API error that ended this attempt as the CLI states it (its status and error type, ``AgentCli.api_error``)
    with the CLI and the key variable it read, recorded as a fact of the job (``ptflow.jobenv.record_fact``) for
    ``ptflow.results.causes``; None where the CLI reports none or ptflow's timeout stopped it."""
    cli = CLIS.get(agent.cli)
    if cli is None or cli.api_error is None or rc in (TIMEOUT_EXIT, KILLED_EXIT):
        return None
    found = cli.api_error(rc, stream_events(stdout, offset))
    if found is None:
        return None
    names = [k for k in agent.keys if k in cli.accepted_keys] or [cli.key_var]
    error = {**found, "cli": cli.name, "key_var": names[0], "exit_code": rc}
    record_fact("api_error", **error)
    return error


def run_attempt(ctx: AttemptContext) -> AgentEnd:
    """This attempt's agent run, in the home its task gives it (``AgentTask.home``: ptflow's own task a private one
    of this attempt beside the task dir, never synced; a checkout's run_task.sh's job dir, which holds the task
    dir)."""
    with ctx.agent_cell.task.home(ctx.task_dir) as host_home:
        return _run_in_home(ctx, host_home)


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

        kind = ctx.agent_cell.runtime.kind if ctx.agent_cell.runtime else "venv"
        bound = kind in HOME_BOUND
        home = AGENT_HOME if bound else str(host_home)
        task_in = ctx.agent_cell.task.task_seen(ctx.task_dir, host_home, home, bound)
        return cls(host_home, kind, kind == "apptainer", bound, home, task_in)


def _run_in_home(ctx: AttemptContext, host_home: Path) -> AgentEnd:
    """The agent in ``host_home``: its home made, its command line and environment, the run, how it ended."""
    task = ctx.agent_cell.task
    h = AgentHome.of(ctx, host_home)
    agent = task.install(ctx.agent, host_home, h.home, h.kind)  # the task's files in the home; its command
    own = task.own_dir(ctx.task_dir)
    values = {
        "model": agent.model,
        "task_dir": h.task_in,
        "hours": f"{ctx.left / 3600:g}",
        "prompt": (own / "prompt.md").read_text(),
        "prompt_file": str(own / "prompt.md"),
        "python": sys.executable,
    }
    hf_in = task.hf_mount(host_home, h.bound) if ctx.view else None  # None: the view at its own path
    binds = task.task_binds(ctx.task_dir, h.bound) + ([str(ctx.view.workdir)] if ctx.view else [])
    binds += ([] if h.bound else [str(host_home)]) + ([f"{ctx.view.path}:{hf_in}"] if hf_in else [])
    argv = build_argv(
        agent, values, ctx.agent_cell.runtime, str(host_home), binds, hours=ctx.left / 3600, workdir=h.task_in
    )
    prompt_copy = "prompt.md" if not ctx.earlier else f"prompt-{len(ctx.earlier) + 1}.md"
    shutil.copyfile(own / "prompt.md", ctx.trace_dir / prompt_copy)
    job_env, child_env = _environment(ctx, h, agent, values["prompt"], hf_in)
    shown = [a if a != values["prompt"] else "<prompt.md>" for a in argv]
    ctx.agent_cell.log(
        f"agent {agent.id} in {ctx.task_dir} ({ctx.left / 3600:g} h of {agent.hours:g} h left): $ " + " ".join(shown)
    )
    # the agent's keys, the CLI's own variable, every secret-looking variable of the job and the child: ***
    masker = Masker.for_env({**job_env, **child_env}, agent.keys)
    if masker.notice():
        ctx.agent_cell.log(f"agent {agent.id}: {masker.notice()}")
    return _launch(ctx, argv, child_env, masker)


def _environment(
    ctx: AttemptContext, h: AgentHome, agent: AgentCliSpec, prompt: str, hf_in: str | None
) -> tuple[dict, dict]:
    """The job's environment and the agent's: the job's less the secrets the agent may not see, the CLI's home
    settings, its temp dir, the task's variables (a checkout's solve.sh: run_task.sh's), the evaluation's caches,
    the HF view."""
    task = ctx.agent_cell.task
    root = os.geteuid() == 0  # the CLI runs as the job's user in every runtime ptflow builds (docs: agent cells)
    job_env = dict(ctx.agent_cell.env or os.environ)
    if not h.container:  # the job's python first (a venv site's interpreter need not be on the job's PATH)
        job_env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), job_env.get("PATH", "")])
    hf_home = hf_in or (str(ctx.view.path) if ctx.view else None)
    # what the checkout's codex config sets for the agent's commands, where the home is a host dir: the real paths
    host_values = {"HOME": h.home, "HF_HOME": hf_home, "PATH": job_env["PATH"], "LD_LIBRARY_PATH": None}
    host_values = None if h.bound else host_values
    cli_env = prepare_cli_home(agent, h.host, h.home, h.task_in, root, host_values=host_values)
    if root and agent.cli in CLIS:
        ctx.agent_cell.log(
            f"agent {agent.id}: the job runs as root; {agent.cli} gets its sandbox switch (see docs/concepts.md)"
        )
    (h.host / "tmp").mkdir(exist_ok=True)  # the agent's own temp dir (the CLIs leave error reports there)
    if not h.container:
        keep_path_in_login_shells(h.host, job_env["PATH"])
    child_env = {
        **cell_environment(agent, job_env),
        **cli_env,
        "TMPDIR": f"{h.home}/tmp",
        **task.hub_env(),  # ptflow's own cells are offline; a checkout's agents are not
        "PTFLOW_TASK_DIR": h.task_in,
        "PTFLOW_CELL_DIR": str(task.own_dir(ctx.task_dir)),  # ptflow's own files (the scripted agent's task.json)
        "PTFLOW_AGENT_KEYS": ",".join(agent.keys),  # names only: the values are in the env already
        **task.agent_env(ctx.agent, prompt, h.home, job_env["PATH"]),  # (the agent as configured, not installed)
    }
    # the task's key rule: a checkout whose sandbox keys are main's allowlist holds exactly its union
    child_env = task.sandbox_env(ctx.agent, child_env, job_env)
    if ctx.agent_cell.threads:
        # The agent's torch (its training, its evaluate.py) as many threads as the job has CPUs, as ptflow's own
        # trainings and evaluations are (bench/RESULTS.md, "the second cut"); a value the job's environment sets (in
        # child_env already, from cell_environment) wins.
        for name, value in thread_env(ctx.agent_cell.threads).items():
            child_env.setdefault(name, value)
    if agent.evals_cache and agent.hf_home:  # evaluate.py reads offline from the evaluation's caches
        child_env.update(data_env(agent.hf_home, agent.evals_cache))
    if hf_home:
        child_env["HF_HOME"] = hf_home
    if ctx.agent_cell.runtime:
        from ptflow.cluster.runtime import container_env

        # apptainer: HOME is the user's real home for --home's handling; the container sees /home/ben
        child_env = container_env(ctx.agent_cell.runtime.site_runtime, child_env)
    return job_env, child_env


def _launch(ctx: AttemptContext, argv: list[str], child_env: dict, masker: Masker) -> AgentEnd:
    """Run the agent with its output into the trace (masked), this attempt's time and workspace synced as it runs
    (with a resume dir), stopped on the warning or SIGTERM; a refused key or a command that could not run fails the
    cell; how it ended goes to attempts.json."""
    agent_cell, agent = ctx.agent_cell, ctx.agent
    header = (
        f"=== ptflow: attempt {len(ctx.earlier) + 1} ({socket.gethostname()}, job {os.environ.get('SLURM_JOB_ID')}) ==="
    )
    sync_minutes = agent.sync_minutes if agent.sync_minutes is not None else DEFAULT_SYNC_MINUTES
    clock = None
    spend = agent_cell.spend
    watch = SpendWatch(spend, agent.cli, agent.model, ctx.trace_dir / "stdout.log", agent_cell.log) if spend else None
    with open(ctx.trace_dir / "stdout.log", "ab") as so, open(ctx.trace_dir / "stderr.log", "ab") as se:
        for fh in (so, se):
            fh.write((header + "\n").encode())
            fh.flush()
        stdout_from = so.tell()  # this attempt's events start here
        with SaveOnWarning(term=True) as warning:
            if agent_cell.resume is not None:
                clock = AttemptClock(
                    agent_cell.resume,
                    agent_cell.attempt,
                    ctx.task_dir,
                    agent_cell.workspace,
                    float(sync_minutes) * 60,
                    agent_cell.log,
                )
                clock.__enter__()
            t0 = time.time()
            if watch is not None:
                watch.__enter__()
            try:
                command = AgentCommand(argv, ctx.task_dir, child_env, so, se, masker)
                rc, stopped = run_agent(command, warning, agent_cell.log, watch.reached if watch is not None else None)
            finally:
                if clock is not None:
                    clock.__exit__(None, None, None)
                if watch is not None:
                    watch.__exit__(None, None, None)
            time_taken = time.time() - t0
    capped = watch is not None and watch.reached.is_set() and not stopped
    error = api_error(agent, rc, ctx.trace_dir / "stdout.log", stdout_from) if not stopped else None
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
        ended_by = "spend cap" if capped else ended_by
        agent_cell.resume.record_attempt(
            {
                "id": agent_cell.attempt,
                "agent": {
                    "time_taken": round(time_taken, 3),
                    "exit_code": rc,
                    "ended_by": ended_by,
                    "finished": not stopped,
                },
            }
        )
    return AgentEnd(rc, time_taken, stopped, api_error=error, spend_capped=capped)


def _ignore_warning_in_child() -> None:
    """The agent (and timeout in front of it) ignores Slurm's warning: the cell stops it on purpose, after a sync."""
    signal.signal(getattr(signal, f"SIG{WARNING_SIGNAL}"), signal.SIG_IGN)


@dataclass(frozen=True)
class AgentCommand:
    """The agent's process as it is started: its argv, working directory (the task dir) and environment (its keys
    included: they travel only here), and the files its stdout and stderr go to through ``masker`` (None: the values
    of every secret-looking variable of ``env``)."""

    argv: list[str]
    cwd: Path
    env: dict
    stdout: BinaryIO
    stderr: BinaryIO
    masker: Masker | None = None


def run_agent(command: AgentCommand, warning: SaveOnWarning, log, spend_cap=None):
    """Run the agent; on the warning or SIGTERM stop it (TERM, KILL after 30 s). (exit code, stopped by us).
    Whatever the agent script prints of a key is kept as *** in its output files. ``spend_cap`` (a threading.Event,
    ``spend.SpendWatch.reached``) set: the cell's spend cap is reached, the agent is stopped the same way, and the
    cell goes on as after a timeout (not stopped for a restart)."""
    argv, cwd, env, stdout, stderr = command.argv, command.cwd, command.env, command.stdout, command.stderr
    masker = Masker.for_env(env) if command.masker is None else command.masker
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
            capped = spend_cap is not None and spend_cap.is_set()
            if warning.requested or capped:
                why = "the spend cap reached" if capped and not warning.requested else f"{warning.reason} received"
                log(f"{why}: stopping the agent (TERM, KILL after {KILL_AFTER_SECONDS} s)")
                proc.terminate()  # timeout(1) passes TERM on to the agent
                try:
                    rc = proc.wait(timeout=KILL_AFTER_SECONDS)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    rc = proc.wait()
                return rc, warning.requested
    finally:
        # the rest of the output, masked; a process the agent left behind may hold a pipe open: read it a while
        if not pump.finish(DRAIN_SECONDS):
            log(f"the agent's output pipes were still open {DRAIN_SECONDS} s after it ended (a leftover process)")
