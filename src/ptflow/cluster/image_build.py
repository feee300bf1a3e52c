"""Building a container image: the plan of a build, and the ``image`` job that runs it.

:func:`plan_build` turns an image (``ptflow.cluster.images``: its spec, builder and digest) into a :class:`BuildPlan`
(files to write, argv lists to run, cleanup) without running anything:

- a ``.def`` recipe or a registry source on an apptainer site: ``apptainer build [--fakeroot] <name>.sif <src>``;
- a registry source on an enroot site: ``enroot import -o <name>.sqsh docker://registry#image:tag``;
- a Dockerfile recipe: ``podman build``, then ``enroot import podman://...`` in ONE job, podman's storage in
  ``/dev/shm/$USER`` (CSCS Alps: that storage vanishes with the job); without enroot the same image is turned into the
  same kind of file with ``podman create/export`` + ``mksquashfs`` (what enroot does inside).

:func:`run_build`, which the ``image`` rule's job calls, runs a plan: it checks the tools, runs each step after
logging its argv, and renames the image into place. A registry import runs under the plan's timeout in its own
process group; on a timeout the whole group is stopped (SIGTERM, then SIGKILL after 30 s), the partial file is
removed and the import is tried once more; a second timeout raises :class:`ImportTimeout`.
"""

from __future__ import annotations

import os
import platform
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ptflow.cluster.images import ImageError, builder_of, enroot_uri, image_spec, image_stem, require_tool
from ptflow.config.sites import RuntimeSpec
from ptflow.jobenv import user_name

MACHINE_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
# enroot's own default squash options are "-comp lzo -noD"; gzip is readable by every squashfs reader.
MKSQUASHFS_OPTS = ["-noappend", "-all-root", "-comp", "gzip", "-no-progress"]


def check_arch(rt: RuntimeSpec, machine: str | None = None) -> None:
    """Images are built natively: an arm64 site (Alps) must build on its arm64 nodes, never under emulation."""
    want = rt.arch
    have = MACHINE_ARCH.get((machine or platform.machine()).lower(), machine or platform.machine())
    if want and want != have:
        raise ImageError(
            f"site {rt.site} runtime.arch = {want!r} but this build node is {have}; run the image rule "
            f"on the site's {want} nodes (resources.image) — most public images are amd64 only, so {want} rebuilds"
        )


def podman_tag(name: str, user: str, digest: str) -> str:
    """``localhost/<user>/<name>:<tag>`` as the Alps guide tags its builds (the digest where the name has no tag)."""
    repo, _, tag = name.partition(":")
    return f"localhost/{user}/{repo}:{tag or digest}"


# ---- build plans ----


@dataclass
class BuildPlan:
    name: str
    builder: str
    output: Path
    tmp_output: Path  # built here, then renamed onto output (a failed build leaves no image)
    steps: list[list[str]]
    cleanup: list[list[str]] = field(default_factory=list)  # always run, errors ignored
    env: dict[str, str] = field(default_factory=dict)  # added to the environment of every step
    files: dict[str, str] = field(default_factory=dict)  # written before the steps (storage.conf)
    extract: tuple[Path, Path] | None = None  # (tar, dir): unpack between steps (mksquashfs route)
    tools: dict[str, str] = field(default_factory=dict)  # tool -> why it is needed (for the error message)
    cwd: str | None = None  # apptainer resolves %files relative to it
    import_timeout: float | None = None  # seconds: a registry import taking longer is stopped and retried once
    source: str | None = None  # the registry URI of an import (for messages)

    def record(self) -> dict:
        return {"name": self.name, "builder": self.builder, "output": str(self.output), "steps": self.steps}


def _why(rt: RuntimeSpec, setting: str) -> str:
    return f"site {rt.site} sets {setting}"


def podman_storage_conf(storage: str | Path, additional_stores: list[str] = ()) -> str:
    """storage.conf for podman in node-local memory (Alps: /users is not writable by rootless podman)."""
    text = f'[storage]\ndriver = "overlay"\nrunroot = "{storage}/runroot"\ngraphroot = "{storage}/root"\n'
    if additional_stores:
        text += "[storage.options]\nadditionalimagestores = [" + ", ".join(f'"{s}"' for s in additional_stores) + "]\n"
    return text


@dataclass(frozen=True)
class BuildJob:
    """The job an image is built in, as a build plan needs it: the tools on its PATH (``which``), its user (uid and
    name: rootless podman and apptainer's fakeroot) and its time limit in minutes (sizes the timeout of a registry
    import where the site sets none). Left out: this process's own."""

    which: Callable[[str], str | None] = shutil.which
    euid: int | None = None
    user: str | None = None
    minutes: float | None = None


