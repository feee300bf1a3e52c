"""An agent cell of a PostTrainBench eval: the task dir and prompt as the checkout's ``src/run_task.sh`` makes them.

Into the task dir: the eval's ``evaluate.py``, its ``evaluation_code/``, the checkout's ``templates/``, the files of
its ``task_context/``, and ``timer.sh`` from ``src/utils/create_timer.sh`` (for a whole number of hours, as
PostTrainBench's budgets are; a resumed cell's fractional remainder gets ptflow's timer, which reads the same
deadline). The prompt is the output of ``src/eval/general/get_prompt.py`` run in the checkout with the cell's model
id, eval dir, hours, GPUs and agent name. The real CLIs run the checkout's ``agents/<agent>/solve.sh`` with the
variables run_task.sh gives it (``PROMPT``, ``AGENT_CONFIG``, ``NUM_GPUS``, ``VLLM_API_KEY``, ``PYTHONNOUSERSITE``);
ptflow keeps its own timeout, runtime, HF view, workspace sync, resume, key scoping and CLI settings around it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from ptflow.config import posttrainbench as ptb

PROMPT_TIMEOUT_S = 120
SOLVE_NAME = "agent_solve.sh"  # where run_task.sh puts agents/<agent>/solve.sh (beside the task dir, in the home)


class CheckoutAgentError(RuntimeError):
    """The checkout's task dir or prompt could not be made (one line)."""


def with_checkout(agent: dict | None, marker: str | None) -> dict | None:
    """The agent's job dict with the checkout's place and commit (from the rule's marker input) where it needs it."""
    if not agent or not agent.get("posttrainbench") or not marker:
        return agent
    data = json.loads(Path(marker).read_text())
    return {**agent, "checkout": {"path": data["path"], "commit": data["commit"]}}


def _copy(src: Path, dest: Path) -> None:
    if src.is_dir():
        shutil.copytree(src, dest, symlinks=True, dirs_exist_ok=True)
    else:
        shutil.copyfile(src, dest)


def fill_task_dir(task_dir: Path, agent: dict, hours: float) -> bool:
    """run_task.sh's copies into ``task_dir``; True when the checkout's timer was written (whole hours)."""
    checkout = Path(agent["checkout"]["path"])
    spec = agent["posttrainbench"]
    source = checkout / ptb.EVAL_DIR.format(eval=spec["eval_dir"])
    _copy(source / "evaluate.py", task_dir / "evaluate.py")
    if (source / "evaluation_code").is_dir():
        _copy(source / "evaluation_code", task_dir / "evaluation_code")
    _copy(checkout / ptb.TEMPLATES_DIR, task_dir / "templates")
    if (source / "task_context").is_dir():
        for item in sorted((source / "task_context").iterdir()):
            _copy(item, task_dir / item.name)
    if float(hours) != int(hours) or hours < 1:
        return False
    proc = subprocess.run(
        ["bash", str(checkout / ptb.TIMER_SCRIPT), str(int(hours)), str(task_dir / "timer.sh")],
        capture_output=True, text=True, timeout=PROMPT_TIMEOUT_S,
    )  # fmt: skip
    if proc.returncode != 0:
        raise CheckoutAgentError(f"{ptb.TIMER_SCRIPT} exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
    return True


def prompt(agent: dict, model_id: str, hours: float, env: dict | None = None) -> str:
    """``get_prompt.py`` of the checkout, run there (it reads its files relative to the checkout's root)."""
    checkout = Path(agent["checkout"]["path"])
    spec = agent["posttrainbench"]
    argv = [
        sys.executable, ptb.PROMPT_SCRIPT, "--model-to-train", model_id, "--benchmark-id", spec["eval_dir"],
        "--num-hours", f"{hours:g}", "--num-gpus", str(spec.get("num_gpus", 1)),
        "--agent", spec.get("solve") or agent["cli"],
    ]  # fmt: skip
    environ = {k: v for k, v in (env or os.environ).items() if k in ("PATH", "LANG", "LC_ALL", "TZ", "HOME")}
    if (env or os.environ).get("POST_TRAIN_BENCH_PROMPT"):  # PostTrainBench's own switch of prompt text
        environ["POST_TRAIN_BENCH_PROMPT"] = (env or os.environ)["POST_TRAIN_BENCH_PROMPT"]
    proc = subprocess.run(argv, cwd=checkout, env=environ, capture_output=True, text=True, timeout=PROMPT_TIMEOUT_S)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise CheckoutAgentError(
            f"{ptb.PROMPT_SCRIPT} of the checkout exited {proc.returncode} with "
            f"{'no prompt' if not proc.stdout.strip() else 'output'}: {proc.stderr.strip()[-300:]}"
        )
    return proc.stdout


def install_solve(agent: dict, home: Path) -> Path:
    """The checkout's ``agents/<agent>/solve.sh`` as ``agent_solve.sh`` in the cell's home (run_task.sh's place)."""
    checkout = Path(agent["checkout"]["path"])
    src = checkout / ptb.AGENT_DIR.format(agent=agent["posttrainbench"]["solve"]) / "solve.sh"
    if not src.is_file():
        raise CheckoutAgentError(f"the PostTrainBench checkout has no {src.relative_to(checkout)}")
    dest = home / SOLVE_NAME
    shutil.copyfile(src, dest)
    return dest


def solve_environment(agent: dict, prompt_text: str) -> dict[str, str]:
    """The variables run_task.sh passes solve.sh (besides the keys, which ptflow scopes)."""
    return {
        "PROMPT": prompt_text,
        "AGENT_CONFIG": str(agent["model"]),
        "NUM_GPUS": str(agent["posttrainbench"].get("num_gpus", 1)),
        "VLLM_API_KEY": "inspectai",
        "PYTHONNOUSERSITE": "1",
    }
