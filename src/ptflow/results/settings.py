"""What scoring needs beyond the cells (``Settings``: the reference agents and tables, fixed weights, GPUs per job),
built from the workflow config's ``scoring``, ``models`` and ``agents``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ptflow.config.entries import Agent, Model, build_agents, build_models


@dataclass
class Settings:
    """What scoring needs beyond the cells; ``settings_from_config`` builds it from the parsed workflow config."""

    baseline_agent: str = "baseline"
    # (a) an agent whose cells evaluate each model's instruct counterpart zero-shot, like baseline cells
    instruct_agent: str = "instruct"
    # base model id -> instruct counterpart id; unnamed ones follow PostTrainBench's names (-Base -> '', -pt -> -it)
    instruct_models: dict[str, str] = field(default_factory=dict)
    # (b) PostTrainBench's baselines.json shape: {"zeroshot": {model name: {eval: score}}, "fewshot": {...}}
    reference: dict | None = None
    # (c) for models without an instruct counterpart: a named agent's cells (e.g. sft) as the reference
    reference_agent: str | None = None
    # fixed weights per eval (PostTrainBench's factors.json shape) instead of computing them
    weights: dict[str, float] | None = None
    # a cell with judge.json status "skipped": "score" it (flag shown) or "fallback" as PostTrainBench does for a
    # missing judgement
    unjudged: str = "score"
    # GPUs of a cell's train and evaluate jobs, for GPU-hours where Slurm's accounting has no record:
    # {"train": n, "eval": n} for every agent (config scoring.gpus), else per agent from the site's requests
    gpus: dict[str, int] | None = None
    agent_gpus: dict[str, dict[str, int]] = field(default_factory=dict)
    agent_order: list[str] = field(default_factory=list)
    # the overrides of cells' verdicts (scoring.overrides, ptflow.results.overrides.Override): they outrank the judges
    overrides: list = field(default_factory=list)
    # the accepted failures (scoring.overrides' accepted, ptflow.results.overrides.Accepted): at the base model's score
    accepted: list = field(default_factory=list)


def settings_from_config(raw: dict, reference: dict | None = None, agent_gpus=None) -> Settings:
    """Settings from the workflow config's ``scoring``, ``models`` and ``agents`` (the aggregate rule's params carry
    just these), parsed by ``ptflow.config.entries.build_models``/``build_agents``, as the workflow
    parsed them; ``reference`` is the loaded table (``ptflow.config.load.reference_table``)."""
    models = build_models(raw.get("models") or [])
    agents = build_agents(raw.get("agents") or [])
    return settings_from_parsed(raw.get("scoring") or {}, models, agents, reference, agent_gpus)


def settings_from_parsed(
    scoring: Mapping,
    models: Mapping[str, Model],
    agents: Mapping[str, Agent],
    reference: dict | None = None,
    agent_gpus=None,
) -> Settings:
    """Settings from the config's ``scoring:`` (validated by the config schema) and its parsed models and agents:
    the first agent of kind baseline (instruct) is the base (instruct) reference, each model's ``instruct``
    counterpart names its instruct model, and the agents' config order is the report's."""
    return Settings(
        baseline_agent=next((a.id for a in agents.values() if a.kind == "baseline"), Settings.baseline_agent),
        instruct_agent=next((a.id for a in agents.values() if a.kind == "instruct"), Settings.instruct_agent),
        instruct_models={m.id: m.instruct.id for m in models.values() if m.instruct},
        reference=reference,
        reference_agent=scoring.get("reference_agent"),
        weights=scoring.get("weights"),
        unjudged=scoring.get("unjudged", Settings.unjudged),
        gpus=scoring.get("gpus"),
        agent_gpus=dict(agent_gpus or {}),
        agent_order=list(agents),
    )
