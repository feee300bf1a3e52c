"""Adapter: rule seed_mean -> ptflow.stages.evaluate.seeds.seed_mean (a seeded cell's eval.json from its seeds)."""

from ptflow.jobenv import rule_log
from ptflow.stages.evaluate.seeds import seed_mean

with rule_log(snakemake.log[0]) as log:
    data = seed_mean(list(snakemake.input), snakemake.output[0])
    seeds = data["seeds"]
    log(f"{data['status']}: {seeds['num_seeds_succeeded']} of {seeds['num_seeds']} seeds succeeded")
