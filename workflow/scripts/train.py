"""Adapter: rule train -> ptflow.stages.train.cell.train_cell (or, for supervised train jobs, the login-node
supervisor that submits this same script as the GPU job)."""

import json
import os
import sys
from pathlib import Path

from ptflow.cluster import hfcache, supervise
from ptflow.cluster.preempt import RESUME_EXIT, StoppedToResume, warning_seconds, write_stop_marker
from ptflow.cluster.runtime import IN_RUNTIME_ENV, JobRuntime, inside_runtime, reexec_in_runtime
from ptflow.config.kinds import KINDS
from ptflow.config.sites import Request
from ptflow.jobenv import package_root, rule_log
from ptflow.specs import TrainSpec
from ptflow.stages.checkpoint import verify_checkpoint
from ptflow.stages.posttrainbench.agent import with_checkout
from ptflow.stages.train.cell import train_cell
from ptflow.warmstart import hand_over

hand_over()  # a local run: go on in a process that has the heavy libraries imported (ptflow.warmstart)


def supervise_this_job(job: TrainSpec, log) -> None:
    """Login node: submit this script as the GPU job (resubmitted after infrastructure failures and saved stops),
    with its helper job first where the kind has one (SkyRL's runtime server), and wait."""
    spec = job.supervise
    companion = None
    if job.runtime_server:
        from ptflow.launch.skyrl import ServerCompanion

        server = job.runtime_server
        companion = ServerCompanion.for_cell(server.server, server.coord_base, job.params, snakemake.wildcards, log=log)
    supervise.supervise(
        sys.argv[0],
        request=Request.from_dict(spec.request),
        attempt=snakemake.resources["attempt"],
        rule="train",
        wildcards=list(snakemake.wildcards),
        results_dir=Path(snakemake.output[0]).parent,
        workdir=os.getcwd(),
        max_retries=spec.max_retries,
        max_resumes=spec.max_resumes,
        internal_timeout_fraction=spec.internal_timeout_fraction,
        companion=companion,
        log=log,
    )
    if not Path(snakemake.output[0]).is_file():
        raise RuntimeError(f"the supervised job succeeded but wrote no {snakemake.output[0]}")


def run_on_nodes(job: TrainSpec, log) -> int:
    """A multi-node job of a torchrun kind: this script again on every node of the allocation, in the site's
    runtime, with TAO's rendezvous env (ptflow.cluster.multinode); rank 0 writes the outputs."""
    from ptflow.cluster import multinode
    from ptflow.config.sites import RuntimeSpec

    spec = JobRuntime.from_dict(job.runtime) if job.runtime else None
    rt = spec.runtime if spec else RuntimeSpec(site="local")
    python = rt.python if rt.is_container else sys.executable
    return multinode.run_nodes(
        rt,
        multinode.torchrun_argv(python, sys.argv[0]),
        Path(snakemake.output[0]).parent,
        gpus_per_node=job.multinode.gpus_per_node,
        image=spec.image if spec else None,
        binds=(*spec.binds, os.getcwd(), package_root()) if spec else (),
        extra_env={IN_RUNTIME_ENV: "1", "HF_HUB_OFFLINE": "1"},
        log=log,
    )


def evaluate_after_agent(threads: int, log) -> None:
    """The cell's evaluation in this allocation, staged for the evaluate job (ptflow.jobs.evaluation); whatever
    happens to it, this job has done its work (the evaluate job evaluates by itself then)."""
    from ptflow.jobs.evaluation import evaluate_in_train_job, spec_for_train_job

    cell = (snakemake.wildcards.model, snakemake.wildcards.eval, snakemake.wildcards.agent)
    checkout = snakemake.input.get("checkout")
    workflow_dir = Path(snakemake.scriptdir).resolve().parents[1]  # scriptdir: workflow/rules/../scripts
    try:
        spec, eval_json = spec_for_train_job(snakemake.config, workflow_dir, cell, checkout)
        evaluate_in_train_job(spec, eval_json=eval_json, manifest=snakemake.output[0], checkout=checkout,
                              test_parquet=snakemake.input.get("test"), threads=threads, log=log)  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - the agent's work is done and kept; only the shortcut is lost
        log(f"no evaluation in this allocation ({type(exc).__name__}: {exc}); the evaluate job evaluates")


with rule_log(snakemake.log[0]) as log:
    job = TrainSpec.from_params(snakemake.params.job)
    if job.supervise and not supervise.inside_supervised_job():
        supervise_this_job(job, log)
        sys.exit(0)
    if job.multinode and os.environ.get("SLURM_JOB_ID") and not inside_runtime():
        sys.exit(run_on_nodes(job, log))
    if KINDS[job.kind].reexec_in_runtime:
        reexec_in_runtime(job.runtime, log)  # container or site venv; returns at once on the local default
    parent = snakemake.input.get("parent")
    if parent:
        start = str(verify_checkpoint(json.loads(Path(parent).read_text())))
    else:
        start = str(hfcache.snapshot_path(job.hf_home, job.cell.model, "model", job.model_revision))
    # supervised: the job's CPUs are its request's (the login-node rule itself has one thread)
    threads = Request.from_dict(job.supervise.request).threads if job.supervise else snakemake.threads
    try:
        train_cell(
            cell=job.cell.to_params(),
            kind=job.kind,
            params=job.params,
            start_model=start,
            train_parquet=snakemake.input.get("data"),
            checkpoint_dir=job.checkpoint_dir,
            config_hash=job.config_hash,
            manifest_path=snakemake.output[0],
            parent_manifest=parent,
            threads=threads,
            runtime=job.runtime,
            # the kind's own part (agent CLI, runtime server) as the kinds read it
            agent=with_checkout(job.agent.to_params() if job.agent else None, snakemake.input.get("checkout")),
            warn_seconds=warning_seconds(snakemake.resources.get("slurm_extra")),
            log=log,
        )
    except StoppedToResume as exc:
        # Saved and stopped (time-limit warning, SIGTERM, internal timeout): not a training error. The marker tells
        # a supervisor to resubmit; Snakemake's retry (or the next run) resumes the same way.
        write_stop_marker(
            Path(snakemake.output[0]).parent / "slurm",
            os.environ.get("SLURM_JOB_ID"),
            {"step": exc.step, "reason": exc.reason, "message": str(exc)},
        )
        log(f"stopped to be resumed: {exc}")
        sys.exit(RESUME_EXIT)
    if KINDS[job.kind].evaluates_in_train_job:
        evaluate_after_agent(threads, log)
