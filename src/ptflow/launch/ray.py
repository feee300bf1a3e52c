"""A Ray cluster inside one Slurm allocation, for one driver command (verl, NeMo-RL, or a test program).

``run_ray_job`` reads the allocation back from Slurm, renders ``workflow/templates/ray_launcher.sh.j2`` (and copies
``ray_node.sh`` and ``ray_ready.py``) into ``<log_dir>/<jobid>-<restart>-logs/``, runs it and returns its exit code,
which is the driver's. The launcher starts one ``srun --overlap`` step per node (head first), waits until every node
has joined with its GPUs (or CPUs), runs the driver on the head and tears everything down on any exit.

Ports (documented design). Every Ray node of a job gets its own block of ``PORT_BLOCK`` ports below the Linux
ephemeral range (32768+), so they never collide with ports the kernel hands out::

    slot  = (job_id * SLOT_STRIDE + node_index) % N_SLOTS        # N_SLOTS = (32768 - 10000) // 128 = 177
    first = 10000 + slot * PORT_BLOCK
    first+0 GCS (head)   +1 reserved (Ray client server, needs ray[client])   +2 dashboard (head)
    +3 node manager   +4 object manager
    +5 dashboard agent gRPC   +6 dashboard agent HTTP   +7 metrics export   +8 runtime env agent
    +16 .. +127 worker processes (112)

Several nodes of one job can therefore share a host (as the two Slurm nodes of the test cluster do, and as
``--overlap`` jobs on shared nodes may), and two jobs on one host clash only if their slots coincide: with
SLOT_STRIDE=8 and 177 slots (coprime) that needs a node index difference of 8 between jobs whose ids differ by one.
Ray's temp dir is node-local and short (``/tmp/ptr<job>r<restart>n<index>``): Unix socket paths inside it must stay
below 107 bytes, and it is per node so co-hosted nodes do not share sockets; ``ray_node.sh`` removes it on exit.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ptflow import templates
from ptflow.cluster import slurm
from ptflow.cluster.runtime import NodeCommands, node_commands
from ptflow.keys import refuse_secrets

READY_SCRIPT = Path(__file__).with_name("ray_ready.py")

PORT_FLOOR = 10000
EPHEMERAL_FLOOR = 32768
PORT_BLOCK = 128
N_SLOTS = (EPHEMERAL_FLOOR - PORT_FLOOR) // PORT_BLOCK
SLOT_STRIDE = 8
WORKER_PORT_OFFSET = 16
# Longest temp dir base that leaves room for Ray's session dir and socket names under the 107-byte limit.
MAX_TMP_BASE = 40


class LaunchError(RuntimeError):
    """The Ray job cannot be set up (bad allocation, paths, ports)."""


def node_ports(job_id: int, index: int) -> dict[str, int]:
    slot = (int(job_id) * SLOT_STRIDE + index) % N_SLOTS
    first = PORT_FLOOR + slot * PORT_BLOCK
    names = ("gcs", "client", "dashboard", "node_manager", "object_manager", "agent_grpc", "agent_http", "metrics")
    ports = {name: first + i for i, name in enumerate(names)}
    ports["runtime_env_agent"] = first + 8
    ports["min_worker"] = first + WORKER_PORT_OFFSET
    ports["max_worker"] = first + PORT_BLOCK - 1
    ports["first"], ports["last"] = first, first + PORT_BLOCK - 1
    assert ports["last"] < EPHEMERAL_FLOOR
    return ports


def temp_dir(base: str, job_id: int, restart: int, index: int) -> str:
    if len(base) > MAX_TMP_BASE:
        raise LaunchError(
            f"Ray temp dir base {base!r} is {len(base)} characters; Ray's socket paths under it would pass the "
            f"107-byte Unix limit — use a node-local base of at most {MAX_TMP_BASE} characters (e.g. /tmp)"
        )
    return f"{base.rstrip('/')}/ptr{job_id}r{restart}n{index}"


@dataclass
class RayNode:
    index: int
    name: str
    addr: str
    role: str
    ports: dict
    tmp: str
    tag: str
    retries: int
    expect: float
    argv: list[str]


@dataclass
class RayJob:
    job_id: int
    restart: int
    nodes: list[slurm.NodeAddress]  # head first
    driver: list[str]
    log_dir: Path
    runtime: NodeCommands
    gpus_per_node: int = 0
    cpus_per_node: int = 1
    env: dict[str, str] = field(default_factory=dict)  # non-secret values only: they are written into the script
    workdir: str | None = None
    ready_timeout: int = 1800
    worker_retries: int = 3
    head_grace: int = 5
    tmp_base: str = "/tmp"
    head_args: list[str] = field(default_factory=list)
    worker_args: list[str] = field(default_factory=list)
    # False for trainers without a USR1 hook (verl, NeMo-RL): the driver ignores Slurm's warning instead of dying
    # of it, and saves by the deadline given in its own settings (ptflow.cluster.preempt.deadline_settings).
    driver_handles_warning: bool = True

    @property
    def job_dir(self) -> Path:
        return Path(self.log_dir).resolve() / f"{self.job_id}-{self.restart}-logs"

    @property
    def tag(self) -> str:
        return f"ptflow-ray-{self.job_id}-{self.restart}"

    def ray_nodes(self) -> list[RayNode]:
        head_ports = node_ports(self.job_id, 0)
        out = []
        for i, node in enumerate(self.nodes):
            ports = node_ports(self.job_id, i)
            tmp = temp_dir(self.tmp_base, self.job_id, self.restart, i)
            argv = [*self.runtime.prefix, self.runtime.ray, "start", "--block", "--disable-usage-stats"]
            argv += [
                f"--node-ip-address={node.addr}",
                f"--temp-dir={tmp}",
                f"--num-cpus={self.cpus_per_node}",
                f"--num-gpus={self.gpus_per_node}",
                f"--node-manager-port={ports['node_manager']}",
                f"--object-manager-port={ports['object_manager']}",
                f"--min-worker-port={ports['min_worker']}",
                f"--max-worker-port={ports['max_worker']}",
                f"--dashboard-agent-grpc-port={ports['agent_grpc']}",
                f"--dashboard-agent-listen-port={ports['agent_http']}",
                f"--metrics-export-port={ports['metrics']}",
                f"--runtime-env-agent-port={ports['runtime_env_agent']}",
                # readiness recognises nodes by this resource (Ray may register another IP than NodeAddr)
                "--resources=" + json.dumps({f"ptflow_node:{node.name}": 1}, separators=(",", ":")),
            ]
            if i == 0:
                argv += [
                    "--head",
                    f"--port={ports['gcs']}",
                    f"--dashboard-port={ports['dashboard']}",
                    "--include-dashboard=false",
                    *self.head_args,
                ]
            else:
                argv += [f"--address={self.nodes[0].addr}:{head_ports['gcs']}", *self.worker_args]
            out.append(
                RayNode(
                    i,
                    node.name,
                    node.addr,
                    "head" if i == 0 else "worker",
                    ports,
                    tmp,
                    f"{self.tag}-n{i}",
                    1 if i == 0 else self.worker_retries,  # a head restart would change the session: fail fast
                    self.gpus_per_node or self.cpus_per_node,
                    argv,
                )
            )
        return out

    def srun(self) -> list[str]:
        return ["srun", f"--jobid={self.job_id}", "--overlap", "--nodes=1", "--ntasks=1", *self.runtime.srun_flags]


def _env_check(env: dict[str, str]) -> None:
    for key in env:
        if not key.replace("_", "").isalnum() or key[0].isdigit():
            raise LaunchError(f"launcher env name {key!r} is not a shell variable name")
    try:
        refuse_secrets(env, "the rendered Ray launcher")
    except ValueError as exc:
        raise LaunchError(str(exc)) from None


def render(job: RayJob) -> Path:
    """Write launcher.sh, ray_node.sh and ray_ready.py into the job's log dir; return the launcher's path."""
    _env_check(job.env)
    if not job.nodes:
        raise LaunchError("a Ray job needs at least one node")
    nodes = job.ray_nodes()
    text = templates.render(
        "ray_launcher.sh.j2",
        job_id=job.job_id,
        restart=job.restart,
        job_dir=str(job.job_dir),
        tag=job.tag,
        head=nodes[0],
        nodes=nodes,
        env=job.env,
        srun=job.srun(),
        python=job.runtime.python,
        resource="GPU" if job.gpus_per_node else "CPU",
        ready_timeout=job.ready_timeout,
        head_grace=job.head_grace,
        driver=[*job.runtime.prefix, *job.driver],
        workdir=job.workdir,
        driver_handles_warning=job.driver_handles_warning,
    )
    job.job_dir.mkdir(parents=True, exist_ok=True)
    launcher = job.job_dir / "launcher.sh"
    tmp = launcher.with_suffix(".sh.partial")
    tmp.write_text(text)
    os.replace(tmp, launcher)
    shutil.copyfile(templates.path("ray_node.sh"), job.job_dir / "ray_node.sh")
    shutil.copyfile(READY_SCRIPT, job.job_dir / "ray_ready.py")
    return launcher


def job_from_allocation(driver: list[str], log_dir: str | Path, job_id: str | None = None, **kw) -> RayJob:
    """A RayJob over the current allocation: nodes read back from Slurm, the batch host's node first if it is
    in the list (``scontrol show hostnames`` sorts; the head is the first node of the allocation as Slurm lists it)."""
    from ptflow.cluster.multinode import allocation_nodes

    job_id = job_id or os.environ.get("SLURM_JOB_ID")
    if not job_id:
        raise LaunchError("SLURM_JOB_ID is not set: a Ray job must run inside a Slurm allocation (sbatch or a rule)")
    names = allocation_nodes(job_id)
    addrs = slurm.node_addresses(names)
    restart = slurm.job_restart_count(job_id)
    return RayJob(int(job_id), restart, [addrs[n] for n in names], list(driver), Path(log_dir), **kw)


def run(job: RayJob, log=print) -> int:
    """Render and run the launcher; its exit code (the driver's) is returned. Output goes to ``log``."""
    launcher = render(job)
    argv = ["bash", str(launcher)]
    log(
        f"ray launcher: {shlex.join(argv)} (nodes {', '.join(n.name for n in job.nodes)}; "
        f"driver {shlex.join(job.driver)})"
    )
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            log(line.rstrip("\n"))
        rc = proc.wait()
    except BaseException:
        proc.terminate()  # the launcher's trap tears the cluster down
        proc.wait(timeout=120)
        raise
    if rc != 0:
        for name in ("driver.log",):
            p = job.job_dir / name
            if p.is_file():
                tail = p.read_text(errors="replace").splitlines()[-30:]
                log(f"--- last lines of {p} ---")
                for line in tail:
                    log(line)
    return rc


def run_step(job: RayJob, command: list[str], log=print) -> None:
    """One more command on the head after the Ray job (e.g. verl's model merger), in the same runtime."""
    argv = [*job.srun(), f"--nodelist={job.nodes[0].name}", *job.runtime.prefix, *command]
    log(f"step: {shlex.join(argv)}")
    proc = subprocess.run(argv, capture_output=True, text=True)
    for line in (proc.stdout + proc.stderr).splitlines()[-40:]:
        log(line)
    if proc.returncode != 0:
        raise RuntimeError(f"{shlex.join(command)} failed with exit code {proc.returncode} on {job.nodes[0].name}")


def run_ray_job(driver: list[str], log_dir: str | Path, *, log=print, **kw) -> int:
    """The whole thing inside an allocation: read it back from Slurm, render, run; the driver's exit code."""
    return run(job_from_allocation(driver, log_dir, **kw), log=log)


def main(argv: list[str] | None = None) -> int:
    """``python -m ptflow.launch.ray --log-dir DIR [--gpus-per-node N] [--cpus-per-node N] -- DRIVER...`` in sbatch."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m ptflow.launch.ray", description=main.__doc__)
    ap.add_argument("--log-dir", required=True)
    ap.add_argument("--gpus-per-node", type=int, default=0)
    ap.add_argument("--cpus-per-node", type=int, default=1)
    ap.add_argument("--ready-timeout", type=int, default=1800)
    ap.add_argument("--worker-retries", type=int, default=3)
    ap.add_argument("--worker-arg", action="append", default=[], help="extra `ray start` argument for workers")
    ap.add_argument("driver", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    driver = args.driver[1:] if args.driver[:1] == ["--"] else args.driver
    if not driver:
        ap.error("give the driver command after --")
    return run_ray_job(
        driver,
        args.log_dir,
        runtime=node_commands(None),
        gpus_per_node=args.gpus_per_node,
        cpus_per_node=args.cpus_per_node,
        ready_timeout=args.ready_timeout,
        worker_retries=args.worker_retries,
        worker_args=args.worker_arg,
        log=lambda m: print(m, flush=True),
    )


if __name__ == "__main__":
    sys.exit(main())
