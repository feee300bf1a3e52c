"""The evaluate stage's part of preflight (``ptflow.cluster.preflight`` runs it before anything is submitted): every
eval of the matrix names a task that resolves with its arguments (registry and file tasks are imported here, on the
login node, never first on a GPU allocation), and, where nothing can be downloaded from here, every piece of data
its evaluation reads is in the caches already (one line per missing piece). Grader keys are checked with the
other keys (``check_secrets``)."""

from __future__ import annotations

import os
from pathlib import Path

from ptflow.cluster import hfcache
from ptflow.config import posttrainbench as ptb
from ptflow.config.layout import Layout
from ptflow.config.matrix import Config
from ptflow.config.sites import Site
from ptflow.stages.evaluate.run import EvalConfigError, call_sources, check_call
from ptflow.stages.evaluate.settings import Provider, build_call
from ptflow.stages.evaluate.sources import missing_each_hf, missing_sources, resources_from_text


def evaluation_problems(cfg: Config, site: Site, layout: Layout, env=None, reachable=None) -> list[str]:
    problems = []
    provider = Provider.from_site(site)
    calls = {}
    for eval_id in sorted({c.eval for c in cfg.cells}):
        ev = cfg.evals[eval_id]
        if ev.uses_parquet or ev.from_checkout:
            continue  # the toy task: its data is the workflow's own parquet; the checkout's: its own code's
        call = calls[eval_id] = build_call(ev, provider)
        try:
            check_call(call, keys=False)
            call_sources(call)  # task arguments the data depends on (BFCL's categories)
        except (EvalConfigError, ValueError) as exc:
            problems.append(f"evals[{eval_id}]: {exc}")
            calls.pop(eval_id)
    why = hfcache.cannot_download(env, reachable or hfcache.hub_reachable) if calls else None
    if why:
        for eval_id, call in calls.items():
            for line in missing_sources(call_sources(call), layout.hf_home, layout.evals_cache, env=env):
                problems.append(f"evals[{eval_id}]: {line} ({why})")
    checkout_lines = checkout_data_problems(cfg, layout, env, reachable)
    # a changed evaluate.py is asked only when the cache is not refused already (it would be named twice)
    return problems + (checkout_lines or stale_warm_problems(cfg, layout, env))


def checkout_resources(cfg: Config, layout: Layout) -> tuple[str, set[tuple[str, str | None]]] | None:
    """(where, the (repo, config) pairs of datasets it lists) of the checkout's resources.json at the pinned commit,
    read here with git: from the given checkout, or the clone of an earlier run; None while the rule
    posttrainbench_checkout has not cloned it yet (then only the cache itself is checked)."""
    from ptflow.config.tasks import HFDataset

    checkout = cfg.posttrainbench
    location = Path(checkout.location(layout.scratch))
    if not location.is_dir():
        return None
    try:
        text = ptb.git(location, "show", f"{checkout.commit}:{ptb.RESOURCES_FILE}")
    except ptb.CheckoutError:
        return None  # not at this commit yet (an old clone), or no such file: the checkout rule says which
    where = f"{location}/{ptb.RESOURCES_FILE} at {checkout.commit[:12]}"
    sources = resources_from_text(text, where)
    return where, {(s.repo, s.name) for s in sources if isinstance(s, HFDataset)}


def checkout_data_problems(cfg: Config, layout: Layout, env=None, reachable=None) -> list[str]:
    """The checkout's evaluations load hub datasets at run time, offline (``ptb.EVAL_HUB_DATA`` names the repos);
    the rule posttrainbench_cache fetches what the checkout's resources.json lists and warms each evaluation's
    loads in their exact form. One line per (eval, dataset) that an offline evaluation will not find and the cache
    job will not get: resources.json does not list it, or nothing can be downloaded from here, or it is gated and
    HF_TOKEN is unset. Nothing is read from the cache when the cache job will fetch all. Otherwise the question is
    the cache job's own: the checkout's evaluate.py scripts are run up to their models, offline (the data probe),
    so "in the cache" means "loadable offline as the evaluation asks"; only a checkout not yet cloned is checked by
    the listed configs instead (its cache job then proves the exact forms before any GPU job starts)."""
    needed = []
    for eval_id in sorted({c.eval for c in cfg.cells}):
        ev = cfg.evals[eval_id]
        if ev.from_checkout:
            needed += [(eval_id, d) for d in ptb.hub_data(ptb.eval_dir_name(ev.task))]
    if not needed:
        return []
    resources = checkout_resources(cfg, layout)
    unlisted = {(e, d) for e, d in needed if resources is not None and (d.repo, d.config) not in resources[1]}
    why = hfcache.cannot_download(env, reachable or hfcache.hub_reachable)
    environ = os.environ if env is None else env
    tokenless = {(e, d) for e, d in needed if d.gated and not environ.get("HF_TOKEN")}
    if not unlisted and not why and not tokenless:
        return []
    misses = _offline_misses(cfg, layout, needed, env)
    problems = []
    for eval_id, d in needed:
        if (eval_id, d) not in misses:
            continue
        what = f"evals[{eval_id}]: its evaluate.py loads {d.describe()}, which"
        if (eval_id, d) in unlisted:
            problems.append(
                f"{what} does not load offline from {layout.hf_home} ({misses[(eval_id, d)]}) and "
                f"{resources[0]} does not list (the cache job fetches only what it lists); copy it into "
                "paths.hf_home, or use a checkout whose resources.json lists it"
            )
        elif why:
            problems.append(
                f"{what} does not load offline from {layout.hf_home} ({misses[(eval_id, d)]}), and {why}; run "
                "where the hub is reachable (the cache job fetches it) or copy it into paths.hf_home"
            )
        elif (eval_id, d) in tokenless:
            problems.append(
                f"{what} is gated and does not load offline from {layout.hf_home}; export HF_TOKEN (a token of an "
                "account that accepted its terms) so the cache job can fetch it"
            )
    return problems


