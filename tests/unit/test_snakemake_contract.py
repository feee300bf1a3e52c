"""What ptflow relies on in Snakemake and in its slurm executor plugin that no public API promises, pinned against the
installed versions (envs/requirements.txt pins both). Each test drives the real thing: a tiny workflow run by
Snakemake's own CLI, locally and through the real plugin submitting to stand-in Slurm commands (an ``sbatch`` that
records its call and answers a job id, a ``sacct`` that says COMPLETED). A failure names the assumption and the ptflow
module that relies on it, so an upgrade that breaks one says which, and where to adapt.

The reliances, and what pins each here:

- ``ptflow.snakemake_once`` wraps ``snakemake.dag.ScriptProcessor.process_job`` and states the parameters of
  ``snakemake.resources.Resource.evaluate`` (both patched: test_snakemake_once_patches_both; their effect:
  tests/unit/test_snakemake_once.py);
- ``workflow/rules/common.smk`` states every ``get_*``'s parameters with ``snakemake.common.overwrite_function_params``
  and Snakemake calls an input function with those (test_stated_parameters_are_what_snakemake_passes);
- ``ptflow.config.load.merged_config`` parses ``--config`` with ``snakemake.cli.parse_config``;
- ``onstart`` (``ptflow.ops.driver.on_start``) runs in a real run's driver only, after the DAG is built and before any
  submission; it reads ``workflow.dag.needrun_jobs()``, records a job done with ``workflow.persistence.finished``,
  releases Snakemake's locks with ``workflow.persistence.unlock`` before running again, and a ``SystemExit`` from it
  ends Snakemake with that status and its locks released (the preflight refusal);
- ``ptflow.cluster.limits.apply`` writes the caps into the scheduler's ``global_resources``/``resources`` tables and
  common.smk reads ``--jobs`` as ``workflow.nodes``; ``workflow.is_main_process`` is False in the plugin's job step;
- ``ptflow.ops.plan_jobs.parse_dry_run`` reads the dry-run's job blocks and ``Job stats`` table;
- ``ptflow.ops.status`` (and ``ops.driver``, ``ops.cli``) read the plugin's log wording (``SLURM run ID: ...``,
  ``Job N has been submitted with SLURM jobid J (log: ...)``), its job name (the run ID), comment
  (``rule_<rule>_wildcards_<values>``) and log layout, and Snakemake's log header (``Command:``, ``Run directory:``);
- ``ptflow.config.request.Request.sbatch_options`` says what the plugin submits for the same resources;
- ``ptflow.warmstart.hand_over`` re-runs a script job from the top of the file Snakemake generated (``sys.argv[0]``);
- ``ptflow.cluster.patience``'s shims rely on the plugin running the Slurm commands by name from PATH (the stand-ins
  here are found that way).
- a rule's one params value (``ptflow.specs.RuleParams``, rule train's) is compared by its items alone: what it holds
  ``beside`` them (the evaluation handoff, the spend settings) is no rerun trigger, and reaches the script as it was
  built (test_a_rule_params_value_is_compared_by_its_items_alone).

Beside the pins, the code says so at run time where that is cheap: ``snakemake_once.install()`` returns what it could
not patch, ``limits.apply`` refuses a scheduler without the tables, ``plan_jobs.parse_dry_run`` refuses a dry-run whose
job blocks do not add up to its ``Job stats`` (test_plan_refuses_a_dry_run_it_cannot_read), and ``status.read_run_logs``
warns about plugin lines it could not read (test_status_says_when_it_cannot_read_the_plugins_lines).
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import re
import shlex
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import REPO

SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
VERSIONS = (
    f"snakemake {version('snakemake')}, snakemake-executor-plugin-slurm {version('snakemake-executor-plugin-slurm')}"
)
MODEL, EVAL, AGENTS = "m--a", "gsm8k", ("sft_x", "baseline")
CONFIG_ITEMS = ["count=3", "ratio=0.5", "flag=true", "items=[1,2]", "word=x-y", "empty="]


def broken(who: str, assumption: str) -> str:
    """The message of a failed pin: who relies on what, and that these versions no longer do it."""
    return f"{who} relies on {assumption}; {VERSIONS} does not (adapt {who}, or pin the versions that do)"


SNAKEFILE = r'''
import inspect, json, os, sys
from pathlib import Path

sys.path.insert(0, "@SRC@")
from snakemake.common import overwrite_function_params
from ptflow import snakemake_once

INSTALLED = snakemake_once.install()
SLURM = bool(config.get("site"))
if SLURM:
    from ptflow.config.sites import load_site

    _SITE = load_site(config["site"], os.path.dirname(config["site"]))
    DATA, EVAL = _SITE.request("preprocess"), _SITE.request("evaluate")
EVALS = [f"cells/@MODEL@/@EVAL@/{agent}/eval.json" for agent in @AGENTS@]


def data_of(*args, **kwargs):
    """Stated below as (wildcards), as common.smk states its get_*: Snakemake must pass that alone."""
    if len(args) + len(kwargs) != 1:
        raise ValueError(f"data_of called with {args} {kwargs}: not with its stated parameters")
    wildcards = (list(args) + list(kwargs.values()))[0]
    return f"data/{wildcards.model}.txt"


overwrite_function_params(data_of, inspect.signature(lambda wildcards: None).parameters)


rule all:
    input:
        EVALS,
        "report/agg.txt",


rule data:
    output:
        "data/{model}.txt",
    threads: DATA.threads if SLURM else 1
    resources:
        **(DATA.snakemake_resources() if SLURM else {}),
    shell:
        "echo data > {output}"


rule evaluate:
    input:
        data_of,
    output:
        "cells/{model}/{eval}/{agent}/eval.json",
    threads: EVAL.threads if SLURM else 1
    resources:
        **(EVAL.snakemake_resources() if SLURM else {"gpus_total": 1}),
    shell:
        "python -c 'import time; print(time.time())' > {output}; sleep 1; "
        "python -c 'import time; print(time.time())' >> {output}"


localrules: agg


rule agg:
    input:
        EVALS,
    output:
        "report/agg.txt",
    script:
        "scripts/agg.py"


onstart:
    from ptflow.cluster import limits
    from ptflow.ops import driver

    record = {
        "installed": INSTALLED,
        "config": dict(config),
        "main": workflow.is_main_process,
        "nodes": workflow.nodes,
        "submitted before": Path("sbatch.calls").exists(),
    }
    jobs = list(workflow.dag.needrun_jobs())
    record["jobs"] = [
        {"rule": j.name, "wildcards": list(j.wildcards), "comment": driver.plugin_comment(j),
         "output": [str(f) for f in j.output]}
        for j in jobs
    ]
    metadata = Path(".snakemake", "metadata")
    before = set(os.listdir(metadata)) if metadata.is_dir() else set()
    data = next(j for j in jobs if j.name == "data")
    for f in data.output:  # as an adopted job of an earlier run left it: outputs there, no metadata of this run
        Path(str(f)).parent.mkdir(parents=True, exist_ok=True)
        Path(str(f)).write_text("data\n")
    workflow.async_run(workflow.persistence.finished(data))
    record["metadata added"] = sorted(set(os.listdir(metadata)) - before)
    locks = Path(".snakemake", "locks")
    record["locks"] = [len(list(locks.glob("*"))) if locks.is_dir() else 0]
    workflow.persistence.unlock()  # as the driver does before it re-runs itself
    record["locks"].append(len(list(locks.glob("*"))) if locks.is_dir() else 0)
    limits.apply(workflow, {"_nodes": 2, "gpus_total": 1})
    record["tables"] = {
        name: {k: getattr(workflow.scheduler, name).get(k) for k in ("_nodes", "gpus_total")}
        for name in ("global_resources", "resources")
    }
    Path("onstart.json").write_text(json.dumps(record, indent=1))
'''

# A script job that runs itself again from the top, as ptflow.warmstart's zygote runs a handed-over job
# (runpy.run_path(argv[0], run_name="__main__")); only the second run writes the output.
AGG_SCRIPT = """
import json, os, runpy, sys
if not os.environ.get("CONTRACT_AGAIN"):
    os.environ["CONTRACT_AGAIN"] = "1"
    runpy.run_path(sys.argv[0], run_name="__main__")
    sys.exit(0)
