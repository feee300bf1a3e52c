"""Adapter: rule cache_dataset -> ptflow.stages.cache.cache_dataset."""

from ptflow.jobenv import rule_log
from ptflow.stages.cache import cache_dataset

with rule_log(snakemake.log[0]) as log:
    cache_dataset(snakemake.params.hf_home, snakemake.params.spec, snakemake.output[0], log=log)
