"""One job's resolved request on a site, and the two forms Slurm gets it in.

:meth:`ptflow.config.sites.Site.request` merges a site file's requests into a :class:`Request` (the site's fallback
and per-agent requests, ``time_hours``, GPUs spread over whole nodes by :func:`spread_gpus`); this module owns what it
becomes: the slurm executor plugin's resources (:meth:`Request.snakemake_resources`, what rules get) or sbatch flags
(:meth:`Request.sbatch_options`, what ptflow's own submissions get: the supervisor's train jobs and the SkyRL
server). One table (:data:`PLUGIN_FLAGS`) maps between the two, so both ask Slurm for the same thing; a retry asks
for more of what may have run out (:meth:`Request.scaled`), never past the partition's limits.
"""

from __future__ import annotations

import dataclasses
import math
import shlex
from dataclasses import dataclass, field

from ptflow.jobenv import WARNING_SIGNAL

# What a retry asks more of (site retry_growth), each capped by the partition's limit of that name.
SCALED_BY_ATTEMPT = {"runtime": "max_runtime", "mem_mb": "max_mem_mb"}

# The time-limit warning (WARNING_SIGNAL, ptflow.jobenv): `warn_seconds` in a request becomes --signal=USR1@N (no B:,
# see ptflow.cluster.preempt).

# snakemake-executor-plugin-slurm's resource names and the sbatch flag each becomes (plugin 2.8.0, submit_string.py).
PLUGIN_FLAGS = {
    "slurm_partition": "--partition",
    "slurm_account": "--account",
    "runtime": "--time",
    "gres": "--gres",
    "constraint": "--constraint",
    "nodes": "--nodes",
    "tasks": "--ntasks",
    "qos": "--qos",
}


def signal_option(warn_seconds: int) -> str:
    """The sbatch option for a request's ``warn_seconds`` (Slurm may send it up to 60 s earlier than asked)."""
    if int(warn_seconds) < 1:
        raise ValueError(f"warn_seconds must be at least 1, not {warn_seconds!r}")
    return f"--signal={WARNING_SIGNAL}@{int(warn_seconds)}"


def spread_gpus(req: dict, gpus_per_node: int | None, *, span_nodes: bool = True) -> dict:
    """TAO's rule for GPU requests (``tao-core``): asking for at least a node's worth of GPUs takes whole nodes
    (``--exclusive``), and more GPUs than one node has spread over the nodes that count needs, with the GPUs split
    evenly per node. ``gpus_per_node`` is the partition's (site ``partitions.<p>.gpus_per_node``); unknown: as asked.
    Without ``span_nodes`` (a stage whose jobs run on one node) a request beyond a node stays as asked: the cluster
    check refuses it with that number instead of a multi-node job that runs on one node."""
    gpus = int(req.get("gpus") or 0)
    if not gpus_per_node or gpus < gpus_per_node or (gpus > gpus_per_node and not span_nodes):
        return req
    out = {**req, "exclusive": True}
    if gpus > gpus_per_node:
        nodes = max(int(req.get("nodes", 1)), math.ceil(gpus / gpus_per_node))
        out.update(nodes=nodes, gpus=math.ceil(gpus / nodes))
    return out


