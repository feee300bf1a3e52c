"""Why a cell is not scored: the one vocabulary of failure causes (``CAUSES``: each cause's meaning, the step it
fails, whether running that step again can fix it, and what to do) and the classifier that picks a cell's cause from
facts only, never from the words of a log:

- Slurm's record of the cell's last job (``ptflow.cluster.slurm.JobRecord``: state, exit code, reason), as
  ``ptflow.results.cell_state`` found it: NODE_FAIL, PREEMPTED, TIMEOUT, OUT_OF_MEMORY, CANCELLED;
- the facts file beside the failed job's rule log (``ptflow.jobenv.record_fact``; only when it names that job): the
  API error the agent's CLI stated in its events (status and error type, ``AgentCli.api_error``), an exception's
  type, errno (ESTALE) and HTTP status (huggingface_hub's 429), a GPU job whose torch saw no GPU;
- the cell's own files: eval.json ``status`` (``no_model`` with the manifest's ``agent_run``: its ``api_error``,
  ``budget_exhausted``, ``stopped_by``; ``eval_failed`` with its tries), judge.json ``no_verdict``, and the spend
  budget's ``not_started.json`` (``ptflow.stages.train.agent.spend``).

A failed job with none of these facts is ``unknown``, with its rule log's path. ``ptflow status`` groups cells by
cause; ``ptflow rerun`` (``ptflow.ops.rerun``) reruns a cause's cells at its step.
"""

from __future__ import annotations

import errno
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ptflow.results.cell_state import CANCELED, DONE, ERROR, NOT_STARTED, CellStatus

# the steps a cause fails (what a rerun runs again): the agent/trainer's train job, the cell's evaluation, one
# seed's evaluation, the judge's vote, or the cache jobs before them
TRAIN, EVALUATE, EVALUATE_SEED, JUDGE, CACHE = "train", "evaluate", "evaluate_seed", "judge", "cache"

# the spend budget's records (ptflow.config.spend: SPEND_CAP, NOT_STARTED_FILE), agreed by name
SPEND_CAP_STOP = "spend_cap"  # the manifest's agent_run.stopped_by when the cell's own $ cap stopped its agent
NOT_STARTED_FILE = "not_started.json"  # in the cell's agent trace dir: the matrix's $ cap kept the agent from starting


@dataclass(frozen=True)
class Cause:
    """One cause of a cell not being scored. ``rerun``: running the failed step again can fix it as things are;
    False: ``todo`` must be done first (``ptflow rerun --fixed`` then reruns it) or the cell stands as it is."""

    name: str
    meaning: str
    step: str
    rerun: bool
    todo: str

    def to_dict(self) -> dict:
        return asdict(self)


def _causes(*entries: Cause) -> dict[str, Cause]:
    return {c.name: c for c in entries}


