"""The aggregate stage: every cell's files -> PostTrainBench's score (``ptflow.results.scoring``) -> summary.csv,
agents.csv, leaderboard.md, a heatmap figure for ``snakemake --report`` and the static site
``results/report/index.html`` (``ptflow.results.report_site``).

GPU-hours come from Slurm's accounting where the cluster keeps one (one ``sacct`` call over every job id the cells
recorded), else from each job's own timing x the GPUs its site request gave it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ptflow.files import atomic_path
from ptflow.results.cells import ScoredCell, read_cell
from ptflow.results.overrides import read_accepted, read_overrides
from ptflow.results.scoring import Result, rescored_scores, score
from ptflow.results.settings import Settings, settings_from_config
from ptflow.results.tables import board_lines, board_text, ranked, write_outputs
from ptflow.specs import ScoringSpec


@dataclass(frozen=True)
class ReportOutputs:
    """The files rule aggregate writes: summary.csv, agents.csv, leaderboard.md, the heatmap figure, and the dir of
    the static site (its index.html)."""

    summary_csv: str | Path
    agents_csv: str | Path
    leaderboard_md: str | Path
    heatmap_png: str | Path
    report_dir: str | Path


def _job_ids(cell: ScoredCell) -> list[str]:
    """The Slurm jobs a cell used: its evaluation's and its training's (from the manifest beside eval.json)."""
    ids = []
    data = json.loads(Path(cell.eval_json).read_text()) if cell.eval_json else {}
    if data.get("slurm_job_id"):
        ids.append(str(data["slurm_job_id"]))
    manifest = Path(cell.cell_dir) / "checkpoint.json" if cell.cell_dir else None
    if manifest is not None and manifest.is_file():
        job = json.loads(manifest.read_text()).get("slurm_job_id")
        if job:
            ids.append(str(job))
    return ids


def apply_accounting(cells: list[ScoredCell], usage: Mapping[str, float]) -> None:
    """GPU-hours of the cells whose every job Slurm accounted for (``usage``: job id -> GPU-seconds)."""
    for c in cells:
        ids = _job_ids(c)
        if ids and all(j in usage for j in ids):
            c.gpu_hours = sum(usage[j] for j in ids) / 3600
            c.gpu_hours_source = "Slurm accounting"


def slurm_usage(cells: list[ScoredCell], log=print) -> dict[str, float]:
    """GPU-seconds per job from Slurm's accounting; empty where there is none (no Slurm, no accounting storage)."""
    from ptflow.cluster import slurm

    ids = sorted({j for c in cells for j in _job_ids(c)})
    if not ids:
        return {}
    try:
        usage = slurm.job_gpu_seconds(ids)
    except slurm.SlurmUnavailable as exc:
        log(f"GPU-hours from the jobs' own timings: Slurm's accounting is not available here ({exc})")
        return {}
    log(f"GPU-hours of {len(usage)}/{len(ids)} jobs from Slurm's accounting")
    return usage


