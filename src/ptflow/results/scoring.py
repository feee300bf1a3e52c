"""PostTrainBench's score over the matrix's cells: fallback, weighted sum over evals, uncertainty and time used.

The rules, as aisa-group/PostTrainBench's ``scripts/aggregate_final.py`` and its published weights apply them (a run
whose evals come from a PostTrainBench checkout also gets the leaderboard's own number, ``compute_single_metrics.py``
over the checkout's ``factors.json``: ``ptflow.stages.ptb_score``; this module's score is then "ptflow weights"):

* A cell the judge flagged (contamination or a disallowed model), a cell whose agent left no final model, and a
  cell whose evaluation failed (or never produced an eval.json) **fall back to the base model's zero-shot score**
  on that eval: the ``baseline`` agent's cell of the same model and eval (PostTrainBench: its ``baselines.json``).
  Such a cell is neither dropped nor counted as zero; the fallback and its reason are recorded per cell.
* Per (agent, eval): the mean over models. Per agent: ``sum_e w_e * mean_e`` with
  ``w_e ∝ 1 / (mean instruct score_e - mean base score_e)``, normalised to sum to 1 (PostTrainBench's
  ``factors.json`` is exactly this, computed from its baselines table). A gap <= 0 is refused: the weight would be
  undefined or negative.
* Repeats (an agent run N times): each run is scored on its own, then reported as mean ± sample sd (n-1) over runs.

Beyond PostTrainBench, every score carries a standard error propagated from the cells' stderrs (weights are taken
as constants, as PostTrainBench does), and time is reported per agent against its own budget, with GPU-hours.

eval.json ``metrics`` is the headline metric ``{name, value, stderr, n}`` (schema 2; schema 1's
``{accuracy, stderr, n}`` is read too). ``run`` (int) in eval.json, or the cell's agent slot ``<id>@run<k>``
(``ptflow.config.naming.slot``), names the repeat a cell belongs to.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ptflow.config import naming
from ptflow.config.entries import Agent, Model, build_agents, build_models
from ptflow.files import write_text_atomic

SCORED, NO_MODEL, EVAL_FAILED, MISSING = "scored", "no_model", "eval_failed", "missing"
JUDGE_CLEAN, JUDGE_FLAGGED, JUDGE_SKIPPED, JUDGE_NONE = "clean", "flagged", "not judged", ""
JUDGE_NO_VERDICT = "no verdict"  # the judge ran but left no usable verdict: the cell counts as its base model


SUMMARY_COLUMNS = [
    "model",
    "model_name",
    "eval",
    "agent",
    "run",
    "status",
    "judge",
    "metric",
    "value",
    "stderr",
    "n",
    "score",
    "score_stderr",
    "fallback",
    "fallback_reason",
    "score_source",
    "time_taken_s",
    "budget_s",
    "gpu_hours",
    "gpu_hours_source",
    "inspect_log",
    "eval_json",
]


class ScoreError(ValueError):
    """Scoring cannot go on; the message names the cell, key or value and what to do."""


@dataclass(frozen=True)
class Metric:
    name: str
    value: float
    stderr: float  # NaN when the cell did not report one
    n: int | None


@dataclass
class ScoredCell:
    """One (model, eval, agent slot) cell as read from its files, then scored. Its agent is named as the config's
    cells name it (``ptflow.config.matrix.Cell``): ``agent`` is the slot (``sft``, ``sft@run2``), ``agent_id`` the
    agent's id and ``run`` the repeat (summary.csv's ``agent`` column is the id, its ``run`` column the repeat)."""

    model: str  # hub id of the base model
    model_name: str  # path-safe name (org--name)
    eval: str
    agent_id: str  # the agent's id (no run suffix)
    run: int
    status: str  # scored | no_model | eval_failed | missing
    metric: Metric | None = None
    judge: str = JUDGE_NONE
    judge_reason: str = ""
    status_detail: str = ""
    eval_json: str = ""
    cell_dir: str = ""
    inspect_log: str | None = None  # absolute path of the inspect log, when the cell has one
    trace: str | None = None  # absolute path of the agent's readable trace (trace.md)
    time_taken_s: float | None = None
    budget_s: float | None = None
    gpu_hours: float | None = None
    gpu_hours_source: str = "unknown"
    api_usage: dict | None = None  # eval.json's agent_run.api_usage: what the agent's CLI reported spending
    # filled by scoring
    score: float | None = None
    score_stderr: float = math.nan
    fallback: bool = False
    fallback_reason: str = ""
    score_source: str = ""

    @property
    def agent(self) -> str:
        """The cell's agent slot as the matrix names it (``<id>``, or ``<id>@run<k>`` for run k >= 2)."""
        return naming.slot(self.agent_id, self.run)

    @property
    def key(self) -> str:
        return f"{self.model_name}/{self.eval}/{self.agent}"


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


@dataclass
class WeightRow:
    eval: str
    metric: str
    models: int
    base_mean: float
    instruct_mean: float
    gap: float
    weight: float
    base_source: str
    instruct_source: str


