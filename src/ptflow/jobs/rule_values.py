"""What ``workflow/rules/common.smk`` hands its rules beside the params: threads and resources as Snakemake takes
them from a rule (:class:`RuleValues`: a value where every job of the rule gets the same, else a function of the job's
wildcards and attempt, answered from :class:`~ptflow.jobs.build.Jobs`' caches), and the rules' input files and the
run's targets (:class:`RuleInputs`). common.smk keeps only thin ``get_*`` functions over these.

Snakemake reads the parameters of an input, param or resource function through ``inspect.signature`` twice per
job (which arguments to pass it): ~0.1 ms each, a tenth of a 10,000-cell dry-run. :func:`signed` states them once
with Snakemake's own ``overwrite_function_params`` (what its ioutils helpers use); tests/unit/test_snakemake_contract.py
pins that Snakemake then passes what was stated.
"""

from __future__ import annotations

import inspect
import json
import re
import sys
from collections.abc import Callable, Collection
from pathlib import Path

from ptflow.cluster import envs, images
from ptflow.config import tasks
from ptflow.config.entries import Agent
from ptflow.config.kinds import TRAIN_DATA_ALWAYS, TRAIN_DATA_IF_PARQUET
from ptflow.config.matrix import Cell
from ptflow.config.naming import RUN_SEPARATOR
from ptflow.config.rules import ADOPT_REQUEST, request_of
from ptflow.jobs.build import Jobs
from ptflow.stages.evaluate import in_train_job


class RuleError(ValueError):
    """A rule the table of ptflow.config.rules does not know (the workflow turns it into a WorkflowError)."""


def signed(func: Callable) -> Callable:
    from snakemake.common import overwrite_function_params

    overwrite_function_params(func, inspect.signature(func).parameters)
    return func


def sign_job_functions(namespace: dict) -> list[str]:
    """:func:`signed` for every per-job function of a workflow's namespace (by the workflow's naming: ``get_*``);
    the names signed."""
    names = [n for n, f in namespace.items() if n.startswith("get_") and inspect.isfunction(f)]
    for name in names:
        signed(namespace[name])
    return names


def rule_request(rule: str) -> str:
    try:
        return request_of(rule)
    except ValueError as exc:
        raise RuleError(str(exc)) from None


def slot_of(wildcards) -> str | None:
    return wildcards.agent if "agent" in wildcards.keys() else None


def ancient(path: str):
    """Snakemake's ``ancient()``: a newer copy of the file (a rebuilt image, a refreshed cache, a re-made checkout
    marker) does not rerun the jobs that read it; only a missing one is made."""
    from snakemake.io import ancient as snakemake_ancient

    return snakemake_ancient(path)


