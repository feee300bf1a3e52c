"""THE place that turns a command into the site's way of running it (container runtime or venv).

Every container flag ptflow uses is built here, from the site's :class:`~ptflow.config.sites.RuntimeSpec`:

- ``apptainer``  : ``apptainer exec --nv [--bind …] <image.sif> cmd`` (PostTrainBench; agent cells add
  ``-c --writable-tmpfs --home <jobdir>:/home/ben`` so the agent sees only its job dir and what is bound)
- ``pyxis``      : ``srun --overlap --container-image=<image.sqsh> --container-mounts=/lustre,… cmd`` (TAO; agent
  cells add ``--no-container-mount-home`` and mount their job dir at ``/home/ben``)
- ``enroot-edf`` : ``srun --overlap --environment=<image.toml> cmd`` (CSCS Alps; the EDF file holds image + mounts)
- ``venv``       : ``<venv>/bin/cmd`` when the site names a venv (absolute paths: JUWELS' srun shells have no PATH
  set up), else the command unchanged (the local default).

:func:`runtime_argv` runs one command; :func:`node_commands` gives a launcher (``ptflow.launch.ray``) the same flags
for the srun steps it starts on each node. ``--overlap``: inside a Snakemake Slurm job the rule body already runs in
a step holding the job's CPUs; a second step must share them or it waits forever.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ptflow.cluster import images
from ptflow.config.agent_clis import CONTAINER_HOME
from ptflow.config.sites import RuntimeSpec
from ptflow.jobenv import package_root
from ptflow.specs import StageRuntime

AGENT_HOME = CONTAINER_HOME  # the agent cell's $HOME inside the container (its job dir on the host): /home/ben
HOME_BOUND = ("apptainer", "pyxis")  # runtimes that put an agent cell's job dir at AGENT_HOME (not enroot-edf, venv)
TOOL = {"apptainer": "apptainer", "pyxis": "srun", "enroot-edf": "srun"}
IN_RUNTIME_ENV = "PTFLOW_IN_RUNTIME"


def _container_srun_flags(
    rt: RuntimeSpec,
    image: str,
    extra_binds: Sequence[str],
    job_dir: str | None,
    workdir: str | None = None,
    agent_cell: bool = False,
) -> list[str]:
    """The srun flags that put a step into the site's container (pyxis, enroot-edf). An agent cell on pyxis gets its
    job dir as the home PostTrainBench binds (``AGENT_HOME``), the user's own home left out, as apptainer's ``-c
    --home`` does."""
    if rt.kind == "pyxis":
        mounts = list(rt.mounts) + [b for b in extra_binds if b not in rt.mounts]
        flags = [f"--container-image={image}"]
        if agent_cell:
            if not job_dir:
                raise ValueError("runtime_argv: an agent cell needs job_dir (its private $HOME)")
            mounts.append(f"{job_dir}:{AGENT_HOME}")
            flags.append("--no-container-mount-home")
        if mounts:
            flags.append("--container-mounts=" + ",".join(mounts))
        if workdir or job_dir:
            flags.append(f"--container-workdir={workdir or job_dir}")
        return flags
    # enroot-edf: the EDF file carries the image and the site's mounts, so every path the job needs must lie under
    # them (they go into the EDF file, rule edf)
    outside = [b for b in extra_binds if not any(b == m or b.startswith(m.rstrip("/") + "/") for m in rt.mounts)]
    if outside:
        raise images.ImageError(
            f"site {rt.site} (runtime.kind enroot-edf): {', '.join(outside)} not under runtime.mounts "
            f"({', '.join(rt.mounts) or 'none'}); add the filesystem to runtime.mounts (it goes into the EDF file)"
        )
    return [f"--environment={image}"]


def _apptainer_prefix(
    rt: RuntimeSpec,
    image: str,
    binds: Sequence[str],
    *,
    gpus: int | None,
    agent_cell: bool,
    job_dir: str | None,
    workdir: str | None = None,
) -> list[str]:
    argv = ["apptainer", "exec"] + ([] if gpus == 0 else ["--nv"])
    if agent_cell:
        if not job_dir:
            raise ValueError("runtime_argv: an agent cell needs job_dir (its private $HOME)")
        argv += ["-c", "--writable-tmpfs", "--home", f"{job_dir}:{AGENT_HOME}"]
    if workdir:
        argv += ["--pwd", workdir]
    for path in list(rt.mounts) + [b for b in binds if b not in rt.mounts]:
        argv += ["--bind", path]
    return argv + [image]


def _need_image(rt: RuntimeSpec, image: str | None) -> str:
    if not image:
        raise images.ImageError(
            f"site {rt.site} runs commands in containers (runtime.kind = {rt.kind}) but no image was given; "
            "name one under runtime.use for this stage or agent"
        )
    return image


def runtime_argv(
    rt: RuntimeSpec,
    command: Sequence[str],
    *,
    image: str | None = None,
    job_dir: str | None = None,
    agent_cell: bool = False,
    gpus: int | None = None,
    binds: Sequence[str] = (),
    workdir: str | None = None,
) -> list[str]:
    """argv that runs ``command`` through the site's runtime.

    ``image`` is the runtime's handle: the ``.sif`` (apptainer), the ``.sqsh`` (pyxis) or the EDF ``.toml``
    (enroot-edf). ``binds`` are extra host paths the command needs (job dir, HF cache view, checkpoints), mounted
    at the same place. ``gpus=0`` leaves GPUs out (``--nv``); ``None`` means the job's GPUs, if any. ``workdir``:
    the command's working directory inside the container (default: the job dir, or the runtime's own choice).
    """
    command = list(command)
    if not command:
        raise ValueError("runtime_argv: empty command")
    if rt.kind == "venv":
        if rt.venv and "/" not in command[0]:
            return [str(Path(rt.venv) / "bin" / command[0])] + command[1:]
        return command
    image = _need_image(rt, image)
    if rt.kind == "apptainer":
        prefix = _apptainer_prefix(rt, image, binds, gpus=gpus, agent_cell=agent_cell, job_dir=job_dir, workdir=workdir)
        return prefix + command
    if rt.kind in ("pyxis", "enroot-edf"):
        flags = _container_srun_flags(rt, image, binds, job_dir, workdir, agent_cell=agent_cell)
        return ["srun", "--overlap", "--ntasks=1", *flags] + command
    raise ValueError(f"site {rt.site}: unknown runtime.kind {rt.kind!r}")


@dataclass
class NodeCommands:
    """How a launcher runs ``ray``/``python`` in the srun steps it starts on each node: absolute paths (no PATH
    lookup inside srun shells), srun flags for step containers (pyxis, EDF), or a prefix wrapping each command
    (apptainer). Only venv sites (and this machine) run without a container."""

    ray: str
    python: str
    srun_flags: list[str] = field(default_factory=list)
    prefix: list[str] = field(default_factory=list)


def node_commands(job: StageRuntime | None) -> NodeCommands:
    """The commands of a multi-node launcher for a train job's runtime (None: the Python running ptflow)."""
    rt = job.site_runtime if job else RuntimeSpec(site="local")
    if job is not None and job.venv:  # the overlay venv (verl): its python and the ray entry point rule env wrote
        python, ray = f"{job.venv}/bin/python", f"{job.venv}/bin/ray"
        if rt.kind == "venv":
            return NodeCommands(ray, python)
        image = _need_image(rt, job.image)
        if rt.kind == "apptainer":
            prefix = _apptainer_prefix(rt, image, (job.venv,), gpus=None, agent_cell=False, job_dir=None)
            return NodeCommands(ray, python, prefix=prefix)
        return NodeCommands(ray, python, srun_flags=_container_srun_flags(rt, image, (job.venv,), None))
    if rt.kind == "venv":
        if rt.venv is None:  # this machine / the test cluster: the Python running ptflow
            bindir = Path(sys.executable).parent
            return NodeCommands(str(bindir / "ray"), sys.executable)
        if not rt.venv.startswith("/"):
            raise ValueError(f"site {rt.site} runtime.venv {rt.venv!r} must be an absolute venv path for kind venv")
        return NodeCommands(f"{rt.venv}/bin/ray", f"{rt.venv}/bin/python")
    image = _need_image(rt, job.image)
    if rt.kind == "apptainer":
        prefix = _apptainer_prefix(rt, image, (), gpus=None, agent_cell=False, job_dir=None)
        return NodeCommands("ray", "python3", prefix=prefix)
    return NodeCommands("ray", "python3", srun_flags=_container_srun_flags(rt, image, (), None))


