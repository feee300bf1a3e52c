"""A cell's evaluation as jobs run it: rule evaluate's job (:func:`evaluate_job`), and an agent cell's train job,
which evaluates in its own allocation once the agent has ended (:func:`evaluate_in_train_job`; staging and adoption:
``ptflow.stages.evaluate.in_train_job``).

The train job gets the cell's :class:`EvaluateSpec` from its rule, as the evaluate job's params (rule train's
``evaluation``, built by ``ptflow.jobs.build.Jobs.evaluation_in_train_job``), so the evaluation it makes is the one
the evaluate job would make; the evaluate job adopts it only for equal params. It runs in the evaluate stage's
runtime (its image, its HF view) as a child with a deadline before the job's end, so the train job, whose output is
already written, always ends in time.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

from ptflow.cluster import hfcache
from ptflow.cluster.runtime import inside_runtime, reexec_in_runtime, run_in_runtime
from ptflow.specs import EvaluateSpec
from ptflow.stages.checkpoint import verify_checkpoint
from ptflow.stages.evaluate import in_train_job
from ptflow.stages.evaluate.run import (
    EvalInputs,
    EvalOutputs,
    ModelUnderTest,
    evaluate_cell,
    evaluate_checkout_cell,
    no_model_eval,
)
from ptflow.stages.posttrainbench.checkout_eval import PROGRESS_FILE

# Seconds the train job keeps after its evaluation for leaving the allocation (Slurm's KillWait is 30 s by default,
# and the job's own epilogue and file syncs come after): the evaluation is stopped that long before the job's end.
END_MARGIN_S = 180
# An allocation with less time left than this does not start an evaluation: the evaluate job makes it.
MIN_EVALUATION_S = 300


def evaluate_job(job: EvaluateSpec, inputs: EvalInputs, outputs: EvalOutputs, log=print) -> None:
    """Rule evaluate's job: the train job's staged evaluation adopted when it is this job's
    (``ptflow.stages.evaluate.in_train_job``), else the cell evaluated here, in the stage's runtime. A checkout
    eval's ladder goes on where an earlier job stopped (:func:`ladder_progress`), up to this job's deadline."""
    why_not = in_train_job.why_not_adoptable(outputs.eval_json, job.to_params(), inputs.manifest)
    if why_not is None:
        in_train_job.adopt(outputs.eval_json, outputs.inspect_dir, log=log)
        return
    if inputs.manifest:
        log(f"evaluating in this job: {why_not}")
    deadline = job_deadline(os.environ.get("SLURM_JOB_ID"))  # asked here, on the host: the runtime may lack scontrol
    # container or site venv (returns at once on the local default), with a view of the HF cache holding the model
    # repos the evaluation reads: the base or instruct model; none for a trained model (on scratch)
    reexec_in_runtime(job.runtime, log, hf_models=[] if inputs.manifest else [job.evaluated_model_id])
    inputs = replace(inputs, progress=str(ladder_progress(outputs.eval_json)), deadline=deadline)
    run_evaluation(job, inputs, outputs, log=log)


def evaluate_seed_job(
    job: EvaluateSpec,
    inputs: EvalInputs,
    outputs: EvalOutputs,
    *,
    first_seed: str | None,
    seed_changes_data: bool,
    log=print,
) -> None:
    """Rule evaluate_seed's job: one evaluation seed of a seeded eval's cell (``ptflow.stages.evaluate.seeds``). A
    later seed (``first_seed``: the first seed's file) is skipped where the first failed, or decoded greedily a seed
    that only drives sampling; else the train job's evaluation of the seed is adopted where it made one, or the seed
    is evaluated here from the first seed's ladder stage."""
    from ptflow.files import write_json_atomic
    from ptflow.stages.evaluate import seeds

    first = json.loads(Path(first_seed).read_text()) if first_seed else None
    why = seeds.why_skipped(first, seed_changes_data)
    if why:
        Path(outputs.inspect_dir).mkdir(parents=True, exist_ok=True)
        write_json_atomic(outputs.eval_json, seeds.skip_record(job, job.call.seed, why))
        shutil.rmtree(in_train_job.staged_dir(outputs.eval_json), ignore_errors=True)
        log(f"seed {job.call.seed} skipped: {why}")
        return
    why_not = in_train_job.why_not_adoptable(outputs.eval_json, job.to_params(), inputs.manifest)
    if why_not is None:  # the train job evaluated this seed in its allocation
        in_train_job.adopt(outputs.eval_json, outputs.inspect_dir, log=log)
        return
    if inputs.manifest:
        log(f"seed {job.call.seed}: evaluating in this job: {why_not}")
    deadline = job_deadline(os.environ.get("SLURM_JOB_ID"))
    reexec_in_runtime(job.runtime, log, hf_models=[] if inputs.manifest else [job.evaluated_model_id],
                      wrap=sandbox_wrap(job, inputs.checkout))  # fmt: skip
    inputs = replace(
        seeds.seed_inputs(inputs, first), deadline=deadline, progress=str(ladder_progress(outputs.eval_json))
    )
    if first:
        log(f"seed {job.call.seed}: from the first seed's ladder stage {inputs.start_stage}")
    run_evaluation(job, inputs, outputs, log=log, first_seed=first is None)
    seeds.mark_seed(outputs.eval_json, job.call, first=first is None)


def sandbox_wrap(job: EvaluateSpec, checkout_marker: str | None) -> list[str]:
    """humaneval's answer sandbox around the job's re-start into an apptainer site's image (the checkout's
    with_answer_sandbox.sh); [] for other evals and sites (``ptflow.stages.posttrainbench.answer_sandbox``)."""
    from ptflow.stages.posttrainbench import answer_sandbox

    if not checkout_marker or not answer_sandbox.kinds(job.call):
        return []
    checkout = json.loads(Path(checkout_marker).read_text())["path"]
    return answer_sandbox.runtime_wrap(checkout, job.call, job.runtime)


def run_evaluation(
    job: EvaluateSpec, inputs: EvalInputs, outputs: EvalOutputs, log=print, first_seed: bool = True
) -> dict:
    """Evaluate one cell into ``outputs``: its trained model (``inputs.manifest``), else the base or instruct model
    from the HF cache; a cli-agent cell that left no model gets status no_model. A checkout eval's ladder keeps its
    tries in ``inputs.progress`` and stops at ``inputs.deadline`` (epoch seconds) for the next job to go on. A seed
    of PostTrainBench main's seeded final evaluation runs its cascade (``first_seed``: the cell's first seed, which
    probes the model's decoding)."""
    # Inside the site's runtime HF_HOME is the job's private view of the shared cache (ptflow.cluster.runtime).
    if inside_runtime() and os.environ.get("HF_HOME"):
        job = replace(job, hf_home=os.environ["HF_HOME"])
    man = json.loads(Path(inputs.manifest).read_text()) if inputs.manifest else None
    if man is not None and man.get("final_model") is False:  # the agent left no model: say so
        return no_model_eval(job, man, outputs, log=log)
    model = _model_under_test(job, man)
    if inputs.checkout and getattr(job.call, "final", None) is not None:  # a seed of main's final evaluation
        from ptflow.stages.evaluate.final_seed import evaluate_final_seed

        return evaluate_final_seed(job, model, outputs, inputs, first=first_seed, log=log)
    if inputs.checkout:  # an eval of the PostTrainBench checkout
        return evaluate_checkout_cell(job, model, outputs, inputs, log=log)
    return evaluate_cell(job, model, outputs, inputs, log=log)


def _model_under_test(job: EvaluateSpec, man: dict | None) -> ModelUnderTest:
    """The cell's trained model (its manifest), else the base model or (agents of kind instruct) its instruct
    counterpart, from the HF cache at ``job.hf_home``."""
    if man is not None:
        path = str(verify_checkpoint(man))
        checkpoint = {"path": path, "kind": "trained", "commit_or_hash": man["config_hash"], "step": man["step"]}
        return ModelUnderTest(path, checkpoint, man["train_seconds"], man.get("agent_run"))
    evaluated = job.evaluated_model or {"id": job.cell.model, "revision": job.model_revision}
    snap = hfcache.snapshot_path(job.hf_home, evaluated["id"], "model", evaluated["revision"])
    kind = "instruct" if job.evaluated_model else "base"
    return ModelUnderTest(str(snap), {"path": str(snap), "kind": kind, "commit_or_hash": snap.name, "step": None})


def ladder_progress(eval_json: str | Path) -> Path:
    """Where a cell's evaluation ladder keeps its tries between jobs (beside eval.json, not a rule output)."""
    return Path(eval_json).parent / PROGRESS_FILE


DEADLINE_ENV = "PTFLOW_EVAL_DEADLINE"  # read on the host, handed to the job's runtime (which may have no scontrol)


def job_deadline(job_id: str | None) -> float | None:
    """The epoch second by which an evaluation in this job must have stopped (END_MARGIN_S before its end), and
    the same in ``DEADLINE_ENV`` for this job's re-start in its runtime."""
    if os.environ.get(DEADLINE_ENV):
        return float(os.environ[DEADLINE_ENV])
    left = seconds_left(job_id)
    if left is None:
        return None
    os.environ[DEADLINE_ENV] = str(time.time() + left - END_MARGIN_S)
    return float(os.environ[DEADLINE_ENV])


def seconds_left(job_id: str | None) -> float | None:
    """The allocation's time left (scontrol's EndTime), None outside a Slurm job or without a time limit."""
    if not job_id:
        return None
    from ptflow.cluster import slurm

    try:
        end = slurm.job_end_time(job_id)
    except slurm.SlurmUnavailable:
        return None
    return None if end is None else end - time.time()


def evaluate_in_train_job(
    job: EvaluateSpec,
    *,
    eval_json: str,
    manifest: str,
    checkout: str | None = None,
    test_parquet: str | None = None,
    threads: int | None = None,
    first_seed: dict | None = None,
    log=print,
) -> bool:
    """After the agent: this cell's evaluation in the train job's allocation, staged for the evaluate job; False
    (and the evaluate job evaluates by itself) where it cannot run here or did not finish in time. An evaluation
    seed (``job.call.seed``) is marked as its evaluate_seed job marks it; a later one (``first_seed``: the first
    seed's staged eval.json) starts at the first seed's ladder stage."""
    left = seconds_left(os.environ.get("SLURM_JOB_ID"))
    timeout = None if left is None else left - END_MARGIN_S
    if timeout is not None and timeout < MIN_EVALUATION_S:
        log(f"no evaluation in this allocation: {int(left)} s left; the evaluate job evaluates")
        return False
    image = job.runtime.image if job.runtime else None
    if image and not Path(image).exists():
        log(f"no evaluation in this allocation: the evaluation's image {image} is not built yet")
        return False
    params = job.to_params()
    # the ladder stops a minute before this job kills the child, keeping its tries for the evaluate job
    deadline = None if timeout is None else time.time() + timeout - 60
    inputs = EvalInputs(manifest, checkout, test_parquet, threads, str(ladder_progress(eval_json)), deadline)
    if job.call.seed is not None:
        from ptflow.stages.evaluate import seeds

        inputs = seeds.seed_inputs(inputs, first_seed)

    def evaluate(staged_json: Path, staged_inspect: Path) -> bool:
        request = staged_json.parent / "request.json"
        outputs = EvalOutputs(str(staged_json), str(staged_inspect))
        request.write_text(json.dumps({"job": params, **asdict(inputs), **asdict(outputs),
                                       "first_seed": first_seed is None}))  # fmt: skip
        script = staged_json.parent / "evaluate.py"
        script.write_text(f"from ptflow.stages.evaluate.job import main\nmain({str(request)!r})\n")
        log(
            f"evaluating in the train job's allocation (deadline: {'none' if timeout is None else f'{int(timeout)} s'})"
        )
        started = time.monotonic()
        # the trained model is on scratch: the HF view holds the evaluation's datasets, no model repo
        rc = run_in_runtime(job.runtime, str(script), log=log, timeout=timeout, hf_models=[],
                            wrap=sandbox_wrap(job, checkout))  # fmt: skip
        log(f"evaluation in the train job's allocation ended with exit {rc} after {time.monotonic() - started:.0f} s")
        if rc == 0 and job.call.seed is not None and staged_json.is_file():
            from ptflow.stages.evaluate import seeds

            seeds.mark_seed(staged_json, job.call, first=first_seed is None)
        return rc == 0

    return in_train_job.stage_evaluation(eval_json, params, manifest, evaluate, log=log)


def evaluate_after_agent(evaluation: dict, *, manifest: str, log=print, **inputs) -> None:
    """A train job's evaluation of its cell after the agent (rule train's param ``evaluation``:
    ``ptflow.jobs.build.Jobs.evaluation_in_train_job``), staged for the evaluate job, or a seeded eval's seeds in
    turn, each staged for its evaluate_seed job, as PostTrainBench's final evaluation runs them in its job. A later
    seed is evaluated here only after a first seed that scored here: where the first's result skips the others
    (``ptflow.stages.evaluate.seeds.why_skipped``), their jobs record that in seconds; where the first was not
    made here, its job evaluates it and the later seeds' jobs go on from its result."""
    if "seeds" not in evaluation:
        job = EvaluateSpec.from_params(evaluation["job"])
        evaluate_in_train_job(job, eval_json=evaluation["eval_json"], manifest=manifest, log=log, **inputs)
        return
    from ptflow.stages.evaluate import seeds

    first = None
    for i, seed in enumerate(evaluation["seeds"]):
        job = EvaluateSpec.from_params(seed["job"])
        if i and (first is None or first.get("status") != "scored"):
            log(f"seed {job.call.seed} and later: not evaluated here (the first seed was not scored here)")
            return
        if i and seeds.why_skipped(first, evaluation["seed_changes_data"]):
            log(f"seed {job.call.seed} and later: {seeds.why_skipped(first, evaluation['seed_changes_data'])}")
            return
        staged = evaluate_in_train_job(
            job, eval_json=seed["eval_json"], manifest=manifest, first_seed=first, log=log, **inputs
        )
        if i == 0 and staged:
            first = json.loads((in_train_job.staged_dir(seed["eval_json"]) / "eval.json").read_text())


def main(request_path: str) -> None:
    """The evaluation child of :func:`evaluate_in_train_job` (in the evaluate stage's runtime); it writes to the
    train job's log through the fds it inherits (masked there)."""

    def log(msg: str) -> None:
        print(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] evaluation: {msg}", flush=True)

    req = json.loads(Path(request_path).read_text())
    inputs = EvalInputs(**{k: req[k] for k in EvalInputs.__dataclass_fields__})
    outputs = EvalOutputs(req["eval_json"], req["inspect_dir"])
    run_evaluation(
        EvaluateSpec.from_params(req["job"]), inputs, outputs, log=log, first_seed=req.get("first_seed", True)
    )
    sys.exit(0)
