"""Container images as files: build plans for ``.sif`` (apptainer) and ``.sqsh`` (enroot) images.

A site's ``runtime.images`` maps an image name to where it comes from:

- ``recipe: envs/<name>.def``         -> ``apptainer build [--fakeroot] <name>.sif <recipe>`` (PostTrainBench)
- ``recipe: envs/<name>.Dockerfile``  -> ``podman build`` then ``enroot import podman://...`` in ONE job, podman's
  storage in ``/dev/shm/$USER`` (CSCS Alps: that storage vanishes with the job); without enroot the same image is
  turned into the same kind of file with ``podman create/export`` + ``mksquashfs`` (what enroot does inside).
- ``source: <registry URI>``          -> ``enroot import -o <name>.sqsh docker://registry#image:tag`` (pyxis/TAO) or
  ``apptainer build <name>.sif docker://...``.

Names follow enroot's convention: an image ``ngc-ray:25.06`` is the file ``ngc-ray+25.06.sqsh`` and, on CSCS, the
EDF file ``edf/ngc-ray-25.06.toml`` (the Alps guide's names); a name without a tag is ``<name>.sqsh``.

Images are cached by name and recipe: :func:`image_digest` (recipe bytes, source, arch, builder) goes into the
rule's params, so Snakemake rebuilds an image only when its recipe changes. A ``:latest`` source is re-converted
only when ``runtime.force_reconvert_latest`` is set.

:func:`plan_build` turns an image into a :class:`BuildPlan` (files to write, argv lists to run, cleanup) without
running anything. :func:`run_build`, which the ``image`` rule's job calls, runs a plan: it checks the tools, runs each
step after logging its argv, and renames the image into place. A registry import runs under the plan's timeout in its
own process group; on a timeout the whole group is stopped (SIGTERM, then SIGKILL after 30 s), the partial file is
removed and the import is tried once more; a second timeout raises :class:`ImportTimeout`.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ptflow.config.sites import RuntimeSpec
from ptflow.jobenv import user_name

CONTAINER_KINDS = ("apptainer", "enroot-edf", "pyxis")
SUFFIX = {"apptainer": "sif", "enroot-edf": "sqsh", "pyxis": "sqsh"}
MACHINE_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
# enroot's own default squash options are "-comp lzo -noD"; gzip is readable by every squashfs reader.
MKSQUASHFS_OPTS = ["-noappend", "-all-root", "-comp", "gzip", "-no-progress"]


class ImageError(RuntimeError):
    """An image cannot be planned or built; the message names the setting and what to do."""


class MissingToolError(ImageError):
    """A tool the site's runtime needs is not on PATH."""


def image_stem(name: str) -> str:
    """File name (no suffix) of image ``name``: ``ngc-ray:25.06`` -> ``ngc-ray+25.06`` (enroot's ``name+tag``)."""
    return name.replace(":", "+")


def edf_stem(name: str) -> str:
    """EDF file name (no suffix): ``ngc-ray-vllm:v0.10.2`` -> ``ngc-ray-vllm-v0.10.2`` (the Alps guide's env/ names)."""
    return name.replace(":", "-")


def name_of(rt: RuntimeSpec, stem: str, *, edf: bool = False) -> str:
    """The image name behind a file stem of rule ``image`` (or ``edf``)."""
    for name in rt.images:
        if (edf_stem(name) if edf else image_stem(name)) == stem:
            return name
    raise ImageError(
        f"site {rt.site}: no image under runtime.images is stored as {stem!r} "
        f"(known: {', '.join(sorted(rt.images)) or 'none'})"
    )


def podman_tag(name: str, user: str, digest: str) -> str:
    """``localhost/<user>/<name>:<tag>`` as the Alps guide tags its builds (the digest where the name has no tag)."""
    repo, _, tag = name.partition(":")
    return f"localhost/{user}/{repo}:{tag or digest}"


def needs_images(rt: RuntimeSpec) -> bool:
    return rt.kind in CONTAINER_KINDS


def image_suffix(rt: RuntimeSpec) -> str:
    kind = rt.kind
    if kind not in SUFFIX:
        raise ImageError(f"site runtime.kind = {kind!r} runs no container image; images need apptainer/enroot/pyxis")
    return SUFFIX[kind]


def images_dir(rt: RuntimeSpec) -> str:
    return str(rt.images_dir)


def image_spec(rt: RuntimeSpec, name: str) -> dict:
    images = rt.images
    if name not in images:
        raise ImageError(
            f"site {rt.site}: image {name!r} is not under runtime.images "
            f"(known: {', '.join(sorted(images)) or 'none'}); add it with a recipe or a source URI"
        )
    spec = images[name]
    if bool(spec.get("recipe")) == bool(spec.get("source")):
        raise ImageError(
            f"site {rt.site} runtime.images.{name}: give exactly one of recipe (envs/...) or source (a registry URI)"
        )
    return spec


