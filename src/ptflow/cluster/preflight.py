"""Preflight: what would make jobs fail, checked on the login node before a single job is submitted.

Runs from the workflow's ``onstart`` (never on a dry-run, never inside a job) and from ``ptflow preflight``.
Each problem is one line that names the setting, the value and what to do.
"""

from __future__ import annotations

import getpass
import os

from ptflow.config.layout import Layout
from ptflow.config.model import Config
from ptflow.config.sites import Site

NODE_LOCAL_PREFIXES = ("/tmp", "/var/tmp", "/dev/shm", "/run")


class PreflightError(RuntimeError):
    """One or more problems found before submission; the message lists each on its own line."""


def requests_in_use(cfg: Config, site: Site) -> list[tuple[str, dict]]:
    """(label, request) of every stage this matrix will submit, train once per agent that trains."""
    out = [(stage, site.request(stage)) for stage in ("cache", "preprocess", "evaluate", "aggregate")]
    for agent_id in sorted({c.agent for c in cfg.training_cells()}):
        agent = cfg.agents[agent_id]
        out.append((f"train[{agent_id}]", site.request("train", agent)))
    return out


def check_paths(layout: Layout, site: Site, home: str | None = None) -> list[str]:
    problems = []
    home = home or os.path.expanduser("~")
    shared = site.shared_paths
    for key in ("results", "scratch", "hf_home"):
        value = getattr(layout, key)
        where = f"paths.{key} (site {site.name})"
        if value.startswith("file:"):  # Path() has already folded file:/// into file:/
            problems.append(
                f"{where} = {value!r}: a file:// URI is local to one machine; use a path on a shared "
                "filesystem that every node mounts"
            )
            continue
        path = os.path.abspath(value)
        if site.scheduler == "slurm":
            if any(path == p or path.startswith(p + "/") for p in NODE_LOCAL_PREFIXES):
                problems.append(
                    f"{where} = {path!r} is node-local storage; compute nodes cannot see it — use a "
                    f"shared filesystem{' (' + ', '.join(shared) + ')' if shared else ''}"
                )
                continue
            if shared and not any(path == p or path.startswith(p.rstrip("/") + "/") for p in shared):
                problems.append(
                    f"{where} = {path!r} is not under the site's shared filesystems "
                    f"({', '.join(shared)}); move it there or add its prefix to shared_paths"
                )
        if (
            site.forbid_home
            and key in ("results", "scratch")
            and (path == home or path.startswith(home.rstrip("/") + "/"))
        ):
            problems.append(
                f"{where} = {path!r} is under $HOME ({home}), which site {site.name} forbids "
                "(checkpoints are tens of GB, home quota is small); use the site's scratch"
            )
    return problems


def check_site_requests(cfg: Config, site: Site) -> list[str]:
    """Kinds whose jobs submit further jobs (skyrl's runtime server) need the site's request for them."""
    problems = []
    for agent_id in sorted({c.agent for c in cfg.training_cells()}):
        for stage in cfg.agents[agent_id].spec.site_requests:
            if not site.has_request(stage):
                problems.append(
                    f"site {site.name} has no resources.{stage} request, which agent {agent_id} "
                    f"({cfg.agents[agent_id].kind}) submits; add one to {site.path} (a CPU partition, threads, "
                    "mem_mb, runtime — see config/sites/fasrc.yaml)"
                )
    return problems


def check_multinode(cfg: Config, site: Site) -> list[str]:
    """A train request over several nodes only for kinds that can use them (``AgentKind.multinode``)."""
    problems = []
    for agent_id in sorted({c.agent for c in cfg.training_cells()}):
        agent = cfg.agents[agent_id]
        nodes = site.request("train", agent).get("nodes", 1)
        if nodes > 1 and agent.spec.multinode is None:
            problems.append(
                f"site {site.name}: the train job of agent {agent_id} asks for {nodes} nodes (nodes, or more GPUs "
                f"than a node has), but kind {agent.kind} runs on one node; lower it in {site.path}"
            )
    return problems


def check_agent_budgets(cfg: Config, site: Site) -> list[str]:
    """A cli-agent's train job must outlive the agent's timeout (hours*60 + grace + 30 s kill-after + copying)."""
    problems = []
    for agent_id in sorted({c.agent for c in cfg.training_cells()}):
        agent = cfg.agents[agent_id]
        if not agent.spec.agent_cli:
            continue
        need = agent.hours * 60 + agent.grace_minutes + 1
        runtime = site.request("train", agent).get("runtime")
        if runtime and runtime < need:
            problems.append(
                f"site {site.name}: the train job of agent {agent_id} gets runtime {runtime} min, but its budget "
                f"({agent.hours:g} h + {agent.grace_minutes:g} min grace) needs at least {need:.0f} min; raise "
                f"agent_resources.{agent_id}.runtime (or cli-agent) in {site.path} or lower the agent's hours"
            )
    return problems


