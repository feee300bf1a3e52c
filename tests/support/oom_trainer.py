"""STAND-IN trainer for a train job that runs out of GPU memory: the agents named in ``PTFLOW_TEST_OOM_AGENTS``
(comma-separated ids) fail at once with torch's ``OutOfMemoryError``, as TRL's trainer fails on a GPU too small for
its batch; every other agent trains with its kind's real trainer. It raises inside the real train job, under the rule
log (``ptflow.jobenv.rule_log``), which records the fact ``ptflow.results.causes`` reads: what a real GPU job's OOM
leaves. The test cluster cannot make a real one (no GPUs; without cgroups Slurm enforces no ``--mem``:
ProctrackType=proctrack/linuxproc, TaskPlugin=task/none in tests/support/local_slurm.py).

Put in place by ``tests/support/oom_site/sitecustomize.py`` (on ``PYTHONPATH``) for the kind ``trl-sft``."""

from __future__ import annotations

import os

AGENTS_ENV = "PTFLOW_TEST_OOM_AGENTS"


def run(job) -> dict:
    """``ptflow.stages.train.sft.run`` unless the cell's agent is one to fail."""
    if job.spec.cell.agent in os.environ.get(AGENTS_ENV, "").split(","):
        import torch

        raise torch.OutOfMemoryError(
            "CUDA out of memory. Tried to allocate 2.00 GiB (stand-in trainer of tests/support/oom_trainer.py)"
        )
    from ptflow.stages.train.sft import run as sft_run

    return sft_run(job)
