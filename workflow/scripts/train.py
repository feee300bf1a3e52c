"""Adapter: rule train -> ptflow.train.run.train_cell."""

import json
import sys
from pathlib import Path

from ptflow.cluster import hfcache, supervise
from ptflow.cluster.preempt import warning_seconds
from ptflow.cluster.runtime import reexec_in_runtime
from ptflow.jobenv import rule_log
from ptflow.stages.train.cell import train_cell, verify_checkpoint


def supervise_this_job(job, log) -> None:
    """Login node: submit this script as the GPU job (resubmitted after infrastructure failures) and wait."""
    resources = {k: snakemake.resources[k] for k in snakemake.resources.keys()}
    supervise.supervise(
        sys.argv[0],
        resources=resources,
        job_name=f"ptflow-train-{snakemake.wildcards.model}-{snakemake.wildcards.eval}-{snakemake.wildcards.agent}",
        results_dir=Path(snakemake.output[0]).parent,
        log=log,
        **job["supervise"],
    )
    if not Path(snakemake.output[0]).is_file():
        raise RuntimeError(f"the supervised job succeeded but wrote no {snakemake.output[0]}")


with rule_log(snakemake.log[0]) as log:
    job = snakemake.params.job
    if job.get("supervise") and not supervise.inside_supervised_job():
        supervise_this_job(job, log)
        sys.exit(0)
    # Ray kinds stay on the batch host (their srun steps use it); a cli-agent puts only the agent in the container
    if job["kind"] not in ("verl", "nemo-distill", "cli-agent"):
        reexec_in_runtime(job.get("runtime"), log)  # container or site venv; returns at once on the local default
    parent = snakemake.input.get("parent")
    if parent:
        start = str(verify_checkpoint(json.loads(Path(parent).read_text())))
    else:
        start = str(hfcache.snapshot_path(job["hf_home"], job["cell"]["model"], "model", job["model_revision"]))
    train_cell(
        cell=job["cell"],
        kind=job["kind"],
        params=job["params"],
        start_model=start,
        train_parquet=snakemake.input.get("data"),
        checkpoint_dir=job["checkpoint_dir"],
        config_hash=job["config_hash"],
        manifest_path=snakemake.output[0],
        parent_manifest=parent,
        threads=job.get("supervise", {}).get("cpus", snakemake.threads),  # supervised: the site's CPUs
        runtime=job.get("runtime"),
        agent=job.get("agent"),
        warn_seconds=warning_seconds(snakemake.resources.get("slurm_extra")),
        log=log,
    )
