"""ptflow.snakemake_checks: Snakemake's per-job script check runs once per rule, and still fails where it must.

Each test dry-runs a small real workflow with Snakemake's own CLI in a child process. The child counts the calls of
``snakemake.script.get_source`` (what the check reads the script with) and writes them to a file; the Snakefile
installs ptflow's wrapper exactly as ptflow's Snakefile does, unless ``--config once=0``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import REPO

JOBS = 12
SNAKEFILE = f"""
import sys
sys.path.insert(0, {str(REPO / "src")!r})
from ptflow.snakemake_checks import check_each_script_once

if str(config.get("once", 1)) == "1":
    check_each_script_once()


rule all:
    input:
        expand("out/{{i}}.txt", i=range({JOBS})),
        expand("per/{{i}}.txt", i=range(3)),


rule same_script:
    output:
        "out/{{i}}.txt",
    script:
        "scripts/same.py"


rule script_per_job:
    output:
        "per/{{i}}.txt",
    script:
        "scripts/s{{wildcards.i}}.py"
"""

# The child: count what the DAG's script check reads, then run Snakemake's CLI as `snakemake` would.
CHILD = """
import atexit, json, sys
import snakemake.script as script

calls, original, out = [], script.get_source, sys.argv[1]
def get_source(path, *args, **kwargs):
    calls.append(str(path))
    return original(path, *args, **kwargs)
script.get_source = get_source
atexit.register(lambda: open(out, "w").write(json.dumps(calls)))
from snakemake.cli import main
sys.argv = ["snakemake", *sys.argv[2:]]
main()
"""


@pytest.fixture
def workflow(tmp_path: Path) -> Path:
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    for name in ["same", "s0", "s1", "s2"]:
        (scripts / f"{name}.py").write_text("from pathlib import Path\nPath(snakemake.output[0]).write_text('x')\n")
    return tmp_path


def dry_run(workdir: Path, *config: str) -> tuple[int, Counter, str]:
    """Snakemake's exit status, the script check's reads by file name, and Snakemake's output."""
    calls = workdir / "calls.json"
    argv = [sys.executable, "-c", CHILD, str(calls), "-n", "--cores", "1", "--directory", str(workdir)]
    argv += ["-s", str(workdir / "Snakefile"), "--config", *config] if config else ["-s", str(workdir / "Snakefile")]
    proc = subprocess.run(argv, cwd=workdir, capture_output=True, text=True, timeout=120)
    return proc.returncode, Counter(Path(c).name for c in json.loads(calls.read_text())), proc.stdout + proc.stderr


def test_a_rule_s_script_is_checked_once_not_once_per_job(workflow: Path) -> None:
    rc, calls, output = dry_run(workflow)
    assert rc == 0, output
    assert calls["same.py"] == 1
    # a path with a placeholder names a script per job: each job's is still checked
    assert calls["s{wildcards.i}.py"] == 3


def test_without_it_snakemake_checks_every_job(workflow: Path) -> None:
    """The yardstick of the test above: Snakemake as shipped reads the same script for each of the rule's jobs."""
    rc, calls, output = dry_run(workflow, "once=0")
    assert rc == 0, output
    assert calls["same.py"] == JOBS


@pytest.mark.parametrize("missing", ["same.py", "s2.py"])
def test_a_missing_script_still_fails_the_dry_run(workflow: Path, missing: str) -> None:
    """Also the last job's script of the per-job path: its check was not skipped after the first two passed."""
    (workflow / "scripts" / missing).unlink()
    rc, _, output = dry_run(workflow)
    assert rc != 0
    assert missing in output  # Snakemake's own error names the script
