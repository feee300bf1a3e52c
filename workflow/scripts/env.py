"""Adapter: rule env -> ptflow.cluster.envs.plan_env + build (a CPU job)."""

from ptflow.cluster import envs
from ptflow.config.sites import RuntimeSpec
from ptflow.jobenv import rule_log

with rule_log(snakemake.log[0]) as log:
    plan = envs.plan_env(RuntimeSpec.from_dict(snakemake.params.runtime), snakemake.wildcards.env)
    record = envs.build(plan, snakemake.output[0], log=log)
    log(f"env {snakemake.wildcards.env}: built in {record['seconds']} s; check: {record['check']}")
