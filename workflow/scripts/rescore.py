"""Adapter: rule rescore -> ptflow.results.rescore.rescore_cell (the cell's stored inspect log scored again)."""

from ptflow.jobenv import rule_log
from ptflow.results.rescore import rescore_cell

with rule_log(snakemake.log[0]) as log:
    result = rescore_cell(snakemake.input[0], snakemake.output[0], snakemake.wildcards.scorer)
    metrics = result["metrics"]
    shown = f"{metrics['value']:.4f} (stored {result['stored_value']:.4f}, {result['changed']} verdicts changed)"
    log(f"{snakemake.wildcards.scorer}: " + (shown if metrics else result["why"]))