CAUSES: dict[str, Cause] = _causes(
    Cause("node_failure", "Slurm lost the node the job ran on (NODE_FAIL, BOOT_FAIL)", TRAIN, True,
          "rerun; Snakemake's retries exclude the failed node"),
    Cause("preempted", "Slurm preempted the job (PREEMPTED)", TRAIN, True,
          "rerun (resumable training continues where it stopped)"),
    Cause("time_limit", "the job reached its Slurm time limit (TIMEOUT, DEADLINE)", TRAIN, True,
          "rerun (resumable training continues); if it recurs raise the rule's time limit (runtime of its request in "
          "the site file)"),
    Cause("out_of_memory", "the job ran out of memory (Slurm's OUT_OF_MEMORY, or the job's MemoryError / CUDA OOM)",
          TRAIN, False, "raise mem_mb (or the GPUs) in the site file's request for this rule, or lower the batch; "
          "then ptflow rerun --fixed"),
    Cause("cancelled", "the job was cancelled (scancel, or the driver stopped)", TRAIN, True, "rerun"),
    Cause("api_key_refused", "the agent's CLI reported its API key refused (HTTP 401/403)", TRAIN, False,
          "set a valid key in the variable named, then ptflow rerun --fixed"),
    Cause("rate_limited", "the agent's CLI gave up on HTTP 429 (rate limited) after its retries", TRAIN, True,
          "rerun later, or with fewer agent cells at once"),
    Cause("overloaded", "the agent's CLI gave up on an overloaded or failing API (HTTP 529 / 5xx)", TRAIN, True,
          "rerun later"),
    Cause("quota_exhausted", "the agent's API account has no quota or credit left (insufficient_quota, "
          "billing_error)", TRAIN, False, "top up the account or raise its spending limit, then ptflow rerun --fixed"),
    Cause("api_error", "the agent's CLI ended on another API error (its status and type are in the detail)", TRAIN,
          True, "read the agent's trace; rerun if the API's error was passing"),
    Cause("hub_rate_limited", "the Hugging Face hub answered 429 (rate limited) to a download", CACHE, True,
          "rerun later; a HF_TOKEN in the environment gets a higher limit"),
    Cause("no_gpu", "a GPU job whose torch saw no GPU (it trained on the CPUs)", TRAIN, False,
          "put a CUDA build of torch in the site's runtime, or exclude the node (ptflow doctor shows which), then "
          "ptflow rerun --fixed"),
    Cause("stale_file_handle", "a file on a network file system went stale under the job (ESTALE)", TRAIN, True,
          "rerun; if it recurs ask the admins about the file system (or move scratch)"),
    Cause("no_final_model", "the agent ended without leaving a final_model (scored as the base model)", TRAIN, False,
          "the agent's own outcome, counted as PostTrainBench does; ptflow rerun --fixed gives the agent another "
          "try"),
    Cause("overrun", "the agent used its whole time budget without a final_model: PostTrainBench counts this as the "
          "agent's normal end (scored as the base model), not a failure", TRAIN, False,
          "nothing to fix; a longer budget (agents[].hours) is another experiment"),
    Cause("spend_cap", "spend cap reached: the cell's $ cap stopped its agent (its model kept and evaluated)", TRAIN,
          False, "raise agents[].max_spend_usd (or spend.max_usd_per_cell), then ptflow rerun --fixed"),
    Cause("matrix_spend_cap", "matrix spend cap reached, not started: the matrix's $ cap kept this agent cell from "
          "starting", TRAIN, False, "raise spend.max_usd, then ptflow rerun --fixed"),
    Cause("eval_failed", "every evaluation try failed (eval.json status eval_failed)", EVALUATE, True,
          "rerun the evaluation (the trained model is kept); read its tries' errors in eval.json if it recurs"),
    Cause("no_verdict", "the judge gave no verdict (judge.json status no_verdict)", JUDGE, True,
          "rerun the judge (the agent's run is kept)"),
    Cause("unknown", "the job failed and recorded no fact ptflow knows", TRAIN, True,
          "read the rule log named, fix what it says, then rerun"),
)  # fmt: skip

# HTTP statuses of an API error as the causes read them
AUTH_STATUSES = (401, 403)
RATE_STATUS = 429
QUOTA_TYPES = ("insufficient_quota", "billing_error", "quota_exceeded", "credit_balance_too_low")
OVERLOAD_TYPES = ("overloaded_error", "api_error", "server_error")
AUTH_TYPES = ("authentication_failed", "authentication_error", "permission_error", "ProviderAuthError")
RATE_TYPES = ("rate_limit", "rate_limit_error", "rate_limit_exceeded")
SLURM_CAUSES = {
    "NODE_FAIL": "node_failure",
    "BOOT_FAIL": "node_failure",
    "PREEMPTED": "preempted",
    "TIMEOUT": "time_limit",
    "DEADLINE": "time_limit",
    "OUT_OF_MEMORY": "out_of_memory",
    "CANCELLED": "cancelled",
    "REVOKED": "cancelled",
}


@dataclass
class Diagnosis:
    """A cell's cause: the vocabulary's name, the step to run again, what was seen (facts, not log lines), and the
    log to read."""

    cause: str
    step: str
    detail: str = ""
    log: str = ""
    facts: dict = field(default_factory=dict)

    @property
    def entry(self) -> Cause:
        return CAUSES[self.cause]

    def todo(self) -> str:
        """The cause's what-to-do line, with the key variable or log it names."""
        todo = self.entry.todo
        if self.cause == "api_key_refused" and self.facts.get("key_var"):
            todo = f"set a valid {self.facts['key_var']}, then ptflow rerun --fixed"
        if self.cause == "unknown" and self.log:
            todo = f"read {self.log}, fix what it says, then rerun"
        return todo

    def to_dict(self) -> dict:
        return {"cause": self.cause, "step": self.step, "detail": self.detail, "log": self.log, "facts": self.facts}


