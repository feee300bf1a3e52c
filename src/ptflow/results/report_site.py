"""The browser report: ``results/report/index.html`` and what it links to, static and relative-linked.

Built from a scored matrix (``ptflow.results.scoring``): the score table (agents × evals, weighted score, ± error,
time used, and each agent's score again from its cells' stored inspect logs rescored where rule ``rescore`` ran), a
heatmap per agent (models × evals, inline SVG), the cell-state grid, and one page per cell with its
metric (and its rescored values beside it, where there are any), the judge's verdict and reason, the agent's readable
trace and time used, linked to the cell's inspect log in a static copy of inspect's log viewer.

The viewer comes from ``inspect view bundle`` (``inspect_ai.log.bundle_log_dir``, the function behind that command):
it copies the viewer's built web app and the logs into ``viewer/``, writes ``viewer/logs/listing.json`` and names
the log dir in ``viewer/index.html``. A log opens at ``viewer/index.html#/logs/<path under the log dir>``. The viewer
is a JavaScript module app that reads ``.eval`` logs (zip files) with HTTP range requests: the folder must be served
over HTTP by a server that honours ``Range`` (nginx, Caddy, GitHub Pages, S3 do; ``python -m http.server`` does not,
and the viewer then only works by luck of the browser cache) — ``serve()`` below is one. Everything else in the report
also opens from ``file://``.

The site is built in a temp directory beside ``out_dir`` and swapped in at the end, so a reader sees the old report
or the new one, never a half-written one.
"""

from __future__ import annotations

import functools
import html
import json
import re
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

from ptflow import templates
from ptflow.files import staged_dir
from ptflow.results.cells import EVAL_FAILED, MISSING, NO_MODEL, ScoredCell
from ptflow.results.overrides import accepted_text, override_text
from ptflow.results.scoring import Result, reference_scores
from ptflow.results.tables import (
    RESCORER_TEXT,
    agents_csv,
    board_lines,
    board_text,
    hms,
    leaderboard_markdown,
    leaderboard_text,
    ranked,
    score_text,
    summary_csv,
    weights_csv,
)

MAX_TRACE_CHARS = 400_000  # rendered inline per cell page; the whole trace.md is copied beside it
VIEWER_DIR = "viewer"
# The cell states of ``ptflow status`` (its grid), in its order; a cell without a state is derived from its files.
STATES = ("Done", "Running", "Pending", "Error", "Canceled", "Paused", "Not started")


class ReportError(RuntimeError):
    pass


def _slug(c: ScoredCell) -> str:
    return f"{c.model_name}__{c.eval}__{c.agent_id}__run{c.run}"


def state_class(state: str) -> str:
    return "state-" + re.sub(r"[^a-z0-9]+", "-", state.lower()).strip("-")


def cause_text(c: ScoredCell) -> str:
    """Why a finished cell is not scored, in the vocabulary of ``ptflow.results.causes`` (its name, meaning and what
    to do), from its eval.json and judge.json; "" for a scored cell or one without files."""
    from ptflow.results.causes import scored_cause

    def read(path: Path) -> dict | None:
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None

    if not c.eval_json:
        return ""
    found = scored_cause(read(Path(c.eval_json)), read(Path(c.eval_json).with_name("judge.json")), c.verdict)
    return f"{found.cause}: {found.entry.meaning} — {found.todo()}" if found else ""


def _state_of(c: ScoredCell) -> tuple[str, str]:
    """A state from the cell's files, for cells the caller gave no state for (a cell not scored names its cause)."""
    if c.status == MISSING:
        return "Not started", c.status_detail
    cause = cause_text(c).split(":", 1)[0]
    if c.status == EVAL_FAILED:
        return "Error", f"cause {cause}: {c.status_detail}" if cause else c.status_detail
    if c.status == NO_MODEL:
        return "Done", f"no final model (cause {cause})" if cause else "no final model"
    return "Done", "eval.json valid"


