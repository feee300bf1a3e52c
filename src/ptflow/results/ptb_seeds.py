"""A seeded cell's files in PostTrainBench's results layout (``ptflow export --posttrainbench``, module
``ptflow.results.ptb_export``): the metrics.json of main's ``aggregate_seed_metrics.py``, each seed's
``metrics_seed<S>.json`` and main's per-seed logs ``final_eval_seed<S>_<N>.txt``. ``read``: the export's reader of a
JSON file (None where there is none; its one-line error where one cannot be read)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

from ptflow.results.cells import SCORED, Metric, read_metric
from ptflow.stages.evaluate.seeds import SKIPPED

Reader = Callable[[Path], "dict | None"]


def _json_text(data: dict) -> str:
    """As PostTrainBench's scripts write JSON: ``json.dump(..., indent=2)`` and a newline."""
    return json.dumps(data, indent=2) + "\n"


def _seed_metrics(value: float, stderr: float | None) -> dict:
    """One seed's metrics.json as its final-eval script writes it: ``{"accuracy", "stderr"}``."""
    return {"accuracy": value, "stderr": None if stderr is None or math.isnan(stderr) else stderr}


def seeded_metrics(metric: Metric, seeds: dict, cell_dir: Path, read: Reader) -> list[tuple[str, str]]:
    """A seeded cell's metrics.json as ``aggregate_seed_metrics.py`` writes it, and ``metrics_seed<S>.json`` per seed
    that succeeded (module docstring). ``seeds``: the cell eval.json's ``seeds`` (rule seed_mean's record)."""
    per_seed: dict[str, dict] = {}
    attempted = 0
    for seed, entry in seeds["per_seed"].items():
        if entry["status"] == SKIPPED:  # a greedy model's later seeds: run_final_eval.sh does not attempt them
            continue
        attempted += 1
        if entry["status"] != SCORED:  # failed every stage: left out of the mean, and out of per_seed
            continue
        # the seed's own eval.json; the cell's record of it (seed_mean copied it) while that file is deleted to rerun
        own = read(cell_dir / entry["eval_json"])
        if own is not None:
            seed_metric = read_metric(own, str(cell_dir / entry["eval_json"]))
            value, stderr, stage = seed_metric.value, seed_metric.stderr, own["stage"]
        else:
            value, stderr, stage = entry["value"], entry["stderr"], entry["stage"]
        per_seed[str(seed)] = {"max_tokens_stage": int(stage), "metrics": _seed_metrics(value, stderr)}
    # every top-level numeric metric averaged over the seeds that succeeded (the cell's mean): a stderr no seed
    # reported is not a number, so aggregate_seed_metrics.py leaves it out (it stays under per_seed)
    aggregate: dict = {"accuracy": metric.value}
    if not math.isnan(metric.stderr):
        aggregate["stderr"] = metric.stderr
    aggregate |= {"num_seeds": attempted, "num_seeds_succeeded": len(per_seed), "per_seed": per_seed}
    seed_files = [(f"metrics_seed{seed}.json", _json_text(result["metrics"])) for seed, result in per_seed.items()]
    return [("metrics.json", _json_text(aggregate)), *seed_files]


def seed_logs(seeds: dict, cell_dir: Path, read: Reader) -> list[tuple[str, str]]:
    """Main's per-seed logs of a seeded cell, ``final_eval_seed<S>_<N>.txt`` per try N of seed S (run_final_eval.sh
    numbers each seed's tries from 1; ``_9`` is the last of the 4/3/2 cascade), each holding ptflow's record of that
    try (its budget, outcome and error): ptflow keeps an evaluation's output in its own logs, not these files. Seeds
    ptflow skipped get none (the real script does not attempt them); a seed whose own eval.json is gone gets none.
    collect.py (1fc55616) reads none of them: its ``*final_eval_9.txt`` glob, which silences its warning for a run
    without metrics.json, matches the older one-shot names, not these."""
    out = []
    for seed, entry in seeds["per_seed"].items():
        if entry["status"] == SKIPPED:
            continue
        own = read(cell_dir / entry["eval_json"]) or {}
        for n, attempt in enumerate(own.get("attempts") or [], start=1):
            said = "succeeded" if attempt.get("ok") else f"failed: {attempt.get('error', 'no result')}"
            text = f"ptflow's record of seed {seed}, try {n}: max_new_tokens {attempt.get('max_new_tokens')}, {said}\n"
            out.append((f"final_eval_seed{seed}_{n}.txt", text))
    return out
