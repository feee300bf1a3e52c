"""Every job's spec and request, built from the config, the site and the layout by one object.

:class:`Jobs` is what ``workflow/rules/common.smk`` asks for a job's params, threads, resources and runtime. A
matrix of ten thousand cells asks the same few questions ten thousand times (the request of a stage and agent, the
runtime of a stage and agent), so each answer is kept on (stage, agent id[, attempt]), frozen or handed out as a
serialised copy. It needs no Snakemake: tests build it from a loaded config.

PostTrainBench's checkout is a checkpoint: the git object ids of the paths a cell uses are known only once it ran.
The builder takes them through ``objects`` (paths -> ids), which the workflow reads from the checkpoint's marker.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ptflow.cluster import envs, images
from ptflow.config import posttrainbench as ptb
from ptflow.config.entries import Agent, Eval, Model
from ptflow.config.judges import JudgePanel
from ptflow.config.layout import Layout
from ptflow.config.matrix import Cell, Config
from ptflow.config.request import Request
from ptflow.config.sites import Site
from ptflow.config.spend import SpendSettings, train_spend
from ptflow.launch.skyrl import JOBS_DIR, ServerSite
from ptflow.specs import (
    AgentCliSpec,
    CellRef,
    CheckoutAgent,
    CheckoutCall,
    CheckoutFiles,
    EvaluateSpec,
    JudgePanelSpec,
    JudgeSpec,
    Multinode,
    Params,
    RuleParams,
    RuntimeServer,
    ScoringSpec,
    StageRuntime,
    Supervise,
    TrainSpec,
)
from ptflow.stages.evaluate.settings import Provider, build_call
from ptflow.stages.posttrainbench import answer_sandbox, judge_panels

Objects = Callable[[Iterable[str]], dict[str, str]]


def _no_objects(paths: Iterable[str]) -> dict[str, str]:
    """A cell without the checkout in its job's input asks for no object id."""
    raise JobsError(f"no PostTrainBench checkout in this job's input for {sorted(paths)}")


class JobsError(ValueError):
    """A job that cannot be built from this config and site (the workflow turns it into a WorkflowError)."""


def _key(request: str, agent: Agent | None) -> tuple[str, str | None]:
    """What a request depends on: its name and, for train, the agent's id."""
    return request, agent.id if agent is not None else None


