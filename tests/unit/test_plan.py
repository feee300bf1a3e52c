"""ptflow plan: its figures come from Snakemake's own dry-run, job for job, and equal the site's requests."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ptflow.cluster import images
from ptflow.cluster.limits import Cap, Limits, merge_stated
from ptflow.config.matrix import build_config
from ptflow.config.sites import load_site
from ptflow.config.validate import ConfigError
from ptflow.ops import plan as planning
from ptflow.ops import plan_estimate, plan_jobs
from ptflow.ops.context import load_context, parse_smk_args
from tests.e2e.smk import REPO
from tests.e2e.smk import plan as e2e_plan

SITE = REPO / "tests" / "slurm" / "localtest.yaml"
PTFLOW = str(Path(sys.executable).with_name("ptflow"))
# The test's own reading of the rules (workflow/rules/*.smk): the site stage each rule's jobs request (the judge: a CPU
# job with its own request, else aggregate's); edf runs on the login node and requests nothing; train_supervised's
# supervisor submits the train request itself.
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
    "judge_run": "judge",  # one vote of the judge panel
    "rescore": "aggregate",
    "evaluate_seed": "evaluate",
}
# run on the login node: no Slurm job to price (judge: the judge panel's decision over a cell's votes)
NOT_SUBMITTED = ("all", "edf", "hf_cache", "seed_mean", "judge")

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
        if rule in ("evaluate", "evaluate_seed") and cfg.agent_for(j["wildcards"]["agent"]).spec.agent_cli:
            stages = ["aggregate"]  # an agent cell is evaluated in its train job's allocation; this job adopts it
        for stage in stages:
            req = site.request(stage, agent if stage == "train" else None)
            nodes = req.get("nodes", 1)
            tasks = nodes * req.get("tasks_per_node", 1) if nodes > 1 else 1
            hours = req["runtime"] / 60
            e = expect.setdefault(req["partition"], dict.fromkeys(("gpu_hours", "node_hours", "cpu_hours"), 0.0))
            e["jobs"] = e.get("jobs", 0) + 1
            e["gpu_allocations"] = e.get("gpu_allocations", 0) + (req.get("gpus", 0) > 0)
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


def plan_posttrainbench(work: Path, site: str, config: str = "posttrainbench-ptflow.yaml") -> tuple[dict, object]:
    """``ptflow plan`` of the PostTrainBench matrix on a packaged site, as a new user runs it, and the loaded
    configuration of the same command line."""
    args = [
        "--profile",
        str(REPO / "profiles" / "slurm"),
        "--configfile",
        str(REPO / "config" / config),
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


def test_the_checkout_checkpoint_is_a_planned_job(tmp_path):
    """config/posttrainbench.yaml (PostTrainBench's own evaluation from its checkout): the dry-run prints the checkout
    as a ``checkpoint`` block; the plan reads it like a rule's (it once dropped it, then refused the dry-run)."""
    out, _ = plan_posttrainbench(tmp_path, "generic", "posttrainbench.yaml")
    assert out["jobs_per_rule"]["posttrainbench_checkout"] == 1
    assert sum(out["jobs_per_rule"].values()) == sum(out["dry_run_job_stats"].values())


def test_cpu_hours_count_threads_on_generic(posttrainbench_generic):
    """Every GPU job of generic asks for 16 CPUs: the gpu partition's CPU-hours are 16 x its node-hours (the
    dry-run's text has no threads; read from it, CPU-hours equalled node-hours)."""
    out, ctx = posttrainbench_generic
    assert_figures(out, expected_requests(out, ctx.site, ctx.cfg), "(default)")
    (gpu,) = [r for r in out["requests"] if r["partition"] == "gpu"]
    assert gpu["cpu_hours"] == pytest.approx(16 * gpu["node_hours"])
    # PostTrainBench's seeds: 5 evals x 5 seeds + 2 API-graded evals x 1 = 27 evaluations per (model, agent), 280
    # cells (224 agent cells + 56 baseline/instruct): 224 trainings x 12 h (the agent and its seeds' evaluations)
    # + 56 x 27 / 7 = 216 baseline/instruct seed evaluations x 3 h, one H100 each; the agent cells' 864 seed jobs
    # adopt what their train job evaluated (CPU jobs)
    assert out["jobs_per_rule"]["train"] == 224 and "evaluate" not in out["jobs_per_rule"]
    assert out["jobs_per_rule"]["evaluate_seed"] == 280 * 27 // 7 == 1080 and out["jobs_per_rule"]["seed_mean"] == 280
    assert gpu["gpu_hours"] == pytest.approx(gpu["node_hours"]) == pytest.approx(224 * 12 + 216 * 3)
    assert out["totals"]["gpu_allocations"] == 224 + 216  # one GPU queue wait per agent cell and baseline seed
    adopting = [j for j in out["jobs"] if j["rule"] == "evaluate_seed" and j["wildcards"]["agent"] not in
                ("baseline", "instruct")]  # fmt: skip
    assert len(adopting) == 864 and {(r["stage"], r["gpus"]) for j in adopting for r in j["requests"]} == {
        ("aggregate", 0)
    }
    assert out["seeds"]["gsm8k"] == {"seeds": 5, "cells": 40, "jobs": 200, "gpu_hours": 8 * 5 * 3.0}


def test_rescoring_is_a_cpu_job_per_cell_of_its_evals(posttrainbench_generic):
    """Rule rescore (gsm8k and aime2025 by default: exact_numeric) scores each cell's stored inspect log again: no
    model, no GPU. The plan prices it with the aggregate request: 80 cells of those two evals, 0 GPUs each."""
    out, ctx = posttrainbench_generic
    rescore = [j for j in out["jobs"] if j["rule"] == "rescore"]
    cells = [c for c in ctx.cfg.cells if c.eval in ("gsm8k", "aime2025")]
    assert len(rescore) == len(cells) == out["jobs_per_rule"]["rescore"] == 80
    assert {(r["stage"], r["gpus"]) for j in rescore for r in j["requests"]} == {("aggregate", 0)}


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
    judges = [j for j in out["jobs"] if j["rule"] == "judge_run"]
    assert judges and all([(r["stage"], r["gpus"], r["by"]) for r in j["requests"]] == [("aggregate", 0, "plugin")]
                          for j in judges)  # fmt: skip
    assert_figures(out, expected_requests(out, ctx.site, ctx.cfg), "(default)")
    # 224 trainings x 4 GPUs x 4 h + 216 baseline/instruct seed evaluations x 1 x 4 h
    assert out["totals"]["gpu_hours"] == pytest.approx(224 * 4 * 4 + 216 * 4)
    # GPU queue waits: one per agent cell (its seeds are evaluated in its train job's allocation) and baseline seed
    assert out["totals"]["gpu_allocations"] == 224 + 216
    # the supervisor's GPU jobs are Slurm jobs the estimate schedules under the caps like the plugin's
    assert out["estimate"]["jobs"] == out["totals"]["jobs"] == sum(w["jobs"] for w in out["waves"])
    assert out["estimate"]["minutes"] > 0 and out["estimate"]["peak_gpus"] > 0


def test_multinode_counts_gres_and_cpus_per_node(tmp_path):
    """A 2-node train request: gres and --cpus-per-task are per node/task, the job has 2 tasks (one per node)."""
    raw = yaml.safe_load(SITE.read_text())
    raw["agent_resources"]["trl-grpo"] = {"partition": "gpu", "gpus": 4, "nodes": 2, "threads": 6, "runtime": 60}
    path = tmp_path / "two_nodes.yaml"
    path.write_text(yaml.safe_dump(raw))
    site = load_site(str(path), REPO)
    cfg = build_config(yaml.safe_load((REPO / "config" / "config.yaml").read_text()))
    grpo = next(a.id for a in cfg.agents.values() if a.kind == "trl-grpo")
    (req,) = plan_jobs.job_requests(site, cfg, "train", {"model": "m", "eval": "e", "agent": grpo})
    assert (req.gpus, req.nodes, req.cpus, req.runtime, req.partition, req.by) == (8, 2, 12, 60, "gpu", "plugin")
    job = plan_jobs.PlannedJob("train", "7", requests=[req])
    (r,) = plan_estimate.requests([job])
    assert (r.jobs, r.gpu_hours, r.node_hours, r.cpu_hours) == (1, 8, 2, 12)
    # the judge is a CPU job (aggregate's request); `all` has no request
    (judge,) = plan_jobs.job_requests(site, cfg, "judge_run", {"model": "m", "eval": "e", "agent": grpo})
    assert (judge.stage, judge.gpus, judge.by) == ("aggregate", 0, "plugin")
    assert plan_jobs.job_requests(site, cfg, "all", {}) == []


def _touch_done(work: Path, cell_key: str) -> None:
    from ptflow.config.matrix import Cell
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
    finished = plan_jobs.dry_run(["-c1", "-s", str(tmp_path / "Snakefile")], cwd=tmp_path)
    ctx = load_context(parse_smk_args(["--config", f"site={SITE}", "-s", str(REPO / "Snakefile")], run_dir=REPO))
    done = ctx.cfg.cells[0]
    _touch_done(tmp_path, done.key)
    plan = planning.make_plan(ctx.cfg, ctx.site, ctx.layout, tmp_path, finished)
    assert plan.jobs == [] and plan.stats == {} and plan.requests == []
    assert plan.cell_counts() == {"done": 1, "to run": len(ctx.cfg.cells) - 1, "failed before": 0, "stale": 0}
    assert plan.cells[done.key]["state"] == "done"


# ---- the wall-clock estimate under the cluster's caps ----

OVERHEAD_MIN = plan_estimate.JOB_OVERHEAD_S / 60


def site_file(tmp_path: Path, *, limits: dict | None = None, **requests: dict) -> Path:
    """localtest.yaml with stated ``limits`` and changes to its requests (stage -> keys)."""
    raw = yaml.safe_load(SITE.read_text())
    if limits:
        raw["limits"] = limits
    for stage, keys in requests.items():
        raw["resources"][stage] = {**raw["resources"].get(stage, {}), **keys}
    path = tmp_path / "localtest.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def evaluate_dry_run(n: int) -> str:
    """A dry-run's text of ``n`` evaluations of different cells, as Snakemake 9 prints them (no dependencies)."""
    blocks = []
    for i in range(n):
        cell = f"results/cells/m{i}/add/baseline"
        blocks.append(
            f"[Tue Nov 24 21:13:52 2026]\nrule evaluate:\n    input: results/data/add/test.parquet\n"
            f"    output: {cell}/eval.json, {cell}/inspect\n    jobid: {i + 1}\n"
            f"    reason: Missing output files: {cell}/eval.json\n    wildcards: model=m{i}, eval=add, agent=baseline\n"
            "    resources: tmpdir=<TBD>, gres=gpu:h100:1, runtime=30\nShell command: None\n"
        )
    return "\n".join(blocks)


def test_twelve_one_gpu_jobs_under_a_gpu_cap_of_two_take_six_waves(tmp_path):
    """12 evaluations of one GPU, expected 10 min, max_gpus 2: 2 at once (the profile's 250 jobs is no lower), six
    waves of 10 min; the simulation adds the per-job latency to each wave."""
    path = site_file(tmp_path, limits={"max_gpus": 2}, evaluate={"expected_runtime": 10})
    ctx = load_context(parse_smk_args(["--config", f"site={path}", "-s", str(REPO / "Snakefile")], run_dir=REPO))
    limits = merge_stated(ctx.site, {}, "not read from Slurm")
    jobs = plan_estimate.profile_jobs(REPO)
    plan = planning.make_plan(ctx.cfg, ctx.site, ctx.layout, tmp_path, evaluate_dry_run(12), limits, jobs)
    assert plan.caps == plan_estimate.Caps(250, "profile jobs", 2, "max_gpus", None, "")
    (row,) = plan.waves
    assert row == plan_estimate.Waves("gpu", "evaluate", 1, 1, 10.0, "expected_runtime", 12, 2, "max_gpus")
    assert (row.waves, row.hours) == (6, 1.0)
    assert plan.estimate == plan_estimate.Estimate(6 * (10 + OVERHEAD_MIN), 12, 2, 2, 2)  # 61.5 min
    text = planning.render(plan)
    assert (
        "Cluster limits (not read from Slurm)\n  max_gpus = 2 (GPUs in use at once; site localtest limits.max_gpus)\n"
        in text
    )
    assert (
        "\n  gpu          evaluate          12    1    1       2 (max_gpus)            6   10 min expected_runtime"
        in text
    )
    assert "\nWall-clock estimate under the caps: 1 h 2 min (12 jobs, at most 2 at once, 2 GPUs at once)\n" in text
    out = plan.to_json()
    assert out["waves"][0]["waves"] == 6 and out["waves"][0]["hours"] == 1.0
    assert out["estimate"]["minutes"] == 61.5 and out["limits"]["max_gpus"] == {
        "value": 2,
        "source": "site localtest limits.max_gpus",
        "by_slurm": False,  # no Slurm read: a cap the driver keeps itself
    }
    # without expected_runtime a wave is the time limit, and the rows say so
    plain = planning.make_plan(ctx.cfg, load_site(str(SITE), REPO), ctx.layout, tmp_path, evaluate_dry_run(12),
                               limits, jobs)  # fmt: skip
    assert [(w.minutes, w.minutes_from) for w in plain.waves] == [(30.0, "runtime")]
    assert plain.estimate.minutes == 6 * (30 + OVERHEAD_MIN)


def request(stage: str, gpus: int, minutes: int, runtime: int = 60, by: str = "plugin") -> plan_jobs.JobRequest:
    return plan_jobs.JobRequest(stage, "gpu", "a", 1, gpus, 1, None, runtime, by, minutes)


def test_the_simulation_follows_the_dag_and_shares_the_caps():
    """4 trainings (20 min) each followed by its evaluation (10 min), and `all` after them: with nothing capping, one
    chain's length; with 2 GPUs, 4 x 1 GPU x 30 min of work in pairs; with a submit cap of 1, one job at a time."""
    train, evaluate = [request("train", 1, 20)], [request("evaluate", 1, 10)]
    jobs = [plan_jobs.PlannedJob("train", f"t{i}", outputs=[f"ckpt{i}"], requests=train) for i in range(4)]
    jobs += [plan_jobs.PlannedJob("evaluate", f"e{i}", inputs=[f"ckpt{i}"], outputs=[f"eval{i}"], requests=evaluate)
             for i in range(4)]  # fmt: skip
    jobs.append(plan_jobs.PlannedJob("all", "all", inputs=[f"eval{i}" for i in range(4)]))
    free = plan_estimate.simulate(jobs, plan_estimate.Caps())
    assert free == plan_estimate.Estimate(20 + 10 + 2 * OVERHEAD_MIN, 8, 4, 4, 4)
    gpus = plan_estimate.simulate(jobs, plan_estimate.Caps.of(Limits(max_gpus=Cap(2, "q")), 250))
    assert gpus == plan_estimate.Estimate(2 * (20 + 10) + 4 * OVERHEAD_MIN, 8, 2, 2, 2)
    serial = plan_estimate.simulate(jobs, plan_estimate.Caps.of(Limits(max_submit_jobs=Cap(1, "q")), 250))
    assert serial == plan_estimate.Estimate(4 * (20 + 10) + 8 * OVERHEAD_MIN, 8, 1, 1, 1)
    # a job that needs fewer GPUs passes one that waits for more (Snakemake starts any ready job that fits)
    wide = [plan_jobs.PlannedJob("train", "w", requests=[request("train", 2, 20)])]
    narrow = [plan_jobs.PlannedJob("train", f"n{i}", requests=train) for i in range(2)]
    caps = plan_estimate.Caps(gpus=2, gpus_by="max_gpus")
    assert plan_estimate.simulate([narrow[0], *wide, narrow[1]], caps).minutes == 2 * (20 + OVERHEAD_MIN)


def test_a_supervisors_jobs_count_and_run_together():
    """A supervised training holds its GPU job and its helper (SkyRL's runtime server) at once, both counted against
    the job cap: under a cap of 3 jobs two such trainings (2 jobs each) run one after the other."""
    own = request("train", 4, 30, by="supervisor")
    helper = plan_jobs.JobRequest("runtime_server", "cpu", "a", 2, 0, 1, None, 60, "supervisor")
    jobs = [plan_jobs.PlannedJob("train_supervised", f"s{i}", requests=[own, helper]) for i in range(2)]
    caps = plan_estimate.Caps.of(Limits(max_jobs=Cap(3, "QOS q MaxJobsPU")), 250)
    assert plan_estimate.simulate(jobs, caps) == plan_estimate.Estimate(2 * (30 + OVERHEAD_MIN), 4, 2, 4, 3)
    assert [
        (w.stage, w.jobs, w.slots, w.slots_by, w.waves, w.minutes_from) for w in plan_estimate.waves(jobs, caps)
    ] == [
        ("runtime_server", 2, 3, "max_jobs", 1, "runtime"),
        ("train", 2, 3, "max_jobs", 1, "expected_runtime"),
    ]


def test_a_job_above_a_cap_never_starts_and_gets_no_estimate():
    jobs = [plan_jobs.PlannedJob("train", "t", requests=[request("train", 2, 20)])]
    caps = plan_estimate.Caps.of(Limits(max_gpus=Cap(1, "q")), 250)
    assert plan_estimate.simulate(jobs, caps) == plan_estimate.Estimate(
        None, 1, problem="one planned job holds 2 GPUs, above max_gpus = 1"
    )
    (row,) = plan_estimate.waves(jobs, caps)
    assert (row.slots, row.waves, row.hours) == (0, None, None)


def test_the_job_cap_is_the_smallest_of_the_limits_and_the_profiles_jobs(tmp_path):
    assert (
        plan_estimate.profile_jobs(REPO)
        == yaml.safe_load((REPO / plan_estimate.SLURM_PROFILE).read_text())["jobs"]
        == 250
    )
    assert plan_estimate.profile_jobs(tmp_path) is None  # a workflow without ptflow's Slurm profile
    assert plan_estimate.Caps.of(None, 250).jobs == 250 and plan_estimate.Caps.of(None, 250).jobs_by == "profile jobs"
    assert plan_estimate.Caps.of(None, None) == plan_estimate.Caps()
    submit, running = Cap(300, "QOS q MaxSubmitJobsPU"), Cap(250, "QOS q MaxJobsPU")
    assert plan_estimate.Caps.of(Limits(max_submit_jobs=submit), 250).jobs_by == "profile jobs"
    assert plan_estimate.Caps.of(Limits(max_submit_jobs=submit, max_jobs=running), 250).jobs_by == "max_jobs"  # a tie
    cpus = plan_estimate.Caps.of(Limits(max_cpus=Cap(40, "a")), 250)
    assert cpus.slots(gpus=1, cpus=16) == (2, "max_cpus") and cpus.slots(gpus=0, cpus=1) == (40, "max_cpus")


@pytest.mark.parametrize(
    ("requests", "message"),
    [
        ({"evaluate": {"expected_runtime": 45}}, "resources.evaluate.expected_runtime: 45 min is above the time limit "
                                                 "of stage evaluate (30 min)"),
        ({"default": {"expected_runtime": 15}}, "resources.default.expected_runtime: 15 min is above the time limit "
                                                "of stage aggregate (10 min)"),
        ({"train": {"runtime": 60, "expected_runtime": 40}, "time_hours": 0.5}, "resources.train.expected_runtime: "
                                                                               "40 min is above the time limit of "
                                                                               "stage train (30 min)"),
    ],
)  # fmt: skip
def test_an_expected_runtime_above_the_time_limit_is_refused(tmp_path, requests, message):
    """A stage's expected_runtime, its own or the default's, is at most the runtime it gets (time_hours for train)."""
    raw = yaml.safe_load(SITE.read_text())
    for key, value in requests.items():
        if key in raw["resources"]:
            raw["resources"][key] = {**raw["resources"][key], **value}
        else:
            raw[key] = value
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError) as err:
        load_site(str(path), REPO)
    assert (
        str(err.value)
        == f"site error in {path} at {message}; Slurm ends its jobs there: lower it to at most "
        + (message.rsplit("(", 1)[1].split()[0])
    )


