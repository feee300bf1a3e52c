"""PostTrainBench from a pinned checkout, end to end on the real test Slurm cluster, through a FIXTURE checkout
(``tests/support/ptb_checkout.py``: small programs of ours under PostTrainBench's paths and interfaces).

One model x two evals (posttrainbench/gsm8k, posttrainbench/humaneval): baseline cells of both, one codex cell
(gsm8k). The checkout is a file target (its marker records the commit and the object ids of the paths used), every
cell is evaluated by the checkout's ``evaluate.py`` with run_task.sh's arguments, the codex cell gets the checkout's
prompt and runs its ``agents/codex/solve.sh`` (the real codex CLI against the provider STAND-IN), and the judge gets
the checkout's judge prompt. Then a new commit that changes only humaneval's ``evaluate.py`` reruns only the
humaneval cell (the gsm8k cells, the agent's and its judge's included, stand), and ``ptflow export
--posttrainbench`` writes PostTrainBench's results layout, on which the checkout's own aggregation scripts give,
cell for cell, the score ptflow gives.

Why these cells and no more (every cell here is several Slurm jobs of ~10 CPU-s of start-up each; an agent cell is a
training, its adopting evaluation and a judge, twice over with the second commit): the rerun proof needs one cell
whose files the commit changes (humaneval's baseline: one evaluation in the second run, not a training) and cells
whose files it does not change (gsm8k's baseline and agent cell); "the agent made it better" needs a baseline beside
the agent cell of the same eval; two evals give the aggregation two columns (cell for cell over the baseline's). Only
gsm8k's cells need every question (the agent cell's score against the baseline's); humaneval's baseline, evaluated
in both runs, asks evaluate.py for two (``limit``: the untrained model generates to the token cap on every question,
~0.2 CPU-s each; the ``--limit -1`` of run_task.sh is gsm8k's, which sets none). The first run builds the cells only
and the second (after the new commit) the rest, the aggregate among it, so the aggregate runs once, on the final
state the export and aggregation tests read (the second run's targets: the aggregate's outputs, everything they
need; the HF cache's whole-cache marker ``results/cache/hf_cache.json``, a target of ``all`` only, is not built:
nothing here reads it, and the default matrix's runs build it). What
one agent cell proves for the prompt, solve.sh, the task dir and the judge does not depend on its eval; run_task.sh's
task dir and prompt per eval are tests/unit/test_ptb_agent_cell.py's, and the checkout's aggregation over many agent
cells x evals tests/unit/test_ptb_score.py's. The codex solve.sh echoes its keys (as the real one does): the
fresh key value is in no file of the run, of the export or of Snakemake's output, and *** is where the echo went.

The HF cache is PostTrainBench's: the CPU job of rule posttrainbench_cache fetches what the checkout's
``resources.json`` lists from the hub STAND-IN (``tests/support/hubstandin.py``; the fixture's data under the real
dataset ids and pinned revisions), warms each eval's data by running its ``evaluate.py`` up to its model (the data
probe: the loads in the form the real scripts make them, gsm8k's by ``data_dir``), and the checkout's ``evaluate.py``
then loads its dataset offline from it. The second run's site says its compute nodes reach the hub
(``evaluation.hub: online``): the evaluation it makes runs online, as run_task.sh's. A checkout whose list lacks one
eval's dataset is refused at preflight, nothing submitted; a hub without the revision the evaluation asks for fails
the cache job with its line, and no evaluation or agent job is submitted.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import secrets
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from ptflow.stages.evaluate.run import validate_eval_json
from ptflow.stages.posttrainbench.data_probe import PROBE_MODEL
from tests.e2e.smk import REPO, snakemake
from tests.support.agent_clis import cli_bin_dir
from tests.support.hubstandin import HubStandIn
from tests.support.providers import ProviderStandIn
from tests.support.providers.server import Step, checkout_trajectory, judge_trajectory
from tests.support.ptb_checkout import commit_change, hub_repos, make_fixture_checkout, run_task_listing

pytestmark = pytest.mark.timeout(1500)

SITE = REPO / "tests" / "slurm" / "localtest.yaml"
# a tiny model under a qwen name: the checkout's evaluate.py picks its template by the path (qwen3.jinja; it has no
# llama3.jinja at 9082063, so a llama-named model fails there as it would in PostTrainBench)
MODEL_ID = "ptflow/tiny-qwen3-h64"
MODEL = "ptflow--tiny-qwen3-h64"
CELLS = Path("results") / "cells" / MODEL
EVALS = ("gsm8k", "humaneval")
AGENT_EVALS = ("gsm8k",)  # the evals with a codex cell (the others: baseline only; the module docstring says why)
# evaluate.py's --limit per eval (absent: run_task.sh's -1, every question): humaneval's baseline, whose score is
# only a column of the aggregation, on two questions (the module docstring says why)
LIMITS = {"humaneval": 2}
# a fresh value each session: the checkout's codex solve.sh echoes it, and no file of the run may keep it
KEY = {"OPENAI_API_KEY": "sk-oai-" + secrets.token_hex(20)}
JUDGE_MODEL = "gpt-5.1-codex"
JUDGE_ROUTE = "contamination_judgement.txt"  # the fixture's judge prompt names the verdict file (ptflow's does too)
TRAIN_STEPS = 150
# The agent's last command and the judge's first: the listing of their working directory (type, inode, path), read
# back from their traces (codex's command events).
LISTING = "find . -printf '%y %i %P\\n' | sort -k3"


def _config(checkout: Path, commit: str, api_url: str) -> dict:
    return {
        "posttrainbench": {"path": str(checkout), "commit": commit},
        "models": [{"id": MODEL_ID, "source": "local", "tiny": {"layers": 2, "hidden": 64, "heads": 4, "seed": 0}}],
        "evals": [
            {
                "id": e,
                "task": f"posttrainbench/{e}",
                "retry_max_new_tokens": [12, 8],
                **({"limit": LIMITS[e]} if e in LIMITS else {}),
            }
            for e in EVALS
        ],
        "agents": [
            {"id": "baseline", "kind": "baseline"},
            {
                "id": "codex",
                "kind": "cli-agent",
                "cli": "codex",
                "model": "gpt-5.1-codex-max",
                "hours": 0.15,
                "grace_minutes": 0.5,
                "keys": ["OPENAI_API_KEY"],
                "base_url": api_url,
            },
        ],  # fmt: skip
        "judge": {"agent": "codex", "model": JUDGE_MODEL, "keys": ["OPENAI_API_KEY"], "base_url": api_url},
        "scoring": {"weights": {"gsm8k": 1.0, "humaneval": 1.0}},
        "matrix": {
            "models": [MODEL_ID],
            "evals": list(EVALS),
            "agents": "all",
            "exclude": [{"eval": e, "agent": "codex"} for e in EVALS if e not in AGENT_EVALS],
        },
    }


# The first run's targets: every cell's evaluation and the agent cell's judge (the aggregate waits for the second run,
# which redoes it anyway); the second run's: the aggregate's outputs, which need every cell and judge.
CELL_TARGETS = [
    *(str(CELLS / ev / "baseline" / "eval.json") for ev in EVALS),
    *(str(CELLS / ev / "codex" / name) for ev in AGENT_EVALS for name in ("eval.json", "judge.json")),
]
AGGREGATE_TARGETS = ["results/summary.csv", "results/leaderboard.md"]


def _run(work: Path, env: dict, name: str, targets: list[str], site: Path = SITE):
    # the targets first: --configfile and --config take every word after them
    proc = snakemake(
        work, *targets, "--configfile", str(work / "overlay.yaml"), "--config", f"site={site}",
        env=env, profile="profiles/slurm", check=False,
    )  # fmt: skip
    (work / f"{name}.out").write_text(proc.stdout + proc.stderr)  # kept with PTFLOW_KEEP_TEST_WORK=1
    assert proc.returncode == 0, f"snakemake failed ({proc.returncode}): {proc.stderr[-3000:]}"
    return proc


@contextlib.contextmanager
def _work_dir(prefix: str):
    """A run's directory on the shared path (Slurm sites' rule: not /tmp), removed afterwards unless
    PTFLOW_KEEP_TEST_WORK is set."""
    root = Path("/var/lib/ptflow-tests")
    root.mkdir(parents=True, exist_ok=True)
    work = root / f"{prefix}-{uuid.uuid4().hex[:8]}"
    work.mkdir()
    try:
        yield work
    finally:
        if not os.environ.get("PTFLOW_KEEP_TEST_WORK"):
            shutil.rmtree(work, ignore_errors=True)


def _mtimes(work: Path) -> dict[Path, int]:
    cells = work / CELLS
    return {p: p.stat().st_mtime_ns for name in ("eval.json", "judge.json") for p in cells.rglob(name)}


@pytest.fixture(scope="module")
def done(slurm_cluster):
    root = Path("/var/lib/ptflow-tests")  # shared-path rule of Slurm sites: not /tmp
    root.mkdir(parents=True, exist_ok=True)
    work = root / f"ptb-checkout-{uuid.uuid4().hex[:8]}"
    work.mkdir()
    checkout = work / "PostTrainBench"
    first = make_fixture_checkout(checkout, evals=EVALS, agents=("codex",))
    calls = work / "evaluate_calls.jsonl"
    env = {**slurm_cluster.env, **KEY, "PTB_FIXTURE_CALLS": str(calls)}
    env["PATH"] = ":".join([str(cli_bin_dir("codex")), env.get("PATH") or os.environ["PATH"]])
    # the judge: its prompt asks for the answer alone; it lists its directory first
    routes = [(JUDGE_ROUTE, [Step(shell=LISTING), *judge_trajectory(answer_only=True)[1:]])]
    agent = checkout_trajectory(TRAIN_STEPS)  # it lists its task dir first (ls -A)
    agent = [*agent[:-1], Step(shell=LISTING), agent[-1]]  # the agent lists its task dir as it leaves it
    repos = hub_repos(EVALS)
    with (
        ProviderStandIn(agent, expected_key={"openai": KEY["OPENAI_API_KEY"]}, routes=routes) as api,
        HubStandIn(repos) as hub,
    ):
        env["HF_ENDPOINT"] = hub.url  # the cache job's downloads (a CPU job on the cluster) go to the stand-in
        (work / "overlay.yaml").write_text(yaml.safe_dump(_config(checkout, first, api.url)))
        _run(work, env, "first", CELL_TARGETS)
        # every cell's eval.json and the agent cell's judge.json (its train job, adopting evaluation and judge)
        before = _mtimes(work)
        # a new commit that changes humaneval's evaluate.py (a comment): only the humaneval cell is affected
        script = checkout / "src/eval/tasks/humaneval/evaluate.py"
        second = commit_change(checkout, "src/eval/tasks/humaneval/evaluate.py",
                               script.read_text() + "# a new commit\n", "humaneval: touch")  # fmt: skip
        (work / "overlay.yaml").write_text(yaml.safe_dump(_config(checkout, second, api.url)))
        # the second run on a site whose compute nodes reach the hub: its evaluations run online, as run_task.sh's
        first_calls = len(calls.read_text().splitlines())
        online = yaml.safe_load(SITE.read_text())
        (work / "online-site.yaml").write_text(yaml.safe_dump({**online, "evaluation": {"hub": "online"}}))
        proc = _run(work, env, "second", AGGREGATE_TARGETS, site=work / "online-site.yaml")
        after = _mtimes(work)
        records = list(api.records)
        hub_requests = list(hub.requests)
    yield {"work": work, "checkout": checkout, "commits": (first, second), "calls": calls, "before": before,
           "after": after, "second": proc, "records": records, "hub": {(r.repo_type, r.repo_id): r.commit
           for r in repos}, "hub_requests": hub_requests,
           "first_calls": first_calls}  # fmt: skip
    if not os.environ.get("PTFLOW_KEEP_TEST_WORK"):
        shutil.rmtree(work, ignore_errors=True)


def test_the_checkout_is_a_file_target_recording_the_paths_used(done):
    marker = json.loads((done["work"] / "results/posttrainbench/checkout.json").read_text())
    assert marker["commit"] == done["commits"][1] and marker["path"] == str(done["checkout"])
    assert set(marker["objects"]) >= {"src/eval/tasks/gsm8k", "src/eval/tasks/humaneval", "src/eval/templates",
                                      "agents/codex", "src/eval/general", "src/disallowed_usage_judge"}  # fmt: skip


def test_the_cache_job_fetched_the_checkouts_resources_from_the_hub(done):
    work = done["work"]
    marker = json.loads((work / "results/posttrainbench/hf_cache.json").read_text())
    # every repo of the checkout's resources.json, and the commit fetched: the stand-in's
    assert {(r["repo_type"], r["repo"]): r["commit"] for r in marker["repos"]} == done["hub"]
    assert marker["fetched_by"] == "ptflow" and marker["failed"] == []  # the local site runs no standard image
    # each evaluation's loads, as its evaluate.py makes them, all loadable offline: gsm8k's few-shot and test
    # splits by data_dir at the revision inspect_evals pins (the form the real run missed)
    gsm8k = done["hub"][("dataset", "openai/gsm8k")]
    assert [(ld["path"], ld["data_dir"], ld["split"], ld["revision"], ld["ok"]) for ld in marker["evals"]["gsm8k"]] == [
        ("openai/gsm8k", "main", "train", gsm8k, True), ("openai/gsm8k", "main", "test", gsm8k, True)
    ]  # fmt: skip
    (humaneval,) = marker["evals"]["humaneval"]
    assert humaneval["revision"] == done["hub"][("dataset", "openai/openai_humaneval")] and humaneval["ok"]
    assert any(r.startswith("GET /datasets/openai/gsm8k/resolve/") for r in done["hub_requests"])
    # it ran as a Slurm job of its own (a CPU job, where the network is)
    first = (work / "first.out").read_text()
    assert "rule posttrainbench_cache" in first
    assert (work / ".snakemake/slurm_logs/rule_posttrainbench_cache").is_dir()
    # and once: the second run (a new commit, the same resources.json) did not fetch again; its humaneval
    # evaluate.py changed, so preflight asked it offline (the data probe, in the driver) and found its loads
    assert "rule posttrainbench_cache" not in done["second"].stdout + done["second"].stderr
    calls = [json.loads(line) for line in done["calls"].read_text().splitlines()][done["first_calls"] :]
    assert [(c["eval"], c["hf_hub_offline"]) for c in calls if PROBE_MODEL in c["argv"]] == [("humaneval", "1")]


def test_every_cell_is_evaluated_by_the_checkouts_evaluate_py(done):
    work, checkout = done["work"], done["checkout"]
    cells = [(ev, "baseline") for ev in EVALS] + [(ev, "codex") for ev in AGENT_EVALS]
    assert sorted(str(p.relative_to(work / CELLS).parent) for p in (work / CELLS).rglob("eval.json")) == sorted(
        f"{ev}/{agent}" for ev, agent in cells
    )  # the matrix's cells, no more
    for ev, agent in cells:
        data = json.loads((work / CELLS / ev / agent / "eval.json").read_text())
        validate_eval_json(data)
        assert data["status"] == "scored" and data["task"] == f"posttrainbench/{ev}"
        assert data["posttrainbench"]["commit"] in done["commits"]
        kept = json.loads((work / CELLS / ev / agent / data["posttrainbench"]["metrics_file"]).read_text())
        assert kept["accuracy"] == data["metrics"]["value"]  # the checkout's metrics.json, verbatim
    for ev in AGENT_EVALS:
        base = json.loads((work / CELLS / ev / "baseline" / "eval.json").read_text())["metrics"]["value"]
        trained = json.loads((work / CELLS / ev / "codex" / "eval.json").read_text())["metrics"]["value"]
        # the agent's SFT (through solve.sh) made it better (150 steps: about 0.25-0.3 against 0; what SFT learns is
        # tested on the default matrix)
        assert trained > base, (ev, base, trained)
    # run_task.sh's command line, in the eval's dir of the checkout (the agent's own calls ran in its task dir)
    calls = [json.loads(line) for line in done["calls"].read_text().splitlines()]
    for n, c in enumerate(calls):
        c["run"] = "first" if n < done["first_calls"] else "second"
    # the cache job ran each eval's evaluate.py up to its model (the data probe): online to warm, offline to prove
    probed = [c for c in calls if PROBE_MODEL in c["argv"]]
    assert {(c["eval"], c["hf_hub_offline"]) for c in probed if c["run"] == "first"} == {
        (e, mode) for e in EVALS for mode in ("1", None)
    }  # fmt: skip
    final = [c for c in calls if c["cwd"].startswith(str(checkout)) and c["argv"] != ["--help"] and c not in probed]
    assert {c["cwd"] for c in final} == {str(checkout / f"src/eval/tasks/{e}") for e in EVALS}
    for c in final:
        # the first run's site is offline: the evaluation loaded its dataset offline, from what the cache job warmed;
        # the second's says its compute nodes reach the hub (evaluation.hub: online): online, as run_task.sh runs it
        assert c["hf_hub_offline"] == ("1" if c["run"] == "first" else None), c
        argv = c["argv"]
        assert argv[argv.index("--templates-dir") + 1] == str(checkout / "src/eval/templates")
        # run_task.sh's -1 (every question) where the eval sets no limit, else the limit set
        assert argv[argv.index("--limit") + 1] == str(LIMITS.get(c["eval"], -1)) and "--json-output-file" in argv
        assert "--max-tokens" not in argv  # the first rung is evaluate.py's own default budget


def test_agent_cells_get_the_checkouts_prompt_solve_sh_and_judge(done):
    work, records = done["work"], done["records"]
    for ev in AGENT_EVALS:
        prompt = (work / CELLS / ev / "codex" / "agent" / "prompt.md").read_text()
        assert MODEL_ID in prompt and not prompt.endswith("\n")  # get_prompt.py's, as PROMPT=$(...) keeps it
        benchmark = (done["checkout"] / f"src/eval/tasks/{ev}/benchmark.txt").read_text().strip()
        assert benchmark in prompt
        main = [r for r in records if r.get("main") and r["model"] == "gpt-5.1-codex-max"]
        assert any(benchmark in r.get("user_text", "") for r in main) or main
        log = next((work / "results/logs/train").rglob(f"{ev}/codex.log")).read_text()
        assert "agent_solve.sh" in log  # the checkout's agents/codex/solve.sh ran the CLI
        # the task dir as codex listed it (the trajectory's first command): run_task.sh's files, nothing of ptflow's
        trace = (work / CELLS / ev / "codex" / "agent" / "stdout.log").read_text().splitlines()
        listed = next(
            json.loads(line)["item"]["aggregated_output"] for line in trace
            if line.startswith("{") and '"command_execution"' in line and "ls -A" in line and '"exit_code":0' in line
        )  # fmt: skip
        assert sorted(listed.split()) == run_task_listing(done["checkout"], ev), listed
        judge = json.loads((work / CELLS / ev / "codex" / "judge.json").read_text())
        assert judge["status"] == "judged" and judge["flagged"] is False, judge


def _listing(stdout_log: Path) -> dict[str, tuple[str, int]]:
    """{path: (type, inode)} from the output of the LISTING command in a codex trace."""
    for line in reversed(stdout_log.read_text(errors="replace").splitlines()):
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if not isinstance(ev, dict) or not isinstance(ev.get("item"), dict) or ev.get("type") != "item.completed":
            continue
        item = ev["item"]
        if "find . -printf" in str(item.get("command", "")):
            rows = [r.split(" ", 2) for r in str(item.get("aggregated_output", "")).splitlines() if r.strip()]
            return {row[2]: (row[0], int(row[1])) for row in rows if len(row) == 3}
    raise AssertionError(f"no listing in {stdout_log}")


def test_the_judge_runs_in_the_task_dir_as_the_agent_left_it(done):
    """run_task.sh's judge: in the agent's task dir right after the agent, final_model/ there (here: the files of
    the checkpoint ptflow evaluates, hard-linked), nothing of ptflow's added."""
    work = done["work"]
    for ev in AGENT_EVALS:
        cell = work / CELLS / ev / "codex"
        left = _listing(cell / "agent" / "stdout.log")
        seen = _listing(cell / "judges" / "codex" / "run1" / "judge_stdout.log")  # the panel's one vote
        assert {k: v[0] for k, v in seen.items()} == {k: v[0] for k, v in left.items()}, ev
        assert not {"agent_trace.md", "final_model.listing.txt", ".ptflow-not-copied.txt"} & set(seen)
        checkpoint = Path(json.loads((cell / "checkpoint.json").read_text())["checkpoint"])
        weights = {k: ino for k, (kind, ino) in seen.items() if k.startswith("final_model/") and kind == "f"}
        assert weights and all(ino == (checkpoint / k.split("/", 1)[1]).stat().st_ino for k, ino in weights.items())


