"""The real agent CLIs for the tests, installed from the npm registry at the pinned versions ONCE and cached between
runs (``.venv/agent-clis/<cli>-<version>/``; ``PTFLOW_TEST_CLI_CACHE`` moves it). Concurrent test workers take a
file lock, so one installs and the others wait."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

from ptflow.config.agent_clis import CLI_PACKAGES

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("PTFLOW_TEST_CLI_CACHE", REPO / ".venv" / "agent-clis"))


def cli_bin_dir(name: str, version: str | None = None) -> Path:
    """The ``node_modules/.bin`` holding the real CLI ``name`` at ``version`` (default: its pin), installed if
    missing. Put it first on PATH to run the CLI as a cell would."""
    cli = CLI_PACKAGES[name]
    version = version or cli.pinned
    prefix = CACHE / f"{name}-{version}"
    binary = prefix / "node_modules" / ".bin" / cli.binary
    if binary.exists():
        return binary.parent
    if shutil.which("npm") is None:
        raise RuntimeError("the agent-CLI tests need node and npm (apt-get install nodejs npm; node >= 20)")
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not binary.exists():
            staging = prefix.with_name(prefix.name + ".partial")
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir(parents=True)
            subprocess.run(
                [
                    "npm",
                    "install",
                    "--no-audit",
                    "--no-fund",
                    "--loglevel=error",
                    "--prefix",
                    str(staging),
                    f"{cli.npm_package}@{version}",
                ],  # fmt: skip
                check=True,
                timeout=900,
            )
            staging.rename(prefix)  # whole or not at all
    return binary.parent
