"""Multi-node stages: the rule body runs once, on the first node of the allocation, and spreads processes itself.

The slurm executor plugin runs a rule with resources ``nodes``, ``tasks`` and ``mpi="srun"`` once, without an
inner srun; its job step removes ``SLURM_JOB_NODELIST`` and friends, so the node list is read back from Slurm.

For torchrun-style jobs in containers (pyxis/TAO):

- :func:`rendezvous_env` — per node ``WORLD_SIZE`` (nodes, TAO's convention: torchrun ``--nnodes``),
  ``MASTER_ADDR`` (NodeAddr of the allocation's first node), ``MASTER_PORT`` (from the job id, below the
  ephemeral range), ``NODE_RANK`` and ``NUM_GPU_PER_NODE``, from the node list read back from Slurm.
- :func:`node_argvs` — one ``srun --nodes=1 --nodelist=<node> --export=ALL,<env>`` step per node, through
  ``ptflow.cluster.runtime.runtime_argv`` (``--container-image=… --container-mounts=/lustre…`` on a pyxis site).
- :func:`run_nodes` — both, inside an allocation, with ``nodes.json`` written before and after.
- :func:`torchrun_argv` / ``python -m ptflow.cluster.multinode torchrun SCRIPT`` — what each node runs for a
  multi-node train job of a torchrun kind (``AgentKind.multinode``): it prints its rendezvous env (one line per node
  in the job log) and execs ``torch.distributed.run`` with it, which starts ``NUM_GPU_PER_NODE`` ranks of the rule's
  script (one on a CPU node); rank 0 alone writes the checkpoint and manifest.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from ptflow.cluster import slurm
from ptflow.config.sites import RuntimeSpec

PORT_FLOOR, PORT_SPAN = 20000, 12000  # MASTER_PORT in 20000..31999: below the ephemeral range (32768)


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


# ---- torchrun-style rendezvous over the allocation (pyxis/TAO) ----


def master_port(job_id: int | str) -> int:
    return PORT_FLOOR + int(job_id) % PORT_SPAN


def rendezvous_env(nodes: Sequence[str], addrs: dict[str, str], gpus_per_node: int, job_id: int | str) -> list[dict]:
    """One env per node (in allocation order; the first node is the master)."""
    if not nodes:
        raise ValueError("rendezvous_env: the allocation has no nodes")
    common = {
        "WORLD_SIZE": str(len(nodes)),
        "MASTER_ADDR": addrs.get(nodes[0], nodes[0]),
        "MASTER_PORT": str(master_port(job_id)),
        "NUM_GPU_PER_NODE": str(gpus_per_node),
    }
    return [{**common, "NODE_RANK": str(i)} for i in range(len(nodes))]


def node_argvs(
    rt: RuntimeSpec, nodes: Sequence[str], envs: Sequence[dict], command: list[str], *, image=None, binds=()
) -> list:
    """One srun step per node running ``command`` through the site's runtime with that node's env."""
    from ptflow.cluster.runtime import runtime_argv

    out = []
    for node, env in zip(nodes, envs, strict=True):
        inner = runtime_argv(rt, command, image=image, binds=binds)
        step = ["--nodes=1", f"--nodelist={node}", "--export=ALL," + ",".join(f"{k}={v}" for k, v in env.items())]
        if inner[0] == "srun":  # pyxis / EDF: runtime_argv already is an srun step
            argv = [inner[0], *step, *inner[1:]]
        else:
            argv = ["srun", "--overlap", "--ntasks=1", *step, *inner]
        out.append(argv)
    return out


RENDEZVOUS = ("WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "NUM_GPU_PER_NODE")


def run_nodes(
    rt: RuntimeSpec,
    command: list[str],
    results_dir: str | Path,
    *,
    gpus_per_node: int = 0,
    image=None,
    binds=(),
    extra_env: dict | None = None,
    log=print,
):
    """Inside an allocation: the rendezvous env (plus ``extra_env``) on every node, one step each; ``nodes.json``
    in ``results_dir`` says which nodes ran with which env and how they ended. Returns the first non-zero rc."""
    from ptflow.files import write_json_atomic

    job_id = os.environ.get("SLURM_JOB_ID")
    nodes = allocation_nodes(job_id)
    addrs = {n: a.addr for n, a in slurm.node_addresses(nodes).items()}
    envs = [{**env, **(extra_env or {})} for env in rendezvous_env(nodes, addrs, gpus_per_node, job_id)]
    argvs = node_argvs(rt, nodes, envs, command, image=image, binds=binds)
    status = Path(results_dir) / "nodes.json"
    rendezvous = [{k: env[k] for k in RENDEZVOUS} for env in envs]
    write_json_atomic(status, {"status": "running", "job_id": job_id, "nodes": nodes, "rendezvous": rendezvous})
    procs = []
    for argv in argvs:
        log(f"node step: {' '.join(argv)}")
        procs.append(subprocess.Popen(argv))
    rcs = _wait_forwarding(procs)
    rc = next((r for r in rcs if r != 0), 0)
    write_json_atomic(
        status,
        {"status": "succeeded" if rc == 0 else "failed", "job_id": job_id, "nodes": nodes, "rendezvous": rendezvous,
         "returncodes": rcs},
    )  # fmt: skip
    return rc


def _wait_forwarding(procs: list[subprocess.Popen]) -> list[int]:
    """Wait for the node steps, passing the time-limit warning and SIGTERM on to each (srun forwards them to its
    tasks): in a supervised job only the batch shell gets the warning, and it forwards it to this process."""
    import signal

    from ptflow.jobenv import WARNING_SIGNAL

    def forward(signum, _frame):
        for p in procs:
            if p.poll() is None:
                p.send_signal(signum)

    forwarded = (getattr(signal, f"SIG{WARNING_SIGNAL}"), signal.SIGTERM)
    saved = {sig: signal.signal(sig, forward) for sig in forwarded}
    try:
        return [p.wait() for p in procs]
    finally:
        for sig, old in saved.items():
            signal.signal(sig, old)


def torchrun_argv(python: str, script: str) -> list[str]:
    """Each node's command for a torchrun kind: this module's launcher, which reads the node's rendezvous env."""
    return [python, "-m", "ptflow.cluster.multinode", "torchrun", script]


