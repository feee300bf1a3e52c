"""Seeds of PostTrainBench main's seeded final evaluation, run by ptflow (ptflow.stages.evaluate.final_seed over
ptflow.stages.posttrainbench.final_eval), on the FIXTURE checkout with main's evaluation alone
(tests/support/ptb_main.py ``commit_main_evaluation``) and a tiny random model, outside Snakemake: the seed's cascade
with the per-stage arguments the checkout's run_final_eval.sh gives (4/3/2 attempts, any failure steps on), main's
log names, a later seed from the first seed's stage, the greedy probe by the checkout's default_temperature.py, and
the cell's mean equal to the checkout's own aggregate_seed_metrics.py over the seeds that succeeded. The Snakemake
proof is tests/e2e/test_posttrainbench_final_eval.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ptflow.config import posttrainbench as ptb
from ptflow.specs import CellRef, CheckoutCall, EvaluateSpec
from ptflow.stages.evaluate import seeds
from ptflow.stages.evaluate.final_seed import evaluate_final_seed
from ptflow.stages.evaluate.run import EvalInputs, EvalOutputs, ModelUnderTest, validate_eval_json
from ptflow.stages.tiny_model import build_char_tokenizer, create_tiny_llama
from tests.support.ptb_checkout import fill_hf_cache, make_fixture_checkout
from tests.support.ptb_main import commit_main_evaluation

CELL = CellRef("ptflow/tiny-qwen3", "ptflow--tiny-qwen3", "gsm8k", "baseline")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("ptb-final")
    checkout = root / "PostTrainBench"
    make_fixture_checkout(checkout, evals=("gsm8k",), agents=("codex",))
    commit = commit_main_evaluation(checkout, evals=("gsm8k",))
    model = root / "tiny-qwen3"  # the checkout's script picks its qwen3.jinja by the path
    create_tiny_llama(model, build_char_tokenizer(["What is 12 + 34?"]), layers=1, hidden=16, heads=2, seed=0)
    fill_hf_cache(root, ("gsm8k",))
    marker = root / "checkout.json"
    marker.write_text(json.dumps({"path": str(checkout), "commit": commit}))
    final = ptb.final_eval(str(checkout), commit, "gsm8k")
    return {"checkout": checkout, "commit": commit, "marker": marker, "model": model, "root": root, "final": final}


def _seed(setup, name, seed, monkeypatch, start_stage=0, first=True, fail_above=None, fail_seeds=None):
    calls = setup["root"] / f"{name}.calls.jsonl"
    monkeypatch.setenv("PTB_FIXTURE_CALLS", str(calls))
    for var, value in (("PTB_FIXTURE_FAIL_ABOVE", fail_above), ("PTB_FIXTURE_FAIL_SEEDS", fail_seeds)):
        if value is None:
            monkeypatch.delenv(var, raising=False)
        else:
            monkeypatch.setenv(var, str(value))
    monkeypatch.chdir(setup["root"])
    final = setup["final"]
    call = CheckoutCall.from_params(
        {
            "eval_id": "gsm8k",
            "task": "posttrainbench/gsm8k",
            "seed": seed,
            "limit": 2,
            "final": {"script": final.script, "stages": list(final.stages)},
            "posttrainbench": {"eval_dir": "gsm8k", "objects": {}},
        }  # fmt: skip
    )
    job = EvaluateSpec(CELL, call, model_revision="fixture", hf_home=".", evals_cache=".")
    out = setup["root"] / name / "seeds" / str(seed)
    model = str(setup["model"])
    evaluate_final_seed(
        job,
        ModelUnderTest(model, {"path": model, "kind": "base", "commit_or_hash": "fixture", "step": None}),
        EvalOutputs(str(out / "eval.json"), str(out / "inspect")),
        EvalInputs(checkout=str(setup["marker"]), start_stage=start_stage),
        first=first,
        log=lambda *_: None,
    )
    data = seeds.mark_seed(out / "eval.json", call, first=first)
    records = [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []
    return data, records, out


def test_the_checkouts_script_gives_the_seeds_the_greedy_rule_the_script_and_the_cascade(setup):
    final = setup["final"]
    assert final.seeds == (72332, 87681, 38992, 92201, 13818) and final.seed_only_samples
    assert final.script == "evaluate_final_eval.py" and final.stages == ("", "--max-tokens 3000", "--max-tokens 2000")


def test_a_seed_runs_the_cascade_with_mains_arguments_and_log_names(setup, monkeypatch):
    data, calls, out = _seed(setup, "cascade", 72332, monkeypatch, fail_above=3000)
    validate_eval_json(data)
    assert data["status"] == "scored" and data["seed"] == 72332 and data["stage"] == 1
    assert [a["max_new_tokens"] for a in data["attempts"]] == [None] * 4 + [3000]
    argvs = [c["argv"] for c in calls]
    assert all("--max-tokens" not in a for a in argvs[:4])
    assert argvs[4][argvs[4].index("--max-tokens") + 1] == "3000"
    assert argvs[4][argvs[4].index("--seed") + 1] == "72332"
    assert argvs[4][argvs[4].index("--templates-dir") + 1] == "../../../../src/eval/templates"
    names = sorted(p.name for p in (out / "inspect").iterdir())
    assert names == sorted(["default_temperature.txt", "default_temperature_log.txt", "metrics_seed72332.json",
                            *(f"final_eval_seed72332_{n}.txt" for n in range(1, 6))])  # fmt: skip
    assert data["decoding"] == "sampling" and data["posttrainbench"]["final_eval"] == "evaluate_final_eval.py"


def test_a_later_seed_starts_at_the_first_seeds_stage_and_probes_nothing(setup, monkeypatch):
    data, calls, out = _seed(setup, "later", 87681, monkeypatch, start_stage=1, first=False)
    assert data["status"] == "scored" and data["stage"] == 1 and "decoding" not in data
    assert len(calls) == 1 and calls[0]["argv"][calls[0]["argv"].index("--max-tokens") + 1] == "3000"
    assert not (out / "inspect" / "default_temperature.txt").exists()


def test_a_seed_failing_every_stage_is_eval_failed_after_nine_attempts(setup, monkeypatch):
    data, calls, _ = _seed(setup, "failed", 38992, monkeypatch, first=False, fail_seeds="38992")
    validate_eval_json(data)
    assert data["status"] == "eval_failed" and len(calls) == 4 + 3 + 2
    assert [a["stage"] for a in data["attempts"]] == [0] * 4 + [1] * 3 + [2] * 2


def test_greedy_model_by_the_checkouts_probe(setup, monkeypatch):
    monkeypatch.setenv("PTB_FIXTURE_GREEDY", "tiny-qwen3")
    data, _, _ = _seed(setup, "greedy", 72332, monkeypatch)
    assert data["decoding"] == "greedy"
    assert seeds.why_skipped(data, seed_changes_data=False) is not None
    assert seeds.why_skipped(data, seed_changes_data=True) is None  # gpqamain's: every seed


def test_the_cells_mean_is_the_checkouts_aggregate_seed_metrics(setup, monkeypatch, tmp_path):
    cell = tmp_path / "cell"
    files, results = [], []
    for i, seed in enumerate((72332, 87681, 38992)):
        data, _, out = _seed(setup, f"mean{seed}", seed, monkeypatch, first=i == 0, fail_seeds="38992")
        target = cell / "seeds" / str(seed)
        target.parent.mkdir(parents=True, exist_ok=True)
        out.rename(target)
        files.append(target / "eval.json")
        if data["status"] == "scored":
            results += [
                "--seed-result",
                str(seed),
                str(data["stage"]),
                str(target / "inspect" / f"metrics_seed{seed}.json"),
            ]
    mean = seeds.seed_mean(files, cell / "eval.json")
    validate_eval_json(mean)
    agg = tmp_path / "metrics.json"
    subprocess.run([sys.executable, str(setup["checkout"] / ptb.AGGREGATE_SEED_METRICS), "--output", str(agg),
                    "--num-seeds", "3", *results], check=True)  # fmt: skip
    theirs = json.loads(agg.read_text())
    assert mean["seeds"]["num_seeds"] == theirs["num_seeds"] == 3
    assert mean["seeds"]["num_seeds_succeeded"] == theirs["num_seeds_succeeded"] == 2
    assert mean["metrics"]["value"] == pytest.approx(theirs["accuracy"])
    assert mean["metrics"]["stderr"] == pytest.approx(theirs["stderr"])
    kept = json.loads((cell / mean["posttrainbench"]["metrics_file"]).read_text())
    assert kept == theirs["per_seed"]["72332"]["metrics"]


def test_humaneval_s_final_evaluation_in_its_answer_sandbox_is_refused_and_never_run_bare(setup, tmp_path):
    """Main's run_final_eval.sh runs humaneval's final evaluation inside with_answer_sandbox.sh, and the task's
    evaluate_final_eval.py refuses to score without the sandbox's socket (the fixture keeps that): run bare, as the
    other tasks are, each of its nine attempts would fail at once and the cell would fall to the baseline after its
    agent's GPU hours. ptflow does not run the sandbox yet, so the checkout's humaneval is refused in one line."""
    checkout = tmp_path / "PostTrainBench"
    make_fixture_checkout(checkout, evals=("gsm8k", "humaneval"), agents=("codex",))
    commit = commit_main_evaluation(checkout, evals=("gsm8k", "humaneval"))
    with pytest.raises(ptb.CheckoutError) as refused:
        ptb.final_eval(str(checkout), commit, "humaneval")
    line = str(refused.value)
    assert "\n" not in line and "runs humaneval's final evaluation inside its answer sandbox" in line
    assert "src/eval/tasks/humaneval/with_answer_sandbox.sh" in line and line.endswith("or pin d27a95e")
    assert ptb.final_eval(str(checkout), commit, "gsm8k").script == "evaluate_final_eval.py"  # the others run
    bare = subprocess.run(
        [sys.executable, "evaluate_final_eval.py", "--model-path", str(setup["model"]), "--templates-dir",
         "../../../../src/eval/templates", "--limit", "2", "--seed", "72332", "--json-output-file", "m.json"],
        cwd=checkout / "src/eval/tasks/humaneval", capture_output=True, text=True, timeout=300,
        env={k: v for k, v in os.environ.items() if k != "ANSWER_SANDBOX_SOCKET"},
    )  # fmt: skip
    assert bare.returncode != 0 and "ANSWER_SANDBOX_SOCKET is not set" in bare.stderr
    assert not (checkout / "src/eval/tasks/humaneval/m.json").exists()
