"""The job contract: what each rule's jobs carry in their params, as typed values (``specs``), built from the
config, the site and the layout by one object (``build.Jobs``), and handed to Snakemake as values or per-job
functions (``rule_values``). Scripts and stages read a job's params back with the spec's ``from_params``."""
