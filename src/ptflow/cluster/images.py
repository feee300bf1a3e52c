"""Container images as files: their names, specs, cache keys and paths, for ``.sif`` (apptainer) and ``.sqsh`` (enroot).

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

How an image is built (the plan of a build and the ``image`` job that runs it) is ``ptflow.cluster.image_build``'s;
this module says which image a stage runs in, what defines it and where its file lies, which every rule and the
runtime ask without building anything.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path

from ptflow.config.sites import RuntimeSpec

CONTAINER_KINDS = ("apptainer", "enroot-edf", "pyxis")
SUFFIX = {"apptainer": "sif", "enroot-edf": "sqsh", "pyxis": "sqsh"}


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


# ---- a tool on PATH (the runtime's, ptflow.cluster.runtime, and a build's, ptflow.cluster.image_build) ----


def require_tool(tool: str, why: str, which=shutil.which) -> str:
    """The tool's path; else a :class:`MissingToolError` naming the site setting (``why``) that needs it."""
    path = which(tool)
    if not path:
        raise MissingToolError(
            f"{tool} not found on PATH, but {why}; load or install {tool} on the build/compute node "
            "(e.g. `module load`) or change that site setting"
        )
    return path


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
