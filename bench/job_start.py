"""CPU of the Snakemake starts inside one Slurm job of ptflow's workflow (printed, not asserted).

Every Slurm job of the workflow runs two Snakemakes before its rule's own work: the batch step's (the command the
Slurm executor plugin writes into the job's script with ``sbatch --wrap``: ``python -m snakemake ... --executor
slurm-jobstep --mode remote``), which ``srun``s the job step's (the same, without the executor), which runs the rule.
This runs the batch step's command exactly as the plugin 2.8.0 writes it (read from a job script of the tests'
cluster, ``<slurm state>/hash.N/job.ID/script``; only the paths differ) in a scratch workdir with the tests' site
(tests/slurm/localtest.yaml) and a one-model, one-eval matrix, for the job ``cache_dataset`` of one dataset; a
stand-in ``srun`` on PATH drops its options and runs the job step's command as it is, so no cluster is needed. It
prints medians (CPU: user + sys, steadier than wall on a shared machine) of:

- the batch step's Snakemake alone: the job's CPU minus the step's (one Snakemake start: imports, the Snakefile's
  parse, the one job's DAG, the srun);
- the job step: its Snakemake and the rule's script;
- the floors (each its own ``python -c``): the interpreter, ``import snakemake.cli`` (what every start imports before
  the Snakefile), ``import pandas`` (the Slurm plugin's efficiency report imports it at module level, and Snakemake's
  plugin registry imports every installed executor plugin at start), ``import smart_open`` (Snakemake's source cache
  imports it to parse the Snakefile's path; it registers its S3 transport, so imports boto3);
- a driver's start: ``snakemake -n`` of the embedded default matrix with the local profile (a start, the parse and
  a whole DAG, no job);
- with ``--breakdown``, where the batch step's CPU goes: a wrapper (not the plugin's command) times the imports
  before the Snakefile, each ``include`` (Snakemake's parse of the file and its top-level code: common.smk's is
  ptflow's config, site, Jobs and imports; the Snakefile's own includes the import of smart_open), the rest of
  Snakemake's main, and what comes after it (the interpreter's exit: its full garbage collections).

``--tree DIR`` runs another checkout's Snakefile (and, through it, its src/) for before/after figures; run both
interleaved on the same machine state.

    .venv/bin/python bench/job_start.py [--repeat 7] [--tree /path/to/other/checkout ...] [--breakdown]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PY = Path(sys.executable)
TARGET = "cache_dataset:dataset=ptflow--arith-sub"
MATRIX = """\
agents:
- id: baseline
  kind: baseline
- id: sft
  kind: trl-sft
  params: {steps: 150, batch_size: 32, learning_rate: 0.003, seed: 0, gradient_checkpointing: false}
matrix:
  evals: [add]
  models: [ptflow/tiny-llama-h64]
"""
# the stand-in srun: options dropped, the step's command run as it is; its CPU (the step's tree) appended to $STEP_CPU
SRUN = """\
#!/usr/bin/env python3
import os, resource, subprocess, sys
argv = sys.argv[1:]
while argv and argv[0].startswith("-"):
    argv.pop(0)
rc = subprocess.call(argv)
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
with open(os.environ["STEP_CPU"], "a") as f:
    f.write(f"{ru.ru_utime + ru.ru_stime}\\n")
sys.exit(rc)
"""
# --breakdown: CPU (process_time) after the imports, around each include, at exit
BREAKDOWN = """\
import atexit, json, os, sys, time
import snakemake.cli
from snakemake.workflow import Workflow
out = {"imports": time.process_time(), "includes": []}
include = Workflow.include
def timed_include(self, snakefile, *args, **kwargs):
    t0 = time.process_time()
    try:
        return include(self, snakefile, *args, **kwargs)
    finally:
        out["includes"].append([os.path.basename(str(snakefile)), time.process_time() - t0])