def plan_build(
    rt: RuntimeSpec,
    name: str,
    output: str | Path,
    *,
    digest: str,
    recipe_root: str | Path = ".",
    workdir: str | Path,
    build_args: dict[str, str] | None = None,
    job: BuildJob = BuildJob(),
) -> BuildPlan:
    """The commands that make ``output`` for image ``name`` on this site. ``workdir`` holds the job's scratch."""
    spec = image_spec(rt, name)
    builder = builder_of(rt, spec)
    output = Path(output)
    tmp = _tmp_of(output)
    kind_setting = f"runtime.kind = {rt.kind} and runtime.images.{name}"

    timeout = None
    if spec.get("source"):
        share = IMPORT_TIMEOUT_SHARE * job.minutes if job.minutes else None
        minutes = rt.build.get("import_timeout_minutes") or share
        timeout = float(minutes) * 60 if minutes else None

    if builder in ("apptainer-def", "apptainer-uri"):
        fakeroot = rt.build.get("fakeroot", _euid(job) != 0) and builder == "apptainer-def"
        src = str(Path(recipe_root) / spec["recipe"]) if builder == "apptainer-def" else _apptainer_uri(spec["source"])
        args = [f"--build-arg={k}={v}" for k, v in sorted((build_args or {}).items())]
        argv = ["apptainer", "build"] + (["--fakeroot"] if fakeroot else []) + args + [str(tmp), src]
        # a checkout's recipe names its files relative to the checkout's root (%files containers/...)
        tool, cwd = "apptainer", str(spec.get("build_dir") or recipe_root)
    elif builder == "enroot-uri":
        argv = ["enroot", "import", "-o", str(tmp), enroot_uri(spec["source"])]
        tool, cwd = "enroot", None
    else:
        return _podman_plan(rt, name, output, digest, Path(recipe_root), Path(workdir), build_args, job)
    return BuildPlan(
        name,
        builder,
        output,
        tmp,
        [argv],
        tools={tool: _why(rt, kind_setting)},
        cwd=cwd,
        import_timeout=timeout,
        source=spec.get("source"),
    )


def _tmp_of(output: Path) -> Path:
    """Where a build writes before its output is complete: beside it, and not existing yet (enroot refuses)."""
    return output.with_name(f".{output.stem}.{os.getpid()}.tmp{output.suffix}")


def _euid(job: BuildJob) -> int:
    return os.geteuid() if job.euid is None else job.euid


def _podman_plan(
    rt: RuntimeSpec,
    name: str,
    output: Path,
    digest: str,
    recipe_root: Path,
    workdir: Path,
    build_args: dict[str, str] | None,
    job: BuildJob,
) -> BuildPlan:
    """podman build + conversion, in one job: podman's storage lives in /dev/shm and dies with the job."""
    spec, build, tmp = image_spec(rt, name), rt.build, _tmp_of(output)
    kind_setting = f"runtime.kind = {rt.kind} and runtime.images.{name}"
    user = job.user or user_name()
    storage = Path(str(build.get("podman_storage") or f"/dev/shm/{user}")) / f"ptflow-{image_stem(name)}-{os.getpid()}"
    conf = workdir / "storage.conf"
    tag = podman_tag(name, user, digest)
    recipe = recipe_root / spec["recipe"]
    context = recipe_root / spec.get("context", str(Path(spec["recipe"]).parent))
    arch = rt.arch
    build_argv = ["podman", "build"] + list(build.get("podman_args") or [])
    build_argv += [f"--platform=linux/{arch}"] if arch else []
    build_argv += [f"--build-arg={k}={v}" for k, v in sorted((build_args or {}).items())]
    build_argv += ["-f", str(recipe), "-t", tag, str(context)]
    tools = {"podman": _why(rt, f"{kind_setting}.recipe = {spec['recipe']} (a Dockerfile, built with podman)")}
    converter = build.get("converter", "auto")
    if converter == "auto":
        converter = "enroot" if job.which("enroot") else "mksquashfs"
    plan = BuildPlan(name, f"podman+{converter}", output, tmp, [build_argv], env={"CONTAINERS_STORAGE_CONF": str(conf)})
    plan.files[str(conf)] = podman_storage_conf(storage, build.get("additional_image_stores") or [])
    plan.tools = tools
    if converter == "enroot":
        plan.steps.append(["enroot", "import", "-x", "mount", "-o", str(tmp), f"podman://{tag}"])
        plan.tools["enroot"] = _why(rt, "runtime.build.converter = enroot")
    else:
        cname = f"ptflow-export-{image_stem(name)}-{os.getpid()}"
        tar, rootfs = workdir / "rootfs.tar", workdir / "rootfs"
        plan.steps += [
            ["podman", "create", "--name", cname, tag, "/bin/sh"],
            ["podman", "export", "-o", str(tar), cname],
            ["podman", "rm", "-f", cname],
            ["mksquashfs", str(rootfs), str(tmp)] + MKSQUASHFS_OPTS,
        ]
        plan.extract = (tar, rootfs)
        plan.cleanup.append(["podman", "rm", "-f", cname])
        plan.tools["mksquashfs"] = _why(
            rt, f"{kind_setting} (no enroot on PATH: podman export + mksquashfs make the same .sqsh)"
        )
    plan.cleanup.append(["podman", "rmi", "-f", tag])
    # Rootless podman's files belong to sub-uids: only `podman unshare` can remove them.
    remove = ["rm", "-rf", str(storage)]
    plan.cleanup.append(remove if _euid(job) == 0 else ["podman", "unshare", *remove])
    return plan