def image_request(rt: RuntimeSpec, stem: str) -> str:
    """The site request an ``image`` job gets: registry imports ``convert`` (TAO's conversion
    partition), builds ``image``; the rule (common.smk) and ``ptflow plan`` both ask here."""
    return "convert" if image_spec(rt, name_of(rt, stem)).get("source") else "image"


def image_runtime(rt: RuntimeSpec, name: str, spec: dict | None = None) -> RuntimeSpec:
    """What defines image ``name`` on a site (its spec, the runtime kind, arch and build settings) and nothing else,
    so an unrelated edit of the site file does not rebuild it. ``spec``: the image's spec where the workflow resolves
    it otherwise (a recipe of the PostTrainBench checkout)."""
    spec = image_spec(rt, name) if spec is None else spec
    return RuntimeSpec(site=rt.site, kind=rt.kind, arch=rt.arch, build=rt.build, images={name: spec})


def image_for(rt: RuntimeSpec, stage: str, agent=None) -> str | None:
    """Which image a stage (and, for train, an agent) runs in: ``runtime.use`` by agent id, kind, then stage.

    None on venv sites: the local default needs no image at all.
    """
    if not needs_images(rt):
        return None
    use = rt.use
    keys = ([agent.id, agent.kind] if agent is not None and stage == "train" else []) + [stage]
    for key in keys:
        if key in use:
            return use[key]
    return None


# ---- registry URIs (pyxis/enroot form) ----


def enroot_uri(source: str) -> str:
    """``docker://registry#image:tag`` (enroot/pyxis form) from the forms TAO accepts.

    ``registry#image:tag``, ``docker://registry#image:tag`` and a plain ``registry/image:tag`` (its first part is a
    registry when it holds a dot, a colon or is ``localhost``); a bare ``image:tag`` is a Docker Hub image.
    """
    if source.startswith("docker://") or source.startswith("podman://") or source.startswith("dockerd://"):
        return source
    if "#" in source:
        return f"docker://{source}"
    first, _, rest = source.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return f"docker://{first}#{rest}"
    return f"docker://{source}"


def is_latest(source: str) -> bool:
    """A source that names no fixed version: tag ``latest`` or no tag (and no digest)."""
    ref = source.split("://", 1)[-1].replace("#", "/")
    if "@sha256:" in ref:
        return False
    last = ref.rsplit("/", 1)[-1]
    return ":" not in last or last.rsplit(":", 1)[1] == "latest"


# ---- cache key ----


def builder_of(rt: RuntimeSpec, spec: dict) -> str:
    """apptainer-def | apptainer-uri | podman (Dockerfile -> sqsh) | enroot-uri."""
    suffix = image_suffix(rt)
    if spec.get("recipe"):
        recipe = str(spec["recipe"])
        is_def = recipe.endswith(".def")
        if suffix == "sif":
            if not is_def:
                raise ImageError(
                    f"site {rt.site} builds .sif images (runtime.kind apptainer) but recipe {recipe!r} "
                    "is not an apptainer .def file; give a .def recipe or a docker:// source"
                )
            return "apptainer-def"
        if is_def:
            raise ImageError(
                f"site {rt.site} builds .sqsh images (runtime.kind {rt.kind}) but "
                f"recipe {recipe!r} is an apptainer .def; give a Dockerfile recipe or a registry source"
            )
        return "podman"
    return "apptainer-uri" if suffix == "sif" else "enroot-uri"


_DEF_ARGUMENT = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=")
_DOCKER_ARG = re.compile(r"^\s*ARG\s+([A-Za-z_][A-Za-z0-9_]*)", re.IGNORECASE)


def declared_build_args(recipe: str | Path) -> list[str]:
    """The build arguments a recipe declares: an apptainer ``.def``'s ``%arguments`` section (apptainer >= 1.2,
    used as ``{{ NAME }}``) or a Dockerfile's ``ARG NAME`` lines."""
    text = Path(recipe).read_text(errors="replace").splitlines()
    if str(recipe).endswith(".def"):
        names, inside = [], False
        for line in text:
            if line.startswith("%"):
                inside = line.split()[0] == "%arguments"
            elif inside and (m := _DEF_ARGUMENT.match(line)):
                names.append(m.group(1))
        return names
    return [m.group(1) for line in text if (m := _DOCKER_ARG.match(line))]


def build_args_for(spec: dict, values: dict[str, str], recipe_root: str | Path = ".") -> dict[str, str]:
    """The build arguments ptflow passes to this image's recipe: those of ``values`` (the agent CLIs' pins and the
    agent image's Node.js, ``Config.image_build_args``) that the recipe declares, plus the site's own
    ``runtime.images.<name>.build_args``."""
    declared = declared_build_args(Path(recipe_root) / spec["recipe"]) if spec.get("recipe") else []
    own = {str(k): str(v) for k, v in (spec.get("build_args") or {}).items()}
    return {**{k: str(values[k]) for k in declared if k in values}, **own}