def test_an_agents_expected_runtime_is_checked_against_its_own_runtime(tmp_path):
    raw = yaml.safe_load(SITE.read_text())
    raw["agent_resources"]["trl-grpo"]["expected_runtime"] = 50  # its runtime is 40
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=r"at agent_resources.trl-grpo.expected_runtime: 50 min is above the time "
                                          r"limit of agent_resources.trl-grpo \(40 min\)"):  # fmt: skip
        load_site(str(path), REPO)
    raw["agent_resources"]["trl-grpo"]["expected_runtime"] = 40
    path.write_text(yaml.safe_dump(raw))
    assert load_site(str(path), REPO).raw["agent_resources"]["trl-grpo"]["expected_runtime"] == 40


def test_the_estimate_without_caps_is_the_longest_chain_and_its_latency(fresh):
    """Off a cluster (no Slurm answers) and with no stated limits only the profile's 250 jobs caps the run, above
    its 27 jobs (hf_cache and all run on the login node): the estimate is the longest chain with each of its jobs'
    latency, and counts every Slurm job."""
    _, out = fresh
    assert out["limits"]["note"].startswith("not read from Slurm: ")
    assert [out["limits"][k] for k in ("max_submit_jobs", "max_jobs", "max_gpus", "max_cpus")] == [None] * 4
    assert out["caps"] == {"jobs": 250, "jobs_by": "profile jobs", "gpus": None, "gpus_by": "", "cpus": None,
                           "cpus_by": ""}  # fmt: skip
    chain = out["longest_chain"]
    assert out["estimate"]["minutes"] == chain["minutes"] + len(chain["jobs"]) * OVERHEAD_MIN == 170 + 1.5
    assert out["estimate"]["jobs"] == out["totals"]["jobs"] == sum(w["jobs"] for w in out["waves"]) == 27
    assert {w["waves"] for w in out["waves"]} == {1}


