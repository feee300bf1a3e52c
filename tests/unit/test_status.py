"""Cell states from files and Slurm records (records as squeue/sacct print them; the real cluster: tests/slurm)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from ptflow.cluster import ownership, slurm
from ptflow.config.layout import Layout
from ptflow.config.matrix import Cell, build_config
from ptflow.ops import status
from ptflow.results import cell_state

REPO = Path(__file__).resolve().parents[2]
RUN_ID = "7216d423-b607-4ce1-b341-af9060442c05"


@pytest.fixture
def cfg():
    raw = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    raw["agents"].append(  # `_` in an id
        {
            "id": "my_agent_x",
            "kind": "trl-sft",
            "params": {"steps": 1, "batch_size": 8, "learning_rate": 1e-3, "seed": 0},
        }
    )
    raw["matrix"]["agents"] = ["baseline", "sft", "my_agent_x"]
    raw["matrix"]["models"] = ["ptflow/tiny-llama-h64"]
    raw["matrix"]["evals"] = ["add"]
    return build_config(raw)


LAYOUT = Layout("results", ".scratch", ".scratch/hf_home")


def eval_json(cell: Cell) -> dict:
    return {
        "schema_version": 2,
        "model": "ptflow/tiny-llama-h64",
        "model_name": cell.model,
        "eval": cell.eval,
        "agent": cell.agent,
        "status": "scored",
        "metrics": {"name": "accuracy", "value": 0.5, "stderr": 0.1, "n": 64},
        "scorer": "gsm8k_strict",
        "task": "ptflow",
        "checkpoint": {"path": "/x", "kind": "base", "commit_or_hash": "abc", "step": None},
        "inspect_log": "inspect/x.eval",
        "max_new_tokens": 16,
        "attempts": [{"max_new_tokens": 16, "ok": True}],
        "timings": {"started": "a", "finished": "b", "eval_seconds": 1.0, "train_seconds": None},
        "host": "vm",
        "slurm_job_id": "1",
        "software": {},
    }


def write_run_log(work: Path, jobs: dict[str, tuple[str, str]], retries: int = 0, name: str = "1") -> None:
    lines = [
        "  Command: /x/snakemake -s /x/Snakefile --directory /w --profile /nowhere --retries " + str(retries),
        f"SLURM run ID: {RUN_ID}",
    ]
    for jid, (rule, wc) in jobs.items():
        log = f"{work}/.snakemake/slurm_logs/rule_{rule}/{wc}/{jid}.log"
        lines.append(f"Job 3 has been submitted with SLURM jobid {jid} (log: {log}).")
    p = work / ".snakemake" / "log" / f"2026-11-22T0{name}.snakemake.log"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("\n".join(lines) + "\n")


def fake_query(records: list[slurm.JobRecord]):
    calls = []

    def query(names, since):
        calls.append(names)
        return {r.id: r for r in records}

    query.calls = calls
    return query


def cells_by_agent(snap) -> dict[str, cell_state.CellStatus]:
    return {c.agent: c for c in snap.cells}


def test_expected_comment_and_wildcards_follow_the_plugin(cfg):
    cell = Cell("ptflow--tiny-llama-h64", "add", "my_agent_x")
    assert status.comment("train", cell) == "rule_train_wildcards_ptflow--tiny-llama-h64_add_my_agent_x"


def test_every_tao_state_maps():
    m = cell_state.SLURM_STATE_MAP
    assert m["PENDING"] == "Pending"
    assert m["RUNNING"] == m["COMPLETING"] == "Running"
    for s in ("FAILED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY", "NODE_FAIL", "TIMEOUT"):
        assert m[s] == "Error"
    for s in ("CANCELLED", "PREEMPTED", "REVOKED"):
        assert m[s] == "Canceled"
    assert m["SUSPENDED"] == m["STOPPED"] == "Paused"
    assert "COMPLETED" not in m  # decided by the files


def test_states_from_records_and_files(cfg, tmp_path):
    base, sft, mine = (Cell("ptflow--tiny-llama-h64", "add", a) for a in ("baseline", "sft", "my_agent_x"))
    p = tmp_path / LAYOUT.eval_json(base.model, base.eval, base.agent)
    p.parent.mkdir(parents=True)
    p.write_text(json.dumps(eval_json(base)))
    write_run_log(tmp_path, {"11": ("evaluate", status.wildcard_str(base)), "12": ("train", status.wildcard_str(sft))})
    records = [
        slurm.JobRecord("11", RUN_ID, "COMPLETED", exit_code="0:0", nodes="vm"),
        # only squeue knows this one (pending, no log yet): found through its comment
        slurm.JobRecord("13", RUN_ID, "PENDING", reason="Resources", comment=status.comment("train", mine)),
        slurm.JobRecord("12", RUN_ID, "RUNNING", nodes="node2", elapsed="1:02", comment=status.comment("train", sft)),
    ]
    query = fake_query(records)
    snap = status.snapshot(cfg, LAYOUT, tmp_path, query=query)
    # one query per refresh for every run id and the directory's own job name (supervised jobs, SkyRL servers)
    assert query.calls == [[RUN_ID, ownership.owned_job_name(tmp_path)]]
    got = cells_by_agent(snap)
    assert got["baseline"].state == "Done"
    assert got["sft"].state == "Running" and "node2" in got["sft"].detail and "1:02" in got["sft"].detail
    assert got["my_agent_x"].state == "Pending" and "Resources" in got["my_agent_x"].detail
    png = status.write_grid_png(snap, tmp_path / "grid.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("state", ["FAILED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL", "DEADLINE"])
def test_error_shows_state_reason_exit_retry_and_log(cfg, tmp_path, state):
    sft = Cell("ptflow--tiny-llama-h64", "add", "sft")
    wc = status.wildcard_str(sft)
    write_run_log(tmp_path, {"20": ("train", wc)}, retries=2)
    log = tmp_path / LAYOUT.log("train", sft.model, sft.eval, sft.agent)
    log.parent.mkdir(parents=True)
    log.write_text("[t] start\n[t] FAILED: ValueError: batch size 8 not divisible by 3\n")
    (tmp_path / ".snakemake" / "locks").mkdir(parents=True)
    (tmp_path / ".snakemake" / "locks" / "0.input.lock").write_text("x")  # a driver is running
    rec = slurm.JobRecord("20", RUN_ID, state, reason="NonZeroExitCode", exit_code="1:0", nodes="vm")
    snap = status.snapshot(cfg, LAYOUT, tmp_path, query=fake_query([rec]))
    got = cells_by_agent(snap)["sft"]
    assert got.state == "Error"
    assert state in got.detail and "exit 1:0" in got.detail and "NonZeroExitCode" in got.detail
    assert got.retried is True and "will be retried" in got.detail and "attempt 1/3" in got.detail
    assert got.log == str(log) and "not divisible" in got.detail
    assert got.slurm_log.endswith(f"rule_train/{wc}/20.log")


def test_cancelled_paused_and_local_failure(cfg, tmp_path):
    base, sft, mine = (Cell("ptflow--tiny-llama-h64", "add", a) for a in ("baseline", "sft", "my_agent_x"))
    write_run_log(tmp_path, {"30": ("evaluate", status.wildcard_str(base)), "31": ("train", status.wildcard_str(sft))})
    records = [
        slurm.JobRecord("30", RUN_ID, "CANCELLED by 0"),
        slurm.JobRecord("31", RUN_ID, "SUSPENDED"),
    ]
    log = tmp_path / LAYOUT.log("train", mine.model, mine.eval, mine.agent)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("FAILED: RuntimeError: boom\n")
    got = cells_by_agent(status.snapshot(cfg, LAYOUT, tmp_path, query=fake_query(records)))
    assert got["baseline"].state == "Canceled" and got["baseline"].retried is False  # no driver: nobody resubmits
    assert got["sft"].state == "Paused"
    assert got["my_agent_x"].state == "Error" and "boom" in got["my_agent_x"].detail


def test_not_started_and_invalid_eval_json(cfg, tmp_path):
    base = Cell("ptflow--tiny-llama-h64", "add", "baseline")
    p = tmp_path / LAYOUT.eval_json(base.model, base.eval, base.agent)
    p.parent.mkdir(parents=True)
    broken = eval_json(base)
    del broken["metrics"]
    p.write_text(json.dumps(broken))
    snap = status.snapshot(cfg, LAYOUT, tmp_path, query=fake_query([]))
    assert {c.state for c in snap.cells} == {"Not started"}


def test_parse_squeue_sacct_and_merge():
    q = slurm.parse_squeue(f"41|{RUN_ID}|RUNNING|None|vm|0:05|rule_evaluate_wildcards_a_b_c|gpu\n")
    a = slurm.parse_sacct(
        f"41|{RUN_ID}|RUNNING|0:0|None|vm|00:00:05|gpu|2026-11-22T02:36:03\n"
        f"41.batch|batch|RUNNING|0:0||vm|00:00:05||2026-11-22T02:36:03\n"
        f"40|{RUN_ID}|CANCELLED by 0|0:0|None|None assigned|00:00:00|gpu|2026-11-22T02:36:03\n"
    )
    assert [j.id for j in a] == ["41", "40"]
    merged = slurm.merge_records(q, a)
    assert merged["41"].comment == "rule_evaluate_wildcards_a_b_c" and merged["41"].exit_code == "0:0"
    assert merged["40"].base_state == "CANCELLED" and merged["40"].nodes == ""
    argv = slurm.squeue_argv([RUN_ID, "other"])
    assert argv[0] == "squeue" and f"--name={RUN_ID},other" in argv and "all" in argv


def test_retries_from_profile(tmp_path):
    (tmp_path / "config.yaml").write_text("retries: 2\n")
    assert status.retries_of(["snakemake", "--profile", str(tmp_path)]) == 2
    assert status.retries_of(["snakemake", "--profile", str(tmp_path), "--retries", "0"]) == 0
    assert status.retries_of(["snakemake"]) == 0


def test_jobs_ptflow_submitted_itself_belong_to_their_cell(cfg, tmp_path):
    """A supervised train job (its resubmission too) is the cell's train job; a SkyRL runtime server (#role) is
    cancelled with the cell but does not decide its state."""
    sft = Cell("ptflow--tiny-llama-h64", "add", "sft")
    write_run_log(tmp_path, {})
    owned = ownership.owned_job_name(tmp_path)
    train = ownership.job_comment("train", [sft.model, sft.eval, sft.agent])
    records = [
        slurm.JobRecord("20", owned, "NODE_FAIL", comment=train),
        slurm.JobRecord(
            "21",
            owned,
            "RUNNING",
            nodes="vm",
            comment=ownership.job_comment("train", [sft.model, sft.eval, sft.agent], role="skyrl-server"),
        ),  # fmt: skip
        slurm.JobRecord("22", owned, "PENDING", reason="Dependency", comment=train),
    ]
    snap = status.snapshot(cfg, LAYOUT, tmp_path, query=fake_query(records))
    got = cells_by_agent(snap)["sft"]
    assert got.state == "Pending" and got.job_id == "22" and "attempt 2" in got.detail
    assert {jid for jid, (_, cell) in snap.job_cells.items() if cell == sft} == {"20", "21", "22"}


def test_supervised_job_whose_comment_accounting_dropped_is_found_by_its_log(cfg, tmp_path):
    """Once slurmctld forgets a finished job (MinJobAge), sacct alone knows it — without its comment unless the
    cluster sets AccountingStoreFlags=job_comment. The supervisor's log in the cell's slurm/ folder names the cell."""
    sft = Cell("ptflow--tiny-llama-h64", "add", "sft")
    write_run_log(tmp_path, {})
    owned = ownership.owned_job_name(tmp_path)
    jobs_dir = tmp_path / LAYOUT.cell_dir(sft.model, sft.eval, sft.agent) / "slurm"
    jobs_dir.mkdir(parents=True)
    for jid in ("42", "44"):
        (jobs_dir / f"train-{jid}.out").write_text("ptflow: internal timeout\n")
    (jobs_dir / "train.sbatch").write_text("#!/bin/bash\n")
    records = [
        slurm.JobRecord("42", owned, "COMPLETED", comment=""),
        slurm.JobRecord("44", owned, "RUNNING", nodes="vm", comment=""),
    ]
    snap = status.snapshot(cfg, LAYOUT, tmp_path, query=fake_query(records))
    assert {jid: cell for jid, (_, cell) in snap.job_cells.items()} == {"42": sft, "44": sft}
    got = cells_by_agent(snap)["sft"]
    assert got.state == "Running" and got.job_id == "44" and got.slurm_log == str(jobs_dir / "train-44.out")


def test_an_agent_cells_api_spend_is_read_from_its_manifest(tmp_path):
    """Read from the manifests of cli-agent cells only (the others hold no spend: not read on every refresh)."""
    raw = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    raw["agents"].append({"id": "coder", "kind": "cli-agent", "cli": "scripted", "model": "scripted-sft", "hours": 0.1})
    raw["matrix"] = {**raw["matrix"], "models": ["ptflow/tiny-llama-h64"], "evals": ["add"]}
    raw["matrix"]["agents"] = ["baseline", "sft", "coder"]
    cfg = build_config(raw)
    write_run_log(tmp_path, {})
    spend = {"input_tokens": 1200, "output_tokens": 120, "cached_tokens": 0, "cost_usd": 0.003, "source": "claude"}
    for agent in ("coder", "sft"):  # sft's (a TRL agent's) manifest would never hold one: it is not read
        manifest = tmp_path / LAYOUT.manifest("ptflow--tiny-llama-h64", "add", agent)
        manifest.parent.mkdir(parents=True)
        manifest.write_text(json.dumps({"agent_run": {"api_usage": spend}}))
    snap = status.snapshot(cfg, LAYOUT, tmp_path, query=fake_query([]))
    got = cells_by_agent(snap)
    assert got["coder"].api_usage == spend and got["sft"].api_usage is None and got["baseline"].api_usage is None
    assert got["coder"].to_dict()["api_usage"] == spend  # ptflow status --json
    line = "API spend of 1 agent cells, as their CLIs reported it: 1,200 in / 0 cached / 120 out, $0.00"
    assert line in status.table(snap)


def test_a_trained_cell_is_done_after_its_train_and_evaluate_jobs_completed(cfg, tmp_path):
    """A trained cell has two jobs (train, then evaluate); once both COMPLETED and its eval.json is valid it is Done.
    (On Slurm, tests/slurm/test_cli_status.py shows a baseline cell Done; this is the trained cell's case.)"""
    sft = Cell("ptflow--tiny-llama-h64", "add", "sft")
    p = tmp_path / LAYOUT.eval_json(sft.model, sft.eval, sft.agent)
    p.parent.mkdir(parents=True)
    p.write_text(json.dumps(eval_json(sft)))
    wc = status.wildcard_str(sft)
    write_run_log(tmp_path, {"21": ("train", wc), "22": ("evaluate", wc)})
    records = [
        slurm.JobRecord(
            "21", RUN_ID, "COMPLETED", exit_code="0:0", nodes="node1", comment=status.comment("train", sft)
        ),
        slurm.JobRecord(
            "22", RUN_ID, "COMPLETED", exit_code="0:0", nodes="node2", comment=status.comment("evaluate", sft)
        ),
    ]
    got = cells_by_agent(status.snapshot(cfg, LAYOUT, tmp_path, query=fake_query(records)))
    assert got["sft"].state == "Done", got["sft"]
    # the train job alone, its evaluation still to come: not Done yet
    p.unlink()
    got = cells_by_agent(status.snapshot(cfg, LAYOUT, tmp_path, query=fake_query(records[:1])))
    assert got["sft"].state != "Done", got["sft"]
