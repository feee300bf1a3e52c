"""Sites: one YAML file per cluster holding partitions, account, paths, the software runtime and each stage's request.

:class:`Site` is the only reader of a site file. Everything else gets resolved values from it:

- :meth:`Site.request` → a ``Request`` (default, then the job kind's own request or, where the site file has
  none, its fallback (``ptflow.config.rules.REQUEST_FALLBACK``), then for ``train`` the agent's kind and id),
  which turns itself into the slurm executor plugin's resources or into sbatch flags (``ptflow.config.request``).
- :attr:`Site.runtime` → a :class:`RuntimeSpec`: how jobs run software (a container runtime or a venv), which
  images exist and which stage runs in which.

A user adds a cluster by adding a file to ``config/sites/``; rules never name a partition or an account.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import yaml

from ptflow.config.request import Request, spread_gpus
from ptflow.config.rules import REQUEST_FALLBACK, SITE_REQUESTS
from ptflow.config.uris import PathURIError, cluster_path
from ptflow.config.validate import SCHEMA_DIR, ConfigError
from ptflow.jobenv import user_name

# Requests whose wall time a site's `time_hours` sets (TAO: the GPU job's SLURM_TIME_HOURS).
TIMED_REQUESTS = ("train", "evaluate")
SITE_SCHEMA = SCHEMA_DIR / "site.schema.json"

CONTROLLER_WAIT_MINUTES = 30  # site controller_wait_minutes' default (ptflow.cluster.patience)
DEFAULT_MAX_RESUMES = 10  # site max_resumes' default: resubmissions of a supervised job that saved and stopped


@dataclass(frozen=True)
class RuntimeSpec:
    """How a site's jobs run software: ``kind`` venv (bare metal or the local default), apptainer, pyxis or
    enroot-edf, the images there are, and which stage or agent runs in which (``use``)."""

    site: str  # the site's name, for messages
    kind: str = "venv"
    arch: str | None = None
    images_dir: str = "images"
    mounts: tuple[str, ...] = ()
    venv: str | None = None
    python: str = "python3"  # the interpreter inside an image that re-runs a rule
    images: dict = field(default_factory=dict)
    use: dict = field(default_factory=dict)
    build: dict = field(default_factory=dict)
    force_reconvert_latest: bool = False
    hf_view: str = "none"
    envs: dict = field(default_factory=dict)  # software environments built by rule `env` (ptflow.cluster.envs)

    @property
    def is_container(self) -> bool:
        return self.kind != "venv"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> RuntimeSpec:
        return cls(**{**data, "mounts": tuple(data.get("mounts") or ())})


EVAL_HUB_ENV = "PTFLOW_EVAL_HUB"  # "online": the site's compute nodes reach the hub (``evaluation.hub``)


@dataclass(frozen=True)
class Evaluation:
    """How a site's evaluations run the model under test (``evaluation:`` in a site file)."""

    provider: str = "hf"  # hf (transformers, cpu or the allocation's GPUs) or vllm (GPU sites)
    chat_template: str = "if_missing"  # family template policy: if_missing, always, never
    hub: str = "offline"  # whether compute nodes reach the Hugging Face Hub (a checkout's evaluations run online then)


