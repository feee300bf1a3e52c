"""Aggregation over eval.json files (inputs written here; the figures come from them, not from the code)."""

import json

import pandas as pd

from ptflow.stages.report import aggregate


def write_cell(root, model, ev, agent, acc):
    d = root / model / ev / agent
    d.mkdir(parents=True)
    data = {
        "model": model,
        "eval": ev,
        "agent": agent,
        "metrics": {"accuracy": acc, "stderr": 0.01, "n": 10},
        "scorer": "gsm8k_strict",
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
        ]
    ]
    out = tmp_path / "out"
    aggregate(files, ["baseline", "sft"], out / "s.csv", out / "l.md", out / "h.png")
    df = pd.read_csv(out / "s.csv")
    assert len(df) == 4 and set(df.columns) >= {"model", "eval", "agent", "accuracy", "stderr", "n"}
    board = (out / "l.md").read_text()
    assert "| m1 | 0.000 ± 0.010 (n=10) | 0.900 ± 0.010 (n=10) |" in board
    assert "| m2 | — | 0.500 ± 0.010 (n=10) |" in board, "a missing cell shows as a dash"
    assert "| sft | 0.700 | 2 |" in board
    assert (out / "h.png").read_bytes()[:4] == b"\x89PNG"
