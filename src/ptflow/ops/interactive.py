"""``ptflow interactive``: the Alps guide's steps 7-10 as one command.

    ptflow interactive --site alps --nodes 2          # salloc, Ray over the allocation, `ray status`, a shell on
                                                      # the head; `exit` ends Ray and gives the allocation back
    ptflow interactive --site alps --nodes 2 --command "python3 -m examples.data_preprocess.gsm8k ..."

``salloc`` asks for the site's request of the agent kind (default ``verl``: on Alps 2 nodes x 4 GPUs x 288 CPUs,
1 h, account g204, partition normal) and runs this module again inside the allocation (``--inside``), which brings
up the same Ray launcher the train jobs use (``ptflow.launch.ray``), in the site's runtime (EDF container, verl venv
from rule ``env``), prints ``ray status`` and ``All workers connected!``, then opens ``bash`` on the head with a
small rc file instead of ``~/.bashrc`` (no conda auto-activation; a prompt that works without a passwd entry; the
verl venv activated) — or runs ``--command`` there instead. When the shell or command ends, the launcher's trap
stops Ray on every node and salloc releases the allocation.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from ptflow.cluster import envs, images
from ptflow.cluster.runtime import node_commands
from ptflow.config.sites import Site, load_site
from ptflow.jobenv import CLEAN_BASH, clean_shell_env
from ptflow.launch.ray import job_from_allocation, run
from ptflow.specs import StageRuntime

JOB_NAME = "ray-on-slurm-int"  # the guide's job name
SHELL_RC = """# ptflow interactive: the shell on the Ray head, read instead of ~/.bashrc (no conda auto-activation)
export PS1="[${{USER:-u$(id -u)}}@$(hostname -s) \\W]\\$ "
{activate}echo "ptflow interactive: Ray head at $RAY_ADDRESS ({nodes} nodes); 'ray status' shows it, 'exit' ends it"
"""


def _agent(name: str):
    return SimpleNamespace(id=name, kind=name)


def site_request(site: Site, agent: str, nodes: int, partition: str | None, minutes: int | None):
    req = site.request("train", _agent(agent))
    values = {**req.values, "nodes": nodes, "tasks_per_node": 1}
    if partition:
        values["partition"] = partition
    if minutes:
        values["runtime"] = minutes
    values.pop("warn_seconds", None)  # nothing saves on the warning in an interactive session
    from dataclasses import replace

    return replace(req, values=values)


def salloc_argv(site: Site, req, inner: list[str]) -> list[str]:
    """``salloc <the request's flags> <inner>`` (sbatch's flags less the ones salloc has no use for)."""
    opts = [o for o in req.sbatch_options(job_name=JOB_NAME, output="-") if not o.startswith("--output=")]
    return ["salloc", *opts, *inner]


def job_runtime(site: Site, agent: str, gpus: int) -> StageRuntime:
    rt = site.runtime
    image = images.image_for(rt, "train", _agent(agent))
    handle = images.runtime_handle(rt, image) if image else None
    overlay = envs.overlay_venv(rt, _agent(agent)) or {}
    return StageRuntime(rt, image=handle, gpus=gpus, **overlay)


def inside(ns) -> int:
    """In the allocation: Ray over it, then the shell (or --command) on the head, in the foreground."""
    site = load_site(ns.site, ns.sites_dir)
    job_id = os.environ.get("SLURM_JOB_ID")
    if not job_id:
        print("ptflow interactive --inside runs inside salloc (SLURM_JOB_ID is not set)", file=sys.stderr)
        return 2
    from ptflow.cluster import slurm

    _, cpus, gpus = slurm.job_per_node(job_id)
    jr = job_runtime(site, ns.agent, gpus)
    job = job_from_allocation(
        [], Path(ns.log_dir).resolve(), runtime=node_commands(jr), gpus_per_node=gpus, cpus_per_node=cpus
    )
    job.foreground = True
    job.workdir = ns.workdir or jr.checkout or os.getcwd()
    # the runtime's ray and python first on the shell's PATH (`ray status` as the guide types it)
    path_env = ["env", f"PATH={os.path.dirname(job.runtime.ray)}:{os.environ.get('PATH', '')}"]
    path_env = path_env if os.path.isabs(job.runtime.ray) else []
    if ns.shell_command:
        job.driver = [*job.runtime.prefix, *path_env, *CLEAN_BASH, "-c", ns.shell_command]
    else:
        job.pty = True
        job.job_dir.mkdir(parents=True, exist_ok=True)
        rc_file = job.job_dir / "shell.rc"
        activate = f"source {shlex.quote(jr.venv)}/bin/activate\n" if jr.venv else ""
        rc_file.write_text(SHELL_RC.format(activate=activate, nodes=len(job.nodes)))
        job.driver = [*job.runtime.prefix, *path_env, "bash", "--rcfile", str(rc_file), "-i"]
    return run(job)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ptflow interactive", description=__doc__.split("\n\n")[0])
    add_arguments(ap)
    ap.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    return run_command(ap.parse_args(argv))


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--site", required=True, help="site name (config/sites/<name>.yaml) or path")
    ap.add_argument("--sites-dir", default=None, help="where site names are looked up (default: config/sites)")
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--agent", default="verl", help="agent kind or id whose train request to use (default verl)")
    ap.add_argument("--partition", help="instead of the request's partition")
    ap.add_argument("--time", type=int, help="minutes, instead of the request's time limit")
    ap.add_argument("--command", dest="shell_command", help="run this on the head instead of an interactive shell")
    ap.add_argument("--workdir", help="where the shell starts (default: the verl checkout, else here)")
    ap.add_argument("--log-dir", default=".", help="base of <jobid>-logs/ (default: here)")


def run_command(ns) -> int:
    if ns.sites_dir is None:
        from ptflow.config.load import find_workflow

        ns.sites_dir = str(find_workflow() / "config" / "sites")
    if getattr(ns, "inside", False):
        return inside(ns)
    site = load_site(ns.site, ns.sites_dir)
    req = site_request(site, ns.agent, ns.nodes, ns.partition, ns.time)
    inner = [sys.executable, "-m", "ptflow.ops.interactive", "--inside", "--site", str(ns.site)]
    inner += ["--sites-dir", str(ns.sites_dir), "--agent", ns.agent, "--log-dir", str(Path(ns.log_dir).resolve())]
    inner += [f"--command={ns.shell_command}"] if ns.shell_command else []
    inner += ["--workdir", ns.workdir] if ns.workdir else []
    argv = salloc_argv(site, req, inner)
    print("ptflow interactive: $ " + shlex.join(argv), file=sys.stderr, flush=True)
    return subprocess.run(argv, env=clean_shell_env()).returncode


if __name__ == "__main__":
    sys.exit(main())
