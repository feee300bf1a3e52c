"""The cli-agent kind: a coding agent (claude, codex, gemini, or our scripted agent) post-trains the model.

Per cell, as PostTrainBench does it:

1. a private task dir in node-local tmp: ``prompt.md`` (from ``ptflow/templates/agent_prompt.md.j2``), the
   evaluation kit (``evaluate.py`` with PostTrainBench's interface, ``templates/`` and ``evaluate_settings.json``:
   the same task, provider and settings as the final evaluation), the train split, a ``deadline`` file and
   ``timer.sh``;
2. the HF cache as a private writable view (``ptflow.cluster.hfview``) so the agent cannot damage the shared cache;
3. the agent CLI under ``timeout --signal=TERM --kill-after=30s <hours*60+grace>m``, on container sites inside the
   agent's image with ``--nv -c --writable-tmpfs --home <task_dir>:/home/agent`` (built by ``ptflow.cluster.runtime``);
4. ``time_taken`` and the exit code recorded; exit 124 (137 after the KILL) means the budget ran out — not an error:
   whatever ``final_model/`` exists is used, and the manifest says so;
5. ``final_model/`` copied to the checkpoint dir on scratch; the trace (stdout/stderr) kept in the cell's results.

API keys named by the agent's ``keys`` reach the agent through its environment only — never argv, files or logs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from ptflow import templates
from ptflow.config import tasks
from ptflow.stages.checkpoint import has_weights
from ptflow.stages.evaluate.run import with_toy_data, write_agent_kit
from ptflow.stages.evaluate.sources import data_env

# The agent's argv per cli; an agent's own ``command`` in config replaces it. Placeholders: {model} {task_dir}
# {hours} {prompt} {prompt_file} {python}. The prompt is not secret; keys never appear here.
DEFAULT_COMMANDS: dict[str, list[str]] = {
    "claude": [
        "claude",
        "--print",
        "--verbose",
        "--output-format",
        "stream-json",
        "--dangerously-skip-permissions",
        "--model",
        "{model}",
        "{prompt}",
    ],
    "codex": [
        "codex",
        "exec",
        "--json",
        "--skip-git-repo-check",
        "--dangerously-bypass-approvals-and-sandbox",
        "--model",
        "{model}",
        "{prompt}",
    ],
    "gemini": ["gemini", "--yolo", "--output-format", "stream-json", "--model", "{model}", "--prompt", "{prompt}"],
    # ptflow's scripted agent: a real program run through the same machinery (see ptflow.standins.scripted_agent)
    "scripted": ["{python}", "-m", "ptflow.standins.scripted_agent", "--task-dir", "{task_dir}"],
}
TIMEOUT_EXIT = 124  # timeout(1): the command was stopped with TERM
KILLED_EXIT = 137  # 128 + KILL: it ignored TERM for --kill-after
KILL_AFTER = "30s"


class AgentCellError(RuntimeError):
    pass


def timeout_minutes(hours: float, grace_minutes: float = 5.0) -> float:
    return hours * 60 + grace_minutes


def timeout_argv(hours: float, grace_minutes: float = 5.0) -> list[str]:
    """``timeout --signal=TERM --kill-after=30s <hours*60+grace>m`` (GNU timeout takes fractional durations)."""
    return ["timeout", "--signal=TERM", f"--kill-after={KILL_AFTER}", f"{timeout_minutes(hours, grace_minutes):g}m"]


def agent_command(agent: dict, values: dict) -> list[str]:
    template = agent.get("command") or DEFAULT_COMMANDS.get(agent["cli"])
    if template is None:
        raise AgentCellError(
            f"agent {agent['id']}: cli {agent['cli']!r} has no default command (known: "
            f"{', '.join(sorted(DEFAULT_COMMANDS))}); give the agent a 'command' list in config"
        )
    try:
        return [part.format(**values) for part in template]
    except KeyError as exc:
        raise AgentCellError(
            f"agent {agent['id']}: command placeholder {exc} is unknown; use {', '.join('{' + k + '}' for k in values)}"
        ) from None


def build_argv(agent: dict, values: dict, runtime: dict | None, task_dir: str, binds: list[str]) -> list[str]:
    """The full argv: timeout, then (container sites) the runtime, then the agent CLI."""
    from ptflow.cluster.runtime import JobRuntime, runtime_argv

    command = agent_command(agent, values)
    if runtime:
        job = JobRuntime.from_dict(runtime)
        command = runtime_argv(
            job.runtime,
            command,
            image=job.image,
            job_dir=task_dir,
            agent_cell=True,
            gpus=job.gpus,
            binds=sorted(set(job.binds) | set(binds)),
        )
    return timeout_argv(agent["hours"], agent.get("grace_minutes", 5.0)) + command


def _hours_text(hours: float) -> str:
    minutes = hours * 60
    return f"{hours:g} hours" if hours >= 1 else f"{minutes:g} minutes"


def make_task_dir(
    root: str | None, *, agent: dict, cell: dict, base_model: str, train_parquet: str | None, started: float
) -> Path:
    """The agent's private task dir: prompt, evaluation kit (``evaluate.py``: the final evaluation's call), train
    data, deadline file and timer."""
    task_dir = Path(tempfile.mkdtemp(prefix=f"ptflow-agent-{agent['id']}-", dir=root))
    (task_dir / "data").mkdir()
    train_data = None
    if train_parquet:
        train_data = task_dir / "data" / "train.parquet"
        shutil.copyfile(train_parquet, train_data)
    call = agent.get("eval_call")
    if call:
        if call["task"] == tasks.TOY_TASK:
            # The toy task's data is the workflow's test parquet (PostTrainBench's evals read theirs from the
            # caches): the agent measures on it, as the final evaluation does, and must not train on it.
            (task_dir / "eval_data").mkdir()
            shutil.copyfile(agent["eval_test_parquet"], task_dir / "eval_data" / "test.parquet")
            call = with_toy_data(call, task_dir / "eval_data" / "test.parquet")
        write_agent_kit(task_dir, call)
    deadline = started + agent["hours"] * 3600
    (task_dir / "deadline").write_text(f"{int(deadline)}\n")
    shutil.copyfile(templates.path("agent_timer.sh"), task_dir / "timer.sh")
    (task_dir / "timer.sh").chmod(0o755)
    prompt = templates.render(
        "agent_prompt.md.j2",
        model_id=cell["model"],
        eval_id=cell["eval"],
        eval_task=agent.get("eval_task", cell["eval"]),
        max_new_tokens=agent.get("max_new_tokens", "?"),
        hours_text=_hours_text(agent["hours"]),
        deadline_iso=datetime.fromtimestamp(deadline, UTC).isoformat(timespec="seconds"),
        task_dir=str(task_dir),
        base_model=base_model,
        train_data=str(train_data) if train_data else "(none: bring your own data)",
    )
    (task_dir / "prompt.md").write_text(prompt)
    (task_dir / "task.json").write_text(
        json.dumps(
            {"base_model": base_model, "train_data": str(train_data) if train_data else None, "deadline": deadline}
        )
    )
    return task_dir


def train_agent_cell(
    start_model: str,
    train_parquet: str | None,
    out: Path,
    *,
    agent: dict,
    cell: dict,
    runtime: dict | None = None,
    log=print,
    env: dict | None = None,
) -> dict:
    """Run the agent; put its final_model (if any) into ``out``. Returns the trainer result for the manifest."""
    from ptflow.cluster import hfview

    missing = [k for k in agent.get("keys", []) if not (env or os.environ).get(k)]
    if missing:
        raise AgentCellError(
            f"agent {agent['id']} needs environment variable(s) {', '.join(missing)}; export them before running"
        )
    trace_dir = Path(agent["trace_dir"])
    shutil.rmtree(trace_dir, ignore_errors=True)
    trace_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    from ptflow.jobenv import node_tmp

    tmp_root = node_tmp()  # $TMPDIR (Slurm's node-local SSD) when set, else /tmp: PostTrainBench's choice
    hf_home = agent.get("hf_home")
    view = None
    base_model = start_model
    task_dir = None
    try:
        if hf_home and Path(hf_home).is_dir():
            # an agent always gets a private view (it may write to the cache); the site picks overlay or copy
            method = runtime["runtime"].get("hf_view", "auto") if runtime else "auto"
            method = "auto" if method == "none" else method
            view_root = Path(tempfile.mkdtemp(prefix="ptflow-hfview-", dir=tmp_root))
            view = hfview.open_view(hf_home, view_root, method=method, log=log)
            rel = os.path.relpath(os.path.abspath(start_model), os.path.abspath(hf_home))
            if not rel.startswith(".."):
                base_model = str(view.path / rel)
        task_dir = make_task_dir(
            tmp_root, agent=agent, cell=cell, base_model=base_model, train_parquet=train_parquet, started=started
        )
        values = {
            "model": agent["model"],
            "task_dir": str(task_dir),
            "hours": f"{agent['hours']:g}",
            "prompt": (task_dir / "prompt.md").read_text(),
            "prompt_file": str(task_dir / "prompt.md"),
            "python": sys.executable,
        }
        binds = [str(task_dir)] + ([str(view.workdir)] if view else [])
        argv = build_argv(agent, values, runtime, str(task_dir), binds)
        shutil.copyfile(task_dir / "prompt.md", trace_dir / "prompt.md")
        child_env = {
            **(env or os.environ),
            "HF_HUB_OFFLINE": "1",
            "PTFLOW_TASK_DIR": str(task_dir),
            "PTFLOW_AGENT_KEYS": ",".join(agent.get("keys", [])),  # names only: the values are in the env already
        }
        if agent.get("evals_cache") and hf_home:  # evaluate.py reads offline from the final evaluation's caches
            child_env.update(data_env(hf_home, agent["evals_cache"]))
        if view:
            child_env["HF_HOME"] = str(view.path)
        if runtime:
            from ptflow.cluster.runtime import JobRuntime, container_env

            child_env = container_env(JobRuntime.from_dict(runtime).runtime, child_env)  # HOME for apptainer --home
        shown = [a if a != values["prompt"] else "<prompt.md>" for a in argv]
        log(f"agent {agent['id']} in {task_dir} (budget {agent['hours']:g} h): $ " + " ".join(shown))
        t0 = time.time()
        with open(trace_dir / "stdout.log", "wb") as so, open(trace_dir / "stderr.log", "wb") as se:
            rc = subprocess.run(argv, cwd=task_dir, env=child_env, stdout=so, stderr=se).returncode
        time_taken = time.time() - t0
        if rc in (126, 127):
            raise AgentCellError(
                f"agent {agent['id']}: {argv[len(timeout_argv(1))]!r} could not be run (exit {rc}, see "
                f"{trace_dir}/stderr.log); install the agent CLI in the image or fix the agent's command"
            )
        budget_exhausted = rc in (TIMEOUT_EXIT, KILLED_EXIT)
        final = task_dir / "final_model"
        has_model = has_weights(final)
        if has_model:
            shutil.copytree(final, out, symlinks=False)
        else:
            out.mkdir(parents=True, exist_ok=True)
        status = "budget exhausted (timeout)" if budget_exhausted else f"exit {rc}"
        log(
            f"agent {agent['id']}: {status} after {time_taken:.1f} s; final_model: "
            + ("copied to scratch" if has_model else "none — the cell will show 'no final model'")
        )
    finally:
        if view is not None:
            hfview.close_view(view, log=log)
        if task_dir is not None:
            shutil.rmtree(task_dir, ignore_errors=True)
    return {
        "step": None,
        "train_loss": None,
        "final_model": has_model,
        "agent_run": {
            "exit_code": rc,
            "budget_exhausted": budget_exhausted,
            "time_taken": round(time_taken, 3),
            "hours": agent["hours"],
            "timeout_minutes": timeout_minutes(agent["hours"], agent.get("grace_minutes", 5.0)),
            "final_model": has_model,
            "trace_dir": str(trace_dir),
            "cli": agent["cli"],
            "model": agent["model"],
        },
    }


def run(job) -> dict:
    """Kind ``cli-agent``: a coding agent under a time budget (PostTrainBench)."""
    return train_agent_cell(
        job.start_model, job.train_parquet, job.out, agent=job.agent, cell=job.cell, runtime=job.runtime, log=job.log
    )