with open(snakemake.output[0], "w") as out:
    json.dump({"argv0": sys.argv[0], "inputs": list(snakemake.input)}, out)
"""

# Stand-ins for the Slurm commands the plugin runs: sbatch records its call, makes the log file where --output says
# (as sbatch does) and answers a job id; sacct says COMPLETED for every job so far; the others answer nothing.
SBATCH = r"""#!/bin/sh
here="$(dirname "$0")/.."
printf '%s\n' "$*" >> "$here/sbatch.calls"
n=$(wc -l < "$here/sbatch.calls")
id=$((4240 + n))
out=$(printf '%s\n' "$*" | sed -n 's/.*--output \([^ ]*\).*/\1/p' | sed "s/%j/$id/")
[ -n "$out" ] && mkdir -p "$(dirname "$out")" && : > "$out"
echo "$id"
"""
SACCT = r"""#!/bin/sh
here="$(dirname "$0")/.."
case "$*" in
  *JobIdRaw,State*) n=$(wc -l < "$here/sbatch.calls"); i=1
    while [ "$i" -le "$n" ]; do echo "$((4240 + i))|COMPLETED"; i=$((i + 1)); done ;;
esac
exit 0
"""
SITE = """name: contract
scheduler: slurm
account: acct
requeue: true
partitions:
  cpu: {max_runtime: 120, cpu_only: true}
  gpu: {max_runtime: 720, gpus_per_node: 4}