@dataclass(frozen=True)
class Supervision:
    """A train job run by a login-node supervisor (``ptflow.cluster.supervise``): resubmitted after infrastructure
    failures (up to ``max_retries``) and after a stop it saved for (up to ``max_resumes``), stopped for a save at
    ``internal_timeout_fraction`` of its time limit."""

    max_retries: int
    internal_timeout_fraction: float | None = None
    max_resumes: int = DEFAULT_MAX_RESUMES


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
    def warm_start(self) -> bool:
        """Local jobs start warm (ptflow.warmstart); load_site refuses it on Slurm sites."""
        return bool(self.raw.get("warm_start"))

    @property
    def partitions(self) -> dict:
        return self.raw.get("partitions", {})

    @property
    def env(self) -> dict:
        return dict(self.raw.get("env", {}))

    @property
    def account(self) -> str | None:
        return self.raw.get("account") or None  # "" (an unset ${SLURM_ACCOUNT:-}) is no account

    @property
    def process_env(self) -> dict[str, str]:
        """What the Snakemake process sets for itself and every job it starts: the site's ``env`` and, on Slurm sites
        with an account, ``SBATCH_ACCOUNT``: how the plugin's sbatch calls get the account (sbatch reads it like
        --account), never the plugin's per-job sacctmgr check of a ``slurm_account`` resource. Without that resource
        plugin 2.8.0 logs "No SLURM account given, trying to guess" once and asks sacct for the user's last account
        (accounts.py: get_account); that call fails (a shell pipe passed as sacct arguments), so no -A is added and
        SBATCH_ACCOUNT holds. A plugin whose guess worked would add -A and win: bench/plan_vs_slurm.py checks the
        recorded account against a non-default one."""
        env = self.env
        if self.scheduler == "slurm" and self.account:
            env["SBATCH_ACCOUNT"] = self.account
        if self.evaluation.hub == "online":  # read by the checkout's evaluations in their jobs (eval_environment)
            env[EVAL_HUB_ENV] = "online"
        return env

    @property
    def limits(self) -> dict:
        """The user's caps as the site file states them (``limits:``; checked by ptflow.cluster.limits)."""
        return dict(self.raw.get("limits") or {})

    @property
    def controller_wait_seconds(self) -> float:
        """How long Slurm commands wait for a controller that does not answer (ptflow.cluster.patience)."""
        return float(self.raw.get("controller_wait_minutes", CONTROLLER_WAIT_MINUTES)) * 60

    @property
    def time_hours(self) -> float | None:
        """Wall time of the GPU jobs (train, evaluate) in hours, TAO's SLURM_TIME_HOURS; None: each request's own."""
        return _hours(self.raw.get("time_hours"), "time_hours", self.path)

    @property
    def timeout_hours(self) -> float | None:
        """When a supervised job stops itself, in hours (TAO's SLURM_TIMEOUT_HOURS, 3.8 of 4)."""
        return _hours(self.raw.get("timeout_hours"), "timeout_hours", self.path)

    @property
    def shared_paths(self) -> list[str]:
        return list(self.raw.get("shared_paths") or [])

    @property
    def forbid_home(self) -> bool:
        return bool(self.raw.get("forbid_home"))

    @property
    def paths(self) -> dict:
        """Site paths that replace config.paths (results, scratch, hf_home on the shared filesystem)."""
        return dict(self.raw.get("paths", {}))

    @property
    def gpu_memory_utilization(self) -> float | None:
        return self.raw.get("gpu_memory_utilization")

    @property
    def evaluation(self) -> Evaluation:
        return Evaluation(**self.raw.get("evaluation", {}))

    @property
    def runtime(self) -> RuntimeSpec:
        rt = dict(self.raw.get("runtime") or {"kind": "venv"})
        return RuntimeSpec.from_dict({"site": self.name, **rt})

    def supervises(self, stage: str, agent=None) -> Supervision | None:
        """Whether ``stage`` (for ``agent``) runs as a login-node supervisor: only ``train``, only on Slurm sites,
        for every agent where the site has ``infra_retries``, and for agents whose job needs helper jobs submitted
        before it (a kind with ``site_requests``: the SkyRL server, see ``ptflow.config.kinds``)."""
        if stage != "train" or self.scheduler != "slurm":
            return None
        fraction = self.raw.get("internal_timeout_fraction")
        if self.timeout_hours and self.time_hours:
            fraction = self.timeout_hours / self.time_hours  # SLURM_TIMEOUT_HOURS of SLURM_TIME_HOURS
        resumes = int(self.raw.get("max_resumes", DEFAULT_MAX_RESUMES))
        if self.raw.get("infra_retries") is not None:
            return Supervision(self.raw["infra_retries"], fraction, resumes)
        if agent is not None and agent.spec.site_requests:
            return Supervision(0, fraction, resumes)
        return None

    def has_request(self, name: str) -> bool:
        return name in self.raw["resources"]

    def request_name(self, name: str) -> str:
        """The request of the site file that sizes a job kind: its own (``resources.judge``), else, where the file
        has none, the one ``ptflow.config.rules.REQUEST_FALLBACK`` names (``aggregate``); either may be absent too,
        leaving ``resources.default`` alone."""
        if name not in SITE_REQUESTS:
            raise ValueError(f"unknown request {name!r}; requests: {', '.join(SITE_REQUESTS)}")
        if name in REQUEST_FALLBACK and not self.has_request(name):
            return REQUEST_FALLBACK[name]
        return name

    def request(self, name: str, agent=None) -> Request:
        """The merged request of a job kind: default, then its own request or its fallback (:meth:`request_name`),
        then (train only) the agent kind and id."""
        res = self.raw["resources"]
        req = dict(res["default"])
        req.update(res.get(self.request_name(name), {}))
        if name == "train" and agent is not None:
            per_agent = self.raw.get("agent_resources", {})
            req.update(per_agent.get(agent.kind, {}))
            req.update(per_agent.get(agent.id, {}))
        if name in TIMED_REQUESTS and self.time_hours:
            req["runtime"] = math.ceil(self.time_hours * 60)
        # only train jobs may span nodes (kinds with AgentKind.multinode; preflight checks the kind)
        per_node = self.partitions.get(req.get("partition"), {}).get("gpus_per_node")
        req = spread_gpus(req, per_node, span_nodes=name == "train")
        return Request(
            values=req,
            scheduler=self.scheduler,
            account=self.account,
            requeue=bool(self.raw.get("requeue")),
            growth=float(self.raw.get("retry_growth", 1.0)),
            limits=dict(self.partitions.get(req.get("partition"), {})),
        )


