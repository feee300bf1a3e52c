"""A Ray cluster inside one Slurm allocation, for one driver command (verl, NeMo-RL, or a test program).

``run_ray_job`` reads the allocation back from Slurm, renders ``templates/ray_launcher.sh.j2`` (and copies
``ray_node.sh`` and ``ray_ready.py``) into ``<base>/<jobid>-logs/`` (``restart-<n>/`` below it after a requeue), runs
it and returns its exit code, which is the driver's. The launcher starts one ``srun --overlap`` step per node (head
first), waits until ``ray status`` counts every node's ``worker_units`` (GPUs, or CPUs on a CPU cluster), prints
``All workers connected!``, runs the driver on the head and tears everything down on any exit.

NeMo-RL's bare-metal launcher interface (the JUWELS plan's ``ray_bare.sub``) is this module's command line and
environment: ``COMMAND`` (the driver, ``bash -c``; unset: NeMo-RL distillation with ``DISTILL_CONFIG``/``CKPT_DIR``),
``BASE_LOG_DIR`` (default: the submit dir), ``GPUS_PER_NODE`` (default: the allocation's; a different value is an
error, as ray.sub checks GRES), ``RAY_PORT`` / ``RAY_DASHBOARD_PORT`` (instead of the derived ports) and
``RAY_TMPDIR`` (Ray's temp dirs, e.g. on scratch when /tmp is small). Logs: ``ray-head.log``, ``ray-worker-<n>.log``,
``ray-driver.log``. :func:`render_sbatch` writes the batch script (``ptflow ray-launcher``) a user submits with
``COMMAND=... sbatch --nodes=N --gres=gpu:4 ... ray_bare.sub``; :func:`check_sbatch` runs ``bash -n`` and
``sbatch --test-only`` on it (preflight does the same for the matrix's Ray jobs).

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
from ptflow.jobenv import CLEAN_BASH, clean_shell_env
from ptflow.keys import refuse_secrets

READY_SCRIPT = Path(__file__).with_name("ray_ready.py")

PORT_FLOOR = 10000
EPHEMERAL_FLOOR = 32768
PORT_BLOCK = 128
N_SLOTS = (EPHEMERAL_FLOOR - PORT_FLOOR) // PORT_BLOCK
SLOT_STRIDE = 8
WORKER_PORT_OFFSET = 16
# Longest temp dir base that leaves room under the 107-byte Unix socket limit for what Ray appends to it:
# /ptr<job>r<restart>n<i> (~16) + /session_<date>_<time>_<usec>_<pid> (~42) + /sockets/plasma_store (21).
MAX_TMP_BASE = 28
READY_LINE = "All workers connected!"  # NeMo-RL's launcher prints it when the cluster is complete
# NeMo-RL's default workload when COMMAND is unset (ray_bare.sub's "default distillation mode")
DEFAULT_DISTILL_CONFIG = "examples/configs/distillation_math.yaml"


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

    @property
    def log_name(self) -> str:
        """NeMo-RL's names: ray-head.log, ray-worker-<n>.log (n = 1 .. nodes-1)."""
        return "ray-head.log" if self.index == 0 else f"ray-worker-{self.index}.log"


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
    gcs_port: int | None = None  # RAY_PORT: instead of the derived one
    dashboard_port: int | None = None  # RAY_DASHBOARD_PORT: the dashboard is started only when given
    # `ptflow interactive`: the driver runs in the foreground on the launcher's terminal; `pty` for a shell
    foreground: bool = False
    pty: bool = False

    def __post_init__(self):
        if self.tmp_base == "/tmp" and os.environ.get("RAY_TMPDIR"):
            self.tmp_base = os.environ["RAY_TMPDIR"]  # NeMo-RL's advice when /tmp is small: scratch

    @property
    def job_dir(self) -> Path:
        """``<base>/<jobid>-logs`` as NeMo-RL's launcher names it; a requeued run (restart n) below it."""
        base = Path(self.log_dir).resolve() / f"{self.job_id}-logs"
        return base if self.restart == 0 else base / f"restart-{self.restart}"

    @property
    def tag(self) -> str:
        return f"ptflow-ray-{self.job_id}-{self.restart}"

    @property
    def worker_units(self) -> int:
        """What each node brings, as NeMo-RL tags it: its GPUs (its CPUs on a CPU-only cluster)."""
        return self.gpus_per_node or self.cpus_per_node

    def ray_nodes(self) -> list[RayNode]:
        head_ports = node_ports(self.job_id, 0)
        if self.gcs_port:
            head_ports["gcs"] = self.gcs_port
        out = []
        for i, node in enumerate(self.nodes):
            ports = dict(head_ports) if i == 0 else node_ports(self.job_id, i)
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
                # readiness counts worker_units in `ray status` (NeMo-RL's tag); a missing node is named by its own
                # resource (Ray may register another IP than NodeAddr)
                "--resources="
                + json.dumps({"worker_units": self.worker_units, f"ptflow_node:{node.name}": 1}, separators=(",", ":")),
            ]
            if i == 0:
                argv += ["--head", f"--port={ports['gcs']}"]
                if self.dashboard_port:
                    argv += ["--include-dashboard=true", f"--dashboard-port={self.dashboard_port}"]
                else:
                    argv += [f"--dashboard-port={ports['dashboard']}", "--include-dashboard=false"]
                argv += self.head_args
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
                    self.worker_units,
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
        clean_bash=list(CLEAN_BASH),
        ready_line=READY_LINE,
        foreground=job.foreground,
        pty=job.pty,
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
    argv = [*CLEAN_BASH, str(launcher)]  # no ~/.bashrc, profile or $BASH_ENV (jobenv)
    log(
        f"ray launcher: {shlex.join(argv)} (nodes {', '.join(n.name for n in job.nodes)}; "
        f"driver {shlex.join(job.driver)})"
    )
    if job.foreground:  # `ptflow interactive`: the launcher owns the terminal (the shell on the head needs it)
        return subprocess.run(argv, env=clean_shell_env()).returncode
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=clean_shell_env())
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
        for name in ("ray-driver.log",):
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