def _apptainer_uri(source: str) -> str:
    if "://" in source and not source.startswith("docker://"):
        return source
    uri = enroot_uri(source)  # docker://registry#image:tag -> apptainer wants docker://registry/image:tag
    return uri.replace("#", "/", 1)


def check_tools(plan: BuildPlan, which=shutil.which) -> None:
    """Fail at once, before any step runs, naming the missing tool and the site setting that chose it."""
    for tool, why in plan.tools.items():
        require_tool(tool, why, which)


# ---- running a plan (the image job) ----


# Share of the job's time limit one registry import may take: two tries (the first and its one retry) fit.
IMPORT_TIMEOUT_SHARE = 0.4


class ImportTimeout(ImageError):
    """A registry import (``.sqsh`` conversion) took longer than its timeout, twice."""


def _run(argv: list[str], env: dict, log, check: bool = True, cwd: str | None = None, timeout=None) -> int:
    import subprocess

    log("$ " + " ".join(argv))
    proc = subprocess.Popen(argv, env=env, cwd=cwd, start_new_session=timeout is not None)
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        import signal

        os.killpg(proc.pid, signal.SIGTERM)  # the tool and what it started (enroot runs curl, mksquashfs ...)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        raise
    if check and rc != 0:
        raise ImageError(f"image build step failed with exit {rc}: {' '.join(argv)} (output above)")
    return rc


def _import_with_retry(plan: BuildPlan, argv: list[str], env: dict, log) -> None:
    """A registry import under ``plan.import_timeout``: on a timeout, a clear message, the partial file removed, and
    one more try; a second timeout is an :class:`ImportTimeout` naming the settings to change."""
    import subprocess

    minutes = plan.import_timeout / 60
    for attempt in (1, 2):
        try:
            _run(argv, env, log, cwd=plan.cwd, timeout=plan.import_timeout)
            return
        except subprocess.TimeoutExpired:
            plan.tmp_output.unlink(missing_ok=True)
            log(
                f"image {plan.name}: converting {plan.source} did not finish within {minutes:g} min "
                f"(try {attempt} of 2){'; trying once more' if attempt == 1 else ''}"
            )
    raise ImportTimeout(
        f"image {plan.name}: converting {plan.source} to {plan.output.name} timed out twice ({minutes:g} min each); "
        "the registry or the network is slow: raise runtime.build.import_timeout_minutes and "
        "resources.convert.runtime, or convert on a partition with better registry access (resources.convert.partition)"
    )


def _extract(tar: Path, dest: Path, env: dict, log) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    _run(["tar", "-C", str(dest), "-xf", str(tar)], env, log)


def run_build(plan: BuildPlan, record_path: str | Path | None = None, extra_record: dict | None = None, log=print):
    """Run a plan: check tools, write its files, run its steps, rename the image into place, write the record."""
    import time

    from ptflow.files import write_json_atomic

    check_tools(plan)
    env = {**os.environ, **plan.env}
    for path, text in plan.files.items():
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)
        log(f"wrote {path}:\n{text.rstrip()}")
    plan.output.parent.mkdir(parents=True, exist_ok=True)
    start = time.time()
    try:
        for argv in plan.steps:
            if plan.extract and argv[0] == "mksquashfs":
                _extract(*plan.extract, env, log)
            if plan.import_timeout and plan.source:
                _import_with_retry(plan, argv, env, log)
            else:
                _run(argv, env, log, cwd=plan.cwd)
        if not plan.tmp_output.is_file():
            raise ImageError(f"image build finished but wrote no {plan.tmp_output}")
        os.replace(plan.tmp_output, plan.output)
    finally:
        for argv in plan.cleanup:
            _run(argv, env, log, check=False)
        if plan.tmp_output.exists():
            plan.tmp_output.unlink()
        if plan.extract:
            shutil.rmtree(plan.extract[1], ignore_errors=True)
            plan.extract[0].unlink(missing_ok=True)
    record = {
        **plan.record(),
        **(extra_record or {}),
        "bytes": plan.output.stat().st_size,
        "seconds": round(time.time() - start, 1),
    }
    if record_path:
        write_json_atomic(record_path, record)
    log(f"image {plan.name}: {plan.output} ({record['bytes']} bytes, {record['seconds']} s, {plan.builder})")
    return record