resources:
  default: {partition: cpu, threads: 2, mem_mb: 1000, runtime: 20, qos: normal, constraint: skylake, tmp_mb: 100,
            warn_seconds: 120}
  evaluate: {partition: gpu, gpus: 4, nodes: 2, gpu_type: h100, threads: 4, mem_mb: 4000, runtime: 30}
"""


def workflow_dir(root: Path, snakefile: str = SNAKEFILE) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    text = snakefile.replace("@SRC@", str(REPO / "src")).replace("@MODEL@", MODEL).replace("@EVAL@", EVAL)
    (root / "Snakefile").write_text(text.replace("@AGENTS@", repr(list(AGENTS))))
    (root / "scripts").mkdir(exist_ok=True)
    (root / "scripts" / "agg.py").write_text(AGG_SCRIPT)
    return root


def stand_in_slurm(root: Path) -> dict:
    """An environment whose Slurm commands are the stand-ins in ``root/bin``."""
    bin_dir = root / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in {"sbatch": SBATCH, "sacct": SACCT}.items():
        (bin_dir / name).write_text(text)
    for name in ("sinfo", "squeue", "scontrol", "scancel", "sacctmgr", "sshare", "srun"):
        (bin_dir / name).write_text("#!/bin/sh\nexit 0\n")
    for path in bin_dir.iterdir():
        path.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_"))}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    return env


def run(workdir: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    argv = [SNAKEMAKE, "--directory", str(workdir), "-s", str(workdir / "Snakefile"), *args]
    return subprocess.run(argv, cwd=workdir, capture_output=True, text=True, env=env, timeout=180)


@pytest.fixture(scope="module")
def dry(tmp_path_factory) -> str:
    work = workflow_dir(tmp_path_factory.mktemp("dry"))
    proc = run(work, "--cores", "2", "--dry-run")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not (work / "onstart.json").exists(), broken(
        "ptflow.ops.driver.on_start (common.smk's onstart)", "onstart never running in a dry-run"
    )
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def local(tmp_path_factory) -> SimpleNamespace:
    """A real local run (2 cores) with ``--config`` items."""
    work = workflow_dir(tmp_path_factory.mktemp("local"))
    proc = run(work, "--cores", "2", "--config", *CONFIG_ITEMS)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    return SimpleNamespace(work=work, out=out, record=json.loads((work / "onstart.json").read_text()))


@pytest.fixture(scope="module")
def slurm(tmp_path_factory) -> SimpleNamespace:
    """A real run of the cells through the slurm plugin, submitting to the stand-in sbatch (``--immediate-submit``:
    the run ends once everything is submitted)."""
    root = tmp_path_factory.mktemp("slurm")
    work = workflow_dir(root / "work")
    env = stand_in_slurm(root)
    (root / "site.yaml").write_text(SITE)
    proc = run(
        work, "--executor", "slurm", "--jobs", "7", "--immediate-submit", "--notemp",
        "--slurm-init-seconds-before-status-checks", "1", "--seconds-between-status-checks", "1",
        "--config", f"site={root / 'site.yaml'}", "--", *(f"cells/{MODEL}/{EVAL}/{a}/eval.json" for a in AGENTS),
        env=env,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, "the slurm plugin's run against stand-in Slurm commands failed:\n" + out[-4000:]
    calls = (root / "sbatch.calls").read_text().splitlines()
    return SimpleNamespace(
        root=root, work=work, out=out, calls=calls, record=json.loads((work / "onstart.json").read_text())
    )


# ---- Snakemake ----


def test_snakemake_once_patches_both(local):
    assert local.record["installed"] == {"script check": True, "evaluate signature": True}, broken(
        "ptflow.snakemake_once",
        "snakemake.dag.ScriptProcessor.process_job (the per-job script check) and snakemake.resources.Resource"
        f".evaluate with snakemake.common.overwrite_function_params; install() found {local.record['installed']}",
    )
    importlib.import_module("snakemake.api")  # first, as the CLI does: snakemake.dag alone is an import circle
    from snakemake.dag import ScriptProcessor

    params = list(inspect.signature(ScriptProcessor.process_job).parameters)
    assert params == ["self", "job"] and ScriptProcessor.script_type == "script", broken(
        "ptflow.snakemake_once.check_each_script_once",
        f"ScriptProcessor.process_job(self, job) reading the rule's entry named by self.script_type; it takes {params}",
    )


def test_stated_parameters_are_what_snakemake_passes(local):
    """The run's input function takes (*args, **kwargs) and is stated as (wildcards): it raised had Snakemake read
    its real signature (it would pass every parameter a **kwargs function may take)."""
    from snakemake.common import get_function_params, overwrite_function_params

    def f(*args, **kwargs):
        return None

    stated = inspect.signature(lambda wildcards, attempt: None).parameters
    overwrite_function_params(f, stated)
    assert get_function_params(f) is stated, broken(
        "workflow/rules/common.smk (its get_* signatures) and ptflow.snakemake_once",
        "snakemake.common.overwrite_function_params being what Snakemake reads a function's parameters from",
    )
    assert (local.work / "cells" / MODEL / EVAL / AGENTS[0] / "eval.json").is_file()


def test_config_items_parse_as_snakemake_parses_them(local):
    from snakemake.cli import parse_config

    ours = parse_config(CONFIG_ITEMS)
    theirs = {k: v for k, v in local.record["config"].items() if k in ours}
    assert ours == theirs, broken(
        "ptflow.config.load.merged_config (the config of `ptflow plan`/`status`/`smoke`)",
        f"snakemake.cli.parse_config parsing --config as Snakemake does: {ours} here, {theirs} in the run",
    )


def test_onstart_sees_the_planned_jobs_before_any_submission(local, slurm):
    rules = sorted(j["rule"] for j in local.record["jobs"])
    assert rules == ["agg", "all", "data", "evaluate", "evaluate"], broken(
        "ptflow.ops.driver.on_start (adopting earlier runs' jobs)",
        f"workflow.dag.needrun_jobs() in onstart giving the run's planned jobs; it gave {rules}",
    )
    assert local.record["main"] and not slurm.record["submitted before"], broken(
        "ptflow.ops.driver.on_start", "onstart running in the driver (is_main_process) before any job is submitted"
    )
    evaluate = [j for j in local.record["jobs"] if j["rule"] == "evaluate"]
    assert sorted(j["wildcards"][2] for j in evaluate) == sorted(AGENTS) and all(
        j["wildcards"][:2] == [MODEL, EVAL] and j["output"] == [f"cells/{MODEL}/{EVAL}/{j['wildcards'][2]}/eval.json"]
        for j in evaluate
    ), broken(
        "ptflow.ops.driver (plugin_comment, outputs_exist) and ptflow.ops.status.wildcard_str",
        f"a job's wildcards iterating their values in the output pattern's order, and job.output its paths: {evaluate}",
    )


def test_a_job_recorded_finished_in_onstart_has_its_metadata(local):
    assert len(local.record["metadata added"]) == 1, broken(
        "ptflow.ops.driver.on_start (mark_done: an adopted job's outputs count as this run's)",
        "workflow.async_run(workflow.persistence.finished(job)) writing the job's metadata from onstart",
    )


def test_the_driver_can_release_snakemakes_locks_before_it_runs_again(local):
    held, after = local.record["locks"]
    assert held > 0 and after == 0, broken(
        "ptflow.ops.driver.on_start (the re-run after adopting: os.execv of the same command)",
        f"workflow.persistence.unlock() removing the run's .snakemake/locks in onstart; {held} before, {after} after",
    )


def test_caps_applied_at_onstart_hold_the_scheduler(local, slurm):
    for where in (local, slurm):
        tables = where.record["tables"]
        assert tables["global_resources"] == tables["resources"] == {"_nodes": 2, "gpus_total": 1}, broken(
            "ptflow.cluster.limits.apply", f"JobScheduler's global_resources/resources tables as dicts; got {tables}"
        )
    assert slurm.record["nodes"] == 7, broken(
        "workflow/rules/common.smk's _keep_under_limits (driver_caps(found, workflow.nodes))",
        f"workflow.nodes being --jobs under the slurm executor; it is {slurm.record['nodes']}",
    )
    # both evaluate jobs hold gpus_total=1 and were ready together on 2 cores: under the cap of 1, one after the other
    spans = []
    for agent in AGENTS:
        start, end = map(float, (local.work / "cells" / MODEL / EVAL / agent / "eval.json").read_text().split())
        spans.append((start, end))
    (s1, e1), (s2, e2) = sorted(spans)
    assert e1 <= s2, broken(
        "ptflow.cluster.limits.apply", f"the scheduler checking jobs against its tables; the jobs overlapped: {spans}"
    )


def test_systemexit_from_onstart_is_the_exit_status(tmp_path):
    """What the preflight refusal (ptflow.ops.driver.refuse) relies on: Snakemake lets a SystemExit from onstart end
    the process with its status, prints no traceback and releases its locks; here under the slurm executor."""
    text = SNAKEFILE.split("onstart:")[0] + "onstart:\n    raise SystemExit(78)\n"
    work = workflow_dir(tmp_path / "work", text)
    (tmp_path / "site.yaml").write_text(SITE)
    env = stand_in_slurm(tmp_path)
    proc = run(work, "--executor", "slurm", "--jobs", "2", "--config", f"site={tmp_path / 'site.yaml'}", env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 78 and "Traceback" not in out and 'File "' not in out, broken(
        "ptflow.ops.driver.refuse (a preflight refusal)",
        f"a SystemExit raised in onstart passing Snakemake untouched; exit {proc.returncode}:\n{out[-2000:]}",
    )
    assert not (tmp_path / "sbatch.calls").exists()
    locks = work / ".snakemake" / "locks"
    assert not (locks.is_dir() and any(locks.iterdir())), broken(
        "ptflow.ops.driver.refuse", "Snakemake releasing its locks when onstart exits (persistence.lock's finally)"
    )


def test_the_job_step_is_not_the_main_process(slurm):
    importlib.import_module("snakemake.api")  # first, as the CLI does: snakemake.workflow alone is an import circle
    from snakemake.workflow import Workflow
    from snakemake_interface_executor_plugins.settings import ExecMode

    wrapped = [shlex.split(c.split("--wrap=", 1)[1]) for c in slurm.calls if "--wrap=" in c]
    modes = [w[w.index("--mode") + 1] if "--mode" in w else None for w in wrapped]
    assert wrapped and modes == ["remote"] * len(wrapped) and all("--no-hooks" in w for w in wrapped), broken(
        "workflow/rules/common.smk (_patient_slurm_clients: the driver only) and ptflow.ops.driver.on_start",
        f"the plugin's job step running Snakemake with --mode remote --no-hooks; modes {modes}",
    )
    assert Workflow.is_main_process.fget(SimpleNamespace(exec_mode=ExecMode.REMOTE)) is False, broken(
        "workflow/rules/common.smk", "workflow.is_main_process being False in a --mode remote Snakemake"
    )


# ---- the dry-run's text: ptflow plan ----


def test_plan_reads_the_dry_run(dry):
    from ptflow.ops.plan_jobs import parse_dry_run

    jobs, stats = parse_dry_run(dry)
    what = "Snakemake's dry-run job blocks ('rule X:' / 'localrule X:' with 4-space 'jobid:', 'input:', 'output:', "
    what += "'reason:', 'wildcards:' lines) and its 'Job stats:' table"
    assert stats == {"data": 1, "evaluate": 2, "agg": 1, "all": 1}, broken(
        "ptflow.ops.plan_jobs.parse_dry_run", f"{what}; the table read as {stats}"
    )
    assert sorted(j.rule for j in jobs) == ["agg", "all", "data", "evaluate", "evaluate"], broken(
        "ptflow.ops.plan_jobs.parse_dry_run", f"{what}; read the rules {sorted(j.rule for j in jobs)}"
    )
    assert all(j.jobid for j in jobs) and len({j.jobid for j in jobs}) == len(jobs), broken(
        "ptflow.ops.plan_jobs.parse_dry_run", f"{what}; the job ids read: {[j.jobid for j in jobs]}"
    )
    evaluate = sorted((j for j in jobs if j.rule == "evaluate"), key=lambda j: j.wildcards.get("agent", ""))
    assert [j.wildcards for j in evaluate] == [{"model": MODEL, "eval": EVAL, "agent": a} for a in sorted(AGENTS)], (
        broken("ptflow.ops.plan_jobs.parse_dry_run", f"{what}; wildcards read: {[j.wildcards for j in evaluate]}")
    )
    for j in evaluate:
        assert j.outputs == [f"cells/{MODEL}/{EVAL}/{j.wildcards['agent']}/eval.json"], broken(
            "ptflow.ops.plan (cell states from planned outputs)", f"{what}; outputs read: {j.outputs}"
        )
        assert j.inputs == [f"data/{MODEL}.txt"] and j.reason.startswith("Missing output files"), broken(
            "ptflow.ops.plan", f"{what}; read input {j.inputs}, reason {j.reason!r}"
        )
    (agg,) = [j for j in jobs if j.rule == "agg"]
    assert sorted(agg.inputs) == sorted(f"cells/{MODEL}/{EVAL}/{a}/eval.json" for a in AGENTS), broken(
        "ptflow.ops.plan_jobs.parse_dry_run", f"{what}; a list of inputs is one line joined by ', ': read {agg.inputs}"
    )


@pytest.mark.parametrize(
    "change",
    [("    jobid: ", "    job id: "), ("\nrule ", "\nRule "), ("stats:\n", "stats:\n\n")],
)
def test_plan_refuses_a_dry_run_it_cannot_read(dry, change):
    """The runtime guard beside the pin: a dry-run printed otherwise stops `ptflow plan` with a message naming
    parse_dry_run and the Snakemake version, never a plan with wrong figures."""
    from ptflow.ops.plan_jobs import parse_dry_run

    changed = dry.replace(*change)
    assert changed != dry
    with pytest.raises(RuntimeError, match=r"parse_dry_run read .* snakemake \d"):
        parse_dry_run(changed)


# ---- the slurm plugin: job names, comments, logs (ptflow.ops.status, ops.driver, ops.cli) ----


def _flags(call: str) -> tuple[dict[str, str], set[str]]:
    """The plugin's sbatch call: its named values (job name, output, comment) and its other flags, spelled as
    ``Request.sbatch_options`` spells them (``--partition=p``, ``--mem=1000M``)."""
    words = shlex.split(call.split("--wrap=", 1)[0].split(" /dev/stdin", 1)[0])
    short = {"-p": "--partition", "-t": "--time", "-C": "--constraint", "-A": "--account", "-D": "--workdir"}
    named, flags, i = {}, set(), 0
    while i < len(words):
        w = words[i]
        if w in ("--job-name", "--output", "--comment", "-D"):
            named[w], i = words[i + 1], i + 2
            continue
        if w in short or w == "--mem":
            value = words[i + 1] + ("M" if w == "--mem" else "")
            flags.add(f"{short.get(w, w)}={value}")
            i += 2
            continue
        flags.add(w)
        i += 1
    return named, flags


def test_jobs_are_named_and_commented_as_status_and_the_driver_find_them(slurm):
    from ptflow.ops import status

    m = re.search(r"^SLURM run ID: (\S+)$", slurm.out, re.M)
    assert m, broken("ptflow.ops.status.read_run_logs (_RUN_ID)", "the plugin logging 'SLURM run ID: <uuid>'")
    run_id = m.group(1)
    submitted = [_flags(c)[0] for c in slurm.calls]
    assert len(submitted) == 3 and {s["--job-name"] for s in submitted} == {run_id}, broken(
        "ptflow.ops.driver.earlier_run_names and ptflow.ops.status (squeue/sacct --name <run ID>)",
        f"the plugin naming every Slurm job of a run by its run ID; names {[s['--job-name'] for s in submitted]}",
    )
    comments = sorted(s["--comment"] for s in submitted)
    cells = [SimpleNamespace(model=MODEL, eval=EVAL, agent=a) for a in AGENTS]
    expected = sorted([f"rule_data_wildcards_{MODEL}"] + [status.comment("evaluate", c) for c in cells])
    assert comments == expected, broken(
        "ptflow.ops.status.comment / wildcard_str", f"the plugin's comment rule_<rule>_wildcards_<values joined by _>: "
        f"{comments}, ptflow expects {expected}"
    )  # fmt: skip
    ours = sorted(j["comment"] for j in slurm.record["jobs"] if j["rule"] in ("data", "evaluate"))
    assert ours == comments, broken(
        "ptflow.ops.driver.plugin_comment (snakemake_executor_plugin_slurm.utils.get_job_wildcards)",
        f"building the plugin's comment of a job as the plugin does: {ours} vs the plugin's {comments}",
    )


def test_status_reads_the_run_log(slurm):
    from ptflow.ops import status

    runs = status.read_run_logs(slurm.work)
    assert len(runs) == 1 and runs[0].run_id, broken(
        "ptflow.ops.status.read_run_logs", "Snakemake's log in .snakemake/log/*.snakemake.log, with the plugin's lines"
    )
    run = runs[0]
    assert run.command[:1] == [SNAKEMAKE] and "--immediate-submit" in run.command, broken(
        "ptflow.ops.status.read_run_logs (RunLog.command, --retries and the config of later ptflow commands)",
        f"the log header's 'Command: <argv joined by spaces>'; read {run.command}",
    )
    text = run.path.read_text()
    assert re.search(rf"^\s*Run directory: {re.escape(str(slurm.work))}$", text, re.M), broken(
        "ptflow.ops.cli.context_for_workdir", "the log header's 'Run directory: <dir>'"
    )
    logs = {jid: (rule, wc) for jid, (rule, wc, _log) in run.jobs.items()}
    want = {("data", MODEL)} | {("evaluate", f"{MODEL}_{EVAL}_{a}") for a in AGENTS}
    assert set(logs.values()) == want and set(logs) == {"4241", "4242", "4243"}, broken(
        "ptflow.ops.status.read_run_logs (_SUBMITTED, _SLURM_LOG)",
        "the plugin logging 'Job N has been submitted with SLURM jobid J (log: .../slurm_logs/rule_<rule>/<wildcards>"
        f"/J.log).'; read {run.jobs}",
    )
    on_disk = status.slurm_log_index(slurm.work)
    assert {jid: v[:2] for jid, v in on_disk.items()} == logs, broken(
        "ptflow.ops.status.slurm_log_index", f"the plugin's Slurm logs under .snakemake/slurm_logs; found {on_disk}"
    )


@pytest.mark.parametrize("change", [("(log: ", "(logfile: "), ("SLURM run ID: ", "SLURM run id: ")])
def test_status_says_when_it_cannot_read_the_plugins_lines(slurm, tmp_path, caplog, change):
    """The runtime guard beside the pin: plugin lines worded otherwise are said, naming the plugin's version."""
    from ptflow.ops import status

    (log,) = (slurm.work / ".snakemake" / "log").glob("*.snakemake.log")
    (tmp_path / ".snakemake" / "log").mkdir(parents=True)
    (tmp_path / ".snakemake" / "log" / log.name).write_text(log.read_text().replace(*change))
    with caplog.at_level("WARNING", logger="ptflow.ops.status"):
        status.read_run_logs(tmp_path)
    assert "words them otherwise than ptflow.ops.status reads" in caplog.text, caplog.text
    assert version("snakemake-executor-plugin-slurm") in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="ptflow.ops.status"):
        status.read_run_logs(slurm.work)  # as the plugin wrote it: read whole, nothing said
    assert not caplog.text


