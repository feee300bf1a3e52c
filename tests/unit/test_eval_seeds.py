"""The decisions of evaluation seeds (ptflow.stages.evaluate.seeds) that the Slurm run does not reach: a greedy
model's later seeds skipped unless the seed changes the data, the decoding read as each provider reads it, and the
cell's mean when the first seed failed (tests/slurm/test_repeats_and_seeds_on_slurm.py runs the rest)."""

from __future__ import annotations

import json

import pytest

from ptflow.config.entries import eval_from_entry
from ptflow.specs import CellRef, EvaluateSpec
from ptflow.stages.evaluate.seeds import decoding_of, seed_mean, skip_record, why_skipped
from ptflow.stages.evaluate.settings import Provider, build_call

ENTRY = {"id": "gsm8k", "task": "inspect_evals/gsm8k", "max_new_tokens": 64}


def call(provider: Provider | None = None, **entry):
    return build_call(eval_from_entry({**ENTRY, **entry}), provider or Provider(), seed=11)


@pytest.mark.parametrize(
    ("sampling", "provider", "generation_config", "expected"),
    [
        ("greedy", "hf", {"do_sample": True}, "greedy"),  # the eval's own sampling decides
        ({"temperature": 0.7}, "hf", {}, "sampling"),
        (None, "hf", {}, "greedy"),  # transformers: do_sample off unless the model sets it
        (None, "hf", {"do_sample": True}, "sampling"),
        (None, "vllm", {}, "sampling"),  # vLLM: temperature 1.0 without one
        (None, "vllm", {"temperature": 0.0}, "greedy"),
    ],
)
def test_the_decoding_is_the_providers(tmp_path, sampling, provider, generation_config, expected):
    (tmp_path / "generation_config.json").write_text(json.dumps(generation_config))
    c = call(Provider(kind=provider), **({"sampling": sampling} if sampling else {}))
    assert decoding_of(c, tmp_path) == expected


def test_a_later_seed_is_skipped_where_the_first_failed_or_a_greedy_model_has_nothing_to_vary():
    scored = {"seed": 11, "status": "scored", "decoding": "sampling"}
    assert why_skipped(None, False) is None and why_skipped(scored, False) is None
    assert "ended eval_failed" in why_skipped({**scored, "status": "eval_failed"}, True)
    greedy = {**scored, "decoding": "greedy"}
    assert "decoded greedily" in why_skipped(greedy, False)
    assert why_skipped(greedy, True) is None  # gpqamain: the seed shuffles the choices


def test_a_cell_whose_first_seed_failed_counts_as_its_first_seed_with_the_count(tmp_path):
    spec = EvaluateSpec(CellRef("org/m", "org--m", "gsm8k", "sft"), call(), "main", "h", "e")
    first = {"schema_version": 2, **spec.cell.to_params(), "seed": 11, "status": "eval_failed", "metrics": None,
             "scorer": None, "task": "inspect_evals/gsm8k", "inspect_log": None, "max_new_tokens": 64, "attempts": [],
             "checkpoint": {"path": "/m", "kind": "base", "commit_or_hash": "c", "step": None},
             "timings": {"started": "t0", "finished": "t1", "eval_seconds": 1.0, "train_seconds": None},
             "host": "h", "slurm_job_id": None, "software": {"python": "3.11"}}  # fmt: skip
    files = []
    for seed, data in ((11, first), (22, skip_record(spec, 22, why_skipped(first, False)))):
        path = tmp_path / "seeds" / str(seed) / "eval.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(data))
        files.append(path)
    out = seed_mean(files, tmp_path / "eval.json")
    assert out["status"] == "eval_failed" and out["metrics"] is None
    assert (out["seeds"]["num_seeds"], out["seeds"]["num_seeds_succeeded"]) == (2, 0)
    assert out["seeds"]["per_seed"]["22"]["status"] == "skipped"
