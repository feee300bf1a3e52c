"""Sites: one YAML file per cluster holding partitions, account, paths and the request of each stage.

Rules ask :meth:`Site.snakemake_resources` for their resources, so no partition, account or GPU count is written
in a rule; the names produced are those of snakemake-executor-plugin-slurm. A user adds a cluster by adding a
file to ``config/sites/``.
"""

from __future__ import annotations

import getpass
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from ptflow.cluster.preempt import signal_option
from ptflow.config.model import SCHEMA_DIR, ConfigError

STAGES = ("cache", "image", "preprocess", "train", "evaluate", "aggregate", "runtime_server")
SITE_SCHEMA = SCHEMA_DIR / "site.schema.yaml"


@dataclass
class Site:
    raw: dict
    path: Path

    @property
    def name(self) -> str:
        return self.raw["name"]

    @property
    def scheduler(self) -> str:
        return self.raw["scheduler"]

    @property
    def partitions(self) -> dict:
        return self.raw.get("partitions", {})

    @property
    def env(self) -> dict:
        return self.raw.get("env", {})

    def supervises(self, stage: str) -> dict | None:
        """What the login-node supervisor of ``stage`` needs (``ptflow.cluster.supervise``), or None: only ``train``,
        and only on Slurm sites with ``infra_retries``."""
        if stage != "train" or self.scheduler != "slurm" or self.raw.get("infra_retries") is None:
            return None
        return {
            "max_retries": self.raw["infra_retries"],
            "internal_timeout_fraction": self.raw.get("internal_timeout_fraction"),
        }

    def request(self, stage: str, agent=None) -> dict:
        """The merged request of a stage: default, then the stage, then (train only) the agent kind and id."""
        if stage not in STAGES:
            raise ValueError(f"unknown stage {stage!r}; stages: {', '.join(STAGES)}")
        res = self.raw["resources"]
        req = dict(res["default"])
        req.update(res.get(stage, {}))
        if stage == "train" and agent is not None:
            per_agent = self.raw.get("agent_resources", {})
            req.update(per_agent.get(agent.kind, {}))
            req.update(per_agent.get(agent.id, {}))
        return req

    def scaled(self, request: dict, attempt: int = 1) -> dict:
        """Retries get more of what may have run out (runtime, memory), never past the partition's limits."""
        growth = self.raw.get("retry_growth", 1.0) ** max(attempt - 1, 0)
        limits = self.partitions.get(request.get("partition"), {})
        out = dict(request)
        for key, limit_key in (("runtime", "max_runtime"), ("mem_mb", "max_mem_mb")):
            if key in out:
                value = math.ceil(out[key] * growth)
                out[key] = min(value, limits[limit_key]) if limit_key in limits else value
        return out

    def snakemake_resources(self, request: dict, attempt: int = 1) -> dict:
        """Translate a request into the slurm executor plugin's resource names."""
        request = self.scaled(request, attempt)
        out: dict = {}
        for key in ("mem_mb", "runtime", "constraint", "nodes", "qos"):
            if key in request:
                out[key] = request[key]
        if self.scheduler != "slurm":
            return out
        if "partition" in request:
            out["slurm_partition"] = request["partition"]
        if self.raw.get("account"):
            out["slurm_account"] = self.raw["account"]
        if request.get("gpus"):
            kind = f"gpu:{request['gpu_type']}" if request.get("gpu_type") else "gpu"
            out["gres"] = f"{kind}:{request['gpus']}"
        extra = []
        if "tmp_mb" in request:
            extra.append(f"--tmp={request['tmp_mb']}M")
        if self.raw.get("requeue"):
            extra.append("--requeue")
        if request.get("warn_seconds"):
            extra.append(signal_option(request["warn_seconds"]))
        if request.get("extra"):
            extra.append(request["extra"])
        if extra:
            out["slurm_extra"] = " ".join(extra)
        if request.get("nodes", 1) > 1 or request.get("warn_seconds"):
            # Multi-node, or warned before the end: one task per node and no inner srun, so the rule body runs in
            # the batch step and spreads processes itself. The time-limit warning (no B:) reaches only job steps:
            # the trainer's, never the Snakemake running the rule (Python dies of an unhandled USR1).
            out["tasks"] = request.get("nodes", 1) * request.get("tasks_per_node", 1)
            out["mpi"] = "srun"
            if request.get("gpus"):
                # The plugin turns `tasks` of a GPU job into --ntasks-per-gpu unless tasks_per_gpu is set; 0 keeps
                # it out, so 2 nodes x 4 GPUs stays one task per node (plugin 2.8.0, submit_string.py).
                out["tasks_per_gpu"] = 0
        return out


_VAR = re.compile(r"\$\{(\w+)\}|\$(\w+)")


def _expand_env(node, path: Path, where: str = ""):
    """``${VAR}`` / ``$VAR`` in site strings come from the environment (e.g. $USER, the account a user picks)."""
    if isinstance(node, dict):
        return {
            _expand_env(k, path, where): _expand_env(v, path, f"{where}.{k}" if where else k) for k, v in node.items()
        }
    if isinstance(node, list):
        return [_expand_env(v, path, f"{where}[{i}]") for i, v in enumerate(node)]
    if isinstance(node, str):
        env = {"USER": getpass.getuser(), **os.environ}  # USER is unset in many non-login shells

        def value(m: re.Match) -> str:
            name = m.group(1) or m.group(2)
            if name not in env:
                raise ConfigError(
                    f"site error in {path} at {where}: {node!r} needs the environment variable {name}; "
                    f"export {name}=... (see the comment in that file) or edit the site file"
                )
            return env[name]

        return _VAR.sub(value, node)
    return node


def load_site(site: str, sites_dir: str | Path) -> Site:
    """``site`` is a name in ``sites_dir`` or a path to a YAML file."""
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate

    from ptflow.config.model import explain_schema_error

    path = Path(site)
    if path.suffix not in (".yaml", ".yml"):
        path = Path(sites_dir) / f"{site}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in Path(sites_dir).glob("*.yaml"))
        raise ConfigError(
            f"config error at site: no site file {str(path)!r}; known sites: {', '.join(known)} — "
            "pick one or add config/sites/<name>.yaml"
        )
    raw = _expand_env(yaml.safe_load(path.read_text()) or {}, path)
    try:
        validate(raw, str(SITE_SCHEMA), set_default=False)
    except WorkflowError as exc:
        cause = exc.__context__ if hasattr(exc.__context__, "absolute_path") else None
        msg = explain_schema_error(cause) if cause is not None else str(exc)
        raise ConfigError(msg.replace("config error", f"site error in {path}", 1)) from None
    requests = [(f"resources.{k}", v) for k, v in raw["resources"].items()]
    requests += [(f"agent_resources.{k}", v) for k, v in raw.get("agent_resources", {}).items()]
    for where, req in requests:
        if "--signal" in req.get("extra", ""):
            raise ConfigError(
                f"site error in {path} at {where}.extra: {req['extra']!r} sets --signal by hand; use "
                "warn_seconds: N instead, so the trainer knows to save on the warning"
            )
    for stage, req in raw["resources"].items():
        part = req.get("partition")
        if part and raw.get("partitions") and part not in raw["partitions"]:
            raise ConfigError(
                f"site error in {path} at resources.{stage}.partition: {part!r} is not listed under partitions "
                f"({', '.join(raw['partitions'])}); add its limits there"
            )
    return Site(raw, path)