_VAR = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}|\$(\w+)")


def _expand_env(node, path: Path, where: str = "", names: dict | None = None):
    """``${VAR}`` / ``$VAR`` / ``${VAR:-default}`` in site strings: the site's own ``vars`` first, then the environment
    (e.g. $USER, the account a user picks, TAO's SLURM_TIME_HOURS)."""
    if isinstance(node, dict):
        return {
            _expand_env(k, path, where, names): _expand_env(v, path, f"{where}.{k}" if where else k, names)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_expand_env(v, path, f"{where}[{i}]", names) for i, v in enumerate(node)]
    if isinstance(node, str):
        env = {"USER": user_name(), **os.environ, **(names or {})}  # USER is unset in many non-login shells

        def value(m: re.Match) -> str:
            name = m.group(1) or m.group(3)
            if name in env:
                return env[name]
            if m.group(2) is not None:
                return _VAR.sub(value, m.group(2))
            raise ConfigError(
                f"site error in {path} at {where}: {node!r} needs the environment variable {name}; "
                f"export {name}=... (see the comment in that file) or edit the site file"
            )

        return _VAR.sub(value, node)
    return node


def _expand_site(raw: dict, path: Path) -> dict:
    """``vars`` (expanded in order, each may use the environment and the ones before it), then the rest of the file
    with them: one key such as ``SCRATCH`` moves every path that uses it (Alps: /capstor -> /ritom scratch)."""
    names: dict[str, str] = {}
    for key, value in (raw.get("vars") or {}).items():
        names[str(key)] = str(_expand_env(str(value), path, f"vars.{key}", names))
    out = _expand_env({k: v for k, v in raw.items() if k != "vars"}, path, "", names)
    if names:
        out["vars"] = names
    return out


def _hours(value, key: str, path: Path) -> float | None:
    if value in (None, ""):
        return None
    try:
        hours = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"site error in {path} at {key}: {value!r} is not a number of hours") from None
    if hours <= 0:
        raise ConfigError(f"site error in {path} at {key}: {value!r} must be more than 0 hours")
    return hours


# Site keys holding paths that may be given as lustre:/// or slurm:// URIs.
def _convert_paths(raw: dict, path: Path) -> None:
    try:
        for key, value in (raw.get("paths") or {}).items():
            raw["paths"][key] = cluster_path(value, f"site {path} paths.{key}")
        rt = raw.get("runtime") or {}
        for key in ("images_dir", "venv"):
            if key in rt:
                rt[key] = cluster_path(rt[key], f"site {path} runtime.{key}")
        for name, env in (rt.get("envs") or {}).items():
            for key in ("path", "checkout"):
                if key in env:
                    env[key] = cluster_path(env[key], f"site {path} runtime.envs.{name}.{key}")
    except PathURIError as exc:
        raise ConfigError(str(exc)) from None


