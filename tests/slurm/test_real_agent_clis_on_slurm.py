"""The real claude, codex and gemini CLIs in PostTrainBench agent cells on the real test Slurm cluster (the
scripted agent's cells run on the local profile: tests/e2e/test_agent_cells.py).

Each CLI is the npm package at its pin (``tests/support/agent_clis.py``, installed once and cached), run by the
normal rules (train as a Slurm job through the cli-agent machinery, evaluate, judge) against the provider STAND-IN
of ``tests/support/providers`` (no provider API is reachable here), reached through the agents' ``base_url``. The
stand-in replays a trajectory (``TRAJECTORY``): read the prompt, train (SFT on the train split) and measure the
result with the task dir's ``evaluate.py --limit 2``, save ``final_model/``, show it and the measurement, end. The
judge is the real codex too, in a CPU job, writing the two verdict files in a copy of one cell's workspace. Keys:
each protocol accepts only its own fake key (another gets 401), and no key value may appear in any file of the run.

What is under test is the path through the real CLIs, not what SFT learns (tests/e2e/test_agent_cells.py::
test_scripted_agent_beats_baseline: the same scripted agent's SFT beats the baseline by 0.3). So no baseline cell
(an evaluation, ~20 CPU-s), a short training, a short test split and one judge, the upstream outputs made by a local
run: 7 Slurm jobs, was 13.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from pathlib import Path

import pytest
import yaml

from ptflow.stages.checkpoint import describe_checkpoint
from ptflow.stages.evaluate.run import validate_eval_json
from ptflow.stages.judge.trace import readable_trace
from tests.e2e.smk import REPO, snakemake
from tests.support.agent_clis import cli_bin_dir
from tests.support.providers import ProviderStandIn
from tests.support.providers.server import JUDGE_MARK, default_trajectory, judge_trajectory

pytestmark = pytest.mark.timeout(1500)

SITE = REPO / "tests" / "slurm" / "localtest.yaml"
CELLS = Path("results") / "cells" / "ptflow--tiny-llama-h64" / "add"
KEYS = {  # a distinct fake value per provider key: a CLI given another's key is refused by the stand-in
    "ANTHROPIC_API_KEY": "sk-ant-FAKE-3b0d1e",
    "OPENAI_API_KEY": "sk-oai-FAKE-77c2a9",
    "GEMINI_API_KEY": "AIza-FAKE-5e8f01",
}
AGENTS = {  # id -> (cli, model as configured, key name, protocol)
    "claude": ("claude", "claude-sonnet-4-5", "ANTHROPIC_API_KEY", "anthropic"),
    "codex": ("codex", "gpt-5.1-codex-max", "OPENAI_API_KEY", "openai"),
    "gemini": ("gemini", "gemini-3-pro-preview", "GEMINI_API_KEY", "gemini"),
}
SHELL_TOOLS = {"claude": {"Bash"}, "codex": {"shell", "shell_command", "exec_command"}, "gemini": {"run_shell_command"}}
JUDGE_MODEL = "gpt-5.1-codex"
# The one cell the judge audits (a CPU job, ~6.5 CPU-s each; was every cell): what it proves (real codex as a CPU
# job, judging in a copy of a cell's workspace, its key in no file) does not depend on the cell's CLI. Claude's: a
# workspace another CLI than the judge's wrote. The judge job also writes the cell's trace.md; the other cells'
# traces are rendered by the same function (ptflow.stages.judge.trace.readable_trace) from their kept streams.
JUDGED = "claude"
# The trajectory's SFT: a real TRL training in the CLI's shell, whose model is measured (evaluate.py) and evaluated;
# its length is not under test (at 0.07 CPU-s a step, 150 steps cost ~10 CPU-s a cell: what it takes to beat the
# base model by 0.2, which the e2e test above proves for this scripted agent). Here: the weights changed.
TRAIN_STEPS = 10
# The cell's evaluation (in its train job): 16 test samples instead of the default's 64 (~2.7 CPU-s a cell); only
# that it is scored, on the model the CLI saved, is asserted here.
N_TEST = 16
# Made by a local run before the Slurm run (the fixture says why)
UPSTREAM = ("results/data/add/train.parquet", "results/cache/models/ptflow--tiny-llama-h64.json")
# What every CLI is made to do, in its shell tool (its evaluate.py run is the scripted agent's measurement)
TRAJECTORY = default_trajectory(TRAIN_STEPS)


@pytest.fixture(scope="module")
def done(slurm_cluster):
    bins = [str(cli_bin_dir(name)) for name in ("claude", "codex", "gemini")]
    root = Path("/var/lib/ptflow-tests")  # shared-path rule of Slurm sites: not /tmp
    root.mkdir(parents=True, exist_ok=True)
    work = root / f"real-clis-{uuid.uuid4().hex[:8]}"
    work.mkdir()
    expected = {protocol: KEYS[key] for _, _, key, protocol in AGENTS.values()}
    # The eval catalog cut to `add`, the one eval of the matrix: with the default's catalog, the tiny model's cache
    # job waits for every catalog dataset (its tokenizer covers them all), so `sub` cost a Slurm job (~8 CPU-s) no
    # assertion reads.
    (add,) = [e for e in yaml.safe_load((REPO / "config" / "config.yaml").read_text())["evals"] if e["id"] == "add"]
    add["dataset"]["generator"]["n_test"] = N_TEST
    with ProviderStandIn(TRAJECTORY, expected_key=expected, routes=[(JUDGE_MARK, judge_trajectory())]) as api:
        overlay = {
            "agents": [
                {
                    "id": aid,
                    "kind": "cli-agent",
                    "cli": cli,
                    "model": model,
                    "hours": 0.15,
                    "grace_minutes": 0.5,
                    "keys": [key],
                    "base_url": api.url,
                }  # fmt: skip
                for aid, (cli, model, key, _) in AGENTS.items()
            ],
            "judge": {"agent": "codex", "model": JUDGE_MODEL, "keys": ["OPENAI_API_KEY"], "base_url": api.url},
            "evals": [add],
            "matrix": {"models": ["ptflow/tiny-llama-h64"], "evals": ["add"], "agents": "all"},
        }
        (work / "overlay.yaml").write_text(yaml.safe_dump(overlay))
        targets = [str(CELLS / a / "eval.json") for a in AGENTS] + [str(CELLS / JUDGED / "judge.json")]
        env = {**slurm_cluster.env, **KEYS}
        env["PATH"] = ":".join([*bins, env.get("PATH") or os.environ["PATH"]])
        # The upstream outputs (the model, the dataset, the eval's split) from a local run of the same workflow first,
        # as test_resume_on_slurm makes them: nothing here reads how they were made (test_workflow_on_slurm runs
        # those rules as Slurm jobs), and as three Slurm jobs they cost ~22 CPU-s and two status waits.
        args = ("--configfile", str(work / "overlay.yaml"), "--config", f"site={SITE}")
        snakemake(work, *args, "--", *UPSTREAM, env=env)
        proc = snakemake(
            work, *args, "--", *targets, env=env, profile="profiles/slurm", check=False,
        )  # fmt: skip
        (work / "snakemake.out").write_text(proc.stdout + proc.stderr)  # kept with PTFLOW_KEEP_TEST_WORK=1
        assert proc.returncode == 0, f"snakemake failed ({proc.returncode}): {proc.stderr[-3000:]}"
        records = list(api.records)
    yield work, proc, records
    if not os.environ.get("PTFLOW_KEEP_TEST_WORK"):
        shutil.rmtree(work, ignore_errors=True)


def _main(records, protocol, model=None):
    return [r for r in records if r["api"] == protocol and r.get("main") and (model is None or r["model"] == model)]


@pytest.mark.parametrize("agent", list(AGENTS))
def test_real_cli_cell_is_trained_evaluated_and_judged(done, agent):
    work, _, records = done
    cli, model, _, protocol = AGENTS[agent]
    data = json.loads((work / CELLS / agent / "eval.json").read_text())
    validate_eval_json(data)
    # (on failure: what the CLI's shell steps printed, e.g. why its training left no final_model/)
    trace = work / CELLS / agent / "agent" / "stdout.log"
    tail = trace.read_text()[-4000:] if trace.is_file() else "(no agent/stdout.log)"
    assert data["status"] == "scored" and data["agent_run"]["exit_code"] == 0, f"{data['agent_run']}\n{tail}"
    assert data["metrics"]["name"] == "accuracy" and data["metrics"]["n"] == N_TEST, data["metrics"]
    manifest = json.loads((work / CELLS / agent / "checkpoint.json").read_text())
    # the model evaluated is the final_model/ the CLI's training saved (copied and hashed by the train job), and its
    # weights are trained ones, not the base model's. (That this SFT makes it better than the base model, which
    # needs a baseline cell and a 150-step training: tests/e2e/test_agent_cells.py::test_scripted_agent_beats_baseline)
    assert data["checkpoint"]["kind"] == "trained" and data["checkpoint"]["path"] == manifest["checkpoint"]
    base_weights = describe_checkpoint(Path(manifest["start_model"]))["weights"]
    trained = {w["sha256"] for w in manifest["weights"]}
    assert trained and not trained & {w["sha256"] for w in base_weights}, (manifest["weights"], base_weights)
    assert manifest["agent_run"]["cli"] == cli and manifest["agent_run"]["cli_version"]
    job_id = manifest["slurm_job_id"]
    # one GPU allocation per cell: evaluated in its train job's allocation after the agent, adopted by evaluate
    assert job_id and data["slurm_job_id"] == job_id and data["evaluated_in"] == "train_job"
    # the provider received the configured model, with the CLI's shell tool, turn after turn to the end
    main = [r for r in _main(records, protocol) if JUDGE_MODEL != r["model"]]
    assert main and {r["model"] for r in main} == {model}, {r["model"] for r in main}
    assert all(r["key_ok"] and r["status"] == 200 for r in main)
    assert SHELL_TOOLS[cli] & set(main[0]["tools"])
    assert max(r["step"] for r in main) == len(TRAJECTORY) - 1  # every step of the trajectory, the final answer too
    # the API spend the CLI printed, in eval.json: what the stand-in served (100 + 10 tokens per response)
    served = [r for r in records if r["api"] == protocol and r.get("status") == 200 and not r.get("other")
              and r["model"] != JUDGE_MODEL]  # fmt: skip
    spent = data["agent_run"]["api_usage"]
    assert (spent["input_tokens"], spent["output_tokens"]) == (100 * len(served), 10 * len(served)), spent
    assert (spent["cost_usd"] is not None) == (cli == "claude")  # claude alone prices its calls
    # trace.md shows every tool call and its result readably, in this CLI's own stream format (the judge job writes
    # it; in the cells not judged, the same rendering of the CLI's stream, as the judge job would write it)
    kept = work / CELLS / agent / "agent"
    if agent == JUDGED:
        trace = (kept / "trace.md").read_text()
    else:
        stdout, stderr = ((kept / name).read_text(errors="replace") for name in ("stdout.log", "stderr.log"))
        trace = readable_trace(stdout, stderr, cli=cli)
    commands = ("head -n 5 prompt.md", "ptflow.standins.scripted_agent", "ls final_model", "cat work/metrics.json")
    for command in commands:
        assert command in trace, f"{command!r} missing from {agent}'s trace.md"
    assert "config.json" in trace  # a tool result (the listing of final_model/), not only the call
    # the task dir's evaluate.py ran in this CLI's shell (the scripted agent's measurement, its metrics.json shown;
    # before, the trajectory's own evaluate.py call of the base model stood for this, only its command asserted)
    assert "gsm8k_strict" in trace, f"no evaluate.py result in {agent}'s trace.md"
    # the judge: real codex in a copy of this cell's workspace, in a CPU job (one cell: JUDGED says why)
    if agent != JUDGED:
        return
    judge = json.loads((work / CELLS / agent / "judge.json").read_text())
    assert judge["status"] == "judged" and judge["flagged"] is False, judge
    assert "no contamination detected" in judge["reason"]
    assert (work / CELLS / agent / "agent" / "contamination_judgement.txt").is_file()


def test_an_agent_cells_evaluate_job_is_a_cpu_job_that_adopts(done):
    """The evaluate jobs of the agent cells were sized to adopt (the aggregate request: no GPU). (A baseline's, with
    no train job before it, evaluates on its GPU request: tests/slurm/test_workflow_on_slurm.py::
    test_recorded_request_equals_site checks every evaluate job's request, a baseline cell's among them.)"""
    work, _, _ = done
    blocks = [b for b in (work / "snakemake.out").read_text().split("rule ") if b.startswith("evaluate:")]
    gpu = {re.search(r"agent=([\w.-]+)", b).group(1): "gpu" in b.split("resources:")[1].splitlines()[0]
           for b in blocks}  # fmt: skip
    assert gpu == {"claude": False, "codex": False, "gemini": False}
    for agent in AGENTS:
        log = (work / "results" / "logs" / "evaluate" / "ptflow--tiny-llama-h64" / "add" / f"{agent}.log").read_text()
        assert "adopted the evaluation its train job made" in log and "evaluating in this job" not in log


def test_judge_ran_real_codex_as_cpu_jobs(done, slurm_cluster):
    work, _, records = done
    judge = _main(records, "openai", JUDGE_MODEL)
    assert len(judge) >= 3 and all(r["status"] == 200 for r in judge)  # one judge (JUDGED), three requests
    # the panel of one judge (config judge: codex): one vote, judges/codex/run1, and the panel's decision
    logs = list((work / "results" / "logs" / "judge_run").rglob("*.log"))
    assert [(p.parent.parent.name, p.parent.name, p.stem) for p in logs] == [(JUDGED, "codex", "run1")], logs
    assert all("judge (codex, gpt-5.1-codex) in a copy of" in p.read_text() for p in logs)
    # the vote was a Slurm job of its own (not the login node), with no GPU in its request; the decision is not
    assert len(list((work / ".snakemake" / "slurm_logs" / "rule_judge_run").rglob("*.log"))) == 1
    assert not (work / ".snakemake" / "slurm_logs" / "rule_judge").exists()
    blocks = [b for b in (work / "snakemake.out").read_text().split("rule ") if b.startswith("judge_run:")]
    assert len(blocks) == 1 and not any("gpu" in b.split("resources:")[1].splitlines()[0] for b in blocks)


def test_each_cli_sees_only_its_own_key_and_no_key_is_written(done):
    work, proc, records = done
    assert all(r.get("key_ok", True) for r in records), [r for r in records if not r.get("key_ok", True)]
    needles = [v.encode() for v in KEYS.values()]
    leaks = [str(p) for p in work.rglob("*") if p.is_file() and any(n in p.read_bytes() for n in needles)]
    assert leaks == []  # results, logs, slurm_logs, the kept workspaces (settings files ptflow wrote included)
    assert not any(v in proc.stdout + proc.stderr for v in KEYS.values())
