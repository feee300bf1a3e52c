"""Adapter: rule cache_model -> ptflow.stages.cache.cache_model."""

from ptflow.jobenv import rule_log
from ptflow.stages.cache import cache_model

with rule_log(snakemake.log[0]) as log:
    cache_model(
        snakemake.params.hf_home,
        snakemake.params.spec,
        list(snakemake.input.datasets),
        snakemake.output[0],
        log=log,
    )