def container_env(rt: RuntimeSpec, env: dict[str, str]) -> dict[str, str]:
    """The environment a container command runs in. apptainer: HOME is the user's real home (PostTrainBench's Slurm
    guide: Slurm may set HOME to something else, and apptainer's --home handling then misbehaves)."""
    if rt.kind != "apptainer":
        return env
    from ptflow.jobenv import home_dir

    return {**env, "HOME": home_dir()}


def check_runtime_tool(rt: RuntimeSpec, which=shutil.which) -> None:
    """The runtime's own tool must exist where jobs run; fail at once naming it and the setting."""
    if rt.kind in TOOL:
        images.require_tool(TOOL[rt.kind], f"site {rt.site} sets runtime.kind = {rt.kind}", which)
    if rt.kind == "venv" and rt.venv and not Path(rt.venv, "bin", "python").exists():
        raise images.MissingToolError(
            f"{rt.venv}/bin/python does not exist, but site {rt.site} sets runtime.venv = {rt.venv}; create the venv "
            "there or fix runtime.venv"
        )


def inside_runtime() -> bool:
    """True in the process a rule re-started inside the site's runtime (no second re-start)."""
    return os.environ.get(IN_RUNTIME_ENV) == "1"


def _run_forwarding_warning(argv: list[str], env: dict, timeout: float | None = None) -> int:
    """Run the re-started job and pass the time-limit warning and SIGTERM on to it: this process may be the only
    one Slurm signals (the batch shell of a supervised job forwards to it), and the trainer inside must save.
    After ``timeout`` seconds it is stopped (TERM, then KILL 30 s later)."""
    import signal
    import subprocess

    from ptflow.jobenv import WARNING_SIGNAL

    proc = subprocess.Popen(argv, env=env)
    forwarded = (getattr(signal, f"SIG{WARNING_SIGNAL}"), signal.SIGTERM)
    saved = {sig: signal.signal(sig, lambda signum, _frame: proc.send_signal(signum)) for sig in forwarded}
    try:
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.terminate()  # a container runtime passes it on; the child gets 30 s to go
            try:
                return proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                return proc.wait()
    finally:
        for sig, old in saved.items():
            signal.signal(sig, old)