def heatmap(result: Result, out: str | Path) -> None:
    """Scores per agent (models x evals; fallbacks marked), one panel each: the figure of ``snakemake --report``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    agents = [a.agent_id for a in result.agents]
    models, evals = result.models, result.evals
    fig, axes = plt.subplots(
        1,
        len(agents),
        figsize=(1.2 + 1.4 * len(evals) * len(agents), 0.9 + 0.5 * len(models)),
        squeeze=False,
        constrained_layout=True,
    )
    image = None
    for ax, agent in zip(axes[0], agents, strict=True):
        values = [[float("nan")] * len(evals) for _ in models]
        marks = [[""] * len(evals) for _ in models]
        for i, m in enumerate(models):
            for j, e in enumerate(evals):
                group = [c for c in result.cells if c.agent_id == agent and c.model_name == m and c.eval == e]
                if group:
                    values[i][j] = sum(c.score for c in group) / len(group)
                    marks[i][j] = " ↺" if any(c.fallback for c in group) else ""
        image = ax.imshow(values, vmin=0, vmax=1, cmap="viridis", aspect="auto")
        ax.set_title(agent)
        ax.set_xticks(range(len(evals)), evals, rotation=45, ha="right")
        ax.set_yticks(range(len(models)), models if ax is axes[0][0] else [""] * len(models))
        for i in range(len(models)):
            for j in range(len(evals)):
                v = values[i][j]
                text = "—" if v != v else f"{v:.2f}{marks[i][j]}"
                color = "white" if v != v or v < 0.5 else "black"
                ax.text(j, i, text, ha="center", va="center", color=color, fontsize=8)
    fig.colorbar(image, ax=axes[0].tolist(), label="score (↺: base model's score, a fallback)")
    with atomic_path(out) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)


def aggregate(
    eval_jsons: Iterable[str | Path],
    scoring: ScoringSpec,
    outputs: ReportOutputs,
    *,
    checkout_marker: str | Path | None = None,
    overrides: str | Path | None = None,
    log=print,
) -> Result:
    """Rule aggregate's job: score the cells as the spec's scoring settings say and write every output.
    ``checkout_marker``: the PostTrainBench checkout's marker of a run whose evals come from it: the headline is then
    the leaderboard's own score, from the factors.json of that checkout (``ptflow.results.ptb_score``), ptflow's
    weighted score beside it. ``overrides``: the file of ``scoring.overrides`` (``ptflow.results.overrides``), whose
    decisions outrank the judges' and whose accepted cells count at their base model's score (the workflow gives
    no eval.json of theirs: they are not targets)."""
    settings = settings_from_config(scoring.raw, scoring.reference, scoring.agent_gpus)
    if overrides is not None:
        cells = [f"{c['model']}/{c['eval']}/{c['agent']}" for c in scoring.expected]
        settings.overrides = read_overrides(overrides, cells)
        log(f"{len(settings.overrides)} verdict override(s) from {overrides}")
        settings.accepted = read_accepted(overrides, cells)  # counted at their fallback, never run again
        log(f"{len(settings.accepted)} accepted failure(s) from {overrides}")
    result = score_cells(eval_jsons, settings, scoring.expected, scoring.model_ids, log=log)
    write_report(result, settings, outputs, checkout_marker=checkout_marker, log=log)
    return result


def score_cells(
    eval_jsons: Iterable[str | Path],
    settings: Settings,
    expected: Iterable[Mapping] | None = None,
    model_ids: Mapping[str, str] | None = None,
    log=print,
) -> Result:
    """The cells read from their files, their GPU-hours from Slurm's accounting where it has them, then scored."""
    cells = [read_cell(p, settings) for p in eval_jsons]
    apply_accounting(cells, slurm_usage(cells, log))
    expected = list(expected) if expected is not None else None
    result = score(cells, settings, expected, model_ids)
    result.rescored = rescored_scores(result.cells, settings, expected, model_ids)
    return result


def write_report(
    result: Result,
    settings: Settings,
    outputs: ReportOutputs,
    *,
    states: Iterable | None = None,
    checkout_marker: str | Path | None = None,
    log=print,
) -> Path:
    """Every output of the aggregate rule from a scored matrix, with the leaderboard's own score where
    ``checkout_marker`` names the run's checkout; returns the site's index.html."""
    from ptflow.results import ptb_score
    from ptflow.results.report_site import build_site

    if checkout_marker is not None:
        try:
            factors, source = ptb_score.from_marker(checkout_marker)
        except ptb_score.FactorsError as exc:  # the outputs are still written, with ptflow's weights and the reason
            result.leaderboard = ptb_score.not_computed(str(checkout_marker), str(exc))
        else:
            result.leaderboard = ptb_score.leaderboard(result.cells, factors, source, settings)
        for line in board_lines(result):
            log(f"leaderboard score: {line}")
    write_outputs(result, outputs.summary_csv, outputs.agents_csv, outputs.leaderboard_md)
    heatmap(result, outputs.heatmap_png)
    index = build_site(result, outputs.report_dir, states=states, log=log)
    if result.leaderboard is not None:
        shown = [f"{a.agent_id} {board_text(result, a)} (ptflow weights {a.score:.3f})" for a in ranked(result)]
    else:
        shown = [f"{a.agent_id} {a.score:.3f}" for a in ranked(result)]
    log("scores: " + ", ".join(shown) + f"; report {index}")
    return index
