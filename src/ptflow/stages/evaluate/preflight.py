"""The evaluate stage's part of preflight (``ptflow.cluster.preflight`` runs it before anything is submitted): every
eval of the matrix names a task that resolves with its arguments (registry and file tasks are imported here, on the
login node, never first on a GPU allocation), and, where nothing can be downloaded from here, every piece of data
its evaluation reads is in the caches already (one line per missing piece). Grader keys are checked with the
other keys (``check_secrets``)."""

from __future__ import annotations

from ptflow.cluster import hfcache
from ptflow.config.layout import Layout
from ptflow.config.model import Config
from ptflow.config.sites import Site
from ptflow.stages.evaluate.run import EvalConfigError, call_sources, check_call
from ptflow.stages.evaluate.settings import Provider, build_call
from ptflow.stages.evaluate.sources import missing_sources


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
    return problems
