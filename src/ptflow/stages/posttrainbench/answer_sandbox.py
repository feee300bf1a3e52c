"""humaneval's answer sandbox around its final evaluation, as PostTrainBench main's run_final_eval.sh puts it there:
the model's code never runs in the evaluation's process, and the task's evaluate_final_eval.py refuses to score
without the sandbox's socket (facts and their commits: ``ptflow.config.answer_sandbox``). ptflow runs the checkout's
own scripts, never copies of them:

- an apptainer site: the job's re-start into the evaluation image (``ptflow.cluster.runtime``: ``apptainer exec
  --nv --bind ... <sif> python <job script>``) runs as ``bash <checkout>/src/eval/tasks/humaneval/
  with_answer_sandbox.sh <sif> apptainer exec ...`` (:func:`runtime_wrap`): the sandbox is a second container of the
  evaluation's sif, and the script hands its socket to the evaluation's container through APPTAINER_BIND and
  APPTAINERENV_ANSWER_SANDBOX_SOCKET, as run_final_eval.sh's apptainer arm does. Unlike main, one sandbox serves
  every attempt of the seed's job (ptflow's attempts run inside the container, which cannot start a sibling one);
- any other site (venv, pyxis, enroot-edf: no second apptainer container) and this machine: each attempt runs as
  ``bash <checkout>/src/eval/tasks/humaneval/with_answer_sandbox_local.sh python evaluate_final_eval.py ...``
  (:func:`attempt_prefix`), run_final_eval.sh@214ccb4's EVAL_RUNTIME=local arm (namespaces: unshare, chroot; as
  ``nobody`` when run as root, so the checkout's answer_sandbox.py must be readable by nobody then).

A checkout without the script a site needs is refused in one line (:func:`refusal`): when the jobs are built, and
again before a seed's first attempt; an attempt never runs without its sandbox.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from ptflow.config import answer_sandbox as facts
from ptflow.specs import CheckoutCall

SOCKET_ENV = "ANSWER_SANDBOX_SOCKET"
START_TIMEOUT_S = 180  # with_answer_sandbox_local.sh waits 120 s for its socket, then 30 s for the server to end


def kinds(call) -> list[str]:
    """The sandboxes the checkout has for this seed's task (``final.answer_sandbox``); [] where it runs none."""
    return list((getattr(call, "final", None) or {}).get("answer_sandbox") or [])


def site_kind(runtime_kind: str | None) -> str:
    """Which sandbox a site runs: apptainer's on an apptainer site, else the namespace one (local)."""
    return "apptainer" if runtime_kind == "apptainer" else "local"


def refusal(call: CheckoutCall, runtime_kind: str | None, site: str = "this site") -> str | None:
    """One line where the site cannot run the task's sandbox with this checkout, else None."""
    have, need = kinds(call), site_kind(runtime_kind)
    if not have or need in have:
        return None
    eval_dir = call.files.eval_dir
    why = ("has no apptainer to start with_answer_sandbox.sh's container" if need == "local"
           else "runs its evaluation in apptainer")  # fmt: skip
    return (
        f"{eval_dir}: the PostTrainBench checkout runs its final evaluation inside the answer sandbox, and "
        f"{site} (runtime.kind {runtime_kind or 'local'}) {why}, but the checkout has no "
        f"{facts.SCRIPTS[need].format(eval=eval_dir)}: run it on "
        f"{'an apptainer site' if need == 'local' else 'a site without apptainer'}, pin a checkout that has it, "
        f"or leave {eval_dir} out of the matrix"
    )


def checked(call, site_runtime, error=ValueError):
    """``call``, or ``error`` (one line) where the site (its RuntimeSpec) cannot run the task's answer sandbox."""
    why = refusal(call, site_runtime.kind, f"site {site_runtime.site}")
    if why:
        raise error(why)
    return call


def script(checkout, call: CheckoutCall, kind: str) -> str:
    """The checkout's own sandbox script of ``kind``, by its absolute path (run_final_eval.sh's REPO_ROOT form)."""
    return str(Path(checkout).resolve() / facts.SCRIPTS[kind].format(eval=call.files.eval_dir))


def runtime_wrap(checkout, call: CheckoutCall, runtime) -> list[str]:
    """What goes before the job's re-start into an apptainer site's image (``runtime``: the job's StageRuntime):
    ``bash with_answer_sandbox.sh <sif>``; [] for any other task or site."""
    if not kinds(call) or runtime is None or runtime.kind != "apptainer":
        return []
    return ["bash", script(checkout, call, "apptainer"), str(runtime.image)]


def attempt_prefix(checkout, call: CheckoutCall, runtime_kind: str | None, environ: dict) -> list[str]:
    """What goes before one attempt's ``python evaluate_final_eval.py ...`` (``environ``: the attempt's, changed in
    place): nothing for a task without a sandbox, or in an apptainer site's image, which :func:`runtime_wrap`
    started beside the sandbox (its socket in ``environ``); else the checkout's with_answer_sandbox_local.sh, which
    sets the socket (an inherited one is dropped). ValueError (one line) where the sandbox cannot be there or does
    not start here (tried once, around ``true``: a site whose image lacks unshare or user namespaces fails the job
    in one line, not every attempt into a baseline fallback)."""
    if not kinds(call):
        return []
    why = refusal(call, runtime_kind)
    if why:
        raise ValueError(why)
    eval_dir = call.files.eval_dir
    if site_kind(runtime_kind) == "apptainer":
        sock = environ.get(SOCKET_ENV)
        if not sock or not Path(sock).is_socket():
            raise ValueError(
                f"{eval_dir}: this job's evaluation image was started without the checkout's answer sandbox "
                f"({SOCKET_ENV}: {sock or 'not set'}); its answers never run bare"
            )
        return []
    environ.pop(SOCKET_ENV, None)
    prefix = ["bash", script(checkout, call, "local")]
    try:
        tried = subprocess.run([*prefix, "true"], env=environ, capture_output=True, text=True, timeout=START_TIMEOUT_S)
        said = (tried.stderr.strip().splitlines() or [f"exit {tried.returncode}"])[-1]
    except subprocess.TimeoutExpired:
        tried, said = None, f"no answer after {START_TIMEOUT_S} s"
    if tried is None or tried.returncode != 0:
        raise ValueError(f"{eval_dir}: the checkout's answer sandbox ({prefix[1]}) does not start here: {said}")
    return prefix


def runtime_kind_of(job) -> str | None:
    """The site runtime's kind of an evaluation job (an EvaluateSpec; None: this machine's default)."""
    runtime = getattr(job, "runtime", None)
    return runtime.kind if runtime is not None else None