def check_cluster(cfg: Config, site: Site, cluster) -> list[str]:
    """Partitions, account, time limits and GPUs per node against the live cluster (``slurm.ClusterInfo``)."""
    problems = []
    account = site.account
    if account and cluster.accounts is not None and account not in cluster.accounts:
        have = ", ".join(sorted(cluster.accounts)) or "none"
        problems.append(
            f"site {site.name}: account {account!r} is not one of user {cluster.user}'s accounts "
            f"({have}); set account in {site.path} to one of them"
        )
    for label, req in requests_in_use(cfg, site):
        for name in (req.get("partition") or "").split(","):
            if not name:
                continue
            part = cluster.partitions.get(name)
            if part is None:
                problems.append(
                    f"site {site.name} resources.{label}.partition: {name!r} does not exist on this "
                    f"cluster (partitions: {', '.join(sorted(cluster.partitions))}); fix it in {site.path}"
                )
                continue
            runtime = req.get("runtime")  # as declared: the site cap would hide a request above MaxTime
            if runtime and part.max_runtime is not None and runtime > part.max_runtime:
                problems.append(
                    f"site {site.name} resources.{label}.runtime: {runtime} min exceeds partition "
                    f"{name}'s MaxTime of {part.max_runtime} min; lower it or choose a longer partition"
                )
            declared = site.partitions.get(name, {}).get("max_runtime")
            if declared and part.max_runtime is not None and declared > part.max_runtime:
                problems.append(
                    f"site {site.name} partitions.{name}.max_runtime: {declared} min is above the "
                    f"cluster's MaxTime of {part.max_runtime} min (retries would ask for it); lower it"
                )
            gpus = req.get("gpus", 0)
            if gpus and gpus > part.max_gpus_per_node:
                problems.append(
                    f"site {site.name} resources.{label}.gpus: {gpus} GPUs per node, but partition "
                    f"{name}'s nodes have at most {part.max_gpus_per_node}; request fewer per node "
                    "(more nodes) or choose another partition"
                )
    return problems


def check_secrets(cfg: Config, env: dict | None = None) -> list[str]:
    """Keys the matrix needs must be in the environment (values are never read from files or arguments)."""
    env = os.environ if env is None else env
    problems = []
    needed: dict[str, set[str]] = {}
    for cell in cfg.cells:
        for key in cfg.agents[cell.agent].keys:
            needed.setdefault(key, set()).add(cell.agent)
    judge = cfg.raw.get("judge") or {}
    if judge and any(cfg.agents[c.agent].spec.agent_cli for c in cfg.cells):
        for key in judge.get("keys", []):
            needed.setdefault(key, set()).add("(judge)")
    for key, agents in sorted(needed.items()):
        if not env.get(key):
            problems.append(
                f"environment variable {key} is not set but agents {', '.join(sorted(agents))} need it; "
                f"export {key} before running (or drop those agents from matrix.agents)"
            )
    gated = sorted(m.id for m in cfg.models.values() if m.gated and m.source == "hub")
    if gated and not (env.get("HF_TOKEN") or env.get("HUGGING_FACE_HUB_TOKEN")):
        problems.append(f"models {', '.join(gated)} are gated: export HF_TOKEN (a token with access) before running")
    return problems


def check_hf_cache(cfg: Config, layout: Layout, env: dict | None = None, reachable=None) -> list[str]:
    """Every hub repo missing from the cache, in one line, when they cannot be downloaded (offline/unreachable)."""
    from ptflow.cluster import hfcache

    repos = hfcache.hub_repos_needed(cfg)
    if not repos:
        return []
    problem = hfcache.offline_problem(layout.hf_home, repos, env, reachable or hfcache.hub_reachable)
    return [problem] if problem else []


def run_preflight(cfg: Config, site: Site, layout: Layout, read_cluster=None) -> list[str]:
    """All problems; an empty list means go. ``read_cluster`` (user -> ClusterInfo) defaults to the live one."""
    problems = check_paths(layout, site) + check_secrets(cfg) + check_hf_cache(cfg, layout)
    problems += check_agent_budgets(cfg, site) + check_site_requests(cfg, site) + check_multinode(cfg, site)
    if site.scheduler == "slurm":
        from ptflow.cluster import slurm

        try:
            cluster = (read_cluster or slurm.read_cluster)(getpass.getuser())
        except slurm.SlurmUnavailable as exc:
            return problems + [f"site {site.name} uses Slurm, but {exc}; run on the cluster's login node"]
        problems += check_cluster(cfg, site, cluster)
    return problems


def format_problems(problems: list[str]) -> str:
    lines = [f"preflight found {len(problems)} problem(s); nothing was submitted:"]
    lines += [f"  - {p}" for p in problems]
    return "\n".join(lines)


def ensure_ok(cfg: Config, site: Site, layout: Layout) -> None:
    problems = run_preflight(cfg, site, layout)
    if problems:
        raise PreflightError(format_problems(problems))
