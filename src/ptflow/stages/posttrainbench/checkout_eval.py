"""A cell evaluated by the PostTrainBench checkout's ``src/eval/tasks/<eval>/evaluate.py``, as ``run_task.sh`` does it.

Each attempt is ``python evaluate.py --model-path <model> --templates-dir <checkout>/src/eval/templates --limit -1
[<budget flag> N] --json-output-file <attempt>/metrics.json`` in the eval's directory of the checkout (the job runs in
the site's evaluation image: PostTrainBench's ``vllm_debug``). The ladder is run_task.sh's: 4 tries at evaluate.py's
own default budget, then 3 at the second budget and 2 at the third (``retry_max_new_tokens``); **any** failure (no
metrics.json) steps on, as there. Each try runs under a deadline (28,800 s, run_task.sh's), in its own process group,
which is stopped whole afterwards: a vLLM server an attempt left behind never holds the GPU for the next one.

The budget flag is the one the checkout's evaluate.py declares (``--max-tokens`` for most evals, ``--max-new-tokens``
for arenahardwriting and healthbench at 9082063): read from its argparse calls, so a checkout that renames it is
followed. The scored attempt's ``metrics.json`` is kept verbatim beside eval.json's logs; eval.json's metric is its
``accuracy`` (what PostTrainBench's aggregation reads).

A cell of the untouched base model or of its instruct counterpart (agents of kind ``baseline`` and ``instruct``) is
evaluated as ``src/baselines/run_baseline.sh`` evaluates it: one try, no ladder and no budget flag, the same
arguments, ``metrics.json`` written straight into the output dir, evaluate.py's stdout in ``final_eval.txt`` and its
stderr in ``error.log`` (run_baseline.sh's files; it sets no deadline of its own: the job's limit governs).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ptflow.config import posttrainbench as ptb
from ptflow.config.sites import EVAL_HUB_ENV
from ptflow.files import write_json_atomic, write_text_atomic
from ptflow.keys import DRAIN_SECONDS, Masker, Pump, looks_like_secret
from ptflow.specs import CheckoutCall
from ptflow.stages.evaluate.sources import OFFLINE_ENV, EvalCaches

ATTEMPT_TIMEOUT_S = 28800  # run_task.sh: timeout --signal=TERM --kill-after=60s 28800s per attempt
KILL_AFTER_S = 60
TRIES = (4, 3, 2)  # run_task.sh: run_evaluation_with_retry 4 "", then 3 and 2 at the lower budgets
METRIC = "accuracy"  # scripts/aggregate_methods.py reads metrics.json["accuracy"]
_FLAG = re.compile(r"""add_argument\(\s*['"](--max(?:-new)?-tokens)['"]""")
_HELP_FLAG = re.compile(r"(?<![\w-])(--max(?:-new)?-tokens)(?![\w-])")
HELP_TIMEOUT_S = 600  # its imports (inspect, vLLM) on a cold node


# The ladder's progress beside eval.json (never a rule's output, which a retry starts without): the tries made so
# far, for the model and call they were made for. A job that reaches its end mid-ladder (a try of up to 8 h in an
# evaluate request of a few) leaves it, and its retry, or the evaluate job after a train job's evaluation, goes on
# at the next try instead of starting the ladder again.
PROGRESS_FILE = "evaluate-ladder.json"
MIN_TRY_S = 300  # a try is not started with less of the job left: the job's retry makes it


@dataclass(frozen=True)
class CheckoutEval:
    """One eval of the checkout as a cell's call asks for it: the eval's directory under ``src/eval/tasks``, the
    ladder's lower budgets, the sample limit (None: all), the key names its evaluate.py needs (its grader's), and
    ``once``: run_baseline.sh's single try (a baseline or instruct cell)."""

    eval_dir: str
    lower: Sequence[int] = ()
    limit: int | None = None
    keys: Sequence[str] = ()
    once: bool = False

    @classmethod
    def from_call(cls, call: CheckoutCall) -> CheckoutEval:
        return cls(
            eval_dir=call.files.eval_dir,
            lower=tuple(call.retry_max_tokens),
            limit=call.limit,
            keys=tuple(call.keys),
            once=call.tries == 1,
        )


@dataclass(frozen=True)
class LadderCarry:
    """How a ladder goes on from job to job: the file keeping its tries (:data:`PROGRESS_FILE`; None: not kept), the
    model and call those tries are for (``identity``), and the job's usable end in epoch seconds (None: no end)."""

    progress: str | Path | None = None
    identity: dict = field(default_factory=dict)
    deadline: float | None = None


class CheckoutEvalError(RuntimeError):
    """The checkout's evaluation cannot run here (one line)."""


class OutOfJobTime(RuntimeError):
    """The job ends before the ladder does: its progress is kept (:data:`PROGRESS_FILE`) for the job's retry."""


def _progress(path: Path | None, identity: dict) -> list[dict]:
    """The tries an earlier job made of this ladder for the same model and call."""
    try:
        data = json.loads(Path(path).read_text()) if path else {}
    except (OSError, ValueError):
        return []
    return list(data.get("attempts", [])) if data.get("identity") == identity else []


def _keep_progress(path: Path | None, identity: dict, attempts: list[dict]) -> None:
    if path:
        write_json_atomic(path, {"identity": identity, "attempts": attempts})


def budget_flag(evaluate_py: Path, env: dict | None = None) -> str | None:
    """The budget option the checkout's evaluate.py declares, or None (it takes none: every rung is its default).
    Asked of the script itself (its argparse ``--help``, in its directory), so a checkout that renames or builds its
    options differently is followed; read from its text when ``--help`` fails."""
    try:
        proc = subprocess.run(
            [sys.executable, evaluate_py.name, "--help"], cwd=evaluate_py.parent, env=env, capture_output=True,
            text=True, timeout=HELP_TIMEOUT_S,
        )  # fmt: skip
        text = proc.stdout if proc.returncode == 0 else ""
    except subprocess.TimeoutExpired:
        text = ""
    found = _HELP_FLAG.findall(text) or _FLAG.findall(evaluate_py.read_text(errors="replace"))
    return found[0] if found else None


def ladder(lower) -> list[int | None]:
    """None: evaluate.py's default budget (run_task.sh passes no flag on its first rung)."""
    rungs: list[int | None] = [None, *lower]
    return [budget for budget, tries in zip(rungs, TRIES, strict=False) for _ in range(tries)]


def attempt_argv(checkout: Path, eval_dir: str, model_path, budget: int | None, flag: str | None, metrics, limit):
    argv = [
        sys.executable, "evaluate.py", "--model-path", str(model_path),
        "--templates-dir", str(checkout / ptb.TEMPLATES_DIR), "--limit", str(limit if limit else -1),
    ]  # fmt: skip
    if budget is not None and flag:
        argv += [flag, str(budget)]
    return [*argv, "--json-output-file", str(metrics)]


def eval_environment(env: dict, keys) -> dict:
    """run_task.sh's evaluation environment: the job's, minus every secret but the eval's own keys (its grader's),
    plus what it sets (``VLLM_API_KEY=inspectai``, ``PYTHONNOUSERSITE=1``) and, unlike run_task.sh, the hub's
    offline switches: its datasets come from the cache rule posttrainbench_cache warmed and proved (in a CPU job),
    so an evaluation never downloads on a GPU node. On a site whose compute nodes reach the hub (its
    ``evaluation.hub: online``, :data:`EVAL_HUB_ENV` in the job) it runs online, as run_task.sh runs it: no switch
    set, any inherited one removed (still from the warmed cache)."""
    keep = set(keys)
    out = {k: v for k, v in env.items() if (k in keep or not looks_like_secret(k)) and k not in OFFLINE_ENV}
    switches = {} if env.get(EVAL_HUB_ENV) == "online" else OFFLINE_ENV
    return {**out, "VLLM_API_KEY": "inspectai", "PYTHONNOUSERSITE": "1", **switches}


def _run(argv, cwd, env, stdout: Path, timeout: float | None, stderr: Path | None = None) -> int | None:
    """One attempt in its own process group; None when its deadline passed. The group is stopped afterwards.
    ``stderr``: its own file (else with stdout)."""
    with open(stdout, "wb") as out, open(stderr or os.devnull, "wb") as err:
        proc = subprocess.Popen(
            argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE if stderr else subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        # the grader's key (and any secret-looking variable of its environment) is kept as *** in its output
        pipes = [(proc.stdout, out)] + ([(proc.stderr, err)] if stderr else [])
        pump = Pump(Masker.for_env(env), pipes).start()
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=KILL_AFTER_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            rc = None
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # whatever the attempt started (a vLLM engine) goes with it
            except ProcessLookupError:
                pass
            pump.finish(DRAIN_SECONDS)
    return rc


def read_metrics(path: Path) -> dict | None:
    """metrics.json as PostTrainBench's aggregation reads it: a number under ``accuracy``, else None."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    value = data.get(METRIC) if isinstance(data, dict) else None
    return data if isinstance(value, int | float) and not isinstance(value, bool) else None


def evaluate(
    checkout: str | Path,
    task: CheckoutEval,
    model_path: str | Path,
    out_dir: str | Path,
    *,
    caches: EvalCaches | None = None,
    env: dict | None = None,
    carry: LadderCarry = LadderCarry(),
    log=print,
) -> dict:
    """Run the ladder (``task.once``: run_baseline.sh's single try); returns ``{"ok", "metrics", "metrics_file",
    "argv", "attempts"}`` (ok False: every try failed). Raises CheckoutEvalError when it cannot start at all (no
    evaluate.py, no model, a missing key). ``caches``: the HF cache and inspect_evals' cache its evaluate.py reads
    (HF_HOME, INSPECT_EVALS_CACHE_DIR). ``carry``: the file that carries the ladder's tries from job to job for
    its identity (the model and call), and the job's usable end, at which a try is stopped and OutOfJobTime raised
    with the progress kept."""
    checkout = Path(checkout)
    cwd = checkout / ptb.EVAL_DIR.format(eval=task.eval_dir)
    script = cwd / "evaluate.py"
    if not script.is_file():
        raise CheckoutEvalError(f"the PostTrainBench checkout {checkout} has no {script.relative_to(checkout)}")
    if not Path(model_path, "config.json").is_file():
        raise CheckoutEvalError(f"model {model_path}: no config.json there; point it at an HF model directory")
    environ = dict(os.environ if env is None else env)
    missing = [k for k in task.keys if not environ.get(k)]
    if missing:
        raise CheckoutEvalError(f"{task.eval_dir}: its evaluate.py needs {', '.join(missing)} in the environment")
    environ = eval_environment(environ, task.keys)
    # absolute: evaluate.py runs in its eval dir, where a relative paths.hf_home names nothing; inspect_evals' cache
    # holds bfcl's git data (the cache job warmed it there)
    if caches is not None and caches.hf_home:
        environ["HF_HOME"] = str(Path(caches.hf_home).resolve())
    if caches is not None and caches.evals_cache:
        environ["INSPECT_EVALS_CACHE_DIR"] = str(Path(caches.evals_cache).resolve())
    out = Path(out_dir).resolve()
    run = _Ladder(checkout, task, cwd, environ, Path(model_path).resolve(), out, log)
    if task.once:
        return _run_once(run)
    return _run_ladder(run, carry)


@dataclass(frozen=True)
class _Ladder:
    """One checkout evaluation being run: where, in what environment, on which model, into which dir."""

    checkout: Path
    task: CheckoutEval
    cwd: Path
    environ: dict
    model_path: Path
    out: Path
    log: Callable[[str], None]

    def argv(self, budget: int | None, flag: str | None, metrics: Path) -> list[str]:
        return attempt_argv(self.checkout, self.task.eval_dir, self.model_path, budget, flag, metrics, self.task.limit)


def _run_ladder(run: _Ladder, carry: LadderCarry) -> dict:
    """run_task.sh's ladder, going on at the try after those ``carry`` kept."""
    eval_dir, progress, identity, log = run.task.eval_dir, carry.progress, carry.identity, run.log
    flag = budget_flag(run.cwd / "evaluate.py", run.environ) if run.task.lower else None  # only lower rungs pass one
    attempts = _progress(progress, identity)
    if attempts:
        log(f"{eval_dir}: {len(attempts)} tries of the ladder were made by an earlier job; going on at the next")
    for n, budget in enumerate(ladder(run.task.lower), start=1):
        if n <= len(attempts):
            continue
        shown = "its default" if budget is None else str(budget)
        timeout = ATTEMPT_TIMEOUT_S
        if carry.deadline is not None:
            left = carry.deadline - time.time()
            if left < MIN_TRY_S:
                _keep_progress(progress, identity, attempts)
                raise OutOfJobTime(f"{eval_dir}: {max(int(left), 0)} s of this job left before try {n} of the "
                                   f"ladder; the job's retry makes it")  # fmt: skip
            timeout = min(timeout, left)
        attempt_dir = run.out / "attempts" / str(n)
        attempt_dir.mkdir(parents=True)
        metrics_file = attempt_dir / "metrics.json"
        argv = run.argv(budget, flag, metrics_file)
        t0 = time.time()
        rc = _run(argv, run.cwd, run.environ, attempt_dir / f"final_eval_{n}.txt", timeout)
        metrics = read_metrics(metrics_file)
        record = {"max_new_tokens": budget, "ok": metrics is not None, "seconds": round(time.time() - t0, 2)}
        if metrics is not None:
            attempts.append(record)
            if progress:
                Path(progress).unlink(missing_ok=True)
            log(f"{eval_dir}: {METRIC} = {metrics[METRIC]:.4f} (budget {shown}, attempt {n})")
            return {"ok": True, "metrics": metrics, "metrics_file": metrics_file, "argv": argv, "attempts": attempts}
        if rc is None and timeout < ATTEMPT_TIMEOUT_S:  # stopped by the job's end, not by run_task.sh's deadline
            _keep_progress(progress, identity, attempts)
            raise OutOfJobTime(f"{eval_dir}: try {n} of the ladder (budget {shown}) reached this job's end after "
                               f"{record['seconds']:.0f} s; the job's retry makes it again")  # fmt: skip
        ended = "passed its deadline" if rc is None else f"exited {rc}"
        tail = (attempt_dir / f"final_eval_{n}.txt").read_text(errors="replace").strip().splitlines()[-1:] or [""]
        record.update(error=f"evaluate.py {ended} without metrics.json: {tail[0]}"[:500], failure_kind=None)
        attempts.append(record)
        _keep_progress(progress, identity, attempts)
        log(f"{eval_dir}: attempt {n} (budget {shown}) {ended} without metrics.json; PostTrainBench's ladder goes on")
    if progress:
        Path(progress).unlink(missing_ok=True)
    write_text_atomic(run.out / "attempts" / "exhausted.txt", f"{len(attempts)} attempts, none wrote metrics.json\n")
    return {"ok": False, "metrics": None, "metrics_file": None, "argv": None, "attempts": attempts}


def _run_once(run: _Ladder) -> dict:
    """run_baseline.sh's evaluation: one try, evaluate.py's own budget, its files in ``run.out``."""
    out, eval_dir, log = run.out, run.task.eval_dir, run.log
    out.mkdir(parents=True, exist_ok=True)
    metrics_file = out / "metrics.json"
    argv = run.argv(None, None, metrics_file)
    t0 = time.time()
    rc = _run(argv, run.cwd, run.environ, out / "final_eval.txt", None, stderr=out / "error.log")
    metrics = read_metrics(metrics_file)
    record = {"max_new_tokens": None, "ok": metrics is not None, "seconds": round(time.time() - t0, 2)}
    if metrics is not None:
        log(f"{eval_dir}: {METRIC} = {metrics[METRIC]:.4f} (run_baseline.sh's one try)")
        return {"ok": True, "metrics": metrics, "metrics_file": metrics_file, "argv": argv, "attempts": [record]}
    tail = (out / "error.log").read_text(errors="replace").strip().splitlines()[-1:] or [""]
    record.update(error=f"evaluate.py exited {rc} without metrics.json: {tail[0]}"[:500], failure_kind=None)
    log(f"{eval_dir}: evaluate.py exited {rc} without metrics.json; run_baseline.sh tries once")
    return {"ok": False, "metrics": None, "metrics_file": None, "argv": None, "attempts": [record]}
