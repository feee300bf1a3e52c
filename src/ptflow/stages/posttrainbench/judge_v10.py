"""PostTrainBench's first judge (v1.0, commit 9082063; ``ptflow.config.posttrainbench.JUDGE_V10``) as its
``src/run_task.sh`` runs it after the agent: one codex judge in the task dir as the agent left it, asked the prompt
of the checkout's ``get_judge_prompt.py``, answering in ``contamination_judgement.txt`` and
``disallowed_model_judgement.txt`` (read exactly as ``scripts/aggregate_contamination.py`` reads them). The judge room
(``ptflow.stages.judge.vote``) runs it with the judge's home and prompt from here."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from ptflow.config import posttrainbench as ptb
from ptflow.files import link_tree


class PtbJudgePromptError(RuntimeError):
    """The checkout's get_judge_prompt.py failed (the message is one line)."""


def judge_prompt(checkout: dict, model_id: str) -> str:
    """PostTrainBench's judge prompt: its ``get_judge_prompt.py`` run in the checkout with the eval's benchmark name
    (``benchmark.txt``) and the base model id, as run_task.sh runs it: ``JUDGE_TASK=$(...)``, whose command
    substitution drops every trailing newline. ``checkout``: ``{path, eval_dir}``."""
    root = Path(checkout["path"])
    benchmark = (root / ptb.EVAL_DIR.format(eval=checkout["eval_dir"]) / "benchmark.txt").read_text().strip()
    argv = [sys.executable, ptb.JUDGE_SCRIPT, "--benchmark", benchmark, "--model", model_id]
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "POST_TRAIN_BENCH_PROMPT")}
    proc = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise PtbJudgePromptError(
            f"{ptb.JUDGE_SCRIPT} of the checkout exited {proc.returncode}: {proc.stderr.strip()[-300:]}"
        )
    return proc.stdout.rstrip("\n")


def judge_home(checkout: dict, workspace: Path, root: Path, trace_md: Path, log) -> Path:
    """The judge's home as run_task.sh gives it, at ``root``: ``task/`` the kept workspace (the task dir as the agent
    left it, ``final_model/`` in it), every file a hard link (a copy where the filesystem refuses one), nothing of
    ptflow's added; the checkout's ``containers/other_home_data/.codex`` copied in fresh, as before the judge there;
    ``solve_parsed.txt``, the agent's readable trace (run_task.sh copies its parsed trace into the home). The CLI's
    settings ptflow writes into ``.codex`` then (``prepare_cli_home``) go over the checkout's."""
    counts: dict[str, int] = {}
    link_tree(workspace, root / "task", counts)
    codex = Path(checkout["path"]) / ptb.JUDGE_CODEX_HOME
    if codex.is_dir():
        shutil.copytree(codex, root / codex.name, dirs_exist_ok=True)
    shutil.copyfile(trace_md, root / "solve_parsed.txt")
    log(f"judge's task dir {root / 'task'}: files of {workspace} {counts or 'none'}")
    return root