def _states(result: Result, states: Iterable | None) -> dict[tuple[str, str, str], tuple[str, str]]:
    """(model name, eval, agent slot) -> (state, detail): the caller's (e.g. ptflow status' cells), else derived."""
    out = {(c.model_name, c.eval, c.agent): _state_of(c) for c in result.cells}
    for s in states or ():
        get = s.get if isinstance(s, Mapping) else lambda k, s=s: getattr(s, k, "")
        out[(get("model"), get("eval"), get("agent"))] = (get("state"), get("detail") or "")
    return out


# ---- inspect log viewer ----


def bundle_viewer(cells: list[ScoredCell], site: Path, log=print) -> dict[str, str]:
    """Copy every cell's inspect log into one log dir, bundle inspect's static viewer over it into ``site/viewer``.

    Returns cell key -> link (relative to the site root) that opens that cell's log in the viewer.
    """
    from inspect_ai.log import bundle_log_dir

    with_logs = [c for c in cells if c.inspect_log and Path(c.inspect_log).is_file()]
    if not with_logs:
        return {}
    links = {}
    # bundle_log_dir refuses an output dir inside the log dir: stage the logs outside the site
    with tempfile.TemporaryDirectory(prefix="ptflow-report-logs-") as staging:
        for c in with_logs:
            rel = f"{c.model_name}/{c.eval}/{c.agent_id}/run{c.run}/{Path(c.inspect_log).name}"
            (Path(staging) / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(c.inspect_log, Path(staging) / rel)
            links[c.key] = f"{VIEWER_DIR}/index.html#/logs/{quote(rel)}"
        log(f"report: bundling inspect's log viewer over {len(with_logs)} logs")
        bundle_log_dir(log_dir=staging, output_dir=str(site / VIEWER_DIR), overwrite=True)
    index = site / VIEWER_DIR / "index.html"
    text = index.read_text()
    # The bundle names the absolute path of the (now deleted) staging dir; the viewer needs only the relative dir.
    text, n = re.subn(
        r'(<script id="log_dir_context" type="application/json">)(.*?)(</script>)',
        lambda m: m.group(1) + json.dumps({"log_dir": json.loads(m.group(2))["log_dir"]}) + m.group(3),
        text,
        flags=re.S,
    )
    if n != 1:
        raise ReportError(f"{index}: no log_dir_context in inspect's viewer page; pin inspect-ai to a tested version")
    index.write_text(text)
    return links


# ---- pages ----


def render_markdown(text: str) -> str:
    """Markdown to HTML with raw HTML escaped (a trace is untrusted text) and unsafe link schemes refused."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False}).render(text)


def _viridis(v: float) -> str:
    """matplotlib's viridis at v in [0, 1], by linear interpolation between five of its colours."""
    stops = [(68, 1, 84), (59, 82, 139), (33, 145, 140), (94, 201, 98), (253, 231, 37)]
    v = min(max(v, 0.0), 1.0) * (len(stops) - 1)
    i = min(int(v), len(stops) - 2)
    t = v - i
    r, g, b = (round(a + (b - a) * t) for a, b in zip(stops[i], stops[i + 1], strict=True))
    return f"#{r:02x}{g:02x}{b:02x}"


def heatmap_svg(agent: str, cells: list[ScoredCell], models: list[str], evals: list[str]) -> str:
    """Models (rows) × evals (columns) of one agent as inline SVG; each square links to its cell page."""
    # room for the longest names: eval labels are rotated up and to the right of their column
    longest_eval = max(len(e) for e in evals)
    cw, ch, left, top = 74, 30, 10 + 7 * max(len(m) for m in models), 20 + 4 * longest_eval
    width, height = left + cw * len(evals) + 6 * longest_eval, top + ch * len(models) + 10
    esc = functools.partial(html.escape, quote=True)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        f'aria-label="scores of {esc(agent)}">'
    ]
    for j, e in enumerate(evals):
        x = left + cw * j + cw / 2
        parts.append(f'<text x="{x}" y="{top - 8}" transform="rotate(-35 {x} {top - 8})">{esc(e)}</text>')
    for i, m in enumerate(models):
        parts.append(f'<text x="{left - 6}" y="{top + ch * i + ch / 2 + 4}" text-anchor="end">{esc(m)}</text>')
        for j, e in enumerate(evals):
            group = [c for c in cells if c.model_name == m and c.eval == e]
            x, y = left + cw * j, top + ch * i
            if not group:
                parts.append(f'<rect x="{x}" y="{y}" width="{cw}" height="{ch}" fill="#eee" stroke="#fff"/>')
                continue
            value = sum(c.score for c in group) / len(group)
            fallback = any(c.fallback for c in group)
            tip = f"{m} · {e}: {value:.3f}" + "".join(
                f"\nrun {c.run}: {c.score:.3f}" + (f" (fallback: {c.fallback_reason})" if c.fallback else "")
                for c in group
            )
            label = f"{value:.2f}" + (" ↺" if fallback else "")
            color = "#fff" if value < 0.5 else "#000"
            href = f"cells/{_slug(group[0])}.html"
            parts.append(
                f'<a href="{href}"><title>{esc(tip)}</title>'
                f'<rect x="{x}" y="{y}" width="{cw}" height="{ch}" fill="{_viridis(value)}" stroke="#fff"/>'
                f'<text x="{x + cw / 2}" y="{y + ch / 2 + 4}" text-anchor="middle" fill="{color}">{esc(label)}</text>'
                "</a>"
            )
    parts.append("</svg>")
    return "".join(parts)


