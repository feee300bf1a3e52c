"""Supervised training jobs: sites with ``infra_retries`` (pyxis/TAO clusters) run the ``train`` rule on the login
node as a light supervisor, which submits the GPU job itself and resubmits it after infrastructure failures.

Why not the plugin: a node failure kills the rule's own allocation, so whatever decides to retry must live outside
it, and Snakemake's ``retries`` cannot tell a dead node from a Python traceback (see ``infra_retry``). The
supervisor renders a batch script that runs the rule's own script again (Snakemake's generated script with the job's
inputs, outputs and params) under ``sbatch`` with the flags of the stage's request (``Request.sbatch_options``: the
same resources the plugin would have used) and hands it to :func:`ptflow.cluster.infra_retry.run_with_retries`,
which writes ``status.json`` beside the manifest. Inside the job (``PTFLOW_ATTEMPT`` set) the script trains as
usual, in the site's container.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from ptflow.config.sites import Request
from ptflow.files import atomic_path

ATTEMPT_ENV = "PTFLOW_ATTEMPT"  # set by pyxis.sbatch_submitter in each submitted job


def inside_supervised_job() -> bool:
    return ATTEMPT_ENV in os.environ


def render_batch_script(
    path: str | Path, script: str, python: str = sys.executable, internal_timeout: int | None = None
) -> Path:
    """``#!/bin/bash`` that re-runs the rule's script (absolute paths: the job starts in the submit dir). With
    ``internal_timeout`` (seconds) the job stops itself before Slurm's limit (pyxis/TAO: 3.8 h of 4 h), so it
    ends with its own status and message instead of a TIMEOUT kill."""
    run = f"{shlex.quote(python)} {shlex.quote(str(Path(script).resolve()))}"
    lines = [
        "#!/bin/bash",
        "# ptflow supervised train job (ptflow.cluster.supervise): the rule's own script, run again in the allocation.",
        "set -euo pipefail",
        f': "${{{ATTEMPT_ENV}:?submitted by the ptflow supervisor, which sets {ATTEMPT_ENV}}}"',
    ]
    if internal_timeout:
        lines += [
            "rc=0",
            f"timeout --signal=TERM --kill-after=60 {int(internal_timeout)} {run} || rc=$?",
            "if ((rc == 124)); then",
            f'  echo "ptflow: stopped at the internal timeout ({int(internal_timeout)} s) before the time limit" >&2',
            "fi",
            'exit "$rc"',
        ]
    else:
        lines.append(f"exec {run}")
    with atomic_path(path) as tmp:
        Path(tmp).write_text("\n".join(lines) + "\n")
        os.chmod(tmp, 0o755)
    return Path(path)


def internal_timeout_seconds(runtime_minutes, fraction: float | None) -> int | None:
    if not fraction or not runtime_minutes:
        return None
    return int(float(runtime_minutes) * 60 * fraction)


def supervise(
    script: str,
    *,
    request: Request,
    attempt: int = 1,
    job_name: str,
    results_dir: str | Path,
    max_retries: int,
    internal_timeout_fraction: float | None = None,
    log=print,
) -> dict:
    """Submit the rule's script as a job with ``request`` (at the rule's ``attempt``) and resubmit it after
    infrastructure failures; the final status dict."""
    from ptflow.cluster import infra_retry as pyxis

    results_dir = Path(results_dir)
    jobs_dir = results_dir / "slurm"
    jobs_dir.mkdir(parents=True, exist_ok=True)
    internal = internal_timeout_seconds(request.scaled(attempt).get("runtime"), internal_timeout_fraction)
    batch = render_batch_script(jobs_dir / "train.sbatch", script, internal_timeout=internal)
    options = request.sbatch_options(job_name=job_name, output=str(jobs_dir / "train-%j.out"), attempt=attempt)
    log(f"supervising {job_name}: sbatch {shlex.join(options)} {batch} (up to {max_retries} resubmissions)")

    def log_of(job_id: str) -> str:
        out = jobs_dir / f"train-{job_id}.out"
        return out.read_text(errors="replace") if out.is_file() else ""

    return pyxis.run_with_retries(
        pyxis.sbatch_submitter(batch, options), log_of, results_dir, max_retries=max_retries, log=log
    )
