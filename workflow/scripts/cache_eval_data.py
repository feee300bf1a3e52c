"""Adapter: rules cache_eval_data and cache_resources -> ptflow.stages.cache (CPU jobs: the only ones that download)."""

from ptflow.jobenv import rule_log
from ptflow.stages.cache import cache_eval_data, cache_resources
from ptflow.warmstart import hand_over

hand_over()  # a local run: go on in a process that has the heavy libraries imported (ptflow.warmstart)

with rule_log(snakemake.log[0]) as log:
    p = snakemake.params
    if snakemake.rule == "cache_resources":
        cache_resources(p.hf_home, p.evals_cache, list(p.files), snakemake.output[0], log=log)
    else:
        cache_eval_data(p.hf_home, p.evals_cache, p.spec, snakemake.output[0], log=log)
