"""Adapter: rule train -> one of three paths, each one call into the package: the login-node supervisor that submits
this same script as the GPU job (ptflow.launch.train_job.supervise_train), the launcher of a multi-node torchrun job
(ptflow.launch.train_job.run_on_nodes), or the training itself (ptflow.stages.train.cell.train_in_job), followed by
the cell's evaluation in the same allocation where the kind evaluates there."""

import os
import sys

from ptflow.cluster.preempt import warning_seconds
from ptflow.cluster.runtime import reexec_in_runtime
from ptflow.config.kinds import KINDS
from ptflow.jobenv import rule_log
from ptflow.launch import train_job
from ptflow.specs import TrainSpec
from ptflow.stages.train.cell import TrainRun, start_model, train_in_job
from ptflow.warmstart import hand_over

hand_over()  # a local run: go on in a process that has the heavy libraries imported (ptflow.warmstart)


def evaluate_after_agent(evaluation: dict, threads: int, log) -> None:
    """The cell's evaluation (or its seeds') in this allocation, staged for the evaluate jobs
    (ptflow.stages.evaluate.job); whatever happens to it, this job has done its work (those jobs evaluate then)."""
    from ptflow.stages.evaluate import job as evaluation_job

    try:
        evaluation_job.evaluate_after_agent(
            evaluation, manifest=snakemake.output[0], checkout=snakemake.input.get("checkout"),
            test_parquet=snakemake.input.get("test"), threads=threads, log=log,
        )  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - the agent's work is done and kept; only the shortcut is lost
        log(f"no evaluation in this allocation ({type(exc).__name__}: {exc}); the evaluate jobs evaluate")


with rule_log(snakemake.log[0]) as log:
    params = snakemake.params.job  # one value (ptflow.specs.RuleParams): the spec, and beside it what reruns nothing
    job = TrainSpec.from_params(params)
    rule = train_job.RuleJob(sys.argv[0], snakemake.output[0], snakemake.resources.get("attempt", 1),
                             list(snakemake.wildcards), os.getcwd())  # fmt: skip
    if train_job.supervises_here(job):
        train_job.supervise_train(job, rule, log)
        sys.exit(0)
    if train_job.launches_nodes_here(job):
        sys.exit(train_job.run_on_nodes(job, rule, log))
    if KINDS[job.kind].reexec_in_runtime:
        reexec_in_runtime(job.runtime, log)  # container or site venv; returns at once on the local default
    parent = snakemake.input.get("parent")
    run = TrainRun(
        start_model=start_model(job, parent),
        train_parquet=snakemake.input.get("data"),
        manifest_path=snakemake.output[0],
        parent_manifest=parent,
        checkout_marker=snakemake.input.get("checkout"),
        threads=train_job.threads(job, snakemake.threads),
        gpus=train_job.requested_gpus(job, snakemake.resources),
        warn_seconds=warning_seconds(snakemake.resources.get("slurm_extra")),
        log=log,
        spend=params.beside["spend"],  # an agent cell's spend settings (ptflow.config.spend.CellSpend)
    )
    rc = train_in_job(job, run)
    if rc:
        sys.exit(rc)  # saved and stopped: resumed by the next attempt
    # the evaluate jobs' params where this cell evaluates here (None: a kind that evaluates in its evaluate job)
    if KINDS[job.kind].evaluates_in_train_job and params.beside["evaluation"]:
        evaluate_after_agent(params.beside["evaluation"], run.threads, log)
