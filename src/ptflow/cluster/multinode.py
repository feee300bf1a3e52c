"""Multi-node stages: the rule body runs once, on the first node of the allocation, and spreads processes itself.

The slurm executor plugin runs a rule with resources ``nodes``, ``tasks`` and ``mpi="srun"`` once, without an
inner srun; its job step removes ``SLURM_JOB_NODELIST`` and friends, so the node list is read back from Slurm.
"""

from __future__ import annotations

import os

from ptflow.cluster import slurm


def allocation_nodes(job_id: str | None = None) -> list[str]:
    job_id = job_id or os.environ.get("SLURM_JOB_ID")
    if not job_id:
        raise RuntimeError("SLURM_JOB_ID is not set: a multi-node stage must run inside a Slurm allocation")
    return slurm.hostnames(slurm.job_nodelist(job_id))


def srun_argv(
    nodes: list[str], command: list[str], *, ntasks_per_node: int = 1, overlap: bool = True, launcher: str = "srun"
) -> list[str]:
    """srun over exactly ``nodes`` inside the current allocation."""
    argv = [launcher, f"--nodes={len(nodes)}", f"--ntasks-per-node={ntasks_per_node}", f"--nodelist={','.join(nodes)}"]
    if overlap:
        argv.append("--overlap")  # share the allocation's CPUs with steps already running (e.g. a Ray head)
    return argv + command