def reexec_in_runtime(
    spec: StageRuntime | None,
    log=print,
    script: str | None = None,
    tmp_root: str | None = None,
    hf_models: Sequence[str] | None = None,
    wrap: Sequence[str] = (),
) -> None:
    """Run this job's script again through the site's runtime and exit with its status; return to stay here.

    ``spec`` is the job spec's runtime (``ptflow.specs.StageRuntime``, built by ``ptflow.jobs.build``). Nothing
    happens when it is None (the local default) or when this process already is the re-started one. The child gets
    a private HF cache view (``runtime.hf_view``) as HF_HOME and ``HF_HUB_OFFLINE=1``: a GPU job never downloads.
    API keys and tokens reach it through the environment only.
    ``hf_models``: the model repos the job reads from the cache (None: all); a copied view holds only those.
    ``wrap``: a command that runs the runtime's command line (``wrap + argv``): humaneval's answer sandbox on an
    apptainer site (``ptflow.stages.posttrainbench.answer_sandbox.runtime_wrap``).
    """
    if not spec or inside_runtime():
        return
    rt = spec.site_runtime
    if rt.kind == "venv" and rt.venv and Path(sys.prefix) == Path(rt.venv):
        return  # already the site venv's Python
    rc = run_in_runtime(spec, script or sys.argv[0], log=log, tmp_root=tmp_root, hf_models=hf_models, wrap=wrap)
    log(f"site runtime finished with exit {rc}")
    sys.exit(rc)


