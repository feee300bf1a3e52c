"""The evaluate stage: one cell through the evaluation kit with PostTrainBench's retry ladder, then eval.json.

Before any attempt (each refusal is one line, never retried): the task spec resolves and its arguments exist, the
grader's keys are in the environment, the data is complete offline, the model directory exists. Then attempts: 4 at
``max_tokens``, 3 at the first lower budget, 2 at the last; only a failure a smaller budget can cure (out of memory,
context length exceeded; decided by exception type inside the attempt) moves on, and a context-length failure skips
the remaining tries at its budget. Any other failure ends the evaluation at once with its error.

Each attempt is a child process running the kit's ``evaluate.py`` on the call document: a fresh process per try
gives back all GPU memory after an out-of-memory failure and stops any vLLM server the attempt started, and the
offline switches and cache roots (read by huggingface_hub, datasets and inspect_evals once, at import) are set
before anything is imported.

eval.json (``schemas/eval.schema.json``, version 2) is written atomically, last: ``status`` ``scored`` (the task's
headline metric by name), ``no_model`` (a cli-agent left no final_model) or ``eval_failed`` (every rung of the
ladder failed on a budget-curable error; the matrix goes on). Inspect's logs stay beside it (``inspect view``).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

from ptflow import warmstart
from ptflow.config import tasks
from ptflow.config.validate import SCHEMA_DIR
from ptflow.files import write_json_atomic, write_text_atomic
from ptflow.jobenv import thread_env
from ptflow.keys import Masker
from ptflow.specs import CheckoutCall, EvalCall, EvaluateSpec
from ptflow.stages.evaluate.kit import evaluate as kit
from ptflow.stages.evaluate.sources import EvalCaches, data_env, missing_sources

EVAL_SCHEMA = SCHEMA_DIR / "eval.schema.json"
EVAL_JSON_VERSION = 2
KIT_SCRIPT = Path(kit.__file__)
# The top-level names write_agent_kit writes into a task dir (besides the file of a task of kind "file").
AGENT_KIT_NAMES = (KIT_SCRIPT.name, kit.OWN_TASKS_FILE.name, kit.TEMPLATES_DIR.name, kit.SETTINGS_NAME)
SOFTWARE = (
    "ptflow", "torch", "transformers", "trl", "inspect-ai", "inspect-evals", "vllm", "snakemake", "huggingface-hub",
)  # fmt: skip


class EvalError(RuntimeError):
    """The evaluation cannot produce a score (the message is one line)."""


class EvalConfigError(EvalError):
    """Bad task spec or task argument, a missing API key or model: fix the config or the environment."""


class EvalDataMissing(EvalError):
    """Data the eval needs is not in the caches: run the cache stage where the network is reachable."""


class EvalFailed(EvalError):
    """An attempt failed in a way a smaller budget cannot cure."""


class EvalLadderExhausted(EvalFailed):
    """Every rung of the retry ladder failed on a budget-curable error (``attempts`` lists them)."""

    def __init__(self, message: str, attempts: list[dict], call: EvalCall):
        super().__init__(message)
        self.attempts, self.call = attempts, call


@dataclass
class EvalOutcome:
    eval_id: str
    task: str
    headline: dict  # {"name", "value", "stderr", "n", "scorer"}
    log_path: str  # the inspect log of the successful attempt
    max_new_tokens: int
    attempts: list[dict] = field(default_factory=list)
    call: EvalCall | None = None
    seconds: float = 0.0


@dataclass(frozen=True)
class EvalOutputs:
    """The files an evaluate job writes: eval.json and the dir of its logs (inspect's, or the checkout's)."""

    eval_json: str
    inspect_dir: str


@dataclass(frozen=True)
class EvalInputs:
    """What an evaluate job reads beside its spec: the cell's manifest (a trained model; None: the base or instruct
    model), the PostTrainBench checkout's marker (an eval of the checkout), the toy task's test parquet; and how it
    runs: its threads, the file that carries a checkout eval's ladder from job to job and the epoch second by which
    it must have stopped (None: no end)."""

    manifest: str | None = None
    checkout: str | None = None
    test_parquet: str | None = None
    threads: int | None = None
    progress: str | None = None
    deadline: float | None = None
    # the ladder's stage to start at (0: the first budget): a later evaluation seed starts where the first succeeded
    start_stage: int = 0

    @classmethod
    def of_rule(cls, rule_input, threads: int) -> EvalInputs:
        """What an evaluate or evaluate_seed job reads, from its rule's input (a mapping: Snakemake's namedlist)."""
        return cls(rule_input.get("manifest"), rule_input.get("checkout"), rule_input.get("test"), threads)


@dataclass(frozen=True)
class ModelUnderTest:
    """The model a cell's evaluation measures: its directory and how eval.json records it (``checkpoint``), with a
    trained model's training seconds and an agent's run record."""

    path: str
    checkpoint: dict
    train_seconds: float | None = None
    agent_run: dict | None = None


@dataclass(frozen=True)
class EvalRecord:
    """How an evaluation ended, as eval.json records it beside the cell, its call and its model."""

    status: str
    started: str
    seconds: float
    metrics: dict | None = None
    scorer: str | None = None
    inspect_log: str | None = None
    max_new_tokens: int | None = None
    attempts: list = field(default_factory=list)
    posttrainbench: dict | None = None


LADDER_TRIES = (4, 3, 2)  # PostTrainBench's tries per stage: the default budget, then each lower one


def budget_ladder(max_new_tokens: int, lower, start_stage: int = 0) -> list[int]:
    """PostTrainBench's retries: 4 tries at the default budget, then 3 and 2 at each lower one; from ``start_stage``
    on (a later evaluation seed starts at the stage where the first one succeeded)."""
    budgets = [max_new_tokens, *lower]
    return [b for stage, (b, n) in enumerate(zip(budgets, LADDER_TRIES, strict=False)) if stage >= start_stage
            for _ in range(n)]  # fmt: skip


def ladder_stage(call: EvalCall, budget: int) -> int:
    """The ladder stage of a budget of the call (0: its default max_tokens)."""
    return [call.max_tokens, *call.retry_max_tokens].index(budget)


def with_toy_data(call: EvalCall, test_parquet: str | Path) -> EvalCall:
    """The toy task's arguments: the workflow's test parquet (absolute: attempts run in their own directory)."""
    args = {"test_parquet": str(Path(test_parquet).resolve()), "name": call.eval_id}
    return replace(call, task_args={**call.task_args, **args})


def with_absolute_file_task(call: EvalCall) -> EvalCall:
    """A ``<file>.py@<task>`` spec relative to this job's working directory, made absolute (attempts, and an agent's
    copy of the kit, run elsewhere)."""
    if tasks.task_kind(call.task) != "file":
        return call
    path, name = call.task.rsplit("@", 1)
    return replace(call, task=f"{Path(path).resolve()}@{name}")


def _grader_arg(call: EvalCall) -> dict:
    grader = call.grader
    return {grader["task_arg"]: grader["model"]} if grader else {}


def check_call(call: EvalCall, env=None, keys: bool = True) -> None:
    """What can be refused before any data check or attempt: the task and its arguments, the grader's settings and
    (``keys``) its keys. Resolving a registry or file task imports its code (seconds): preflight runs this too."""
    try:
        fn = kit.task_function(call.task)
        kit.check_args(fn, call.task, {**call.task_args, **_grader_arg(call)})
        if keys:
            kit.check_keys(call.to_params(), env)  # the kit reads its settings document
    except (kit.TaskSpecError, kit.MissingKeyError) as exc:
        raise EvalConfigError(str(exc)) from None
    config = (call.grader or {}).get("config") or {}
    if config:
        from inspect_ai.model import GenerateConfig

        unknown = sorted(set(config) - set(GenerateConfig.model_fields))
        if unknown:
            raise EvalConfigError(f"grader.config: {', '.join(unknown)} are not inspect GenerateConfig fields")


def call_sources(call: EvalCall) -> list:
    return tasks.sources_for(call.task, call.task_args, call.grader)


def attempt_argv(
    settings_file: Path, model_path, max_tokens: int, log_dir: Path, result: Path, env: dict | None = None
) -> list[str]:
    """``python kit.py ...``; warm (ptflow.warmstart) when ``env`` names a local run's warm-start broker."""
    args = [
        "--settings", str(settings_file), "--model-path", str(model_path), "--max-tokens", str(max_tokens),
        "--log-dir", str(log_dir), "--attempt-result", str(result),
    ]  # fmt: skip
    return warmstart.script_argv(KIT_SCRIPT, args, env)