def test_plan_prints_the_caps_it_plans_under(tmp_path):
    """`ptflow plan` on a Slurm site off the cluster: the site's stated limits are the caps, printed, and the
    estimate keeps under them (12 evaluations and 8 trainings at most 2 GPUs at once)."""
    path = site_file(tmp_path, limits={"max_gpus": 2}, evaluate={"expected_runtime": 10})
    argv = [PTFLOW, "plan", "-s", str(REPO / "Snakefile"), "--directory", str(tmp_path / "work")]
    argv += ["--profile", str(REPO / "profiles" / "local"), "--config", f"site={path}"]
    proc = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "SLURM_CONF": NO_CLUSTER})
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = proc.stdout
    assert "\nCluster limits (not read from Slurm: " in text
    assert "\n  max_gpus = 2 (GPUs in use at once; site localtest limits.max_gpus)\n" in text
    assert (
        "\n  gpu          evaluate          12    1    1       2 (max_gpus)            6   10 min expected_runtime"
        in text
    )
    m = re.search(
        r"\nWall-clock estimate under the caps: (\d+) h (\d+) min \(27 jobs, at most \d+ at once, 2 GPUs", text
    )
    assert m, text
    # at least the GPU work spread over 2 GPUs: 4 x 30 (SFT) + 4 x 2 x 40 (GRPO) + 12 x 10 (evaluations), halved
    assert int(m.group(1)) * 60 + int(m.group(2)) >= (4 * 30 + 4 * 2 * 40 + 12 * 10) / 2