def exec_torchrun(script: str, env=os.environ) -> None:
    """Replace this process with ``torch.distributed.run`` for the node's rendezvous env (TAO's WORLD_SIZE is the
    number of nodes: torchrun's ``--nnodes``; it sets torch's own WORLD_SIZE, the number of ranks, for the ranks)."""
    missing = [k for k in RENDEZVOUS if not env.get(k)]
    if missing:
        raise SystemExit(f"ptflow.cluster.multinode torchrun: {', '.join(missing)} not set; run_nodes sets them")
    values = " ".join(f"{k}={env[k]}" for k in RENDEZVOUS)
    print(f"ptflow node {env.get('SLURMD_NODENAME', socket.gethostname())}: {values}", flush=True)
    nproc = max(int(env["NUM_GPU_PER_NODE"]), 1)
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nnodes={env['WORLD_SIZE']}",
        f"--node-rank={env['NODE_RANK']}",
        f"--nproc-per-node={nproc}",
        f"--master-addr={env['MASTER_ADDR']}",
        f"--master-port={env['MASTER_PORT']}",
        script,
    ]
    # torchrun dies of Slurm's warning (USR1 to every process of the step): it and its ranks ignore it, and the
    # ranks' trainers catch it again (ptflow.cluster.preempt.SaveOnWarning)
    from ptflow.jobenv import ignore_time_limit_warning

    ignore_time_limit_warning()
    os.execv(sys.executable, argv)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "torchrun":
        raise SystemExit("usage: python -m ptflow.cluster.multinode torchrun SCRIPT")
    exec_torchrun(sys.argv[2])