class RuleValues:
    """The per-rule factories of ``common.smk`` (``threads_of``, ``resources_of``, ...) over one :class:`Jobs`."""

    def __init__(self, jobs: Jobs):
        self.jobs = jobs
        self._adopts: dict[tuple, bool] = {}  # (cell, record's and manifest's mtimes) -> adopts_evaluation's answer

    def agent_of(self, wildcards) -> Agent | None:
        slot = slot_of(wildcards)
        return None if slot is None else self.jobs.agent(slot)

    def rule_agents(self, request: str, agent_ids: list[str] | None = None) -> list[Agent | None]:
        """The agents whose requests a rule's jobs may get: only train requests differ per agent (all agents, or
        those of the rule)."""
        if request != "train":
            return [None]
        agents = self.jobs.cfg.agents
        if agent_ids is None:
            return list(agents.values())
        return [agents[a] for a in agent_ids] or [None]

    def supervised_agents(self, supervised: bool = True) -> list[str]:
        """Agents whose train job a login-node supervisor submits (ptflow.cluster.supervise): every agent on sites
        with infra_retries, and kinds that submit a helper job first (SkyRL's runtime server). The others' train jobs
        are the plugin's (``supervised=False``)."""
        agents = self.jobs.cfg.agents.values()
        return [a.id for a in agents if a.trains and (self.jobs.site.supervises("train", a) is not None) == supervised]

    def agent_constraint(self, supervised: bool) -> str:
        """The agent wildcard of the train rules, disjoint: plugin jobs (train) or login-node supervisors
        (train_supervised), each agent's repeats with it (``<id>@run<k>``); a pattern that matches nothing where there
        are none."""
        ids = self.supervised_agents(supervised)
        if not ids:
            return "(?!)"
        return "(?:" + "|".join(re.escape(i) for i in ids) + ")" + f"(?:{re.escape(RUN_SEPARATOR)}[1-9][0-9]*)?"

    def eval_constraint(self, seeded: bool) -> str:
        """The eval wildcard of the evaluation rules, disjoint: one evaluate job per cell of an unseeded eval, one
        evaluate_seed job per seed and a seed_mean job per cell of a seeded one; a pattern that matches nothing
        where there are none."""
        ids = [e.id for e in self.jobs.cfg.evals.values() if e.seeded == seeded]
        return "|".join(re.escape(i) for i in ids) if ids else "(?!)"

    @staticmethod
    def rescorer_constraint() -> str:
        """The scorer wildcard of rule rescore: the rescorers ptflow has (``ptflow.config.tasks.RESCORERS``)."""
        return "|".join(re.escape(name) for name in tasks.RESCORERS)

    def threads(self, rule: str, agents: list[str] | None = None):
        """A number where every agent of the rule gets the same, else per job."""
        request = rule_request(rule)
        values = {self.jobs.request(request, a).threads for a in self.rule_agents(request, agents)}
        if len(values) == 1:
            return values.pop()

        @signed
        def threads(wildcards):
            return self.jobs.request(request, self.agent_of(wildcards)).threads

        return threads

    def resources(self, rule: str, agents: list[str] | None = None) -> dict:
        """The plugin's resources of a rule's request; keys are the union over the rule's agents. A value the same for
        every agent and attempt is given as it is (Snakemake then evaluates nothing per job); the others (per agent,
        or grown by the attempt) per job, from the cache."""
        request = rule_request(rule)
        requests = [self.jobs.request(request, a) for a in self.rule_agents(request, agents)]
        tables = [r.snakemake_resources() for r in requests]
        keys = sorted({k for t in tables for k in t})

        def value_of(key):
            @signed
            def value(wildcards, attempt):
                return self.jobs.plugin_resources(request, self.agent_of(wildcards), attempt).get(key)

            return value

        def constant(key):
            if any(key in r.attempt_scaled for r in requests):
                return False
            first = tables[0].get(key)
            return all(key in t and type(t[key]) is type(first) and t[key] == first for t in tables)

        return {key: tables[0][key] if constant(key) else value_of(key) for key in keys}

    def adopts_evaluation(
        self, model: str, eval_id: str, slot: str, evaluate_params: Callable[[], dict], seed: int | None = None
    ) -> bool:
        """Whether the cell's train job left an evaluation made in its allocation that its evaluate job (``seed``:
        that seed's evaluate_seed job) can adopt (ptflow.stages.evaluate.in_train_job): then the job is a CPU job of
        seconds, else a GPU evaluation. Snakemake asks again when the job is ready to run (after the train job);
        each resource of a job asks, so the answer is kept per staged evaluation. ``evaluate_params``: the job's
        params, asked only once an evaluation is staged (the params of a checkout eval need the checkout, which may
        not exist before)."""
        if not self.jobs.agent(slot).spec.evaluates_in_train_job:
            return False
        layout, cell = self.jobs.layout, (model, eval_id, slot)
        eval_json = layout.eval_json(*cell) if seed is None else layout.seed_eval_json(*cell, seed)
        stamp = in_train_job.staged_stamp(eval_json, layout.manifest(*cell))
        if stamp is None:
            return False
        key = (cell, seed, stamp)
        if key not in self._adopts:
            why_not = in_train_job.why_not_adoptable(eval_json, evaluate_params(), layout.manifest(*cell))
            self._adopts[key] = why_not is None
        return self._adopts[key]

    def seed_is_light(self, model: str, eval_id: str, slot: str, seed: int, params: Callable[[], dict]) -> bool:
        """Whether an evaluate_seed job needs no GPU: it adopts its train job's evaluation of the seed, or (a later
        seed, asked again once the first seed's file exists) it is skipped by the first seed's result
        (ptflow.stages.evaluate.seeds.why_skipped)."""
        if self.adopts_evaluation(model, eval_id, slot, params, seed=seed):
            return True
        from ptflow.stages.evaluate import seeds

        e = self.jobs.cfg.evals[eval_id]
        if seed == e.seeds[0]:
            return False
        first = Path(self.jobs.layout.seed_eval_json(model, eval_id, slot, e.seeds[0]))
        try:
            return seeds.why_skipped(json.loads(first.read_text()), e.seed_changes_data) is not None
        except (OSError, ValueError):
            return False

    def evaluate_threads(self, adopts: Callable) -> Callable:
        """Rule evaluate's threads per job: the adoption request's where ``adopts(wildcards)`` (the cell's train
        job evaluated in its allocation: ptflow.stages.evaluate.in_train_job), else the evaluate request's."""

        @signed
        def threads(wildcards):
            return self.jobs.request(ADOPT_REQUEST if adopts(wildcards) else "evaluate").threads

        return threads

    def evaluate_resources(self, adopts: Callable) -> dict:
        """Rule evaluate's resources per job (keys: the union of both requests'), as :meth:`evaluate_threads`
        chooses. The job's script asks the same question of the same files, which nothing changes between (the
        staged evaluation stays whole until adopted), so a job sized to adopt adopts."""
        keys = sorted(
            set(self.jobs.request("evaluate").snakemake_resources())
            | set(self.jobs.request(ADOPT_REQUEST).snakemake_resources())
        )

        def value_of(key):
            @signed
            def value(wildcards, attempt):
                request = ADOPT_REQUEST if adopts(wildcards) else "evaluate"
                return self.jobs.plugin_resources(request, None, attempt).get(key)

            return value

        return {key: value_of(key) for key in keys}

    def supervised_held(self, rule: str) -> dict:
        """gpus_total/cpus_total of the Slurm jobs a supervisor rule submits itself (its own and its agent kind's
        helper jobs): they count against the run's caps like the plugin's jobs (ptflow.cluster.limits)."""
        if self.jobs.site.scheduler != "slurm":
            return {}
        rule_request(rule)

        def held(key):
            @signed
            def value(wildcards):
                agent = self.agent_of(wildcards)
                tables = [self.jobs.plugin_resources(s, None, 1) for s in agent.spec.site_requests]
                return sum(t.get(key, 0) for t in (self.jobs.plugin_resources("train", agent, 1), *tables))

            return value

        return {"gpus_total": held("gpus_total"), "cpus_total": held("cpus_total")}

    def image_resources(self, image_request: Callable) -> dict:
        """Per image: its request, image or convert (keys are the union of both requests' resources)."""
        keys = sorted(
            set(self.jobs.request("image").snakemake_resources())
            | set(self.jobs.request("convert").snakemake_resources())
        )

        def value_of(key):
            @signed
            def value(wildcards, attempt):
                return self.jobs.plugin_resources(image_request(wildcards), None, attempt).get(key)

            return value

        return {key: value_of(key) for key in keys}


