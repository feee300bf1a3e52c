"""humaneval's answer sandbox in a PostTrainBench checkout (main), as its run_final_eval.sh names it: which of its
scripts the checkout has, and the one line refusing a task whose sandbox it lacks. ptflow runs it around each attempt
(``ptflow.stages.posttrainbench.answer_sandbox``).

Facts (aisa-group/PostTrainBench): run_final_eval.sh@13a49a0 runs humaneval's attempt as ``bash
src/eval/tasks/humaneval/with_answer_sandbox.sh "${EVAL_CONTAINER}" apptainer exec ... "${EVAL_CONTAINER}" python
evaluate_final_eval.py ...``; with_answer_sandbox.sh@b5d2362 starts answer_sandbox.py's server (beside it) in a second
container of that sif and hands the socket to the command through APPTAINER_BIND and
APPTAINERENV_ANSWER_SANDBOX_SOCKET; with_answer_sandbox_local.sh@c447934 builds the same sandbox from namespaces
(unshare, chroot) for callers without apptainer (run_final_eval.sh@214ccb4's EVAL_RUNTIME=local) and sets
ANSWER_SANDBOX_SOCKET; evaluate_final_eval.py@8749d7e6 raises without that variable.
"""

from __future__ import annotations

from collections.abc import Callable

SCRIPTS = {  # where each runs: an apptainer site, else (venv, pyxis, enroot-edf: no second apptainer container) local
    "apptainer": "src/eval/tasks/{eval}/with_answer_sandbox.sh",
    "local": "src/eval/tasks/{eval}/with_answer_sandbox_local.sh",
}
SERVER = "src/eval/tasks/{eval}/answer_sandbox.py"


def kinds(run_final_eval: str, eval_dir: str, exists: Callable[[str], bool]) -> tuple[str, ...] | None:
    """None where run_final_eval.sh's text runs no answer sandbox for the task; else the kinds whose script the
    checkout has beside answer_sandbox.py (``exists``: a path of the checkout at its commit), () where none."""
    if SCRIPTS["apptainer"].format(eval=eval_dir) not in run_final_eval:
        return None
    if not exists(SERVER.format(eval=eval_dir)):
        return ()
    return tuple(k for k, path in SCRIPTS.items() if exists(path.format(eval=eval_dir)))


def refusal(where: str, eval_dir: str) -> str:
    script = SCRIPTS["apptainer"].format(eval=eval_dir)
    return (
        f"{where} runs {eval_dir}'s final evaluation inside its answer sandbox ({script}: "
        "the model's code runs apart from the evaluation's process, and the task's evaluate_final_eval.py refuses to "
        "score without it), but the checkout has neither that script nor with_answer_sandbox_local.sh beside "
        f"answer_sandbox.py: leave {eval_dir} out of this checkout's matrix, or pin a commit that has them"
    )
