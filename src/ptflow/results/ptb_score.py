"""The leaderboard's own score of a run whose evals come from a PostTrainBench checkout.

PostTrainBench's headline number (aisa-group/PostTrainBench, read at commit 9082063) is ``scripts/compute_single_metrics
.py`` over ``final_<method>.csv``, the tables that ``scripts/aggregate_methods.py``, ``aggregate_contamination.py`` and
``aggregate_final.py`` make of its results directory (``ptflow export --posttrainbench`` writes a run's cells as one:
``ptflow.results.ptb_export``). This module computes that number from the run's cells, as those scripts would compute
it on the export, with the checkout's own ``scripts/factors.json`` (read from the checkout the run used; the checkout
marker records where it is):

* a method is one run of one agent (PostTrainBench names repeats ``_run<k>``); its table has one row per base model
  and one column per eval that has at least one exported run dir of that method (a cell without eval.json is not
  exported: its value is empty when its row and column exist);
* a cell's value is its metric when it was scored, and otherwise (no final model, failed evaluation, not evaluated)
  it is not a number; ``aggregate_final.py`` replaces a value that is not a number, and one whose contamination cell
  is not empty, by the ``baseline_zeroshot`` value of the same base model and eval (ptflow's baseline agent, run 1).
  The contamination cell is empty only for a cell whose one verdict (``ptflow.results.verdict``) is decided clean:
  ``ptflow export --posttrainbench`` writes the judgement files of exactly those cells as clean, of a flagged cell
  as flagged, and none for an undecided, unjudged or trained-kind cell, which therefore falls back there too;
* ``compute_single_metrics.py`` keeps a table only when its rows are exactly its four base models
  (``EXPECTED_MODELS``) and then scores ``sum over the table's evals that factors.json names of factor x (mean over
  the four models)``. It does **not** renormalise: an eval of factors.json that the table lacks adds 0, an eval that
  factors.json does not name is left out. A value that is still not a number (the baseline's own value missing or
  failed) stops the script.

Where the script would skip the table (not its four models) or stop (a fallback without a baseline value), ptflow
shows no leaderboard score for that agent and says why in one line; it never renormalises or guesses. An agent
repeated N times gets the mean over its runs and their sample sd, as ``scripts/compute_single_metrics_avg_stddev.py``
reports a group of runs. The reference agents (baseline, instruct) get the same sum over their own cells (their
rows keyed by the base model they stand for), the number an agent scores whose every cell falls back to the baseline
(PostTrainBench scores no ``baseline_zeroshot`` table itself).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ptflow.results.cells import MISSING, SCORED, ScoredCell
from ptflow.results.settings import Settings

FACTORS_FILE = "scripts/factors.json"
SCRIPT = "scripts/compute_single_metrics.py"
# compute_single_metrics.py's EXPECTED_MODELS at 9082063: the only table rows it scores
EXPECTED_MODELS = ("Qwen3-1.7B-Base", "Qwen3-4B-Base", "SmolLM3-3B-Base", "gemma-3-4b-pt")


class FactorsError(ValueError):
    """The checkout's factors.json cannot be read; one line naming the file and what is wrong."""


@dataclass
class AgentBoard:
    """One agent's leaderboard score: the mean over its runs (None where the script gives none, ``why`` says why)."""

    score: float | None
    run_scores: list[float] = field(default_factory=list)
    sd: float = math.nan  # sample sd over runs (n-1); NaN with one run
    why: str = ""


@dataclass
class Leaderboard:
    source: str  # the factors file read, and the checkout's commit
    factors: dict[str, float]
    agents: dict[str, AgentBoard]
    notes: list[str]  # one line each: evals counted 0 or left out, or why nothing was computed

    @property
    def computed(self) -> bool:
        return any(a.score is not None for a in self.agents.values())


def read_factors(checkout: str | Path) -> dict[str, float]:
    """``scripts/factors.json`` of the checkout: eval -> factor (FactorsError, one line, for a bad file)."""
    path = Path(checkout) / FACTORS_FILE
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise FactorsError(f"{path}: cannot read PostTrainBench's factors ({exc}); check the checkout") from None
    if not isinstance(data, dict) or not data:
        raise FactorsError(f"{path}: not an object of eval -> factor; check the checkout")
    for key, value in data.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise FactorsError(f"{path}: factor of {key!r} = {value!r} is not a finite number; check the checkout")
    return {k: float(v) for k, v in data.items()}


def from_marker(marker: str | Path) -> tuple[dict[str, float], str]:
    """The factors of the checkout a run used (its marker: ``ptflow.stages.posttrainbench.checkout``) and a source
    line naming the file and commit."""
    data = json.loads(Path(marker).read_text())
    factors = read_factors(data["path"])
    return factors, f"{Path(data['path']) / FACTORS_FILE} at {str(data.get('commit', ''))[:12]}"


def model_row(model_id: str) -> str:
    """The row name PostTrainBench's scripts give a model: the part after ``org/`` of its hub id."""
    return model_id.split("/")[-1]


def _judged_clean(c: ScoredCell) -> bool:
    """Whether aggregate_final.py keeps the cell's own value: its one verdict decided clean (``ptflow.results.verdict``;
    ``ptflow export --posttrainbench`` writes its judgement files from that verdict, so the scripts read the same)."""
    return c.verdict.counts_for_posttrainbench


def _value(c: ScoredCell) -> float | None:
    """aggregate_methods.py's value: the metric of a scored cell, else not a number (None); an accepted cell's is
    none (ptflow export writes its run dir without metrics.json: a failed run that the aggregation counts as its
    baseline)."""
    if c.accepted is not None:
        return None
    return c.metric.value if c.status == SCORED and c.metric is not None else None


