"""Adapter: rule cache_dataset -> ptflow.stages.cache.cache_dataset."""

from ptflow.jobenv import rule_log
from ptflow.stages.cache import cache_dataset
from ptflow.warmstart import hand_over

hand_over()  # a local run: go on in a process that has the heavy libraries imported (ptflow.warmstart)

with rule_log(snakemake.log[0]) as log:
    cache_dataset(snakemake.params.hf_home, snakemake.params.spec, snakemake.output[0], log=log)
