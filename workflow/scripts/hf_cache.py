"""Adapter: rule hf_cache -> ptflow.stages.cache.combine_markers."""

from ptflow.jobenv import rule_log
from ptflow.stages.cache import combine_markers
from ptflow.warmstart import hand_over

hand_over()  # a local run: go on in a process that has the heavy libraries imported (ptflow.warmstart)

with rule_log(snakemake.log[0]) as log:
    marker = combine_markers(
        snakemake.params.hf_home, list(snakemake.input.repos), snakemake.output[0], list(snakemake.input.data)
    )
    log(f"{len(marker['repos'])} repos, {marker['bytes']} bytes in {marker['hf_home']}")
