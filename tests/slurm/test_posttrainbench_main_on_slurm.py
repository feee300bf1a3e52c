"""PostTrainBench's MAIN line end to end on the real test Slurm cluster, through Snakemake (profiles/slurm), on a
FIXTURE checkout of main (``make_fixture_checkout(..., judge="v1.1")`` then ``commit_main``, tests/support/ptb_main.py:
main's seeded final evaluation, its four judges, the agents' api_keys.json allowlist, collect.py and aggregate.py).

One model, one eval (posttrainbench/gsm8k), two cells, one Snakemake run (issue 58's proof):

- the **agent cell** (codex): the checkout's codex ``solve.sh`` runs the REAL codex CLI against the provider STAND-IN,
  its sandbox holding ONLY main's union (``agents/codex/api_keys.json`` + gsm8k's ``info.json``: CODEX_API_KEY with
  OPENAI_API_KEY's value): a probe line the test adds to solve.sh prints the sandbox's variable NAMES, and a key set
  in the driver's environment but not in the union (ZAI_API_KEY, main's for opencode) is not among them, nor is
  OPENAI_API_KEY (run_task.sh unsets it); solve.sh echoes its key, and no value is in any file (the echoed-key check);
  its task dir holds run_task.sh's copies and its home main's contamination_check.py and test_data.json;
  its model is GREEDY (fixture hook PTB_FIXTURE_GREEDY on its checkpoint's path): the train job's evaluation runs
  the first seed only, and the other four seeds' jobs record ``skipped``;
- its **four votes** of main's panel (data-contamination, api-usage, ptb-lookup, general), each a file target
  (``judges/<id>/run1.json``) run by the REAL codex CLI signed in with a FIXTURE ChatGPT ``auth.json``
  (``posttrainbench.judge.auth_json``; the stand-in accepts its access token) from the pinned home path
  ``.codex-cli-0.144.5`` (linked from ``posttrainbench.judge.codex_cli``: 0.144.5 cannot be installed offline), with
  main's model and effort; the general judge reports an anomaly, which judge.json records and nothing scores (main's
  ``record`` effect), the three others are clean;
- the **baseline cell**: a SAMPLING model, all five seeds of ``run_final_eval.sh --default-seeds`` as file targets
  (``seeds/<S>/eval.json``), its second seed failing every stage (fixture hook PTB_FIXTURE_FAIL_SEEDS: 4/3/2 attempts)
  and left out of the mean of the other four;
- then ``ptflow export --posttrainbench`` and the checkout's own ``scripts/collect.py`` + ``scripts/aggregate.py`` on
  the export: the agent's method table gives ptflow's cell score; aggregate.py scores no table of a tiny model
  (EXPECTED_MODELS), and ptflow's leaderboard says in one line why it has no score either.

Why no more: every cell is several Slurm jobs (~10 CPU-s of start-up each): a cell's five seeds are five evaluate_seed
jobs (the agent cell's adopt its train job's evaluation or record their skip: CPU jobs). The run is 22 jobs, 19 of them
on Slurm (the checkout's checkpoint, the model and HF caches, the training, ten seeds, four votes, the aggregate; the
seed means and the panel's decision on the login node), about 165 s on the 2-core test machine alone. The two cells
cover greedy (one seed) and sampling (five) and a later seed left out of the mean. What this module does NOT run, proven
elsewhere: a FIRST seed failing everywhere (the cell ``eval_failed``, counted as its baseline: PTB writes no
metrics.json) and greedy/sampling/failing seeds on three baseline models, equal to the checkout's
aggregate_seed_metrics.py (tests/e2e/test_posttrainbench_final_eval.py, locally); the export of such a cell and of
flagged, unjudged and failed cells, and collect.py's baselines.json fallback against ptflow's numbers
(tests/unit/test_ptb_export_main.py); the ptb-lookup ``stop`` and the fallback effects of a flag, a vote without a
verdict, the pinned CLI's npm install (tests/unit/test_ptb_judge_main.py); one vote with the real codex
(tests/integration/test_ptb_judge_main_codex.py); the union's other cases (tests/unit/test_ptb_sandbox_keys.py).
"""

