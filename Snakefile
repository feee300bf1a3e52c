# ptflow: LLM post-training benchmark matrices. See README.md; config keys in docs/configuration.md.
import os
import sys

from snakemake.utils import min_version

min_version("9.0")

# The ptflow package of this checkout, for this process and every job it starts (whatever their environment).
_SRC = os.path.join(workflow.basedir, "src")
sys.path.insert(0, _SRC)
from ptflow.jobenv import ignore_time_limit_warning, prepend_pythonpath
from ptflow import snakemake_once

prepend_pythonpath(_SRC)
# What Snakemake repeats for every job of a rule with the same answer, once (the module says what and why).
snakemake_once.install()
if "SLURM_JOB_ID" in os.environ:
    # Inside a Slurm job (the plugin's job-step Snakemake, or a multi-node rule's batch-step one): Slurm's time-limit
    # warning (USR1 to every process of every step) must not kill Snakemake or the rule it runs; trainers catch it
    # (ptflow.cluster.preempt). Ignored signals are inherited, so every rule's processes ignore it too.
    ignore_time_limit_warning()


# The embedded default, found from the Snakefile so the workflow runs in any --directory; --configfile adds on top.
configfile: os.path.join(workflow.basedir, "config", "config.yaml")


include: "workflow/rules/common.smk"
include: "workflow/rules/posttrainbench.smk"
include: "workflow/rules/cache.smk"
include: "workflow/rules/images.smk"
include: "workflow/rules/envs.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/judge.smk"
include: "workflow/rules/rescore.smk"
include: "workflow/rules/report.smk"


report: "workflow/report/workflow.rst"


onstart:
    on_driver_start()


onsuccess:
    on_driver_end()


onerror:
    on_driver_error(log)


rule all:
    default_target: True
    input:
        final_outputs(),


# Every object of the imports and the parse, out of the garbage collector's later walks (ptflow.snakemake_once).
snakemake_once.freeze_parsed_objects()
