"""ptflow plan: its figures come from Snakemake's own dry-run, job for job, and equal the site's requests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ptflow.cluster import images
from ptflow.config.model import build_config
from ptflow.config.sites import load_site
from ptflow.ops import plan as planning
from ptflow.ops.context import load_context, parse_smk_args
from tests.e2e.smk import REPO
from tests.e2e.smk import plan as e2e_plan

SITE = REPO / "tests" / "slurm" / "localtest.yaml"
PTFLOW = str(Path(sys.executable).with_name("ptflow"))
# The test's own reading of the rules (workflow/rules/*.smk): the site stage each rule's jobs request (the judge: a CPU
# job with aggregate's request); edf runs on the login node and requests nothing; train_supervised's supervisor
# submits the train request itself.
RULE_STAGE = {
    "cache_dataset": "cache",
    "cache_model": "cache",
    "cache_eval_data": "cache",
    "cache_resources": "cache",
    "hf_cache": "cache",
    "env": "image",
    "image": "image",
    "preprocess": "preprocess",
    "train": "train",
    "train_supervised": "train",
    "evaluate": "evaluate",
    "aggregate": "aggregate",
    "judge": "aggregate",
}
NOT_SUBMITTED = ("all", "edf")

NO_CLUSTER = str(Path(__file__).parent / "data" / "no-cluster-slurm.conf")  # a plan needs no cluster


def expected_requests(out: dict, site, cfg) -> dict[str, dict[str, float]]:
    """Per partition: jobs, GPU-, node- and CPU-hours of the planned jobs, each priced from the site file the way
    sbatch gets it (CPUs: --cpus-per-task = threads, x --ntasks = nodes x tasks_per_node on several nodes; gres per
    node); a supervised training also submits the helper requests of its kind."""
    expect: dict[str, dict[str, float]] = {}
    for j in out["jobs"]:
        rule = j["rule"]
        if rule in NOT_SUBMITTED:
            continue
        agent = cfg.agent_for(j["wildcards"]["agent"]) if rule.startswith("train") else None
        stages = [RULE_STAGE[rule]]
        if rule == "image" and site.runtime.images[images.name_of(site.runtime, j["wildcards"]["image"])].get("source"):
            stages = ["convert"]  # registry imports: the site's conversion request
        if rule == "train_supervised":
            stages += list(agent.spec.site_requests)
        for stage in stages:
            req = site.request(stage, agent if stage == "train" else None)
            nodes = req.get("nodes", 1)
            tasks = nodes * req.get("tasks_per_node", 1) if nodes > 1 else 1
            hours = req["runtime"] / 60
            e = expect.setdefault(req["partition"], dict.fromkeys(("gpu_hours", "node_hours", "cpu_hours"), 0.0))
            e["jobs"] = e.get("jobs", 0) + 1
            e["gpu_hours"] += req.get("gpus", 0) * nodes * hours
            e["node_hours"] += nodes * hours
            e["cpu_hours"] += req["threads"] * tasks * hours
    return expect


def assert_figures(out: dict, expect: dict, account: str) -> None:
    got = {r["partition"]: r for r in out["requests"]}
    assert set(got) == set(expect)
    for part, e in expect.items():
        assert got[part]["account"] == account
        for key, value in e.items():
            assert got[part][key] == pytest.approx(value, abs=1e-3), (part, key)


def run_plan(work: Path, *args: str) -> dict:
    argv = [PTFLOW, "plan", "--json", "-s", str(REPO / "Snakefile"), "--directory", str(work)]
    argv += ["--profile", str(REPO / "profiles" / "local"), "--config", f"site={SITE}", *args]
    proc = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "SLURM_CONF": NO_CLUSTER})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    work = tmp_path_factory.mktemp("plan")
    return work, run_plan(work)


def test_jobs_equal_the_dry_run_job_for_job(fresh):
    work, out = fresh
    assert out["jobs_per_rule"] == out["dry_run_job_stats"]
    dry = e2e_plan(work, "--config", f"site={SITE}")  # the test suite's own dry-run parser
    assert set(out["jobs_per_rule"]) == set(dry)
    for rule in dry:
        planned = {o for j in out["jobs"] if j["rule"] == rule for o in j["outputs"]}
        assert planned == dry[rule], rule


def test_figures_equal_site_requests(fresh):
    _, out = fresh
    site = load_site(str(SITE), REPO)
    cfg = build_config(yaml.safe_load((REPO / "config" / "config.yaml").read_text()))
    assert_figures(out, expected_requests(out, site, cfg), "ptflow")
    # 4 GRPO trainings x 2 GPUs x 40 min + 4 SFT x 1 x 30 + 12 evaluations x 1 x 30 = 800 GPU-minutes
    assert out["totals"]["gpu_hours"] == pytest.approx(800 / 60, abs=1e-3)
    chain = [j["rule"] for j in out["longest_chain"]["jobs"]]
    assert chain == ["cache_dataset", "cache_model", "train", "train", "evaluate", "aggregate"]
    assert out["longest_chain"]["minutes"] == 30 + 30 + 30 + 40 + 30 + 10
    assert out["cell_counts"] == {"done": 0, "to run": 12, "failed before": 0, "stale": 0}


def plan_posttrainbench(work: Path, site: str) -> tuple[dict, object]:
    """``ptflow plan`` of the PostTrainBench matrix on a packaged site, as a new user runs it, and the loaded
    configuration of the same command line."""
    args = [
        "--profile",
        str(REPO / "profiles" / "slurm"),
        "--configfile",
        str(REPO / "config" / "posttrainbench-ptflow.yaml"),
    ]
    args += ["--config", f"site={site}", "-s", str(REPO / "Snakefile"), "--directory", str(work)]
    proc = subprocess.run([PTFLOW, "plan", "--json", *args], capture_output=True, text=True, cwd=REPO, env=PLAN_ENV)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with pytest.MonkeyPatch.context() as env:
        for key in os.environ.keys() - PLAN_ENV.keys():
            env.delenv(key)
        return json.loads(proc.stdout), load_context(parse_smk_args(args, run_dir=REPO))


# pyxis.yaml's TAO variables at their packaged defaults, whatever this shell exports
PLAN_ENV = {
    **{k: v for k, v in os.environ.items() if not k.startswith("SLURM_")},
    "SLURM_CONF": NO_CLUSTER,
}


@pytest.fixture(scope="module")
def posttrainbench_generic(tmp_path_factory):
    return plan_posttrainbench(tmp_path_factory.mktemp("ptb_generic"), "generic")


@pytest.fixture(scope="module")
def posttrainbench_pyxis(tmp_path_factory):
    return plan_posttrainbench(tmp_path_factory.mktemp("ptb_pyxis"), "pyxis")


def test_cpu_hours_count_threads_on_generic(posttrainbench_generic):
    """Every GPU job of generic asks for 16 CPUs: the gpu partition's CPU-hours are 16 x its node-hours (the
    dry-run's text has no threads; read from it, CPU-hours equalled node-hours)."""
    out, ctx = posttrainbench_generic
    assert_figures(out, expected_requests(out, ctx.site, ctx.cfg), "(default)")
    (gpu,) = [r for r in out["requests"] if r["partition"] == "gpu"]
    assert gpu["cpu_hours"] == pytest.approx(16 * gpu["node_hours"])
    # 224 trainings x 12 h + 280 evaluations x 3 h, one H100 each
    assert out["jobs_per_rule"]["train"] == 224 and out["jobs_per_rule"]["evaluate"] == 280
    assert gpu["gpu_hours"] == pytest.approx(gpu["node_hours"]) == pytest.approx(224 * 12 + 280 * 3)


