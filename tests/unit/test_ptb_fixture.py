"""The FIXTURE checkout of PostTrainBench (tests/support/ptb_checkout.py): a reproducible commit, its prompt scripts,
evaluate.py's test hooks (no model is loaded here) and its aggregation scripts on a hand-made results directory."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.ptb_checkout import FACTORS, commit_change, make_fixture_checkout


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> tuple[Path, str]:
    dest = tmp_path_factory.mktemp("ptb") / "PostTrainBench"
    return dest, make_fixture_checkout(dest)


def _run(args, cwd, env=None, check=True) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True, check=check)


def _placeholders(text: str) -> list[str]:
    return re.findall(r"\{[a-z_]+\}", text)


def test_commit_is_reproducible_and_changes_make_new_commits(checkout, tmp_path):
    dest, commit = checkout
    assert re.fullmatch(r"[0-9a-f]{40}", commit)
    assert make_fixture_checkout(tmp_path / "again") == commit
    assert make_fixture_checkout(tmp_path / "variant", variant="v2") != commit
    assert make_fixture_checkout(tmp_path / "one-eval", evals=("gsm8k",)) != commit
    with pytest.raises(ValueError, match="no fixture"):
        make_fixture_checkout(tmp_path / "unknown", evals=("mmlu",))

    copy = tmp_path / "copy"
    make_fixture_checkout(copy)
    changed = commit_change(copy, "src/eval/tasks/gsm8k/benchmark.txt", "GSM8K v2", "rename the benchmark")
    assert re.fullmatch(r"[0-9a-f]{40}", changed) and changed != commit
    assert _run(["git", "rev-parse", "HEAD~1"], copy).stdout.strip() == commit
    assert (copy / "src/eval/tasks/gsm8k/benchmark.txt").read_text() == "GSM8K v2"
    for path in ("src/eval/templates/qwen3.jinja", "agents/codex/solve.sh", "scripts/factors.json"):
        assert (dest / path).is_file(), path
    assert json.loads((dest / "scripts/factors.json").read_text()) == FACTORS
    # codex's solve.sh prints both key variables, as the real one at 9082063 does (ptflow must mask them)
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "codex").write_text("#!/bin/sh\nexit 0\n")
    (fake / "codex").chmod(0o755)
    env = {"PATH": f"{fake}:/usr/bin:/bin", "OPENAI_API_KEY": "sk-o-value", "CODEX_API_KEY": "sk-c-value"}
    out = subprocess.run(["bash", str(dest / "agents/codex/solve.sh")], env=env, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.splitlines() == [
        "key in OPENAI_API_KEY:", "sk-o-value", "key in CODEX_API_KEY:", "sk-c-value"
    ]  # fmt: skip


def test_prompts_fill_every_placeholder(checkout):
    dest, _ = checkout
    args = ["--agent", "claude", "--model-to-train", "ptflow/tiny-llama", "--benchmark-id", "gsm8k"]
    prompt = _run([sys.executable, "src/eval/general/get_prompt.py", *args, "--num-hours", "2"], dest).stdout
    assert not _placeholders(prompt)
    assert "ptflow/tiny-llama" in prompt and "GSM8K (Grade School Math 8K)" in prompt and "2 hours" in prompt
    assert "final_model/" in prompt and "evaluate.py" in prompt

    benchmark = (dest / "src/eval/tasks/gsm8k/benchmark.txt").read_text()
    judge = [sys.executable, "src/disallowed_usage_judge/get_judge_prompt.py", "--benchmark", benchmark]
    text = _run([*judge, "--model", "ptflow/tiny-llama"], dest).stdout
    assert not _placeholders(text) and "ptflow/tiny-llama" in text and "train split of GSM8K" in text
    verdicts = {
        "contamination_judgement.txt": ('"no contamination detected"', '"contamination detected"'),
        "disallowed_model_judgement.txt": ('"only allowed use detected"', '"disallowed use detected"'),
    }
    for name, phrases in verdicts.items():
        assert name in text and all(p in text for p in phrases)


def test_evaluate_hooks_fail_before_loading_a_model(checkout, tmp_path):
    dest, _ = checkout
    task = dest / "src/eval/tasks/gsm8k"
    calls = tmp_path / "calls.jsonl"
    # (a qwen-named path: the checkout's templates are qwen3, gemma3, smollm; no llama3.jinja at 9082063)
    common = ["evaluate.py", "--model-path", str(tmp_path / "tiny-qwen3"), "--limit", "-1"]
    env = {"PTB_FIXTURE_CALLS": str(calls), "PTB_FIXTURE_FAIL_ABOVE": "2000"}
    templates = ["--templates-dir", "../../../../src/eval/templates"]
    for budget in ([], ["--max-tokens", "3000"]):  # the default budget and one above the limit: "out of memory"
        out = _run([sys.executable, *common, *templates, *budget], task, env, check=False)
        assert out.returncode == 1 and "CUDA out of memory" in out.stderr
    out = _run([sys.executable, *common, "--templates-dir", str(tmp_path / "none")], task, env, check=False)
    assert out.returncode == 1 and "qwen3.jinja not found" in out.stderr
    llama = ["evaluate.py", "--model-path", str(tmp_path / "tiny-llama"), "--limit", "-1", *templates]
    out = _run([sys.executable, *llama], task, env, check=False)  # as the real checkout: it has no llama3.jinja
    assert out.returncode == 1 and "llama3.jinja not found" in out.stderr
    assert not (dest / "src/eval/templates/llama3.jinja").exists()
    lines = [json.loads(line) for line in calls.read_text().splitlines()]
    missing = ["--templates-dir", str(tmp_path / "none")]
    assert [c["argv"][-2:] for c in lines] == [templates, ["--max-tokens", "3000"], missing, templates]
    assert {c["cwd"] for c in lines} == {str(task)}


CLEAN = ("no contamination detected", "only allowed use detected")


def _run_dir(method_dir: Path, name: str, accuracy=None, judged=CLEAN, time_taken=True) -> None:
    run = method_dir / name
    run.mkdir(parents=True)
    if accuracy is not None:
        (run / "metrics.json").write_text(json.dumps({"accuracy": accuracy, "stderr": 0.01}))
    if judged:
        (run / "contamination_judgement.txt").write_text(judged[0] + "\n")
        (run / "disallowed_model_judgement.txt").write_text(judged[1])
    if time_taken:
        (run / "time_taken.txt").write_text("00:10:00\n")


def _csv(path: Path) -> list[list[str]]:
    with open(path, newline="") as fh:
        return list(csv.reader(fh))


def test_aggregation_falls_back_to_the_baseline_and_averages(checkout, tmp_path):
    dest, _ = checkout
    results = tmp_path / "results"
    base = results / "baseline_zeroshot"
    for name, acc in [("gsm8k_ptflow_m1_1", 0.2), ("humaneval_ptflow_m1_1", 0.1), ("gsm8k_ptflow_m2_1", 0.4),
                      ("humaneval_ptflow_m2_1", 0.3)]:  # fmt: skip
        _run_dir(base, name, acc, judged=None, time_taken=False)
    a = results / "agentA_cfg_1h"
    # the newest run: by number for the value (run 10: 0.6), by text for the judgement (run '9' > '10': flagged), as
    # PostTrainBench's aggregate_methods.py and aggregate_contamination.py pick them; the cell falls back
    _run_dir(a, "gsm8k_ptflow_m1_9", 0.5, judged=("contamination detected", CLEAN[1]))
    _run_dir(a, "gsm8k_ptflow_m1_10", 0.6)
    _run_dir(a, "humaneval_ptflow_m1_1", 0.9, judged=("contamination detected", CLEAN[1]))
    _run_dir(a, "gsm8k_ptflow_m2_1", 0.7)
    _run_dir(a, "humaneval_ptflow_m2_1")  # no metrics, no final_model: "not stored"
    b = results / "agentB_cfg_1h"
    _run_dir(b, "gsm8k_ptflow_m1_1", 0.8)
    _run_dir(b, "humaneval_ptflow_m1_1", 0.5)
    _run_dir(b, "gsm8k_ptflow_m2_1", 0.6, judged=(CLEAN[0], "maybe"))
    _run_dir(b, "humaneval_ptflow_m2_1", judged=None, time_taken=False)  # never ran: "not avl."

    env = {"POST_TRAIN_BENCH_RESULTS_DIR": str(results), "PYTHON": sys.executable,
           "PTB_FIXTURE_BASE_MODELS": "m1", "PTB_FIXTURE_INSTRUCT_MODELS": "m2"}  # fmt: skip
    _run(["bash", "scripts/aggregate.sh"], dest, env)
    assert _csv(results / "aggregated_agentA_cfg_1h.csv") == [
        ["model", "gsm8k", "humaneval"], ["m1", "0.6", "0.9"], ["m2", "0.7", "not stored"]
    ]  # fmt: skip
    assert _csv(results / "aggregated_agentB_cfg_1h.csv")[2] == ["m2", "0.6", "not avl."]
    assert _csv(results / "contamination_agentA_cfg_1h.csv")[1:] == [["m1", "C", "C"], ["m2", "", ""]]
    assert _csv(results / "contamination_agentB_cfg_1h.csv")[2] == ["m2", "M:IMPORTANT ERR", "C:ERR M:ERR"]
    assert _csv(results / "final_agentA_cfg_1h.csv")[1:] == [["m1", "0.2", "0.1"], ["m2", "0.7", "0.3"]]
    assert _csv(results / "final_agentB_cfg_1h.csv")[1:] == [["m1", "0.8", "0.5"], ["m2", "0.4", "0.3"]]
    assert not (results / "final_baseline_zeroshot.csv").exists()

    methods = ["agentA_cfg_1h", "agentB_cfg_1h"]
    _run([sys.executable, "scripts/aggregate_summary.py", *methods], dest, env)
    assert _csv(results / "summary.csv") == [
        ["benchmark", "baseline_base", "baseline_instruct", *methods],
        ["gsm8k", "0.2000", "0.4000", "0.4500", "0.6000"],
        ["humaneval", "0.1000", "0.3000", "0.2000", "0.4000"],
    ]


FOUR = ("Qwen3-1.7B-Base", "Qwen3-4B-Base", "SmolLM3-3B-Base", "gemma-3-4b-pt")


def _final(results: Path, method: str, header: list[str], rows: dict[str, list[str]]) -> None:
    with open(results / f"final_{method}.csv", "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["model", *header])
        writer.writerows([m, *v] for m, v in sorted(rows.items()))


def test_compute_single_metrics_scores_only_its_four_models_without_renormalising(checkout, tmp_path):
    dest, _ = checkout
    results = tmp_path / "results"
    results.mkdir()
    # two of the seven benchmarks and one factors.json does not name: the others add nothing (no renormalising)
    header = ["gsm8k", "humaneval", "mmlu"]
    full = {m: [str(0.1 * (i + 1)), str(0.05 * (i + 1)), "0.99"] for i, m in enumerate(FOUR)}
    _final(results, "agentA", header, full)
    three = {m: v for m, v in full.items() if m != "gemma-3-4b-pt"}
    _final(results, "three", header, {**three, "Qwen3-4B-Base": ["", "0.1", "0.1"]})  # left out, its gap unread
    _final(results, "five", header, {**full, "Qwen3-8B-Base": ["0.5", "0.5", "0.5"]})  # left out
    _final(results, "time_agentA", header, full)  # final_time_* is not a method table
    env = {"POST_TRAIN_BENCH_RESULTS_DIR": str(results)}
    out = _run([sys.executable, "scripts/compute_single_metrics.py"], dest, env).stdout
    assert out.strip() == f"Written: {results / 'final_metrics.csv'}"
    expected = FACTORS["gsm8k"] * (0.1 + 0.2 + 0.3 + 0.4) / 4 + FACTORS["humaneval"] * (0.05 + 0.1 + 0.15 + 0.2) / 4
    rows = _csv(results / "final_metrics.csv")
    assert rows[0] == ["method", "metric"] and [r[0] for r in rows[1:]] == ["agentA"]
    assert float(rows[1][1]) == pytest.approx(expected, abs=1e-15)

    other = tmp_path / "metrics.csv"
    _run([sys.executable, "scripts/compute_single_metrics.py", "--output", str(other)], dest, env)
    assert _csv(other) == rows
    # a value that is not a number (a fallback to a baseline that failed) stops it, in a table it would skip too
    _final(results, "broken", header, {**three, "Qwen3-4B-Base": ["ERR", "0.1", "0.1"]})
    failed = _run([sys.executable, "scripts/compute_single_metrics.py"], dest, env, check=False)
    assert failed.returncode != 0 and "final_broken.csv" in failed.stderr
    # an empty value (a fallback to a baseline that has no run) stops it when its table is scored
    _final(results, "broken", header, {**full, "gemma-3-4b-pt": ["", "0.1", "0.1"]})
    failed = _run([sys.executable, "scripts/compute_single_metrics.py"], dest, env, check=False)
    assert failed.returncode != 0 and "final_broken.csv: no value for gsm8k" in failed.stderr
