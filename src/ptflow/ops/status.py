"""The state of every cell, derived from files (eval.json, rule logs) and from Slurm (one squeue + one sacct call):
this module finds the jobs and assembles the snapshot, ``ptflow.results.cell_state`` decides each cell's state.

Jobs are found the way the slurm executor plugin marks them: job name = the run's UUID (logged by Snakemake as
``SLURM run ID: ...``), comment = ``rule_<rule>_wildcards_<wildcard values joined by _>`` and Slurm log
``.snakemake/slurm_logs/rule_<rule>/<wildcards>/<jobid>.log``; jobs ptflow submits itself (supervised train jobs and
their resubmissions, SkyRL's server) by the working directory's own job name and the same comments, helper
jobs with a ``#<role>`` suffix (``ptflow.cluster.ownership``). The expected comments are built from the config's
cells (ids may contain ``_``), never split.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ptflow.cluster import ownership, slurm
from ptflow.config.layout import Layout
from ptflow.config.matrix import Cell, Config
from ptflow.results import verdict as verdicts
from ptflow.results.causes import cause_lines, diagnose
from ptflow.results.cell_state import (
    CANCELED,
    CELL_RULES,
    DONE,
    ERROR,
    NOT_STARTED,
    PAUSED,
    PENDING,
    RUNNING,
    STATES,
    CellStatus,
    cell_state,
    manifest_api_usage,
)
from ptflow.results.overrides import by_cell

_RUN_ID = re.compile(r"^SLURM run ID: (\S+)", re.M)
_SUBMITTED = re.compile(r"Job \d+ has been submitted with SLURM jobid (\d+) \(log: (.*?)\)\.?$", re.M)
_COMMAND = re.compile(r"^\s*Command: (.*)$", re.M)
_SLURM_LOG = re.compile(r"slurm_logs/rule_(\w+)/([^/]*)/(\d+)(?:_\d+)?\.log$")


def wildcard_str(cell: Cell) -> str:
    """The plugin's wildcard string of a cell's train/evaluate job (values in pattern order, joined by ``_``)."""
    return f"{cell.model}_{cell.eval}_{cell.agent}"


def comment(rule: str, cell: Cell) -> str:
    return f"rule_{rule}_wildcards_{wildcard_str(cell)}"


@dataclass
class RunLog:
    """One Snakemake invocation in this working directory, read from ``.snakemake/log/*.snakemake.log``."""

    path: Path
    run_id: str | None
    command: list[str]
    jobs: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # slurm id -> (rule, wildcards, slurm log)

    @property
    def retries(self) -> int:
        return retries_of(self.command)


def retries_of(command: list[str]) -> int:
    """``--retries`` of a snakemake command line, else of its ``--profile`` (config.yaml), else 0."""
    value = None
    profile = None
    for i, arg in enumerate(command):
        for flag in ("--retries", "--restart-times", "-T"):
            if arg == flag and i + 1 < len(command):
                value = command[i + 1]
            elif arg.startswith(flag + "="):
                value = arg.split("=", 1)[1]
        if arg == "--profile" and i + 1 < len(command):
            profile = command[i + 1]
        elif arg.startswith("--profile="):
            profile = arg.split("=", 1)[1]
    if value is None and profile:
        cfg = Path(profile) / "config.yaml"
        if cfg.is_file():
            data = yaml.safe_load(cfg.read_text()) or {}
            value = data.get("retries", data.get("restart-times"))
    try:
        return int(value) if value is not None else 0
    except ValueError:
        return 0


def read_run_logs(workdir: Path) -> list[RunLog]:
    """Every run's log, oldest first."""
    return [read_run_log(path) for path in sorted((workdir / ".snakemake" / "log").glob("*.snakemake.log"))]


def read_run_log(path: Path) -> RunLog:
    """One run's log: its run UUID, its command line, the Slurm jobs it submitted."""
    text = path.read_text(errors="replace")
    m = _RUN_ID.search(text)
    cmd = _COMMAND.search(text)
    run = RunLog(path, m.group(1) if m else None, cmd.group(1).split() if cmd else [])
    for jid, log in _SUBMITTED.findall(text):
        lm = _SLURM_LOG.search(log)
        if lm:
            run.jobs[jid] = (lm.group(1), lm.group(2), log)
    _check_read(path, text, run)
    return run


def _check_read(path: Path, text: str, run: RunLog) -> None:
    """Say so where the plugin's lines were not all understood: its wording is not an API (the contract test pins it
    for the installed plugin), and a job not read here would be missing from status, cancel and adoption."""
    said = text.count("submitted with SLURM jobid")
    if said != len(run.jobs) or (said and not run.run_id):
        from importlib.metadata import PackageNotFoundError, version

        try:
            plugin = f"snakemake-executor-plugin-slurm {version('snakemake-executor-plugin-slurm')}"
        except PackageNotFoundError:
            plugin = "no snakemake-executor-plugin-slurm installed here"
        logging.getLogger("ptflow.ops.status").warning(
            "%s: read %d of the %d Slurm submissions it logs%s; %s words them otherwise than ptflow.ops.status reads "
            "('SLURM run ID: ...', 'Job N has been submitted with SLURM jobid J (log: .../rule_R/W/J.log).')",
            path,
            len(run.jobs),
            said,
            "" if run.run_id else " and no SLURM run ID",
            plugin,
        )


def slurm_log_index(workdir: Path) -> dict[str, tuple[str, str, str]]:
    """Slurm logs on disk: job id -> (rule, wildcards, path). Covers runs whose Snakemake log is gone."""
    out = {}
    for path in (workdir / ".snakemake" / "slurm_logs").glob("rule_*/*/*.log"):
        m = _SLURM_LOG.search(str(path))
        if m:
            out[m.group(3)] = (m.group(1), m.group(2), str(path))
    return out


_SUPERVISED_LOG = re.compile(r"^train-(\d+)\.out$")


def supervised_log_index(cfg: Config, layout: Layout, workdir: Path) -> dict[str, tuple[str, str, str]]:
    """The train jobs ptflow's supervisor submitted itself (``ptflow.cluster.supervise``), from their logs in each
    cell's ``slurm/`` folder: job id -> ("train", wildcards, path). A finished job's comment is gone once slurmctld
    forgets it (MinJobAge) unless accounting stores comments (AccountingStoreFlags=job_comment, off by default):
    the log's place still names its cell."""
    out = {}
    for cell in cfg.cells:
        jobs_dir = workdir / layout.cell_dir(cell.model, cell.eval, cell.agent) / "slurm"
        if not jobs_dir.is_dir():
            continue
        for path in jobs_dir.iterdir():
            m = _SUPERVISED_LOG.match(path.name)
            if m:
                out[m.group(1)] = ("train", wildcard_str(cell), str(path))
    return out


def driver_active(workdir: Path) -> bool:
    """A Snakemake driver holds this working directory: ptflow's driver lock with a live holder
    (``ptflow.cluster.ownership.DriverLock``), else, for runs from before it, Snakemake's own locks."""
    lock = ownership.DriverLock(workdir)
    if lock.path.exists():
        return lock.live_holder() is not None
    locks = workdir / ".snakemake" / "locks"
    return locks.is_dir() and any(locks.iterdir())


@dataclass
class Snapshot:
    """Everything one refresh knows: cells, the jobs found, and which run they belong to."""

    cells: list[CellStatus]
    jobs: dict[str, slurm.JobRecord]
    job_cells: dict[str, tuple[str, Cell]]  # slurm id -> (rule, cell)
    run_ids: list[str]
    driver_active: bool
    slurm_error: str | None = None

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(STATES, 0)
        for c in self.cells:
            out[c.state] += 1
        return out


def _job_sort_key(jid: str) -> tuple[int, str]:
    head = jid.split("_")[0]
    return (int(head) if head.isdigit() else -1, jid)


def attribute_jobs(
    cfg: Config,
    jobs: dict[str, slurm.JobRecord],
    runs: list[RunLog],
    log_index: dict[str, tuple[str, str, str]],
) -> tuple[dict[str, tuple[str, Cell]], dict[str, str]]:
    """Which cell (and rule) each job belongs to: its comment, else its Slurm log path. Returns also id -> log."""
    expected = {comment(rule, c): (rule, c) for c in cfg.cells for rule in CELL_RULES}
    by_wc = {(rule, wildcard_str(c)): (rule, c) for c in cfg.cells for rule in CELL_RULES}
    known = dict(log_index)
    for run in runs:
        known.update(run.jobs)
    out, logs = {}, {}
    for jid in set(jobs) | set(known):
        rec = jobs.get(jid)
        hit = expected.get(ownership.split_comment(rec.comment)[0]) if rec and rec.comment else None
        if hit is None and jid in known:
            rule, wc, _ = known[jid]
            hit = by_wc.get((rule, wc))
        if hit is not None:
            out[jid] = hit
        if jid in known:
            logs[jid] = known[jid][2]
    return out, logs


def snapshot(cfg: Config, layout: Layout, workdir: Path, query=slurm.run_jobs, overrides=(), accepted=None) -> Snapshot:
    """One refresh: read the runs' logs, one squeue + one sacct call for all their run ids, derive every cell;
    ``overrides``: the config's verdict overrides (``ptflow.results.overrides.config_overrides``), shown per cell;
    ``accepted``: its accepted failures by cell key (``ptflow.results.overrides.accepted_cells``), shown per cell."""
    workdir = Path(workdir)
    runs = read_run_logs(workdir)
    run_ids = [r.run_id for r in runs if r.run_id]
    jobs: dict[str, slurm.JobRecord] = {}
    error = None
    if run_ids:
        try:
            since = "now-30days"
            # the runs' plugin jobs and every job ptflow submitted itself from this directory
            jobs = query(sorted(set(run_ids)) + [ownership.owned_job_name(workdir)], since)
        except slurm.SlurmUnavailable as exc:
            error = str(exc)
    log_index = slurm_log_index(workdir) | supervised_log_index(cfg, layout, workdir)
    job_cells, slurm_logs = attribute_jobs(cfg, jobs, runs, log_index)
    run_of: dict[str, RunLog] = {}
    by_name = {r.run_id: r for r in runs if r.run_id}
    for run in runs:
        for jid in run.jobs:
            run_of[jid] = run
    for jid, rec in jobs.items():
        if rec.name in by_name:
            run_of[jid] = by_name[rec.name]
    per_cell: dict[Cell, list[tuple[str, slurm.JobRecord | None]]] = {c: [] for c in cfg.cells}
    for jid in sorted(job_cells, key=_job_sort_key):
        rule, cell = job_cells[jid]
        rec = jobs.get(jid)
        if rec is not None and ownership.split_comment(rec.comment)[1]:
            continue  # a helper job (the SkyRL server): cancelled with its cell, not the cell's state
        if rec is None and jid in slurm_logs:
            # Known only from its log (slurmctld and accounting forgot it): its state is unknown.
            rec = slurm.JobRecord(id=jid, state="", sources=("log",))
        per_cell[cell].append((rule, rec))
    active = driver_active(workdir)
    latest = run_ids[-1] if run_ids else None
    cells = [cell_state(c, layout, workdir, per_cell[c], run_of, slurm_logs, active, latest) for c in cfg.cells]
    grouped = by_cell(overrides)
    for cell, st in zip(cfg.cells, cells, strict=True):
        if cfg.agent_for(cell.agent).kind == "cli-agent":  # the only cells whose manifest holds a spend
            st.api_usage = manifest_api_usage(workdir / layout.manifest(cell.model, cell.eval, cell.agent))
    for cell, st in zip(cfg.cells, cells, strict=True):  # why a cell is not scored (ptflow.results.causes)
        rule_logs = {r: workdir / layout.log(r, cell.model, cell.eval, cell.agent) for r in CELL_RULES}
        found = diagnose(st, workdir / layout.cell_dir(cell.model, cell.eval, cell.agent), rule_logs)
        st.cause = found.to_dict() if found else None
    for cell, st in zip(cfg.cells, cells, strict=True):  # the one verdict (ptflow.results.verdict), as scoring reads it
        entries, taken = grouped.get(st.key, []), (accepted or {}).get(st.key)
        st.override = "; ".join(entry.text() for entry in entries)
        st.accepted = taken.decision() if taken is not None else ""
        verdict = cell_verdict(workdir / layout.judge_json(cell.model, cell.eval, cell.agent), entries, taken)
        st.verdict = verdict.to_dict() if verdict.state else None
        st.judge = verdict.text() if verdict.vote_count or (verdict.overrides and verdict.state) else ""
        if st.cause and st.cause.get("cause") == "no_verdict" and verdict.state != verdicts.NO_VERDICT:
            st.cause = None  # an override decided what the judges left undecided
    return Snapshot(cells, jobs, job_cells, run_ids, active, error)


def cell_verdict(judge_json: Path, overrides=(), accepted=None) -> verdicts.CellVerdict:
    """The cell's one verdict (``ptflow.results.verdict.of``) from its judge.json (none before it exists), its
    overrides and its accepted failure."""
    try:
        data = json.loads(judge_json.read_text())
    except (OSError, ValueError):
        data = None
    return verdicts.of(data, overrides, accepted)


# ---- presentation ----

COLUMNS = ("cell", "state", "job", "node", "elapsed", "detail")

# What ``ptflow status`` prints, in its order: :func:`table`, then the spend (``ptflow.ops.spend_view``) and the
# grid. ``ptflow status --help`` is made of these lines (tests/unit/test_cli_help.py checks them against the text).
SHOWS = (
    f"one row per cell: {', '.join(COLUMNS)} (the cell's latest Slurm job, its node and time so far); "
    f"a cell's state is one of {', '.join(STATES)}",
    "the cells per state, and whether a Snakemake driver is running in the working directory",
    "the API spend of the agent cells, as their CLIs reported it",
    "each verdict override and accepted failure (the file of scoring.overrides), and each cell's one verdict with "
    "its judges' votes",
    "the cells not scored, grouped by cause: how many, the step that failed, whether a rerun fixes it and what to "
    "do; then each cell with what was seen and its log (ptflow rerun --cause CAUSE reruns them)",
    "the spend so far against the caps, and the cells the matrix spend cap left unstarted",
    "where the state grid PNG was written (--png, --no-png)",
)


def table(snap: Snapshot) -> str:
    rows = [COLUMNS]
    for c in snap.cells:
        rows.append((c.key, c.state, c.job_id, c.node, c.elapsed, c.detail))
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(COLUMNS) - 1)]
    lines = []
    for r in rows:
        lines.append("  ".join(str(v).ljust(w) for v, w in zip(r[:-1], widths, strict=False)) + "  " + str(r[-1]))
    counts = ", ".join(f"{k}: {v}" for k, v in snap.counts().items() if v)
    lines.append("")
    lines.append(f"{len(snap.cells)} cells — {counts}; driver {'running' if snap.driver_active else 'not running'}")
    from ptflow.results.scoring import ApiSpend

    spent = ApiSpend.of([c.api_usage for c in snap.cells if c.api_usage])
    if spent:
        lines.append(f"API spend of {spent.cells} agent cells, as their CLIs reported it: {spent.text()}")
    lines += [f"override {c.key}: {c.override}" for c in snap.cells if c.override]  # scoring.overrides
    said = "counted at the base model's score, not run again"
    lines += [f"accepted {c.key}: {c.accepted} ({said})" for c in snap.cells if c.accepted]  # accepted failures
    lines += [f"verdict {c.key}: {c.judge}" for c in snap.cells if c.judge]  # the one verdict, with the panel's votes
    lines += cause_lines(snap.cells)  # the cells not scored, grouped by cause, each cause with what to do
    if snap.slurm_error:
        lines.append(f"Slurm not queried: {snap.slurm_error}")
    return "\n".join(lines)


STATE_COLORS = {
    DONE: "#4caf50",
    RUNNING: "#2196f3",
    PENDING: "#ffc107",
    ERROR: "#f44336",
    CANCELED: "#9e9e9e",
    PAUSED: "#ff9800",
    NOT_STARTED: "#ffffff",
}


def write_grid_png(snap: Snapshot, path: Path) -> Path:
    """The state grid for the report: one panel per agent, models (rows) x evals (columns)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Rectangle

    from ptflow.files import atomic_path

    agents = list(dict.fromkeys(c.agent for c in snap.cells))
    models = list(dict.fromkeys(c.model for c in snap.cells))
    evals = list(dict.fromkeys(c.eval for c in snap.cells))
    by_key = {(c.model, c.eval, c.agent): c for c in snap.cells}
    fig, axes = plt.subplots(
        1, len(agents), figsize=(1.2 + 1.6 * len(evals) * len(agents), 1.0 + 0.5 * len(models)), squeeze=False
    )
    for ax, agent in zip(axes[0], agents, strict=True):
        for i, m in enumerate(models):
            for j, e in enumerate(evals):
                c = by_key.get((m, e, agent))
                state = c.state if c else ""
                ax.add_patch(Rectangle((j, i), 1, 1, facecolor=STATE_COLORS.get(state, "#eeeeee"), edgecolor="black"))
                ax.text(j + 0.5, i + 0.5, state or "—", ha="center", va="center", fontsize=7)
        ax.set_xlim(0, len(evals))
        ax.set_ylim(len(models), 0)
        ax.set_xticks([j + 0.5 for j in range(len(evals))], evals, rotation=45, ha="right", fontsize=7)
        ax.set_yticks([i + 0.5 for i in range(len(models))], models if ax is axes[0][0] else [], fontsize=7)
        ax.set_title(agent, fontsize=9)
    fig.legend(
        handles=[Patch(facecolor=STATE_COLORS[s], edgecolor="black", label=s) for s in STATES],
        loc="lower center",
        ncol=len(STATES),
        fontsize=7,
    )
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)
    return Path(path)
