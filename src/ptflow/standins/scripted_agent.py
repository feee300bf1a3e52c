"""The scripted agent: a real program of ours, run by the cli-agent machinery exactly like claude/codex/gemini.

It reads its task (``task.json``: base model, train data, deadline; ``prompt.md``), post-trains the base model
with SFT on the train split, measures the result once with the task dir's ``evaluate.py`` (PostTrainBench's
interface, the final evaluation's settings) and saves ``final_model/`` — so its cell scores above baseline. It
stands in for an LLM coding agent (no agent API is reachable here); everything around it (task dir, timeout, HF
view, trace, copy, evaluation, judge) is the real path.

``--overrun``: saves a partial ``final_model/`` early (the base model, unchanged), prints a line that reads the test
split (so a judge flags it), then sleeps past its deadline: ``timeout`` stops it (exit 124).
``--overrun --no-model``: the same without any ``final_model/`` (the cell shows "no final model").
``--pause S``: sleeps S seconds at each logged training step (a tenth of the run), so a test can stop the agent
mid-run; its SFT checkpoints into ``work/sft-resume`` in the task dir and, when an earlier session left one there
(``task.json`` says so when the cell continues a workspace), resumes from it.
Output is stream-json-like JSONL on stdout, like the real agents'.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from ptflow.files import staged_dir


def event(kind: str, text: str) -> None:
    print(json.dumps({"type": kind, "message": {"content": [{"type": "text", "text": text}]}}), flush=True)


def save_atomically(src_dir: Path, final: Path) -> None:
    with staged_dir(final) as tmp:
        shutil.copytree(src_dir, tmp, dirs_exist_ok=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--task-dir", required=True)
    ap.add_argument("--overrun", action="store_true", help="sleep past the deadline (timeout stops it: exit 124)")
    ap.add_argument("--no-model", action="store_true", help="with --overrun: write no final_model/")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--learning-rate", type=float, default=3.0e-3)
    ap.add_argument("--eval-limit", type=int, default=8, help="samples evaluate.py measures before saving")
    ap.add_argument("--pause", type=float, default=0.0, help="seconds to sleep at each logged training step")
    ap.add_argument("--save-freq", type=int, help="checkpoint its SFT every N steps (default: by time)")
    args = ap.parse_args(argv)
    task_dir = Path(args.task_dir)
    # ptflow's own files: in the task dir, or beside a PostTrainBench checkout cell's home (PTFLOW_CELL_DIR)
    own = Path(os.environ.get("PTFLOW_CELL_DIR") or task_dir)
    task = json.loads((own / "task.json").read_text())
    prompt = (own / "prompt.md").read_text()
    # what the agent finds in its task dir when it starts (the tests compare it with run_task.sh's)
    event("assistant", "task dir: " + json.dumps(sorted(p.name for p in task_dir.iterdir())))
    event("assistant", f"I read the task ({len(prompt)} characters). Base model: {task['base_model']}.")
    # The keys reach us through the environment only: report which are set and whether any value leaked into a
    # file of the task dir (never the values themselves).
    names = [k for k in os.environ.get("PTFLOW_AGENT_KEYS", "").split(",") if k]
    values = [os.environ[k].encode() for k in names if os.environ.get(k)]
    leaked = [str(p) for p in task_dir.rglob("*") if p.is_file() and any(v in p.read_bytes() for v in values)]
    event("assistant", f"keys in my environment: {', '.join(k for k in names if os.environ.get(k)) or 'none'}")
    event("assistant", f"key values found in task dir files: {len(leaked)} {leaked}")
    final = task_dir / "final_model"
    if args.overrun:
        if not args.no_model:
            save_atomically(Path(task["base_model"]), final)
            event("assistant", "Saved a first (untrained) final_model/.")
        # What a contaminating agent would do; the judge must catch it.
        event("assistant", "Loading the evaluation data: pd.read_parquet('data/test.parquet') to tune on it.")
        remaining = task["deadline"] - time.time()
        event("assistant", f"Sleeping past the deadline ({remaining:.0f} s left).")
        time.sleep(max(remaining, 0) + 3600)
        return 0
    from ptflow.cluster.preempt import ResumeDir, StoppedToResume
    from ptflow.stages.train.sft import SftSettings, train_sft

    resume = ResumeDir(task_dir / "work" / "sft-resume")
    found = resume.newest()
    if task.get("earlier_session"):
        event(
            "assistant",
            "An earlier session worked here: "
            + (f"continuing its training from step {found[0]}." if found else "it left no training checkpoint."),
        )
    staging = task_dir / "work" / staging_name(task["base_model"])
    train_data = task["train_data"] or own_train_data(task_dir)
    event("assistant", f"Running SFT for {args.steps} steps on {train_data}.")

    def log(line: str) -> None:
        event("tool", line)
        if args.pause and line.startswith("step "):
            time.sleep(args.pause)

    try:
        hp = SftSettings(
            steps=args.steps, batch_size=args.batch_size, learning_rate=args.learning_rate, seed=0,
            save_freq=args.save_freq,
        )  # fmt: skip
        result = train_sft(task["base_model"], train_data, staging, hp, resume=resume, log=log)
    except StoppedToResume as exc:
        event("assistant", f"Stopped: {exc}")
        return 143
    measure(task_dir, staging, args.eval_limit)
    save_atomically(staging, final)
    event("result", f"final_model/ saved: {result['step']} steps, train_loss {result['train_loss']:.4f}")
    return 0


def staging_name(base_model: str) -> str:
    """Its SFT output dir in ``work/``, named after the model it post-trains as agents name theirs (``<name>-sft``
    for a hub cache's ``models--<org>--<name>``): a PostTrainBench checkout's evaluate.py picks its chat template by
    a family name in the model path (then by ``config.json``'s architecture, which for ptflow's tiny Llama models
    names a template the checkout lacks)."""
    for part in reversed(Path(base_model).parts):
        if part.startswith("models--"):
            return part.split("--")[-1] + "-sft"
    return "sft"


def own_train_data(task_dir: Path) -> str:
    """No train split in the task dir (PostTrainBench gives none: agents bring their own data): this stand-in makes
    the addition problems the tiny test models learn, as an agent would download a dataset."""
    from ptflow.files import atomic_path
    from ptflow.stages.data.synthetic import generate_digitwise
    from ptflow.stages.data.verl_format import to_verl_frame

    out = task_dir / "work" / "own_train.parquet"
    out.parent.mkdir(parents=True, exist_ok=True)
    frame = to_verl_frame(generate_digitwise("add", 2, 600, seed=11), "ptflow/arith-add", "train")
    with atomic_path(out) as tmp:
        frame.to_parquet(tmp, index=False)
    event("assistant", f"No train data was given: made {len(frame)} addition problems in {out}.")
    return str(out)


def measure(task_dir: Path, model: Path, limit: int) -> None:
    """One run of the task dir's evaluate.py, as an agent measures a checkpoint (fails loudly when it cannot)."""
    metrics = task_dir / "work" / "metrics.json"
    argv = [sys.executable, "evaluate.py", "--model-path", str(model), "--limit", str(limit),
            "--json-output-file", str(metrics)]  # fmt: skip
    event("assistant", f"Measuring with evaluate.py (--limit {limit}).")
    proc = subprocess.run(argv, cwd=task_dir, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        event("tool", f"evaluate.py failed (exit {proc.returncode}): {tail[0]}")
        raise SystemExit(f"evaluate.py failed: {tail[0]}")
    m = json.loads(metrics.read_text())
    # (PostTrainBench's evaluate.py writes accuracy and stderr only; ptflow's kit says more)
    scorer = f" (scorer {m['scorer']})" if "scorer" in m else ""
    event(
        "tool", f"evaluate.py: {m.get('metric', 'accuracy')} {m['accuracy']:.3f} on {m.get('n', '?')} samples{scorer}"
    )


if __name__ == "__main__":
    sys.exit(main())
