"""Software environments as rule outputs (rule ``env``), built in a CPU job before any train job needs them.

A site lists them under ``runtime.envs``; each names the agent kinds/ids whose train jobs use it (``for``):

- ``overlay-venv`` — the Alps guide's step 8: inside the site's container (``image``),
  ``python3 -m venv --system-site-packages <path>`` (the image's torch, vLLM and Ray stay visible) and
  ``<path>/bin/pip install --no-build-isolation -e <checkout>`` (verl from its checkout, built against the image's
  torch); a ``ray`` entry point is added to the venv when the image has Ray, so Ray's nodes and workers run with the
  venv's Python and import verl. verl jobs then run ``<path>/bin/python`` / ``<path>/bin/ray``.
- ``uv-sync`` — the NeMo-RL plan's step 2: ``uv sync --extra fsdp --extra vllm`` in the checkout (with the plan's
  ``NRL_FORCE_REBUILD_VENVS=true``), on bare metal.

Both end with the import check (``check``: ``verl``; ``torch, ray, vllm``), and the rule's output is a record of
what was run and what the check printed. Everything here builds command lines; :func:`build` runs them.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ptflow.cluster import images
from ptflow.cluster.runtime import runtime_argv
from ptflow.config.sites import RuntimeSpec
from ptflow.jobenv import CLEAN_BASH, clean_shell_env

BUILDS = ("overlay-venv", "uv-sync")


class EnvError(RuntimeError):
    """An environment cannot be planned or built; the message names the setting and what to do."""


def env_spec(rt: RuntimeSpec, name: str) -> dict:
    if name not in rt.envs:
        raise EnvError(f"site {rt.site}: no environment {name!r} under runtime.envs (known: {', '.join(rt.envs)})")
    spec = rt.envs[name]
    need = {"overlay-venv": ("path", "checkout"), "uv-sync": ("checkout",)}[spec["build"]]
    if spec["build"] == "overlay-venv" and images.needs_images(rt):
        need = ("image", *need)  # on bare metal the site's venv (or this Python) is what the venv sits on
    missing = [k for k in need if not spec.get(k)]
    if missing:
        raise EnvError(f"site {rt.site} runtime.envs.{name} (build {spec['build']}) needs {', '.join(missing)}")
    if spec["build"] == "overlay-venv" and images.needs_images(rt):
        images.image_spec(rt, spec["image"])  # an unknown image fails here, naming the known ones
    return spec


def envs_for(rt: RuntimeSpec, agent) -> list[str]:
    """Names of the environments an agent's train job needs (``for`` names its id or kind)."""
    if agent is None:
        return []
    return sorted(n for n, spec in rt.envs.items() if {agent.id, agent.kind} & set(spec.get("for", [])))


def overlay_venv(rt: RuntimeSpec, agent) -> dict | None:
    """The overlay venv an agent's train job runs with: {path, checkout}, or None."""
    for name in envs_for(rt, agent):
        spec = rt.envs[name]
        if spec["build"] == "overlay-venv":
            return {"venv": spec["path"], "checkout": spec["checkout"]}
    return None


def _check_code(modules: list[str]) -> str:
    """``import a, b`` and print where each came from (the record shows which verl was imported)."""
    lines = [
        f"import {m}; print({m!r}, getattr({m}, '__version__', ''), getattr({m}, '__file__', ''))" for m in modules
    ]
    return "; ".join(lines) + "; print('OK')"


RAY_ENTRY = """#!{python}
import sys
from ray.scripts.scripts import main
sys.exit(main())
"""


@dataclass
class EnvPlan:
    name: str
    build: str
    argv: list[str]  # one command (a clean bash running the script, through the site's runtime)
    script: str
    env: dict[str, str]
    cwd: str | None = None

    def record(self) -> dict:
        return {"name": self.name, "build": self.build, "argv": self.argv, "script": self.script}


