"""A job's private, writable view of the shared HF cache (PostTrainBench's HF_HOME handling).

The shared cache is read-only for jobs (many jobs read it at once; an agent must not damage it). Each job gets:

- ``overlay``: fuse-overlayfs with the shared cache as the read-only lower dir and a private upper dir on node-local
  disk — instant, writes stay private; needs a usable ``/dev/fuse`` and the ``fuse-overlayfs`` binary;
- ``copy``: otherwise a copy into node-local ``$TMPDIR`` (slower, works everywhere; symlinks kept, so the hub
  layout's snapshot -> blob links stay valid). ``models`` limits it to the model repos the job reads (an agent cell:
  its base model; an evaluation: its base or instruct model, none for a trained model, which is on scratch),
  everything else of the cache (datasets, tokenizers) is copied whole.

This copy is the one piece of staging that can still run inside a GPU allocation (downloads run in CPU cache jobs,
images in CPU image jobs, and runtime jobs get ``HF_HUB_OFFLINE=1``): the job's log says which method was used,
why, and for a copy how many bytes in how many seconds (``bench/staging_in_jobs.py`` measures it).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

METHODS = ("auto", "overlay", "copy")


@dataclass
class HFView:
    path: Path  # use as HF_HOME
    method: str  # overlay | copy
    reason: str
    lower: Path
    workdir: Path
    seconds: float = 0.0  # making it (a copy: the staging time spent in the job)
    bytes: int = 0  # copied


def fuse_problem(fuse_device: str | Path = "/dev/fuse", which=shutil.which) -> str | None:
    """Why fuse-overlayfs cannot be used here, or None when it can."""
    dev = Path(fuse_device)
    if not which("fuse-overlayfs"):
        return "fuse-overlayfs is not on PATH"
    if not dev.exists():
        return f"{dev} does not exist"
    if not stat.S_ISCHR(dev.stat().st_mode):
        return f"{dev} is not a character device"
    if not os.access(dev, os.R_OK | os.W_OK):
        return f"{dev} is not readable and writable by uid {os.geteuid()}"
    if not (which("fusermount3") or which("fusermount")):
        return "neither fusermount3 nor fusermount is on PATH (needed to unmount)"
    return None


def overlay_argv(lower: Path, upper: Path, work: Path, merged: Path) -> list[str]:
    return ["fuse-overlayfs", "-o", f"lowerdir={lower},upperdir={upper},workdir={work}", str(merged)]


def unmount_argv(merged: Path, which=shutil.which) -> list[str]:
    return [which("fusermount3") and "fusermount3" or "fusermount", "-u", str(merged)]


def open_view(
    shared: str | Path,
    workdir: str | Path,
    *,
    method: str = "auto",
    fuse_device: str | Path = "/dev/fuse",
    log=print,
    which=shutil.which,
    models: Iterable[str] | None = None,
) -> HFView:
    """Make the view under ``workdir`` (node-local); :func:`close_view` undoes it. ``models``: hub ids of the only
    model repos a copy takes (None: all)."""
    t0 = time.monotonic()
    if method not in METHODS:
        raise ValueError(f"hf view method must be one of {METHODS}, not {method!r}")
    lower, workdir = Path(shared).resolve(), Path(workdir)
    if not lower.is_dir():
        raise FileNotFoundError(f"shared HF cache {lower} does not exist; run the hf_cache rule (a CPU job) first")
    workdir.mkdir(parents=True, exist_ok=True)
    reason = fuse_problem(fuse_device, which) if method in ("auto", "overlay") else "runtime.hf_view = copy"
    if reason is None:
        upper, work, merged = workdir / "upper", workdir / "work", workdir / "hf_home"
        for d in (upper, work, merged):
            d.mkdir(parents=True, exist_ok=True)
        argv = overlay_argv(lower, upper, work, merged)
        log("$ " + " ".join(argv))
        proc = subprocess.run(argv, capture_output=True, text=True)
        if proc.returncode == 0:
            log(f"HF cache view: fuse-overlayfs over {lower} (read-only lower), private upper {upper}, at {merged}")
            return HFView(merged, "overlay", f"{fuse_device} usable", lower, workdir)
        reason = f"fuse-overlayfs failed (exit {proc.returncode}: {proc.stderr.strip()[:200]})"
        if method == "overlay":
            raise RuntimeError(f"HF cache view: runtime.hf_view = overlay but {reason}")
        shutil.rmtree(merged, ignore_errors=True)
    elif method == "overlay":
        raise RuntimeError(f"HF cache view: runtime.hf_view = overlay but {reason}; use auto or copy")
    dest = workdir / "hf_home"
    if dest.exists():
        shutil.rmtree(dest)
    ignore = None
    if models is not None:
        keep = {"models--" + m.replace("/", "--") for m in models}

        def ignore(directory, names):  # other model repos under hub/: not this job's
            return [n for n in names if n.startswith("models--") and n not in keep] if directory.endswith("hub") else []

    shutil.copytree(lower, dest, symlinks=True, ignore=ignore)
    size = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file() and not p.is_symlink())
    seconds = time.monotonic() - t0
    only = f" (model repos: {', '.join(sorted(models))})" if models is not None else ""
    log(
        f"HF cache view: copy of {lower}{only} into {dest}: {size / 2**20:.1f} MiB in {seconds:.1f} s of this job "
        f"(no overlay: {reason})"
    )
    return HFView(dest, "copy", reason, lower, workdir, seconds, size)


def close_view(view: HFView, log=print, which=shutil.which) -> None:
    if view.method == "overlay":
        argv = unmount_argv(view.path, which)
        log("$ " + " ".join(argv))
        if subprocess.run(argv, check=False).returncode != 0:
            log(f"HF cache view: could not unmount {view.path}; leaving {view.workdir} in place")
            return
    shutil.rmtree(view.workdir, ignore_errors=True)


@contextmanager
def hf_view(shared, workdir, **kwargs) -> Iterator[HFView]:
    view = open_view(shared, workdir, **kwargs)
    try:
        yield view
    finally:
        close_view(view, log=kwargs.get("log", print))