def kit_env_changes(hf_home, evals_cache, threads: int | None = None) -> dict:
    """How the kit's environment differs from its job's (warmstart.changed_env): the data offline, this interpreter
    first on PATH (sandboxed scorers such as HumanEval's local sandbox run "python"), the job's threads."""
    values = data_env(hf_home, evals_cache, offline=True)
    if threads:
        values.update(thread_env(threads))
    return {"set": values, "prepend": {"PATH": str(Path(sys.executable).parent)}}


def kit_companion(hf_home, evals_cache, threads: int | None = None) -> dict:
    """The kit as a warm-start companion of the evaluate jobs: a local run's broker starts its zygote ahead."""
    return {
        "name": f"the evaluation kit ({KIT_SCRIPT.name})",
        "changes": kit_env_changes(hf_home, evals_cache, threads),
    }


def child_env(env, hf_home, evals_cache, threads: int | None = None) -> dict:
    return warmstart.changed_env(os.environ if env is None else env, kit_env_changes(hf_home, evals_cache, threads))


def evaluate(
    call: EvalCall,
    model_path: str | Path,
    log_dir: str | Path,
    caches: EvalCaches,
    *,
    env: dict | None = None,
    threads: int | None = None,
    start_stage: int = 0,
    log=print,
) -> EvalOutcome:
    """Evaluate ``model_path`` as ``call`` says, its data read offline from ``caches``. The successful attempt's
    inspect log lands as ``<log_dir>/<eval_id>.eval``; every attempt's log and output stay in
    ``<log_dir>/attempts/<n>/``."""
    t0 = time.time()
    eval_id = call.eval_id
    call = with_absolute_file_task(call)
    check_call(call, env)
    hf_home, evals_cache = caches.hf_home, caches.evals_cache
    missing = missing_sources(call_sources(call), hf_home, evals_cache, env=env)
    if missing:
        raise EvalDataMissing(f"{eval_id}: {len(missing)} piece(s) of data missing: " + " | ".join(missing))
    if not Path(model_path, "config.json").is_file():
        raise EvalConfigError(f"model {model_path}: no config.json there; point it at an HF model directory")

    log_dir = Path(log_dir).resolve()  # attempts run in their own directories
    model_path = Path(model_path).resolve()
    attempts_dir = log_dir / "attempts"
    shutil.rmtree(attempts_dir, ignore_errors=True)
    attempts_dir.mkdir(parents=True)
    settings_file = attempts_dir / kit.SETTINGS_NAME
    write_json_atomic(settings_file, call.to_params())
    environment = child_env(env, hf_home, evals_cache, threads)

    attempts: list[dict] = []
    skip_budget = None
    for n, budget in enumerate(budget_ladder(call.max_tokens, call.retry_max_tokens, start_stage), start=1):
        if budget == skip_budget:
            continue
        attempt_dir = attempts_dir / str(n)
        result_file = attempt_dir / "result.json"
        attempt_dir.mkdir()
        a0 = time.time()
        proc = subprocess.run(
            attempt_argv(settings_file, model_path, budget, attempt_dir, result_file, environment),
            env=environment,
            cwd=attempt_dir,
            capture_output=True,
            text=True,
        )
        # output.txt, the error in eval.json and the log: a key the child printed is kept as ***
        output = Masker.for_env(environment).mask((proc.stdout or "") + (proc.stderr or ""))
        write_text_atomic(attempt_dir / "output.txt", output)
        result = json.loads(result_file.read_text()) if result_file.is_file() else None
        record = {"max_new_tokens": budget, "ok": bool(result and result["ok"]), "seconds": round(time.time() - a0, 2)}
        if record["ok"]:
            attempts.append(record)
            dest = log_dir / f"{eval_id}.eval"
            os.replace(result["log"], dest)
            h = result["headline"]
            log(f"{eval_id}: {h['name']} = {h['value']:.4f} (n={h['n']}, {budget} tokens, attempt {n})")
            return EvalOutcome(eval_id, call.task, h, str(dest), budget, attempts, call, round(time.time() - t0, 2))
        if result is None:
            tail = output.strip().splitlines()[-1:] or ["no output"]
            record.update(error=f"attempt exited without a result: {tail[0]}"[:500], failure_kind=None)
        else:
            record.update(error=result["error"], failure_kind=result.get("failure_kind"))
        attempts.append(record)
        log(f"{eval_id}: attempt {n} at {budget} tokens failed: {record['error']}")
        if record["failure_kind"] is None:
            raise EvalFailed(
                f"{eval_id}: attempt {n} failed in a way a smaller budget cannot cure: {record['error']} "
                f"(output: {attempt_dir / 'output.txt'})"
            )
        if record["failure_kind"] == "context":
            skip_budget = budget  # the same budget would overflow again
    raise EvalLadderExhausted(
        f"{eval_id}: all {len(attempts)} attempts failed on out-of-memory / context-length errors; last: "
        f"{attempts[-1]['error']} (outputs under {attempts_dir})",
        attempts,
        call,
    )


