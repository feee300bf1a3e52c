"""Adapter: rule posttrainbench_checkout -> ptflow.stages.posttrainbench.checkout.make_checkout."""

from ptflow.jobenv import rule_log
from ptflow.stages.posttrainbench.checkout import make_checkout

with rule_log(snakemake.log[0]) as log:
    make_checkout(snakemake.params.spec, snakemake.output[0], log=log)