def run_in_runtime(
    spec: StageRuntime | None,
    script: str,
    log=print,
    tmp_root: str | None = None,
    timeout: float | None = None,
    hf_models: Sequence[str] | None = None,
    wrap: Sequence[str] = (),
) -> int:
    """Run ``script`` (a Python file) in the site's runtime as :func:`reexec_in_runtime` runs a job's script again
    (``spec`` None: this Python, here), and return its exit status; stopped after ``timeout`` seconds (a ``wrap``
    gets the signals: with_answer_sandbox.sh passes them on only once its command ends)."""
    import tempfile

    from ptflow.cluster import hfview

    if not spec:
        return _run_forwarding_warning([sys.executable, script], dict(os.environ), timeout=timeout)
    job = spec
    rt = job.site_runtime
    check_runtime_tool(rt)
    python = rt.python if rt.is_container else "python"
    env = {**os.environ, IN_RUNTIME_ENV: "1", "HF_HUB_OFFLINE": "1"}
    binds = list(job.binds) + [os.getcwd(), package_root()]
    job_dir = tempfile.mkdtemp(prefix="ptflow-job-", dir=tmp_root or os.environ.get("TMPDIR"))
    view = None
    try:
        if rt.hf_view != "none" and job.hf_home:
            view = hfview.open_view(job.hf_home, Path(job_dir) / "hf_view", method=rt.hf_view, log=log,
                                    models=hf_models)  # fmt: skip
            env["HF_HOME"] = str(view.path)
        binds.append(job_dir)
        argv = runtime_argv(
            rt,
            [python, script],
            image=job.image,
            job_dir=job_dir,
            agent_cell=job.agent_cell,
            gpus=job.gpus,
            binds=sorted(set(binds)),
        )
        argv = [*wrap, *argv]
        log("run in site runtime: $ " + " ".join(argv))
        sys.stdout.flush()
        sys.stderr.flush()
        rc = _run_forwarding_warning(argv, container_env(rt, env), timeout=timeout)
    finally:
        if view is not None:
            hfview.close_view(view, log=log)
        shutil.rmtree(job_dir, ignore_errors=True)
    return rc


# Where a solve.sh may write: below stages, so that preflight (this layer) and the cell both ask the same question
def writes_under_home(script: str) -> bool:
    """Does a solve.sh name PostTrainBench's container home (``/home/ben/...``)? Its variants write their settings
    there (codexhigh: ``/home/ben/.codex/config.toml``; claude_non_api reads ``/home/ben/oauth_token``)."""
    return f"{CONTAINER_HOME}/" in script or script.rstrip().endswith(CONTAINER_HOME)


def home_problem(agent_id: str, solve: str, script: str, runtime_kind: str) -> str | None:
    """One line refusing a solve.sh that writes under /home/ben where the agent's home is not there (a venv site:
    the home is a host dir; enroot-edf: the EDF file fixes the mounts), else None."""
    if runtime_kind in HOME_BOUND or not writes_under_home(script):
        return None
    return (
        f"agent {agent_id}: solve: {solve} runs the checkout's agents/{solve}/solve.sh, which writes under "
        f"{CONTAINER_HOME} (PostTrainBench's container home), but on this site (runtime.kind {runtime_kind}) the "
        f"agent's home is a host directory, so its settings would be lost; run it on an apptainer or pyxis site, "
        f"or use a solve dir that does not write there"
    )