@dataclass
class EvalScore:
    agent_id: str
    eval: str
    metric: str
    mean: float
    stderr: float
    sd: float  # across runs (n-1); NaN with one run
    runs: int
    fallbacks: int


@dataclass
class AgentScore:
    agent_id: str
    role: str  # agent | baseline | instruct
    runs: int
    score: float
    stderr: float  # propagated from the cells' stderrs, of the mean over runs
    sd: float  # across runs (n-1); NaN with one run
    run_scores: list[float]
    cells: int
    fallbacks: int
    missing: int
    per_eval: dict[str, EvalScore]
    mean_time_s: float
    time_sd_s: float
    budget_s: float
    time_used: float  # mean time / budget
    gpu_hours: float  # summed over the agent's cells; NaN if any cell's is unknown
    gpu_hours_known: int
    api: ApiSpend | None = None  # summed over the cells whose CLI reported it; None where none did


@dataclass(frozen=True)
class ApiSpend:
    """An agent's API spend over its cells, as their CLIs reported it (eval.json's ``agent_run.api_usage``)."""

    input_tokens: int
    output_tokens: int
    cached_tokens: int
    cost_usd: float  # NaN where no cell's CLI priced its calls
    cells: int  # cells that reported a spend

    @classmethod
    def of(cls, usages: list[dict]) -> ApiSpend | None:
        if not usages:
            return None
        costs = [u["cost_usd"] for u in usages if u.get("cost_usd") is not None]
        return cls(
            sum(int(u.get("input_tokens", 0)) for u in usages),
            sum(int(u.get("output_tokens", 0)) for u in usages),
            sum(int(u.get("cached_tokens", 0)) for u in usages),
            round(sum(costs), 6) if costs else math.nan,
            len(usages),
        )

    def text(self) -> str:
        """Tokens in / cached / out, and USD where a CLI priced its calls."""
        usd = "" if self.cost_usd != self.cost_usd else f", ${self.cost_usd:.2f}"
        return f"{self.input_tokens:,} in / {self.cached_tokens:,} cached / {self.output_tokens:,} out{usd}"


@dataclass
class Result:
    cells: list[ScoredCell]
    weights: list[WeightRow]
    agents: list[AgentScore]
    evals: list[str]
    models: list[str]  # model names
    # a checkout run's leaderboard score (ptflow.stages.ptb_score.Leaderboard), set by the aggregate stage; None: the
    # score is ptflow's weights alone
    leaderboard: Any = None

    def agent(self, agent_id: str) -> AgentScore:
        for a in self.agents:
            if a.agent_id == agent_id:
                return a
        raise KeyError(agent_id)


# ---- reading cells ----


