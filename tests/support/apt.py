"""Debian packages a test needs and this kind of machine can install (root, package registries reachable): installed
by the test's fixture when missing, as the Slurm cluster's packages are (tests/support/local_slurm.py)."""

from __future__ import annotations

import os
import shutil
import subprocess


class AptError(RuntimeError):
    """The packages could not be installed."""


def ensure_tools(tools: dict[str, str]) -> None:
    """``tools``: executable -> the Debian package that provides it. apt-get installs the packages of the missing
    executables; raises AptError naming them when that cannot be done."""
    missing = sorted({pkg for tool, pkg in tools.items() if not shutil.which(tool)})
    if missing:
        install(missing, needed=list(tools))


def install(packages: list[str], needed: list[str]) -> None:
    """apt-get install ``packages`` (one ``apt-get update`` retry), then check that every executable of ``needed``
    is on PATH; raises AptError naming what is still missing."""
    if os.geteuid() != 0:
        raise AptError(f"needs {' '.join(packages)} (apt-get install -y {' '.join(packages)}, as root)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = ["apt-get", "install", "-y", "-q", *packages]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, text=True)
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    still = sorted(tool for tool in needed if not shutil.which(tool))
    if proc.returncode != 0 or still:
        raise AptError(f"{' '.join(cmd)} failed (still missing: {', '.join(still)}): {proc.stderr.strip()[-800:]}")
