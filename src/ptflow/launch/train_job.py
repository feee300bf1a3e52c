"""The two ways a train job starts before any training: as a login-node supervisor that submits the rule's script as
its GPU job (``ptflow.cluster.supervise``, with the SkyRL server first where the kind has one), and, inside a
multi-node allocation of a torchrun kind, as the launcher that runs the script again on every node
(``ptflow.cluster.multinode``). The training itself is ``ptflow.stages.train.cell``; rule ``train``'s script
(``workflow/scripts/train.py``) picks one of the three.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from ptflow.cluster import multinode, supervise
from ptflow.cluster.runtime import IN_RUNTIME_ENV, inside_runtime
from ptflow.config.sites import RuntimeSpec
from ptflow.jobenv import package_root
from ptflow.specs import TrainSpec


@dataclass(frozen=True)
class RuleJob:
    """The rule's job as Snakemake runs its script: the script, its output (the manifest: the cell's results dir is
    its folder), the rule's attempt, the job's wildcards and the workflow's dir."""

    script: str
    manifest: str
    attempt: int
    wildcards: list[str]
    workdir: str

    @property
    def results_dir(self) -> Path:
        return Path(self.manifest).parent


def supervises_here(spec: TrainSpec) -> bool:
    """A supervised train job on the login node (not yet the GPU job it submits)."""
    return bool(spec.supervise) and not supervise.inside_supervised_job()


def launches_nodes_here(spec: TrainSpec) -> bool:
    """A multi-node job of a torchrun kind, in its allocation, before the script runs again on each node."""
    return bool(spec.multinode) and bool(os.environ.get("SLURM_JOB_ID")) and not inside_runtime()


def threads(spec: TrainSpec, rule_threads: int) -> int:
    """The training's CPU threads: a supervised job's are its request's (the login-node rule itself has one)."""
    return spec.supervise.request.threads if spec.supervise else rule_threads


def requested_gpus(spec: TrainSpec, rule_resources) -> int:
    """The GPUs this training's job asked its site for, which its trainer trains on (``trl_common.device_args``): a
    supervised job's from its request (the login-node rule's resources are what it holds for the job), a plugin
    job's from its resources (``gpus_total``: all nodes' of a multi-node job; absent: none)."""
    if spec.supervise:
        return spec.supervise.request.gpus
    return int(rule_resources.get("gpus_total") or 0)


def supervise_train(spec: TrainSpec, rule: RuleJob, log=print) -> None:
    """Login node: submit the rule's script as the GPU job (resubmitted after infrastructure failures and saved
    stops), with its helper job first where the kind has one (the SkyRL server), and wait for it."""
    companion = None
    if spec.runtime_server:
        from ptflow.launch.skyrl import ServerCompanion

        server = spec.runtime_server
        companion = ServerCompanion.for_cell(server.server, server.coord_base, spec.params, rule.wildcards, log=log)
    job = supervise.SupervisedJob(
        rule.script,
        spec.supervise.request,
        "train",
        list(rule.wildcards),
        rule.results_dir,
        max_retries=spec.supervise.max_retries,
        attempt=rule.attempt,
        workdir=rule.workdir,
        max_resumes=spec.supervise.max_resumes,
        internal_timeout_fraction=spec.supervise.internal_timeout_fraction,
    )
    supervise.supervise(job, companion=companion, log=log)
    if not Path(rule.manifest).is_file():
        raise RuntimeError(f"the supervised job succeeded but wrote no {rule.manifest}")


def run_on_nodes(spec: TrainSpec, rule: RuleJob, log=print) -> int:
    """A multi-node job of a torchrun kind: the rule's script again on every node of the allocation, in the site's
    runtime, with TAO's rendezvous env (``ptflow.cluster.multinode``); rank 0 writes the outputs. The first
    non-zero exit code of the nodes, else 0."""
    job_runtime = spec.runtime
    rt = job_runtime.site_runtime if job_runtime else RuntimeSpec(site="local")
    python = rt.python if rt.is_container else sys.executable
    return multinode.run_nodes(
        rt,
        multinode.torchrun_argv(python, rule.script),
        rule.results_dir,
        gpus_per_node=spec.multinode.gpus_per_node,
        image=job_runtime.image if job_runtime else None,
        binds=(*job_runtime.binds, rule.workdir, package_root()) if job_runtime else (),
        extra_env={IN_RUNTIME_ENV: "1", "HF_HUB_OFFLINE": "1"},
        log=log,
    )