def test_the_plan_says_what_an_agents_repeats_cost(tmp_path):
    """sft with ``repeats: 3`` (an override file, as a user writes it): its runs are cells and jobs of the plan
    already (``sft``, ``sft@run2``, ``sft@run3``); the plan says what they cost, from those planned jobs: the JSON under
    "repeats", the text one line per agent with repeats. The agents run once get none."""
    default = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    agents = [{**a, "repeats": 3} if a["id"] == "sft" else a for a in default["agents"]]
    override = tmp_path / "repeats.yaml"
    override.write_text(yaml.safe_dump({"agents": agents}))
    out = run_plan(tmp_path / "work", "--configfile", str(override))
    # the test's own reading of the planned jobs: every job whose agent wildcard is sft or sft@run<k>
    mine = [j for j in out["jobs"] if j["wildcards"].get("agent") in ("sft", "sft@run2", "sft@run3")]
    cells = {(j["wildcards"]["model"], j["wildcards"]["eval"], j["wildcards"]["agent"]) for j in mine}
    gpu_hours = sum(r["gpus"] * r["runtime"] / 60 for j in mine for r in j["requests"])
    models, evals = len(default["models"]), len(default["evals"])
    assert len(cells) == 3 * models * evals and {j["rule"] for j in mine} == {"train", "evaluate"}
    assert gpu_hours > 0 and len(mine) == 2 * len(cells)
    want = {"runs": 3, "cells": len(cells), "jobs": len(mine), "gpu_hours": pytest.approx(gpu_hours, abs=1e-4)}
    assert out["repeats"] == {"sft": want}

    argv = [PTFLOW, "plan", "-s", str(REPO / "Snakefile"), "--directory", str(tmp_path / "work")]
    argv += ["--profile", str(REPO / "profiles" / "local"), "--config", f"site={SITE}", "--configfile", str(override)]
    proc = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "SLURM_CONF": NO_CLUSTER})
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = f"sft: 3 runs of each cell ({len(cells)} cells, {len(mine)} jobs, {gpu_hours:.2f} GPU-hours)"
    assert [ln.strip() for ln in proc.stdout.splitlines() if "runs of each cell" in ln] == [line]


