"""ptflow.jobs without Snakemake: the specs read back what they wrote, leave defaults out in one place, tell a kind's
part by the kind; the builder answers each (stage, agent) once and hands out copies; the rule values are constants
where they can be. (That every job's params of every shipped config are unchanged: test_job_params.py.)"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json

import pytest

from ptflow.config.entries import eval_from_entry
from ptflow.config.load import load
from ptflow.jobs.build import Jobs
from ptflow.jobs.rule_values import RuleError, RuleValues, sign_job_functions
from ptflow.specs import AgentCliSpec, CellRef, CheckoutAgent, EvaluateSpec, JudgeSpec, RuntimeServer, TrainSpec
from ptflow.stages.evaluate.settings import Provider, build_call
from tests.conftest import REPO

TOY_CALL = build_call(
    eval_from_entry(
        {
            "id": "add",
            "task": "ptflow",
            "max_new_tokens": 16,
            "dataset": {"source": "local", "repo": "x/y", "generator": {}},
        }
    ),  # fmt: skip
    Provider(),
)


def objects(paths):
    """FIXTURE object ids of the PostTrainBench checkout (the workflow reads them from the checkpoint's marker)."""
    return {p: hashlib.sha1(p.encode()).hexdigest() for p in sorted(paths)}


def jobs_of(configfile: str | None = None, site: str = "local", tmp_path=None) -> Jobs:
    loaded = load(REPO, [REPO / "config" / configfile] if configfile else [], [f"site={site}"], workdir=tmp_path)
    return Jobs(loaded.cfg, loaded.site, loaded.layout)


@pytest.mark.parametrize("configfile", [None, "posttrainbench-ptflow.yaml", "skyrl.yaml", "verl.yaml"])
def test_every_cell_spec_reads_back_what_it_wrote(configfile, tmp_path):
    jobs = jobs_of(configfile, "generic", tmp_path)
    cfg = jobs.cfg
    checked = 0
    for c in cfg.cells:
        agent = jobs.agent(c.agent)
        specs = [jobs.evaluate(c.model, c.eval, c.agent, objects)]
        if agent.trains:
            specs.append(jobs.train(c.model, c.eval, c.agent, objects))
        if agent.spec.agent_cli:
            specs.append(jobs.judge_panel(c.model, c.eval, c.agent))
            panel = cfg.judge_panel
            specs += [jobs.judge(c.model, c.eval, c.agent, objects, j, k) for j, k in (panel.votes() if panel else [])]
        for spec in specs:
            params = spec.to_params()
            again = type(spec).from_params(copy.deepcopy(params))
            assert again == spec and repr(again.to_params()) == repr(params), f"{type(spec).__name__} of {c.key}"
            checked += 1
    assert checked >= len(cfg.cells)


def test_the_kinds_part_is_told_by_the_kind_not_the_shape(tmp_path, monkeypatch):
    monkeypatch.setenv("PTFLOW_ACCOUNT", "test-account")  # what fasrc.yaml reads
    cli = jobs_of("posttrainbench-ptflow.yaml", "generic", tmp_path)
    c = next(c for c in cli.cfg.cells if cli.agent(c.agent).spec.agent_cli)
    spec = TrainSpec.from_params(cli.train(c.model, c.eval, c.agent, objects).to_params())
    assert isinstance(spec.agent, AgentCliSpec) and spec.agent_cli is spec.agent and spec.runtime_server is None

    skyrl = jobs_of("skyrl.yaml", "fasrc", tmp_path)  # the shipped site with a runtime_server request
    c = next(c for c in skyrl.cfg.cells if "runtime_server" in skyrl.agent(c.agent).spec.site_requests)
    spec = TrainSpec.from_params(skyrl.train(c.model, c.eval, c.agent, objects).to_params())
    assert isinstance(spec.agent, RuntimeServer) and spec.runtime_server.coord_base.endswith(".skyrl_jobs")
    assert spec.agent_cli is None

    # the same kind on a site without the server's request: no server part (preflight names the missing request)
    local = jobs_of("skyrl.yaml", "local", tmp_path)
    assert local.train(c.model, c.eval, c.agent, objects).agent is None


def test_defaults_are_left_out_and_set_values_kept_in_their_place():
    base = dict(
        id="claude", cli="claude", model="m", hours=10, grace_minutes=5.0, command=None, keys=["K"],
        trace_dir="t", hf_home="h", evals_cache="e", eval_task="task", max_new_tokens=16, eval_call=TOY_CALL,
    )  # fmt: skip
    plain = AgentCliSpec(**base).to_params()
    assert list(plain)[-1] == "eval_call"
    for key in ("on_restart", "sync_minutes", "cli_version", "base_url", "grader_keys", "eval_test_parquet"):
        assert key not in plain
    full = AgentCliSpec(**base, on_restart="fresh", sync_minutes=2.0, cli_version="1.0", grader_keys=["G"]).to_params()
    assert list(full)[-4:] == ["on_restart", "sync_minutes", "cli_version", "grader_keys"]
    without_task = {k: v for k, v in base.items() if not k.startswith(("eval", "max"))}
    checkout = AgentCliSpec(**without_task, posttrainbench=CheckoutAgent("gsm8k", None, 1, {}))
    assert list(checkout.to_params())[-1] == "posttrainbench" and "eval_call" not in checkout.to_params()

    cell = CellRef("org/m", "org--m", "gsm8k", "sft")
    assert "run" not in cell.to_params() and CellRef(*cell.to_params().values(), run=2).to_params()["run"] == 2
    judge = JudgeSpec(None, [], CellRef("org/m", "org--m", "gsm8k", "sft@run2", 2)).to_params()
    assert "run" not in judge["cell"] and list(judge) == ["judge", "keys", "cell"]
    evaluate = EvaluateSpec(cell, TOY_CALL, "main", "h", "e").to_params()
    assert list(evaluate) == ["cell", "call", "model_revision", "hf_home", "evals_cache"]


def test_each_request_is_kept_once_and_runtimes_cannot_be_changed_by_a_job(tmp_path):
    jobs = jobs_of(None, "alps", tmp_path)
    for agent in [None, *jobs.cfg.agents.values()]:
        assert jobs.request("train", agent) is jobs.request("train", agent)
        assert jobs.plugin_resources("train", agent, 2) is jobs.plugin_resources("train", agent, 2)
    runtime = jobs.runtime("evaluate", None)
    assert runtime is not None  # alps runs every job in its image
    # one frozen value shared by the stage's jobs: a job cannot change what the next one gets
    with pytest.raises(dataclasses.FrozenInstanceError):
        runtime.binds = (*runtime.binds, "/elsewhere")
    assert isinstance(runtime.binds, tuple) and "/elsewhere" not in jobs.runtime("evaluate", None).binds


def test_rule_values_are_constants_where_every_job_gets_the_same(tmp_path):
    values = RuleValues(jobs_of(None, "alps", tmp_path))
    assert isinstance(values.threads("evaluate"), int)
    resources = values.resources("evaluate")
    assert isinstance(resources["slurm_partition"], str)
    assert callable(resources["runtime"]) == ("runtime" in values.jobs.request("evaluate").attempt_scaled)
    with pytest.raises(RuleError, match="add it to ptflow.config.rules.RULE_REQUESTS"):
        values.threads("no_such_rule")
    assert values.supervised_held("train_supervised") != {}  # a Slurm site counts a supervisor's jobs
    assert RuleValues(jobs_of(None, "local", tmp_path)).supervised_held("train_supervised") == {}


def test_per_job_functions_are_signed_once_with_what_they_take():
    """Snakemake reads a signed function's parameters from the function instead of inspect.signature per job (the
    contract test pins that Snakemake honours it)."""
    from snakemake.common import FUNC_OVERWRITE_PARAMS_ATTR, get_function_params

    def get_spec(wildcards, attempt):
        return attempt

    def helper(wildcards):
        return wildcards

    namespace = {"get_spec": get_spec, "helper": helper, "get_value": 3}
    assert sign_job_functions(namespace) == ["get_spec"]
    assert hasattr(get_spec, FUNC_OVERWRITE_PARAMS_ATTR) and not hasattr(helper, FUNC_OVERWRITE_PARAMS_ATTR)
    assert list(get_function_params(get_spec)) == ["wildcards", "attempt"]


def test_checkout_baseline_and_instruct_cells_are_tried_once_the_agents_get_the_ladder(tmp_path):
    """run_baseline.sh evaluates the untouched models once; run_task.sh steps an agent's model down its ladder."""
    jobs = jobs_of("posttrainbench.yaml", "generic", tmp_path)
    kinds = set()
    for c in jobs.cfg.cells:
        call = jobs.evaluate(c.model, c.eval, c.agent, objects).call.to_params()
        agent = jobs.agent(c.agent)
        kinds.add(agent.kind)
        if agent.trains:
            assert "tries" not in call and call["retry_max_tokens"], (c.key, call)
        else:
            assert call["tries"] == 1 and "retry_max_tokens" not in call, (c.key, call)
    assert {"baseline", "instruct", "cli-agent"} <= kinds


def test_an_evaluate_job_adopts_only_a_staged_evaluation_for_its_params(tmp_path):
    """RuleValues.adopts_evaluation (the evaluate rule's size: a CPU job of seconds or a GPU evaluation): the params
    are asked only once something is staged, and the answer is kept per staged evaluation."""
    from pathlib import Path

    from ptflow.stages.evaluate import in_train_job

    generic = jobs_of("posttrainbench-ptflow.yaml", "generic", tmp_path)
    # the site's results dir is absolute (/shared/$USER/...): the cell's files go under tmp_path, so no other run of
    # this test (or order of tests) finds an evaluation staged before it
    layout = dataclasses.replace(generic.layout, results=str(tmp_path / "results"))
    values = RuleValues(Jobs(generic.cfg, generic.site, layout))
    jobs = values.jobs
    c = next(c for c in jobs.cfg.cells if jobs.agent(c.agent).spec.agent_cli)
    cell, asked = (c.model, c.eval, c.agent), []

    def params():
        asked.append(cell)
        return jobs.evaluate(*cell, objects).to_params()

    assert values.adopts_evaluation(*cell, params) is False and asked == []  # nothing staged: no params asked
    manifest = Path(jobs.layout.manifest(*cell))
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text("{}")

    def evaluate(eval_json: Path, inspect_dir: Path) -> bool:
        eval_json.write_text('{"status": "scored"}')
        return True

    assert in_train_job.stage_evaluation(jobs.layout.eval_json(*cell), params(), manifest, evaluate, log=print)
    asked.clear()
    assert values.adopts_evaluation(*cell, params) and values.adopts_evaluation(*cell, params) and len(asked) == 1
    other = next(c for c in jobs.cfg.cells if not jobs.agent(c.agent).spec.agent_cli)
    assert values.adopts_evaluation(other.model, other.eval, other.agent, params) is False


def test_a_train_job_evaluates_with_the_evaluate_jobs_params(tmp_path):
    """Rule train's evaluation handoff (beside the spec in its params value; agent cells evaluate in their own
    allocation): the evaluate job's params, so the evaluate job adopts what the train job made; other kinds evaluate
    only in their evaluate job."""
    jobs = jobs_of("posttrainbench-ptflow.yaml", "generic", tmp_path)
    kinds = set()
    for c in jobs.cfg.cells:
        handoff = jobs.evaluation_in_train_job(c.model, c.eval, c.agent, objects)
        if not jobs.agent(c.agent).spec.evaluates_in_train_job:
            assert handoff is None
            continue
        kinds.add(jobs.agent(c.agent).kind)
        if jobs.cfg.evals[c.eval].seeded:  # each seed's evaluate_seed params (the test below)
            continue
        assert handoff == {
            "eval_json": jobs.layout.eval_json(c.model, c.eval, c.agent),
            "job": jobs.evaluate(c.model, c.eval, c.agent, objects).to_params(),
        }
    assert kinds == {"cli-agent"}


def test_an_evaluate_seed_job_is_light_where_it_adopts_or_the_first_seed_skips_it(tmp_path):
    """RuleValues.seed_is_light (rule evaluate_seed's size): a seed the train job evaluated is adopted (CPU); a later
    seed that the first seed's file skips (a greedy model, an eval whose seed only drives sampling) is a CPU job; the
    first seed and a later seed with nothing to decide from are evaluations (GPU)."""
    from pathlib import Path

    from ptflow.stages.evaluate import in_train_job

    generic = jobs_of("posttrainbench-ptflow.yaml", "generic", tmp_path)
    layout = dataclasses.replace(generic.layout, results=str(tmp_path / "results"))
    values = RuleValues(Jobs(generic.cfg, generic.site, layout))
    jobs = values.jobs
    c = next(c for c in jobs.cfg.cells if jobs.agent(c.agent).spec.agent_cli and c.eval == "gsm8k")
    cell = (c.model, c.eval, c.agent)
    first, later = jobs.cfg.evals["gsm8k"].seeds[:2]
    assert not jobs.cfg.evals["gsm8k"].seed_changes_data

    def params(seed):
        return lambda: jobs.evaluate(*cell, objects, seed=seed).to_params()

    assert not values.seed_is_light(*cell, first, params(first)) and not values.seed_is_light(
        *cell, later, params(later)
    )
    manifest = Path(jobs.layout.manifest(*cell))
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text("{}")

    def evaluate(eval_json: Path, inspect_dir: Path) -> bool:
        eval_json.write_text(json.dumps({"status": "scored", "decoding": "greedy", "seed": first}))
        return True

    first_json = jobs.layout.seed_eval_json(*cell, first)
    assert in_train_job.stage_evaluation(first_json, params(first)(), manifest, evaluate, log=print)
    assert values.seed_is_light(*cell, first, params(first))  # adopted
    assert not values.seed_is_light(*cell, later, params(later))  # the first seed's file is not there yet
    in_train_job.adopt(first_json, Path(first_json).parent / "inspect", log=print)
    assert values.seed_is_light(*cell, later, params(later))  # greedy: skipped by the first seed's result
    assert not values.seed_is_light(*cell, first, params(first))  # adopted already: nothing staged


def test_a_train_job_evaluates_each_seed_of_a_seeded_eval_in_order(tmp_path):
    """Rule train's evaluation handoff for a seeded eval: each seed's evaluate_seed params and file, the first seed
    first, and whether the seed changes the data (gpqamain: the skip rule of a greedy model does not apply)."""
    jobs = jobs_of("posttrainbench-ptflow.yaml", "generic", tmp_path)
    for eval_id in ("gsm8k", "gpqamain", "healthbench"):
        c = next(c for c in jobs.cfg.cells if jobs.agent(c.agent).spec.agent_cli and c.eval == eval_id)
        handoff = jobs.evaluation_in_train_job(c.model, c.eval, c.agent, objects)
        e = jobs.cfg.evals[eval_id]
        assert [s["seed"] for s in handoff["seeds"]] == list(e.seeds) and handoff["seed_changes_data"] is (
            eval_id == "gpqamain"
        )
        for s in handoff["seeds"]:
            assert s["eval_json"] == jobs.layout.seed_eval_json(c.model, c.eval, c.agent, s["seed"])
            assert s["job"] == jobs.evaluate(c.model, c.eval, c.agent, objects, seed=s["seed"]).to_params()
    assert [len(jobs.cfg.evals[e].seeds) for e in ("gsm8k", "healthbench", "arenahardwriting")] == [5, 1, 1]