def test_supervised_trainings_keep_their_gpu_job_on_pyxis(posttrainbench_pyxis):
    """On a site with infra_retries every training is train_supervised, a login-node rule: its GPU job, submitted by
    the supervisor, is priced all the same (4 GPUs x time_hours); judge jobs are CPU jobs (aggregate's request)."""
    out, ctx = posttrainbench_pyxis
    assert ctx.site.supervises("train") is not None
    assert "train" not in out["jobs_per_rule"] and out["jobs_per_rule"]["train_supervised"] == 224
    supervised = [j for j in out["jobs"] if j["rule"] == "train_supervised"]
    assert {(r["stage"], r["gpus"], r["runtime"], r["by"]) for j in supervised for r in j["requests"]} == {
        ("train", 4, 240, "supervisor")
    }
    judges = [j for j in out["jobs"] if j["rule"] == "judge"]
    assert judges and all([(r["stage"], r["gpus"], r["by"]) for r in j["requests"]] == [("aggregate", 0, "plugin")]
                          for j in judges)  # fmt: skip
    assert_figures(out, expected_requests(out, ctx.site, ctx.cfg), "(default)")
    # 224 trainings x 4 GPUs x 4 h + 280 evaluations x 1 x 4 h
    assert out["totals"]["gpu_hours"] == pytest.approx(224 * 4 * 4 + 280 * 4)