def overlay_script(path: str, checkout: str, python: str, check: list[str]) -> str:
    venv_python = f"{path}/bin/python"
    entry = RAY_ENTRY.format(python=venv_python)
    q = shlex.quote
    return "\n".join(
        [
            "set -euo pipefail",
            f"{q(python)} -m venv --system-site-packages {q(path)}",
            f"{q(venv_python)} -m pip install --no-build-isolation -e {q(checkout)}",
            # Ray from the image: an entry point in the venv, so `ray start` (and every Ray worker) uses this Python
            f"if {q(venv_python)} -c 'import ray' 2>/dev/null; then",
            f"  printf '%s' {q(entry)} > {q(path + '/bin/ray')} && chmod +x {q(path + '/bin/ray')}",
            "fi",
            f"{q(venv_python)} -c {q(_check_code(check))}" if check else "true",
        ]
    )


def uv_script(checkout: str, uv: str, extras: list[str], check: list[str]) -> str:
    q = shlex.quote
    sync = [uv, "sync"] + [a for e in extras for a in ("--extra", e)]
    return "\n".join(
        [
            "set -euo pipefail",
            f"cd {q(checkout)}",
            shlex.join(sync),
            f"{shlex.join([uv, 'run', 'python', '-c', _check_code(check)])}" if check else "true",
        ]
    )


def find_uv(checkout: str, which=shutil.which) -> str:
    """uv on PATH, else where its installer puts it (~/.local/bin/uv, ~/.cargo/bin/uv)."""
    found = which("uv")
    for candidate in (found, os.path.expanduser("~/.local/bin/uv"), os.path.expanduser("~/.cargo/bin/uv")):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise EnvError(
        f"uv not found (PATH, ~/.local/bin, ~/.cargo/bin), but the NeMo-RL environment in {checkout} is built with "
        "`uv sync`; install it once on the cluster (pip install --user uv, or uv's installer) and rerun"
    )


def plan_env(rt: RuntimeSpec, name: str, *, which=shutil.which) -> EnvPlan:
    spec = env_spec(rt, name)
    check = list(spec.get("check") or [])
    env = dict(spec.get("env") or {})
    if spec["build"] == "overlay-venv":
        if images.needs_images(rt):
            python = rt.python
            handle = images.runtime_handle(rt, spec["image"])
        else:  # a bare-metal site (and the test cluster): the site venv's (or this) Python is the "image"
            python = f"{rt.venv}/bin/python" if rt.venv else sys.executable
            handle = None
        script = overlay_script(spec["path"], spec["checkout"], python, check)
        argv = [*CLEAN_BASH, "-c", script]
        if handle:
            binds = sorted({str(Path(spec["path"]).parent), spec["checkout"]})
            argv = runtime_argv(rt, argv, image=handle, gpus=0, binds=binds)
        return EnvPlan(name, spec["build"], argv, script, env)
    uv = find_uv(spec["checkout"], which)
    script = uv_script(spec["checkout"], uv, list(spec.get("extras") or []), check)
    return EnvPlan(name, spec["build"], [*CLEAN_BASH, "-c", script], script, env, cwd=spec["checkout"])


def build(plan: EnvPlan, record_path: str | Path, log=print) -> dict:
    """Run the plan (its output into the rule log), then write the record atomically. Raises EnvError on failure."""
    from ptflow.files import write_json_atomic

    env = {**clean_shell_env(), **plan.env}
    env.pop("VIRTUAL_ENV", None)  # uv and pip must not mistake the job's own venv for the target
    log(f"env {plan.name} ({plan.build}): $ {shlex.join(plan.argv[:-1])} <script>\n{plan.script}")
    start = time.time()
    proc = subprocess.run(plan.argv, env=env, cwd=plan.cwd, capture_output=True, text=True)
    for line in (proc.stdout + proc.stderr).splitlines()[-200:]:
        log(line)
    if proc.returncode != 0:
        raise EnvError(
            f"building environment {plan.name} ({plan.build}) failed with exit {proc.returncode} (output above); "
            "fix the checkout or the site's runtime.envs entry and rerun"
        )
    check_lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    record = {**plan.record(), "seconds": round(time.time() - start, 1), "check": check_lines[-10:]}
    write_json_atomic(record_path, record)
    return record
