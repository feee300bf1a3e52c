"""Aggregation over eval.json files (inputs written here; the figures come from them, not from the code)."""

import json

import pandas as pd

from ptflow.stages.report import aggregate


def write_cell(root, model, ev, agent, acc, metric="accuracy", scorer="gsm8k_strict"):
    d = root / model / ev / agent
    d.mkdir(parents=True)
    data = {
        "model": model,
        "eval": ev,
        "agent": agent,
        "status": "scored" if acc is not None else "eval_failed",
        "metrics": None if acc is None else {"name": metric, "value": acc, "stderr": 0.01, "n": 10},
        "scorer": scorer,
        "task": "ptflow",
        "checkpoint": {"kind": "base", "path": "/x"},
        "max_new_tokens": 8,
        "timings": {"eval_seconds": 1.0, "train_seconds": None},
        "host": "h",
        "slurm_job_id": None,
    }
    (d / "eval.json").write_text(json.dumps(data))
    return d / "eval.json"


def test_aggregate_outputs(tmp_path):
    files = [
        write_cell(tmp_path, m, e, a, acc)
        for (m, e, a, acc) in [
            ("m1", "add", "baseline", 0.0),
            ("m1", "add", "sft", 0.9),
            ("m2", "add", "sft", 0.5),
            ("m1", "sub", "baseline", 0.25),
            ("m1", "sub", "sft", None),
        ]
    ]
    files.append(write_cell(tmp_path, "m1", "hb", "sft", 0.31, metric="bootstrap_score", scorer="_scorer"))
    out = tmp_path / "out"
    aggregate(files, ["baseline", "sft"], out / "s.csv", out / "l.md", out / "h.png")
    df = pd.read_csv(out / "s.csv")
    assert len(df) == 6 and set(df.columns) >= {"model", "eval", "agent", "status", "metric", "value", "stderr", "n"}
    assert df.set_index(["eval", "agent"]).loc[("hb", "sft"), "metric"] == "bootstrap_score"
    board = (out / "l.md").read_text()
    assert "## add\n\nMetric: accuracy (gsm8k_strict)" in board
    assert "## hb\n\nMetric: bootstrap_score (_scorer)" in board and "| m1 | — | 0.310 ± 0.010 (n=10) |" in board
    assert "| m1 | 0.250 ± 0.010 (n=10) | eval failed [eval failed] |" not in board
    assert "| m1 | 0.250 ± 0.010 (n=10) | eval failed |" in board
    assert "| m1 | 0.000 ± 0.010 (n=10) | 0.900 ± 0.010 (n=10) |" in board
    assert "| m2 | — | 0.500 ± 0.010 (n=10) |" in board, "a missing cell shows as a dash"
    assert "| sft | 0.570 | 4 |" in board  # mean of 0.9, 0.5, 0.31 over the scored cells; 4 cells
    assert (out / "h.png").read_bytes()[:4] == b"\x89PNG"
