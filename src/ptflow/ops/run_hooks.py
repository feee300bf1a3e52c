"""What the workflow does around its jobs, in the driver only: at parse, put the patient Slurm clients first on
PATH; at ``onstart`` (real runs only, before anything is submitted), keep under the cluster's limits, run the
preflight, adopt earlier runs' jobs (ptflow.ops.driver), write the matrix cap's ledger (the matrix's agent cells, which
each agent cell's job reads: ``ptflow.config.spend.write_ledger``) and start a local run's warm-start broker; at
``onsuccess``/``onerror``, stop the broker and give the directory back.

``workflow/rules/common.smk`` makes one :class:`RunHooks` and calls it from the Snakefile's hooks.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from ptflow.cluster.preflight import ensure_ok
from ptflow.config.layout import Layout
from ptflow.config.matrix import Config
from ptflow.config.sites import Site
from ptflow.config.spend import write_ledger
from ptflow.jobs.build import Jobs

# where the patient Slurm clients keep their links and wait records (ptflow.cluster.patience), per working directory
SLURM_STATE_DIR = Path(".snakemake", "ptflow", "slurm")
# The rules whose jobs import torch, transformers, TRL or inspect-ai (seconds each): what a warm start saves on. Its
# zygotes import all of WARM_IMPORTS up front (about 10 CPU-s for the scripts' and as much for the evaluation kit's),
# so it pays from the second such job on; for one (a rerun of one cell) it costs more than it saves (bench/RESULTS.md,
# "the second cut").
WARM_RULES = frozenset({"cache_model", "train", "evaluate", "judge_run"})


def warm_start_pays(rules) -> bool:
    """Whether a run whose jobs are of ``rules`` (one name per job) gains from a warm start: two jobs or more that
    import the heavy libraries."""
    return sum(rule in WARM_RULES for rule in rules) >= 2


class RunHooks:
    def __init__(self, jobs: Jobs, workflow, log: Callable[[str], None] | None = None):
        self.jobs, self.workflow = jobs, workflow
        self.cfg: Config = jobs.cfg
        self.site: Site = jobs.site
        self.layout: Layout = jobs.layout
        self._log = log
        self.limits = None  # the caps read at the driver's start (keep_under_limits)
        self.broker = None  # a local run's warm-start broker (site warm_start), from onstart to the end of the run

    @property
    def log(self) -> Callable[[str], None]:
        if self._log is None:
            from snakemake.logging import logger

            return logger.info
        return self._log

    def patient_slurm_clients(self) -> None:
        """The driver's Slurm commands, and its jobs' srun, wait out an absent controller and a full submit cap
        (ptflow.cluster.patience); jobs inherit the PATH. The driver only: a job step's Snakemake does not."""
        if self.site.scheduler != "slurm" or not self.workflow.is_main_process:
            return
        from ptflow.cluster import patience

        patience.install(self.site.controller_wait_seconds, SLURM_STATE_DIR.resolve())

    def keep_under_limits(self):
        """--jobs at most the submit cap; running caps left to Slurm but for a site's own (ptflow.cluster.limits).
        From onstart: real runs only (a dry-run asks Slurm nothing), before the scheduler has started a job. A
        LimitsError goes to the driver's start, which refuses the run with it."""
        if self.site.scheduler != "slurm":
            return None
        from ptflow.cluster import limits as cluster_limits

        found = cluster_limits.for_matrix(self.cfg, self.site)
        caps = cluster_limits.driver_caps(found, self.workflow.nodes)
        cluster_limits.apply(self.workflow, caps)
        if found.any:
            kept = ", ".join(f"{k.replace('_nodes', '--jobs')}={v}" for k, v in caps.items())
            shown = f"the run keeps {kept}; " if kept else ""
            self.log(f"ptflow: cluster limits: {'; '.join(found.lines())}; {shown}jobs past a running cap Slurm "
                     "enforces wait in its queue")  # fmt: skip
        return found

    def limits_problems(self, cfg, site, layout) -> list[str]:
        """Jobs that could never start under the caps read at the driver's start (more GPUs/CPUs than the user may
        hold)."""
        from ptflow.cluster.limits import request_problems
        from ptflow.cluster.preflight import requests_in_use

        return request_problems(self.limits, requests_in_use(cfg, site), site) if self.limits else []

    def preflight(self) -> None:
        """A PreflightError (or LimitsError) goes to ptflow.ops.driver.on_start, which refuses the run with the
        problems alone."""
        from ptflow.launch.check import check_ray_launchers
        from ptflow.stages.evaluate.preflight import evaluation_problems

        self.limits = self.keep_under_limits()
        ensure_ok(
            self.cfg,
            self.site,
            self.layout,
            extra_checks=[check_ray_launchers, evaluation_problems, self.limits_problems],
        )

    def on_start(self) -> None:
        """One driver per working directory (a lock naming the live holder), the preflight, then the live jobs of
        earlier runs of this directory adopted instead of submitted again (ptflow.ops.driver)."""
        from snakemake.logging import logger

        from ptflow.ops import driver

        driver.on_start(
            self.workflow,
            scheduler=self.site.scheduler,
            earlier_jobs=self.cfg.raw.get("earlier_jobs", "wait"),
            log=logger.warning,
            preflight=self.preflight,
        )
        if self.jobs.spend is not None:
            write_ledger(self.jobs.spend, self.cfg, self.layout)
        if self.site.warm_start:
            planned = [job.rule.name for job in self.workflow.dag.needrun_jobs()]
            if warm_start_pays(planned):
                self._start_broker()
            else:
                heavy = sum(rule in WARM_RULES for rule in planned)
                self.log(f"ptflow: jobs start cold: {heavy} job(s) import torch/inspect-ai, too few for a warm start")

    def _start_broker(self) -> None:
        from ptflow import warmstart
        from ptflow.stages import WARM_IMPORTS, warm_import_env
        from ptflow.stages.evaluate.run import kit_companion

        for name, value in warm_import_env().items():
            os.environ.setdefault(name, value)
        self.broker = warmstart.start(
            WARM_IMPORTS,
            log=self.layout.log("warmstart", "broker"),
            companions=[
                kit_companion(self.layout.hf_home, self.layout.evals_cache, self.jobs.request("evaluate").threads)
            ],
        )

    def on_error(self, logs: list[str] | str | None) -> None:
        """``onerror`` (``logs``: Snakemake's log files of this run): the run's Slurm jobs still live are cancelled
        (ptflow.ops.driver.cancel_left), then as :meth:`on_end`."""
        from snakemake.logging import logger

        from ptflow.ops import driver

        paths = [logs] if isinstance(logs, str) else list(logs or [])
        run_log = next((Path(p) for p in paths if str(p).endswith(".snakemake.log")), None)
        try:
            if self.site.scheduler == "slurm":
                driver.cancel_left(run_log, log=logger.warning)
        finally:
            self.on_end()

    def on_end(self) -> None:
        from ptflow import warmstart
        from ptflow.ops import driver

        if self.broker is not None:
            warmstart.stop(self.broker)
        driver.on_end()