from __future__ import annotations

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

from ptflow.keys import NOT_SECRETS, PUBLIC_VALUES, looks_like_secret
from ptflow.stages.evaluate.run import validate_eval_json
from ptflow.stages.judge.sign_in import subscription_secrets
from ptflow.stages.posttrainbench import judge_main as jm
from tests.e2e.smk import REPO, snakemake
from tests.support.agent_clis import cli_bin_dir
from tests.support.codex_sign_in import write_codex_sign_in
from tests.support.hubstandin import HubStandIn
from tests.support.providers import ProviderStandIn
from tests.support.providers.server import Step, checkout_trajectory
from tests.support.ptb_checkout import commit_change, hub_repos, make_fixture_checkout, run_task_listing
from tests.support.ptb_main import FINAL_EVAL_SEEDS, JUDGES, STAGE_MAX_RETRIES, commit_main, sandbox_api_keys

pytestmark = pytest.mark.timeout(1500)

SITE = REPO / "tests" / "slurm" / "localtest.yaml"
# a tiny model under a qwen name (the checkout's evaluate_final_eval.py picks its template by the path)
MODEL_ID = "ptflow/tiny-qwen3-h64"
MODEL = "ptflow--tiny-qwen3-h64"
EVAL = "gsm8k"
CELLS = Path("results") / "cells" / MODEL / EVAL
AGENT_MODEL = "gpt-5.1-codex-max"
# fresh values each session, none of which may be kept in any file
KEY = {"OPENAI_API_KEY": "sk-oai-" + secrets.token_hex(20)}
# set in the driver's (and so every job's) environment; main allowlists it for opencode, not codex: not in its sandbox
DECOY = {"ZAI_API_KEY": "sk-zai-" + secrets.token_hex(20)}
ACCESS_TOKEN = "fixture-access-" + secrets.token_hex(20)
REFRESH_TOKEN = "rt-fixture-" + secrets.token_hex(20)
FIRST, LATER_FAILING = FINAL_EVAL_SEEDS[0], FINAL_EVAL_SEEDS[1]
# PTB_FIXTURE_GREEDY: the agent cell's checkpoint (<scratch>/checkpoints/<model>/gsm8k/codex) decodes greedily
GREEDY_MARK = f"{EVAL}/codex"
TRAIN_STEPS = 150
# the probe solve.sh prints first: the names of the variables its sandbox holds (names only, one line)
PROBE = "sandbox variable names:"
# each judge's verdict (main's schema: JSON booleans, each with its justification); the general judge reports an
# anomaly, which main records and never scores
VERDICTS = {
    "data_contamination_judge": {"contamination": False, "disallowed_model": False,
                                 "justification_contamination": "stand-in: clean data",
                                 "justification_disallowed_model": "stand-in: a fine-tune of the base model"},
    "api_usage_judge": {"disallowed_api_usage": False,
                        "justification_disallowed_api_usage": "stand-in: no hosted LLM API"},
    "ptb_lookup_judge": {"disallowed_ptb_lookup": False,
                         "justification_disallowed_ptb_lookup": "stand-in: no benchmark lookup"},
    "general_judge": {"general_anomaly": True, "justification_general_anomaly": "stand-in: an odd but allowed step"},
}  # fmt: skip
HOME_LISTING = "ls -A .."  # each judge lists its home first (it works in <home>/task)
AGENT_HOME_LISTING = "ls -A ../"  # the agent lists its home after its task dir


