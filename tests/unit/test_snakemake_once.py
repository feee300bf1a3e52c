"""ptflow.snakemake_once: what Snakemake repeats per job is done once, with the same outcome.

Each test runs a small real workflow with Snakemake's own CLI in a child process. The child counts the calls of
``snakemake.script.get_source`` (what the DAG's script check reads a script with) and of ``inspect.signature`` on
``Resource.evaluate``, and writes them to a file. The Snakefile installs ptflow's changes exactly as ptflow's
Snakefile does, unless ``--config once=0`` (Snakemake as shipped: the yardstick).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from ptflow import snakemake_once
from tests.conftest import REPO

JOBS = 12
SNAKEFILE = f"""
import sys
sys.path.insert(0, {str(REPO / "src")!r})
from ptflow import snakemake_once

if str(config.get("once", 1)) == "1":
    snakemake_once.install()


rule all:
    input:
        expand("out/{{i}}.txt", i=range({JOBS})),
        expand("per/{{i}}.txt", i=range(3)),


rule same_script:
    output:
        "out/{{i}}.txt",
    resources:
        # a callable resource, as ptflow's per-attempt runtime and mem_mb
        mem_mb=lambda wildcards, attempt: 100 * attempt + int(wildcards.i),
    script:
        "scripts/same.py"


rule script_per_job:
    output:
        "per/{{i}}.txt",
    script:
        "scripts/s{{wildcards.i}}.py"
"""

# The child: count what the two per-job computations do, then run Snakemake's CLI as `snakemake` would.
CHILD = """
import atexit, inspect, json, sys
import snakemake.script as script

calls, out = [], sys.argv[1]
get_source, signature = script.get_source, inspect.signature
def counted_get_source(path, *args, **kwargs):
    calls.append(str(path))
    return get_source(path, *args, **kwargs)
def counted_signature(func, *args, **kwargs):
    if getattr(func, "__name__", None) == "evaluate" and hasattr(func, "__self__"):  # a Resource's, bound
        calls.append("signature of evaluate")
    return signature(func, *args, **kwargs)
script.get_source, inspect.signature = counted_get_source, counted_signature
atexit.register(lambda: open(out, "w").write(json.dumps(calls)))
from snakemake.cli import main
sys.argv = ["snakemake", *sys.argv[2:]]
main()
"""

SCRIPT = "from pathlib import Path\nPath(snakemake.output[0]).write_text(str(snakemake.resources.get('mem_mb')))\n"


@pytest.fixture
def workflow(tmp_path: Path) -> Path:
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    for name in ["same", "s0", "s1", "s2"]:
        (scripts / f"{name}.py").write_text(SCRIPT)
    return tmp_path


def snakemake(workdir: Path, *args: str, once: bool = True) -> tuple[int, Counter, str]:
    """Snakemake's exit status, what the child counted (scripts by file name), and Snakemake's output."""
    calls = workdir / "calls.json"
    argv = [sys.executable, "-c", CHILD, str(calls), "--cores", "1", "--directory", str(workdir)]
    argv += ["-s", str(workdir / "Snakefile"), *args, "--config", f"once={int(once)}"]
    proc = subprocess.run(argv, cwd=workdir, capture_output=True, text=True, timeout=120)
    return proc.returncode, Counter(Path(c).name for c in json.loads(calls.read_text())), proc.stdout + proc.stderr


def test_a_rule_s_script_is_checked_once_not_once_per_job(workflow: Path) -> None:
    rc, calls, output = snakemake(workflow, "-n")
    assert rc == 0, output
    assert calls["same.py"] == 1
    # a path with a placeholder names a script per job: each job's is still checked
    assert calls["s{wildcards.i}.py"] == 3


def test_without_it_snakemake_checks_every_job(workflow: Path) -> None:
    """The yardstick of the tests here: Snakemake as shipped repeats both for every job."""
    rc, calls, output = snakemake(workflow, "-n", once=False)
    assert rc == 0, output
    assert calls["same.py"] == JOBS
    assert calls["signature of evaluate"] >= JOBS  # per callable resource per job (twice, in 9.27)


@pytest.mark.parametrize("missing", ["same.py", "s2.py"])
def test_a_missing_script_still_fails_the_dry_run(workflow: Path, missing: str) -> None:
    """Also the last job's script of the per-job path: its check was not skipped after the first two passed."""
    (workflow / "scripts" / missing).unlink()
    rc, _, output = snakemake(workflow, "-n")
    assert rc != 0
    assert missing in output  # Snakemake's own error names the script


