"""Preflight for the Ray launcher: before the real submission, the launcher of every Ray train job the matrix will
run is rendered as it will be (the site's runtime, the partition's nodes, the request's nodes and GPUs), ``bash -n``
reads every script, and ``sbatch --test-only`` with the request's own flags asks Slurm whether it would take the
job (NeMo-RL's plan: ``bash -n ray_bare.sub; sbatch --test-only ray_bare.sub``). Nothing is submitted.

It lives here, not in ``ptflow.cluster.preflight``, because it renders launchers (``ptflow.launch``); the workflow
hands it to :func:`ptflow.cluster.preflight.ensure_ok` as an extra check.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from ptflow.cluster import slurm
from ptflow.cluster.runtime import node_commands
from ptflow.config.layout import Layout
from ptflow.config.matrix import Config
from ptflow.config.sites import Site
from ptflow.launch.ray import RayJob, check_sbatch, render, render_sbatch
from ptflow.specs import StageRuntime

PLACEHOLDER_JOB_ID = 1  # the rendered ports and temp dirs of a job id that is not known before submission


def ray_agents(cfg: Config) -> list:
    return [
        cfg.agents[a] for a in sorted({c.agent_id for c in cfg.training_cells()}) if cfg.agents[a].spec.ray_launcher
    ]


def check_ray_launchers(cfg: Config, site: Site, layout: Layout | None = None) -> list[str]:
    if site.scheduler != "slurm":
        return []
    problems = []
    for agent in ray_agents(cfg):
        req = site.request("train", agent)
        label = f"train[{agent.id}]"
        try:
            nodes = slurm.partition_nodes(req.get("partition")) if req.get("partition") else []
            want = int(req.get("nodes", 1))
            if len(nodes) < want:
                problems.append(
                    f"site {site.name} resources.{label}: {want} nodes requested, partition {req.get('partition')} "
                    f"has {len(nodes)}; request fewer nodes or another partition"
                )
                continue
            addrs = slurm.node_addresses(nodes[:want])
        except slurm.SlurmUnavailable as exc:
            problems.append(f"cannot check the Ray launcher of {label}: {exc}")
            continue
        from ptflow.cluster import images

        image = images.image_for(site.runtime, "train", agent)
        handle = images.runtime_handle(site.runtime, image) if image else None
        runtime = node_commands(StageRuntime(site.runtime, image=handle, gpus=req.gpus))
        with tempfile.TemporaryDirectory(prefix="ptflow-launcher-check-") as tmp:
            job = RayJob(
                PLACEHOLDER_JOB_ID,
                0,
                [addrs[n] for n in nodes[:want]],
                [runtime.python, "-c", "pass"],
                Path(tmp),
                runtime,
                gpus_per_node=req.gpus,
                cpus_per_node=req.threads,
            )
            launcher = render(job)
            for script in (launcher, launcher.parent / "ray_node.sh"):
                proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
                if proc.returncode != 0:
                    problems.append(
                        f"the Ray launcher of {label} does not parse (bash -n {script.name}): {proc.stderr}"
                    )
            batch = render_sbatch(Path(tmp) / "ray_bare.sub", job_name=f"ptflow-check-{agent.id}")
            options = req.sbatch_options(job_name=f"ptflow-check-{agent.id}", output="/dev/null")
            for problem in check_sbatch(batch, options):
                problems.append(f"site {site.name} resources.{label}: Slurm would not take the Ray job: {problem}")
    return problems