def _number(value, where: str, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ScoreError(f"{where}: {key} = {value!r} is not a finite number; rerun the evaluation of this cell")
    return float(value)


def read_metric(data: dict, where: str) -> Metric | None:
    """The headline metric of an eval.json: ``{name, value, stderr, n}`` or today's ``{accuracy, stderr, n}``."""
    m = data.get("metrics")
    if m is None:
        return None
    if not isinstance(m, dict):
        raise ScoreError(f"{where}: metrics = {m!r} is not an object; rerun the evaluation of this cell")
    if "value" in m:
        name = m.get("name")
        if not isinstance(name, str) or not name:
            raise ScoreError(f"{where}: metrics.value has no metrics.name; the evaluate stage must name its metric")
        value = _number(m["value"], where, "metrics.value")
    elif "accuracy" in m:
        name, value = "accuracy", _number(m["accuracy"], where, "metrics.accuracy")
    else:
        raise ScoreError(
            f"{where}: metrics has neither 'value' (with 'name') nor 'accuracy' (keys: {sorted(m)}); "
            "rerun the evaluation of this cell"
        )
    stderr = m.get("stderr")
    stderr = math.nan if stderr is None else _number(stderr, where, "metrics.stderr")
    n = m.get("n")
    return Metric(name=name, value=value, stderr=stderr, n=int(n) if isinstance(n, int | float) else None)


def split_run(agent: str, run_field) -> tuple[str, int]:
    """(agent id, run) from eval.json's ``agent`` (a slot) and ``run``: ``run`` wins, else the slot's run."""
    try:
        base, run = naming.split_slot(agent)
    except naming.NameError_ as exc:
        raise ScoreError(f"agent {agent!r}: {exc}") from None
    if run_field is not None:
        if isinstance(run_field, bool) or not isinstance(run_field, int) or run_field < 1:
            raise ScoreError(f"agent {agent}: run = {run_field!r} must be an integer >= 1")
        return base, run_field
    return base, run


def _judge(judge: dict | None) -> tuple[str, str]:
    if judge is None:
        return JUDGE_NONE, ""
    if judge.get("status") == "skipped":
        return JUDGE_SKIPPED, str(judge.get("reason", ""))
    if judge.get("status") == "no_verdict":
        return JUDGE_NO_VERDICT, str(judge.get("reason", ""))
    if judge.get("flagged"):
        what = [k for k in ("contamination", "disallowed_model") if judge.get(k)]
        return JUDGE_FLAGGED, f"{'+'.join(what) or 'flagged'}: {judge.get('reason', '')}".strip()
    return JUDGE_CLEAN, str(judge.get("reason", ""))


def _status(data: dict, metric: Metric | None) -> tuple[str, str]:
    run = data.get("agent_run") or {}
    if data.get("status") == NO_MODEL:
        why = "budget exhausted" if run.get("budget_exhausted") else f"agent exited {run.get('exit_code')}"
        return NO_MODEL, f"no final model ({why})"
    attempts = data.get("attempts") or []
    if data.get("status") == EVAL_FAILED or (metric is None and attempts and not any(a.get("ok") for a in attempts)):
        last = next((a.get("error", "") for a in reversed(attempts) if not a.get("ok")), "")
        return EVAL_FAILED, f"evaluation failed after {len(attempts)} tries" + (f": {last[:200]}" if last else "")
    if metric is None:
        return EVAL_FAILED, "eval.json has no metrics"
    return SCORED, ""


def _gpu_hours(data: dict, gpus: Mapping[str, int] | None) -> tuple[float | None, str]:
    """GPU-hours of a cell from its own timings x the GPUs of its jobs (Slurm's accounting, where a cluster keeps
    one, replaces this: ptflow.stages.report.apply_accounting)."""
    t = data.get("timings") or {}
    counts = {"train": t.get("train_gpus"), "eval": t.get("eval_gpus")}
    for stage in counts:
        if counts[stage] is None and gpus is not None:
            counts[stage] = gpus.get(stage)
    train_s = t.get("train_seconds") or 0.0
    eval_s = t.get("eval_seconds") or 0.0
    if (train_s and counts["train"] is None) or (eval_s and counts["eval"] is None):
        return None, "unknown"
    hours = (train_s * (counts["train"] or 0) + eval_s * (counts["eval"] or 0)) / 3600
    return hours, "timings x gpus"


def read_cell(eval_json: str | Path, settings: Settings | None = None) -> ScoredCell:
    """One cell from its eval.json and, beside it, judge.json, accounting.json and agent/trace.md."""
    settings = settings or Settings()
    path = Path(eval_json)
    where = str(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ScoreError(f"{where}: cannot read eval.json ({exc}); rerun the evaluation of this cell") from None
    for key in ("model", "eval", "agent"):
        if not isinstance(data.get(key), str) or not data[key]:
            raise ScoreError(f"{where}: key {key!r} is missing or empty; rerun the evaluation of this cell")
    agent_id, run = split_run(data["agent"], data.get("run"))
    metric = read_metric(data, where)
    status, detail = _status(data, metric)
    judge_path = path.with_name("judge.json")
    judge_data = json.loads(judge_path.read_text()) if judge_path.is_file() else None
    judge, judge_reason = _judge(judge_data)
    trace = None
    if judge_data and judge_data.get("trace"):
        trace = (judge_path.parent / judge_data["trace"]).resolve()
    elif (path.parent / "agent" / "trace.md").is_file():
        trace = (path.parent / "agent" / "trace.md").resolve()
    log = data.get("inspect_log")
    run_info = data.get("agent_run") or {}
    hours = run_info.get("hours")
    gpu_hours, gpu_source = _gpu_hours(data, settings.gpus or settings.agent_gpus.get(agent_id))
    return ScoredCell(
        model=data["model"],
        model_name=data.get("model_name") or data["model"].replace("/", "--"),
        eval=data["eval"],
        agent_id=agent_id,
        run=run,
        status=status,
        metric=metric,
        judge=judge,
        judge_reason=judge_reason,
        status_detail=detail,
        eval_json=str(path.resolve()),
        cell_dir=str(path.parent.resolve()),
        inspect_log=str((path.parent / log).resolve()) if log else None,
        trace=str(trace) if trace and Path(trace).is_file() else None,
        time_taken_s=float(run_info["time_taken"]) if run_info.get("time_taken") is not None else None,
        budget_s=float(hours) * 3600 if hours is not None else None,
        gpu_hours=gpu_hours,
        gpu_hours_source=gpu_source,
        api_usage=run_info.get("api_usage") if isinstance(run_info.get("api_usage"), dict) else None,
    )


# ---- reference scores (base and instruct) ----


def instruct_counterpart(model_id: str, named: Mapping[str, str]) -> str | None:
    """The instruct model of a base model: as named in config, else PostTrainBench's naming (-Base, -pt -> -it)."""
    if model_id in named:
        return named[model_id]
    if model_id.endswith("-Base"):
        return model_id[: -len("-Base")]
    if model_id.endswith("-pt"):
        return model_id[: -len("-pt")] + "-it"
    return None


def _table_lookup(table: Mapping | None, model_id: str, eval_id: str) -> float | None:
    """A zero-shot score from a PostTrainBench-shaped table, keyed by hub id, path name or bare name."""
    if not table:
        return None
    zeroshot = table.get("zeroshot", table)
    for key in (model_id, model_id.replace("/", "--"), model_id.split("/")[-1]):
        row = zeroshot.get(key)
        if isinstance(row, Mapping) and eval_id in row:
            return _number(row[eval_id], f"scoring reference table zeroshot.{key}", eval_id)
    return None


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _sd(values: list[float]) -> float:
    if len(values) < 2:
        return math.nan
    m = _mean(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))


def _se_of_mean(stderrs: list[float]) -> float:
    """Standard error of the mean of independent values with these stderrs."""
    return math.sqrt(sum(s * s for s in stderrs)) / len(stderrs)


class _References:
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
        return _mean([c.metric.value for c in scored]), _se_of_mean([c.metric.stderr for c in scored])

    def base(self, model_name: str, eval_id: str) -> tuple[float, float, str] | None:
        got = self._measured(self.settings.baseline_agent, model_name, eval_id)
        if got:
            return got[0], got[1], f"{self.settings.baseline_agent} cell"
        value = _table_lookup(self.settings.reference, self.model_ids[model_name], eval_id)
        return (value, 0.0, "reference table") if value is not None else None

    def instruct(self, model_name: str, eval_id: str, effective: dict) -> tuple[float, str]:
        s = self.settings
        got = self._measured(s.instruct_agent, model_name, eval_id)
        if got:
            return got[0], f"{s.instruct_agent} cells"
        model_id = self.model_ids[model_name]
        counterpart = instruct_counterpart(model_id, s.instruct_models)
        value = _table_lookup(s.reference, counterpart, eval_id) if counterpart else None
        if value is not None:
            return value, "reference table"
        if s.reference_agent:
            scores = effective.get((model_name, eval_id, s.reference_agent))
            if scores:
                return _mean(scores), f"{s.reference_agent} cells"
        raise ScoreError(
            f"model {model_id} eval {eval_id}: no instruct reference score; evaluate its instruct counterpart "
            f"(agent {s.instruct_agent!r}), add '{(counterpart or model_id).split('/')[-1]}' to scoring.reference "
            "zeroshot, or set scoring.reference_agent"
        )


# ---- scoring ----


def _expected_keys(
    cells: list[ScoredCell], expected: Iterable | None, references: tuple[str, ...]
) -> list[tuple[str, str, str, int]]:
    """Every (model name, eval, agent, run) the score needs: given by the caller, else the full grid of what exists
    (reference agents only where they have cells: an instruct counterpart may exist for some models only)."""
    if expected is not None:
        out = []
        for e in expected:
            get = e.get if isinstance(e, Mapping) else lambda k, e=e: getattr(e, k)
            agent_id, run = split_run(get("agent"), None)
            out.append((get("model"), get("eval"), agent_id, run))
        return out
    models = sorted({c.model_name for c in cells})
    evals = sorted({c.eval for c in cells})
    runs = {}
    for c in cells:
        runs.setdefault(c.agent_id, set()).add(c.run)
    have = {(c.model_name, c.eval, c.agent_id, c.run) for c in cells}
    grid = [(m, e, a, r) for a in runs for r in sorted(runs[a]) for m in models for e in evals]
    return [k for k in grid if k[2] not in references or k in have]


def _fallback_reason(c: ScoredCell, settings: Settings) -> str:
    if c.agent_id in (settings.baseline_agent, settings.instruct_agent):
        return ""  # reference cells are never replaced by themselves
    if c.judge == JUDGE_FLAGGED:
        return f"judge flagged {c.judge_reason}"
    if c.judge == JUDGE_NO_VERDICT:
        return f"judge gave no verdict: {c.judge_reason}"
    if c.status != SCORED:
        return c.status_detail
    if c.judge == JUDGE_SKIPPED and settings.unjudged == "fallback":
        return "not judged (scoring.unjudged: fallback)"
    return ""


def score(
    cells: list[ScoredCell], settings: Settings | None = None, expected: Iterable | None = None, model_ids=None
) -> Result:
    """Apply the fallback, compute the weights, then every agent's score, error and time."""
    settings = settings or Settings()
    if settings.unjudged not in ("score", "fallback"):
        raise ScoreError(f"scoring.unjudged = {settings.unjudged!r}: use 'score' or 'fallback'")
    by_key: dict[tuple[str, str, str, int], ScoredCell] = {}
    for c in cells:
        k = (c.model_name, c.eval, c.agent_id, c.run)
        if k in by_key:
            raise ScoreError(f"cell {c.key} appears twice ({by_key[k].eval_json} and {c.eval_json}); remove one")
        by_key[k] = c
    model_ids = dict(model_ids or {})
    model_ids.update({c.model_name: c.model for c in cells})
    all_cells = []
    references = (settings.baseline_agent, settings.instruct_agent)
    for k in _expected_keys(cells, expected, references):
        if k in by_key:
            all_cells.append(by_key[k])
            continue
        m, e, a, r = k
        model_id = model_ids.get(m, m.replace("--", "/", 1))
        detail = "no eval.json (evaluation not run, or failed before writing it)"
        all_cells.append(ScoredCell(model_id, m, e, a, r, MISSING, status_detail=detail))
    # baseline/instruct cells outside the expected set still serve as references
    chosen = {id(c) for c in all_cells}
    extra = [c for c in by_key.values() if id(c) not in chosen and c.agent_id in references]
    refs = _References(all_cells + extra, settings)

    metric_names: dict[str, str] = {}
    for c in all_cells + extra:
        if c.metric:
            seen = metric_names.setdefault(c.eval, c.metric.name)
            if seen != c.metric.name:
                raise ScoreError(
                    f"eval {c.eval}: cells report metrics {seen!r} and {c.metric.name!r} ({c.eval_json}); "
                    "one eval must have one headline metric"
                )

    for c in all_cells:
        reason = _fallback_reason(c, settings)
        if not reason:
            if c.metric is None or c.status != SCORED:
                table = (
                    _table_lookup(settings.reference, c.model, c.eval)
                    if c.agent_id == settings.baseline_agent
                    else None
                )
                if table is None:
                    raise ScoreError(
                        f"reference cell {c.key} has no score ({c.status_detail}); the fallbacks and weights of this "
                        "model and eval need it: rerun that cell"
                    )
                c.score, c.score_stderr, c.score_source = table, 0.0, "reference table"
                c.fallback, c.fallback_reason = True, c.status_detail
                continue
            c.score, c.score_stderr, c.score_source = c.metric.value, c.metric.stderr, "cell"
            continue
        base = refs.base(c.model_name, c.eval)
        if base is None:
            raise ScoreError(
                f"cell {c.key} falls back to the base model's zero-shot score ({reason}) but cell "
                f"{c.model_name}/{c.eval}/{settings.baseline_agent} has no score and scoring.reference has none "
                f"for {c.model}; run the baseline cell or add it to the reference table"
            )
        c.score, c.score_stderr, c.score_source = base
        c.fallback, c.fallback_reason = True, reason

    evals = sorted({c.eval for c in all_cells})
    models = sorted({c.model_name for c in all_cells})
    effective: dict[tuple[str, str, str], list[float]] = {}
    for c in all_cells:
        effective.setdefault((c.model_name, c.eval, c.agent_id), []).append(c.score)
    weights = _weights(all_cells, evals, refs, effective, metric_names, settings)
    w = {row.eval: row.weight for row in weights}

    agents_seen = list(dict.fromkeys(c.agent_id for c in all_cells))
    order = [a for a in settings.agent_order if a in agents_seen] + [
        a for a in agents_seen if a not in settings.agent_order
    ]
    agents = [_agent_score(a, [c for c in all_cells if c.agent_id == a], w, metric_names, settings) for a in order]
    return Result(cells=all_cells, weights=weights, agents=agents, evals=evals, models=models)


def _weights(cells, evals, refs: _References, effective, metric_names, settings: Settings) -> list[WeightRow]:
    rows = []
    for e in evals:
        model_names = sorted({c.model_name for c in cells if c.eval == e})
        bases, instructs, base_src, inst_src = [], [], set(), set()
        for m in model_names:
            base = refs.base(m, e)
            if base is None:
                raise ScoreError(
                    f"eval {e}: model {refs.model_ids[m]} has no base zero-shot score for the weights; run its "
                    f"{settings.baseline_agent} cell or add it to scoring.reference"
                )
            bases.append(base[0])
            base_src.add(base[2])
            if settings.weights is None and len(evals) > 1:  # one eval weighs 1; fixed weights need no reference
                value, src = refs.instruct(m, e, effective)
                instructs.append(value)
                inst_src.add(src)
        if settings.weights is not None:
            inst_src.add("(fixed weights)")
        elif len(evals) == 1:
            inst_src.add("(one eval: weight 1)")
        base_mean = _mean(bases)
        inst_mean = _mean(instructs) if instructs else math.nan
        gap = inst_mean - base_mean
        if settings.weights is None and len(evals) > 1 and gap <= 0:
            raise ScoreError(
                f"eval {e}: mean instruct score {inst_mean:.4f} <= mean base score {base_mean:.4f} (gap {gap:.4f}), "
                "so its weight 1/gap is undefined; check the instruct reference of this eval or leave it out"
            )
        rows.append(
            WeightRow(
                e,
                metric_names.get(e, ""),
                len(model_names),
                base_mean,
                inst_mean,
                gap,
                math.nan,
                ", ".join(sorted(base_src)),
                ", ".join(sorted(inst_src)),
            )
        )
    if settings.weights is not None:
        missing = [r.eval for r in rows if r.eval not in settings.weights]
        if missing:
            raise ScoreError(f"scoring.weights has no weight for eval(s) {', '.join(missing)}; add them")
        raw = {r.eval: _number(settings.weights[r.eval], "scoring.weights", r.eval) for r in rows}
    elif len(rows) == 1:
        raw = {rows[0].eval: 1.0}
    else:
        raw = {r.eval: 1 / r.gap for r in rows}
    total = sum(raw.values())
    if total <= 0:
        raise ScoreError(f"scoring.weights sum to {total}; give positive weights")
    for r in rows:
        r.weight = raw[r.eval] / total
    return rows


def _agent_score(
    agent_id: str, cells: list[ScoredCell], w: dict[str, float], metric_names, settings: Settings
) -> AgentScore:
    runs = sorted({c.run for c in cells})
    run_scores, run_ses, per_eval_runs = [], [], {}
    for r in runs:
        total, var = 0.0, 0.0
        for e, weight in w.items():
            part = [c for c in cells if c.run == r and c.eval == e]
            if not part:
                continue
            mean = _mean([c.score for c in part])
            se = _se_of_mean([c.score_stderr for c in part])
            per_eval_runs.setdefault(e, []).append((mean, se, sum(c.fallback for c in part)))
            total += weight * mean
            var += (weight * se) ** 2
        run_scores.append(total)
        run_ses.append(math.sqrt(var))
    per_eval = {}
    for e, values in per_eval_runs.items():
        per_eval[e] = EvalScore(
            agent_id,
            e,
            metric_names.get(e, ""),
            _mean([v[0] for v in values]),
            _se_of_mean([v[1] for v in values]),
            _sd([v[0] for v in values]),
            len(values),
            sum(v[2] for v in values),
        )
    # time: per run the mean over cells that recorded it, then mean (and sd) over runs, as PostTrainBench does
    run_times = []
    for r in runs:
        times = [c.time_taken_s for c in cells if c.run == r and c.time_taken_s is not None]
        if times:
            run_times.append(_mean(times))
    budgets = [c.budget_s for c in cells if c.budget_s]
    budget = _mean(budgets) if budgets else math.nan
    mean_time = _mean(run_times) if run_times else math.nan
    gpu = [c.gpu_hours for c in cells if c.status != MISSING]
    known = [g for g in gpu if g is not None]
    role = (
        "baseline"
        if agent_id == settings.baseline_agent
        else "instruct"
        if agent_id == settings.instruct_agent
        else "agent"
    )
    return AgentScore(
        agent_id=agent_id,
        role=role,
        runs=len(runs),
        score=_mean(run_scores),
        stderr=_se_of_mean(run_ses),
        sd=_sd(run_scores),
        run_scores=run_scores,
        cells=len(cells),
        fallbacks=sum(c.fallback for c in cells),
        missing=sum(c.status == MISSING for c in cells),
        per_eval=per_eval,
        mean_time_s=mean_time,
        time_sd_s=_sd(run_times),
        budget_s=budget,
        time_used=mean_time / budget if run_times and budgets else math.nan,
        gpu_hours=sum(known) if len(known) == len(gpu) else math.nan,
        gpu_hours_known=len(known),
        api=ApiSpend.of([c.api_usage for c in cells if c.api_usage]),
    )


def reference_scores(result: Result) -> dict[str, float]:
    """The weighted score of the base and of the instruct references themselves (PostTrainBench's baseline rows)."""
    return {
        "base (zero-shot)": sum(r.weight * r.base_mean for r in result.weights),
        "instruct (zero-shot)": sum(r.weight * r.instruct_mean for r in result.weights),
    }


# ---- configuration ----


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


# ---- outputs ----


def hms(seconds: float) -> str:
    """H:MM:SS, as PostTrainBench's time overview writes it."""
    if seconds is None or seconds != seconds:
        return "—"
    s = int(seconds)
    return f"{s // 3600}:{(s % 3600) // 60:02d}:{s % 60:02d}"


def _f(value, digits: int = 6) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return ""
    return f"{value:.{digits}g}" if isinstance(value, float) else str(value)


def _csv(rows: list[list]) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue()


def summary_csv(result: Result) -> str:
    """One row per cell, the fallback applied and said so (columns: SUMMARY_COLUMNS)."""
    rows = []
    for c in sorted(result.cells, key=lambda c: (c.eval, c.model_name, c.agent_id, c.run)):
        m = c.metric
        row = {k: getattr(c, k) for k in ("model", "model_name", "eval", "run", "status", "judge")}
        row["agent"] = c.agent_id  # the column is the agent's id, `run` its repeat
        row |= {"metric": m.name, "value": _f(m.value), "stderr": _f(m.stderr), "n": _f(m.n)} if m else {}
        row |= {k: _f(getattr(c, k)) for k in ("score", "score_stderr", "time_taken_s", "budget_s", "gpu_hours")}
        row |= {k: getattr(c, k) for k in ("fallback_reason", "score_source", "gpu_hours_source", "eval_json")}
        row |= {"fallback": "yes" if c.fallback else "", "inspect_log": c.inspect_log or ""}
        rows.append(row)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, SUMMARY_COLUMNS, restval="", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def agents_csv(result: Result) -> str:
    head = [
        "agent",
        "role",
        "runs",
        "score",
        "score_stderr",
        "score_sd",
        "cells",
        "fallbacks",
        "missing",
        "mean_time_s",
        "mean_time",
        "time_sd_s",
        "budget_s",
        "time_used_pct",
        "gpu_hours",
        "api_input_tokens",
        "api_output_tokens",
        "api_cached_tokens",
        "api_cost_usd",
    ]
    head += [f"{e}" for e in result.evals] + [f"{e}_stderr" for e in result.evals]
    board = result.leaderboard
    if board is not None:  # a checkout run: the leaderboard's own score beside ptflow's (`score` columns)
        head += ["leaderboard_score", "leaderboard_score_sd", "leaderboard_why"]
    rows = [head]
    for a in result.agents:
        own = board.agents.get(a.agent_id) if board is not None else None
        extra = []
        if board is not None:
            extra = [_f(own.score), _f(own.sd), own.why] if own else ["", "", _board_why(board)]
        rows.append(
            [
                a.agent_id,
                a.role,
                a.runs,
                _f(a.score),
                _f(a.stderr),
                _f(a.sd),
                a.cells,
                a.fallbacks,
                a.missing,
                _f(a.mean_time_s),
                hms(a.mean_time_s) if a.mean_time_s == a.mean_time_s else "",
                _f(a.time_sd_s),
                _f(a.budget_s),
                _f(100 * a.time_used, 4),
                _f(a.gpu_hours, 4),
                *(
                    [a.api.input_tokens, a.api.output_tokens, a.api.cached_tokens, _f(a.api.cost_usd, 6)]
                    if a.api
                    else ["", "", "", ""]
                ),
            ]
            + [_f(a.per_eval[e].mean) if e in a.per_eval else "" for e in result.evals]
            + [_f(a.per_eval[e].stderr) if e in a.per_eval else "" for e in result.evals]
            + extra
        )
    return _csv(rows)


def weights_csv(result: Result) -> str:
    rows = [["eval", "metric", "models", "base_mean", "instruct_mean", "gap", "weight", "base_from", "instruct_from"]]
    for r in result.weights:
        rows.append(
            [
                r.eval,
                r.metric,
                r.models,
                _f(r.base_mean),
                _f(r.instruct_mean),
                _f(r.gap),
                _f(r.weight, 12),
                r.base_source,
                r.instruct_source,
            ]
        )
    return _csv(rows)


def _num(value: float, digits: int) -> str:
    return "—" if value != value else f"{value:.{digits}f}"


def score_text(a: AgentScore) -> str:
    """``0.412 ± 0.010`` (stderr); with repeats ``0.412 ± 0.015 sd (3 runs; stderr 0.006)``."""
    if a.runs > 1:
        return f"{a.score:.3f} ± {a.sd:.3f} sd ({a.runs} runs; stderr {a.stderr:.3f})"
    return f"{a.score:.3f} ± {a.stderr:.3f}"


PTFLOW_WEIGHTS_TEXT = (
    "the weighted sum over evals of each eval's mean over models; weights ∝ 1/(mean instruct − mean base)"
    " zero-shot score, normalised to 1 (PostTrainBench). ± is the standard error propagated from the cells'"
    " stderrs; with repeats, ± is the sample sd over runs. Flagged, no-model and failed cells count as the base"
    " model's zero-shot score (see Fallbacks)."
)


def leaderboard_text(board) -> str:
    """What a checkout run's headline score is (ptflow.stages.ptb_score), one paragraph."""
    return (
        "PostTrainBench's own, as its scripts/compute_single_metrics.py computes it from the final_<method>.csv"
        f" tables, with the factors of {board.source}: per eval the mean over its four base models, times the"
        " eval's factor, summed; not renormalised. A cell that is not scored, or whose judgement files are not both"
        " clean (none: not judged), counts as baseline_zeroshot's value (aggregate_final.py); with repeats, the mean"
        " ± sample sd over runs. Reference rows: the same sum over their own cells."
    )


def _board_why(board) -> str:
    return next((n for n in board.notes if n.startswith("not computed")), "")


def board_lines(result: Result) -> list[str]:
    """One line each on the leaderboard score: evals counted 0 or left out, and why an agent has none (one line for
    a reason every such agent shares, such as a matrix that is not the script's four models)."""
    board = result.leaderboard
    if board is None:
        return []
    lines = list(board.notes)
    missing = {a.agent_id: board.agents[a.agent_id].why for a in result.agents if a.agent_id in board.agents}
    missing = {k: v for k, v in missing.items() if v}
    if missing and len(set(missing.values())) == 1 and len(missing) > 1:
        lines.append(f"no leaderboard score: {next(iter(missing.values()))}")
    else:
        lines += [f"{k}: no leaderboard score: {v}" for k, v in missing.items()]
    if not board.computed:
        lines.append("ranked by ptflow weights")
    return lines


def board_text(result: Result, a: AgentScore) -> str:
    """An agent's leaderboard score: ``0.412``, ``0.412 ± 0.015 sd (3 runs)``, or ``—`` (none; board_lines says
    why)."""
    own = result.leaderboard.agents.get(a.agent_id) if result.leaderboard is not None else None
    if own is None or own.score is None:
        return "—"
    if len(own.run_scores) > 1:
        return f"{own.score:.3f} ± {own.sd:.3f} sd ({len(own.run_scores)} runs)"
    return f"{own.score:.3f}"


def ranked(result: Result) -> list[AgentScore]:
    """The leaderboard's order: a checkout run's agents by their leaderboard score (those without one after them),
    any other run's by ptflow's weighted score."""
    board = result.leaderboard
    if board is None or not board.computed:
        return sorted(result.agents, key=lambda a: -a.score)

    def key(a: AgentScore) -> tuple[int, float]:
        own = board.agents.get(a.agent_id)
        if own is None or own.score is None:
            return (1, -a.score)
        return (0, -own.score)

    return sorted(result.agents, key=key)


def leaderboard_markdown(result: Result) -> str:
    board = result.leaderboard
    if board is None:
        lines = ["# Leaderboard", "", "Score: " + PTFLOW_WEIGHTS_TEXT, ""]
        lines += [
            "| rank | agent | score | fallbacks | time used (mean) | budget used | GPU-hours |",
            "|---:|---|---|---:|---:|---:|---:|",
        ]
    else:
        lines = ["# Leaderboard", "", "Score: " + leaderboard_text(board), "", "ptflow weights: " + PTFLOW_WEIGHTS_TEXT]
        lines += [""] + [f"- {line}" for line in board_lines(result)] + ([""] if board_lines(result) else [])
        lines += [
            "| rank | agent | score | ptflow weights | fallbacks | time used (mean) | budget used | GPU-hours |",
            "|---:|---|---|---|---:|---:|---:|---:|",
        ]
    for i, a in enumerate(ranked(result), 1):
        pct = "—" if a.time_used != a.time_used else f"{100 * a.time_used:.1f}%"
        gpu = "—" if a.gpu_hours != a.gpu_hours else f"{a.gpu_hours:.2f}"
        name = a.agent_id if a.role == "agent" else f"{a.agent_id} (reference)"
        missing = f" ({a.missing} missing)" if a.missing else ""
        scores = score_text(a) if board is None else f"{board_text(result, a)} | {score_text(a)}"
        lines.append(
            f"| {i} | {name} | {scores} | {a.fallbacks}/{a.cells}{missing} | {hms(a.mean_time_s)} | {pct} | {gpu} |"
        )
    spend = [a for a in ranked(result) if a.api]
    if spend:
        lines += [
            "",
            "API spend, as the agents' CLIs reported it (tokens in / cached / out; USD where the CLI prices):",
        ]
        lines += [f"- {a.agent_id}: {a.api.text()} ({a.api.cells} of {a.cells} cells reported)" for a in spend]
    refs = reference_scores(result)
    lines += ["", "Reference rows: " + "; ".join(f"{k} {_num(v, 3)}" for k, v in refs.items()) + ".", ""]
    lines += [
        "## Per eval (mean over models)",
        "",
        "| agent | " + " | ".join(f"{r.eval} ({r.metric})" for r in result.weights) + " |",
        "|---|" + "---:|" * len(result.weights),
    ]
    for a in result.agents:
        cells = []
        for r in result.weights:
            es = a.per_eval.get(r.eval)
            cells.append("—" if es is None else f"{es.mean:.3f} ± {es.stderr:.3f}")
        lines.append(f"| {a.agent_id} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Weights",
        "",
        "| eval | metric | base mean | instruct mean | gap | weight | base from | instruct from |",
        "|---|---|---:|---:|---:|---:|---|---|",
    ]
    for r in result.weights:
        lines.append(
            f"| {r.eval} | {r.metric} | {_num(r.base_mean, 4)} | {_num(r.instruct_mean, 4)} | {_num(r.gap, 4)} "
            f"| {r.weight:.4f} | {r.base_source} | {r.instruct_source} |"
        )
    if board is not None and board.factors:
        factors = ", ".join(f"{e} {f:.4f}" for e, f in sorted(board.factors.items()))
        lines += ["", f"Leaderboard factors ({board.source}): {factors}."]
    fallbacks = [c for c in result.cells if c.fallback]
    lines += ["", "## Fallbacks", ""]
    if fallbacks:
        lines += ["| cell | reason | counted as |", "|---|---|---:|"]
        for c in sorted(fallbacks, key=lambda c: c.key):
            lines.append(f"| {c.key} | {c.fallback_reason.replace('|', '/')} | {c.score:.3f} ({c.score_source}) |")
    else:
        lines.append("None.")
    return "\n".join(lines) + "\n"


def write_outputs(
    result: Result,
    summary: str | Path,
    agents: str | Path,
    leaderboard: str | Path,
    weights: str | Path | None = None,
) -> None:
    """Every output written atomically (a reader sees the old file or the new one, never half of one)."""
    for path, text in ((summary, summary_csv(result)), (agents, agents_csv(result))):
        write_text_atomic(path, text)
    if weights is not None:
        write_text_atomic(weights, weights_csv(result))
    write_text_atomic(leaderboard, leaderboard_markdown(result))