cell_value = _value  # for the export's comparison lines (ptflow.results.ptb_protocol)


def _sum(table: dict[str, dict[str, float]], factors: Mapping[str, float], evals: list[str]) -> float:
    # compute_single_metrics.py's order: evals as the table's columns (sorted), models as its rows (sorted)
    total = 0.0
    for e in evals:
        total += sum(table[m][e] for m in table) / len(table) * factors[e]
    return total


def _method_table(
    cells: list[ScoredCell],
    baseline: Mapping[tuple[str, str], float | None],
    fallback: bool,
    verdicts: bool = True,
    source: str = "baseline_zeroshot's value",
) -> tuple[dict[str, dict[str, float]] | None, list[str], str]:
    """(final table {row: {eval: value}}, its evals, why not) of one method's cells; ``verdicts``: whether a verdict
    that is not clean replaces the value (False: as an aggregation that drops the verdicts computes it); ``source``:
    what ``baseline`` is, in a few words."""
    exported = [c for c in cells if c.status != MISSING or c.accepted is not None]  # as ptflow export writes them
    rows = sorted({model_row(c.model) for c in exported})
    evals = sorted({c.eval for c in exported})
    if set(rows) != set(EXPECTED_MODELS):
        return None, evals, f"its models are {', '.join(rows) or 'none'}, not {SCRIPT}'s {', '.join(EXPECTED_MODELS)}"
    by_key = {(model_row(c.model), c.eval): c for c in exported}
    table: dict[str, dict[str, float]] = {}
    for row in rows:
        table[row] = {}
        for e in evals:
            c = by_key.get((row, e))
            value = _value(c) if c is not None else None
            if fallback and (value is None or (verdicts and not _judged_clean(c))):
                value = baseline.get((row, e))
                if value is None:
                    if source != "baseline_zeroshot's value":
                        return None, evals, f"cell {row}/{e} falls back to {source}, which has none: the script stops"
                    why = f"cell {row}/{e} falls back to baseline_zeroshot's value, which has none (baseline cell"
                    return None, evals, f"{why} not scored): {SCRIPT} stops on such a table"
            elif value is None:
                return None, evals, f"reference cell {row}/{e} has no score"
            table[row][e] = value
    return table, evals, ""


def leaderboard(
    cells: list[ScoredCell],
    factors: Mapping[str, float],
    source: str,
    settings: Settings,
    verdicts: bool = True,
    fallback_values: Mapping[tuple[str, str], float] | None = None,
    complete: bool = False,
) -> Leaderboard:
    """Every agent's leaderboard score from the scored matrix's cells (``Result.cells``) and the checkout's factors.
    ``verdicts=False``: the number a checkout whose aggregation drops the verdicts prints (``RESULTS_PROTOCOLS``):
    only a value that is not a number falls back there. ``fallback_values`` ((model row, eval) -> value) and
    ``complete``: the number PostTrainBench main's collect.py and aggregate.py print (``ptflow.results.ptb_protocol``):
    a run that falls back takes scripts/baselines.json's value, not ptflow's baseline cell, and a table without every
    eval of factors.json gets no score."""
    references = (settings.baseline_agent, settings.instruct_agent)
    baseline = {
        (model_row(c.model), c.eval): _value(c) for c in cells if c.agent_id == settings.baseline_agent and c.run == 1
    }
    named = "baseline_zeroshot's value"
    if fallback_values is not None:
        baseline, named = dict(fallback_values), "scripts/baselines.json's value"
    agents: dict[str, AgentBoard] = {}
    evals_seen: set[str] = set()
    for agent_id in dict.fromkeys(c.agent_id for c in cells):
        mine = [c for c in cells if c.agent_id == agent_id]
        runs = sorted({c.run for c in mine})
        if agent_id in references:
            runs = runs[:1]  # PostTrainBench keeps one zero-shot result per eval and model
        scores, why = [], ""
        for r in runs:
            mine_r = [c for c in mine if c.run == r]
            table, evals, why = _method_table(mine_r, baseline, agent_id not in references, verdicts, named)
            evals_seen.update(evals)
            lacking = sorted(set(factors) - set(evals)) if complete and table is not None else []
            if lacking:
                table, why = None, f"its table lacks {', '.join(lacking)} of factors.json: aggregate.py scores none"
            if table is None:
                why = f"run {r}: {why}" if len(runs) > 1 else why
                break
            scores.append(_sum(table, factors, [e for e in evals if e in factors]))
        if why:
            agents[agent_id] = AgentBoard(None, why=why)
            continue
        mean = sum(scores) / len(scores)
        sd = math.sqrt(sum((s - mean) ** 2 for s in scores) / (len(scores) - 1)) if len(scores) > 1 else math.nan
        agents[agent_id] = AgentBoard(mean, scores, sd)
    notes = []
    absent = sorted(set(factors) - evals_seen)
    if absent:
        notes.append(f"evals of factors.json not in this run count 0 (no renormalising): {', '.join(absent)}")
    unknown = sorted(evals_seen - set(factors))
    if unknown:
        notes.append(f"evals that factors.json does not name are not counted: {', '.join(unknown)}")
    return Leaderboard(source, dict(factors), agents, notes)


def not_computed(source: str, why: str) -> Leaderboard:
    """A leaderboard with no score at all (the factors could not be read): the reason, one line."""
    return Leaderboard(source, {}, {}, [f"not computed: {why}"])