def image_digest(
    rt: RuntimeSpec, name: str, spec: dict, recipe_root: str | Path = ".", build_args: dict | None = None
) -> str:
    """Hash of what defines an image: recipe bytes (or source URI), build arguments, arch and builder. A new value
    rebuilds it."""
    h = hashlib.sha256()
    meta = {"name": name, "arch": rt.arch, "builder": builder_of(rt, spec), "source": spec.get("source")}
    if build_args:  # only when there are some: other images keep their digests
        meta["build_args"] = dict(sorted(build_args.items()))
    h.update(json.dumps(meta, sort_keys=True).encode())
    if spec.get("recipe_object"):  # a recipe of the PostTrainBench checkout: its git object id says its bytes
        h.update(spec["recipe_object"].encode())
    elif spec.get("recipe"):
        recipe = Path(recipe_root) / spec["recipe"]
        if not recipe.is_file():
            raise ImageError(
                f"site {rt.site} runtime.images.{name}.recipe: {str(recipe)!r} does not exist; "
                "fix the path (relative to the workflow directory)"
            )
        h.update(recipe.read_bytes())
    return h.hexdigest()[:16]


def reconvert_token(rt: RuntimeSpec, spec: dict, run_token: str) -> str | None:
    """A value that changes every run only for ``:latest`` sources under ``force_reconvert_latest``."""
    if spec.get("source") and is_latest(spec["source"]) and rt.force_reconvert_latest:
        return run_token
    return None


# ---- tools ----


def require_tool(tool: str, why: str, which=shutil.which) -> str:
    path = which(tool)
    if not path:
        raise MissingToolError(
            f"{tool} not found on PATH, but {why}; load or install {tool} on the build/compute node "
            "(e.g. `module load`) or change that site setting"
        )
    return path


def check_arch(rt: RuntimeSpec, machine: str | None = None) -> None:
    """Images are built natively: an arm64 site (Alps) must build on its arm64 nodes, never under emulation."""
    want = rt.arch
    have = MACHINE_ARCH.get((machine or platform.machine()).lower(), machine or platform.machine())
    if want and want != have:
        raise ImageError(
            f"site {rt.site} runtime.arch = {want!r} but this build node is {have}; run the image rule "
            f"on the site's {want} nodes (resources.image) — most public images are amd64 only, so {want} rebuilds"
        )


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
        return BuildPlan(
            name,
            builder,
            output,
            tmp,
            [argv],
            tools={"apptainer": _why(rt, kind_setting)},
            # a checkout's recipe names its files relative to the checkout's root (%files containers/...)
            cwd=str(spec.get("build_dir") or recipe_root),
            import_timeout=timeout,
            source=spec.get("source"),
        )

    if builder == "enroot-uri":
        argv = ["enroot", "import", "-o", str(tmp), enroot_uri(spec["source"])]
        return BuildPlan(
            name,
            builder,
            output,
            tmp,
            [argv],
            tools={"enroot": _why(rt, kind_setting)},
            import_timeout=timeout,
            source=spec["source"],
        )
    return _podman_plan(rt, name, output, digest, Path(recipe_root), Path(workdir), build_args, job)


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


# ---- paths and what train/evaluate need ----


def image_path(rt: RuntimeSpec, name: str) -> str:
    return f"{images_dir(rt)}/{image_stem(name)}.{image_suffix(rt)}"


def edf_path(rt: RuntimeSpec, name: str) -> str:
    return f"{images_dir(rt)}/edf/{edf_stem(name)}.toml"


def image_inputs(rt: RuntimeSpec, name: str | None) -> dict[str, str]:
    """Files a rule running in image ``name`` depends on (none when it runs without one)."""
    if not name:
        return {}
    image_spec(rt, name)  # unknown names fail here, at DAG time, with the list of known ones
    out = {"image": image_path(rt, name)}
    if rt.kind == "enroot-edf":
        out["edf"] = edf_path(rt, name)
    return out


def runtime_handle(rt: RuntimeSpec, name: str) -> str:
    """What the runtime is given: the EDF file on enroot-edf sites, else the image file (absolute)."""
    files = image_inputs(rt, name)
    return os.path.abspath(files.get("edf", files["image"]))


# ---- CSCS EDF ----


def render_edf(
    name: str, image: str | Path, mounts: list[str], toml_path: str | Path, *, workdir=None, env=None, template=None
) -> str:
    """The EDF TOML for ``image`` with the site's mounts; parsed back with tomllib before it is returned."""
    import tomllib

    from ptflow import templates

    source = Path(template).read_text() if template else templates.path("edf.toml.j2").read_text()
    text = (
        templates.environment()
        .from_string(source)
        .render(
            name=name,
            image=str(Path(image).resolve()),
            mounts=list(mounts),
            toml_path=str(toml_path),
            workdir=workdir,
            env=env or {},
        )
    )
    parsed = tomllib.loads(text)  # a template bug must fail here, not in srun on the cluster
    if parsed["image"] != str(Path(image).resolve()):
        raise ImageError(f"EDF for {name}: rendered image {parsed['image']!r} is not {image!r}")
    return text