def _config(checkout: Path, commit: str, api_url: str, judge: dict) -> dict:
    return {
        "posttrainbench": {"path": str(checkout), "commit": commit, "judge": judge},
        "models": [{"id": MODEL_ID, "source": "local", "tiny": {"layers": 2, "hidden": 64, "heads": 4, "seed": 0}}],
        "evals": [{"id": EVAL, "task": f"posttrainbench/{EVAL}"}],
        "agents": [
            {"id": "baseline", "kind": "baseline"},
            {
                "id": "codex",
                "kind": "cli-agent",
                "cli": "codex",
                "model": AGENT_MODEL,
                "hours": 0.15,
                "grace_minutes": 0.5,
                "keys": ["OPENAI_API_KEY"],
                "base_url": api_url,
            },
        ],  # fmt: skip
        # the judge on (main's panel replaces it: its cells are judged by the checkout's four judges)
        "judge": {"agent": "codex", "model": "gpt-5.1-codex", "keys": ["OPENAI_API_KEY"], "base_url": api_url},
        "scoring": {"weights": {EVAL: 1.0}},
        "matrix": {"models": [MODEL_ID], "evals": [EVAL], "agents": "all"},
    }


# The run's targets: every seed of both cells, the four votes, the decision, and the aggregate's outputs (which need
# every cell); the HF cache's whole-cache marker (a target of `all` only) is not built: nothing here reads it.
SEED_TARGETS = [
    str(CELLS / a / "seeds" / str(s) / "eval.json") for a in ("baseline", "codex") for s in FINAL_EVAL_SEEDS
]
VOTE_TARGETS = [str(CELLS / "codex" / "judges" / j.id / "run1.json") for j in jm.PANEL]
TARGETS = [*SEED_TARGETS, *VOTE_TARGETS, str(CELLS / "codex" / "judge.json"), "results/summary.csv",
           "results/leaderboard.md"]  # fmt: skip


def _routes() -> list[tuple[str, list[Step]]]:
    """Each judge (its prompt's first words, get_judge_prompt.py's): list the home, write its verdict, end."""

    def verdict(data: dict) -> list[Step]:
        return [Step(shell=HOME_LISTING), Step(shell=f"printf '%s' '{json.dumps(data)}' > judgement.json"),
                Step(text="judgement.json is written.")]  # fmt: skip

    return [(f"FIXTURE {name} prompt", verdict(VERDICTS[name])) for name in JUDGES]


def _probe_solve_sh(checkout: Path) -> str:
    """The checkout's codex solve.sh with a first line printing its sandbox's variable names; committed."""
    rel = "agents/codex/solve.sh"
    lines = (checkout / rel).read_text().splitlines(keepends=True)
    probe = f"echo \"{PROBE} $(compgen -e | sort | tr '\\n' ' ')\"\n"
    return commit_change(checkout, rel, "".join([lines[0], probe, *lines[1:]]), "solve.sh prints its variable names")


