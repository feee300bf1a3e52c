"""Adapter: rule cache_model -> ptflow.stages.cache.cache_model."""

from ptflow.jobenv import rule_log
from ptflow.stages.cache import cache_model
from ptflow.warmstart import hand_over

hand_over()  # a local run: go on in a process that has the heavy libraries imported (ptflow.warmstart)

with rule_log(snakemake.log[0]) as log:
    cache_model(
        snakemake.params.hf_home,
        snakemake.params.spec,
        list(snakemake.input.datasets),
        snakemake.output[0],
        log=log,
    )