def test_a_plan_without_repeats_says_nothing_of_them(fresh):
    _, out = fresh
    assert out["repeats"] == {}
    assert "runs of each cell" not in planning.render(planning.Plan([], {}, {}, [], []))


def test_the_plan_says_what_an_evals_seeds_cost(tmp_path):
    """The default config with ``matrix.seeds: [1, 2]``, its sub eval opting out (``seeds: []``) and add's seed
    changing its data (an override file): each seed of each add cell is its own evaluate_seed job (GPU: the site's
    evaluate request), the cell's mean a seed_mean job on the login node, sub's cells one evaluate job each; the plan
    says what the seeds cost, from those planned jobs: the JSON under "seeds", the text one line per seeded eval."""
    default = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    own = {"add": {"seed_changes_data": True}, "sub": {"seeds": []}}
    evals = [{**e, **own.get(e["id"], {})} for e in default["evals"]]
    override = tmp_path / "seeds.yaml"
    override.write_text(yaml.safe_dump({"evals": evals, "matrix": {**default["matrix"], "seeds": [1, 2]}}))
    out = run_plan(tmp_path / "work", "--configfile", str(override))
    # the test's own reading: every add cell evaluated once per seed, none by rule evaluate
    cells = {(m["id"].replace("/", "--"), "add", a["id"]) for m in default["models"] for a in default["agents"]}
    seed_jobs = [j for j in out["jobs"] if j["rule"] == "evaluate_seed"]
    assert {(j["wildcards"]["model"], j["wildcards"]["eval"], j["wildcards"]["agent"]) for j in seed_jobs} == cells
    assert sorted(j["wildcards"]["seed"] for j in seed_jobs) == ["1"] * len(cells) + ["2"] * len(cells)
    assert not [j for j in out["jobs"] if j["rule"] == "evaluate" and j["wildcards"]["eval"] == "add"]
    assert len([j for j in out["jobs"] if j["rule"] == "evaluate" and j["wildcards"]["eval"] == "sub"]) == len(cells)
    means = [j for j in out["jobs"] if j["rule"] == "seed_mean"]
    assert len(means) == len(cells) and not [r for j in means for r in j["requests"]]
    evaluate = load_site(str(SITE), REPO).request("evaluate")
    gpu_hours = len(seed_jobs) * evaluate["gpus"] * evaluate["runtime"] / 60
    assert gpu_hours == pytest.approx(sum(r["gpus"] * r["runtime"] / 60 for j in seed_jobs for r in j["requests"]))
    want = {"seeds": 2, "cells": len(cells), "jobs": len(seed_jobs), "gpu_hours": pytest.approx(gpu_hours, abs=1e-4)}
    assert out["seeds"] == {"add": want}
    key = "ptflow--tiny-llama-h64/add/baseline"  # a seeded cell's state counts its seeds' jobs
    assert out["cells"][key]["state"] == "to run" and out["cells"][key]["jobs"].count("evaluate_seed") == 2

    argv = [PTFLOW, "plan", "-s", str(REPO / "Snakefile"), "--directory", str(tmp_path / "work")]
    argv += ["--profile", str(REPO / "profiles" / "local"), "--config", f"site={SITE}", "--configfile", str(override)]
    proc = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "SLURM_CONF": NO_CLUSTER})
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = f"add: 2 seeds per cell ({len(cells)} cells, {len(seed_jobs)} evaluate_seed jobs, {gpu_hours:.2f} GPU-hours)"
    assert [ln.strip() for ln in proc.stdout.splitlines() if "seeds per cell" in ln] == [line]


def test_a_plan_without_seeds_says_nothing_of_them(fresh):
    _, out = fresh
    assert out["seeds"] == {}
    assert "seeds per cell" not in planning.render(planning.Plan([], {}, {}, [], []))
