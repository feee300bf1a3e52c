"""One seed of PostTrainBench main's seeded final evaluation, as the checkout's ``src/eval/run_final_eval.sh`` runs it.

ptflow runs each seed as an evaluation seed of its own (rule ``evaluate_seed``; ``ptflow.stages.evaluate.seeds``
decides which seeds run and averages them), and each seed here as run_final_eval.sh's ``run_seed_evaluation``:

- the cascade: stage 0 with the final-eval script's own default max-tokens, then the lower stages, with the
  per-stage arguments the checkout's script gives for the task (STAGE_MAX_TOKENS_ARGS, read by
  ``ptflow.config.posttrainbench.final_eval``), 4/3/2 attempts per stage (STAGE_MAX_RETRIES); a later seed starts at
  the stage where the first one succeeded (``start_stage``); any attempt that leaves no metrics file steps on;
- each attempt: ``python <final-eval script> --model-path <model> --templates-dir ../../../../src/eval/templates
  --limit -1 --seed <S> [<stage args>] --json-output-file <out>/metrics_seed<S>.json`` in the task's dir, its stdout
  in ``<out>/final_eval_seed<S>_<N>.txt`` (N counts this seed's attempts from 1), in its own process group under
  run_final_eval.sh's deadline (28,800 s) or the job's end, the group stopped whole afterwards
  (``ptflow.stages.posttrainbench.checkout_eval``'s attempt runner);
- the greedy rule's probe, for the cell's first seed: ``python src/utils/default_temperature.py <model>
  --output-file <out>/default_temperature.txt`` in the checkout's root (its log in
  ``default_temperature_log.txt``); ``greedy`` or ``sampling``, or None where it fails (run_final_eval.sh then
  evaluates every seed, with a warning).

- humaneval's answer sandbox around each attempt (``ptflow.stages.posttrainbench.answer_sandbox``): the checkout's
  with_answer_sandbox_local.sh before the attempt's command line, or, on an apptainer site, its
  with_answer_sandbox.sh around the job's start in the evaluation image.

What differs from run_final_eval.sh: no apptainer, HF overlay, nvidia-smi kill or ``sleep 5`` around an attempt (the
job runs in the site's evaluation runtime, with the job's HF view; the process group goes with each attempt).
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ptflow.config import posttrainbench as ptb
from ptflow.specs import CheckoutCall
from ptflow.stages.posttrainbench import answer_sandbox
from ptflow.stages.posttrainbench import checkout_eval as one_shot
from ptflow.stages.posttrainbench.checkout_eval import CheckoutEvalError, LadderCarry, OutOfJobTime

TEMPLATES_ARG = "../../../../src/eval/templates"  # run_final_eval.sh's, relative to the task's dir
PROBE_TIMEOUT_S = 600


def cascade(stages, start_stage: int = 0) -> list[tuple[int, str]]:
    """(stage, max-tokens args) of every attempt, from ``start_stage``: 4/3/2 per stage, as STAGE_MAX_RETRIES."""
    return [(st, args) for st, (args, tries) in enumerate(zip(stages, ptb.FINAL_EVAL_TRIES, strict=False))
            if st >= start_stage for _ in range(tries)]  # fmt: skip


def budget_of(args: str) -> int | None:
    """The max-tokens number of a stage's arguments (None: the script's own default)."""
    words = shlex.split(args)
    return int(words[-1]) if words and words[-1].isdigit() else None


def attempt_argv(call: CheckoutCall, model_path, stage_args: str, metrics) -> list[str]:
    return [
        sys.executable, call.final["script"], "--model-path", str(model_path), "--templates-dir", TEMPLATES_ARG,
        "--limit", str(call.limit if call.limit else -1), "--seed", str(call.seed), *shlex.split(stage_args),
        "--json-output-file", str(metrics),
    ]  # fmt: skip


def environment(call: CheckoutCall, env: dict | None, hf_home=None, evals_cache=None) -> dict:
    """The attempt's environment: the job's, as the one-shot evaluation's (its grader key only, offline switches),
    with the caches' absolute paths."""
    environ = dict(os.environ if env is None else env)
    missing = [k for k in call.keys if not environ.get(k)]
    if missing:
        raise CheckoutEvalError(f"{call.files.eval_dir}: its {call.final['script']} needs {', '.join(missing)} in "
                                "the environment")  # fmt: skip
    environ = one_shot.eval_environment(environ, call.keys)
    if hf_home:
        environ["HF_HOME"] = str(Path(hf_home).resolve())
    if evals_cache:
        environ["INSPECT_EVALS_CACHE_DIR"] = str(Path(evals_cache).resolve())
    return environ


def decoding(checkout: Path, model_path: Path, out: Path, environ: dict, log=print) -> str | None:
    """The checkout's default_temperature.py on the model: ``greedy`` or ``sampling``; None (all seeds, as
    run_final_eval.sh's warning says) where it fails or answers otherwise."""
    result = out / "default_temperature.txt"
    argv = [sys.executable, ptb.DEFAULT_TEMPERATURE, str(model_path), "--output-file", str(result)]
    rc = one_shot._run(argv, checkout, environ, out / "default_temperature_log.txt", PROBE_TIMEOUT_S)
    words = result.read_text().split() if rc == 0 and result.is_file() else []
    if words[:1] in (["greedy"], ["sampling"]):
        log(f"vLLM's default temperature for this model: {' '.join(words[1:2])} ({words[0]})")
        return words[0]
    log(f"WARNING: could not read vLLM's default temperature for {model_path} (see "
        f"{out / 'default_temperature_log.txt'}); evaluating with all seeds")  # fmt: skip
    return None