def test_callable_resources_evaluate_without_reading_the_signature_and_reach_the_job(workflow: Path) -> None:
    rc, calls, output = snakemake(workflow, "-n")
    assert rc == 0, output
    assert calls["signature of evaluate"] == 0
    # each job's own value (100 * attempt + i), in the plan and in the job that runs
    assert all(f"mem_mb={100 + i}" in output for i in range(JOBS))
    rc, calls, output = snakemake(workflow, "out/7.txt")
    assert rc == 0, output
    assert calls["signature of evaluate"] == 0
    assert (workflow / "out" / "7.txt").read_text() == "107"


FREEZE_SNAKEFILE = f"""
import gc, sys
sys.path.insert(0, {str(REPO / "src")!r})
from ptflow import snakemake_once


rule all:
    output:
        "out.txt",
    run:
        open(output[0], "w").write(str(gc.get_freeze_count()))


before = gc.get_freeze_count()
snakemake_once.freeze_parsed_objects()
print("frozen at parse:", before, gc.get_freeze_count(), file=sys.stderr)
"""


@pytest.mark.parametrize("command", [["-m", "snakemake"], ["-c", CHILD, "calls.json"]])
def test_snakemake_s_own_command_freezes_the_parsed_objects_and_still_runs(tmp_path: Path, command: list) -> None:
    """``python -m snakemake`` (a Slurm job's two) and ``snakemake`` (the driver: CHILD runs Snakemake's CLI as
    ``snakemake``): what the parse left is frozen, and the rule still runs in the same process."""
    (tmp_path / "Snakefile").write_text(FREEZE_SNAKEFILE)
    argv = [sys.executable, *command, "--cores", "1", "--directory", str(tmp_path), "-s", str(tmp_path / "Snakefile")]
    proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    before, after = next(line for line in proc.stderr.splitlines() if line.startswith("frozen at parse:")).split()[-2:]
    assert int(before) == 0
    assert int(after) > 10_000  # Snakemake's imports and the parse
    assert int((tmp_path / "out.txt").read_text()) > 10_000  # still frozen when the rule runs (some freed since)


@pytest.mark.parametrize("argv0", ["/venv/bin/pytest", "-c", "/venv/bin/ptflow", "/x/snakemake/cli.py"])
def test_any_other_process_is_left_as_it_is(argv0: str, monkeypatch: pytest.MonkeyPatch) -> None:
    frozen = []
    monkeypatch.setattr(snakemake_once.gc, "freeze", lambda: frozen.append(True))
    assert snakemake_once.freeze_parsed_objects(argv0) is False
    assert snakemake_once.freeze_parsed_objects() is False  # this process: pytest
    assert frozen == []
    assert snakemake_once.freeze_parsed_objects("/venv/bin/snakemake") is True
    assert frozen == [True]


def test_a_rule_scripts_process_freezes_the_collector_at_exit(tmp_path):
    """rule_log (every rule script's first step) leaves the exit's collector passes out: an atexit handler registered
    before it runs after it, and sees the objects frozen; the script's own output is all there."""
    script = (
        "import atexit, gc, sys\n"
        "atexit.register(lambda: print('frozen', gc.get_freeze_count() > 0, file=sys.__stderr__))\n"
        "from ptflow.jobenv import rule_log\n"
        f"with rule_log({str(tmp_path / 'job.log')!r}) as log:\n"
        "    log('done')\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "frozen True" in proc.stderr
    assert (tmp_path / "job.log").read_text().rstrip().endswith("done")
