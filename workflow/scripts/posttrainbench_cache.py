"""Adapter: rule posttrainbench_cache -> ptflow.stages.cache.cache_checkout_resources (a CPU job: it downloads)."""

import json
from pathlib import Path

from ptflow.jobenv import rule_log
from ptflow.stages.cache import cache_checkout_resources

with rule_log(snakemake.log[0]) as log:
    checkout = json.loads(Path(snakemake.input.checkout).read_text())
    cache_checkout_resources(checkout, snakemake.params.job, snakemake.output[0], log=log)
