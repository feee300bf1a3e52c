"""The fixture of PostTrainBench's main-line protocol (tests/support/ptb_main.py): its run_final_eval.sh answers the
query modes as main's does (seeds, greedy flag, final-eval script, refusals and exit codes), its cascade and greedy
rule run, and its layout and judge set are main's."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.ptb_checkout import commit_judge_v11, make_fixture_checkout
from tests.support.ptb_main import commit_main, sandbox_api_keys

EVALS = ("gsm8k", "humaneval", "arenahardwriting", "healthbench", "gpqamain", "bfcl")
FIVE = "72332 87681 38992 92201 13818"
# A stand-in apptainer: runs the command on the host, in --pwd, with the --env values.
APPTAINER = """#!/bin/bash
[ "$1" = exec ] && shift
workdir=.; envs=()
while [[ $# -gt 0 && $1 == -* ]]; do
    case $1 in --env) envs+=("$2"); shift 2 ;; --bind|--home) shift 2 ;; --pwd) workdir=$2; shift 2 ;; *) shift ;; esac
done
shift
cd "$workdir" && exec env "${envs[@]}" "$@"
"""


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
    dest = tmp_path_factory.mktemp("ptb") / "checkout"
    make_fixture_checkout(dest, evals=EVALS)
    commit_judge_v11(dest, EVALS)
    commit = commit_main(dest, EVALS)
    assert len(commit) == 40
    return dest


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("env")
    (root / "containers").mkdir()
    (root / "containers/vllm_debug.sif").write_text("")
    stubs = root / "bin"
    stubs.mkdir()
    for name, text in {"apptainer": APPTAINER, "nvidia-smi": "#!/bin/bash\n", "fuse-overlayfs": "#!/bin/bash\n",
                       "fusermount": "#!/bin/bash\n"}.items():  # fmt: skip
        (stubs / name).write_text(text)
        (stubs / name).chmod(0o755)
    (stubs / "python").symlink_to(sys.executable)
    base = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    return base | {
        "POST_TRAIN_BENCH_CONTAINERS_DIR": str(root / "containers"),
        "HF_HOME": str(root / "hf"),
        "OPENAI_API_KEY": "sk-fixture",
        "PATH": f"{stubs}:{os.environ['PATH']}",
        "PTB_FIXTURE_SLEEP": "0",
    }


def final_eval(checkout, env, *args, **extra):
    return subprocess.run(["bash", "src/eval/run_final_eval.sh", *args], cwd=checkout, env=env | extra,
                          capture_output=True, text=True, timeout=60)  # fmt: skip


@pytest.mark.parametrize(
    ("task", "out"),
    [("gsm8k", f"{FIVE}\n1\n"), ("humaneval", f"{FIVE}\n1\n"), ("gpqamain", f"{FIVE}\n0\n"),
     ("arenahardwriting", "72332\n1\n"), ("healthbench", "72332\n1\n")],
)  # fmt: skip
def test_default_seeds(checkout, env, task, out):
    r = final_eval(checkout, env, "--default-seeds", task)
    assert (r.returncode, r.stdout, r.stderr) == (0, out, "")


def test_check_names_the_final_eval_script(checkout, env):
    assert final_eval(checkout, env, "--check", "gsm8k").stdout == "evaluate_final_eval.py\n"
    no_openai = {k: v for k, v in env.items() if k != "OPENAI_API_KEY"}
    r = final_eval(checkout, no_openai, "--check", "healthbench", OPENROUTER_API_KEY="or-fixture")
    assert (r.returncode, r.stdout) == (0, "evaluate_openrouter_final_eval.py\n")
    r = final_eval(checkout, no_openai, "--check", "arenahardwriting")
    assert r.returncode == 1
    assert "neither OPENAI_API_KEY nor OPENROUTER_API_KEY is set" in r.stderr


def test_refusals(checkout, env):
    r = final_eval(checkout, env, "--check", "bfcl")  # main has no cascade for bfcl
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr.startswith("ERROR: no max-tokens retry cascade for task 'bfcl'")
    r = final_eval(checkout, env, "--default-seeds", "nosuchtask")
    assert r.returncode == 1 and "unknown task 'nosuchtask'" in r.stderr
    for args in (("--check",), ("--default-seeds", "gsm8k", "x"), ("--single-seed", "gsm8k", "m", "o"), ("gsm8k",)):
        r = final_eval(checkout, env, *args)
        assert r.returncode == 1 and r.stderr.startswith("usage: "), args
    r = final_eval(checkout, env | {"POST_TRAIN_BENCH_CONTAINERS_DIR": "/nonexistent"}, "--check", "gsm8k")
    assert r.returncode == 1 and "container /nonexistent/vllm_debug.sif not found" in r.stderr
    r = final_eval(checkout, env, "gsm8k", "m", str(checkout / "o1"), str(checkout / "m.json"), "072")
    assert r.returncode == 1 and "seed '072' is not a non-negative integer" in r.stderr


def test_greedy_model_one_seed_and_the_full_cascade(checkout, env, tmp_path):
    model = tmp_path / "model"  # greedy by its generation config; no config.json, so every attempt fails
    model.mkdir()
    (model / "generation_config.json").write_text('{"temperature": 0.0}')
    calls = tmp_path / "calls.jsonl"
    out, metrics = tmp_path / "out", tmp_path / "metrics.json"
    r = final_eval(checkout, env, "gsm8k", str(model), str(out), str(metrics), PTB_FIXTURE_CALLS=str(calls))
    assert r.returncode == 0, r.stderr
    assert "vLLM's default temperature for this model: 0.0 (greedy)" in r.stdout
    assert "seeds: 72332\n" in r.stdout
    assert "Seed 72332: failed at every stage; skipping the remaining seeds" in r.stdout
    assert "No seed succeeded" in r.stdout and not metrics.exists()
    assert sorted(p.name for p in out.glob("final_eval_seed*")) == [
        f"final_eval_seed72332_{i}.txt" for i in range(1, 10)
    ]
    argvs = [json.loads(line)["argv"] for line in calls.read_text().splitlines()]
    assert len(argvs) == 9  # 4 + 3 + 2 attempts
    budgets = [a[a.index("--max-tokens") + 1] if "--max-tokens" in a else None for a in argvs]
    assert budgets == [None] * 4 + ["3000"] * 3 + ["2000"] * 2
    assert all(a[a.index("--seed") + 1] == "72332" and a[a.index("--limit") + 1] == "-1" for a in argvs)


def test_seeds_given_are_used_and_single_seed_records_failure(checkout, env, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    r = final_eval(checkout, env, "--single-seed", "gsm8k", str(tmp_path / "none"), str(out), "87681")
    assert r.returncode == 0, r.stderr
    assert (out / "result_seed87681.txt").read_text() == "failed\n"
    r = final_eval(checkout, env, "--single-seed", "gsm8k", str(tmp_path / "none"), str(out), "87681")
    assert r.returncode == 1 and "already has files of seed 87681" in r.stderr


def test_aggregate_seed_metrics_means_the_seeds_that_succeeded(checkout, tmp_path):
    for seed, acc in (("1", 0.5), ("2", 0.7)):
        (tmp_path / f"m{seed}.json").write_text(json.dumps({"accuracy": acc, "stderr": 0.1, "by_theme": {}}))
    out = tmp_path / "metrics.json"
    subprocess.run([sys.executable, "src/utils/aggregate_seed_metrics.py", "--output", str(out), "--num-seeds", "5",
                    "--seed-result", "1", "0", str(tmp_path / "m1.json"),
                    "--seed-result", "2", "1", str(tmp_path / "m2.json")], cwd=checkout, check=True)  # fmt: skip
    got = json.loads(out.read_text())
    assert got["accuracy"] == pytest.approx(0.6) and "by_theme" not in got
    assert (got["num_seeds"], got["num_seeds_succeeded"]) == (5, 2)
    assert got["per_seed"]["2"]["max_tokens_stage"] == 1


def test_layout_and_judges_are_mains(checkout):
    assert not (checkout / "src/disallowed_usage_judge").exists()
    for rel in ("src/judges/judge_lib.sh", "src/judges/judge_tools/contamination_check.py",
                "src/utils/default_temperature.py", "src/eval/tasks/gsm8k/evaluate_final_eval.py",
                "src/eval/tasks/healthbench/evaluate_openrouter_final_eval.py", "scripts/collect.py"):  # fmt: skip
        assert (checkout / rel).is_file(), rel
    tracked = subprocess.run(["git", "ls-files"], cwd=checkout, capture_output=True, text=True).stdout
    assert "src/disallowed_usage_judge" not in tracked
    script = (
        "source src/judges/judge_lib.sh; echo ${ALL_JUDGES[*]}; for j in ${ALL_JUDGES[@]}; do load_judge_conf $j;"
        " echo $JUDGE_OUTPUT_ID $JUDGE_MODEL $JUDGE_REASONING_EFFORT $JUDGE_CODEX_VERSION; done"
    )
    lines = subprocess.run(["bash", "-c", script], cwd=checkout, capture_output=True, text=True, check=True).stdout
    assert lines.splitlines() == [
        "data_contamination_judge api_usage_judge ptb_lookup_judge general_judge",
        "gpt5_4 gpt-5.6-terra xhigh 0.144.5",
        "api gpt-5.6-terra xhigh 0.144.5",
        "ptb_lookup gpt-5.6-terra xhigh 0.144.5",
        "general gpt-5.6-terra xhigh 0.144.5",
    ]
    assert sandbox_api_keys(checkout, "codex", "gsm8k") == ["CODEX_API_KEY"]
    assert sandbox_api_keys(checkout, "codex", "healthbench", "openrouter") == [
        "CODEX_API_KEY", "OPENAI_API_KEY", "OPENROUTER_API_KEY"]  # fmt: skip


def test_collect_reads_the_run_dir_layout(checkout, tmp_path):
    results = tmp_path / "results"
    method = results / "codex_gpt-5_10h_run1"
    runs = {"gsm8k_Qwen_Qwen3-1.7B-Base_17400001": (0.8, False, False),
            "gsm8k_Qwen_Qwen3-1.7B-Base_17400000": (0.1, False, False),  # older run: not read
            "humaneval_Qwen_Qwen3-1.7B-Base_17400002": (0.9, False, True)}  # fmt: skip
    for name, (acc, contaminated, api) in runs.items():
        run = method / name
        run.mkdir(parents=True)
        (run / "metrics.json").write_text(json.dumps({"accuracy": acc}))
        (run / "time_taken.txt").write_text("2:00:00\n")
        (run / "judgement_gpt5_4.json").write_text(json.dumps({"contamination": contaminated,
                                                                "disallowed_model": False}))  # fmt: skip
        (run / "judgement_api.json").write_text(json.dumps({"disallowed_api_usage": api}))
    subprocess.run([sys.executable, "scripts/collect.py", "--data-dir", str(results)], cwd=checkout, check=True,
                   capture_output=True)  # fmt: skip
    agg = results / "_aggregated"
    assert (agg / "final_codex_gpt-5_10h_run1.csv").read_text().splitlines() == [
        "model,gsm8k,humaneval",
        "Qwen3-1.7B-Base,0.8,0.0",
    ]  # fmt: skip (humaneval: flagged A, the baseline)
    assert (agg / "contamination_codex_gpt-5_10h_run1.csv").read_text().splitlines()[1] == "Qwen3-1.7B-Base,,A"
    assert (agg / "time_overview.csv").read_text().splitlines()[1] == "codex_gpt-5_10h_run1,2:00:00,20.0%"