def api_error_cause(error: dict | None) -> str | None:
    """The cause of an API error as the CLI stated it (``{"http_status", "type"}``); None for no error."""
    if not error:
        return None
    status, kind = error.get("http_status"), str(error.get("type") or "")
    if kind in QUOTA_TYPES:
        return "quota_exhausted"
    if status in AUTH_STATUSES or kind in AUTH_TYPES:
        return "api_key_refused"
    if status == RATE_STATUS or kind in RATE_TYPES:
        return "rate_limited"
    if (isinstance(status, int) and (status >= 500)) or kind in OVERLOAD_TYPES:
        return "overloaded"
    return "api_error"


def _api_detail(error: dict) -> str:
    status = error.get("http_status")
    kind = f" {error['type']}" if error.get("type") else ""
    said = f"HTTP {status}" if status is not None else "no HTTP status"
    return f"{error.get('cli', 'the CLI')} reported {said}{kind} (exit {error.get('exit_code', '?')})"


def read_facts(rule_log: Path) -> dict | None:
    """The facts file beside a rule log (``ptflow.jobenv.facts_path``): ``{"job_id", "facts": [...]}``."""
    from ptflow.jobenv import facts_path

    try:
        data = json.loads(facts_path(rule_log).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("facts"), list) else None


def facts_cause(facts: list[dict]) -> tuple[str, str, dict] | None:
    """The cause the recorded facts of one job name, most telling first: the CLI's API error, then the
    exception's facts (OOM, ESTALE, the hub's HTTP status), then a GPU job without a GPU."""
    by_kind: dict[str, dict] = {}
    for fact in facts:
        if isinstance(fact, dict):
            by_kind.setdefault(str(fact.get("kind")), fact)
    api = by_kind.get("api_error")
    if api and api_error_cause(api):
        return api_error_cause(api), _api_detail(api), api
    exc = by_kind.get("exception") or {}
    if exc.get("out_of_memory"):
        return "out_of_memory", f"{exc.get('type')} in the job", exc
    if exc.get("errno") == errno.ESTALE:
        return "stale_file_handle", f"{exc.get('type')} errno {exc.get('errno_name') or 'ESTALE'}", exc
    if exc.get("http_status") == RATE_STATUS and str(exc.get("http_module", "")).startswith("huggingface_hub"):
        return "hub_rate_limited", f"{exc.get('type')}: HTTP 429 from the hub", exc
    if "no_gpu" in by_kind:
        gpu = by_kind["no_gpu"]
        return "no_gpu", f"asked for {gpu.get('gpus_requested')} GPU(s), torch {gpu.get('torch')} saw none", gpu
    return None


def _job_facts(rule_log: Path, job_id: str) -> list[dict]:
    """The facts of ``job_id`` (a facts file of another job, an earlier attempt's, is not this failure's)."""
    data = read_facts(rule_log)
    if data is None or (job_id and data.get("job_id") and str(data["job_id"]) != job_id):
        return []
    return data["facts"]


def _read_json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def scored_cause(eval_data: dict | None, judge_data: dict | None = None, verdict=None) -> Diagnosis | None:
    """The cause of a finished cell not scored, from its eval.json and judge.json alone (the report's view): no
    final model (by the API error, spend cap or budget that ended the agent), every evaluation try failed, or the
    judge gave no verdict; None for a scored cell. ``verdict``: the cell's one verdict (``ptflow.results.verdict``)
    where the caller has it: an undecided judge.json that an override decided is no cause."""
    if eval_data:
        run = eval_data.get("agent_run") or {}
        if eval_data.get("status") == "no_model":
            api = run.get("api_error")
            if api_error_cause(api):
                return Diagnosis(api_error_cause(api), TRAIN, "no final model: " + _api_detail(api), facts=api)
            if run.get("stopped_by") == SPEND_CAP_STOP:
                return Diagnosis("spend_cap", TRAIN, "no final model: its spend cap stopped the agent")
            if run.get("budget_exhausted"):
                return Diagnosis("overrun", TRAIN, "no final model: budget exhausted (timeout)")
            return Diagnosis("no_final_model", TRAIN, f"no final model: agent exited {run.get('exit_code')}")
        tries = eval_data.get("attempts") or []
        if eval_data.get("status") == "eval_failed" or (tries and not any(t.get("ok") for t in tries)):
            return Diagnosis("eval_failed", EVALUATE, f"{len(tries)} evaluation tries, none succeeded")
    if judge_data and judge_data.get("status") == "no_verdict":
        if verdict is not None and verdict.state != "no verdict":
            return None
        return Diagnosis("no_verdict", JUDGE, str(judge_data.get("reason", ""))[:200])
    return None


