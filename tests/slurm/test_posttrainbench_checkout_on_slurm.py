"""PostTrainBench from a pinned checkout, end to end on the real test Slurm cluster, through a FIXTURE checkout
(``tests/support/ptb_checkout.py``: small programs of ours under PostTrainBench's paths and interfaces).

One model x two evals (posttrainbench/gsm8k, posttrainbench/humaneval): baseline cells of both, one codex cell
(gsm8k). The checkout is a file target (its marker records the commit and the object ids of the paths used), every
cell is evaluated by the checkout's ``evaluate.py`` with run_task.sh's arguments, the codex cell gets the checkout's
prompt and runs its ``agents/codex/solve.sh`` (the real codex CLI against the provider STAND-IN), and the judge gets
the checkout's judge prompt. Then a new commit that changes humaneval's ``evaluate.py`` and brings d27a95e's judge
files (``tests/support/ptb_judge_v11.py``: run_judge.sh's panel, its prompts, aggregate_judgement.py, the v1.1
aggregate_contamination.py) reruns the humaneval cell and the agent cell's JUDGE only: the gsm8k cells' evaluations
and the agent's training stand (no train or evaluate job of theirs is submitted), and the codex cell is judged by
run_judge.sh's panel of three votes with the REAL CLIs against their stand-ins: ``gpt`` and ``api`` the real codex
signed in with a FIXTURE ChatGPT ``auth.json`` (codex's real format, its tokens fresh each session;
``posttrainbench.judge.auth_json``), ``kimi`` the real opencode with a fresh ``OPENCODE_API_KEY``
(``posttrainbench.judge.base_url`` points both CLIs at the stand-in). Each judge lists its home first: the home and
the command line are the ones ``judge_v11`` makes (tests/unit/test_ptb_judge_v11.py proves them run_judge.sh's).
``ptflow export --posttrainbench`` writes PostTrainBench's results layout (the three judgement_*.json and
judge_result.json among it), on which the checkout's own aggregation scripts give, cell for cell, the score ptflow
gives. The eval dirs' ``info.json`` (which d27a95e adds to every eval dir, read by its judge prompt only) is in the
first commit already: ptflow keys an evaluation and an agent cell on its whole eval dir, so adding it would retrain
and reevaluate every cell (what a real upgrade to d27a95e does today).

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
the cache job with its line, and no evaluation or agent job is submitted. A checkout of PostTrainBench's main line
(tests/support/ptb_main.py) whose run_final_eval.sh has no --default-seeds query (214ccb4's form) is refused at
planning on its evaluation part, judge off, and sbatch is never called (main's seeded final evaluation itself runs:
tests/e2e/test_posttrainbench_final_eval.py).
"""

from __future__ import annotations

import contextlib
import csv
import itertools
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from ptflow.stages.evaluate.run import validate_eval_json
from ptflow.stages.judge.sign_in import subscription_secrets
from ptflow.stages.posttrainbench import judge_v11 as v11
from ptflow.stages.posttrainbench.data_probe import PROBE_MODEL
from tests.e2e.smk import REPO, snakemake
from tests.support.agent_clis import cli_bin_dir
from tests.support.codex_sign_in import write_codex_sign_in
from tests.support.hubstandin import HubStandIn
from tests.support.providers import ProviderStandIn
from tests.support.providers.server import Step, checkout_trajectory, judge_trajectory
from tests.support.ptb_checkout import (
    BENCHMARKS,
    commit_change,
    commit_judge_v11,
    hub_repos,
    make_fixture_checkout,
    run_task_listing,
)
from tests.support.ptb_judge_v11 import judge_files

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
# the v1.1 panel (second run): fresh secrets each session, none of which may be kept in any file
OPENCODE_KEY = "sk-oc-" + secrets.token_hex(20)
ACCESS_TOKEN = "fixture-access-" + secrets.token_hex(20)
REFRESH_TOKEN = "rt-fixture-" + secrets.token_hex(20)
V11_ROUTE = "FIXTURE judge prompt v1.1"  # the first words of the fixture's prompts (get_judge_prompt.py)
V11_API_ROUTE = "FIXTURE API-usage judge prompt"
# each v1.1 judge lists its whole home first (it works in <home>/task)
HOME_LISTING = "cd .. && find . -printf '%y %P\\n' | sort -k2"
CLEAN = {"contamination": False, "disallowed_model": False, "justification_contamination": "stand-in: clean data",
         "justification_disallowed_model": "stand-in: a fine-tune of the base model"}  # fmt: skip
