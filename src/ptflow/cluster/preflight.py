"""Preflight: what would make jobs fail, checked on the login node before a single job is submitted.

Runs from the workflow's ``onstart`` (never on a dry-run, never inside a job) and from ``ptflow preflight``.
Each problem is one line that names the setting, the value and what to do. Notes (things that are fine but worth
saying once: a cluster without accounting, a /tmp path the site declares shared) are printed and stop nothing.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ptflow.config.layout import Layout
from ptflow.config.matrix import Config
from ptflow.config.sites import Site
from ptflow.jobenv import user_name

NODE_LOCAL_PREFIXES = ("/tmp", "/var/tmp", "/dev/shm", "/run")
# Where enroot (and so pyxis) keeps registry logins: $ENROOT_CONFIG_PATH/.credentials, default ~/.config/enroot.
ENROOT_CREDENTIALS = ".credentials"


class PreflightError(RuntimeError):
    """One or more problems found before submission; the message lists each on its own line."""


def requests_in_use(cfg: Config, site: Site) -> list[tuple[str, dict]]:
    """(label, request) of every stage this matrix will submit, train once per agent that trains; the judge's where
    the site gives it a request of its own (else its jobs get aggregate's, listed already)."""
    out = [(stage, site.request(stage)) for stage in ("cache", "preprocess", "evaluate", "aggregate")]
    if site.request_name("judge") == "judge" and any(cfg.agent_for(c.agent).spec.agent_cli for c in cfg.cells):
        out.append(("judge", site.request("judge")))
    for agent_id in sorted({c.agent_id for c in cfg.training_cells()}):
        agent = cfg.agents[agent_id]
        out.append((f"train[{agent_id}]", site.request("train", agent)))
    return out


def _under(path: str, prefix: str) -> bool:
    return path == prefix.rstrip("/") or path.startswith(prefix.rstrip("/") + "/")


def check_paths(layout: Layout, site: Site, home: str | None = None, notes: list[str] | None = None) -> list[str]:
    problems = []
    notes = [] if notes is None else notes
    home = home or os.path.expanduser("~")
    shared = site.shared_paths
    for key in ("results", "scratch", "hf_home", "evals_cache"):
        value = getattr(layout, key)
        where = f"paths.{key} (site {site.name})"
        if value.startswith("file:"):  # Path() has already folded file:/// into file:/
            problems.append(
                f"{where} = {value!r}: a file:// URI is local to one machine; use a path on a shared "
                "filesystem that every node mounts (lustre:///abs/path names one)"
            )
            continue
        path = os.path.abspath(value)
        if site.scheduler == "slurm":
            local = next((p for p in NODE_LOCAL_PREFIXES if _under(path, p)), None)
            declared = next((p for p in shared if _under(path, p)), None)
            if local and declared:
                # the site's explicit declaration wins (a test cluster on one machine, a /tmp that is shared)
                notes.append(
                    f"{where} = {path!r} is under {local}, node-local on most clusters; site {site.name} declares "
                    f"{declared} in shared_paths, so it is used as shared storage"
                )
                continue
            if local:
                others = [p for p in shared if not any(_under(p, n) for n in NODE_LOCAL_PREFIXES)]
                problems.append(
                    f"{where} = {path!r} is node-local storage; compute nodes cannot see it — use a "
                    f"shared filesystem{' (' + ', '.join(others) + ')' if others else ''}, or list it under "
                    "shared_paths if this cluster shares it"
                )
                continue
            if shared and not any(_under(path, p) for p in shared):
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
    """Kinds whose jobs submit further jobs (the SkyRL server) need the site's request for them."""
    problems = []
    for agent_id in sorted({c.agent_id for c in cfg.training_cells()}):
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
    for agent_id in sorted({c.agent_id for c in cfg.training_cells()}):
        agent = cfg.agents[agent_id]
        nodes = site.request("train", agent).get("nodes", 1)
        if nodes > 1 and agent.spec.multinode is None:
            problems.append(
                f"site {site.name}: the train job of agent {agent_id} asks for {nodes} nodes (nodes, or more GPUs "
                f"than a node has), but kind {agent.kind} runs on one node; lower it in {site.path}"
            )
    return problems


def check_agent_budgets(cfg: Config, site: Site, notes: list[str] | None = None) -> list[str]:
    """A cli-agent's train job must outlive the agent's timeout (hours*60 + grace + 30 s kill-after + copying).
    ``notes``: where the time after the agent is shorter than the evaluate request, an evaluation that needs longer
    is made in an evaluate job of its own (ptflow.stages.evaluate.in_train_job), one more GPU queue wait."""
    problems = []
    notes = [] if notes is None else notes
    for agent_id in sorted({c.agent_id for c in cfg.training_cells()}):
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
        evaluation = site.request("evaluate").get("runtime")
        if runtime and runtime >= need and evaluation and runtime - need < evaluation:
            notes.append(
                f"site {site.name}: the train job of agent {agent_id} ({runtime} min) leaves {runtime - need:.0f} "
                f"min after the agent for its evaluation in the same allocation, less than the evaluate request's "
                f"{evaluation} min: an evaluation still running then is stopped and made in an evaluate job of its "
                f"own (runtime {need + evaluation:.0f} min holds both)"
            )
    return problems


def _checkout_on_disk(cfg: Config, layout: Layout) -> Path | None:
    """Where the run's PostTrainBench checkout is, if it is on this filesystem already (a given path, or the rule's
    clone from an earlier run); None otherwise (the rule clones it, and its cells check what preflight cannot)."""
    if cfg.posttrainbench is None:
        return None
    where = Path(cfg.posttrainbench.location(layout.scratch))
    return where if (where / ".git").exists() else None


def check_solve_homes(cfg: Config, site: Site, layout: Layout) -> list[str]:
    """A checkout agent whose solve.sh writes under PostTrainBench's container home (/home/ben) needs a runtime that
    puts the agent's home there (apptainer, pyxis). Read here when the checkout is on this filesystem (a given path,
    or the rule's clone from an earlier run); a checkout the rule has yet to clone is checked by the cell itself
    before its agent starts (``ptflow.stages.posttrainbench.agent.check_home``)."""
    from ptflow.cluster import images
    from ptflow.cluster.runtime import home_problem
    from ptflow.config import posttrainbench as ptb

    checkout, where = cfg.posttrainbench, _checkout_on_disk(cfg, layout)
    if where is None:
        return []
    problems = []
    for agent_id in sorted({c.agent_id for c in cfg.training_cells()}):
        agent = cfg.agents[agent_id]
        solve = cfg.ptb_agent(agent)
        if not solve:
            continue
        kind = site.runtime.kind if images.image_for(site.runtime, "train", agent) else "venv"
        try:
            script = ptb.git(where, "show", f"{checkout.commit}:{ptb.AGENT_DIR.format(agent=solve)}/solve.sh")
        except ptb.CheckoutError:
            continue  # a missing solve.sh is the checkout rule's one-line refusal
        problem = home_problem(agent_id, solve, script, kind)
        if problem:
            problems.append(f"site {site.name}: {problem}")
    return problems


def constraint_features(constraint: str) -> set[str]:
    """Feature names of an sbatch ``--constraint`` expression (``a&b``, ``a|b``, ``[a*2&b]``, ``a,b``)."""
    import re

    return {f for f in re.split(r"[&|,()\[\]\s]+", re.sub(r"\*\d+", "", constraint or "")) if f}


def check_cluster(cfg: Config, site: Site, cluster, notes: list[str] | None = None) -> list[str]:
    """Partitions, account, time limits, GPUs per node and node features against the live cluster
    (``slurm.ClusterInfo``)."""
    problems = []
    notes = [] if notes is None else notes
    account = site.account
    if cluster.accounts is None:
        notes.append(
            f"this Slurm cluster keeps no accounting (AccountingStorageType={cluster.accounting or 'none'}): the "
            f"account check is skipped{f' (site account {account!r} goes to sbatch as it is)' if account else ''}, "
            "and status comes from squeue alone"
        )
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
            missing = sorted(constraint_features(req.get("constraint", "")) - set(part.features))
            if missing:
                problems.append(
                    f"site {site.name} resources.{label}.constraint: {req['constraint']!r} names feature(s) "
                    f"{', '.join(missing)} that no node of partition {name} has (features: "
                    f"{', '.join(sorted(part.features)) or 'none'}); fix or drop constraint in {site.path}"
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
        for key in cfg.agent_for(cell.agent).keys:
            needed.setdefault(key, set()).add(cell.agent_id)
    panel = cfg.judge_panel
    if panel and any(cfg.agent_for(c.agent).spec.agent_cli for c in cfg.cells):
        for key in panel.keys:  # every judge's of the panel
            needed.setdefault(key, set()).add("(judge)")
    for key, agents in sorted(needed.items()):
        if not env.get(key):
            problems.append(
                f"environment variable {key} is not set but agents {', '.join(sorted(agents))} need it; "
                f"export {key} before running (or drop those agents from matrix.agents)"
            )
    if panel and any(cfg.agent_for(c.agent).spec.agent_cli for c in cfg.cells):
        for judge_id, credentials in panel.sign_ins.items():  # a subscription sign-in: its file, never its content
            if not Path(credentials).is_file():
                problems.append(
                    f"judge {judge_id}'s sign_in.credentials: no credentials file at {credentials}; sign its CLI in "
                    "(codex login writes ~/.codex/auth.json) and name that file there, or give the judge keys instead"
                )
    graded: dict[str, set[str]] = {}
    for eval_id in sorted({c.eval for c in cfg.cells}):
        for key in cfg.evals[eval_id].grader_keys:
            graded.setdefault(key, set()).add(eval_id)
    for key, evals in sorted(graded.items()):
        if not env.get(key):
            problems.append(
                f"environment variable {key} is not set but the grader of evals {', '.join(sorted(evals))} needs "
                f"it (evals[].grader.keys); export {key} before running (or drop those evals from matrix.evals)"
            )
    gated = sorted(m.id for m in cfg.models.values() if m.gated and m.source == "hub")
    if gated and not (env.get("HF_TOKEN") or env.get("HUGGING_FACE_HUB_TOKEN")):
        problems.append(f"models {', '.join(gated)} are gated: export HF_TOKEN (a token with access) before running")
    return problems


def check_checkout_judge(cfg: Config, layout: Layout, env: dict | None = None) -> list[str]:
    """A checkout whose judges are a panel of its own (``ptflow.config.judges.PANEL_NEEDS``: d27a95e's v1.1,
    main's src/judges/) needs its judges' keys (v1.1: OPENCODE_API_KEY, its kimi judge) and the codex judges'
    ChatGPT sign-in (``posttrainbench.judge.auth_json``, else the checkout's own), checked before any agent starts
    (main's: holding an access token, as its run_task.sh checks before its agent, offline); checked where the
    checkout is here already (``path``), and a given auth_json wherever the checkout is."""
    from ptflow.config import posttrainbench as ptb
    from ptflow.config.judges import PANEL_NEEDS

    env = os.environ if env is None else env
    checkout = cfg.posttrainbench
    judged = [c for c in cfg.cells if cfg.evals[c.eval].from_checkout and cfg.agent_for(c.agent).spec.agent_cli]
    if checkout is None or not cfg.judge or not judged:
        return []
    where = Path(checkout.location(layout.scratch))
    given = ((cfg.raw.get("posttrainbench") or {}).get("judge") or {}).get("auth_json")
    try:
        needs = PANEL_NEEDS.get(ptb.judge_protocol(str(where), checkout.commit).version) if checkout.path else None
    except ptb.CheckoutError:
        needs = None  # refused at planning in its own line
    problems = []
    auth = Path(given) if given else where / "agents/codex_non_api/auth.json"  # the checkout's sign-in
    problem = f"no codex sign-in at {auth}" if (needs or given) and not auth.is_file() else None
    if problem is None and needs is not None and needs.access_token and not _access_token(auth):
        problem = f"could not extract tokens.access_token from {auth}"
    if problem:
        label, who = (needs.label, " and ".join(needs.signed)) if needs else ("v1.1", "gpt and api")
        problems.append(
            f"posttrainbench.judge.auth_json: {problem} (the {label} judges {who} use a ChatGPT subscription's "
            "auth.json); sign in with codex and name its auth.json there"
        )
    for judge_id, key in needs.keys if needs else ():
        if not env.get(key):
            problems.append(
                f"environment variable {key} is not set but the checkout's {judge_id} judge (PostTrainBench "
                f"{needs.label}) needs it; export {key} before running (or judge: {{enabled: false}})"
            )
    return problems


def _access_token(auth: Path) -> bool:
    """Whether a codex auth.json holds ``tokens.access_token`` (what main's run_task.sh sends in its sign-in check)."""
    try:
        token = json.loads(auth.read_text())["tokens"]["access_token"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return isinstance(token, str) and bool(token)


def check_checkout_keys(cfg: Config, layout: Layout, env: dict | None = None) -> list[str]:
    """A checkout whose sandbox keys are main's allowlist (``ptflow.config.ptb_keys``): each checkout cell's agent
    and task files give the union, and a key the task requires (its info.json's required_api_keys) must be set.
    Read here where the checkout is on this filesystem (a given path, or the rule's clone from an earlier run); a
    checkout the rule has yet to clone is checked by the cell before its agent starts."""
    from ptflow.config import posttrainbench as ptb
    from ptflow.config import ptb_keys

    env = os.environ if env is None else env
    checkout, where = cfg.posttrainbench, _checkout_on_disk(cfg, layout)
    if where is None:
        return []
    try:
        part = ptb.checkout_protocol(str(where), checkout.commit).part("sandbox keys")
    except ptb.CheckoutError:
        return []  # refused at planning, or by the rule, in its own line
    if part is not ptb.KEYS_UNION:
        return []
    read = ptb_keys.commit_reader(where, checkout.commit)
    problems: dict[str, None] = {}
    for cell in cfg.training_cells():
        agent, task = cfg.agent_for(cell.agent), cfg.evals[cell.eval].task
        if not agent.spec.agent_cli or not ptb.is_checkout_task(task):
            continue
        name = cfg.ptb_agent(agent) or agent.cli
        eval_dir = ptb.eval_dir_name(task)
        try:
            problem = ptb_keys.sandbox_keys(read, name, eval_dir, env).problem(env)
        except ptb_keys.SandboxKeysError as exc:
            problem = str(exc)
        problem = problem or ptb_keys.task_script_problem(read, eval_dir, env)
        if problem:
            problems[problem] = None
    return list(problems)


def check_hf_cache(cfg: Config, layout: Layout, env: dict | None = None, reachable=None) -> list[str]:
    """Every hub repo missing from the cache, in one line, when they cannot be downloaded (offline/unreachable)."""
    from ptflow.cluster import hfcache

    repos = hfcache.hub_repos_needed(cfg)
    if not repos:
        return []
    problem = hfcache.offline_problem(layout.hf_home, repos, env, reachable or hfcache.hub_reachable)
    return [problem] if problem else []


def required_inputs(cfg: Config, site: Site) -> list[tuple[str, str]]:
    """(setting, path) of every input that must exist on the cluster before anything runs: source checkouts the
    matrix's agents and the site's environments use, and a bare-metal site's venv (unless an env rule builds it)."""
    from ptflow.config.uris import cluster_path

    out = []
    kinds_in_use = set()
    for agent_id in sorted({c.agent_id for c in cfg.training_cells()}):
        agent = cfg.agents[agent_id]
        kinds_in_use |= {agent.id, agent.kind}
        if agent.params.get("checkout"):
            out.append((f"agents[{agent_id}].params.checkout", cluster_path(agent.params["checkout"])))
    rt = site.runtime
    built_venvs = set()
    for name, env in rt.envs.items():
        if not kinds_in_use & set(env.get("for", [])):
            continue
        if env.get("checkout"):
            out.append((f"site {site.name} runtime.envs.{name}.checkout", env["checkout"]))
        if env.get("build") == "uv-sync" and env.get("checkout"):
            built_venvs.add(os.path.join(env["checkout"], ".venv"))
    if rt.kind == "venv" and rt.venv and os.path.normpath(rt.venv) not in {os.path.normpath(v) for v in built_venvs}:
        out.append((f"site {site.name} runtime.venv", rt.venv))
    return out


def check_inputs(cfg: Config, site: Site, exists=os.path.exists) -> list[str]:
    problems = []
    for where, path in required_inputs(cfg, site):
        if path.startswith("file:"):
            problems.append(f"{where} = {path!r}: a file:// URI names one machine's disk; use a cluster path")
        elif not exists(path):
            problems.append(
                f"{where} = {path!r} does not exist on this cluster; fix the path or stage it onto the shared "
                "filesystem before running"
            )
    return problems


def images_needing_credentials(site: Site) -> list[str]:
    rt = site.runtime
    if rt.kind not in ("pyxis", "enroot-edf"):
        return []
    return sorted(name for name, spec in rt.images.items() if spec.get("credentials"))


def enroot_credentials_path(env: dict | None = None, home: str | None = None) -> str:
    env = os.environ if env is None else env
    base = env.get("ENROOT_CONFIG_PATH") or os.path.join(home or os.path.expanduser("~"), ".config", "enroot")
    return os.path.join(base, ENROOT_CREDENTIALS)


def check_enroot_credentials(site: Site, exists=os.path.exists, env: dict | None = None) -> list[str]:
    """Private registry images (``credentials: true``): enroot on the compute nodes needs its credentials file (it
    does not read NGC_KEY from the job's environment). Presence only: the file is never opened."""
    names = images_needing_credentials(site)
    path = enroot_credentials_path(env)
    if names and not exists(path):
        return [
            f"site {site.name}: images {', '.join(names)} need registry credentials, but {path} does not exist; "
            "create it once on the cluster (a `machine nvcr.io login $oauthtoken password <key>` line, written "
            "without the key entering your shell history), or drop credentials: true for public images"
        ]
    return []


def run_preflight(
    cfg: Config, site: Site, layout: Layout, read_cluster=None, notes: list[str] | None = None
) -> list[str]:
    """All problems; an empty list means go. ``read_cluster`` (user -> ClusterInfo) defaults to the live one;
    ``notes`` collects what is worth saying once but stops nothing."""
    notes = [] if notes is None else notes
    problems = check_paths(layout, site, notes=notes) + check_secrets(cfg) + check_hf_cache(cfg, layout)
    problems += check_checkout_judge(cfg, layout) + check_checkout_keys(cfg, layout)
    problems += check_agent_budgets(cfg, site, notes) + check_site_requests(cfg, site) + check_multinode(cfg, site)
    problems += check_solve_homes(cfg, site, layout)
    if site.scheduler == "slurm":
        from ptflow.cluster import slurm

        problems += check_inputs(cfg, site) + check_enroot_credentials(site)
        try:
            cluster = (read_cluster or slurm.read_cluster)(user_name())
        except slurm.SlurmUnavailable as exc:
            return problems + [f"site {site.name} uses Slurm, but {exc}; run on the cluster's login node"]
        problems += check_cluster(cfg, site, cluster, notes=notes)
    return problems


def format_problems(problems: list[str]) -> str:
    lines = [f"preflight found {len(problems)} problem(s); nothing was submitted:"]
    lines += [f"  - {p}" for p in problems]
    return "\n".join(lines)


def ensure_ok(cfg: Config, site: Site, layout: Layout, extra_checks=(), log=None) -> list[str]:
    """Raise :class:`PreflightError` listing every problem; print the notes. ``extra_checks``: callables
    ``(cfg, site, layout) -> problems`` of higher layers (the Ray launcher's ``bash -n`` / ``sbatch --test-only``, the
    evaluate stage's task and data checks, ``ptflow.stages.evaluate.preflight``)."""
    notes: list[str] = []
    problems = run_preflight(cfg, site, layout, notes=notes)
    for check in extra_checks:
        problems += check(cfg, site, layout)
    for note in notes:
        (log or (lambda m: print(m, file=sys.stderr)))(f"preflight note: {note}")
    if problems:
        raise PreflightError(format_problems(problems))
    return notes
