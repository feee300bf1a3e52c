"""A small matrix of hand-made cells for the report tests: 2 models x 2 evals x (baseline + 2 agents, one of them
run twice), with a flagged cell, a cell without a final model, judge verdicts, traces and a real inspect log."""

from __future__ import annotations

from pathlib import Path

from ptflow.config import naming
from ptflow.results.cells import read_cell
from ptflow.results.scoring import Result, score
from ptflow.results.settings import Settings
from tests.support.cells import write_cell

MODELS = ["Qwen/Qwen3-1.7B-Base", "google/gemma-3-4b-pt"]
EVALS = ["gsm8k", "humaneval"]
AGENTS = ["baseline", "claude-opus-4-5", "codex-gpt-5.1-codex-max"]
REFERENCE = {
    "zeroshot": {
        "Qwen3-1.7B": {"gsm8k": 0.8847611827141774, "humaneval": 0.6890243902439024},
        "gemma-3-4b-it": {"gsm8k": 0.8354814253222138, "humaneval": 0.6951219512195121},
    }
}
BASE = {("Qwen/Qwen3-1.7B-Base", "gsm8k"): 0.13, ("Qwen/Qwen3-1.7B-Base", "humaneval"): 0.08,
        ("google/gemma-3-4b-pt", "gsm8k"): 0.06, ("google/gemma-3-4b-pt", "humaneval"): 0.01}  # fmt: skip
TRACE = """# Agent trace

**assistant**: I will fine-tune the base model on the train split.

**tool call `Bash`**: `{"command": "python train.py --epochs 2"}`

**tool result**:
```
epoch 2 loss 0.41 <script>alert('not executed')</script>
```
"""


def build_matrix(root: Path, inspect_log: Path) -> tuple[Result, list[dict]]:
    """Write the cells under ``root``, score them; returns the result and a state list like ``ptflow status``'s."""
    paths = []
    for (model, ev), base in BASE.items():
        paths.append(write_cell(root, model, ev, "baseline", base, inspect_log=inspect_log))
        claude = dict(agent_run={"time_taken": 8 * 3600.0, "hours": 10}, trace=TRACE, inspect_log=inspect_log)
        flagged = model == MODELS[0] and ev == "gsm8k"
        paths.append(
            write_cell(
                root, model, ev, "claude-opus-4-5", base + 0.5, judge="flagged" if flagged else "clean", **claude
            )
        )
        for run in (1, 2):
            agent = naming.slot("codex-gpt-5.1-codex-max", run)
            no_model = run == 2 and model == MODELS[1] and ev == "humaneval"
            paths.append(
                write_cell(
                    root, model, ev, agent, None if no_model else base + 0.2 + 0.05 * run,
                    agent_run={"time_taken": (5 + run) * 3600.0, "hours": 10, "budget_exhausted": no_model},
                    judge="clean", trace=TRACE, inspect_log=None if no_model else inspect_log,
                )
            )  # fmt: skip
    settings = Settings(reference=REFERENCE, agent_order=AGENTS, gpus={"train": 1, "eval": 1})
    result = score([read_cell(p, settings) for p in paths], settings)
    states = [
        {"model": c.model_name, "eval": c.eval, "agent": c.agent, "state": "Done", "detail": "eval.json valid"}
        for c in result.cells
    ]
    states[-1] = {**states[-1], "state": "Running", "detail": "evaluate attempt 1 on node002"}
    return result, states