class RuleInputs:
    """The input files of the rules whose inputs depend on the job (the ``get_*_input`` functions of ``common.smk``)
    and the run's targets, over one :class:`Jobs`. The inputs a newer copy of must not rerun finished cells are
    :func:`ancient`. ``accepted``: the keys of the cells whose failure an operator accepted (scoring.overrides'
    ``accepted``, ``ptflow.results.overrides.accepted_cells``): none of their files is a target of the run or an
    input of rule aggregate, so none of their jobs runs again (aggregate counts them at their fallback).
    ``spend`` (``ptflow.config.spend.SpendSettings``): where the matrix's spend so far has reached ``spend.max_usd``
    when the workflow is parsed (:attr:`capped`, ``ptflow.stages.train.agent.spend.matrix_cap_reached``), the agent
    cells not started leave the run the same way, before any allocation is taken for them (``announce``: say so in one
    line, the driver's process only); aggregate counts them at their fallback, "not started: matrix spend cap
    reached"."""

    def __init__(self, jobs: Jobs, accepted: Collection[str] = (), spend=None, announce: bool = False):
        self.jobs = jobs
        self.cfg, self.layout, self.rt = jobs.cfg, jobs.layout, jobs.rt
        self.accepted = frozenset(accepted)
        cap = spend.matrix_cap if spend is not None else None
        self.capped = None
        if cap is not None:  # the agent cells' spend module (and its imports: 20 ms) only where a matrix cap is set
            from ptflow.config.spend import agent_cells
            from ptflow.stages.train.agent.spend import matrix_cap_reached

            self.capped = matrix_cap_reached(cap, agent_cells(self.cfg, self.layout))
        if self.capped and announce:
            print(self.capped.line(), file=sys.stderr)

    def run_cells(self) -> list[Cell]:
        """The matrix's cells that this run makes: all but the accepted ones and those the matrix cap keeps from
        starting."""
        waiting = frozenset(self.capped.waiting if self.capped else ())
        return [c for c in self.cfg.cells if c.key not in self.accepted and c.key not in waiting]

    def scoring(self, spec) -> dict:
        """Rule aggregate's scoring params (``spec``: Jobs.scoring's ScoringSpec) with each cell the matrix cap keeps
        from starting marked in ``expected`` (its fallback's reason; a run the cap does not stop: unchanged)."""
        params = spec.to_params()
        if not self.capped:
            return params
        waiting = set(self.capped.waiting)
        expected = [{**e, "not_started": self.capped.note()} if f"{e['model']}/{e['eval']}/{e['agent']}" in waiting
                    else e for e in params["expected"]]  # fmt: skip
        return {**params, "expected": expected}

    def checkout(self) -> dict:
        """PostTrainBench's checkout marker: a re-made marker (a new commit) reruns only the cells whose paths' ids
        changed (their params)."""
        return {"checkout": ancient(self.layout.posttrainbench_marker())}

    def images(self, stage: str, agent: Agent | None) -> dict:
        """The image files of a stage's job (an agent's for train), on sites whose runtime is a container: a
        rebuilt image does not make finished 10-hour cells stale."""
        files = images.image_inputs(self.rt, images.image_for(self.rt, stage, agent))
        return {key: ancient(path) for key, path in files.items()}

    def envs(self, agent: Agent) -> dict:
        """The software environments (rule env) this agent's train job runs with."""
        return {f"env_{n}": self.layout.env_record(n) for n in envs.envs_for(self.rt, agent)}

    def env_build(self, env: str) -> dict:
        """An overlay venv sits on its image: the image (and EDF file) first."""
        spec = envs.env_spec(self.rt, env)
        if spec["build"] != "overlay-venv":
            return {}
        image = spec["image"] if images.needs_images(self.rt) else None
        return {key: ancient(path) for key, path in images.image_inputs(self.rt, image).items()}

    def evaluation_data(self, eval_id: str) -> dict:
        """The toy task's test parquet, the PostTrainBench checkout (its code loads its own data), or the marker of
        everything else a task reads from the caches."""
        e = self.cfg.evals[eval_id]
        if e.uses_parquet:
            return {"test": self.layout.data(eval_id, "test")}
        if e.from_checkout:  # a refreshed cache does not rerun finished cells
            return {**self.checkout(), "ptb_cache": ancient(self.layout.posttrainbench_cache_marker())}
        return {"eval_data": self.layout.eval_data_marker(eval_id)}

    def train(self, model: str, eval_id: str, slot: str) -> dict:
        """A train job's inputs: the base model's cache marker, its training data where the kind reads it, what the
        final evaluation reads (an agent CLI's evaluate.py reads the same), the parent's manifest (a ``from:``
        chain), its images and software environments."""
        agent = self.jobs.agent(slot)
        if not agent.trains:
            raise RuleError(f"agent {agent.id!r} is a baseline: it has no train job")
        inputs = {"base": self.layout.model_marker(model)}
        data = agent.spec.train_data
        if data == TRAIN_DATA_ALWAYS or (data == TRAIN_DATA_IF_PARQUET and self.cfg.evals[eval_id].uses_parquet):
            inputs["data"] = self.layout.data(eval_id, "train")
        if agent.spec.agent_cli:
            inputs.update(self.evaluation_data(eval_id))
        parent = self.cfg.parent_slot(slot)
        if parent:
            inputs["parent"] = self.layout.manifest(model, eval_id, parent)
        return {**inputs, **self.images("train", agent), **self.envs(agent)}

    def evaluate(self, model: str, eval_id: str, slot: str) -> dict:
        """A trained cell's manifest, or the model an untrained cell evaluates; its data; its image."""
        agent = self.jobs.agent(slot)
        if agent.trains:
            inputs = {"manifest": self.layout.manifest(model, eval_id, slot)}
        else:
            inputs = {"base": self.layout.model_marker(self.cfg.evaluated_model(Cell(model, eval_id, slot)).name)}
        return {**inputs, **self.evaluation_data(eval_id), **self.images("evaluate", agent)}

    def evaluate_seed(self, model: str, eval_id: str, slot: str, seed: int) -> dict:
        """One evaluation seed: what the cell's evaluation reads, and for a later seed the first seed's file (its
        stage, its decoding, whether it succeeded: run_final_eval.sh's order)."""
        first = self.cfg.evals[eval_id].seeds[0]
        later = {} if seed == first else {"first_seed": self.layout.seed_eval_json(model, eval_id, slot, first)}
        return {**self.evaluate(model, eval_id, slot), **later}

    def seed_mean(self, model: str, eval_id: str, slot: str) -> list[str]:
        """A seeded cell's seeds' files, the first seed first."""
        return [self.layout.seed_eval_json(model, eval_id, slot, s) for s in self.cfg.evals[eval_id].seeds]

    def judge_run(self, model: str, eval_id: str, slot: str, judge_id: str) -> dict:
        """One vote: the checkout (for its evals' judge prompt), the cell's manifest, and the agent's image where
        the judge is agentic (its CLI runs there, a CPU job)."""
        panel = self.jobs.cell_panel(eval_id)  # a v1.1 checkout's cells: its own panel (Jobs.cell_panel)
        judge = next((j for j in panel.judges if j.id == judge_id), None) if panel else None
        agentic = bool(judge and judge.settings.get("agent"))
        return {
            **(self.checkout() if self.cfg.evals[eval_id].from_checkout else {}),
            "manifest": self.layout.manifest(model, eval_id, slot),
            **(self.images("train", self.jobs.agent(slot)) if agentic else {}),
        }

    def judge(self, model: str, eval_id: str, slot: str) -> dict:
        """The panel's decision: the cell's manifest (its trace) and every vote of the panel (none: no judge)."""
        return {"manifest": self.layout.manifest(model, eval_id, slot), "votes": self.judge_votes(model, eval_id, slot)}

    def judge_votes(self, model: str, eval_id: str, slot: str) -> list[str]:
        """The vote files of one cell: each run of each judge of its panel (a cloned v1.1 checkout's cells: after the
        checkout checkpoint, through rule judge's input)."""
        panel = self.jobs.cell_panel(eval_id)
        votes = panel.votes() if panel else []
        return [self.layout.judge_vote_json(model, eval_id, slot, j, k) for j, k in votes]

    def checkout_cache(self) -> dict:
        """The checkout, and the standard image its download script runs in (where the site builds that image)."""
        image = self.jobs.download_image()
        return {**self.checkout(), **{k: ancient(v) for k, v in images.image_inputs(self.rt, image).items()}}

    def aggregate_checkout(self) -> dict:
        """A run whose evals come from the checkout is scored as PostTrainBench's leaderboard scores it, from the
        checkout's factors.json: the marker says where the checkout is (a new commit re-aggregates: cheap)."""
        if any(self.cfg.evals[c.eval].from_checkout for c in self.cfg.cells):
            return {"checkout": self.layout.posttrainbench_marker()}
        return {}

    def image_recipe(self, name: str, spec_of: Callable[[], dict], basedir: str) -> list:
        """What an image is built from: the checkout's marker for a recipe of the checkout, else the recipe file of
        its spec (``spec_of()``, asked only then; none for a registry import)."""
        if self.jobs.checkout_recipe(name) is not None:
            return [ancient(self.layout.posttrainbench_marker())]
        spec = spec_of()
        return [str(Path(basedir) / spec["recipe"])] if spec.get("recipe") else []

    def eval_jsons(self) -> list[str]:
        return [self.layout.eval_json(c.model, c.eval, c.agent) for c in self.run_cells()]

    def judge_jsons(self) -> list[str]:
        """The judge verdicts of the agent-CLI cells (traces checked for contamination / disallowed models)."""
        cells = [c for c in self.run_cells() if self.cfg.agent_for(c.agent).spec.agent_cli]
        return [self.layout.judge_json(c.model, c.eval, c.agent) for c in cells]

    def judge_vote_jsons(self) -> list[str]:
        """Every vote file of the judged cells (targets themselves: a deleted one is judged again, alone)."""
        cells = [c for c in self.run_cells() if self.cfg.agent_for(c.agent).spec.agent_cli]
        known = [c for c in cells if self.jobs.panel_known(c.eval)]  # the others' votes: rule judge's input
        return [path for c in known for path in self.judge_votes(c.model, c.eval, c.agent)]

    def rescore_jsons(self) -> list[str]:
        """Each cell's stored inspect log scored again by its eval's rescorers (``evals[].rescore``)."""
        return [
            self.layout.rescore_json(c.model, c.eval, c.agent, scorer)
            for c in self.run_cells()
            for scorer in self.cfg.evals[c.eval].rescore
        ]

    def seed_eval_jsons(self) -> list[str]:
        """Every seed's file of the seeded evals' cells (targets themselves: a deleted one is evaluated again)."""
        seeded = [c for c in self.run_cells() if self.cfg.evals[c.eval].seeded]
        return [path for c in seeded for path in self.seed_mean(c.model, c.eval, c.agent)]

    def final_outputs(self) -> list[str]:
        """Rule all's targets. Every cell's eval.json (and judge.json) is a target itself: Snakemake does not redo a
        missing intermediate file when what was made from it (summary.csv) is up to date, so a deleted eval.json would
        otherwise stay deleted."""
        layout = self.layout
        return [
            layout.cache_marker(),
            *self.eval_jsons(),
            *self.seed_eval_jsons(),
            *self.judge_vote_jsons(),
            *self.judge_jsons(),
            *self.rescore_jsons(),
            layout.summary(),
            layout.agents_csv(),
            layout.leaderboard(),
            layout.heatmap(),
            layout.report_index(),
        ]
