"""Evaluation seeds: a seeded eval's cell evaluated once per seed, each seed its own file target, and the cell's
eval.json the mean over the seeds that succeeded (``matrix.seeds`` / ``evals[].seeds``).

PostTrainBench's final evaluation (``src/eval/run_final_eval.sh`` of its newer main line) runs these rules, and so
does ptflow, one Snakemake job per seed (rule ``evaluate_seed``) and one for the mean (rule ``seed_mean``):

- each seed goes through the 4/3/2-try max-tokens ladder; a later seed starts at the stage where the first one
  succeeded, so every seed shares its budget;
- if the first seed fails every stage, the other seeds are skipped and the cell counts as its base model (eval.json
  ``eval_failed``); a later seed that fails every stage is left out of the mean;
- a model decoded greedily gets the first seed only, since a seed that only drives sampling changes nothing, unless
  the eval's seed changes its samples (``seed_changes_data``: gpqamain's choice shuffling);
- every sample's generation gets its own seed derived from the evaluation's seed (the kit's ``sample_seed``).

``seeds/<seed>/eval.json`` is an eval.json of its own (with ``seed``, ``stage`` and ``decoding``), or a record
``{"status": "skipped", "why": ...}``; the cell's eval.json keeps the mean of the metric's value and stderr with
``seeds: {num_seeds, num_seeds_succeeded, per_seed}``, as PostTrainBench's ``aggregate_seed_metrics.py`` writes
metrics.json. Deleting one seed's file evaluates that seed again, alone.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

from ptflow.files import write_json_atomic
from ptflow.specs import CheckoutCall, EvalCall, EvaluateSpec
from ptflow.stages.evaluate.run import EVAL_JSON_VERSION, EvalInputs, ladder_stage, validate_eval_json

SKIPPED = "skipped"
# vLLM's temperature for a request that sets none, where the model's generation config sets none either
VLLM_DEFAULT_TEMPERATURE = 1.0


def decoding_of(call: EvalCall, model_path: str | Path) -> str:
    """``greedy`` or ``sampling``: how the provider decodes this model under the call. The eval's own sampling
    decides where it sets one; otherwise the model's generation config as the provider reads it: vLLM takes its
    temperature (1.0 without one), transformers its do_sample (off without one)."""
    sampling = call.sampling or {}
    if sampling.get("greedy") or sampling.get("temperature") == 0:
        return "greedy"
    if sampling.get("temperature") is not None:
        return "sampling"
    path = Path(model_path) / "generation_config.json"
    config = json.loads(path.read_text()) if path.is_file() else {}
    if call.provider == "vllm":
        temperature = config.get("temperature", VLLM_DEFAULT_TEMPERATURE)
        return "greedy" if temperature is not None and float(temperature) < 1e-5 else "sampling"
    return "sampling" if config.get("do_sample") else "greedy"


def why_skipped(first: dict | None, seed_changes_data: bool) -> str | None:
    """Why a later seed is not evaluated, from the first seed's file (None: it is evaluated)."""
    if first is None:
        return None
    if first.get("status") != "scored":
        return f"the first seed ({first.get('seed')}) ended {first.get('status')}: the cell counts as its base model"
    if first.get("decoding") == "greedy" and not seed_changes_data:
        return "the model is decoded greedily and this eval's seed only drives sampling: its first seed is its score"
    return None


def skip_record(job: EvaluateSpec, seed: int, why: str) -> dict:
    return {"schema_version": EVAL_JSON_VERSION, **job.cell.to_params(), "seed": seed, "status": SKIPPED, "why": why,
            "host": socket.gethostname()}  # fmt: skip


def mark_seed(eval_json: str | Path, call: EvalCall | CheckoutCall, first: bool) -> dict:
    """The seed's eval.json with its seed, the ladder stage that produced it and (the first seed) the decoding the
    later seeds follow. A seed of PostTrainBench main's final evaluation (a checkout call) recorded both itself: its
    cascade's stage, and the decoding the checkout's default_temperature.py gave (none where it failed: every seed
    is evaluated, as run_final_eval.sh's warning says)."""
    data = json.loads(Path(eval_json).read_text())
    data["seed"] = call.seed
    if data["status"] == "scored" and isinstance(call, CheckoutCall):
        data["stage"] = data["posttrainbench"]["stage"]
        if first and data["posttrainbench"].get("decoding"):
            data["decoding"] = data["posttrainbench"]["decoding"]
    elif data["status"] == "scored":
        data["stage"] = ladder_stage(call, data["max_new_tokens"])
        if first:
            data["decoding"] = decoding_of(call, data["checkpoint"]["path"])
    validate_eval_json(data)
    write_json_atomic(eval_json, data)
    return data


def seed_inputs(inputs: EvalInputs, first: dict | None) -> EvalInputs:
    """A later seed starts at the first seed's stage."""
    from dataclasses import replace

    return replace(inputs, start_stage=int(first["stage"])) if first else inputs


def seed_mean(seed_jsons: list[str | Path], eval_json: str | Path) -> dict:
    """The cell's eval.json from its seeds' files (the first listed is the first seed): the mean of the metric over
    the seeds that succeeded, the count and each seed's values; the first seed's status where it did not succeed."""
    seeds = [json.loads(Path(p).read_text()) for p in seed_jsons]
    first = seeds[0]
    scored = [s for s in seeds if s["status"] == "scored"]
    per_seed = {
        str(s["seed"]): {
            "status": s["status"],
            **(
                {"stage": s["stage"], "value": s["metrics"]["value"], "stderr": s["metrics"]["stderr"]}
                if s["status"] == "scored"
                else {}
            ),  # fmt: skip
            **({"why": s["why"]} if s["status"] == SKIPPED else {}),
            "eval_json": str(Path(seed_jsons[i]).relative_to(Path(eval_json).parent)),
        }
        for i, s in enumerate(seeds)
    }
    data = {k: v for k, v in first.items() if k not in ("seed", "stage", "decoding")}
    if first["status"] == "scored":
        stderrs = [s["metrics"]["stderr"] for s in scored]
        data["metrics"] = {
            **first["metrics"],
            "value": sum(s["metrics"]["value"] for s in scored) / len(scored),
            "stderr": None if None in stderrs else sum(stderrs) / len(stderrs),
        }
        # the inspect log of the first seed stays the cell's (each seed's is in its own eval.json)
        first_dir = Path(seed_jsons[0]).parent.relative_to(Path(eval_json).parent)
        if first.get("inspect_log"):
            data["inspect_log"] = str(first_dir / first["inspect_log"])
        if first.get("posttrainbench"):  # a checkout's final evaluation: the first seed's metrics file, from here
            ptb = first["posttrainbench"]
            data["posttrainbench"] = {**ptb, "metrics_file": str(first_dir / ptb["metrics_file"])}
    data["seeds"] = {"num_seeds": len(seeds), "num_seeds_succeeded": len(scored), "per_seed": per_seed,
                     "decoding": first.get("decoding")}  # fmt: skip
    validate_eval_json(data)
    write_json_atomic(eval_json, data)
    return data
