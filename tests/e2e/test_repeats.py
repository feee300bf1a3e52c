"""Repeated runs of agents through `make demo`'s profile (profiles/local): `repeats: N` on an agent makes run k >= 2 of
each of its cells the cell ``<id>@run<k>``, with its own checkpoint and eval.json; a ``from:`` chain repeats run by
run; the leaderboard shows mean ± sample sd over runs, as PostTrainBench computes it; raising N later runs only the
new runs. The eval is rescored from its stored inspect logs too (``rescore: [exact_numeric]``), by a rule that runs
no model (issue 48)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from ptflow.results.cell_state import DONE
from tests.e2e.smk import REPO, plan, snakemake

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]

MODEL = "ptflow--tiny-llama-h64"
PTFLOW = str(Path(sys.executable).with_name("ptflow"))


def repeated(tmp: Path, sft_runs: int, grpo_runs: int) -> Path:
    """The embedded default on one model and eval, its sft agent run ``sft_runs`` times and grpo (from sft) run
    ``grpo_runs`` times: the override file a user would write."""
    default = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    runs = {"sft": sft_runs, "grpo": grpo_runs}
    agents = [{**a, "repeats": runs[a["id"]]} if a["id"] in runs else a for a in default["agents"]]
    override = tmp / f"repeats-{sft_runs}-{grpo_runs}.yaml"
    matrix = {"models": [default["models"][0]["id"]], "evals": ["add"], "agents": "all"}
    evals = [{**e, "rescore": ["exact_numeric"]} if e["id"] == "add" else e for e in default["evals"]]
    override.write_text(yaml.safe_dump({"agents": agents, "evals": evals, "matrix": matrix}))
    return override


@pytest.fixture(scope="module")
def done(tmp_path_factory):
    work = tmp_path_factory.mktemp("repeats")
    snakemake(work, "--configfile", str(repeated(work, 2, 2)))
    return work


def cell_dir(work: Path, agent: str) -> Path:
    return work / "results" / "cells" / MODEL / "add" / agent


def test_each_run_is_its_own_cell_and_a_chain_repeats_run_by_run(done):
    for slot in ("baseline", "sft", "sft@run2", "grpo", "grpo@run2"):
        data = json.loads((cell_dir(done, slot) / "eval.json").read_text())
        assert data["status"] == "scored" and data["agent"] == slot
    assert not cell_dir(done, "baseline@run2").exists()  # an agent without repeats runs once
    first, second = (json.loads((cell_dir(done, s) / "checkpoint.json").read_text()) for s in ("sft", "sft@run2"))
    # run k of a seeded trainer gets seed + k - 1: the runs are repeats, not copies
    assert (first["params"]["seed"], second["params"]["seed"]) == (0, 1)
    assert first["checkpoint"] != second["checkpoint"] and first["weights"] != second["weights"]
    # grpo's run 2 starts from sft's run 2
    grpo2 = json.loads((cell_dir(done, "grpo@run2") / "checkpoint.json").read_text())
    assert grpo2["from_manifest"] == str(Path("results/cells") / MODEL / "add" / "sft@run2" / "checkpoint.json")


def test_the_leaderboard_shows_mean_and_sd_over_runs(done):
    agents = pd.read_csv(done / "results" / "agents.csv").set_index("agent")
    assert agents.loc["sft", "runs"] == 2 and agents.loc["grpo", "runs"] == 2 and agents.loc["baseline", "runs"] == 1
    summary = pd.read_csv(done / "results" / "summary.csv")
    assert sorted(summary[summary["agent"] == "sft"]["run"]) == [1, 2]
    assert agents.loc["sft", "score_sd"] >= 0  # the sample sd over the two runs' scores (NaN with one run)
    board = (done / "results" / "leaderboard.md").read_text()
    sft_line = next(ln for ln in board.splitlines() if "| sft |" in ln or ln.startswith("| sft"))
    assert "sd (2 runs" in sft_line


def test_status_lists_every_run(done):
    proc = subprocess.run([PTFLOW, "status", "-d", str(done), "--json"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cells = {c["agent"]: c for c in json.loads(proc.stdout)["cells"]}
    assert {"sft", "sft@run2", "grpo", "grpo@run2"} <= set(cells)
    assert {cells[s]["state"] for s in ("sft", "sft@run2", "grpo", "grpo@run2")} == {DONE}


def test_raising_repeats_runs_only_the_new_runs(done):
    planned = plan(done, "--configfile", str(repeated(done, 3, 2)))
    trained = {p.split("/")[4] for p in planned.get("train", set())}
    evaluated = {p.split("/")[4] for p in planned.get("evaluate", set()) if p.endswith("eval.json")}
    assert trained == {"sft@run3"} and evaluated == {"sft@run3"}, planned.text[-3000:]
    assert not {"cache_model", "preprocess"} & set(planned)


def test_each_cell_is_rescored_from_its_stored_log(done):
    """Rule rescore read each cell's inspect log (no model: the checkpoints could be gone) and wrote its own result;
    summary.csv and the leaderboard carry it in a column of their own."""
    summary = pd.read_csv(done / "results" / "summary.csv")
    for slot in ("baseline", "sft", "sft@run2", "grpo", "grpo@run2"):
        data = json.loads((cell_dir(done, slot) / "eval.json").read_text())
        rescored = json.loads((cell_dir(done, slot) / "rescore" / "exact_numeric.json").read_text())
        assert rescored["metrics"]["n"] == data["metrics"]["n"] and 0 <= rescored["metrics"]["value"] <= 1
        assert rescored["stored_value"] == data["metrics"]["value"]
        agent, run = (slot.split("@run") + ["1"])[:2]
        row = summary[(summary["agent"] == agent) & (summary["run"] == int(run))]
        assert float(row["rescore_exact_numeric"].iloc[0]) == pytest.approx(rescored["metrics"]["value"], abs=1e-6)
    assert "Rescored from the stored inspect logs" in (done / "results" / "leaderboard.md").read_text()
    agents = pd.read_csv(done / "results" / "agents.csv").set_index("agent")
    assert agents["score_exact_numeric"].notna().all()
