"""Reading a finished cell: its eval.json, and beside it judge.json and agent/trace.md, into one ``ScoredCell``.

eval.json ``metrics`` is the headline metric ``{name, value, stderr, n}`` (schema 2; schema 1's
``{accuracy, stderr, n}`` is read too). ``run`` (int) in eval.json, or the cell's agent slot ``<id>@run<k>``
(``ptflow.config.naming.slot``), names the repeat a cell belongs to. A value that cannot be read is a ``ScoreError``
naming the file, the key and what to do; the score itself is ``ptflow.results.scoring``'s.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ptflow.config import naming, tasks
from ptflow.results import verdict as verdicts
from ptflow.results.settings import Settings
from ptflow.results.verdict import CellVerdict

SCORED, NO_MODEL, EVAL_FAILED, MISSING = "scored", "no_model", "eval_failed", "missing"
# the verdict's states (ptflow.results.verdict), under the names the read side has used
JUDGE_CLEAN, JUDGE_FLAGGED, JUDGE_SKIPPED, JUDGE_NONE = verdicts.CLEAN, verdicts.FLAGGED, verdicts.NOT_JUDGED, ""
JUDGE_NO_VERDICT = verdicts.NO_VERDICT  # the judge ran but left no usable verdict: the cell counts as its base model


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
    # the cell's one verdict (ptflow.results.verdict): the judges', with the overrides and accepted failure applied
    # by scoring (ptflow.results.overrides.apply_overrides/apply_accepted); every view reads it
    verdict: CellVerdict = field(default_factory=lambda: CellVerdict(JUDGE_NONE))
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
    # rescore/<scorer>.json beside eval.json (rule rescore): the stored inspect log's metric under each scorer
    rescored: dict[str, float] = field(default_factory=dict)
    judge_record: dict | None = None  # judge.json as the judges wrote it (never edited: overrides apply over it)
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

    # the verdict's parts, as the views name them
    @property
    def judge(self) -> str:
        return self.verdict.state

    @property
    def judge_reason(self) -> str:
        return self.verdict.reason

    @property
    def judge_votes(self) -> str:
        return self.verdict.votes

    @property
    def judge_vote_count(self) -> int:
        return self.verdict.vote_count

    @property
    def overrides(self) -> tuple:
        return self.verdict.overrides

    @property
    def accepted(self):
        return self.verdict.accepted


def finite_number(value, where: str, key: str) -> float:
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
        value = finite_number(m["value"], where, "metrics.value")
    elif "accuracy" in m:
        name, value = "accuracy", finite_number(m["accuracy"], where, "metrics.accuracy")
    else:
        raise ScoreError(
            f"{where}: metrics has neither 'value' (with 'name') nor 'accuracy' (keys: {sorted(m)}); "
            "rerun the evaluation of this cell"
        )
    stderr = m.get("stderr")
    stderr = math.nan if stderr is None else finite_number(stderr, where, "metrics.stderr")
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


def _api_usage(run_info: dict) -> dict | None:
    """What the agent's CLI reported spending, with the cell's dollars (``agent_run.spend``, ptflow.config.spend)
    beside the tokens where the cell recorded them; None where the CLI reported nothing."""
    usage = run_info.get("api_usage")
    if not isinstance(usage, dict):
        return None
    return {**usage, "spend": run_info["spend"]} if isinstance(run_info.get("spend"), dict) else usage


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
    one, replaces this: ptflow.results.report.apply_accounting)."""
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
        verdict=verdicts.of(judge_data),
        status_detail=detail,
        eval_json=str(path.resolve()),
        cell_dir=str(path.parent.resolve()),
        inspect_log=str((path.parent / log).resolve()) if log else None,
        trace=str(trace) if trace and Path(trace).is_file() else None,
        time_taken_s=float(run_info["time_taken"]) if run_info.get("time_taken") is not None else None,
        budget_s=float(hours) * 3600 if hours is not None else None,
        gpu_hours=gpu_hours,
        gpu_hours_source=gpu_source,
        api_usage=_api_usage(run_info),
        rescored=read_rescored(path.parent),
        judge_record=judge_data,
    )


def read_rescored(cell_dir: Path) -> dict[str, float]:
    """The cell's rescored metric values by scorer (``rescore/<scorer>.json``), those that have one."""
    out = {}
    for name in tasks.RESCORERS:
        path = cell_dir / "rescore" / f"{name}.json"
        if path.is_file():
            metrics = json.loads(path.read_text()).get("metrics")
            if metrics is not None:
                out[name] = float(metrics["value"])
    return out
