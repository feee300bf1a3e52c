"""PostTrainBench main's seeded final evaluation as the config and the jobs see it (``ptflow.config.posttrainbench.
final_eval``, ``ptflow.config.load``, ``ptflow.jobs.build``): what the checkout's run_final_eval.sh says of each task
(asked in a throwaway copy at the commit), the checkout deciding a checkout eval's seeds, the grader keys choosing the
final-eval script as ``--check`` chooses, and each seed's call (its params: the seed, the script, the stage
arguments, main's three scripts among the checkout files it reads)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ptflow.config import posttrainbench as ptb
from ptflow.config.load import resolve
from ptflow.config.matrix import build_config
from ptflow.config.validate import ConfigError
from ptflow.specs import CheckoutCall
from tests.conftest import REPO
from tests.support.ptb_checkout import make_fixture_checkout
from tests.support.ptb_main import FINAL_EVAL_SEEDS, commit_main_evaluation

EVALS = ("gsm8k", "gpqamain", "arenahardwriting")


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("ptb") / "PostTrainBench"
    make_fixture_checkout(root, evals=EVALS, agents=("codex",))
    return root, commit_main_evaluation(root, evals=EVALS)


def _raw(default_raw: dict, root: Path, commit: str, seeds=None) -> dict:
    default_raw["posttrainbench"] = {"commit": commit, "path": str(root)}
    default_raw["evals"] = [{"id": e, "task": f"posttrainbench/{e}", **({"keys": ["OPENAI_API_KEY"]}
                            if e == "arenahardwriting" else {})} for e in EVALS]  # fmt: skip
    default_raw["agents"] = [{"id": "baseline", "kind": "baseline"}]
    default_raw["matrix"] = {**default_raw["matrix"], "evals": list(EVALS), "agents": ["baseline"],
                             **({"seeds": seeds} if seeds else {})}  # fmt: skip
    default_raw["scoring"] = {"weights": dict.fromkeys(EVALS, 1.0)}
    default_raw.pop("judge", None)
    return default_raw


def test_each_checkout_eval_gets_what_the_checkouts_script_says(checkout, default_raw, tmp_path, monkeypatch):
    root, commit = checkout
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or-fixture-0123456789")
    # matrix.seeds does not apply to checkout evals: the checkout decides
    evals = resolve(_raw(default_raw, root, commit, seeds=[1, 2]), REPO, workdir=tmp_path).cfg.evals
    assert evals["gsm8k"].seeds == FINAL_EVAL_SEEDS and not evals["gsm8k"].seed_changes_data
    assert evals["gpqamain"].seeds == FINAL_EVAL_SEEDS and evals["gpqamain"].seed_changes_data  # shuffled choices
    arena = evals["arenahardwriting"]
    assert arena.seeds == FINAL_EVAL_SEEDS[:1]  # a paid grader: one seed
    # only OPENROUTER_API_KEY set: --check names the OpenRouter script, which reads that key
    assert arena.final.script == "evaluate_openrouter_final_eval.py" and arena.final.keys(arena.keys) == [
        "OPENROUTER_API_KEY"
    ]
    assert arena.final.stages == ("", "--max-new-tokens 12288", "--max-new-tokens 8192")


def test_with_no_grader_key_set_the_scripts_default_is_asked(checkout, default_raw, tmp_path, monkeypatch):
    root, commit = checkout
    for key in ptb.GRADER_KEYS:
        monkeypatch.delenv(key, raising=False)
    arena = resolve(_raw(default_raw, root, commit), REPO, workdir=tmp_path).cfg.evals["arenahardwriting"]
    assert arena.final.script == "evaluate_final_eval.py" and arena.final.keys(arena.keys) == ["OPENAI_API_KEY"]


def test_seeds_on_a_checkout_eval_are_refused_the_checkout_decides(default_raw):
    from ptflow.config.entries import eval_from_entry

    with pytest.raises(ConfigError, match=r"the checkout decides; remove seeds here$"):
        eval_from_entry({"id": "gsm8k", "task": "posttrainbench/gsm8k", "seeds": [72332]})
    # matrix.seeds skips a checkout eval (a one-shot checkout's evaluate.py takes no --seed: evaluated once)
    raw = {**default_raw, "matrix": {**default_raw["matrix"], "seeds": [1]}}
    raw["evals"] = [*default_raw["evals"], {"id": "gsm8k", "task": "posttrainbench/gsm8k"}]
    evals = build_config({**raw, "posttrainbench": {"commit": "a" * 40, "path": "/nonexistent"}}).evals
    assert evals["gsm8k"].seeds == () and evals["add"].seeds == (1,)


def test_a_seeds_call_keeps_the_seed_the_script_and_the_stages_and_reads_mains_scripts(
    checkout, default_raw, tmp_path, monkeypatch
):
    from ptflow.jobs.build import Jobs

    root, commit = checkout
    monkeypatch.setenv("OPENAI_API_KEY", "sk-oai-fixture-0123456789")
    loaded = resolve(_raw(default_raw, root, commit), REPO, workdir=tmp_path)
    jobs = Jobs(loaded.cfg, loaded.site, loaded.layout)
    objects = lambda paths: {p: f"id:{p}" for p in paths}  # noqa: E731 (the marker's ids, stand-ins)
    model = next(iter(loaded.cfg.models))
    spec = jobs.evaluate(model, "gsm8k", "baseline", objects, seed=87681)
    params = spec.call.to_params()
    assert params["seed"] == 87681 and params["final"] == {
        "script": "evaluate_final_eval.py",
        "stages": ["", "--max-tokens 3000", "--max-tokens 2000"],
    }
    assert "tries" not in params and "retry_max_tokens" not in params
    assert set(params["posttrainbench"]["objects"]) == set(ptb.final_eval_paths("gsm8k"))
    assert CheckoutCall.from_params(params) == spec.call
    # the checkout rule is asked for main's scripts too (its marker's ids)
    assert set(ptb.final_eval_paths("gsm8k")) <= set(jobs.checkout_spec()["paths"])


def test_the_train_jobs_evaluation_tells_its_child_which_seed_is_the_cells_first(tmp_path, monkeypatch):
    """An agent cell's seeds evaluated in its train job (ptflow.stages.evaluate.job.evaluate_in_train_job): the
    child's request says whether its seed is the cell's first (which probes the model's decoding) and a later
    seed's start stage; the child passes both on to the seed's evaluation."""
    import json

    from ptflow.specs import CellRef, EvaluateSpec
    from ptflow.stages.evaluate import job as job_mod

    requests = []

    def run_in_runtime(runtime, script, **kw):
        requests.append(json.loads((Path(script).parent / "request.json").read_text()))
        return 1  # nothing staged: the test reads the requests only

    monkeypatch.setattr(job_mod, "run_in_runtime", run_in_runtime)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    call = CheckoutCall.from_params(
        {
            "eval_id": "gsm8k",
            "task": "posttrainbench/gsm8k",
            "seed": 87681,
            "final": {"script": "evaluate_final_eval.py", "stages": ["", "--max-tokens 3000", "--max-tokens 2000"]},
            "posttrainbench": {"eval_dir": "gsm8k", "objects": {}},
        }  # fmt: skip
    )
    spec = EvaluateSpec(CellRef("ptflow/tiny-qwen3", "ptflow--tiny-qwen3", "gsm8k", "scripted"), call, "r", "h", "e")
    for first in (None, {"status": "scored", "seed": 72332, "stage": 1, "decoding": "sampling"}):
        job_mod.evaluate_in_train_job(spec, eval_json=str(tmp_path / "seeds" / "87681" / "eval.json"),
                                      manifest=str(tmp_path / "manifest.json"), checkout=str(tmp_path / "m.json"),
                                      first_seed=first, log=lambda *_: None)  # fmt: skip
    assert [(r["first_seed"], r["start_stage"]) for r in requests] == [(True, 0), (False, 1)]
    passed = []
    monkeypatch.setattr(job_mod, "run_evaluation", lambda j, i, o, log, first_seed: passed.append((first_seed, i)))
    request = tmp_path / "request.json"
    request.write_text(json.dumps(requests[1]))
    with pytest.raises(SystemExit):
        job_mod.main(str(request))
    assert passed[0][0] is False and passed[0][1].start_stage == 1 and passed[0][1].checkout == str(tmp_path / "m.json")