def _metric_text(c: ScoredCell) -> str:
    m = c.metric
    if m is None:
        return "—"
    se = "" if m.stderr != m.stderr else f" ± {m.stderr:.3f}"
    return f"{m.name} {m.value:.3f}{se}" + (f" (n={m.n})" if m.n else "")


def _rescored_text(c: ScoredCell) -> str | None:
    """The cell's stored inspect log scored again, by each scorer that rescored it, beside the stored value; None
    where no scorer did."""
    if not c.rescored:
        return None
    stored = f" (stored {c.metric.value:.3f})" if c.metric is not None else ""
    return "; ".join(f"{name} {value:.3f}" for name, value in sorted(c.rescored.items())) + stored


def _time_text(c: ScoredCell) -> str:
    if c.time_taken_s is None:
        return "—"
    if not c.budget_s:
        return hms(c.time_taken_s)
    return f"{hms(c.time_taken_s)} of {hms(c.budget_s)} ({100 * c.time_taken_s / c.budget_s:.1f}%)"


def _cell_page(c: ScoredCell, site: Path, log_href: str | None, state: str, env, common: dict) -> str:
    """Write cells/<slug>.html with copies of the cell's eval.json, judge.json and trace.md beside it."""
    slug = _slug(c)
    cells_dir = site / "cells"
    files = []
    for name, src in (
        ("eval.json", Path(c.eval_json) if c.eval_json else None),
        ("judge.json", Path(c.cell_dir) / "judge.json" if c.cell_dir else None),
        ("trace.md", Path(c.trace) if c.trace else None),
    ):
        if src is not None and src.is_file():
            shutil.copyfile(src, cells_dir / f"{slug}.{name}")
            files.append((name, f"{slug}.{name}"))
    trace_html, clipped, shown = None, False, 0
    if c.trace:
        text = Path(c.trace).read_text(errors="replace")
        clipped, shown = len(text) > MAX_TRACE_CHARS, min(len(text), MAX_TRACE_CHARS)
        from markupsafe import Markup

        trace_html = Markup(render_markdown(text[:MAX_TRACE_CHARS]))
    gpu = "—" if c.gpu_hours is None else f"{c.gpu_hours:.2f} ({c.gpu_hours_source})"
    page = env.get_template("report/cell.html.j2").render(
        **common,
        root="../",
        c={
            "key": c.key,
            "model": c.model,
            "eval": c.eval,
            "agent": c.agent_id,
            "run": c.run,
            "status": c.status,
            "status_detail": c.status_detail,
            "cause": cause_text(c),  # why it is not scored (ptflow.results.causes), "" when it is
            "state_cls": state_class(state),
            "metric": _metric_text(c),
            "rescored": _rescored_text(c),
            "score": "—" if c.score is None else f"{c.score:.3f}",
            "score_source": c.score_source,
            "fallback": c.fallback,
            "fallback_reason": c.fallback_reason,
            "judge": c.judge,
            "judge_reason": c.judge_reason,
            "judge_votes": c.judge_votes,
            "override": override_text(c),
            "accepted": accepted_text(c),
            "time": _time_text(c),
            "gpu": gpu,
            "log_href": f"../{log_href}" if log_href else None,
            "files": files,
            "trace_html": trace_html,
            "trace_clipped": clipped,
            "trace_shown": shown,
        },
    )
    (cells_dir / f"{slug}.html").write_text(page)
    return f"cells/{slug}.html"


