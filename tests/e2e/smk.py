"""Running the workflow as a user does, from tests: the repo's Snakefile and profile, a temp working directory."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))


def default_agents(sft_steps: int) -> list[dict]:
    """The embedded default's agents with its sft agent trained ``sft_steps`` steps: for tests of the machinery,
    where what SFT learns is not under test (tests/e2e/test_default_matrix.py tests that on the default itself)."""
    agents = yaml.safe_load((REPO / "config" / "config.yaml").read_text())["agents"]
    return [{**a, "params": {**a["params"], "steps": sft_steps}} if a["id"] == "sft" else a for a in agents]


def command(workdir: Path, *args: str, profile: str = "profiles/local", snakefile: Path | None = None) -> list[str]:
    """The snakemake command line a user would type for this working directory."""
    return [
        SNAKEMAKE,
        "-s",
        str(snakefile or REPO / "Snakefile"),
        "--directory",
        str(workdir),
        "--profile",
        str(REPO / profile),
        *args,
    ]


def job_env(extra: dict | None = None) -> dict:
    """The environment of a test's Snakemake run: this checkout's root importable, so jobs can run the stand-ins
    that live under tests/support (``python -m tests.support.fake_judge``)."""
    env = {**os.environ, **(extra or {})}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return env


def snakemake(
    workdir: Path,
    *args: str,
    check: bool = True,
    env: dict | None = None,
    profile: str = "profiles/local",
    snakefile: Path | None = None,
) -> subprocess.CompletedProcess:
    cmd = command(workdir, *args, profile=profile, snakefile=snakefile)
    proc = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, env=job_env(env))
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}"
        )
    return proc


class Plan(dict):
    """rule -> set of output files of its planned jobs; ``text`` keeps the dry-run output for messages."""

    text = ""


def plan(workdir: Path, *args: str, **kw) -> Plan:
    """The dry-run plan: rule -> set of output files of its planned jobs."""
    out = snakemake(workdir, "--dry-run", *args, **kw)
    text = out.stdout + out.stderr
    jobs: Plan = Plan()
    jobs.text = text
    rule = None
    for line in text.splitlines():
        m = re.match(r"^(?:local)?rule (\w+):", line)
        if m:
            rule = m.group(1)
            jobs.setdefault(rule, set())
            continue
        m = re.match(r"^\s+output: (.*)$", line)
        if m and rule:
            jobs[rule].update(p.strip() for p in m.group(1).split(","))
    return jobs