def test_sbatch_options_are_what_the_plugin_submits(slurm):
    from ptflow.config.sites import load_site

    site = load_site(str(slurm.root / "site.yaml"), slurm.root)
    for call in slurm.calls:
        named, flags = _flags(call)
        stage = "evaluate" if named["--comment"].startswith("rule_evaluate") else "preprocess"
        ours = site.request(stage).sbatch_options(job_name=named["--job-name"], output=named["--output"])
        # the account reaches the plugin's sbatch as SBATCH_ACCOUNT (Site.process_env), not as a flag
        missing = [o for o in ours[2:] if not o.startswith("--account=") and o not in flags]
        assert not missing, broken(
            "ptflow.config.request.Request.sbatch_options / PLUGIN_FLAGS (the supervisor's and SkyRL server's sbatch)",
            f"the plugin submitting the resources of a {stage} request as {missing}; it submitted {sorted(flags)}",
        )


# ---- ptflow.warmstart ----


def test_a_script_job_reruns_from_the_top_of_its_generated_file(local):
    data = json.loads((local.work / "report" / "agg.txt").read_text())
    assert data["inputs"] == [f"cells/{MODEL}/{EVAL}/{a}/eval.json" for a in AGENTS], broken(
        "ptflow.warmstart.hand_over",
        "a script rule running as `python <generated file>` (sys.argv[0]) that, run again from the top with "
        f"runpy.run_path, rebuilds the job's `snakemake` object; got {data}",
    )
    assert Path(data["argv0"]).suffix == ".py"


