"""PostTrainBench main's seeded final evaluation run by ptflow through Snakemake (profiles/local, CPU, offline for the
evaluations), on a FIXTURE checkout with main's evaluation beside d27a95e's other parts: ``make_fixture_checkout``
(9082063's layout, run_task.sh's fixed keys, the aggregate_*.py results) then ``commit_main_evaluation``
(tests/support/ptb_main.py: main's run_final_eval.sh, aggregate_seed_metrics.py, default_temperature.py and each
eval's evaluate_final_eval.py, ALONE). Main's other parts (src/judges, the api_keys.json allowlist, collect.py) are
not in it: this module proves the evaluation part, with the judge off (no ``judge`` in the config).

One eval (posttrainbench/gsm8k, two questions) and three tiny models' baseline cells, each evaluated by rules
evaluate_seed (one job per seed of the checkout's ``--default-seeds``) and seed_mean:

- a greedy model (the fixture's default_temperature.py answers ``greedy`` for it: test hook PTB_FIXTURE_GREEDY) is
  evaluated with its first seed only; the later seeds are skipped, as run_final_eval.sh leaves them out;
- a sampling model gets all five seeds; one later seed fails every attempt (PTB_FIXTURE_FAIL_SEEDS): it makes its
  nine attempts (4/3/2), and the cell's mean is over the other four, equal to the checkout's own
  aggregate_seed_metrics.py over their metrics_seed<S>.json;
- a model whose first seed fails everywhere: the other seeds are skipped and the cell is ``eval_failed`` (PTB: no
  metrics.json, the cell counts as its baseline).

The HF cache is filled by rule posttrainbench_cache from a hub STAND-IN (the checkout's resources.json), as in
tests/slurm/test_posttrainbench_checkout_on_slurm.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.e2e.smk import snakemake
from tests.support.hubstandin import HubStandIn
from tests.support.ptb_checkout import hub_repos, make_fixture_checkout
from tests.support.ptb_main import FINAL_EVAL_SEEDS, commit_main_evaluation

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]

EVAL = "gsm8k"
MODELS = {  # hub id -> its role
    "ptflow/tiny-qwen3-greedy": "greedy",
    "ptflow/tiny-qwen3-h64": "sampling",
    "ptflow/tiny-qwen3-broken": "first seed fails",
}
FIRST, LATER_FAILING = FINAL_EVAL_SEEDS[0], FINAL_EVAL_SEEDS[1]
CELLS = Path("results") / "cells"


def _config(checkout: Path, commit: str) -> dict:
    return {
        "posttrainbench": {"path": str(checkout), "commit": commit},
        "models": [
            {"id": m, "source": "local", "tiny": {"layers": 1, "hidden": 16, "heads": 2, "seed": i}}
            for i, m in enumerate(MODELS)
        ],  # fmt: skip
        "evals": [{"id": EVAL, "task": f"posttrainbench/{EVAL}", "limit": 2}],
        "agents": [{"id": "baseline", "kind": "baseline"}],
        "scoring": {"weights": {EVAL: 1.0}},
        "matrix": {"models": list(MODELS), "evals": [EVAL], "agents": "all"},
    }


def _cell(work: Path, model: str) -> Path:
    return work / CELLS / model.replace("/", "--") / EVAL / "baseline"


@pytest.fixture(scope="module")
def done(tmp_path_factory):
    work = tmp_path_factory.mktemp("ptb_final")
    checkout = work / "PostTrainBench"
    make_fixture_checkout(checkout, evals=(EVAL,), agents=("codex",))
    commit = commit_main_evaluation(checkout, evals=(EVAL,))
    (work / "overlay.yaml").write_text(yaml.safe_dump(_config(checkout, commit)))
    calls = work / "calls.jsonl"
    env = {
        "PTB_FIXTURE_CALLS": str(calls),
        "PTB_FIXTURE_GREEDY": "tiny-qwen3-greedy",
        "PTB_FIXTURE_FAIL_SEEDS": f"{LATER_FAILING}@tiny-qwen3-h64,{FIRST}@tiny-qwen3-broken",
    }
    targets = [str(_cell(work, m).relative_to(work) / "eval.json") for m in MODELS]
    with HubStandIn(hub_repos((EVAL,))) as hub:
        env["HF_ENDPOINT"] = hub.url
        proc = snakemake(work, *targets, "--configfile", str(work / "overlay.yaml"), env=env, check=False)
    (work / "snakemake.out").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, proc.stderr[-6000:]
    records = [json.loads(line) for line in calls.read_text().splitlines()]
    yield {"work": work, "checkout": checkout, "commit": commit, "out": proc.stdout + proc.stderr, "calls": records}


def _seeds(done, model: str) -> dict[int, dict]:
    cell = _cell(done["work"], model)
    return {s: json.loads((cell / "seeds" / str(s) / "eval.json").read_text()) for s in FINAL_EVAL_SEEDS}


def _final_calls(done, model: str) -> list[list[str]]:
    """The argv of every evaluate_final_eval.py attempt on ``model`` (the data probe's runs of evaluate.py aside)."""
    return [c["argv"] for c in done["calls"] if "--seed" in c["argv"] and model.split("/")[1] in str(c["argv"])]


def test_a_greedy_model_is_evaluated_with_its_first_seed_only(done):
    model = "ptflow/tiny-qwen3-greedy"
    seeds = _seeds(done, model)
    assert seeds[FIRST]["status"] == "scored" and seeds[FIRST]["decoding"] == "greedy"
    assert all(seeds[s]["status"] == "skipped" for s in FINAL_EVAL_SEEDS[1:])
    argvs = _final_calls(done, model)
    assert [a[a.index("--seed") + 1] for a in argvs] == [str(FIRST)]
    mean = json.loads((_cell(done["work"], model) / "eval.json").read_text())
    assert mean["status"] == "scored" and mean["seeds"]["num_seeds_succeeded"] == 1
    assert mean["metrics"]["value"] == seeds[FIRST]["metrics"]["value"]


def test_a_sampling_model_gets_five_seeds_and_a_seed_failing_everywhere_is_left_out_of_the_mean(done):
    model = "ptflow/tiny-qwen3-h64"
    seeds = _seeds(done, model)
    assert seeds[FIRST]["decoding"] == "sampling"
    assert seeds[LATER_FAILING]["status"] == "eval_failed" and len(seeds[LATER_FAILING]["attempts"]) == 4 + 3 + 2
    scored = [s for s in FINAL_EVAL_SEEDS if seeds[s]["status"] == "scored"]
    assert scored == [s for s in FINAL_EVAL_SEEDS if s != LATER_FAILING]
    argvs = _final_calls(done, model)
    assert sorted({a[a.index("--seed") + 1] for a in argvs}) == sorted(map(str, FINAL_EVAL_SEEDS))
    assert len(argvs) == 4 + 9  # one attempt per scored seed, nine for the failing one
    cell = _cell(done["work"], model)
    # main's log names in each seed's dir
    inspect = cell / "seeds" / str(LATER_FAILING) / "inspect"
    logs = sorted(p.name for p in inspect.iterdir() if not p.name.startswith("."))  # Snakemake's timestamp aside
    assert logs == sorted(f"final_eval_seed{LATER_FAILING}_{n}.txt" for n in range(1, 10))
    mean = json.loads((cell / "eval.json").read_text())
    assert mean["status"] == "scored" and mean["seeds"]["num_seeds_succeeded"] == 4
    # the checkout's own aggregate_seed_metrics.py over the seeds that succeeded gives the cell's mean
    results = []
    for s in scored:
        results += ["--seed-result", str(s), str(seeds[s]["stage"]), str(cell / "seeds" / str(s) / "inspect" /
                                                                        f"metrics_seed{s}.json")]  # fmt: skip
    agg = done["work"] / "aggregate_seed_metrics.json"
    script = done["checkout"] / "src/utils/aggregate_seed_metrics.py"
    subprocess.run([sys.executable, str(script), "--output", str(agg), "--num-seeds", str(len(FINAL_EVAL_SEEDS)),
                    *results], check=True)  # fmt: skip
    theirs = json.loads(agg.read_text())
    assert mean["metrics"]["value"] == pytest.approx(theirs["accuracy"])
    assert mean["metrics"]["stderr"] == pytest.approx(theirs["stderr"])
    assert theirs["num_seeds_succeeded"] == mean["seeds"]["num_seeds_succeeded"]


def test_a_first_seed_failing_everywhere_makes_the_cell_eval_failed_and_skips_the_others(done):
    model = "ptflow/tiny-qwen3-broken"
    seeds = _seeds(done, model)
    assert seeds[FIRST]["status"] == "eval_failed" and len(seeds[FIRST]["attempts"]) == 9
    assert all(seeds[s]["status"] == "skipped" for s in FINAL_EVAL_SEEDS[1:])
    assert [a[a.index("--seed") + 1] for a in _final_calls(done, model)] == [str(FIRST)] * 9
    mean = json.loads((_cell(done["work"], model) / "eval.json").read_text())
    assert mean["status"] == "eval_failed" and mean["metrics"] is None


def test_every_seed_runs_the_checkouts_final_eval_script_with_mains_arguments(done):
    argvs = [a for m in MODELS for a in _final_calls(done, m)]
    assert argvs and all(a[a.index("--templates-dir") + 1] == "../../../../src/eval/templates" for a in argvs)
    assert all(a[a.index("--limit") + 1] == "2" for a in argvs)
    # the failing seed's stages 1 and 2: run_final_eval.sh's gsm8k arguments
    failing = [a for a in _final_calls(done, "ptflow/tiny-qwen3-h64") if a[a.index("--seed") + 1] == str(LATER_FAILING)]
    budgets = [a[a.index("--max-tokens") + 1] if "--max-tokens" in a else None for a in failing]
    assert budgets == [None] * 4 + ["3000"] * 3 + ["2000"] * 2
