"""THE place that turns a command into the site's way of running it (container runtime or venv).

``runtime_argv(site, command, ...)`` is the only function that knows about apptainer, pyxis, CSCS EDF or a
bare-metal venv; every other module hands it a plain argv and runs what comes back.

- ``apptainer``  : ``apptainer exec --nv [--bind …] <image.sif> cmd`` (PostTrainBench; agent cells add
  ``-c --writable-tmpfs --home <jobdir>:/home/agent`` so the agent sees only its job dir and what is bound)
- ``pyxis``      : ``srun --overlap --container-image=<image.sqsh> --container-mounts=/lustre,… cmd`` (TAO)
- ``enroot-edf`` : ``srun --overlap --environment=<image.toml> cmd`` (CSCS Alps; the EDF file holds image + mounts)
- ``venv``       : ``<venv>/bin/cmd`` when the site names a venv (absolute paths: JUWELS' srun shells have no PATH
  set up), else the command unchanged (the local default).

``--overlap``: inside a Snakemake Slurm job the rule body already runs in a step holding the job's CPUs; a second
step must share them or it waits forever.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from ptflow.cluster import images
from ptflow.jobenv import package_root

AGENT_HOME = "/home/agent"  # the agent cell's $HOME inside the container (its job dir on the host)
TOOL = {"apptainer": "apptainer", "pyxis": "srun", "enroot-edf": "srun"}


def _rt(site) -> dict:
    raw = site.raw if hasattr(site, "raw") else site
    return images.runtime_of(raw)


def _name(site) -> str:
    raw = site.raw if hasattr(site, "raw") else site
    return raw.get("name", "?")


def runtime_argv(
    site,
    command: Sequence[str],
    *,
    image: str | None = None,
    job_dir: str | None = None,
    agent_cell: bool = False,
    gpus: int | None = None,
    binds: Sequence[str] = (),
) -> list[str]:
    """argv that runs ``command`` through the site's runtime.

    ``image`` is the runtime's handle: the ``.sif`` (apptainer), the ``.sqsh`` (pyxis) or the EDF ``.toml``
    (enroot-edf). ``binds`` are extra host paths the command needs (job dir, HF cache view, checkpoints), mounted
    at the same place. ``gpus=0`` leaves GPUs out (``--nv``); ``None`` means the job's GPUs, if any.
    """
    rt = _rt(site)
    kind = rt["kind"]
    command = list(command)
    if not command:
        raise ValueError("runtime_argv: empty command")
    if kind == "venv":
        venv = rt.get("venv")
        if venv and "/" not in command[0]:
            return [str(Path(venv) / "bin" / command[0])] + command[1:]
        return command
    if not image:
        raise images.ImageError(
            f"site {_name(site)} runs commands in containers (runtime.kind = {kind}) but no image was given; "
            "name one under runtime.use for this stage or agent"
        )
    mounts = list(rt.get("mounts") or [])
    extra = [b for b in binds if b not in mounts]
    if kind == "apptainer":
        argv = ["apptainer", "exec"] + ([] if gpus == 0 else ["--nv"])
        if agent_cell:
            if not job_dir:
                raise ValueError("runtime_argv: an agent cell needs job_dir (its private $HOME)")
            argv += ["-c", "--writable-tmpfs", "--home", f"{job_dir}:{AGENT_HOME}"]
        for path in mounts + extra:
            argv += ["--bind", path]
        return argv + [image] + command
    if kind == "pyxis":
        argv = ["srun", "--overlap", "--ntasks=1", f"--container-image={image}"]
        if mounts + extra:
            argv.append("--container-mounts=" + ",".join(mounts + extra))
        if job_dir:
            argv.append(f"--container-workdir={job_dir}")
        return argv + command
    if kind == "enroot-edf":
        # The EDF file carries the image and the site's mounts: every path the job needs must lie under them.
        outside = [b for b in extra if not any(b == m or b.startswith(m.rstrip("/") + "/") for m in mounts)]
        if outside:
            raise images.ImageError(
                f"site {_name(site)} (runtime.kind enroot-edf): {', '.join(outside)} not under runtime.mounts "
                f"({', '.join(mounts) or 'none'}); add the filesystem to runtime.mounts (it goes into the EDF file)"
            )
        return ["srun", "--overlap", "--ntasks=1", f"--environment={image}"] + command
    raise ValueError(f"site {_name(site)}: unknown runtime.kind {kind!r}")


def check_runtime_tool(site, which=shutil.which) -> None:
    """The runtime's own tool must exist where jobs run; fail at once naming it and the setting."""
    kind = _rt(site)["kind"]
    if kind in TOOL:
        images.require_tool(TOOL[kind], f"site {_name(site)} sets runtime.kind = {kind}", which)
    venv = _rt(site).get("venv")
    if kind == "venv" and venv and not Path(venv, "bin", "python").exists():
        raise images.MissingToolError(
            f"{venv}/bin/python does not exist, but site {_name(site)} sets runtime.venv = {venv}; create the venv "
            "there or fix runtime.venv"
        )


def inside_runtime() -> bool:
    """True in the process a rule re-started inside the site's runtime (no second re-start)."""
    return os.environ.get("PTFLOW_IN_RUNTIME") == "1"


def reexec_in_runtime(spec: dict | None, log=print, script: str | None = None, tmp_root: str | None = None) -> None:
    """Run this job's script again through the site's runtime and exit with its status; return to stay here.

    ``spec`` is the rule's ``params.job["runtime"]`` (common.smk ``get_runtime_spec``): the site's runtime section,
    the image handle, whether this is an agent cell, the job's GPUs and the paths to bind. Nothing happens when it is
    None (the local default) or when this process already is the re-started one. The child gets a private HF cache
    view (``runtime.hf_view``) as HF_HOME and ``HF_HUB_OFFLINE=1``: a GPU job never downloads. API keys and tokens
    reach it through the environment only, never argv.
    """
    import subprocess
    import sys
    import tempfile

    from ptflow.cluster import hfview

    if not spec or inside_runtime():
        return
    site = spec["site"]
    rt = site["runtime"]
    script = script or sys.argv[0]
    if rt["kind"] == "venv" and Path(sys.prefix) == Path(rt["venv"]):
        return  # already the site venv's Python
    check_runtime_tool(site)
    python = rt.get("python", "python3") if rt["kind"] != "venv" else "python"
    env = {**os.environ, "PTFLOW_IN_RUNTIME": "1", "HF_HUB_OFFLINE": "1"}
    binds = list(spec.get("binds") or []) + [os.getcwd(), package_root()]
    job_dir = tempfile.mkdtemp(prefix="ptflow-job-", dir=tmp_root or os.environ.get("TMPDIR"))
    view = None
    method = rt.get("hf_view", "none")
    try:
        if method != "none" and spec.get("hf_home"):
            view = hfview.open_view(spec["hf_home"], Path(job_dir) / "hf_view", method=method, log=log)
            env["HF_HOME"] = str(view.path)
        binds.append(job_dir)
        argv = runtime_argv(
            site,
            [python, script],
            image=spec.get("image"),
            job_dir=job_dir,
            agent_cell=spec.get("agent_cell", False),
            gpus=spec.get("gpus"),
            binds=sorted(set(binds)),
        )
        log("run in site runtime: $ " + " ".join(argv))
        sys.stdout.flush()
        sys.stderr.flush()
        rc = subprocess.run(argv, env=env).returncode
    finally:
        if view is not None:
            hfview.close_view(view, log=log)
        shutil.rmtree(job_dir, ignore_errors=True)
    log(f"site runtime finished with exit {rc}")
    sys.exit(rc)
