"""A scored matrix written out: summary.csv (one row per cell), agents.csv, weights.csv and leaderboard.md, with the
texts the report shares with them (score, leaderboard score, the order of the ranking).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from ptflow.config import tasks
from ptflow.files import write_text_atomic
from ptflow.results.overrides import accepted_text, override_text
from ptflow.results.scoring import AgentScore, Result, reference_scores

SUMMARY_COLUMNS = [
    "model",
    "model_name",
    "eval",
    "agent",
    "run",
    "status",
    "judge",
    # scoring.overrides: the cell's overrides with their reasons, and the judges' own verdict (judge is the decided one)
    "override",
    # scoring.overrides' accepted: why the cell's failure was accepted (reason (who, when)); it counts as its base model
    "accepted",
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
    # the cell's stored inspect log scored again by each rescorer (rule rescore; empty where it was not)
    *(f"rescore_{name}" for name in tasks.RESCORERS),
]


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
        row["override"] = override_text(c)
        row["accepted"] = accepted_text(c)
        row |= {f"rescore_{name}": _f(value) for name, value in c.rescored.items()}
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
        "api_usd",
    ]
    head += [f"{e}" for e in result.evals] + [f"{e}_stderr" for e in result.evals]
    board = result.leaderboard
    if board is not None:  # a checkout run: the leaderboard's own score beside ptflow's (`score` columns)
        head += ["leaderboard_score", "leaderboard_score_sd", "leaderboard_why"]
    rescorers = sorted(result.rescored)
    head += [f"score_{name}" for name in rescorers]
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
                    [
                        a.api.input_tokens,
                        a.api.output_tokens,
                        a.api.cached_tokens,
                        _f(a.api.cost_usd, 6),
                        _f(a.api.usd, 6) if a.api.usd_cells else a.api.dollars_text(),
                    ]
                    if a.api
                    else ["", "", "", "", ""]
                ),
            ]
            + [_f(a.per_eval[e].mean) if e in a.per_eval else "" for e in result.evals]
            + [_f(a.per_eval[e].stderr) if e in a.per_eval else "" for e in result.evals]
            + extra
            + [_f(result.rescored[name][a.agent_id].score) for name in rescorers]
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
    """What a checkout run's headline score is (ptflow.results.ptb_score), one paragraph."""
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
    lines += rescored_lines(result)
    spend = [a for a in ranked(result) if a.api]
    if spend:
        lines += [
            "",
            "API spend, as the agents' CLIs reported it (tokens in / cached / out; USD where the CLI prices):",
        ]
        lines += [f"- {a.agent_id}: {a.api.text()} ({a.api.cells} of {a.cells} cells reported)" for a in spend]
        lines += ["", "| agent | API spend ($) |", "|---|---|"]
        lines += [f"| {a.agent_id} | {a.api.dollars_text()} |" for a in spend]
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
    lines += override_lines(result) + accepted_lines(result)
    fallbacks = [c for c in result.cells if c.fallback]
    lines += ["", "## Fallbacks", ""]
    if fallbacks:
        lines += ["| cell | reason | counted as |", "|---|---|---:|"]
        for c in sorted(fallbacks, key=lambda c: c.key):
            lines.append(f"| {c.key} | {c.fallback_reason.replace('|', '/')} | {c.score:.3f} ({c.score_source}) |")
    else:
        lines.append("None.")
    return "\n".join(lines) + "\n"


def override_lines(result: Result) -> list[str]:
    """The leaderboard's section on overridden verdicts (scoring.overrides): per cell what a person decided, why, and
    what the cell counts as; none without overrides."""
    cells = sorted((c for c in result.cells if c.overrides), key=lambda c: c.key)
    if not cells:
        return []
    lines = ["", "## Overrides", "", "Verdicts decided by a person (scoring.overrides); they outrank the judges.", ""]
    lines += ["| cell | override (who, when): reason | verdict | counted as |", "|---|---|---|---:|"]
    for c in cells:
        counted = "—" if c.score is None else f"{c.score:.3f} ({'base model' if c.fallback else 'its own score'})"
        text = override_text(c).replace("|", "/")
        lines.append(f"| {c.key} | {text} | {c.judge} | {counted} |")
    return lines


def accepted_lines(result: Result) -> list[str]:
    """The leaderboard's section on accepted failures (scoring.overrides' accepted): per cell who accepted it, when
    and why, and the base model's score it counts as; none without accepted cells."""
    cells = sorted((c for c in result.cells if c.accepted is not None), key=lambda c: c.key)
    if not cells:
        return []
    lines = ["", "## Accepted failures", ""]
    lines += ["Cells accepted at their fallback by a person (scoring.overrides' accepted); they are not run again.", ""]
    lines += ["| cell | reason (who, when) | status | counted as |", "|---|---|---|---:|"]
    for c in cells:
        counted = "—" if c.score is None else f"{c.score:.3f} (base model)"
        lines.append(f"| {c.key} | {accepted_text(c).replace('|', '/')} | {c.status} | {counted} |")
    return lines


def rescored_lines(result: Result) -> list[str]:
    """The leaderboard's rescored column: each agent's score with its cells' stored inspect logs scored again (rule
    rescore), beside the score above, and how many of its cells each rescorer changed."""
    if not result.rescored:
        return []
    names = sorted(result.rescored)
    lines = ["", "Rescored from the stored inspect logs, no model run again (rule rescore; " + "; ".join(
        f"{n}: {RESCORER_TEXT.get(n, n)}" for n in names) + "):", ""]  # fmt: skip
    lines += ["| agent | score | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for a in ranked(result):
        again = [score_text(result.rescored[n][a.agent_id]) for n in names]
        lines.append(f"| {a.agent_id} | {score_text(a)} | " + " | ".join(again) + " |")
    return lines


RESCORER_TEXT = {"exact_numeric": "the last number compared by value, where the pinned inspect compared with endswith"}


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