def write_agent_kit(dest_dir: str | Path, call: EvalCall) -> Path:
    """The kit an agent measures with: ``evaluate.py``, ``ptflow_tasks.py``, ``templates/`` and the call as
    ``evaluate_settings.json``, all in ``dest_dir``; returns the script's path."""
    dest = Path(dest_dir)
    (dest / "templates").mkdir(parents=True, exist_ok=True)
    files = {dest / src.relative_to(kit.KIT_DIR): src for src in [KIT_SCRIPT, kit.OWN_TASKS_FILE]}
    files.update({dest / "templates" / src.name: src for src in sorted(kit.TEMPLATES_DIR.glob("*.jinja"))})
    if tasks.task_kind(call.task) == "file":  # the task's file goes with the kit (evaluate.py looks beside it)
        path, name = with_absolute_file_task(call).task.rsplit("@", 1)
        files[dest / Path(path).name] = Path(path)
        call = replace(call, task=f"{Path(path).name}@{name}")
    for target, src in files.items():
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        os.close(fd)
        shutil.copyfile(src, tmp)
        os.replace(tmp, target)
    write_json_atomic(dest / kit.SETTINGS_NAME, call.to_params())
    return dest / KIT_SCRIPT.name


# ---- eval.json ----------------------------------------------------------------------------------------------------