# ---- the preflight refusal (ptflow.ops.driver) ----

REFUSING = r"""
import sys

sys.path.insert(0, "@SRC@")
from ptflow.cluster.limits import LimitsError
from ptflow.cluster.preflight import PreflightError, format_problems
from ptflow.ops import driver


rule all:
    input:
        "out.txt",


rule make:
    output:
        "out.txt",
    resources:
        runtime=1,
        mem_mb=10,
        slurm_partition="p",
    shell:
        "touch {output}"


def preflight():
    if config["refuse"] == "preflight":
        raise PreflightError(format_problems(["first: fix A", "second: fix B", "third: fix C"]))
    raise LimitsError("site s limits.max_gpus: 9 is above the cluster's cap of 8; lower it")


onstart:
    driver.on_start(workflow, scheduler="local", log=print, preflight=preflight)
"""


@pytest.mark.parametrize("refuse", ["preflight", "limits"])
def test_a_refusal_prints_its_problems_alone_and_exits_78(tmp_path, refuse):
    from ptflow.ops.driver import PREFLIGHT_REFUSED

    work = workflow_dir(tmp_path / "work", REFUSING)
    args = ["--config", f"refuse={refuse}"]
    if refuse == "preflight":  # through the slurm plugin (its threads started): nothing is submitted
        proc = run(work, "--executor", "slurm", "--jobs", "2", *args, env=stand_in_slurm(tmp_path))
    else:
        proc = run(work, "--cores", "1", *args)
    out = proc.stdout + proc.stderr
    assert proc.returncode == PREFLIGHT_REFUSED == 78, out
    assert 'File "' not in out and "Traceback" not in out and "WorkflowError" not in out, out
    if refuse == "preflight":
        problems = ["preflight found 3 problem(s); nothing was submitted:"]
        problems += ["  - first: fix A", "  - second: fix B", "  - third: fix C"]
    else:
        problems = ["preflight found 1 problem(s); nothing was submitted:"]
        problems += ["  - site s limits.max_gpus: 9 is above the cluster's cap of 8; lower it"]
    assert out.rstrip().splitlines()[-len(problems) :] == problems, out
    assert not (tmp_path / "sbatch.calls").exists() and not (work / "out.txt").exists()
    assert not (work / ".ptflow" / "driver.lock").exists(), "a refused driver gives the directory back"