API_CLEAN = {"disallowed_api_usage": False, "justification_disallowed_api_usage": "stand-in: no hosted LLM API"}
TRAIN_STEPS = 150
# The agent's last command and the judge's first: the listing of their working directory (type, inode, path), read
# back from their traces (codex's command events).
LISTING = "find . -printf '%y %i %P\\n' | sort -k3"


def _config(checkout: Path, commit: str, api_url: str, judge: dict | None = None) -> dict:
    return {
        "posttrainbench": {"path": str(checkout), "commit": commit, **({"judge": judge} if judge else {})},
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


def _v11_routes() -> list[tuple[str, list[Step]]]:
    """The v1.1 judges' trajectories: list the home, write the task dir's judgement.json (clean), end."""

    def verdict(data: dict) -> list[Step]:
        return [Step(shell=HOME_LISTING), Step(shell=f"printf '%s' '{json.dumps(data)}' > judgement.json"),
                Step(text="judgement.json is written.")]  # fmt: skip

    return [(V11_API_ROUTE, verdict(API_CLEAN)), (V11_ROUTE, verdict(CLEAN))]


@pytest.fixture(scope="module")
def done(slurm_cluster):
    root = Path("/var/lib/ptflow-tests")  # shared-path rule of Slurm sites: not /tmp
    root.mkdir(parents=True, exist_ok=True)
    work = root / f"ptb-checkout-{uuid.uuid4().hex[:8]}"
    work.mkdir()
    checkout = work / "PostTrainBench"
    make_fixture_checkout(checkout, evals=EVALS, agents=("codex",))
    # d27a95e's info.json of every eval dir, from the start (the module docstring says why)
    infos = {rel: text for rel, text in judge_files(EVALS, BENCHMARKS).items() if rel.endswith("/info.json")}
    for rel, text in infos.items():
        first = commit_change(checkout, rel, text, f"{rel} (d27a95e's, ahead of its judge)")
    # outside the run's directory: the user's file
    signin = write_codex_sign_in(root / f"{work.name}-signin" / "auth.json", ACCESS_TOKEN, REFRESH_TOKEN)
    calls = work / "evaluate_calls.jsonl"
    env = {**slurm_cluster.env, **KEY, "OPENCODE_API_KEY": OPENCODE_KEY, "PTB_FIXTURE_CALLS": str(calls)}
    env["PATH"] = ":".join([str(cli_bin_dir("codex")), str(cli_bin_dir("opencode")),
                            env.get("PATH") or os.environ["PATH"]])  # fmt: skip
    # the judge: its prompt asks for the answer alone; it lists its directory first
    routes = [(JUDGE_ROUTE, [Step(shell=LISTING), *judge_trajectory(answer_only=True)[1:]]), *_v11_routes()]
    agent = checkout_trajectory(TRAIN_STEPS)  # it lists its task dir first (ls -A)
    agent = [*agent[:-1], Step(shell=LISTING), agent[-1]]  # the agent lists its task dir as it leaves it
    repos = hub_repos(EVALS)
    with (
        ProviderStandIn(
            agent,
            routes=routes,
            # opencode asks Zen's small model (titles) over the Responses API with its key
            expected_key={"openai": (KEY["OPENAI_API_KEY"], ACCESS_TOKEN, OPENCODE_KEY), "openai_chat": OPENCODE_KEY},
        ) as api,  # fmt: skip
        HubStandIn(repos) as hub,
    ):
        env["HF_ENDPOINT"] = hub.url  # the cache job's downloads (a CPU job on the cluster) go to the stand-in
        (work / "overlay.yaml").write_text(yaml.safe_dump(_config(checkout, first, api.url)))
        _run(work, env, "first", CELL_TARGETS)
        # every cell's eval.json and the agent cell's judge.json (its train job, adopting evaluation and judge)
        before = _mtimes(work)
        # a new commit that changes humaneval's evaluate.py (a comment) and brings d27a95e's judge: the humaneval
        # cell and the agent cell's judge are affected
        script = checkout / "src/eval/tasks/humaneval/evaluate.py"
        script.write_text(script.read_text() + "# a new commit\n")
        second = commit_judge_v11(checkout, EVALS)
        judge = {"auth_json": str(signin), "base_url": f"{api.url}/v1"}
        (work / "overlay.yaml").write_text(yaml.safe_dump(_config(checkout, second, api.url, judge)))
        # the second run on a site whose compute nodes reach the hub: its evaluations run online, as run_task.sh's
        first_calls = len(calls.read_text().splitlines())
        online = yaml.safe_load(SITE.read_text())
        (work / "online-site.yaml").write_text(yaml.safe_dump({**online, "evaluation": {"hub": "online"}}))
        first_records = len(api.records)
        proc = _run(work, env, "second", AGGREGATE_TARGETS, site=work / "online-site.yaml")
        after = _mtimes(work)
        records = list(api.records)
        hub_requests = list(hub.requests)
    yield {"work": work, "checkout": checkout, "commits": (first, second), "calls": calls, "before": before,
           "after": after, "second": proc, "records": records, "hub": {(r.repo_type, r.repo_id): r.commit
           for r in repos}, "hub_requests": hub_requests,
           "first_calls": first_calls, "signin": signin,
           "first_records": first_records}  # fmt: skip
    if not os.environ.get("PTFLOW_KEEP_TEST_WORK"):
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(signin.parent, ignore_errors=True)


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
        # humaneval's cell (its evaluate.py changed) and the agent cell's judge (d27a95e's judge files came)
        assert changed == ("/humaneval/" in str(path) or path.name == "judge.json"), (path, changed)
    out = done["second"].stdout + done["second"].stderr
    assert "rule posttrainbench_checkout" in out or "checkpoint posttrainbench_checkout" in out
    # the jobs of the second run, by rule: the agent cell is judged again (three votes and the decision), and not
    # trained or evaluated again; humaneval's baseline is the one evaluation
    jobs = _jobs(out)
    assert sorted(rule for rule, _ in jobs) == sorted(
        ["posttrainbench_checkout", "judge_run", "judge_run", "judge_run", "judge", "evaluate", "aggregate"]
    ), jobs
    assert [w for rule, w in jobs if rule == "evaluate"] == [f"model={MODEL}, eval=humaneval, agent=baseline"], jobs
    assert sorted(w.rsplit("judge=", 1)[1] for rule, w in jobs if rule == "judge_run") == [
        "api, run=1", "gpt, run=1", "kimi, run=1"]  # fmt: skip


def _jobs(out: str) -> list[tuple[str, str]]:
    """(rule, wildcards) of every job a run's output shows started (its "rule X:" header; the jobs planned after the
    checkout checkpoint are in no "Job stats" table)."""
    jobs, lines = [], out.splitlines()
    for n, line in enumerate(lines):
        head = re.fullmatch(r"(?:local)?(?:rule|checkpoint) (\w+):", line)
        if head:
            block = itertools.takewhile(lambda ln: ln.startswith("    "), lines[n + 1 :])
            wildcards = next((ln.split("wildcards: ", 1)[1] for ln in block if "wildcards: " in ln), "")
            jobs.append((head.group(1), wildcards))
    return jobs


def _command_output(stdout_log: Path, marker: str) -> str:
    """The output of the first shell command holding ``marker`` in a judge's --json events (codex: an item's
    aggregated_output; opencode: a tool part's state output)."""
    for line in stdout_log.read_text(errors="replace").splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        item = ev.get("item") if isinstance(ev, dict) else None
        if isinstance(item, dict) and marker in str(item.get("command", "")) and item.get("status") == "completed":
            return str(item.get("aggregated_output", ""))
        state = ev.get("part", {}).get("state") if isinstance(ev, dict) and isinstance(ev.get("part"), dict) else None
        if isinstance(state, dict) and marker in json.dumps(state.get("input")) and "output" in state:
            return str(state["output"])
    raise AssertionError(f"no {marker!r} command in {stdout_log}")


CODEX_STATE = (".codex/sessions", ".codex/skills")


def _expected_home(judge, checkout: Path, task: set[str]) -> set[str]:
    """The paths of a v1.1 judge's home as judge_v11.judge_home_entries makes it (tests/unit/test_ptb_judge_v11.py
    proves them run_judge.sh's): ``task``, the task dir as the agent left it."""
    entries = v11.judge_home_entries(judge, checkout, "gsm8k", checkout / "NOT-USED", checkout / "NOT-USED")
    paths = {f"{v11.TASK}/{p}" for p in task} | {v11.TASK, "final_model_config.json"}
    for rel, source in entries:
        parts = Path(rel).parts
        paths |= {str(Path(*parts[: n + 1])) for n in range(len(parts))}
        if isinstance(source, Path) and source.is_dir() and rel != v11.TASK:
            paths |= {f"{rel}/{q.relative_to(source)}" for q in source.rglob("*")}
    return paths - {"NOT-USED"}


def test_the_v11_panel_judged_the_agent_cell_with_the_real_clis_as_run_judge_sh(done):
    """The second run's votes: gpt and api (the real codex signed in with the fixture auth.json: the stand-in saw
    its access token, the model and reasoning settings of run_judge.sh), kimi (the real opencode with the fresh
    key, opencode/kimi-k2.6); each in the home judge_v11 makes (run_judge.sh's: the task dir as the agent left it
    without judgement.json, the trace, the tools, the codex home or the task's opencode.json), with the command line
    judge_v11 gives (the job's log); judge.json holds the three votes, decided any, clean."""
    work, checkout = done["work"], done["checkout"]
    cell = work / CELLS / "gsm8k" / "codex"
    judged = json.loads((cell / "judge.json").read_text())
    assert judged["status"] == "judged" and judged["flagged"] is False, judged
    assert set(judged["judges"]) == {"gpt", "kimi", "api"} and len(judged["votes"]) == 3, judged
    assert judged["fields"] == {"contamination": False, "disallowed_model": False, "disallowed_api_usage": False}
    # the votes wrote nothing into the checkout (the codex home's config.toml is the home's own file)
    assert not subprocess.run(["git", "status", "--porcelain"], cwd=checkout, capture_output=True, text=True).stdout
    second = done["records"][done["first_records"] :]
    codex = [r for r in second if r["api"] == "openai" and r.get("main") and r["model"] == "gpt-5.4"]
    assert codex and all(r["key_index"] == 1 for r in codex)  # the sign-in's access token, not the API key
    assert {json.dumps(r["reasoning"], sort_keys=True) for r in codex} == {
        json.dumps({"effort": "xhigh", "summary": "detailed"}, sort_keys=True)}  # fmt: skip
    kimi = [r for r in second if r["api"] == "openai_chat" and r.get("main")]
    assert kimi and {r["model"] for r in kimi} == {"kimi-k2.6"} and all(r["key_ok"] for r in kimi)
    left = set(_listing(cell / "agent" / "stdout.log")) - {v11.VERDICT_FILE}
    logs = "\n".join(p.read_text(errors="replace") for p in (work / "results/logs").rglob("*") if p.is_file())
    for judge in v11.PANEL:
        kept = cell / "judges" / judge.id / "run1"
        vote = json.loads((cell / "judges" / judge.id / "run1.json").read_text())
        assert vote["status"] == "judged", vote
        verdict = json.loads((kept / v11.VERDICT_FILE).read_text())
        assert verdict == (API_CLEAN if judge.id == "api" else CLEAN), judge.id
        seen = {row.split(" ", 1)[1] for row in _command_output(kept / "judge_stdout.log", "find .").splitlines()
                if " " in row}  # fmt: skip
        seen.discard("")
        left.discard("")
        seen = {p for p in seen if not p.startswith(CODEX_STATE)}  # what codex itself writes when it starts
        assert seen == _expected_home(judge, checkout, left), (judge.id, seen ^ _expected_home(judge, checkout, left))
        shown = " ".join(judge.argv("<judge prompt>"))
        assert any(line.endswith("$ " + shown) and f"judge {judge.id} (" in line for line in logs.splitlines()), shown


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
    # the v1.1 panel's files in the agent cell's run dir, and the d27a95e aggregate_contamination.py read its
    # judge_result.json: the cell is clean ("", not "C:ERR M:ERR")
    (run,) = [p.parent for p in (dest / methods[0]).rglob("judge_result.json")]
    assert {p.name for p in run.glob("judge*.json")} == {"judgement_gpt5_4.json", "judgement_kimi.json",
                                                         "judgement_api.json", "judge_result.json"}  # fmt: skip
    assert json.loads((run / "judge_result.json").read_text())["contamination"] is False
    with open(dest / f"contamination_{methods[0]}.csv") as fh:
        assert [row["gsm8k"] for row in csv.DictReader(fh)] == [""]
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
    secrets_ = [key, OPENCODE_KEY, *subscription_secrets(done["signin"])]
    assert ACCESS_TOKEN in secrets_ and REFRESH_TOKEN in secrets_
    holding = [str(p.relative_to(work)) for p in files if any(s.encode() in p.read_bytes() for s in secrets_)]
    assert holding == [], holding
    out = done["second"].stdout + done["second"].stderr + (work / "first.out").read_text() + proc.stdout + proc.stderr
    assert not [s for s in secrets_ if s in out]


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


def test_a_main_like_checkout_is_refused_at_planning_with_the_judge_off_and_no_sbatch(slurm_cluster):
    """A checkout of PostTrainBench's main line (tests/support/ptb_main.py over the d27a95e fixture) whose
    run_final_eval.sh lacks the --default-seeds query (214ccb4's form: ptflow cannot ask it for seeds), the judge
    off: the run is refused when the workflow is parsed, in one line naming the evaluation part, its script and the
    evaluations ptflow runs. Nothing plans the one-shot evaluate.py in its stead; sbatch (counted by a shim before
    the real one on PATH) is called zero times."""
    from tests.support.ptb_main import commit_main

    with _work_dir("ptb-main") as work:
        checkout = work / "PostTrainBench"
        make_fixture_checkout(checkout, evals=EVALS, agents=("codex",), judge="v1.1")
        commit_main(checkout, evals=EVALS, agents=("codex",))
        script = (checkout / "src/eval/run_final_eval.sh").read_text().replace("--default-seeds", "--seeds-of")
        commit = commit_change(
            checkout, "src/eval/run_final_eval.sh", script, "run_final_eval.sh without --default-seeds"
        )
        env = {**slurm_cluster.env, **KEY}
        calls, shims = work / "sbatch.calls", work / "shims"
        shims.mkdir()
        real = shutil.which("sbatch", path=env.get("PATH", os.environ["PATH"]))
        assert real, "no sbatch on PATH"
        (shims / "sbatch").write_text(f'#!/bin/bash\necho "$@" >> {calls}\nexec {real} "$@"\n')
        (shims / "sbatch").chmod(0o755)
        env["PATH"] = f"{shims}:{env.get('PATH', os.environ['PATH'])}"
        config = _config(checkout, commit, "http://127.0.0.1:9/v1")
        config.pop("judge")  # the judge off: it skips the judges part, and no other
        (work / "overlay.yaml").write_text(yaml.safe_dump(config))
        proc = snakemake(
            work, "--configfile", str(work / "overlay.yaml"), "--config", f"site={SITE}",
            env=env, profile="profiles/slurm", check=False,
        )  # fmt: skip
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0, out[-3000:]
        head = f"config error at posttrainbench: the PostTrainBench checkout at {commit[:12]} has an evaluation"
        line = next((ln for ln in out.splitlines() if head in ln), None)
        assert line is not None, out[-3000:]
        assert "ptflow does not know (src/eval/run_final_eval.sh " in line, line
        assert "src/eval/run_final_eval.sh lacks '--default-seeds'" in line, line
        assert line.endswith(
            "ptflow knows 9082063's and d27a95e's one-shot evaluate.py and 13a49a0's seeded final "
            "evaluation (src/eval/run_final_eval.sh): pin one of those commits"
        )
        assert "turn the judge off" not in out
        assert not calls.exists(), calls.read_text()
        assert "has been submitted with SLURM jobid" not in out
        assert not (work / ".snakemake" / "slurm_logs").exists()