def software_versions() -> dict:
    out = {"python": platform.python_version()}
    for dist in SOFTWARE:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out


def validate_eval_json(data: dict) -> None:
    import jsonschema

    schema = json.loads(EVAL_SCHEMA.read_text())
    try:
        jsonschema.validate(data, schema)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(top level)"
        raise ValueError(f"eval.json invalid at {where}: {exc.message}") from None


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _write_eval_json(
    eval_json, cell: dict, call: EvalCall | CheckoutCall, model: ModelUnderTest, record: EvalRecord
) -> dict:
    # a checkout's evaluate.py takes no task arguments; it runs vLLM, which eval.json names once it has run
    checkout = isinstance(call, CheckoutCall)
    data = {
        "schema_version": EVAL_JSON_VERSION,
        **cell,
        "status": record.status,
        **({"agent_run": model.agent_run} if model.agent_run else {}),
        "metrics": record.metrics,
        "scorer": record.scorer,
        "task": call.task,
        "task_args": {} if checkout else call.task_args,
        "provider": ("vllm" if record.status != "no_model" else None) if checkout else call.provider,
        "checkpoint": model.checkpoint,
        "inspect_log": record.inspect_log,
        "max_new_tokens": record.max_new_tokens,
        "attempts": list(record.attempts),
        "timings": {
            "started": record.started,
            "finished": _now(),
            "eval_seconds": record.seconds,
            "train_seconds": model.train_seconds,
        },
        "host": socket.gethostname(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "software": software_versions(),
        **({"posttrainbench": record.posttrainbench} if record.posttrainbench else {}),
    }
    validate_eval_json(data)
    write_json_atomic(eval_json, data)
    return data


def no_model_eval(job: EvaluateSpec, manifest: dict, outputs: EvalOutputs, log=print) -> dict:
    """eval.json for a cli-agent cell whose agent left no final_model: status no_model, no metrics."""
    Path(outputs.inspect_dir).mkdir(parents=True, exist_ok=True)
    run = manifest.get("agent_run") or {}
    cell = job.cell.to_params()
    model = ModelUnderTest(
        path=manifest["checkpoint"],
        checkpoint={"path": manifest["checkpoint"], "kind": "none", "commit_or_hash": manifest["config_hash"]},
        train_seconds=manifest.get("train_seconds"),
        agent_run=run,
    )
    data = _write_eval_json(outputs.eval_json, cell, job.call, model, EvalRecord("no_model", _now(), 0))
    why = "its budget ran out" if run.get("budget_exhausted") else f"it exited {run.get('exit_code')}"
    log(f"{cell}: no final model ({why}); eval.json says status no_model")
    return data


def evaluate_cell(
    job: EvaluateSpec, model: ModelUnderTest, outputs: EvalOutputs, inputs: EvalInputs = EvalInputs(), log=print
) -> dict:
    """Evaluate one cell and write its eval.json: ``scored``, or ``eval_failed`` when the whole ladder failed on
    budget-curable errors. Any other failure raises (the job fails with one line; nothing is written)."""
    cell, call = job.cell.to_params(), job.call
    if call.task == tasks.TOY_TASK:
        call = with_toy_data(call, inputs.test_parquet)
    out_dir = Path(outputs.inspect_dir)
    shutil.rmtree(out_dir, ignore_errors=True)
    started, t0 = _now(), time.time()
    try:
        out = evaluate(call, model.path, out_dir, EvalCaches(job.hf_home, job.evals_cache),
                       threads=inputs.threads, start_stage=inputs.start_stage, log=log)  # fmt: skip
    except EvalLadderExhausted as exc:
        log(f"{cell}: {exc}; eval.json says status eval_failed (delete it to try again)")
        record = EvalRecord(
            "eval_failed",
            started,
            round(time.time() - t0, 3),
            max_new_tokens=exc.attempts[-1]["max_new_tokens"],
            attempts=exc.attempts,
        )
        return _write_eval_json(outputs.eval_json, cell, call, model, record)
    h = out.headline
    record = EvalRecord(
        "scored",
        started,
        round(time.time() - t0, 3),
        metrics={"name": h["name"], "value": h["value"], "stderr": h["stderr"], "n": h["n"]},
        scorer=h["scorer"],
        inspect_log=os.path.relpath(out.log_path, Path(outputs.eval_json).parent),
        max_new_tokens=out.max_new_tokens,
        attempts=out.attempts,
    )
    return _write_eval_json(outputs.eval_json, cell, call, model, record)


def evaluate_checkout_cell(
    job: EvaluateSpec, model: ModelUnderTest, outputs: EvalOutputs, inputs: EvalInputs, log=print
) -> dict:
    """An eval of the PostTrainBench checkout (``ptflow.stages.posttrainbench.checkout_eval``; ``inputs.checkout``: its
    marker): ``scored`` with its metrics.json kept verbatim in the inspect dir, or ``eval_failed`` when every try of
    its ladder failed. ``inputs.progress``/``deadline``: the ladder carried over jobs (OutOfJobTime when this job
    ends first)."""
    from ptflow.stages.posttrainbench import checkout_eval as ptb_eval

    checkout = json.loads(Path(inputs.checkout).read_text())
    cell, call = job.cell.to_params(), job.call
    out_dir = Path(outputs.inspect_dir)
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    started, t0 = _now(), time.time()
    # the tries carried over are for this model and call only
    identity = {"model": model.path, "checkpoint": model.checkpoint, "call": call.to_params()}
    try:
        out = ptb_eval.evaluate(
            checkout["path"],
            ptb_eval.CheckoutEval.from_call(call),
            model.path,
            out_dir,
            caches=EvalCaches(job.hf_home, job.evals_cache),
            carry=ptb_eval.LadderCarry(inputs.progress, identity, inputs.deadline),
            log=log,
        )
    except ptb_eval.CheckoutEvalError as exc:
        raise EvalConfigError(str(exc)) from None
    last_budget = out["attempts"][-1]["max_new_tokens"]
    if not out["ok"]:
        tries = "its one try" if len(out["attempts"]) == 1 else f"all {len(out['attempts'])} tries of its ladder"
        log(f"{cell}: {tries} failed (PostTrainBench's); eval.json says eval_failed")
        record = EvalRecord(
            "eval_failed", started, round(time.time() - t0, 3), max_new_tokens=last_budget, attempts=out["attempts"]
        )
        return _write_eval_json(outputs.eval_json, cell, call, model, record)
    kept = out_dir / "metrics.json"
    if Path(out["metrics_file"]).resolve() != kept.resolve():
        os.replace(out["metrics_file"], kept)
    m = out["metrics"]
    record = EvalRecord(
        "scored",
        started,
        round(time.time() - t0, 3),
        metrics={"name": ptb_eval.METRIC, "value": float(m[ptb_eval.METRIC]), "stderr": _stderr(m), "n": None},
        scorer="posttrainbench",
        max_new_tokens=last_budget,
        attempts=out["attempts"],
        posttrainbench={
            "commit": checkout["commit"],
            "metrics_file": os.path.relpath(kept, Path(outputs.eval_json).parent),
            "argv": [str(a) for a in out["argv"]],
        },
    )
    return _write_eval_json(outputs.eval_json, cell, call, model, record)


def _stderr(metrics: dict):
    value = metrics.get("stderr")
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0 else None
