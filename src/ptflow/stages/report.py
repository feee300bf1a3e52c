"""Aggregate every cell's eval.json into summary.csv, a markdown leaderboard and a heatmap.

Each cell's number is its task's headline metric (eval.json ``metrics.name``/``value``: accuracy, HealthBench's
bootstrap_score, Arena-Hard's winrate, ...); the leaderboard names the metric of each eval."""

from __future__ import annotations

import json
from pathlib import Path

from ptflow.files import atomic_path, write_text_atomic

SUMMARY_COLUMNS = [
    "model",
    "eval",
    "agent",
    "status",
    "metric",
    "value",
    "stderr",
    "n",
    "scorer",
    "task",
    "checkpoint_kind",
    "checkpoint",
    "max_new_tokens",
    "eval_seconds",
    "train_seconds",
    "host",
    "slurm_job_id",
    "flag",
]


def cell_flag(d: dict, judge: dict | None) -> str:
    """'' for a clean scored cell; else why it must not be read as a plain score (cli-agent cells)."""
    flags = []
    if d.get("status") == "no_model":
        flags.append("no final model")
    elif d.get("status") == "eval_failed":
        flags.append("eval failed")
    elif (d.get("agent_run") or {}).get("budget_exhausted"):
        flags.append("budget exhausted")
    if judge is not None:
        if judge.get("status") == "skipped":
            flags.append("not judged")
        elif judge.get("flagged"):
            what = [k for k in ("contamination", "disallowed_model") if judge.get(k)]
            flags.append("FLAGGED: " + "+".join(what))
    return "; ".join(flags)


def load_rows(eval_jsons: list[str | Path]):
    import pandas as pd

    rows = []
    for path in eval_jsons:
        d = json.loads(Path(path).read_text())
        judge_path = Path(path).with_name("judge.json")
        judge = json.loads(judge_path.read_text()) if judge_path.is_file() else None
        metrics = d["metrics"] or {"name": None, "value": None, "stderr": None, "n": None}
        rows.append(
            {
                "model": d["model"],
                "eval": d["eval"],
                "agent": d["agent"],
                "status": d["status"],
                "metric": metrics["name"],
                "value": metrics["value"],
                "stderr": metrics["stderr"],
                "n": metrics["n"],
                "scorer": d["scorer"],
                "task": d["task"],
                "checkpoint_kind": d["checkpoint"]["kind"],
                "checkpoint": d["checkpoint"]["path"],
                "max_new_tokens": d["max_new_tokens"],
                "eval_seconds": d["timings"]["eval_seconds"],
                "train_seconds": d["timings"].get("train_seconds"),
                "host": d["host"],
                "slurm_job_id": d["slurm_job_id"],
                "flag": cell_flag(d, judge),
            }
        )
    df = pd.DataFrame(rows, columns=SUMMARY_COLUMNS)
    df["value"] = df["value"].astype(float)
    df["stderr"] = df["stderr"].astype(float)
    return df.sort_values(["eval", "model", "agent"], kind="stable")


NO_SCORE = {"no_model": "no final model", "eval_failed": "eval failed"}


def _cell_text(r) -> str:
    flag = getattr(r, "flag", "") or ""
    flag = "" if flag != flag else flag  # NaN from a CSV round trip
    if r.value is None or r.value != r.value:
        what = NO_SCORE.get(r.status, "no score")
        rest = "; ".join(f for f in flag.split("; ") if f and f != what)
        return f"{what}{' [' + rest + ']' if rest else ''}"
    spread = "" if r.stderr is None or r.stderr != r.stderr else f" ± {r.stderr:.3f}"
    text = f"{r.value:.3f}{spread} (n={int(r.n)})"
    if flag.startswith("FLAGGED") or "FLAGGED" in flag:
        return f"⚠ {text} **[{flag}]**"
    return f"{text} [{flag}]" if flag else text