@dataclass(frozen=True)
class Request:
    """One stage's resolved request on a site, with what it needs to become sbatch flags on its own (so a job that
    submits further jobs, like the supervisor, carries it as a plain dict through ``to_dict``/``from_dict``)."""

    values: dict  # threads, mem_mb, runtime, partition, gpus, gpu_type, constraint, tmp_mb, nodes, ...
    scheduler: str = "local"
    account: str | None = None
    requeue: bool = False
    growth: float = 1.0
    limits: dict = field(default_factory=dict)  # the partition's max_runtime / max_mem_mb

    def get(self, key: str, default=None):
        return self.values.get(key, default)

    def __getitem__(self, key: str):
        return self.values[key]

    def __contains__(self, key: str) -> bool:
        return key in self.values

    @property
    def threads(self) -> int:
        return int(self.values.get("threads", 1))

    @property
    def gpus(self) -> int:
        """GPUs per node (the gres count)."""
        return int(self.values.get("gpus", 0) or 0)

    @property
    def nodes(self) -> int:
        return int(self.values.get("nodes", 1))

    @property
    def tasks(self) -> int:
        """Tasks of the job (--ntasks): one, or one per node (x tasks_per_node) where the rule body spreads
        processes itself."""
        return int(self.snakemake_resources().get("tasks", 1))

    @property
    def cpus(self) -> int:
        """CPUs of the whole job: --cpus-per-task (threads) x --ntasks."""
        return self.threads * self.tasks

    @property
    def gpus_total(self) -> int:
        """GPUs of the whole job: gres is per node."""
        return self.gpus * self.nodes

    @property
    def attempt_scaled(self) -> tuple[str, ...]:
        """The keys whose value :meth:`scaled` changes with the attempt: none where retries ask for the same."""
        return () if self.growth == 1.0 else tuple(k for k in SCALED_BY_ATTEMPT if k in self.values)

    def scaled(self, attempt: int = 1) -> Request:
        """Retries get more of what may have run out (runtime, memory), never past the partition's limits."""
        growth = self.growth ** max(attempt - 1, 0)
        out = dict(self.values)
        for key, limit_key in SCALED_BY_ATTEMPT.items():
            if key in out:
                value = math.ceil(out[key] * growth)
                out[key] = min(value, self.limits[limit_key]) if limit_key in self.limits else value
        return dataclasses.replace(self, values=out)

    def snakemake_resources(self, attempt: int = 1) -> dict:
        """The slurm executor plugin's resource names for this request at ``attempt``."""
        req = self.scaled(attempt).values
        out: dict = {k: req[k] for k in ("mem_mb", "runtime", "constraint", "nodes", "qos") if k in req}
        if self.scheduler != "slurm":
            if self.gpus_total:  # as on Slurm (below): a cap of `--resources gpus_total=N`, and the trainer's device
                out["gpus_total"] = self.gpus_total
            return out
        if "partition" in req:
            out["slurm_partition"] = req["partition"]
        # No slurm_account: the account reaches the plugin's sbatch as SBATCH_ACCOUNT (Site.process_env). As a resource,
        # plugin 2.8.0 validates it with sacctmgr (then sshare) before every single submission (accounts.py:
        # validate_account, from Executor.get_account_arg): ~0.2 s each, and a WorkflowError on a cluster without
        # accounting. Preflight checks the account once instead.
        if req.get("gpus"):
            kind = f"gpu:{req['gpu_type']}" if req.get("gpu_type") else "gpu"
            out["gres"] = f"{kind}:{req['gpus']}"
        extra = []
        if "tmp_mb" in req:
            extra.append(f"--tmp={req['tmp_mb']}M")
        if self.requeue:
            extra.append("--requeue")
        if req.get("warn_seconds"):
            extra.append(signal_option(req["warn_seconds"]))
        if req.get("extra"):
            extra.append(req["extra"])
        if req.get("exclusive"):
            extra.append("--exclusive")
        if extra:
            out["slurm_extra"] = " ".join(extra)
        if req.get("nodes", 1) > 1:
            # Multi-node: one task per node and no inner srun, so the rule body runs once, in the batch step, and
            # spreads processes itself. (A warned single-node job keeps the plugin's inner srun: the job-step
            # Snakemake ignores the warning and the trainer catches it, see ptflow.cluster.preempt.)
            out["tasks"] = req.get("nodes", 1) * req.get("tasks_per_node", 1)
            out["mpi"] = "srun"
            if req.get("gpus"):
                # The plugin turns `tasks` of a GPU job into --ntasks-per-gpu unless tasks_per_gpu is set; 0 keeps
                # it out, so 2 nodes x 4 GPUs stays one task per node (plugin 2.8.0, submit_string.py).
                out["tasks_per_gpu"] = 0
        # What the job holds while it runs, as integers Snakemake sums over its running jobs against the caps it is
        # given (ptflow.cluster.limits registers gpus_total/cpus_total from the QOS and association limits, as
        # `--resources` would). The plugin reads neither name; a train job reads gpus_total: its trainer trains on
        # GPUs exactly when the job asked for some (ptflow.stages.train.trl_common.device_args).
        out["cpus_total"] = int(req.get("threads", 1)) * int(out.get("tasks", 1))
        if self.gpus_total:
            out["gpus_total"] = self.gpus_total
        return out

    def sbatch_options(self, *, job_name: str, output: str, attempt: int = 1, extra: tuple[str, ...] = ()) -> list[str]:
        """The sbatch flags of this request: exactly what the plugin would submit for the same resources, and the
        account (which the plugin's sbatch gets from SBATCH_ACCOUNT, ``Site.process_env``)."""
        resources = {**self.snakemake_resources(attempt), "slurm_account": self.account}
        opts = [f"--job-name={job_name}", f"--output={output}", f"--cpus-per-task={self.threads}"]
        for key, flag in PLUGIN_FLAGS.items():
            value = resources.get(key)
            if value not in (None, ""):
                opts.append(f"{flag}={value}")
        if resources.get("mem_mb"):
            opts.append(f"--mem={int(resources['mem_mb'])}M")
        opts += shlex.split(resources.get("slurm_extra") or "")
        return opts + list(extra)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Request:
        return cls(**data)
