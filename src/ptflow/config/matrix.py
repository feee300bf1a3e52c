"""The validated configuration: the matrix of cells over models, evals and agents, and the checks across sections.

Validation happens once, at workflow start (:func:`build_config`): the JSON schema for shape, types and unknown keys
(``ptflow.config.validate``), each section's entries (``ptflow.config.entries``), then what spans sections: the
matrix's selections, excludes and includes, whether each eval is PostTrainBench's or ptflow's, and the scoring's
instruct references. Every error is one line naming the key, the bad value and what to do.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from typing import Any

from ptflow.config import naming
from ptflow.config import posttrainbench as ptb
from ptflow.config.entries import Agent, Eval, Model, build_agents, build_evals, build_models
from ptflow.config.judges import JudgePanel, panel_of
from ptflow.config.validate import ConfigError, canonical, unknown_id_error, validate_schema


@dataclass(frozen=True)
class Cell:
    model: str  # model path name (org--name)
    eval: str
    agent: str  # the agent's slot: its id, or <id>@run<k> for run k >= 2 of a repeated agent (naming.slot)

    @property
    def key(self) -> str:
        return f"{self.model}/{self.eval}/{self.agent}"

    @property
    def agent_id(self) -> str:
        return naming.split_slot(self.agent)[0]

    @property
    def run(self) -> int:
        return naming.split_slot(self.agent)[1]


@dataclass
class Config:
    raw: dict
    models: dict[str, Model]  # by path name
    evals: dict[str, Eval]
    agents: dict[str, Agent]
    cells: list[Cell]
    posttrainbench: ptb.Checkout | None = None  # PostTrainBench's pinned checkout (config key posttrainbench)

    def ptb_agent(self, agent: Agent) -> str | None:
        """The checkout's agents/<dir> a real-CLI agent runs, or None (no checkout, or ptflow's scripted agent or an
        agent with its own command)."""
        if (
            self.posttrainbench is None
            or not agent.spec.agent_cli
            or agent.command
            or agent.cli not in self.cli_versions
        ):
            return None
        return agent.solve or agent.cli

    def model_by_id(self, model_id: str) -> Model:
        return self.models[naming.model_to_path(model_id)]

    @property
    def judge(self) -> dict | None:
        """The judge of agent-CLI traces, or None when none is configured or it is turned off (enabled: false)."""
        judge = self.raw.get("judge")
        if not judge or judge.get("enabled", True) is False:
            return None
        return {k: v for k, v in judge.items() if k != "enabled"}

    @property
    def judge_panel(self) -> JudgePanel | None:
        """The judges of agent-CLI traces as a panel (the one-judge shorthand is a panel of one), or None."""
        return panel_of(self.raw.get("judge"))

    @property
    def cli_versions(self) -> dict[str, str]:
        """The pinned version of every real agent CLI (config ``agent_clis``, default PostTrainBench's pins)."""
        from ptflow.config.agent_clis import CLI_PACKAGES

        pins = self.raw.get("agent_clis") or {}
        return {name: (pins.get(name) or {}).get("version", cli.pinned) for name, cli in CLI_PACKAGES.items()}

    @property
    def node_major(self) -> int:
        """Node.js major version of the agent image (config ``agent_clis.node``)."""
        from ptflow.config.agent_clis import NODE_MAJOR

        return int((self.raw.get("agent_clis") or {}).get("node", NODE_MAJOR))

    @property
    def image_build_args(self) -> dict[str, str]:
        """What an image recipe may declare as build arguments: ``NODE_MAJOR`` and ``<CLI>_CLI_VERSION`` per CLI."""
        from ptflow.config.agent_clis import build_arg

        return {"NODE_MAJOR": str(self.node_major), **{build_arg(n): v for n, v in self.cli_versions.items()}}

    def model_named(self, name: str) -> Model:
        """A model by path name: a matrix model or the instruct counterpart one of them names."""
        if name in self.models:
            return self.models[name]
        for m in self.models.values():
            if m.instruct and m.instruct.name == name:
                return m.instruct
        raise KeyError(name)

    def evaluated_model(self, cell: Cell) -> Model:
        """What a cell's evaluation starts from when nothing trained it: the base model, or its instruct
        counterpart for agents of kind instruct."""
        model = self.models[cell.model]
        return model.instruct if self.agent_for(cell.agent).spec.evaluates_instruct else model

    def agent_for(self, slot: str) -> Agent:
        """The agent of a cell slot (``sft``, ``claude-opus-4-5@run2``)."""
        return self.agents[naming.split_slot(slot)[0]]

    def parent_slot(self, slot: str) -> str | None:
        """The slot a training starts from (``from:``), in the same run: run k of grpo starts from run k of sft."""
        agent_id, run = naming.split_slot(slot)
        start = self.agents[agent_id].start_from
        return naming.slot(start, run) if start else None

    def trained_params(self, slot: str) -> dict:
        """The agent's params for this run: runs k >= 2 of a seeded trainer get seed + k - 1 (repeats would be
        identical otherwise); run 1 keeps the configured seed."""
        agent_id, run = naming.split_slot(slot)
        params = self.agents[agent_id].params
        if run > 1 and "seed" in params:
            return canonical({**params, "seed": params["seed"] + run - 1})
        return params

    def training_cells(self) -> list[Cell]:
        """Every (model, eval, agent slot) whose checkpoint is needed: matrix cells plus their `from` ancestors."""
        needed: dict[Cell, None] = {}
        for cell in self.cells:
            slot: str | None = cell.agent
            while slot is not None and self.agent_for(slot).trains:
                needed[Cell(cell.model, cell.eval, slot)] = None
                slot = self.parent_slot(slot)
        return list(needed)

    def training_hash(self, cell: Cell) -> str:
        """Hash of everything that defines a cell's training; changes here make the checkpoint stale."""
        agent = self.agent_for(cell.agent)
        model = self.models[cell.model]
        parent = self.parent_slot(cell.agent)
        spec = {
            "model": model.id,
            "revision": model.revision,
            "tiny": model.tiny,
            "eval": cell.eval,
            "dataset": self.evals[cell.eval].dataset,
            "agent": {
                "kind": agent.kind,
                "params": self.trained_params(cell.agent),
                "cli": agent.cli,
                "model": agent.model,
            },
            "from": self.training_hash(Cell(cell.model, cell.eval, parent)) if parent else None,
        }
        if agent.spec.agent_cli:  # only here, so the hashes (and checkpoints) of other kinds stay as they were
            spec["agent"].update(hours=agent.hours, command=agent.command, grace_minutes=agent.grace_minutes)
        if cell.run > 1:  # only for repeats, so run 1 keeps the hash a cell had before repeats existed
            spec["run"] = cell.run
        return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def _select(sel, known: dict, key: str, kind: str, to_name=lambda x: x) -> list[str]:
    if sel == "all":
        return list(known)
    out = []
    for i, value in enumerate(sel):
        try:
            name = to_name(value)
        except naming.NameError_:
            name = None
        if name not in known:
            ids = [m.id for m in known.values()] if kind == "model" else list(known)
            raise unknown_id_error(kind, f"{key}[{i}]", value, ids)
        if name in out:
            raise ConfigError(f"config error at {key}[{i}]: {value!r} is listed twice; list it once")
        out.append(name)
    return out


def _expand(raw: dict, models, evals, agents) -> list[Cell]:
    mx = raw["matrix"]
    to_model = naming.model_to_path
    chosen_models = _select(mx["models"], models, "matrix.models", "model", to_model)
    chosen_evals = _select(mx["evals"], evals, "matrix.evals", "eval")
    chosen_agents = _select(mx["agents"], agents, "matrix.agents", "agent")

    def patterns(key: str) -> list[dict]:
        out = []
        for i, pat in enumerate(mx.get(key, [])):
            p = {}
            if "model" in pat:
                p["model"] = _select([pat["model"]], models, f"matrix.{key}[{i}].model", "model", to_model)[0]
            if "eval" in pat:
                p["eval"] = _select([pat["eval"]], evals, f"matrix.{key}[{i}].eval", "eval")[0]
            if "agent" in pat:
                p["agent"] = _select([pat["agent"]], agents, f"matrix.{key}[{i}].agent", "agent")[0]
            out.append(p)
        return out

    def matches(cell: Cell, pat: dict) -> bool:
        return all(getattr(cell, k) == v for k, v in pat.items())

    excludes, includes = patterns("exclude"), patterns("include")
    cells: dict[Cell, None] = {}
    for m in chosen_models:
        for e in chosen_evals:
            for a in chosen_agents:
                cell = Cell(m, e, a)
                if not any(matches(cell, p) for p in excludes):
                    cells[cell] = None
    for pat in includes:
        for m in [pat["model"]] if "model" in pat else chosen_models:
            for e in [pat["eval"]] if "eval" in pat else chosen_evals:
                for a in [pat["agent"]] if "agent" in pat else chosen_agents:
                    cells[Cell(m, e, a)] = None
    if not cells:
        raise ConfigError(
            "config error at matrix: no cells remain after exclude; select at least one "
            "(model, eval, agent) or loosen matrix.exclude"
        )
    # agents that evaluate each model's instruct counterpart have cells only for models that name one
    for a in {c.agent for c in cells}:
        if agents[a].spec.evaluates_instruct and not any(models[c.model].instruct for c in cells if c.agent == a):
            raise ConfigError(
                f"config error at agents: agent {a!r} (kind {agents[a].kind}) evaluates instruct counterparts, but "
                "no model of the matrix names one; add models[].instruct or drop the agent from the matrix"
            )
    return [
        Cell(c.model, c.eval, naming.slot(c.agent, run))
        for c in cells
        if models[c.model].instruct or not agents[c.agent].spec.evaluates_instruct
        for run in range(1, agents[c.agent].repeats + 1)
    ]


def build_config(raw: dict[str, Any]) -> Config:
    """Validate a raw config dict (schema, then semantics) and expand its matrix."""
    validate_schema(raw)
    models = build_models(raw["models"])
    evals = _with_matrix_seeds(build_evals(raw["evals"]), raw["matrix"].get("seeds"))
    agents = build_agents(raw["agents"])
    cells = _expand(raw, models, evals, agents)
    _check_scoring(raw.get("scoring") or {}, models, {c.eval for c in cells}, agents, cells)
    try:
        checkout = ptb.Checkout.from_config(raw.get("posttrainbench"))
    except ValueError as exc:
        raise ConfigError(f"config error at {exc}") from None
    cfg = Config(raw, models, evals, agents, cells, checkout)
    _check_posttrainbench(cfg)
    panel_of(raw.get("judge"))  # the panel checked at load: duplicate ids, runs, decisions, effects (one line)
    return cfg


def _with_matrix_seeds(evals: dict[str, Eval], seeds: list | None) -> dict[str, Eval]:
    """matrix.seeds for every eval that lists none of its own, but a checkout eval: the checkout decides its seeds
    (none for the one-shot evaluate.py, which takes no --seed; main's run_final_eval.sh --default-seeds for its
    seeded final evaluation, read by ``ptflow.config.load`` where the checkout is at hand)."""
    out = {}
    for eval_id, e in evals.items():
        own = () if e.from_checkout else tuple(seeds or ())
        out[eval_id] = e if e.seeds is not None else replace(e, seeds=own)
    return out


def _check_posttrainbench(cfg: Config) -> None:
    """A run is PostTrainBench's or ptflow's per eval, never a mix (docs/posttrainbench.md)."""
    checkout_evals = sorted(e.id for e in cfg.evals.values() if e.from_checkout)
    if cfg.posttrainbench is None:
        if checkout_evals:
            raise ConfigError(
                f"config error at evals: {checkout_evals[0]!r} runs PostTrainBench's evaluate.py from a checkout; "
                "add posttrainbench: {commit: <40 hex>, path: <checkout> | repo: <URL>}"
            )
        solving = [a.id for a in cfg.agents.values() if a.solve]
        if solving:
            raise ConfigError(
                f"config error at agents: {solving[0]!r} names a PostTrainBench solve dir; add posttrainbench: "
                "{commit, path | repo}, or remove solve"
            )
        return
    prompted = {c.eval for c in cfg.cells if cfg.ptb_agent(cfg.agent_for(c.agent))}
    own = sorted(e for e in prompted if not cfg.evals[e].from_checkout)
    if own:
        raise ConfigError(
            f"config error at evals: {own[0]!r} uses ptflow's task {cfg.evals[own[0]].task} while its agent cells "
            f"are prompted from the PostTrainBench checkout; use task: posttrainbench/{own[0]}, or drop "
            "posttrainbench for ptflow's own evaluation"
        )
    panel = cfg.judge_panel
    if panel and any(j.settings.get("cli") for j in panel.judges):
        raise ConfigError(
            "config error at judge.cli: with posttrainbench the judge is PostTrainBench's (its prompt from the "
            "checkout, an agent CLI in the cell's task dir); use judge: {agent: codex, model: ..., keys: [...]}"
        )


def _check_scoring(scoring: dict, models: dict, evals_in_matrix: set, agents: dict, cells: list) -> None:
    """PostTrainBench's weights need, per eval, an instruct reference for every model (when there is more than one
    eval and no fixed weights): its instruct counterpart evaluated by an agent of kind instruct, the reference table,
    or a named agent's cells. Found missing here, not after the GPU-hours."""
    ref = scoring.get("reference_agent")
    if ref is not None and ref in agents and not agents[ref].trains:
        raise ConfigError(
            f"config error at scoring.reference_agent: {ref!r} trains nothing, so its cells are the base model's "
            "scores and every gap would be 0; name an agent that post-trains (e.g. sft)"
        )
    if len(evals_in_matrix) < 2 or scoring.get("weights") or scoring.get("reference"):
        return  # one eval weighs 1; fixed weights or a table need no measured reference
    if ref is not None and ref in agents and any(c.agent_id == ref for c in cells):
        return
    measured = {c.model for c in cells if agents[c.agent_id].spec.evaluates_instruct}
    lacking = sorted(models[m].id for m in {c.model for c in cells} - measured)
    if lacking:
        hint = (
            f"scoring.reference_agent {ref!r} is not an agent of this matrix; "
            if ref is not None
            else "no instruct reference: "
        )
        raise ConfigError(
            f"config error at scoring: {hint}the weights of PostTrainBench's score need one for model(s) "
            f"{', '.join(lacking)}; add models[].instruct with an agent of kind instruct, scoring.reference (a "
            "zero-shot table), scoring.reference_agent (an agent's cells, e.g. sft) or scoring.weights"
        )