def _metric_of(part) -> str:
    """The headline metric of one eval's cells, with its scorer (``accuracy (match)``)."""
    scored = part.dropna(subset=["metric"])
    if scored.empty:
        return "no score yet"
    pairs = zip(scored["metric"], scored["scorer"], strict=True)
    names = sorted({f"{m} ({s})" if s == s and s else str(m) for m, s in pairs})
    return ", ".join(names)


def leaderboard_markdown(df, agent_order: list[str]) -> str:
    """One table per eval (models x agents, the eval's headline metric ± stderr) and the mean per agent."""
    agents = [a for a in agent_order if a in set(df["agent"])]
    lines = [
        "# Leaderboard",
        "",
        "Each eval's headline metric (named under its heading) ± standard error per cell (n = samples scored).",
        "",
    ]
    for eval_id, part in df.groupby("eval", sort=True):
        lines += [
            f"## {eval_id}",
            "",
            f"Metric: {_metric_of(part)}",
            "",
            "| model | " + " | ".join(agents) + " |",
            "|---|" + "---:|" * len(agents),
        ]
        for model, rows in part.groupby("model", sort=True):
            by_agent = {r.agent: r for r in rows.itertuples()}
            cells = [_cell_text(by_agent[a]) if a in by_agent else "—" for a in agents]
            lines.append(f"| {model} | " + " | ".join(cells) + " |")
        lines.append("")
    flags = df["flag"].fillna("").astype(str) if "flag" in df else None
    clean = df if flags is None else df[~flags.str.contains("FLAGGED")]
    means = clean.groupby("agent")["value"].mean()
    lines += [
        "## Mean per agent",
        "",
        "The mean of the cells' headline metrics. Flagged cells (judge) are left out of the mean; cells with no "
        "final model or a failed evaluation are not scored.",
        "",
        "| agent | mean | cells |",
        "|---|---:|---:|",
    ]
    for a in agents:
        m = means.get(a, float("nan"))
        lines.append(f"| {a} | {'—' if m != m else f'{m:.3f}'} | {(df['agent'] == a).sum()} |")
    return "\n".join(lines) + "\n"


def heatmap(df, agent_order: list[str], out: str | Path) -> None:
    """Models x evals accuracy, one panel per agent."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    agents = [a for a in agent_order if a in set(df["agent"])]
    models = sorted(df["model"].unique())
    evals = sorted(df["eval"].unique())
    fig, axes = plt.subplots(
        1,
        len(agents),
        figsize=(1.2 + 1.4 * len(evals) * len(agents), 0.9 + 0.5 * len(models)),
        squeeze=False,
        constrained_layout=True,
    )
    image = None
    for ax, agent in zip(axes[0], agents, strict=True):
        grid = df[df["agent"] == agent].pivot_table(index="model", columns="eval", values="value")
        grid = grid.reindex(index=models, columns=evals)
        image = ax.imshow(grid.values, vmin=0, vmax=1, cmap="viridis", aspect="auto")
        ax.set_title(agent)
        ax.set_xticks(range(len(evals)), evals, rotation=45, ha="right")
        ax.set_yticks(range(len(models)), models if ax is axes[0][0] else [""] * len(models))
        for i in range(len(models)):
            for j in range(len(evals)):
                v = grid.values[i, j]
                ax.text(
                    j,
                    i,
                    "—" if v != v else f"{v:.2f}",
                    ha="center",
                    va="center",
                    color="white" if v != v or v < 0.5 else "black",
                    fontsize=8,
                )
    fig.colorbar(image, ax=axes[0].tolist(), label="headline metric (accuracy, score, win rate)")
    with atomic_path(out) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)


def aggregate(
    eval_jsons: list[str | Path],
    agent_order: list[str],
    summary_csv: str | Path,
    leaderboard_md: str | Path,
    heatmap_png: str | Path,
) -> None:
    df = load_rows(eval_jsons)
    with atomic_path(summary_csv) as tmp:
        df.to_csv(tmp, index=False)
    write_text_atomic(leaderboard_md, leaderboard_markdown(df, agent_order))
    heatmap(df, agent_order, heatmap_png)
