# A multi-node stage on its own: one allocation over two nodes; the rule body runs once, on the first node, reads
# the node list back from Slurm and spreads one process per node with srun (ptflow.cluster.multinode).
import dataclasses
import os
import socket
import subprocess

from ptflow.cluster.multinode import allocation_nodes, srun_argv
from ptflow.config.sites import load_site

SITE = load_site(config["site"], os.path.dirname(config["site"]))
# the site's request (account, scheduler) with this rule's own values
RESOURCES = dataclasses.replace(
    SITE.request("aggregate"),
    values={
        "partition": "debug",
        "nodes": 2,
        "threads": 1,
        "mem_mb": 500,
        "runtime": 5,
    },
).snakemake_resources()


rule probe:
    output:
        body="probe/body.txt",
        srun="probe/srun.txt",
    log:
        "probe/probe.log",
    resources:
        **RESOURCES,
    run:
        nodes = allocation_nodes()
        with open(
            output.body, "a"
        ) as fh:  # appended: a second run of the body would add a line
            fh.write(
                f"{socket.gethostname()} job={os.environ['SLURM_JOB_ID']} nodes={','.join(nodes)}\n"
            )
        argv = srun_argv(nodes, ["bash", "-c", 'echo "$SLURMD_NODENAME"'])
        done = subprocess.run(argv, capture_output=True, text=True, check=True)
        with open(output.srun, "w") as fh:
            fh.write(done.stdout)
        with open(log[0], "w") as fh:
            fh.write(" ".join(argv) + "\n" + done.stderr)