def _checkout_here(cfg: Config, layout: Layout) -> Path | None:
    """The checkout's directory where it is here at the pinned commit (its evaluate.py scripts can be asked), else
    None (not cloned yet, or elsewhere: the checkout rule makes or moves it)."""
    location = Path(cfg.posttrainbench.location(layout.scratch))
    if not location.is_dir():
        return None
    try:
        return location if ptb.git(location, "rev-parse", "HEAD") == cfg.posttrainbench.commit else None
    except ptb.CheckoutError:
        return None


def _offline_env(layout: Layout, env) -> dict:
    from ptflow.stages.posttrainbench.data_probe import probe_env

    return probe_env(env, layout.hf_home, layout.evals_cache, offline=True)


def _offline_misses(cfg: Config, layout: Layout, needed: list, env) -> dict:
    """(eval, HubData) -> why an offline evaluation misses it: asked of the checkout's evaluate.py scripts (the data
    probe, offline) where the checkout is here at its commit, else of the cache by the listed configs."""
    from ptflow.config.tasks import HFDataset
    from ptflow.stages.posttrainbench.data_probe import probe

    location = _checkout_here(cfg, layout)
    if location is None:
        sources = {(e, d): HFDataset(d.repo, None, d.splits, name=d.config, gated=d.gated) for e, d in needed}
        missing = missing_each_hf(list(set(sources.values())), layout.hf_home, layout.evals_cache, env=env)
        return {key: f"not in the cache ({missing[src]})" for key, src in sources.items() if src in missing}
    evals = sorted({ptb.eval_dir_name(cfg.evals[e].task) for e, _ in needed})
    dirs = {e: location / ptb.EVAL_DIR.format(eval=e) for e in evals}
    results = probe(dirs, location / ptb.TEMPLATES_DIR, "check", _offline_env(layout, env))
    misses = {}
    for e, d in needed:
        found = results[ptb.eval_dir_name(cfg.evals[e].task)]
        mine = [ld for ld in found.loads if ld.args.get("path") == d.repo]
        failed = [ld for ld in mine if not ld.ok]
        if failed:
            held = ", ".join(failed[0].cache_holds) or "nothing of it"
            misses[(e, d)] = f"{failed[0].describe()}: {failed[0].error}; the cache holds {held}"
        elif not mine:
            misses[(e, d)] = f"its evaluate.py stopped before loading it: {found.stopped}"
    return misses


def stale_warm_problems(cfg: Config, layout: Layout, env=None) -> list[str]:
    """A checkout eval whose ``evaluate.py`` changed since the cache job warmed the cache (its dir's object id is not
    the one the cache marker records) may ask for its data in another form. Where the checkout is here at its
    commit, those scripts are asked offline (the data probe); one line per load the cache does not hold. The cache
    job is not rerun for it by the workflow (``Jobs.checkout_cache_spec`` says why), so the line says how."""
    import json

    from ptflow.stages.posttrainbench.data_probe import probe

    checkout = cfg.posttrainbench
    marker = Path(layout.posttrainbench_cache_marker())
    evals = sorted({ptb.eval_dir_name(cfg.evals[c.eval].task) for c in cfg.cells if cfg.evals[c.eval].from_checkout})
    if not checkout or not evals or not marker.is_file():
        return []  # no warmed cache yet: the cache job warms and proves each eval's loads before any GPU job
    location = _checkout_here(cfg, layout)
    if location is None:
        return []  # the checkout rule makes it; the cache job's check follows the scripts it warmed
    try:
        current = ptb.object_ids(location, checkout.commit, [ptb.EVAL_DIR.format(eval=e) for e in evals])
        probed = json.loads(marker.read_text()).get("probed") or {}
    except (ptb.CheckoutError, OSError, ValueError):
        return []
    changed = {e: location / ptb.EVAL_DIR.format(eval=e) for e in evals
               if probed.get(e) != current[ptb.EVAL_DIR.format(eval=e)]}  # fmt: skip
    if not changed:
        return []
    found = probe(changed, location / ptb.TEMPLATES_DIR, "check", _offline_env(layout, env))
    remedy = (f"warm it for this commit first: snakemake ... --forcerun posttrainbench_cache {marker} (then run the "
              "matrix again)")  # fmt: skip
    return [
        f"evals[{e}]: its evaluate.py changed since the cache was warmed and loads {ld.describe()}, which the cache "
        f"does not hold offline ({ld.error}); {remedy}"
        for e, result in sorted(found.items()) for ld in result.failed()
    ]  # fmt: skip
