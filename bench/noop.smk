# BENCH ONLY: the workflow's real train/evaluate DAG and Slurm resources (common.smk), with every job body swapped
# for `touch` of its outputs. Used by bench/slurm_submission.py to measure the scheduler side alone.
import os
import re
import sys


configfile: os.path.join(workflow.basedir, "..", "config", "config.yaml")


sys.path.insert(0, os.path.join(workflow.basedir, "..", "src"))


include: "../workflow/rules/common.smk"


rule all:
    default_target: True
    input:
        eval_jsons(),


rule train:
    input:
        unpack(get_train_input),
    output:
        L.manifest("{model}", "{eval}", "{agent}"),
    log:
        L.log("train", "{model}", "{eval}", "{agent}"),
    threads: threads_of("train")
    resources:
        **resources_of("train"),
    params:
        # bench/slurm_submission.py's latency cells a0, a1, ... end PTFLOW_BENCH_STAGGER_S apart, so their ends fall
        # at every phase of the plugin's status checks (all at once, they share one check and one figure)
        pause=lambda wc: float(os.environ.get("PTFLOW_BENCH_STAGGER_S", "0"))
        * int(re.sub(r"\D", "", wc.agent) or 0),
    shell:
        "sleep {params.pause}; touch {output} {log}"


rule evaluate:
    input:
        unpack(get_evaluate_input),
    output:
        L.eval_json("{model}", "{eval}", "{agent}"),
    log:
        L.log("evaluate", "{model}", "{eval}", "{agent}"),
    threads: threads_of("evaluate")
    resources:
        **resources_of("evaluate"),
    shell:
        "touch {output} {log}"