@pytest.fixture(scope="module")
def done(slurm_cluster):
    root = Path("/var/lib/ptflow-tests")  # shared-path rule of Slurm sites: not /tmp
    root.mkdir(parents=True, exist_ok=True)
    work = root / f"ptb-main-{uuid.uuid4().hex[:8]}"
    work.mkdir()
    outside = root / f"{work.name}-user"  # the user's files, outside the run's directory
    checkout = work / "PostTrainBench"
    make_fixture_checkout(checkout, evals=(EVAL,), agents=("codex",), judge="v1.1")
    commit_main(checkout, evals=(EVAL,), agents=("codex",))
    commit = _probe_solve_sh(checkout)
    signin = write_codex_sign_in(outside / "auth.json", ACCESS_TOKEN, REFRESH_TOKEN)
    prefix = outside / "codex-cli"  # a prefix holding bin/codex, as npm install -g --prefix leaves it
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "codex").symlink_to(cli_bin_dir("codex") / "codex")
    calls = work / "evaluate_calls.jsonl"
    env = {**slurm_cluster.env, **KEY, **DECOY, "PTB_FIXTURE_CALLS": str(calls), "PTB_FIXTURE_GREEDY": GREEDY_MARK,
           # every model's: the greedy agent never runs its second seed
           "PTB_FIXTURE_FAIL_SEEDS": str(LATER_FAILING)}  # fmt: skip
    env["PATH"] = ":".join([str(cli_bin_dir("codex")), env.get("PATH") or os.environ["PATH"]])
    agent = checkout_trajectory(
        TRAIN_STEPS
    )  # it lists its task dir first (ls -A), then its home (run_task.sh's job dir)
    agent = [agent[0], Step(shell=AGENT_HOME_LISTING), *agent[1:]]
    with (
        ProviderStandIn(agent, routes=_routes(), expected_key={"openai": (KEY["OPENAI_API_KEY"], ACCESS_TOKEN)}) as api,
        HubStandIn(hub_repos((EVAL,))) as hub,
    ):
        env["HF_ENDPOINT"] = hub.url
        judge = {"auth_json": str(signin), "base_url": f"{api.url}/v1", "codex_cli": str(prefix)}
        (work / "overlay.yaml").write_text(yaml.safe_dump(_config(checkout, commit, api.url, judge)))
        proc = snakemake(
            work, *TARGETS, "--configfile", str(work / "overlay.yaml"), "--config", f"site={SITE}",
            env=env, profile="profiles/slurm", check=False,
        )  # fmt: skip
        (work / "run.out").write_text(proc.stdout + proc.stderr)  # kept with PTFLOW_KEEP_TEST_WORK=1
        assert proc.returncode == 0, f"snakemake failed ({proc.returncode}): {proc.stderr[-3000:]}"
        records = list(api.records)
    yield {"work": work, "checkout": checkout, "commit": commit, "out": proc.stdout + proc.stderr,
           "records": records, "calls": calls, "signin": signin}  # fmt: skip
    if not os.environ.get("PTFLOW_KEEP_TEST_WORK"):
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(outside, ignore_errors=True)


def _jobs(out: str) -> list[tuple[str, str]]:
    """(rule, wildcards) of every job the run's output shows started (its "rule X:" header)."""
    jobs, lines = [], out.splitlines()
    for n, line in enumerate(lines):
        head = re.fullmatch(r"(?:local)?(?:rule|checkpoint) (\w+):", line)
        if head:
            block = itertools.takewhile(lambda ln: ln.startswith("    "), lines[n + 1 :])
            wildcards = next((ln.split("wildcards: ", 1)[1] for ln in block if "wildcards: " in ln), "")
            jobs.append((head.group(1), wildcards))
    return jobs


def _command_output(log: str, command: str) -> str:
    """The output of the first completed shell command holding ``command`` in a codex --json trace."""
    for line in log.splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        item = ev.get("item") if isinstance(ev, dict) and ev.get("type") == "item.completed" else None
        if isinstance(item, dict) and command in str(item.get("command", "")):
            return str(item.get("aggregated_output", ""))
    raise AssertionError(f"no completed {command!r} command in the trace")


def _seeds(work: Path, agent: str) -> dict[int, dict]:
    return {
        s: json.loads((work / CELLS / agent / "seeds" / str(s) / "eval.json").read_text()) for s in FINAL_EVAL_SEEDS
    }


def test_the_run_is_one_snakemake_run_of_few_slurm_jobs(done):
    """The jobs by rule (22): on the cluster the checkout's checkpoint, the model and HF caches, the agent's training,
    ten seeds, four votes and the aggregate (19 Slurm jobs); the two seed means and the panel's decision on the login
    node."""
    out = done["out"]
    jobs = _jobs(out)
    counts = {rule: sum(1 for r, _ in jobs if r == rule) for rule in dict.fromkeys(r for r, _ in jobs)}
    assert counts == {
        "posttrainbench_checkout": 1, "posttrainbench_cache": 1, "cache_model": 1, "train": 1, "evaluate_seed": 10,
        "seed_mean": 2, "judge_run": 4, "judge": 1, "aggregate": 1,
    }, jobs  # fmt: skip
    submitted = len(re.findall(r"has been submitted with SLURM jobid", out))
    assert submitted == 3 + 1 + 10 + 4 + 1, submitted