def test_multinode_counts_gres_and_cpus_per_node(tmp_path):
    """A 2-node train request: gres and --cpus-per-task are per node/task, the job has 2 tasks (one per node)."""
    raw = yaml.safe_load(SITE.read_text())
    raw["agent_resources"]["trl-grpo"] = {"partition": "gpu", "gpus": 4, "nodes": 2, "threads": 6, "runtime": 60}
    path = tmp_path / "two_nodes.yaml"
    path.write_text(yaml.safe_dump(raw))
    site = load_site(str(path), REPO)
    cfg = build_config(yaml.safe_load((REPO / "config" / "config.yaml").read_text()))
    grpo = next(a.id for a in cfg.agents.values() if a.kind == "trl-grpo")
    (req,) = planning.job_requests(site, cfg, "train", {"model": "m", "eval": "e", "agent": grpo})
    assert (req.gpus, req.nodes, req.cpus, req.runtime, req.partition, req.by) == (8, 2, 12, 60, "gpu", "plugin")
    job = planning.PlannedJob("train", "7", requests=[req])
    (r,) = planning.requests([job])
    assert (r.jobs, r.gpu_hours, r.node_hours, r.cpu_hours) == (1, 8, 2, 12)
    # the judge is a CPU job (aggregate's request); `all` has no request
    (judge,) = planning.job_requests(site, cfg, "judge", {"model": "m", "eval": "e", "agent": grpo})
    assert (judge.stage, judge.gpus, judge.by) == ("aggregate", 0, "plugin")
    assert planning.job_requests(site, cfg, "all", {}) == []


def _touch_done(work: Path, cell_key: str) -> None:
    from ptflow.config.model import Cell
    from tests.unit.test_status import eval_json

    model, ev, agent = cell_key.split("/")
    p = work / "results" / "cells" / model / ev / agent / "eval.json"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(eval_json(Cell(model, ev, agent))))


def test_failed_before_and_stale(tmp_path):
    """A cell whose training log ends FAILED is 'failed before'; a cell with eval.json planned again is 'stale'."""
    failed = tmp_path / "results" / "logs" / "train" / "ptflow--tiny-llama-h64" / "add" / "sft.log"
    failed.parent.mkdir(parents=True)
    failed.write_text("[t] FAILED: ValueError: boom\n")
    _touch_done(tmp_path, "ptflow--tiny-llama-h96/sub/baseline")  # exists, but its inputs will be (re)made
    out = run_plan(tmp_path)
    assert out["cells"]["ptflow--tiny-llama-h64/add/sft"]["state"] == "failed before"
    assert out["cells"]["ptflow--tiny-llama-h96/sub/baseline"]["state"] == "stale"
    assert out["cell_counts"]["to run"] == 10


def test_a_finished_workflow_plans_no_job_and_each_cell_by_its_eval_json(tmp_path):
    """The dry-run of a workflow with nothing left to do (a real Snakemake run of a one-rule Snakefile) plans no job;
    a cell with a valid eval.json is 'done', one without is 'to run' (the plan reads no message wording)."""
    (tmp_path / "Snakefile").write_text('rule all:\n    output: "made.txt"\n    shell: "touch {output}"\n')
    smk = [str(Path(sys.executable).with_name("snakemake")), "-c1", "-s", str(tmp_path / "Snakefile")]
    subprocess.run(smk, cwd=tmp_path, check=True, capture_output=True)
    finished = planning.dry_run(["-c1", "-s", str(tmp_path / "Snakefile")], cwd=tmp_path)
    ctx = load_context(parse_smk_args(["--config", f"site={SITE}", "-s", str(REPO / "Snakefile")], run_dir=REPO))
    done = ctx.cfg.cells[0]
    _touch_done(tmp_path, done.key)
    plan = planning.make_plan(ctx.cfg, ctx.site, ctx.layout, tmp_path, finished)
    assert plan.jobs == [] and plan.stats == {} and plan.requests == []
    assert plan.cell_counts() == {"done": 1, "to run": len(ctx.cfg.cells) - 1, "failed before": 0, "stale": 0}
    assert plan.cells[done.key]["state"] == "done"