@dataclass(frozen=True)
class SeedStart:
    """Where a seed starts: its cascade's stage (a later seed: the first seed's), and whether it is the cell's first
    seed (which probes the model's decoding for the greedy rule)."""

    stage: int = 0
    first: bool = True


def evaluate_seed(
    checkout: str | Path,
    call: CheckoutCall,
    model_path: str | Path,
    out_dir: str | Path,
    *,
    start: SeedStart | None = None,
    caches=None,
    carry: LadderCarry | None = None,
    log=print,
) -> dict:
    """Run one seed's cascade into ``out_dir``; returns ``{"ok", "metrics", "metrics_file", "argv", "attempts",
    "stage", "decoding"}`` (ok False: every attempt failed; ``decoding`` probed for the first seed only).
    ``caches``: the HF cache and inspect_evals' cache (``hf_home``, ``evals_cache``) its script reads.
    CheckoutEvalError where it cannot start (no script, no model, a missing key); OutOfJobTime (progress kept in
    ``carry.progress``) where the job ends first."""
    checkout, start, carry = Path(checkout), start or SeedStart(), carry or LadderCarry()
    eval_dir, seed = call.files.eval_dir, call.seed
    cwd = checkout / ptb.EVAL_DIR.format(eval=eval_dir)
    if not (cwd / call.final["script"]).is_file():
        raise CheckoutEvalError(f"the PostTrainBench checkout {checkout} has no {ptb.EVAL_DIR.format(eval=eval_dir)}/"
                                f"{call.final['script']}")  # fmt: skip
    if not Path(model_path, "config.json").is_file():
        raise CheckoutEvalError(f"model {model_path}: no config.json there; point it at an HF model directory")
    environ = environment(call, None, *((caches.hf_home, caches.evals_cache) if caches else ()))
    try:  # humaneval's: the model's code runs in its answer sandbox, never in the evaluation's process
        sandbox = answer_sandbox.attempt_prefix(checkout, call, answer_sandbox.runtime_kind_of(caches), environ)
    except ValueError as exc:
        raise CheckoutEvalError(str(exc)) from None
    model, out = Path(model_path).resolve(), Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    decided = decoding(checkout, model, out, environ, log) if start.first else None
    start_stage = start.stage
    metrics_file = out / f"metrics_seed{seed}.json"
    attempts = one_shot._progress(carry.progress, carry.identity)
    if attempts:
        log(f"{eval_dir} seed {seed}: {len(attempts)} attempts were made by an earlier job; going on at the next")
    log(f"=== Seed {seed}: evaluating from stage {start_stage} ===")
    for n, (stage, args) in enumerate(cascade(call.final["stages"], start_stage), start=1):
        if n <= len(attempts):
            continue
        timeout = one_shot.ATTEMPT_TIMEOUT_S
        if carry.deadline is not None:
            left = carry.deadline - time.time()
            if left < one_shot.MIN_TRY_S:
                one_shot._keep_progress(carry.progress, carry.identity, attempts)
                raise OutOfJobTime(f"{eval_dir} seed {seed}: {max(int(left), 0)} s of this job left before attempt "
                                   f"{n}; the job's retry makes it")  # fmt: skip
            timeout = min(timeout, left)
        argv = [*sandbox, *attempt_argv(call, model, args, metrics_file)]
        log_file = out / f"final_eval_seed{seed}_{n}.txt"
        t0 = time.time()
        rc = one_shot._run(argv, cwd, environ, log_file, timeout)
        metrics = one_shot.read_metrics(metrics_file)
        record = {"max_new_tokens": budget_of(args), "stage": stage, "ok": metrics is not None,
                  "seconds": round(time.time() - t0, 2)}  # fmt: skip
        if metrics is not None:
            attempts.append(record)
            if carry.progress:
                Path(carry.progress).unlink(missing_ok=True)
            log(f"Seed {seed}: succeeded at stage {stage} ({one_shot.METRIC} = {metrics[one_shot.METRIC]:.4f}, "
                f"attempt {n})")  # fmt: skip
            return {"ok": True, "metrics": metrics, "metrics_file": metrics_file, "argv": argv,
                    "attempts": attempts, "stage": stage, "decoding": decided}  # fmt: skip
        if rc is None and timeout < one_shot.ATTEMPT_TIMEOUT_S:  # stopped by the job's end
            one_shot._keep_progress(carry.progress, carry.identity, attempts)
            raise OutOfJobTime(f"{eval_dir} seed {seed}: attempt {n} reached this job's end after "
                               f"{record['seconds']:.0f} s; the job's retry makes it again")  # fmt: skip
        ended = "passed its deadline" if rc is None else f"exited {rc}"
        record.update(error=f"{call.final['script']} {ended} without metrics_seed{seed}.json"[:500], failure_kind=None)
        attempts.append(record)
        one_shot._keep_progress(carry.progress, carry.identity, attempts)
        log(f"Seed {seed}: attempt {n} wrote no metrics ({ended})")
    if carry.progress:
        Path(carry.progress).unlink(missing_ok=True)
    log(f"Seed {seed}: failed at every stage")
    return {"ok": False, "metrics": None, "metrics_file": None, "argv": None, "attempts": attempts, "stage": None,
            "decoding": decided}  # fmt: skip