# ---- NeMo-RL's launcher interface: environment variables, the batch script, its checks ----


def _env_int(env: dict, name: str) -> int | None:
    value = env.get(name)
    if value in (None, ""):
        return None
    try:
        return int(value)
    except ValueError:
        raise LaunchError(f"{name}={value!r} is not a whole number") from None


def distill_command(env: dict, nodes: int, gpus_per_node: int) -> list[str]:
    """ray_bare.sub's default workload when COMMAND is unset: NeMo-RL distillation from the checkout (cwd)."""
    argv = [
        "uv",
        "run",
        "python",
        "examples/run_distillation.py",
        "--config",
        env.get("DISTILL_CONFIG") or DEFAULT_DISTILL_CONFIG,
        f"cluster.num_nodes={nodes}",
        f"cluster.gpus_per_node={gpus_per_node}",
    ]
    if env.get("CKPT_DIR"):
        argv.append(f"checkpointing.checkpoint_dir={env['CKPT_DIR']}")
    return argv


def job_from_env(
    env: dict | None = None, *, driver: list[str] | None = None, log_dir: str | None = None, **kw
) -> RayJob:
    """A RayJob for the current allocation configured the way NeMo-RL's launcher is (module docstring)."""
    env = dict(os.environ if env is None else env)
    base = log_dir or env.get("BASE_LOG_DIR") or env.get("SLURM_SUBMIT_DIR") or os.getcwd()
    job = job_from_allocation([], base, **kw)
    nnodes, cpus, gpus = slurm.job_per_node(str(job.job_id))
    wanted = _env_int(env, "GPUS_PER_NODE")
    if wanted is not None and wanted != gpus:
        raise LaunchError(
            f"GPUS_PER_NODE={wanted} but the allocation has {gpus} GPU(s) per node (its GRES); submit with "
            f"--gres=gpu:{wanted} or set GPUS_PER_NODE={gpus}"
        )
    job.gpus_per_node = gpus
    job.cpus_per_node = kw.get("cpus_per_node") or cpus
    job.gcs_port = _env_int(env, "RAY_PORT")
    job.dashboard_port = _env_int(env, "RAY_DASHBOARD_PORT")
    if env.get("RAY_TMPDIR"):
        job.tmp_base = env["RAY_TMPDIR"]
    if driver:
        job.driver = list(driver)
    elif env.get("COMMAND"):
        job.driver = ["bash", "-c", env["COMMAND"]]
    else:
        job.driver = distill_command(env, nnodes, gpus)
    job.workdir = job.workdir or env.get("SLURM_SUBMIT_DIR") or os.getcwd()
    return job


