"""PostTrainBench's score over the matrix's cells: fallback, weighted sum over evals, uncertainty and time used.

The rules, as aisa-group/PostTrainBench's ``scripts/aggregate_final.py`` and its published weights apply them (a run
whose evals come from a PostTrainBench checkout also gets the leaderboard's own number, ``compute_single_metrics.py``
over the checkout's ``factors.json``: ``ptflow.results.ptb_score``; this module's score is then "ptflow weights"):

* A cell the judge flagged (contamination or a disallowed model), a cell whose agent left no final model, and a
  cell whose evaluation failed (or never produced an eval.json) **fall back to the base model's zero-shot score**
  on that eval: the ``baseline`` agent's cell of the same model and eval (PostTrainBench: its ``baselines.json``).
  Such a cell is neither dropped nor counted as zero; the fallback and its reason are recorded per cell.
  A cell whose failure an operator accepted (``accepted:`` in the file of ``scoring.overrides``,
  ``ptflow.results.overrides``) falls back the same way whatever files it has, its reason "accepted: ...".
* Per (agent, eval): the mean over models. Per agent: ``sum_e w_e * mean_e`` with
  ``w_e ∝ 1 / (mean instruct score_e - mean base score_e)``, normalised to sum to 1 (PostTrainBench's
  ``factors.json`` is exactly this, computed from its baselines table). A gap <= 0 is refused: the weight would be
  undefined or negative.
* Repeats (an agent run N times): each run is scored on its own, then reported as mean ± sample sd (n-1) over runs.

Beyond PostTrainBench, every score carries a standard error propagated from the cells' stderrs (weights are taken
as constants, as PostTrainBench does), and time is reported per agent against its own budget, with GPU-hours.

The cells come from ``ptflow.results.cells``, the references from ``ptflow.results.references``; the
csv and markdown outputs are ``ptflow.results.tables``'.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ptflow.results.cells import (
    JUDGE_FLAGGED,
    JUDGE_NO_VERDICT,
    MISSING,
    SCORED,
    ScoredCell,
    ScoreError,
    finite_number,
    split_run,
)
from ptflow.results.overrides import apply_accepted, apply_overrides
from ptflow.results.references import References, mean_of, reference_table_score, sd_of, se_of_mean
from ptflow.results.settings import Settings


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
    # dollars (agent_run.spend: the CLI's own price, else tokens x the price table; ptflow.config.spend): their sum
    # over the cells that have them (NaN: none), how many do, and whether the agent is a subscription
    usd: float = math.nan
    usd_cells: int = 0
    subscription: bool = False

    @classmethod
    def of(cls, usages: list[dict]) -> ApiSpend | None:
        if not usages:
            return None
        costs = [u["cost_usd"] for u in usages if u.get("cost_usd") is not None]
        spends = [u.get("spend") or {} for u in usages]
        dollars = [
            s["usd"] if s.get("usd") is not None else u["cost_usd"]
            for u, s in zip(usages, spends, strict=True)
            if s.get("usd") is not None or (u.get("cost_usd") is not None and s.get("basis") != "subscription")
        ]
        return cls(
            sum(int(u.get("input_tokens", 0)) for u in usages),
            sum(int(u.get("output_tokens", 0)) for u in usages),
            sum(int(u.get("cached_tokens", 0)) for u in usages),
            round(sum(costs), 6) if costs else math.nan,
            len(usages),
            round(sum(dollars), 6) if dollars else math.nan,
            len(dollars),
            any(s.get("basis") == "subscription" for s in spends),
        )

    def dollars_text(self) -> str:
        """The agent's dollars as the leaderboard shows them: their sum and mean over the cells that have them, the
        others said (never given a mean of the rest); "subscription"; "n/a (tokens only, no price)"."""
        from ptflow.config.spend import NOT_PRICED, SUBSCRIPTION

        if not self.usd_cells:
            return SUBSCRIPTION if self.subscription else NOT_PRICED
        text = f"${self.usd:.2f} (mean ${self.usd / self.usd_cells:.2f} per cell)"
        unknown = self.cells - self.usd_cells
        return text + (f"; {unknown} cell{'s' if unknown > 1 else ''} unknown (no price)" if unknown else "")

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
    # a checkout run's leaderboard score (ptflow.results.ptb_score.Leaderboard), set by the aggregate stage; None: the
    # score is ptflow's weights alone
    leaderboard: Any = None
    # scorer -> agent id -> the agent's score with its cells' rescored values (rule rescore; rescored_scores)
    rescored: dict = field(default_factory=dict)

    def agent(self, agent_id: str) -> AgentScore:
        for a in self.agents:
            if a.agent_id == agent_id:
                return a
        raise KeyError(agent_id)


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
    """Why the cell counts at its base model's score ("" where its own counts), from its one verdict
    (``ptflow.results.verdict``) and its status."""
    if c.agent_id in (settings.baseline_agent, settings.instruct_agent):
        return ""  # reference cells are never replaced by themselves
    v = c.verdict
    if v.accepted is not None:  # an operator accepted its failure: PostTrainBench counts such a run at its baseline
        return v.accepted.text()
    if v.state == JUDGE_FLAGGED:
        votes = f" (votes: {v.votes})" if v.vote_count > 1 and not v.overrides else ""
        return f"{'flagged' if v.overrides else 'judge flagged'} {v.reason}{votes}"
    if v.state == JUDGE_NO_VERDICT:
        return f"judge gave no verdict: {v.reason}"
    if c.status != SCORED:
        return c.status_detail
    if not v.counts_own_value(settings.unjudged):
        return "not judged (scoring.unjudged: fallback)"
    return ""


def _stop_if_the_judges_say_so(c: ScoredCell) -> None:
    """A verdict whose effect is ``stop`` (judge.effects) stops the aggregation, as PostTrainBench's benchmark-lookup
    flag does: no leaderboard is made while such a cell is in it."""
    v = c.verdict
    if v.effect == "stop":
        raise ScoreError(
            f"cell {c.key}: the judges flagged {v.fields_text() or v.state}, whose effect is stop (config key "
            f"judge.effects); the aggregation stops — look at the cell's judge.json (votes: {v.votes or 'none'}), "
            "then fix the run or override the verdict"
        )


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
    expected = list(expected) if expected is not None else None
    keys = _expected_keys(cells, expected, references)
    # cells the matrix spend cap kept from starting (ptflow.jobs.rule_values.RuleInputs.scoring): their reason
    not_started = {k: e["not_started"] for k, e in zip(keys, expected or [], strict=False)
                   if isinstance(e, Mapping) and e.get("not_started")}  # fmt: skip
    for k in keys:
        if k in by_key:
            all_cells.append(by_key[k])
            continue
        m, e, a, r = k
        model_id = model_ids.get(m, m.replace("--", "/", 1))
        detail = not_started.get(k) or "no eval.json (evaluation not run, or failed before writing it)"
        all_cells.append(ScoredCell(model_id, m, e, a, r, MISSING, status_detail=detail))
    apply_overrides(all_cells, settings.overrides)  # a person's decision outranks the judges' (scoring.overrides)
    apply_accepted(all_cells, settings.accepted)  # accepted failures count at their fallback, whatever their files
    for c in all_cells:
        if c.accepted is None:  # an accepted cell's verdict does not count (nor stop the aggregation)
            _stop_if_the_judges_say_so(c)
    # baseline/instruct cells outside the expected set still serve as references
    chosen = {id(c) for c in all_cells}
    extra = [c for c in by_key.values() if id(c) not in chosen and c.agent_id in references]
    refs = References(all_cells + extra, settings)

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
                    reference_table_score(settings.reference, c.model, c.eval)
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


def _weights(cells, evals, refs: References, effective, metric_names, settings: Settings) -> list[WeightRow]:
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
        base_mean = mean_of(bases)
        inst_mean = mean_of(instructs) if instructs else math.nan
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
        raw = {r.eval: finite_number(settings.weights[r.eval], "scoring.weights", r.eval) for r in rows}
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
            mean = mean_of([c.score for c in part])
            se = se_of_mean([c.score_stderr for c in part])
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
            mean_of([v[0] for v in values]),
            se_of_mean([v[1] for v in values]),
            sd_of([v[0] for v in values]),
            len(values),
            sum(v[2] for v in values),
        )
    # time: per run the mean over cells that recorded it, then mean (and sd) over runs, as PostTrainBench does
    run_times = []
    for r in runs:
        times = [c.time_taken_s for c in cells if c.run == r and c.time_taken_s is not None]
        if times:
            run_times.append(mean_of(times))
    budgets = [c.budget_s for c in cells if c.budget_s]
    budget = mean_of(budgets) if budgets else math.nan
    mean_time = mean_of(run_times) if run_times else math.nan
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
        score=mean_of(run_scores),
        stderr=se_of_mean(run_ses),
        sd=sd_of(run_scores),
        run_scores=run_scores,
        cells=len(cells),
        fallbacks=sum(c.fallback for c in cells),
        missing=sum(c.status == MISSING for c in cells),
        per_eval=per_eval,
        mean_time_s=mean_time,
        time_sd_s=sd_of(run_times),
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


def rescored_scores(
    cells: list[ScoredCell], settings: Settings | None = None, expected: Iterable | None = None, model_ids=None
) -> dict[str, dict[str, AgentScore]]:
    """Each rescorer's leaderboard (scorer -> agent id -> score): the matrix scored again with every cell's metric
    replaced by its rescored value where it has one (rule rescore), its weights and fallbacks computed the same way.
    A scorer no cell has is left out."""
    out = {}
    for scorer in sorted({name for c in cells for name in c.rescored}):
        again = [
            replace(c, metric=replace(c.metric, value=c.rescored[scorer])) if scorer in c.rescored and c.metric else c
            for c in cells
        ]
        again = [replace(c, score=None, fallback=False, fallback_reason="", score_source="") for c in again]
        out[scorer] = {a.agent_id: a for a in score(again, settings, expected, model_ids).agents}
    return out