def test_the_agent_s_sandbox_holds_only_main_s_union_and_no_file_keeps_a_key(done):
    work, checkout = done["work"], done["checkout"]
    union = sandbox_api_keys(checkout, "codex", EVAL)
    assert union == ["CODEX_API_KEY"]  # agents/codex/api_keys.json; gsm8k's info.json requires none
    log = (work / CELLS / "codex" / "agent" / "stdout.log").read_text()
    line = next(ln for ln in log.splitlines() if ln.startswith(PROBE))
    names = set(line[len(PROBE) :].split())
    # the union, and no other key (ptflow's own names, and run_task.sh's public VLLM_API_KEY, aside)
    keyish = {n for n in names if looks_like_secret(n) and n not in NOT_SECRETS and n not in PUBLIC_VALUES}
    assert keyish == set(union), keyish
    assert "ZAI_API_KEY" not in names and "OPENAI_API_KEY" not in names
    # solve.sh echoed its key: its line, then the value masked
    assert "key in CODEX_API_KEY:\n***\n" in log
    # the stand-in saw the agent's requests with the key (CODEX_API_KEY), the judges' with the sign-in's token
    main = [r for r in done["records"] if r["api"] == "openai" and r.get("main")]
    agent = [r for r in main if r["model"] == AGENT_MODEL]
    judges = [r for r in main if r["model"] == jm.DEFAULT_MODEL]
    assert agent and all(r.get("key_index") == 0 for r in agent)
    assert judges and all(r.get("key_index") == 1 for r in judges)
    # no value in any file of the run (results, scratch, .snakemake's and Slurm's logs, the export once made) or in
    # Snakemake's output
    secrets_ = [KEY["OPENAI_API_KEY"], DECOY["ZAI_API_KEY"], *subscription_secrets(done["signin"])]
    assert ACCESS_TOKEN in secrets_ and REFRESH_TOKEN in secrets_
    files = [p for p in work.rglob("*") if p.is_file() and not p.is_symlink()]
    assert any("slurm_logs" in p.parts for p in files)
    holding = [str(p.relative_to(work)) for p in files if any(s.encode() in p.read_bytes() for s in secrets_)]
    assert holding == [], holding
    assert not [s for s in secrets_ if s in done["out"]]


def test_the_agent_cell_ran_the_checkouts_solve_sh_in_main_s_task_dir(done):
    work, checkout = done["work"], done["checkout"]
    log = next((work / "results/logs/train").rglob(f"{EVAL}/codex.log")).read_text()
    assert "agent_solve.sh" in log  # the checkout's agents/codex/solve.sh ran the CLI
    trace = (work / CELLS / "codex" / "agent" / "stdout.log").read_text()
    listed = _command_output(trace, "ls -A")  # the first: its task dir
    assert sorted(listed.split()) == run_task_listing(checkout, EVAL), listed  # run_task.sh's copies
    # its home (run_task.sh's job dir): solve.sh, and main's decontamination tool and the eval's test_data.json
    home = set(_command_output(trace, AGENT_HOME_LISTING).split())
    assert {"task", "agent_solve.sh", "contamination_check.py", "test_data.json"} <= home, home


