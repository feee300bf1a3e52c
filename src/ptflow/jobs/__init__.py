"""The jobs of the rules: their specs (:mod:`ptflow.specs`) built from the config, the site and the layout by one
object (``build.Jobs``) and handed to Snakemake as values or per-job functions (``rule_values``); and what a job does
beyond one stage (``evaluation``: a cell's evaluation inside its train job's allocation)."""