Workflow.include = timed_include
atexit.register(lambda: json.dump({**out, "total": time.process_time()}, open(os.environ["BREAKDOWN"], "w")))
sys.argv = ["snakemake", *sys.argv[1:]]
snakemake.cli.main()
"""


def batch_step_args(tree: Path, work: Path) -> list[str]:
    """The batch step's Snakemake arguments as the Slurm plugin writes them (a job script's ``--wrap`` command)."""
    wait_for = tempfile.mkstemp(dir=work / ".snakemake")[1]
    return [
        "--snakefile", str(tree / "Snakefile"), "--target-jobs", TARGET, "--allowed-rules", TARGET.split(":")[0],
        "--cores", "all", "--attempt", "1", "--force-use-threads", "--wait-for-files", wait_for, "--force",
        "--target-files-omit-workdir-adjustment", "--max-inventory-time", "0", "--retries", "0", "--nocolor",
        "--no-hooks", "--nolock", "--ignore-incomplete", "--rerun-triggers", "params", "mtime", "input",
        "software-env", "code", "--conda-frontend", "conda", "--shared-fs-usage", "input-output",
        "storage-local-copies", "software-deployment-cache", "sources", "software-deployment", "source-cache",
        "persistence", "--config", f"site={work / 'site.yaml'}", "--printshellcmds", "--latency-wait", "60",
        "--scheduler", "ilp", "--local-storage-prefix", "base64//LnNuYWtlbWFrZS9zdG9yYWdl",
        "--scheduler-solver-path", str(PY.parent), "--configfiles", str(work / "matrix.yaml"),
        "--default-resources", "base64//dG1wZGlyPXN5c3RlbV90bXBkaXI=", "--executor", "slurm-jobstep", "--jobs", "1",
        "--mode", "remote",
    ]  # fmt: skip


def cpu_of(argv: list[str], env: dict, cwd: Path) -> float:
    """CPU seconds (user + sys) of one command's process tree; fails loudly."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:4])} ... failed:\n{proc.stderr[-3000:]}")
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def job(tree: Path, work: Path, env: dict, breakdown: bool) -> dict:
    """One job: the batch step's CPU alone and the step's (its Snakemake and the rule)."""
    step_file = work / "step_cpu"
    step_file.unlink(missing_ok=True)
    env = {**env, "STEP_CPU": str(step_file)}
    if breakdown:
        env["BREAKDOWN"] = str(work / "breakdown.json")
        argv = [str(PY), "-c", BREAKDOWN, *batch_step_args(tree, work)]
    else:
        argv = [str(PY), "-m", "snakemake", *batch_step_args(tree, work)]
    total = cpu_of(argv, env, work)
    step = float(step_file.read_text().split()[0])
    out = {"batch step": total - step, "job step (Snakemake + rule)": step}
    # a driver's start too: the dry-run of the embedded default matrix on this machine (what `make demo` plans)
    dry = [str(PY.with_name("snakemake")), "-n", "-s", str(tree / "Snakefile"), "--directory", str(work / "dry")]
    out["driver: snakemake -n, default matrix"] = cpu_of([*dry, "--profile", str(tree / "profiles/local")], env, work)
    if breakdown:
        data = json.loads((work / "breakdown.json").read_text())
        out["  imports before the Snakefile"] = data["imports"]
        parse = data["includes"][-1][1]  # the outermost: the Snakefile, every include in it
        common = sum(s for name, s in data["includes"] if name == "common.smk")
        out["  Snakefile parse, all includes"] = parse
        out["    of which common.smk (ptflow)"] = common
        out["  DAG, executor, srun (to the end of main)"] = data["total"] - data["imports"] - parse
        # the batch step's tree less its process's CPU to the atexit hook: its children but the step (which,
        # scontrol, sh) and, nearly all of it, the interpreter's exit (its full collections)
        out["  the exit, other children"] = out["batch step"] - data["total"]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--tree", type=Path, action="append", default=[], help="another checkout (before/after)")
    parser.add_argument("--breakdown", action="store_true", help="also where the batch step's CPU goes")
    args = parser.parse_args()
    trees = [REPO, *[t.resolve() for t in args.tree]]
    base = Path(tempfile.mkdtemp(prefix="ptflow-jobstart-"))
    bin_dir = base / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(SRUN)
    (bin_dir / "srun").chmod(0o755)
    # bytecode written, as make test has it (PYTHONDONTWRITEBYTECODE cleared)
    drop = ("SLURM_", "SNAKEMAKE_", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env['PATH']}", SLURM_JOB_ID="1", SLURM_CPUS_ON_NODE="1",
               SLURM_JOB_PARTITION="cpu")  # fmt: skip
    works = {}
    for i, tree in enumerate(trees):
        work = base / f"work{i}"
        (work / ".snakemake").mkdir(parents=True)
        shutil.copy(REPO / "tests/slurm/localtest.yaml", work / "site.yaml")
        (work / "matrix.yaml").write_text(MATRIX)
        works[tree] = work
    floors = {
        "python -c pass": "pass",
        "import snakemake.cli": "import snakemake.cli",
        "import pandas": "import pandas",
        "import smart_open": "import smart_open",
    }
    results: dict[str, dict[str, list[float]]] = {str(t): {} for t in trees}
    results["floors"] = {name: [] for name in floors}
    try:
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; median of {args.repeat} runs each")
        for tree, work in works.items():  # warm: the dataset cache, .pyc files, the page cache
            job(tree, work, env, False)
        t0 = time.monotonic()
        for _ in range(args.repeat):
            for name, code in floors.items():
                results["floors"][name].append(cpu_of([str(PY), "-c", code], env, base))
            for tree, work in works.items():
                for key, value in job(tree, work, env, args.breakdown).items():
                    results[str(tree)].setdefault(key, []).append(value)
        for group, rows in results.items():
            print(f"\n{group}")
            for key, values in rows.items():
                print(f"  {key:<42} {statistics.median(values):6.3f} CPU-s  (min {min(values):.3f}, "
                      f"max {max(values):.3f})")  # fmt: skip
        print(f"\n{time.monotonic() - t0:.0f} s; load average {os.getloadavg()[0]:.1f}")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