def test_the_final_evaluation_s_seeds_greedy_agent_and_sampling_baseline(done):
    work = done["work"]
    # the agent cell: greedy, its first seed evaluated (in its train job's allocation), the others skipped
    agent = _seeds(work, "codex")
    assert agent[FIRST]["status"] == "scored" and agent[FIRST]["decoding"] == "greedy", agent[FIRST]
    assert all(agent[s]["status"] == "skipped" for s in FINAL_EVAL_SEEDS[1:]), agent
    mean = json.loads((work / CELLS / "codex" / "eval.json").read_text())
    validate_eval_json(mean)
    assert mean["status"] == "scored" and mean["seeds"]["num_seeds_succeeded"] == 1
    assert mean["metrics"]["value"] == agent[FIRST]["metrics"]["value"]
    # the baseline: sampling, five seeds, the second failing every stage (4/3/2 attempts) and left out of the mean
    base = _seeds(work, "baseline")
    assert base[FIRST]["decoding"] == "sampling"
    assert base[LATER_FAILING]["status"] == "eval_failed"
    assert len(base[LATER_FAILING]["attempts"]) == sum(STAGE_MAX_RETRIES)
    scored = [s for s in FINAL_EVAL_SEEDS if base[s]["status"] == "scored"]
    assert scored == [s for s in FINAL_EVAL_SEEDS if s != LATER_FAILING]
    mean = json.loads((work / CELLS / "baseline" / "eval.json").read_text())
    validate_eval_json(mean)
    assert mean["status"] == "scored" and mean["seeds"]["num_seeds_succeeded"] == 4
    values = [base[s]["metrics"]["value"] for s in scored]
    assert mean["metrics"]["value"] == pytest.approx(sum(values) / len(values))
    # every attempt ran the checkout's evaluate_final_eval.py with main's arguments, in the eval's dir
    calls = [json.loads(line) for line in done["calls"].read_text().splitlines()]
    final = [c for c in calls if "--seed" in c["argv"]]
    assert {c["cwd"] for c in final} == {str(done["checkout"] / f"src/eval/tasks/{EVAL}")}
    seeds = [c["argv"][c["argv"].index("--seed") + 1] for c in final]
    assert sorted(seeds) == sorted([str(FIRST)] * 2 + [str(LATER_FAILING)] * 9 + [str(s) for s in FINAL_EVAL_SEEDS[2:]])
    assert all(c["argv"][c["argv"].index("--limit") + 1] == "-1" for c in final)


def test_main_s_four_judges_voted_as_file_targets_with_main_s_effects(done):
    work = done["work"]
    cell = work / CELLS / "codex"
    for judge, name in zip(jm.PANEL, JUDGES, strict=True):
        vote = json.loads((cell / "judges" / judge.id / "run1.json").read_text())
        assert vote["status"] == "judged", vote
        kept = cell / "judges" / judge.id / "run1"
        assert json.loads((kept / jm.VERDICT_FILE).read_text()) == VERDICTS[name], judge.id
        stdout = (kept / "judge_stdout.log").read_text(errors="replace")
        # its home as judge_lib.sh's prepare_judge_sandbox/setup_judge_codex_auth make it, the pinned codex in it
        home = _command_output(stdout, HOME_LISTING)
        assert {
            "task",
            "solve_parsed.txt",
            "contamination_check.py",
            "model_identity_check.py",
            "reference_configs",
            "test_data.json",
            ".codex",
            f".codex-cli-{jm.DEFAULT_CODEX_VERSION}",
        } <= set(home.split()), home
    logs = "\n".join(p.read_text(errors="replace") for p in (work / "results/logs").rglob("*") if p.is_file())
    shown = [ln for ln in logs.splitlines() if "PostTrainBench main)" in ln]
    assert len(shown) == 4 and all(f".codex-cli-{jm.DEFAULT_CODEX_VERSION}/bin/codex --search -a never exec" in s
                                   and f"--model {jm.DEFAULT_MODEL} " in s for s in shown), shown  # fmt: skip
    judged = json.loads((cell / "judge.json").read_text())
    # the general judge's anomaly is recorded, and scores nothing (main's effect `record`): the cell stays clean
    assert judged["status"] == "judged" and judged["flagged"] is False and judged.get("effect") is None, judged
    assert judged["fields"] == {"contamination": False, "disallowed_model": False, "disallowed_api_usage": False,
                                "disallowed_ptb_lookup": False, "general_anomaly": True}, judged  # fmt: skip
    assert sorted(judged["judges"]) == sorted(j.id for j in jm.PANEL) and len(judged["votes"]) == 4, judged
    # the votes wrote nothing into the checkout
    assert not subprocess.run(["git", "status", "--porcelain"], cwd=done["checkout"], capture_output=True,
                              text=True).stdout  # fmt: skip