def _check_times(raw: dict, path: Path) -> None:
    """No request may ask a partition for more time than the site declares it allows (TAO: the packaged 4-hour
    partitions refuse more), nor may time_hours."""
    partitions = raw.get("partitions") or {}
    requests = [(f"resources.{k}", v) for k, v in raw["resources"].items()]
    requests += [(f"agent_resources.{k}", v) for k, v in (raw.get("agent_resources") or {}).items()]
    default_part = raw["resources"]["default"].get("partition")
    for where, req in requests:
        part = req.get("partition", default_part)
        limit = partitions.get(part, {}).get("max_runtime")
        if limit and req.get("runtime") and req["runtime"] > limit:
            raise ConfigError(
                f"site error in {path} at {where}.runtime: {req['runtime']} min is above partition {part}'s "
                f"max_runtime of {limit} min; lower it or use a partition with a longer limit"
            )
    time_hours = _hours(raw.get("time_hours"), "time_hours", path)
    timeout_hours = _hours(raw.get("timeout_hours"), "timeout_hours", path)
    if time_hours:
        for name in TIMED_REQUESTS:
            reqs = [raw["resources"].get(name, {})]
            if name == "train":
                reqs += list((raw.get("agent_resources") or {}).values())
            for req in reqs:
                part = req.get("partition", raw["resources"].get(name, {}).get("partition", default_part))
                limit = partitions.get(part, {}).get("max_runtime")
                if limit and time_hours * 60 > limit:
                    raise ConfigError(
                        f"site error in {path} at time_hours: {time_hours:g} h (SLURM_TIME_HOURS) is above partition "
                        f"{part}'s limit of {limit / 60:g} h; lower SLURM_TIME_HOURS or choose a partition with a "
                        "longer limit (SLURM_PARTITION, listed under partitions with its max_runtime)"
                    )
        if timeout_hours and timeout_hours >= time_hours:
            raise ConfigError(
                f"site error in {path} at timeout_hours: {timeout_hours:g} h (SLURM_TIMEOUT_HOURS) must be below "
                f"time_hours {time_hours:g} h, so the job stops itself and saves before Slurm's limit"
            )


def _check_expected(site: Site) -> None:
    """No request may expect its jobs to take longer than the time limit they get (Slurm ends them there, so
    ``ptflow plan`` would count on time they never have), both as :meth:`Site.request` merges them (default, the
    stage, train under an agent kind's or id's request, time_hours). The key named is the one that sets the
    expected_runtime, which may be inherited from the default."""
    res = site.raw["resources"]
    checks = []
    for stage in SITE_REQUESTS:
        name = site.request_name(stage)
        sources = [f"resources.{name}"] * (name in res) + ["resources.default"]
        checks.append((f"stage {stage}", site.request(stage), sources))
    for key in site.raw.get("agent_resources") or {}:
        agent = SimpleNamespace(kind=key, id=key)  # a key names a kind or an id: either way its own request applies
        sources = [f"agent_resources.{key}"] + ["resources.train"] * ("train" in res) + ["resources.default"]
        checks.append((f"agent_resources.{key}", site.request("train", agent), sources))
    for label, req, sources in checks:
        expected, runtime = req.get("expected_runtime"), req.get("runtime")
        if expected is None or runtime is None or expected <= runtime:
            continue
        where = next(src for src in sources if "expected_runtime" in _lookup(site.raw, src))
        raise ConfigError(
            f"site error in {site.path} at {where}.expected_runtime: {expected:g} min is above the time limit of "
            f"{label} ({runtime} min); Slurm ends its jobs there: lower it to at most {runtime}"
        )


def _lookup(raw: dict, dotted: str) -> dict:
    section, key = dotted.split(".", 1)
    return raw.get(section, {}).get(key, {})


def load_site(site: str, sites_dir: str | Path) -> Site:
    """``site`` is a name in ``sites_dir`` or a path to a YAML file."""
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate

    from ptflow.config.validate import explain_schema_error

    path = Path(site)
    if path.suffix not in (".yaml", ".yml"):
        path = Path(sites_dir) / f"{site}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in Path(sites_dir).glob("*.yaml"))
        raise ConfigError(
            f"config error at site: no site file {str(path)!r}; known sites: {', '.join(known)} — "
            "pick one or add config/sites/<name>.yaml"
        )
    raw = _expand_site(yaml.safe_load(path.read_text()) or {}, path)
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
    if raw.get("warm_start") and raw["scheduler"] != "local":
        # jobs of a Slurm site start on compute nodes: a fork server on the login node cannot reach them
        raise ConfigError(
            f"site error in {path} at warm_start: true is only for scheduler: local (jobs on this machine); remove it"
        )
    _check_times(raw, path)
    _convert_paths(raw, path)
    if (raw.get("evaluation") or {}).get("provider") == "vllm":
        gpus = {**raw["resources"]["default"], **raw["resources"].get("evaluate", {})}.get("gpus", 0)
        if not gpus:
            raise ConfigError(
                f"site error in {path} at evaluation.provider: 'vllm' needs GPUs, but resources.evaluate asks for "
                "none; give the evaluate request gpus: N or use provider: hf"
            )
    site = Site(raw, path)
    _check_expected(site)
    return site
