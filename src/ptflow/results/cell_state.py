"""A cell's state from what it left under ``results/`` (eval.json, status.json, its rule logs, its manifest) and,
where its jobs are known, their Slurm records: Done, Running, Pending, Error, Canceled, Paused or Not started.

The files decide what Slurm cannot: a valid eval.json is Done whichever job came last, a job that ended COMPLETED
is checked against status.json and its outputs, and a failed job's rule log names the failure. Slurm states map as
TAO's SLURM platform document maps them. ``ptflow.ops.status`` finds the jobs (Snakemake's logs, squeue, sacct)
and calls ``cell_state`` per cell; ``ptflow.ops.plan`` reads the same files.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

from ptflow.cluster import slurm
from ptflow.config.layout import Layout
from ptflow.config.matrix import Cell

DONE, PENDING, RUNNING, ERROR, CANCELED, PAUSED, NOT_STARTED = (
    "Done",
    "Pending",
    "Running",
    "Error",
    "Canceled",
    "Paused",
    "Not started",
)
STATES = (DONE, RUNNING, PENDING, ERROR, CANCELED, PAUSED, NOT_STARTED)

# Slurm job state -> cell state (TAO's mapping; COMPLETED is decided by the files).
SLURM_STATE_MAP = {
    "PENDING": PENDING,
    "REQUEUED": PENDING,
    "REQUEUE_HOLD": PENDING,
    "REQUEUE_FED": PENDING,
    "RESV_DEL_HOLD": PENDING,
    "CONFIGURING": RUNNING,
    "RUNNING": RUNNING,
    "COMPLETING": RUNNING,
    "SIGNALING": RUNNING,
    "STAGE_OUT": RUNNING,
    "RESIZING": RUNNING,
    "FAILED": ERROR,
    "BOOT_FAIL": ERROR,
    "DEADLINE": ERROR,
    "OUT_OF_MEMORY": ERROR,
    "NODE_FAIL": ERROR,
    "TIMEOUT": ERROR,
    "SPECIAL_EXIT": ERROR,
    "CANCELLED": CANCELED,
    "PREEMPTED": CANCELED,
    "REVOKED": CANCELED,
    "SUSPENDED": PAUSED,
    "STOPPED": PAUSED,
}
LIVE = frozenset({PENDING, RUNNING, PAUSED})
CELL_RULES = ("train", "evaluate")


class SnakemakeRun(Protocol):
    """What the state of a cell needs of the Snakemake run that submitted a job (``ptflow.ops.status.RunLog``)."""

    run_id: str | None

    @property
    def retries(self) -> int: ...


def manifest_api_usage(manifest: Path) -> dict | None:
    """An agent cell's API spend from its manifest (written when its agent ended), None before or without one."""
    try:
        usage = (json.loads(manifest.read_text()).get("agent_run") or {}).get("api_usage")
    except (OSError, ValueError):
        return None
    return usage if isinstance(usage, dict) else None


