"""The cli-agent kind: a coding agent (claude, codex, gemini, opencode, or ptflow's scripted agent) post-trains
the model.

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

This module holds the cell's steps in their order (``train_agent_cell``) and the kind's ``run(training)``; the parts
are beside it: the task dir and workspace (``task_dir``), the budget over attempts (``budget``), the CLI's launch and
environment (``launch``), the spend and its caps while the agent runs (``spend``), and the cell and attempt they all
read (``context``: ``AgentCell``, ``AttemptContext``, and the cell's task: ptflow's own, ``own_task``, or a
PostTrainBench checkout's, ``ptflow.stages.posttrainbench.agent.CheckoutTask``; their interface is
``ptflow.stages.agent_task``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

from ptflow.cluster.preempt import StoppedToResume
from ptflow.config.entries import ON_RESTART_MODES
from ptflow.stages.checkpoint import has_weights
from ptflow.stages.posttrainbench import agent as ptb_agent
from ptflow.stages.train.agent.budget import TIMEOUT_EXIT, Budget, attempt_records, budget_exhausted, budget_of
from ptflow.stages.train.agent.context import AgentCell, AgentCellError, AgentEnd, AttemptContext
from ptflow.stages.train.agent.launch import api_usage, run_attempt, timeout_minutes
from ptflow.stages.train.agent.spend import check_matrix_cap, spend_record
from ptflow.stages.train.agent.task_dir import TaskSetup, copy_final_model, keep_workspace, make_task_dir
from ptflow.stages.train.cell import Training


def train_agent_cell(agent_cell: AgentCell) -> dict:
    """Run the agent (continuing an earlier attempt's workspace with the budget left); put its final_model (if any)
    into ``agent_cell.out``. Returns the trainer result for the manifest; raises StoppedToResume when the warning or
    SIGTERM stopped it (after a sync: the next attempt continues). The steps: the budget, the staging (HF view and
    task dir), the run, the final model and workspace kept, the manifest's record."""
    _check_cell(agent_cell)
    budget = budget_of(agent_cell)
    trace_dir = Path(agent_cell.agent.trace_dir)
    if budget.first_attempt:  # (a restart, fresh or not, appends to the trace: every attempt's stays readable)
        shutil.rmtree(trace_dir, ignore_errors=True)
    trace_dir.mkdir(parents=True, exist_ok=True)
    if not (budget.finished_before or budget.left <= 0):  # an agent that will run: not past the matrix's cap
        check_matrix_cap(agent_cell.spend, trace_dir, agent_cell.agent.id, agent_cell.log)
    started = time.time()
    from ptflow.jobenv import node_tmp

    tmp_root = node_tmp()  # $TMPDIR (Slurm's node-local SSD) when set, else /tmp: PostTrainBench's choice
    view = task_dir = None
    try:
        view, base_model = _open_view(agent_cell, tmp_root)
        task_dir = make_task_dir(tmp_root, _task_setup(agent_cell, budget, base_model, started))
        staging_seconds = time.time() - started
        if budget.earlier:
            agent_cell.log(
                f"continuing {budget.described} in {task_dir} (workspace {agent_cell.workspace}): "
                f"{max(budget.left, 0) / 60:.1f} of {budget.seconds / 60:.1f} minutes left"
            )
        ctx = AttemptContext(agent_cell, task_dir, view, trace_dir, budget.left, budget.earlier)
        end = _run_or_skip(ctx, budget)
        has_model, kept = _keep_results(ctx, budget, end)
    finally:
        if view is not None:
            from ptflow.cluster import hfview

            hfview.close_view(view, log=agent_cell.log)
        if task_dir is not None:
            shutil.rmtree(agent_cell.task.own_dir(task_dir), ignore_errors=True)
    return {
        "step": None,
        "train_loss": None,
        "final_model": has_model,
        "agent_run": agent_run_record(ctx, budget, end, has_model, kept, staging_seconds),
    }


def _check_cell(agent_cell: AgentCell) -> None:
    """The agent's keys are in the environment and its restart mode is known."""
    agent = agent_cell.agent
    missing = [k for k in agent.keys if not (agent_cell.env or os.environ).get(k)]
    if missing:
        raise AgentCellError(
            f"agent {agent.id} needs environment variable(s) {', '.join(missing)}; export them before running"
        )
    if agent.on_restart not in ON_RESTART_MODES:
        raise AgentCellError(
            f"agent {agent.id}: on_restart {agent.on_restart!r} is not one of {', '.join(ON_RESTART_MODES)}"
        )


def _open_view(agent_cell: AgentCell, tmp_root: str):
    """The HF cache as the agent's private writable view (None without a cache), and the base model's path in it."""
    from ptflow.cluster import hfview

    hf_home = agent_cell.agent.hf_home
    if not (hf_home and Path(hf_home).is_dir()):
        return None, agent_cell.start_model
    # an agent always gets a private view (it may write to the cache); the site picks overlay or copy
    method = agent_cell.runtime.site_runtime.hf_view if agent_cell.runtime else "auto"
    method = "auto" if method == "none" else method
    view_root = Path(tempfile.mkdtemp(prefix="ptflow-hfview-", dir=tmp_root))
    # a copy takes the base model's repo only (the agent may load no other model; datasets come whole)
    view = hfview.open_view(hf_home, view_root, method=method, log=agent_cell.log, models=[agent_cell.cell.model])
    rel = os.path.relpath(os.path.abspath(agent_cell.start_model), os.path.abspath(hf_home))
    return view, (agent_cell.start_model if rel.startswith("..") else str(view.path / rel))


def _task_setup(agent_cell: AgentCell, budget: Budget, base_model: str, started: float) -> TaskSetup:
    return TaskSetup(
        agent=agent_cell.agent,
        cell=agent_cell.cell,
        base_model=base_model,
        train_parquet=agent_cell.train_parquet,
        started=started,
        hours_left=max(budget.left, 0) / 3600,
        workspace=agent_cell.workspace if budget.earlier else None,
        earlier=budget.described,
        checkout=agent_cell.checkout,
        env=agent_cell.env,
    )


def _run_or_skip(ctx: AttemptContext, budget: Budget) -> AgentEnd:
    """This attempt's agent run, or none where an earlier agent ended by itself or the budget is used up."""
    if not (budget.finished_before or budget.left <= 0):
        return run_attempt(ctx)
    done = [a["agent"] for a in budget.earlier if a["agent"].get("finished")]
    ctx.agent_cell.log(
        f"agent {ctx.agent.id} is not run again: "
        + ("it ended by itself in an earlier attempt" if budget.finished_before else "its budget is used up")
    )
    return AgentEnd(done[-1].get("exit_code", 0) if done else TIMEOUT_EXIT)


def _keep_results(ctx: AttemptContext, budget: Budget, end: AgentEnd) -> tuple[bool, Path | None]:
    """After the run: a stopped agent stops the job (its workspace is synced); else ``final_model/`` to scratch and
    the workspace kept for the judge. (Whether there is a final model, the kept workspace.)"""
    agent_cell, agent = ctx.agent_cell, ctx.agent
    if end.stopped:
        raise StoppedToResume(
            f"agent {agent.id} stopped after {end.time_taken:.0f} s of this attempt "
            f"({(budget.used + end.time_taken) / 60:.1f} of {budget.seconds / 60:.1f} minutes used); its workspace "
            f"is synced to {agent_cell.workspace}: the next attempt continues there",
            reason="agent stopped for a restart",
        )
    final = ctx.task_dir / "final_model"
    has_model = has_weights(final)
    if has_model:
        moved = copy_final_model(
            final, agent_cell.out, agent_cell.workspace / "final_model" if agent_cell.workspace is not None else None
        )
        agent_cell.log(
            f"final_model/ to scratch: {moved['linked']} files linked from the workspace just synced, "
            f"{moved['copied']} copied"
        )
    else:
        agent_cell.out.mkdir(parents=True, exist_ok=True)
    kept = None
    if agent_cell.resume is not None:
        kept = keep_workspace(
            ctx.task_dir, agent_cell.resume.kept_workspace, agent_cell.log, whole=agent_cell.task.keeps_whole,
            final_model=agent_cell.out if has_model else None,
        )  # fmt: skip
    status = "budget exhausted (timeout)" if budget_exhausted(budget, end) else f"exit {end.rc}"
    status = "stopped at its spend cap" if end.spend_capped else status
    agent_cell.log(
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
    attempts = attempt_records(ctx.agent_cell.resume)
    counted = [a for a in attempts if not a.get("discarded")]
    return {
        "exit_code": end.rc,
        "budget_exhausted": budget_exhausted(budget, end),
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
        **({"api_error": end.api_error} if end.api_error else {}),  # what ended the CLI (ptflow.results.causes)
        # its dollars and cap, and stopped_by: spend_cap where the cap stopped it (ptflow.stages.train.agent.spend)
        **spend_record(ctx.agent_cell.spend, agent.cli, agent.model, ctx.trace_dir / "stdout.log", end.spend_capped),
        **({"workspace": str(kept)} if kept else {}),  # what the judge reads
        **({"cli_version": agent.cli_version} if agent.cli_version else {}),
    }


def run(training: Training) -> dict:
    """Kind ``cli-agent``: a coding agent under a time budget (PostTrainBench)."""
    agent = training.spec.agent_cli
    checkout = ptb_agent.checkout_of(training.run.checkout_marker) if agent.posttrainbench else None
    return train_agent_cell(AgentCell.of(training, checkout=checkout))
