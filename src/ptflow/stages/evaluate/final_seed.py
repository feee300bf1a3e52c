"""One evaluation seed of a cell whose eval is PostTrainBench main's seeded final evaluation (a checkout eval with
``CheckoutCall.final``): the seed's cascade (``ptflow.stages.posttrainbench.final_eval``) into the seed's inspect dir,
and its eval.json, as rule evaluate_seed and the train job's evaluation write it. ``ptflow.stages.evaluate.seeds``
then marks it (its stage, the first seed's decoding) and averages the cell's seeds."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from ptflow.specs import EvaluateSpec
from ptflow.stages.evaluate.run import (
    EvalConfigError,
    EvalInputs,
    EvalOutputs,
    EvalRecord,
    ModelUnderTest,
    _now,
    _stderr,
    _write_eval_json,
)
from ptflow.stages.posttrainbench import final_eval
from ptflow.stages.posttrainbench.checkout_eval import METRIC, CheckoutEvalError, LadderCarry


def evaluate_final_seed(
    job: EvaluateSpec, model: ModelUnderTest, outputs: EvalOutputs, inputs: EvalInputs, *, first: bool, log=print
) -> dict:
    """The seed ``job.call.seed`` from ``inputs.start_stage`` (a later seed: the first seed's stage): ``scored``
    with its ``metrics_seed<S>.json`` and ``final_eval_seed<S>_<N>.txt`` logs in the inspect dir, or ``eval_failed``
    when every attempt of its cascade failed. ``first``: the cell's first seed, which probes the model's decoding
    (the checkout's default_temperature.py) for the greedy rule. eval.json's ``posttrainbench`` records the commit,
    the metrics file, the scored attempt's argv, the final-eval script, the stage and the decoding."""
    checkout = json.loads(Path(inputs.checkout).read_text())
    cell, call = job.cell.to_params(), job.call
    out_dir = Path(outputs.inspect_dir)
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    started, t0 = _now(), time.time()
    # the attempts carried over are for this model, call and start stage only
    identity = {"model": model.path, "checkpoint": model.checkpoint, "call": call.to_params(),
                "start_stage": inputs.start_stage}  # fmt: skip
    try:
        out = final_eval.evaluate_seed(
            checkout["path"], call, model.path, out_dir, start=final_eval.SeedStart(inputs.start_stage, first),
            caches=job, carry=LadderCarry(inputs.progress, identity, inputs.deadline), log=log,
        )  # fmt: skip
    except CheckoutEvalError as exc:
        raise EvalConfigError(str(exc)) from None
    seconds = round(time.time() - t0, 3)
    last_budget = out["attempts"][-1]["max_new_tokens"] if out["attempts"] else None
    if not out["ok"]:
        log(f"{cell}: seed {call.seed} failed at every stage of its cascade (PostTrainBench's); eval.json says "
            "eval_failed")  # fmt: skip
        record = EvalRecord("eval_failed", started, seconds, max_new_tokens=last_budget, attempts=out["attempts"])
        return _write_eval_json(outputs.eval_json, cell, call, model, record)
    m = out["metrics"]
    record = EvalRecord(
        "scored",
        started,
        seconds,
        metrics={"name": METRIC, "value": float(m[METRIC]), "stderr": _stderr(m), "n": None},
        scorer="posttrainbench",
        max_new_tokens=last_budget,
        attempts=out["attempts"],
        posttrainbench={
            "commit": checkout["commit"],
            "metrics_file": os.path.relpath(out["metrics_file"], Path(outputs.eval_json).parent),
            "argv": [str(a) for a in out["argv"]],
            "final_eval": call.final["script"],
            "stage": out["stage"],
            **({"decoding": out["decoding"]} if out["decoding"] else {}),
        },
    )
    return _write_eval_json(outputs.eval_json, cell, call, model, record)