@functools.cache
def _eval_json_validator():
    """eval.json's schema (``ptflow.stages.evaluate.run.EVAL_SCHEMA``) as one validator per process, the schema
    itself checked once. ``jsonschema.validate`` checks the schema against its meta-schema at every call: 21.7 ms a
    cell against 0.2 ms here, once per cell with an eval.json in every ``ptflow status`` and ``ptflow plan`` (a
    196-cell ``status.snapshot``: 4.3-4.7 CPU-s before, 0.08-0.10 after)."""
    import jsonschema

    from ptflow.stages.evaluate.run import EVAL_SCHEMA

    schema = json.loads(EVAL_SCHEMA.read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def valid_eval_json(path: Path, cell: Cell) -> bool:
    """eval.json exists, parses, follows the schema and belongs to this cell."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(data, dict) or not _eval_json_validator().is_valid(data):
        return False
    return data.get("model_name") == cell.model and data.get("eval") == cell.eval and data.get("agent") == cell.agent


def status_json_failure(cell_dir: Path) -> str | None:
    """What ``status.json`` beside the manifest says when a supervised or multi-node job recorded a failure (TAO: a
    COMPLETED job is checked against status.json); None when it says nothing of a failure."""
    try:
        data = json.loads((cell_dir / "status.json").read_text())
    except (OSError, ValueError):
        return None
    if data.get("status") != "failed":
        return None
    why = data.get("failure") or data.get("error") or ""
    return f"status.json says failed{f' ({why})' if why else ''}"


def rule_log_failed(path: Path) -> str | None:
    """The ``FAILED: ...`` line ptflow.jobenv writes last into a failed job's rule log, if that is how it ends."""
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return None
    if lines and "FAILED:" in lines[-1]:
        return lines[-1].split("FAILED:", 1)[1].strip()
    return None


@dataclass
class CellStatus:
    model: str
    eval: str
    agent: str
    state: str
    detail: str = ""
    rule: str = ""
    job_id: str = ""
    slurm_state: str = ""
    reason: str = ""
    exit_code: str = ""
    node: str = ""
    elapsed: str = ""
    retried: bool | None = None
    log: str = ""
    slurm_log: str = ""
    api_usage: dict | None = None  # the manifest's agent_run.api_usage: what the agent's CLI reported spending
    cause: dict | None = None  # why it is not scored (ptflow.results.causes.Diagnosis.to_dict()), None when it is
    override: str = ""  # the cell's verdict overrides with their reasons (scoring.overrides), "" without
    accepted: str = ""  # why its failure was accepted, "reason (who, when)" (scoring.overrides' accepted), "" if not
    judge: str = ""  # the one verdict and the panel's votes: "flagged contamination — gpt 2/3 contamination, kimi 0/1"
    verdict: dict | None = (
        None  # the one verdict (ptflow.results.verdict.CellVerdict.to_dict()), None without judge.json
    )

    @property
    def key(self) -> str:
        return f"{self.model}/{self.eval}/{self.agent}"

    def to_dict(self) -> dict:
        return {"cell": self.key, **asdict(self)}


def cell_state(
    cell: Cell,
    layout: Layout,
    workdir: Path,
    jobs: list[tuple[str, slurm.JobRecord | None]],
    run_of: Mapping[str, SnakemakeRun],
    slurm_logs: dict[str, str],
    active: bool,
    latest_run: str | None,
) -> CellStatus:
    """The state of one cell. ``jobs``: (rule, record) of its train/evaluate jobs, oldest first."""
    st = CellStatus(cell.model, cell.eval, cell.agent, NOT_STARTED)
    eval_json = workdir / layout.eval_json(cell.model, cell.eval, cell.agent)
    done = valid_eval_json(eval_json, cell)
    rule_logs = {r: workdir / layout.log(r, cell.model, cell.eval, cell.agent) for r in CELL_RULES}
    known = [(rule, rec) for rule, rec in jobs if rec is not None]
    if not known:
        if done:
            st.state, st.detail, st.log = DONE, "eval.json valid", str(eval_json)
            return st
        for rule in ("evaluate", "train"):
            failure = rule_log_failed(rule_logs[rule])
            if failure:
                st.state, st.rule, st.log, st.detail = ERROR, rule, str(rule_logs[rule]), failure
                st.retried = False
                return st
        if (workdir / layout.manifest(cell.model, cell.eval, cell.agent)).is_file():
            st.detail = "trained; evaluation not run yet"
        elif active:
            st.detail = "waiting for upstream jobs"
        return st
    rule, rec = known[-1]
    st.rule, st.job_id, st.slurm_state = rule, rec.id, rec.state
    st.reason, st.exit_code, st.node, st.elapsed = rec.reason, rec.exit_code, rec.nodes, rec.elapsed
    st.slurm_log = slurm_logs.get(rec.id, "")
    st.log = str(rule_logs[rule])
    mapped = SLURM_STATE_MAP.get(rec.base_state)
    if mapped in LIVE:
        st.state = mapped
        attempt = sum(1 for r, j in known if r == rule and run_of.get(j.id) is run_of.get(rec.id))
        st.detail = f"{rule} attempt {attempt}" + (f" ({rec.reason})" if rec.reason else "")
        if mapped == RUNNING:
            st.detail = f"{rule} attempt {attempt} on {rec.nodes}, elapsed {rec.elapsed}"
        return st
    if done:
        st.state, st.detail, st.log = DONE, "eval.json valid", str(eval_json)
        return st
    if rec.base_state == "COMPLETED" or mapped is None:
        # COMPLETED: check the files — status.json first (a job may end COMPLETED and still have failed).
        failed = status_json_failure(workdir / layout.cell_dir(cell.model, cell.eval, cell.agent))
        if rule == "train" and failed:
            st.state, st.detail, st.retried = ERROR, f"train job {rec.state or 'UNKNOWN'} but {failed}", False
            st.log = str(workdir / layout.cell_dir(cell.model, cell.eval, cell.agent) / "status.json")
            return st
        if rule == "train" and (workdir / layout.manifest(cell.model, cell.eval, cell.agent)).is_file():
            st.state = PENDING if active else NOT_STARTED
            st.detail = "trained; evaluate " + ("not submitted yet" if active else "not run yet")
        else:
            st.state = ERROR
            output = "eval.json" if rule == "evaluate" else "checkpoint.json"
            st.detail = f"{rule} job {rec.state or 'UNKNOWN'} but {output} missing or invalid"
            st.retried = False
        return st
    st.state = mapped
    run = run_of.get(rec.id)
    attempts = sum(1 for r, j in known if r == rule and run_of.get(j.id) is run)
    if mapped == ERROR:
        retries = run.retries if run else 0
        st.retried = bool(active and run is not None and run.run_id == latest_run and attempts <= retries)
        failure = rule_log_failed(rule_logs[rule])
        parts = [rec.base_state]
        if rec.reason:
            parts.append(rec.reason)
        if rec.exit_code:
            parts.append(f"exit {rec.exit_code}")
        parts.append(f"attempt {attempts}/{retries + 1}")
        parts.append("will be retried" if st.retried else "not retried")
        if failure:
            parts.append(failure)
        st.detail = "; ".join(parts)
    elif mapped == CANCELED:
        st.detail = f"{rule} job {rec.state}"
        st.retried = bool(active and run is not None and run.run_id == latest_run and attempts <= run.retries)
    return st
