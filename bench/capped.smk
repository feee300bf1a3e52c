# BENCH ONLY: config[count] independent short Slurm jobs (sleep config[sleep] s each), driven the way ptflow's workflow
# drives a matrix: at its start (onstart) the driver reads the user's caps for the site's account from sacctmgr
# (ptflow.cluster.limits.read_limits), keeps under them (driver_caps, apply: --jobs at most MaxSubmitJobs) and puts
# the patient Slurm clients first on PATH (ptflow.cluster.patience). Used by bench/capped_matrix.py, which passes
# --config count=N sleep=S site=<site YAML with the account>.
import sys
from pathlib import Path

# (the shims skip themselves however PATH reaches them, so any spelling of the path works; resolved for tidy logs)
sys.path.insert(0, str(Path(workflow.basedir).resolve().parent / "src"))

N = int(config.get("count", 200))


localrules:
    all,


rule all:
    default_target: True
    input:
        expand("out/{i}.txt", i=range(N)),


rule job:
    output:
        "out/{i}.txt",
    threads: 1
    resources:
        slurm_partition="debug",
        runtime=5,
        mem_mb=100,
    shell:
        "sleep {config[sleep]}; touch {output}"


onstart:
    # What workflow/rules/common.smk does (_patient_slurm_clients, _keep_under_limits), with ptflow's functions.
    from snakemake.logging import logger
    from ptflow.cluster import limits, patience
    from ptflow.config.sites import load_site
    from ptflow.jobenv import user_name

    site = load_site(
        config["site"], Path(workflow.basedir, "..", "config", "sites")
    )
    patience.install(
        site.controller_wait_seconds,
        Path(".snakemake", "ptflow", "slurm").resolve(),
    )
    # aggregate's request is in partition debug, as every job here (partition QOS and per-partition limits count)
    found = limits.read_limits(site, [site.request("aggregate")], user_name())
    caps = limits.driver_caps(found, workflow.nodes)
    limits.apply(workflow, caps)
    logger.info(
        f"bench: cluster limits: {'; '.join(found.lines())}; driver caps {caps or 'none'}"
    )