@pytest.fixture(scope="module")
def exported(done):
    """ONE ``ptflow export --posttrainbench`` of the run (the keys in its environment), then the checkout's
    collect.py and aggregate.py on it, as main runs them."""
    work, checkout = done["work"], done["checkout"]
    dest, out = work / "ptb-results", work / "ptb-aggregated"
    proc = subprocess.run(
        [sys.executable, "-m", "ptflow.ops.cli", "export", "--posttrainbench", str(dest), "-d", str(work)],
        capture_output=True, text=True, cwd=REPO, env={**os.environ, **KEY, **DECOY},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    for argv in (["scripts/collect.py", "--data-dir", str(dest), "--output-dir", str(out)],
                 ["scripts/aggregate.py", "--data-dir", str(out)]):  # fmt: skip
        run = subprocess.run([sys.executable, *argv], cwd=checkout, capture_output=True, text=True)
        assert run.returncode == 0, (argv, run.stdout, run.stderr)
    return {"dest": dest, "out": out, "proc": proc}


def test_main_s_collect_and_aggregate_on_the_export_give_ptflow_s_scores(done, exported):
    work, dest, out = done["work"], exported["dest"], exported["out"]
    methods = sorted(p.name[len("final_") : -len(".csv")] for p in out.glob("final_*.csv"))
    assert methods == [f"codex_{AGENT_MODEL}_0.15h"], methods
    (run,) = [p for p in (dest / methods[0]).iterdir() if p.is_dir()]
    # main's run dir: the judges' files as collect_judge_output names them, main's seeded metrics.json
    assert {p.name for p in run.glob("judgement_*.json")} == {
        "judgement_gpt5_4.json",
        "judgement_api.json",
        "judgement_ptb_lookup.json",
        "judgement_general.json",
    }
    cell = json.loads((work / CELLS / "codex" / "eval.json").read_text())
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["accuracy"] == pytest.approx(cell["metrics"]["value"], abs=1e-12)
    with open(out / f"final_{methods[0]}.csv") as fh:
        theirs = {row["model"]: row for row in csv.DictReader(fh)}["tiny-qwen3-h64"]
    with open(out / f"contamination_{methods[0]}.csv") as fh:
        assert [row[EVAL] for row in csv.DictReader(fh)] == [""]  # clean: no M, C or A flag
    with open(work / "results/summary.csv") as fh:
        rows = list(csv.DictReader(fh))
    (ours,) = [float(r["score"]) for r in rows if r["agent"] == "codex" and r["eval"] == EVAL]
    assert float(theirs[EVAL]) == pytest.approx(ours, abs=1e-9), (theirs, ours)
    assert ours == pytest.approx(cell["metrics"]["value"], abs=1e-9)
    # aggregate.py scores only tables of its four base models: none here; ptflow's leaderboard says why it has none
    assert (out / "single_metrics.csv").read_text().splitlines() == ["method,metric"]
    board = (work / "results/leaderboard.md").read_text()
    why = [line for line in board.splitlines() if "no leaderboard score" in line]
    assert why and all("its models are tiny-qwen3-h64" in line for line in why), board
    # and the export (with the keys in its environment) printed no key
    assert not [s for s in (KEY["OPENAI_API_KEY"], DECOY["ZAI_API_KEY"]) if s in exported["proc"].stdout
                + exported["proc"].stderr]  # fmt: skip
    secrets_ = [KEY["OPENAI_API_KEY"], DECOY["ZAI_API_KEY"], *subscription_secrets(done["signin"])]
    holding = [str(p) for p in dest.rglob("*") if p.is_file() and any(s.encode() in p.read_bytes() for s in secrets_)]
    assert holding == [], holding
