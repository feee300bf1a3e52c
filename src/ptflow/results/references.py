"""The reference scores a cell falls back to and the weights are computed from: each model's base and instruct
zero-shot score per eval, from the reference agents' cells or PostTrainBench's baselines table, with where each
came from; and the means and errors scoring combines them with.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from ptflow.results.cells import SCORED, ScoredCell, ScoreError, finite_number
from ptflow.results.settings import Settings


def instruct_counterpart(model_id: str, named: Mapping[str, str]) -> str | None:
    """The instruct model of a base model: as named in config, else PostTrainBench's naming (-Base, -pt -> -it)."""
    if model_id in named:
        return named[model_id]
    if model_id.endswith("-Base"):
        return model_id[: -len("-Base")]
    if model_id.endswith("-pt"):
        return model_id[: -len("-pt")] + "-it"
    return None


def reference_table_score(table: Mapping | None, model_id: str, eval_id: str) -> float | None:
    """A zero-shot score from a PostTrainBench-shaped table, keyed by hub id, path name or bare name."""
    if not table:
        return None
    zeroshot = table.get("zeroshot", table)
    for key in (model_id, model_id.replace("/", "--"), model_id.split("/")[-1]):
        row = zeroshot.get(key)
        if isinstance(row, Mapping) and eval_id in row:
            return finite_number(row[eval_id], f"scoring reference table zeroshot.{key}", eval_id)
    return None


def mean_of(values: list[float]) -> float:
    return sum(values) / len(values)


def sd_of(values: list[float]) -> float:
    if len(values) < 2:
        return math.nan
    m = mean_of(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))


def se_of_mean(stderrs: list[float]) -> float:
    """Standard error of the mean of independent values with these stderrs."""
    return math.sqrt(sum(s * s for s in stderrs)) / len(stderrs)


class References:
    """Base and instruct zero-shot scores per (model, eval), with where each came from."""

    def __init__(self, cells: list[ScoredCell], settings: Settings):
        self.settings = settings
        self.by_key: dict[tuple[str, str, str], list[ScoredCell]] = {}
        for c in cells:
            self.by_key.setdefault((c.model_name, c.eval, c.agent_id), []).append(c)
        self.model_ids = {c.model_name: c.model for c in cells}

    def _measured(self, agent_id: str, model_name: str, eval_id: str) -> tuple[float, float] | None:
        scored = [c for c in self.by_key.get((model_name, eval_id, agent_id), []) if c.metric and c.status == SCORED]
        if not scored:
            return None
        return mean_of([c.metric.value for c in scored]), se_of_mean([c.metric.stderr for c in scored])

    def base(self, model_name: str, eval_id: str) -> tuple[float, float, str] | None:
        got = self._measured(self.settings.baseline_agent, model_name, eval_id)
        if got:
            return got[0], got[1], f"{self.settings.baseline_agent} cell"
        value = reference_table_score(self.settings.reference, self.model_ids[model_name], eval_id)
        return (value, 0.0, "reference table") if value is not None else None

    def instruct(self, model_name: str, eval_id: str, effective: dict) -> tuple[float, str]:
        s = self.settings
        got = self._measured(s.instruct_agent, model_name, eval_id)
        if got:
            return got[0], f"{s.instruct_agent} cells"
        model_id = self.model_ids[model_name]
        counterpart = instruct_counterpart(model_id, s.instruct_models)
        value = reference_table_score(s.reference, counterpart, eval_id) if counterpart else None
        if value is not None:
            return value, "reference table"
        if s.reference_agent:
            scores = effective.get((model_name, eval_id, s.reference_agent))
            if scores:
                return mean_of(scores), f"{s.reference_agent} cells"
        raise ScoreError(
            f"model {model_id} eval {eval_id}: no instruct reference score; evaluate its instruct counterpart "
            f"(agent {s.instruct_agent!r}), add '{(counterpart or model_id).split('/')[-1]}' to scoring.reference "
            "zeroshot, or set scoring.reference_agent"
        )