def _rescorers(result: Result) -> list[dict]:
    """The scorers some cell was rescored with (rule rescore), each a column of the score table."""
    return [{"name": name, "text": RESCORER_TEXT.get(name, name)} for name in sorted(result.rescored)]


def _agent_rows(result: Result) -> list[dict]:
    rows = []
    for rank, a in enumerate(ranked(result), 1):
        per_eval = {}
        for e in result.evals:
            es = a.per_eval.get(e)
            per_eval[e] = "—" if es is None else f"{es.mean:.3f} ± {es.stderr:.3f}"
        rows.append(
            {
                "rank": rank,
                "agent": a.agent_id,
                "role": a.role,
                "score_text": score_text(a),
                "board_text": board_text(result, a),
                # the agent's score with its cells' rescored values, per scorer (the columns of _rescorers)
                "rescored": [
                    score_text(result.rescored[name][a.agent_id]) if a.agent_id in result.rescored[name] else "—"
                    for name in sorted(result.rescored)
                ],
                "per_eval": per_eval,
                "fallbacks": a.fallbacks,
                "cells": a.cells,
                "missing": a.missing,
                "time": hms(a.mean_time_s),
                "time_sd": hms(a.time_sd_s) if a.time_sd_s == a.time_sd_s else "",
                "pct": "—" if a.time_used != a.time_used else f"{100 * a.time_used:.1f}%",
                "gpu": "—" if a.gpu_hours != a.gpu_hours else f"{a.gpu_hours:.2f}",
                "api": a.api.text() if a.api else "—",
            }
        )
    return rows


def _num(v: float, digits: int = 4) -> str:
    return "—" if v != v else f"{v:.{digits}f}"


def build_site(
    result: Result,
    out_dir: str | Path,
    *,
    states: Iterable | None = None,
    title: str = "ptflow report",
    viewer: bool = True,
    log=print,
) -> Path:
    """Write the report into ``out_dir`` (replaced whole, atomically); returns the path of its index.html."""
    out = Path(out_dir)
    with staged_dir(out) as site:
        _build_into(result, site, states=states, title=title, viewer=viewer, log=log)
    return out / "index.html"


