# The Ray launcher as a train-like rule: a two-node Slurm job submitted by the slurm executor plugin; the rule body
# runs once, brings up Ray on both nodes (ptflow.launch.ray) and runs a real Ray driver (ray_probe.py) on the head.
import dataclasses
import os
import sys

from ptflow.cluster.runtime import node_commands
from ptflow.launch.ray import run_ray_job
from ptflow.config.sites import load_site

SITE = load_site(config["site"], os.path.dirname(config["site"]))
# the site's request (account, scheduler) with this rule's own values
RESOURCES = dataclasses.replace(
    SITE.request("aggregate"),
    values={
        "partition": "debug",
        "nodes": 2,
        "threads": 2,
        "mem_mb": 2000,
        "runtime": 15,
    },
).snakemake_resources()
PROBE = os.path.join(workflow.basedir, "ray_probe.py")


rule ray_probe:
    output:
        "ray/probe.json",
    log:
        "ray/train.log",
    resources:
        **RESOURCES,
    run:
        with open(log[0], "w") as fh:

            def say(msg):
                print(msg, file=fh, flush=True)

            rc = run_ray_job(
                [sys.executable, PROBE, os.path.abspath(output[0])],
                os.path.abspath("ray/logs"),
                runtime=node_commands(None),
                cpus_per_node=2,
                ready_timeout=600,
                log=say,
            )
        if rc != 0:
            raise RuntimeError(f"Ray job failed with exit code {rc}; see {log[0]}")