PARAMS_SNAKEFILE = """
from ptflow.specs import RuleParams

def get_job(wildcards):
    return RuleParams({"spec": config["compared"]}, spend={"cap_usd": config["beside"]})

rule all:
    input: "out.txt"

rule make:
    output: "out.txt"
    params:
        job=get_job,
    script: "show.py"
"""

SHOW_SCRIPT = """
import json
job = snakemake.params.job
json.dump({"type": type(job).__name__, "items": dict(job), "beside": job.beside}, open(snakemake.output[0], "w"))
"""


def test_a_rule_params_value_is_compared_by_its_items_alone(tmp_path):
    """Rule train's one params value (common.smk's get_train_params, ``ptflow.specs.RuleParams``) holds the spec as
    its items and, beside them, the evaluate job's params and the cell's spend settings: a changed evaluation must
    rerun the evaluate job, never the 10-hour training, and a changed cap no finished cell. Snakemake records a dict
    param by its repr (items only; tests/support/job_params.py records the same, as the golden params) and hands the
    script the value as it was built. The job's output says whether it ran again."""
    (tmp_path / "Snakefile").write_text(PARAMS_SNAKEFILE)
    (tmp_path / "show.py").write_text(SHOW_SCRIPT)
    out = tmp_path / "out.txt"

    def runs(compared: str, beside: str) -> dict:
        proc = run(tmp_path, "--cores", "1", "--config", f"compared={compared}", f"beside={beside}")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return json.loads(out.read_text())

    assert runs("1", "1") == {"type": "RuleParams", "items": {"spec": 1}, "beside": {"spend": {"cap_usd": 1}}}
    first = out.stat().st_mtime_ns
    assert runs("1", "2")["beside"] == {"spend": {"cap_usd": 1}} and out.stat().st_mtime_ns == first, broken(
        "ptflow.specs.RuleParams (rule train's params value)",
        "a dict param compared by its repr, an attribute of it no rerun trigger",
    )
    assert runs("2", "2") == {"type": "RuleParams", "items": {"spec": 2}, "beside": {"spend": {"cap_usd": 2}}}
    assert out.stat().st_mtime_ns != first  # a changed item does rerun: the test can see a rerun