def test_a_new_commit_reruns_only_the_cells_whose_files_changed(done):
    before, after = done["before"], done["after"]
    # not vacuous: a cell the commit changes, and beside it cells it does not (an agent cell and its judge among them)
    assert {str(p.relative_to(done["work"] / CELLS)) for p in before} == {
        *(f"{ev}/baseline/eval.json" for ev in EVALS),
        *(f"{ev}/codex/{name}" for ev in AGENT_EVALS for name in ("eval.json", "judge.json")),
    }
    for path, mtime in before.items():
        changed = after[path] != mtime
        assert changed == ("/humaneval/" in str(path)), (path, changed)
    out = done["second"].stdout + done["second"].stderr
    assert "rule posttrainbench_checkout" in out or "checkpoint posttrainbench_checkout" in out


AGGREGATION = ("aggregate_methods.py", "aggregate_contamination.py", "aggregate_final.py")  # scripts/aggregate.sh's


def _export(work: Path, dest: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    """``ptflow export --posttrainbench dest`` of the run (``env``: added to this process's environment)."""
    proc = subprocess.run(
        [sys.executable, "-m", "ptflow.ops.cli", "export", "--posttrainbench", str(dest), "-d", str(work)],
        capture_output=True, text=True, cwd=REPO, env={**os.environ, **(env or {})},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc


def _aggregate(checkout: Path, dest: Path, scripts, **env) -> None:
    """The checkout's own scripts over the export, in order, as scripts/aggregate.sh runs them."""
    environ = {**os.environ, "POST_TRAIN_BENCH_RESULTS_DIR": str(dest), **env}
    for script in scripts:
        run = subprocess.run([sys.executable, f"scripts/{script}"], cwd=checkout, env=environ, capture_output=True,
                             text=True)  # fmt: skip
        assert run.returncode == 0, run.stderr


@pytest.fixture(scope="module")
def exported(done):
    """ONE ``ptflow export --posttrainbench`` of the run (with the fresh key in its environment, for the key test),
    the checkout's aggregation over it (the tiny model as its base and instruct model, so its rows are aggregated),
    then compute_single_metrics.py over the same tables: what the three tests below read, made once (each ``ptflow
    export`` and script start is a Python start of its own)."""
    work, checkout = done["work"], done["checkout"]
    dest = work / "ptb-results"
    proc = _export(work, dest, KEY)
    _aggregate(checkout, dest, AGGREGATION, PTB_FIXTURE_BASE_MODELS="tiny-qwen3-h64",
               PTB_FIXTURE_INSTRUCT_MODELS="tiny-qwen3-h64")  # fmt: skip
    # the method tables aggregate_final.py wrote (before compute_single_metrics.py adds final_metrics.csv beside them)
    methods = sorted(p.name[len("final_") : -len(".csv")] for p in dest.glob("final_*.csv"))
    _aggregate(checkout, dest, ("compute_single_metrics.py",))
    return {"dest": dest, "proc": proc, "methods": methods}


def test_the_checkouts_aggregation_on_the_export_gives_ptflows_scores(done, exported):
    work, dest, methods = done["work"], exported["dest"], exported["methods"]
    assert methods == ["codex_gpt-5.1-codex-max_0.15h"], methods
    with open(dest / f"final_{methods[0]}.csv") as fh:
        theirs = {row["model"]: row for row in csv.DictReader(fh)}["tiny-qwen3-h64"]
    with open(work / "results/summary.csv") as fh:
        rows = list(csv.DictReader(fh))
    ours = {r["eval"]: float(r["score"]) for r in rows if r["agent"] == "codex"}
    assert set(ours) == set(AGENT_EVALS)
    for ev in AGENT_EVALS:
        assert float(theirs[ev]) == pytest.approx(ours[ev], abs=1e-9), (ev, theirs[ev], ours[ev])
    # and the baseline's cells of both evals, column for column (the export's baseline_zeroshot, as aggregated)
    with open(dest / "aggregated_baseline_zeroshot.csv") as fh:
        zeroshot = {row["model"]: row for row in csv.DictReader(fh)}["tiny-qwen3-h64"]
    base = {r["eval"]: float(r["value"]) for r in rows if r["agent"] == "baseline"}
    assert set(base) == set(EVALS)
    for ev in EVALS:
        assert float(zeroshot[ev]) == pytest.approx(base[ev], abs=1e-9), (ev, zeroshot[ev], base[ev])


def test_the_leaderboard_has_no_score_for_a_tiny_model_and_says_why_as_the_script_gives_none(done, exported):
    """compute_single_metrics.py scores only its four base models: on this run's export it writes no number (the
    method table is there, with the tiny model's row, and left out), and the aggregate rule (given the checkout's
    marker) shows no leaderboard score, says why in one line and ranks by ptflow's weights, which stand beside it."""
    work, checkout, dest = done["work"], done["checkout"], exported["dest"]
    assert exported["methods"]  # not vacuous: a method table for it to score or leave out
    assert (dest / "final_metrics.csv").read_text().splitlines() == ["method,metric"]
    board = (work / "results/leaderboard.md").read_text()
    assert "| rank | agent | score | ptflow weights |" in board
    why = [line for line in board.splitlines() if "no leaderboard score" in line]
    assert why == [
        "- no leaderboard score: its models are tiny-qwen3-h64, not scripts/compute_single_metrics.py's "
        "Qwen3-1.7B-Base, Qwen3-4B-Base, SmolLM3-3B-Base, gemma-3-4b-pt"
    ]
    assert "- ranked by ptflow weights" in board and str(checkout / "scripts/factors.json") in board


def test_the_echoed_key_is_in_no_file_of_the_run_the_export_or_snakemakes_output(done, exported):
    work, key = done["work"], KEY["OPENAI_API_KEY"]
    dest, proc = exported["dest"], exported["proc"]  # the export ran with the key in its environment too
    # the echo happened: solve.sh's line, then the value masked, in the trace and in the exported solve_out.txt
    echoed = "key in CODEX_API_KEY:\n***\n"
    for ev in AGENT_EVALS:
        assert echoed in (work / CELLS / ev / "codex" / "agent" / "stdout.log").read_text(), ev
    exported = list(dest.rglob("solve_out.txt"))
    assert len(exported) == len(AGENT_EVALS) and all(echoed in p.read_text() for p in exported)
    # results, scratch (.scratch), .snakemake (its logs, the Slurm logs), traces, manifests, the export (with the
    # checkout's aggregation tables over it), and
    # Snakemake's captured stdout/stderr of both runs (first.out, second.out)
    files = [p for p in work.rglob("*") if p.is_file() and not p.is_symlink()]
    assert any(p.parent.name == "slurm_logs" or "slurm_logs" in p.parts for p in files)
    assert (work / "first.out").is_file() and (work / "second.out").is_file()
    holding = [str(p.relative_to(work)) for p in files if key.encode() in p.read_bytes()]
    assert holding == [], holding
    assert key not in done["second"].stdout + done["second"].stderr and key not in proc.stdout + proc.stderr


def test_a_checkout_whose_list_lacks_an_evaluations_dataset_is_refused_at_preflight(slurm_cluster):
    """The same run, but the checkout's resources.json lacks humaneval's dataset: the cache job would never fetch it
    and the offline evaluation would fail on every try. The driver's preflight refuses it in one line naming the
    eval and the repo, before a single job is submitted."""
    with _work_dir("ptb-refused") as work:
        checkout = work / "PostTrainBench"
        commit = make_fixture_checkout(checkout, evals=EVALS, agents=("codex",), leave_out=("openai/openai_humaneval",))
        env = {**slurm_cluster.env, **KEY}
        # reachable, so only the list's gap is refused: the preflight opens a TCP connection to the endpoint and
        # sends no request (ptflow.cluster.hfcache.hub_reachable), so the stand-in serves no repo
        with HubStandIn([]) as hub:
            env["HF_ENDPOINT"] = hub.url
            (work / "overlay.yaml").write_text(yaml.safe_dump(_config(checkout, commit, "http://127.0.0.1:9/v1")))
            proc = snakemake(
                work, "--configfile", str(work / "overlay.yaml"), "--config", f"site={SITE}",
                env=env, profile="profiles/slurm", check=False,
            )  # fmt: skip
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0, out[-3000:]
        assert "preflight found 1 problem(s); nothing was submitted" in out, out[-3000:]
        line = next(ln for ln in out.splitlines() if "evals[humaneval]" in ln)
        assert "dataset openai/openai_humaneval (config openai_humaneval)" in line and "does not list" in line
        assert "has been submitted with SLURM jobid" not in out
        assert not (work / ".snakemake" / "slurm_logs").exists()


def test_a_cache_missing_the_form_an_evaluation_asks_fails_the_cache_job_and_submits_no_gpu_job(slurm_cluster):
    """The hub has gsm8k at its default branch only, not at the revision inspect_evals pins (the evaluation's form):
    the cache job on the cluster warms what it can, loads each evaluation's data offline as its evaluate.py asks,
    fails with one line naming the eval, the dataset and the arguments, and no evaluation or agent job is submitted
    (they would have failed offline after the agent's hours)."""
    with _work_dir("ptb-form") as work:
        checkout = work / "PostTrainBench"
        commit = make_fixture_checkout(checkout, evals=("gsm8k",), agents=("codex",))
        env = {**slurm_cluster.env, **KEY}
        repos = hub_repos(("gsm8k",))
        for repo in repos:
            repo.commit = "0" * 40 if repo.repo_id == "openai/gsm8k" else repo.commit
        config = _config(checkout, commit, "http://127.0.0.1:9/v1")
        config["evals"] = [e for e in config["evals"] if e["id"] == "gsm8k"]
        config["scoring"] = {"weights": {"gsm8k": 1.0}}
        config["matrix"] = {"models": [MODEL_ID], "evals": ["gsm8k"], "agents": ["baseline", "codex"]}
        with HubStandIn(repos) as hub:
            env["HF_ENDPOINT"] = hub.url
            (work / "overlay.yaml").write_text(yaml.safe_dump(config))
            targets = [str(CELLS / "gsm8k" / agent / "eval.json") for agent in ("baseline", "codex")]
            # no retries: the profile's two would make the same miss again (the line is the proof, not its repeats)
            proc = snakemake(
                work, *targets, "--retries", "0", "--configfile", str(work / "overlay.yaml"),
                "--config", f"site={SITE}", env=env, profile="profiles/slurm", check=False,
            )  # fmt: skip
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0, out[-3000:]
        log = (work / "results/logs/posttrainbench/hf_cache.log").read_text()
        line = next(ln for ln in log.splitlines() if "MissingReposError" in ln or "does not load offline" in ln)
        assert "evals gsm8k: dataset openai/gsm8k (data_dir='main', split='train', revision=" in line, line
        assert "could not be fetched" in line
        logs = work / ".snakemake" / "slurm_logs"
        assert (logs / "rule_posttrainbench_cache").is_dir()  # it ran as a Slurm job of its own
        submitted = sorted(p.name for p in logs.iterdir())
        assert not [r for r in submitted if r.startswith(("rule_evaluate", "rule_train", "rule_judge"))], submitted