def render_sbatch(path: str | Path, *, python: str = sys.executable, job_name: str = "ray-bare") -> Path:
    """The batch script NeMo-RL users submit (``COMMAND=... sbatch --nodes=2 --gres=gpu:4 -p P -A A ray_bare.sub``):
    one task per node, then this module with the interface above. Resources come from the sbatch command line."""
    from ptflow.files import atomic_path
    from ptflow.jobenv import package_root

    text = templates.render(
        "ray_bare.sub.j2", python=python, package_root=package_root(), job_name=job_name, clean_bash=CLEAN_BASH
    )
    with atomic_path(path) as tmp:
        Path(tmp).write_text(text)
        os.chmod(tmp, 0o755)
    return Path(path)


def check_sbatch(script: str | Path, sbatch_options: list[str]) -> list[str]:
    """``bash -n`` on the script, then ``sbatch --test-only`` with the options it will be submitted with: problems
    (the tools' own output), empty when both pass. Nothing is submitted."""
    problems = []
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    if proc.returncode != 0:
        problems.append(f"bash -n {script}: {proc.stderr.strip()}")
    ok, detail = slurm.test_only([*sbatch_options, str(script)])
    if not ok:
        problems.append(f"sbatch --test-only {shlex.join(sbatch_options)} {script}: {detail}")
    return problems


def main(argv: list[str] | None = None) -> int:
    """``python -m ptflow.launch.ray [--log-dir DIR] [--cpus-per-node N] [-- DRIVER...]`` inside an allocation;
    without a driver, COMMAND (or NeMo-RL distillation), as NeMo-RL's launcher does."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m ptflow.launch.ray", description=main.__doc__)
    ap.add_argument("--log-dir", help="base of <jobid>-logs/ (default: BASE_LOG_DIR, else the submit dir)")
    ap.add_argument("--gpus-per-node", type=int, help="(default: GPUS_PER_NODE, else the allocation's GPUs)")
    ap.add_argument("--cpus-per-node", type=int, help="CPUs Ray offers per node (default: the allocation's)")
    ap.add_argument("--ready-timeout", type=int, default=1800)
    ap.add_argument("--worker-retries", type=int, default=3)
    ap.add_argument("--worker-arg", action="append", default=[], help="extra `ray start` argument for workers")
    ap.add_argument("driver", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    driver = args.driver[1:] if args.driver[:1] == ["--"] else args.driver
    env = dict(os.environ)
    if args.gpus_per_node is not None:
        env["GPUS_PER_NODE"] = str(args.gpus_per_node)
    try:
        job = job_from_env(
            env,
            driver=driver or None,
            log_dir=args.log_dir,
            runtime=node_commands(None),
            cpus_per_node=args.cpus_per_node,
            ready_timeout=args.ready_timeout,
            worker_retries=args.worker_retries,
            worker_args=args.worker_arg,
        )
    except LaunchError as exc:
        print(f"ptflow ray launcher: {exc}", file=sys.stderr)
        return 2
    return run(job, log=lambda m: print(m, flush=True))


if __name__ == "__main__":
    sys.exit(main())
