"""Adapter: rule hf_cache -> ptflow.stages.cache.combine_markers."""

from ptflow.jobenv import rule_log
from ptflow.stages.cache import combine_markers

with rule_log(snakemake.log[0]) as log:
    marker = combine_markers(
        snakemake.params.hf_home, list(snakemake.input.repos), snakemake.output[0], list(snakemake.input.data)
    )
    log(f"{len(marker['repos'])} repos, {marker['bytes']} bytes in {marker['hf_home']}")