def _build_into(result: Result, site: Path, *, states, title: str, viewer: bool, log) -> None:
    env = templates.html_environment()
    common = {"title": title, "generated": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")}
    (site / "assets").mkdir()
    (site / "cells").mkdir()
    shutil.copyfile(templates.path("report/report.css"), site / "assets" / "report.css")
    data_files = _write_data_files(result, site)
    log_links = bundle_viewer(result.cells, site, log=log) if viewer else {}
    state_map = _states(result, states)
    cells = sorted(result.cells, key=lambda c: (c.agent_id, c.run, c.model_name, c.eval))
    hrefs = {}
    for c in cells:
        state = state_map[(c.model_name, c.eval, c.agent)][0]
        hrefs[c.key] = _cell_page(c, site, log_links.get(c.key), state, env, common)
    page = env.get_template("report/index.html.j2").render(
        **common,
        root="",
        counts=_counts(result),
        agents=_agent_rows(result),
        rescorers=_rescorers(result),
        board=None
        if result.leaderboard is None
        else {"text": leaderboard_text(result.leaderboard), "lines": board_lines(result)},
        evals=[{"id": w.eval, "metric": w.metric, "weight": w.weight} for w in result.weights],
        refs=[(k, _num(v, 3)) for k, v in reference_scores(result).items()],
        weights=_weight_rows(result),
        heatmaps=[_heatmap(result, a.agent_id) for a in result.agents],
        states=[{"name": s, "cls": state_class(s)} for s in STATES],
        grid=_state_grid(result, state_map, hrefs),
        grid_evals=result.evals,
        cells=[_cell_row(c, hrefs[c.key], log_links.get(c.key)) for c in cells],
        data_files=data_files,
        viewer=f"{VIEWER_DIR}/index.html" if log_links else None,
    )
    (site / "index.html").write_text(page)


def _heatmap(result: Result, agent_id: str) -> dict:
    from markupsafe import Markup

    cells = [c for c in result.cells if c.agent_id == agent_id]
    return {"agent": agent_id, "svg": Markup(heatmap_svg(agent_id, cells, result.models, result.evals))}


def _write_data_files(result: Result, site: Path) -> list[tuple[str, str]]:
    """The aggregate's tables again under ``data/`` (with weights.csv), for download: (name, link) each."""
    (site / "data").mkdir()
    data_files = []
    for name, text in (
        ("summary.csv", summary_csv(result)),
        ("agents.csv", agents_csv(result)),
        ("weights.csv", weights_csv(result)),
        ("leaderboard.md", leaderboard_markdown(result)),
    ):
        (site / "data" / name).write_text(text)
        data_files.append((name, f"data/{name}"))
    return data_files


def _counts(result: Result) -> dict:
    return {
        "cells": len(result.cells),
        "models": len(result.models),
        "evals": len(result.evals),
        "agents": len(result.agents),
        "fallbacks": sum(c.fallback for c in result.cells),
        "missing": sum(c.status == MISSING for c in result.cells),
    }


def _state_grid(result: Result, state_map: dict, hrefs: dict) -> list[dict]:
    """Each agent slot's models x evals grid of cell states, linked to the cells' pages; slots in the score table's
    agent order, runs in turn."""
    agent_ids = [a.agent_id for a in result.agents]
    by_grid: dict = {}
    for (m, e, slot), (state, detail) in state_map.items():
        by_grid.setdefault(slot, {})[(m, e)] = (state, detail)
    cell_by_slot = {(c.model_name, c.eval, c.agent): c for c in result.cells}

    def grid_order(slot: str) -> tuple[int, str]:
        base = slot.split("/")[0]
        return (agent_ids.index(base) if base in agent_ids else len(agent_ids), slot)

    def entry(slot: str, m: str, e: str) -> dict | None:
        got = by_grid[slot].get((m, e))
        if got is None:
            return None
        cell = cell_by_slot.get((m, e, slot))
        href = hrefs.get(cell.key) if cell else None
        return {"state": got[0], "detail": got[1], "cls": state_class(got[0]), "href": href}

    return [
        {
            "agent": slot,
            "rows": [{"model": m, "cells": [entry(slot, m, e) for e in result.evals]} for m in result.models],
        }
        for slot in sorted(by_grid, key=grid_order)
    ]


def _weight_rows(result: Result) -> list[dict]:
    return [
        {
            "eval": w.eval,
            "metric": w.metric,
            "models": w.models,
            "base": _num(w.base_mean),
            "instruct": _num(w.instruct_mean),
            "gap": _num(w.gap),
            "weight": _num(w.weight),
            "base_source": w.base_source,
            "instruct_source": w.instruct_source,
        }
        for w in result.weights
    ]


def _cell_row(c, href: str, log_href: str | None) -> dict:
    return {
        "key": c.key,
        "href": href,
        "status": c.status,
        "judge": c.judge or "—",
        "judge_votes": c.judge_votes if c.judge_vote_count > 1 else "",
        "override": override_text(c),
        "accepted": accepted_text(c),
        "metric": _metric_text(c),
        "score": "—" if c.score is None else f"{c.score:.3f}",
        "fallback": c.fallback,
        "fallback_reason": c.fallback_reason,
        "time": _time_text(c),
        "log_href": log_href,
    }