def diagnose(st: CellStatus, cell_dir: Path, rule_logs: dict[str, Path]) -> Diagnosis | None:
    """The cause of one cell as ``ptflow status`` sees it (``st`` from ``cell_state``); None for a cell scored,
    running or waiting. ``rule_logs``: rule -> its rule log for this cell (train, evaluate)."""
    if st.state == DONE:
        return scored_cause(_read_json(cell_dir / "eval.json"), _read_json(cell_dir / "judge.json"))
    if st.state == NOT_STARTED:
        marker = _read_json(cell_dir / "agent" / NOT_STARTED_FILE)
        if marker is not None:
            return Diagnosis("matrix_spend_cap", TRAIN, str(marker.get("reason", "")), str(cell_dir / "agent"))
        return None
    if st.state not in (ERROR, CANCELED):
        return None
    rule = st.rule or "train"
    step = EVALUATE if rule == "evaluate" else TRAIN
    log = rule_logs.get(rule)
    log_text = str(log) if log else st.log
    # Slurm's own record first: a job killed by the cluster wrote no fact of its own
    base = st.slurm_state.split()[0] if st.slurm_state else ""
    slurm_cause = SLURM_CAUSES.get(base)
    facts = _job_facts(log, st.job_id) if log else []
    found = facts_cause(facts)
    if found and found[0] == "no_gpu" and slurm_cause == "time_limit":
        slurm_cause = None  # out of time because it trained on the CPUs: the root cause is the missing GPU
    if slurm_cause:
        detail = "; ".join(x for x in (st.slurm_state, st.reason, f"exit {st.exit_code}" if st.exit_code else "") if x)
        return Diagnosis(slurm_cause, step, f"{rule} job {st.job_id}: {detail}", log_text)
    if found:
        cause, detail, fact = found
        cause_step = CACHE if cause == "hub_rate_limited" and rule not in ("train", "evaluate") else step
        return Diagnosis(cause, cause_step, f"{rule} job {st.job_id or '(no job id)'}: {detail}", log_text, fact)
    if (cell_dir / "agent" / NOT_STARTED_FILE).is_file():
        return Diagnosis("matrix_spend_cap", TRAIN, "not started: matrix spend cap reached", log_text)
    why = "; ".join(x for x in (st.slurm_state, f"exit {st.exit_code}" if st.exit_code else "") if x)
    return Diagnosis("unknown", step, f"{rule} job {st.job_id or '(no job id)'}: {why or 'no Slurm record'}", log_text)


def by_cause(cells: list[CellStatus]) -> list[dict]:
    """The cells with a cause, grouped: each group's cause, meaning, step, rerun and what to do, and its cells
    (``cell``, ``detail``, ``log``); groups in the vocabulary's order."""
    groups: dict[str, dict] = {}
    for st in cells:
        if not st.cause:
            continue
        diag = Diagnosis(**st.cause)
        todo = diag.todo() if diag.cause != "unknown" else CAUSES["unknown"].todo
        group = groups.setdefault(diag.cause, {**CAUSES[diag.cause].to_dict(), "todo": todo, "cells": []})
        group["cells"].append({"cell": st.key, "step": diag.step, "detail": diag.detail, "log": diag.log})
    return [groups[name] for name in CAUSES if name in groups]


def cause_lines(cells: list[CellStatus]) -> list[str]:
    """``ptflow status``'s text of :func:`by_cause`: a line per cause (how many cells, whether a rerun fixes it,
    what to do), then its cells with what was seen."""
    lines = []
    for group in by_cause(cells):
        rerun = "rerun fixes it" if group["rerun"] else "rerun only after the fix (--fixed)"
        lines.append(f"cause {group['name']} ({len(group['cells'])} cells; {group['step']}; {rerun}): {group['todo']}")
        lines += [f"  {c['cell']}: {c['detail']}" + (f" — {c['log']}" if c["log"] else "") for c in group["cells"]]
    return lines