class Jobs:
    def __init__(
        self,
        cfg: Config,
        site: Site,
        layout: Layout,
        checkout_marker: Callable[[], dict] | None = None,
        spend: SpendSettings | None = None,
    ):
        """``checkout_marker``: the checkout checkpoint's marker (the workflow's; asked only after the checkpoint).
        ``spend``: the config's spend settings (``ptflow.config.spend.spend_settings``), for the agent cells'."""
        self.cfg, self.site, self.layout = cfg, site, layout
        self.spend = spend
        self.checkout_marker = checkout_marker
        self._protocol_at_parse: list[str | None] = []  # the checkout's judge protocol where known at parse, once
        self.rt = site.runtime
        self._agents: dict[str, Agent] = {}  # cell slot -> Agent
        self._requests: dict[tuple, Request] = {}  # (request, agent id) -> Request; read, never changed
        self._plugin_resources: dict[tuple, dict] = {}  # (request, agent id, attempt) -> the plugin's resources
        self._runtimes: dict[tuple, StageRuntime | None] = {}  # (stage, agent id) -> the stage's runtime (or None)

    # ---- per stage and agent, once ----

    def agent(self, slot: str) -> Agent:
        """The agent of a cell's slot (its id, or <id>@run<k> for a repeat)."""
        if slot not in self._agents:
            self._agents[slot] = self.cfg.agent_for(slot)
        return self._agents[slot]

    def request(self, request: str, agent: Agent | None = None) -> Request:
        key = _key(request, agent)
        if key not in self._requests:
            self._requests[key] = self.site.request(request, agent)
        return self._requests[key]

    def plugin_resources(self, request: str, agent: Agent | None, attempt: int) -> dict:
        key = (*_key(request, agent), attempt)
        if key not in self._plugin_resources:
            self._plugin_resources[key] = self.request(request, agent).snakemake_resources(attempt)
        return self._plugin_resources[key]

    def runtime(self, stage: str, agent: Agent | None) -> StageRuntime | None:
        """How the job re-runs itself (in a container or the site venv), or None to stay in the job's own Python
        (frozen: every job of the stage shares it)."""
        key = _key(stage, agent)
        if key not in self._runtimes:
            self._runtimes[key] = self._runtime(stage, agent)
        return self._runtimes[key]

    def _runtime(self, stage: str, agent: Agent | None) -> StageRuntime | None:
        name = images.image_for(self.rt, stage, agent)
        overlay = envs.overlay_venv(self.rt, agent) if stage == "train" else None
        if name is None and not (self.rt.kind == "venv" and self.rt.venv) and not overlay:
            return None
        return self.stage_runtime(
            name,
            self.request(stage, agent).gpus,
            agent_cell=bool(agent is not None and agent.spec.agent_cli),
            overlay=overlay,
        )

    def stage_runtime(self, image_name: str | None, gpus: int, agent_cell: bool = False, overlay=None) -> StageRuntime:
        layout = self.layout
        return StageRuntime(
            **(overlay or {}),
            site_runtime=self.rt,
            image=images.runtime_handle(self.rt, image_name) if image_name else None,
            gpus=gpus,
            binds=tuple(
                sorted(
                    {
                        str(Path(p).resolve())
                        for p in (layout.results, layout.scratch, layout.hf_home, layout.evals_cache)
                    }
                )
            ),
            hf_home=str(Path(layout.hf_home).resolve()),
            agent_cell=agent_cell,
        )

    # ---- caches and data (their specs are plain dicts) ----

    def dataset_spec(self, dataset_name: str) -> dict:
        return next(e.dataset for e in self.cfg.evals.values() if e.dataset_name == dataset_name)

    def model_spec(self, model_name: str) -> dict:
        m = self.cfg.model_named(model_name)
        return {"id": m.id, "source": m.source, "revision": m.revision, "tiny": m.tiny}

    def tokenizer_datasets(self, model_name: str) -> list[str]:
        """A local tiny model's tokenizer is built from the text of every local dataset."""
        if self.cfg.model_named(model_name).source != "local":
            return []
        names = sorted(
            {e.dataset_name for e in self.cfg.evals.values() if e.dataset and e.dataset["source"] == "local"}
        )
        return [self.layout.dataset_marker(n) for n in names]

    def eval_data_spec(self, eval_id: str) -> dict:
        e = self.cfg.evals[eval_id]
        return {"id": e.id, "task": e.task, "task_args": e.task_args, "grader": e.grader}

    def eval_spec(self, eval_id: str) -> dict:
        e = self.cfg.evals[eval_id]
        return {"id": e.id, "dataset": e.dataset, "preprocess": e.preprocess}

    def cache_markers(self) -> list[str]:
        cfg, layout = self.cfg, self.layout
        models = sorted({c.model for c in cfg.training_cells() + cfg.cells})
        models += sorted({cfg.evaluated_model(c).name for c in cfg.cells} - set(models))
        datasets = sorted({cfg.evals[c.eval].dataset_name for c in cfg.cells} - {None})
        return [layout.model_marker(m) for m in models] + [layout.dataset_marker(d) for d in datasets]

    def data_markers(self) -> list[str]:
        """What the evals' evaluations read (and cache_resources): fetched by CPU cache jobs, read offline by GPU
        jobs. Every eval of the matrix reads data of its own but the toy one (the parquet) and the PostTrainBench
        checkout's (its code loads its own, as PostTrainBench's run does)."""
        cfg = self.cfg
        evals = sorted(
            {c.eval for c in cfg.cells if not (cfg.evals[c.eval].uses_parquet or cfg.evals[c.eval].from_checkout)}
        )
        markers = [self.layout.eval_data_marker(e) for e in evals]
        if self.checkout_evals():  # the checkout's evaluations read what its resources.json put into HF_HOME
            markers.append(self.layout.posttrainbench_cache_marker())
        return markers + ([self.layout.resources_marker()] if cfg.raw.get("cache_resources") else [])

    def checkout_evals(self) -> list[str]:
        """The eval dirs of the checkout's evals in the matrix (sorted)."""
        cfg = self.cfg
        return sorted({ptb.eval_dir_name(cfg.evals[c.eval].task) for c in cfg.cells if cfg.evals[c.eval].from_checkout})

    def checkout_cache_spec(self, objects: Objects) -> dict:
        """What rule posttrainbench_cache fetches: the checkout's resources.json (the object id of its dir, so a new
        list or script reruns it), with the checkout's own download script in the site's standard image where the
        site builds that image from the checkout (apptainer, as download_hf_cache.sh runs it), else ptflow's cache
        code over the same list; and the datasets each evaluation loads, which it must hold. The evals' dirs are not
        in its objects: a job re-made after the checkout checkpoint in the same run loses its consumers (Snakemake
        9.27 drops the jobs that take it as ``ancient``), so a changed evaluate.py is preflight's to check
        (``stale_warm_problems``)."""
        image = self.download_image()
        return {
            "objects": objects([ptb.RESOURCES_DIR]),
            "image": str(Path(images.image_path(self.rt, image)).resolve()) if image else None,
            "evals": {
                e: [
                    {"repo": d.repo, "config": d.config, "splits": list(d.splits), "gated": d.gated}
                    for d in ptb.hub_data(e)
                ]
                for e in self.checkout_evals()
            },  # fmt: skip
            "hf_home": self.layout.hf_home,
            "evals_cache": self.layout.evals_cache,
        }

    def download_image(self) -> str | None:
        """The image the checkout's download script runs in: the site's standard image when an apptainer site builds
        it from the checkout (posttrainbench.images), else None."""
        name = ptb.DOWNLOAD_IMAGE
        if self.rt.kind != "apptainer" or name not in self.rt.images or self.checkout_recipe(name) is None:
            return None
        return name

    # ---- the jobs of a cell ----

    def cell(self, model: Model, eval_id: str, slot: str) -> CellRef:
        return CellRef(model.id, model.name, eval_id, slot, Cell(model.name, eval_id, slot).run)

    def train(self, model_name: str, eval_id: str, slot: str, objects: Objects) -> TrainSpec:
        agent = self.agent(slot)
        model = self.cfg.models[model_name]
        return TrainSpec(
            cell=self.cell(model, eval_id, slot),
            kind=agent.kind,
            params=self.cfg.trained_params(slot),
            model_revision=model.revision,
            checkpoint_dir=self.layout.checkpoint_dir(model_name, eval_id, slot),
            config_hash=self.cfg.training_hash(Cell(model_name, eval_id, slot)),
            hf_home=self.layout.hf_home,
            runtime=self.runtime("train", agent),
            supervise=self._supervise(agent),
            multinode=self._multinode(agent),
            agent=self._agent_cli(agent, model_name, eval_id, slot, objects)
            or self._runtime_server(agent, model_name, eval_id, slot),
        )

    def train_params(self, model_name: str, eval_id: str, slot: str, objects: Objects, checkout: bool) -> RuleParams:
        """Rule train's one params value: the spec (compared: a change reruns the training) and, beside it, the
        cell's evaluation in its allocation (:meth:`evaluation_in_train_job`; ``checkout``: whether the job's input
        names the checkout, whose object ids only then are read) and its spend settings (``CellSpend``)."""
        spec = self.train(model_name, eval_id, slot, objects)
        evaluation = self.evaluation_in_train_job(model_name, eval_id, slot, objects if checkout else _no_objects)
        trace_dir, ledger = self.layout.agent_trace_dir(model_name, eval_id, slot), self.layout.spend_ledger()
        spend = train_spend(self.spend, self.agent(slot), trace_dir, ledger) if self.spend is not None else None
        return RuleParams(spec.to_params(), evaluation=evaluation, spend=spend)

    def _supervise(self, agent: Agent) -> Supervise | None:
        """Only for supervised train jobs. The submitted job's request travels resolved; the supervisor scales it by
        the rule's attempt."""
        spec = self.site.supervises("train", agent)
        if not spec:
            return None
        return Supervise(
            spec.max_retries,
            spec.max_resumes,
            spec.internal_timeout_fraction,
            self.request("train", agent),
        )

    def _multinode(self, agent: Agent) -> Multinode | None:
        """Only for train jobs over several nodes of a torchrun kind; Ray kinds bring their own launcher."""
        request = self.request("train", agent)
        if request.get("nodes", 1) <= 1 or agent.spec.multinode != "torchrun":
            return None
        return Multinode(request["nodes"], request.gpus)

    def _runtime_server(self, agent: Agent, model_name: str, eval_id: str, slot: str) -> RuntimeServer | None:
        """A site without the server's request gets no server here; preflight names it before anything runs."""
        if "runtime_server" not in agent.spec.site_requests or not self.site.has_request("runtime_server"):
            return None
        coord = str(Path(self.layout.cell_dir(model_name, eval_id, slot), JOBS_DIR))
        return RuntimeServer(coord, ServerSite.from_site(self.site).to_dict())

    def _agent_cli(
        self, agent: Agent, model_name: str, eval_id: str, slot: str, objects: Objects
    ) -> AgentCliSpec | None:
        if not agent.spec.agent_cli:
            return None
        e = self.cfg.evals[eval_id]
        common = dict(
            id=agent.id,
            cli=agent.cli,
            model=agent.model,
            hours=agent.hours,
            grace_minutes=agent.grace_minutes,
            command=list(agent.command) if agent.command else None,
            keys=list(agent.keys),  # names only; values come from the environment
            trace_dir=self.layout.agent_trace_dir(model_name, eval_id, slot),
            hf_home=self.layout.hf_home,
            on_restart=agent.on_restart,
            sync_minutes=agent.sync_minutes,
            cli_version=self.cfg.cli_versions[agent.cli]
            if agent.cli in self.cfg.cli_versions and not agent.command
            else None,
            base_url=agent.base_url or None,
            grader_keys=list(e.grader_keys),
        )
        if e.from_checkout:
            name = ptb.eval_dir_name(e.task)
            return AgentCliSpec(
                **common,
                posttrainbench=CheckoutAgent(
                    eval_dir=name,
                    solve=self.cfg.ptb_agent(agent),
                    num_gpus=max(self.request("train", agent).gpus, 1),
                    objects=objects(self._agent_paths(agent, name)),
                ),
            )
        return AgentCliSpec(
            **common,
            evals_cache=self.layout.evals_cache,
            eval_task=e.task,
            max_new_tokens=e.max_new_tokens,
            eval_call=build_call(e, Provider.from_site(self.site, "train", agent)),
            eval_test_parquet=self.layout.data(eval_id, "test") if e.uses_parquet else None,
        )

    def _agent_paths(self, agent: Agent, eval_dir: str) -> list[str]:
        """The checkout paths an agent cell of a checkout eval uses: its solve.sh's dir (none for ptflow's own
        commands, which run no solve.sh) and the eval's."""
        empty = ptb.AGENT_DIR.format(agent="")
        return [p for p in ptb.agent_paths(self.cfg.ptb_agent(agent) or "", eval_dir) if p != empty]

    def evaluate(
        self, model_name: str, eval_id: str, slot: str, objects: Objects, seed: int | None = None
    ) -> EvaluateSpec:
        """Rule evaluate's spec, or with ``seed`` rule evaluate_seed's (one evaluation seed of a seeded eval)."""
        e = self.cfg.evals[eval_id]
        model = self.cfg.models[model_name]
        evaluated = self.cfg.evaluated_model(Cell(model_name, eval_id, slot))
        return EvaluateSpec(
            cell=self.cell(model, e.id, slot),
            # an instruct cell evaluates the counterpart; only there, so other cells' params stay as they were
            evaluated_model={"id": evaluated.id, "revision": evaluated.revision} if evaluated is not model else None,
            call=self._checkout_eval_call(e, objects, untouched=not self.agent(slot).trains, seed=seed)
            if e.from_checkout
            else build_call(e, Provider.from_site(self.site), seed=seed),
            model_revision=model.revision,
            hf_home=self.layout.hf_home,
            evals_cache=self.layout.evals_cache,
            runtime=self.runtime("evaluate", self.agent(slot)),
        )

    def evaluation_in_train_job(self, model_name: str, eval_id: str, slot: str, objects: Objects) -> Params | None:
        """What a train job needs to evaluate its cell in its own allocation (kinds that do: agent cells): the
        evaluate job's params and the cell's eval.json; None for other kinds. Rule train passes it as a param
        derived from its input (the checkout marker), which Snakemake does not compare to decide a rerun: a changed
        evaluation reruns the evaluate job, whose params these are, never the training. A seeded eval: each seed's
        evaluate_seed params and file, the first seed first (``seeds``), evaluated in turn as PostTrainBench's final
        evaluation runs them in its job, each staged for its seed's job to adopt."""
        if not self.agent(slot).spec.evaluates_in_train_job:
            return None
        e = self.cfg.evals[eval_id]
        if e.seeded:
            seeds = [
                {"seed": seed, "eval_json": self.layout.seed_eval_json(model_name, eval_id, slot, seed),
                 "job": self.evaluate(model_name, eval_id, slot, objects, seed=seed).to_params()}
                for seed in e.seeds
            ]  # fmt: skip
            return {"seeds": seeds, "seed_changes_data": e.seed_changes_data}
        spec = self.evaluate(model_name, eval_id, slot, objects)
        return {"eval_json": self.layout.eval_json(model_name, eval_id, slot), "job": spec.to_params()}

    def _checkout_eval_call(self, e: Eval, objects: Objects, untouched: bool = False, seed=None) -> CheckoutCall:
        """``untouched``: a baseline or instruct cell, evaluated as run_baseline.sh does it (one try, no ladder);
        the other cells as run_task.sh (its ladder, with the eval's lower budgets). ``e.final``: main's, seeded."""
        name, final = ptb.eval_dir_name(e.task), e.final
        return answer_sandbox.checked(CheckoutCall(  # humaneval's: refused where the site cannot run its sandbox
            eval_id=e.id,
            task=e.task,
            files=CheckoutFiles(name, objects(ptb.final_eval_paths(name) if final else ptb.eval_paths(name))),
            tries=1 if untouched and not final else None,
            retry_max_tokens=[] if untouched or final else list(e.retry_max_new_tokens),
            limit=e.limit,
            keys=final.keys(e.keys) if final else list(e.keys),
            **(final.call(seed) if final else {}),
        ), self.rt, JobsError)  # fmt: skip

    # ---- the judge panel of a cell: the config's, or the checkout's own (PostTrainBench d27a95e, v1.1) ----

    def checkout_protocol(self, wait: bool = True) -> str | None:
        """The checkout's judge protocol (``v1.0``, ``v1.1``): read from a checkout already here at its commit
        (``posttrainbench.path``) when the workflow is parsed, else from the checkout checkpoint's marker (``wait``:
        ask it; the workflow then waits for the checkpoint). None: unknown yet (not ``wait``) or no judged checkout."""
        if not self._protocol_at_parse:
            self._protocol_at_parse.append(self._read_protocol())
        known = self._protocol_at_parse[0]
        if known or not wait or self.checkout_marker is None or self.cfg.posttrainbench is None:
            return known
        return self.checkout_marker().get("judge_protocol")

    def _read_protocol(self) -> str | None:
        checkout = self.cfg.posttrainbench
        if checkout is None or not checkout.path or not self.cfg.judge:
            return None
        where = Path(checkout.location(self.layout.scratch))
        try:
            ptb.git(where, "cat-file", "-e", f"{checkout.commit}^{{commit}}")
            return ptb.judge_protocol(str(where), checkout.commit).version
        except ptb.CheckoutError:
            return None  # not here at its commit: the checkout rule clones it, or refuses it in its own line

    def panel_known(self, eval_id: str) -> bool:
        """Whether a cell's panel is known without the checkout checkpoint (rule all's targets list its votes)."""
        e = self.cfg.evals[eval_id]
        return not (e.from_checkout and self.cfg.judge and self.checkout_protocol(wait=False) is None)

    def cell_panel(self, eval_id: str, wait: bool = True) -> JudgePanel | None:
        """The panel of a cell of ``eval_id``: a checkout eval's cells of a checkout with a panel of its own (v1.1:
        run_judge.sh's; main's src/judges/: ptflow.stages.posttrainbench.judge_panels) get that panel unless the
        judge is off; the others the config's."""
        panel = self.cfg.judge_panel
        if panel is None or not self.cfg.evals[eval_id].from_checkout:
            return panel
        own = judge_panels.adapter(self.checkout_protocol(wait))
        return own.panel() if own is not None else panel

    def judge(self, model_name: str, eval_id: str, slot: str, objects: Objects, judge_id: str, run: int) -> JudgeSpec:
        """One vote (rule judge_run): run ``run`` of the panel's judge ``judge_id`` on the cell. Its params hold
        that judge's settings only: adding a judge or a run leaves the other votes' params as they were."""
        e = self.cfg.evals[eval_id]
        panel = self.cell_panel(eval_id)
        if e.from_checkout and panel is not None and panel != self.cfg.judge_panel:
            return self._checkout_vote(model_name, eval_id, slot, panel, judge_id, run)
        if panel is None or judge_id not in {j.id for j in panel.judges}:
            raise ValueError(f"no judge {judge_id!r} in config key judge; the vote's file is not one this config makes")
        judge = panel.judge(judge_id)
        if not 1 <= run <= judge.runs:
            raise ValueError(f"judge {judge_id!r} has {judge.runs} run(s), not run {run} (config key judge runs)")
        return JudgeSpec(
            judge=judge.settings,
            # the checkout's judge prompt for the cells of its evals (only there: other cells' params stay as they were)
            posttrainbench=self._checkout_judge(e, objects) if e.from_checkout else None,
            keys=list(self.agent(slot).keys),  # names: their values are redacted from trace.md
            cell=self.cell(self.cfg.models[model_name], eval_id, slot),
            runtime=self._judge_runtime(slot) if judge.settings.get("agent") else None,
            vote={"judge": judge_id, "run": run, "fields": list(judge.fields)},
        )

    def _checkout_vote(self, model_name: str, eval_id: str, slot: str, panel: JudgePanel, judge_id: str, run: int):
        """A vote of a checkout's own panel (ptflow.stages.posttrainbench.judge_panels): its judge (the checkout's
        settings), the object ids of what it reads, the sign-in (``posttrainbench.judge.auth_json``), the base URL
        where set (only there: other configs' votes keep their params), and what the panel module adds."""
        if judge_id not in {j.id for j in panel.judges} or not 1 <= run <= panel.judge(judge_id).runs:
            raise ValueError(f"no run {run} of judge {judge_id!r} in the checkout's panel "
                             f"({', '.join(j.id for j in panel.judges)}; 1 run)")  # fmt: skip
        own, agent = judge_panels.adapter(self.checkout_protocol()), self.agent(slot)
        raw = self.cfg.raw.get("posttrainbench")
        name = ptb.eval_dir_name(self.cfg.evals[eval_id].task)
        vote = {"judge": judge_id, "run": run, "fields": list(panel.judge(judge_id).fields), "protocol": own.PROTOCOL}
        if own.panel_judge(judge_id).subscription:  # the codex judges' sign-in
            vote["auth_json"] = own.auth_json(raw, self.cfg.posttrainbench.location(self.layout.scratch))
        base_url = ((raw or {}).get("judge") or {}).get("base_url")
        vote |= {"base_url": base_url} if base_url else {}
        vote |= own.vote_settings(raw, self.cfg.ptb_agent(agent) or agent.cli or "", agent.model or "")
        cell, files = self.cell(self.cfg.models[model_name], eval_id, slot), own.checkout_paths(name)
        return JudgeSpec(judge=panel.judge(judge_id).settings, keys=list(agent.keys), vote=vote, cell=cell,
                         posttrainbench=CheckoutFiles(name, self._covering_objects(files)),
                         runtime=self._judge_runtime(slot))  # fmt: skip

    def _covering_objects(self, paths: list[str]) -> dict[str, str]:
        """The object ids of ``paths`` from the checkout's marker: a path's own, else the nearest directory above it
        the marker has (a cloned checkout's marker was made before its protocol was known)."""
        objects = self.checkout_marker()["objects"] if self.checkout_marker else {}
        out = {}
        for path in paths:
            above = [k for k in objects if path.startswith(k + "/")]
            cover = path if path in objects else max(above, key=len, default=None)
            if cover:
                out[cover] = objects[cover]
        return dict(sorted(out.items()))

    def judge_panel(self, model_name: str, eval_id: str, slot: str) -> JudgePanelSpec:
        """Rule judge: the panel's decision over the cell's votes (None: no judge configured)."""
        panel = self.cell_panel(eval_id)
        return JudgePanelSpec(
            panel=panel.to_params() if panel else None,
            cell=self.cell(self.cfg.models[model_name], eval_id, slot).to_params(with_run=False),
            keys=list(self.agent(slot).keys),
        )

    def _checkout_judge(self, e: Eval, objects: Objects) -> CheckoutFiles:
        name = ptb.eval_dir_name(e.task)
        return CheckoutFiles(name, objects(ptb.judge_paths(name)))

    def _judge_runtime(self, slot: str) -> StageRuntime | None:
        """An agentic judge (judge.agent) runs its CLI in the cell's agent image, without GPUs."""
        name = images.image_for(self.rt, "train", self.agent(slot))
        if name is None and not (self.rt.kind == "venv" and self.rt.venv):
            return None
        return self.stage_runtime(name, 0, agent_cell=True)

    # ---- images, and PostTrainBench's checkout ----

    def site_image_spec(self, name: str) -> dict:
        """The site's spec of an image, or PostTrainBench's recipe for the images the checkout builds
        (posttrainbench.images)."""
        spec = images.image_spec(self.rt, name)
        ptb_config = self.cfg.posttrainbench
        recipe = ptb_config.recipe(name) if ptb_config else None
        if recipe is None:
            return spec
        if self.rt.kind != "apptainer":
            raise JobsError(
                f"posttrainbench.images: site {self.rt.site} builds {self.rt.kind} images; PostTrainBench's recipes "
                "are apptainer .def files (remove images there, or use an apptainer site)"
            )
        return {k: v for k, v in spec.items() if k not in ("source", "context")} | {"recipe": recipe}

    def image_spec(self, name: str, basedir: str, checkout_marker: Callable[[], dict]) -> dict:
        """The site's spec of the image, with the build arguments its recipe declares (the agent CLIs' pins) only
        when it declares some, so other images' params stay as they were. A recipe of the PostTrainBench checkout
        is read from the checkout (``checkout_marker``: after its checkpoint)."""
        spec = self.site_image_spec(name)
        rel = self.checkout_recipe(name)
        if rel is not None:
            marker = checkout_marker()
            spec = {
                **spec,
                "recipe": str(Path(marker["path"], rel)),
                "recipe_object": marker["objects"][rel],
                "build_dir": marker["path"],
            }
        args = images.build_args_for(spec, self.cfg.image_build_args, basedir)
        return {**spec, "build_args": args} if args else spec

    def checkout_recipe(self, name: str) -> str | None:
        """The path in PostTrainBench's checkout of the image's recipe, or None for the site's own images."""
        recipe = str(self.site_image_spec(name).get("recipe") or "")
        return recipe[len(ptb.RECIPE_PREFIX) :] if recipe.startswith(ptb.RECIPE_PREFIX) else None

    def checkout_spec(self) -> dict:
        """What the checkout checkpoint makes - the commit, where, from where, and the paths this run uses (nothing
        without posttrainbench: then no job asks for it)."""
        ptb_config = self.cfg.posttrainbench
        if not ptb_config:
            return {}
        return {
            "commit": ptb_config.commit,
            "location": ptb_config.location(self.layout.scratch),
            "repo": ptb_config.repo,
            "paths": sorted(self._checkout_paths()),
        }

    def _checkout_paths(self) -> set[str]:
        cfg, paths = self.cfg, set()
        for c in cfg.cells:
            e = cfg.evals[c.eval]
            if not e.from_checkout:
                continue
            name = ptb.eval_dir_name(e.task)
            paths.update(ptb.final_eval_paths(name) if e.final is not None else ptb.eval_paths(name))
            agent = cfg.agent_for(c.agent)
            if agent.spec.agent_cli:
                paths.update(self._agent_paths(agent, name))
                own = judge_panels.adapter(self.checkout_protocol(wait=False)) if cfg.judge else None
                if own is not None:
                    paths.update(own.checkout_paths(name))  # what its panel's judges read
                elif cfg.judge:
                    paths.update(ptb.judge_paths(name))
        if paths:  # a checkout eval is in the matrix: its cache comes from the checkout's resources.json
            paths.add(ptb.RESOURCES_DIR)
        for name in self.rt.images if images.needs_images(self.rt) else ():
            rel = self.checkout_recipe(name)
            if rel is not None:
                paths.add(rel)
        return paths

    # ---- the matrix ----

    def scoring(self, reference: Any) -> ScoringSpec:
        cfg = self.cfg
        return ScoringSpec(
            raw={k: cfg.raw.get(k) for k in ("scoring", "models", "agents")},
            reference=reference,
            agent_gpus={
                a.id: {
                    "train": self.request("train", a).gpus if a.trains else 0,
                    "eval": self.request("evaluate", a).gpus,
                }
                for a in cfg.agents.values()
            },
            expected=[{"model": c.model, "eval": c.eval, "agent": c.agent} for c in cfg.cells],
            model_ids={m.name: m.id for m in cfg.models.values()},
        )
