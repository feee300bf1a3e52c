"""An agent cell's evaluation made in its train job's allocation, and its adoption by the evaluate job.

PostTrainBench runs the agent and then the evaluation in one sbatch job per cell (document 001): one wait in the GPU
queue per cell. ptflow does the same without giving up its files: once the agent has ended and the manifest is
written, the train job evaluates the model into a staging dir beside the cell (:data:`STAGED`), and the evaluate
rule's job, a CPU job of a few seconds (``ptflow.config.rules.ADOPT_REQUEST``), adopts it as its ``eval.json`` and
inspect dir. eval.json stays the evaluate rule's output: deleting it evaluates again, in an evaluate job of its own
(the staged result was moved when it was adopted).

A staged result is adopted only for the very evaluate params and manifest it was made for (:data:`RECORD`), and only
when it ended in a final status (:data:`ADOPTED_STATUSES`); anything else (none staged, a changed eval config, a
retrained cell, an evaluation that failed or ran out of the allocation's time) and the evaluate job evaluates by
itself on its GPU request. So a failed evaluation never reruns the agent: the train job has succeeded by then.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from ptflow.files import link_tree, sha256_file, write_json_atomic

STAGED = "evaluation-in-train-job"  # beside eval.json, never a rule's output
RECORD = "record.json"  # what the staged result was made for
ADOPTED_STATUSES = ("scored", "no_model")  # eval_failed in the allocation (maybe cut by its time) is evaluated again


def staged_dir(eval_json: str | Path) -> Path:
    return Path(eval_json).parent / STAGED


def has_staged(eval_json: str | Path) -> bool:
    return (staged_dir(eval_json) / RECORD).is_file()


def staged_stamp(eval_json: str | Path, manifest: str | Path) -> tuple[int, int] | None:
    """(mtime_ns of the staged record, of the manifest): what an answer of :func:`why_not_adoptable` holds for;
    None when nothing is staged."""
    try:
        return (staged_dir(eval_json) / RECORD).stat().st_mtime_ns, Path(manifest).stat().st_mtime_ns
    except OSError:
        return None


def _canonical(params: dict) -> dict:
    """params as they read back from JSON (tuples as lists), so a record compares equal to the job's params."""
    return json.loads(json.dumps(params, sort_keys=True))


def record_of(params: dict, manifest: str | Path) -> dict:
    return {"params": _canonical(params), "manifest_sha256": sha256_file(manifest)}


def why_not_adoptable(eval_json: str | Path, params: dict, manifest: str | Path | None) -> str | None:
    """None when the train job's staged evaluation is this evaluate job's result; else why not, in a few words."""
    staged = staged_dir(eval_json)
    if manifest is None:
        return "the cell has no train job"
    if not (staged / RECORD).is_file():
        return "its train job left no evaluation"
    try:
        rec = json.loads((staged / RECORD).read_text())
        status = json.loads((staged / "eval.json").read_text()).get("status")
    except (OSError, ValueError) as exc:
        return f"the train job's evaluation is unreadable ({exc})"
    if rec.get("params") != _canonical(params):
        return "the evaluation's settings changed after the train job"
    if not Path(manifest).is_file() or rec.get("manifest_sha256") != sha256_file(manifest):
        return "the model is not the one the train job evaluated"
    if status not in ADOPTED_STATUSES:
        return f"the train job's evaluation ended {status}"
    return None


def stage_evaluation(
    eval_json: str | Path, params: dict, manifest: str | Path, evaluate: Callable[[Path, Path], bool], log=print
) -> bool:
    """Run ``evaluate(eval_json, inspect_dir)`` into a fresh staging dir and keep its result (renamed into place
    whole, with its record) when it returns True and wrote eval.json; else leave nothing staged."""
    staged = staged_dir(eval_json)
    tmp = staged.with_name(f"{STAGED}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(staged, ignore_errors=True)  # made for an earlier manifest: never adoptable now
    tmp.mkdir(parents=True)
    try:
        done = evaluate(tmp / "eval.json", tmp / "inspect") and (tmp / "eval.json").is_file()
        if done:
            write_json_atomic(tmp / RECORD, record_of(params, manifest))
            os.replace(tmp, staged)
            return True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log("the evaluation in the train job left no result: the evaluate job evaluates by itself")
    return False


def adopt(eval_json: str | Path, inspect_dir: str | Path, log=print) -> dict:
    """The staged evaluation as the evaluate job's outputs: its inspect dir hard-linked (the staged one stays whole
    until the end, so a job killed midway is adopted again by its retry), eval.json written last, then the staging
    dir dropped; the eval.json written."""
    staged = staged_dir(eval_json)
    data = json.loads((staged / "eval.json").read_text())
    shutil.rmtree(inspect_dir, ignore_errors=True)
    Path(inspect_dir).parent.mkdir(parents=True, exist_ok=True)
    if (staged / "inspect").is_dir():
        link_tree(staged / "inspect", inspect_dir)
    else:
        Path(inspect_dir).mkdir()
    write_json_atomic(eval_json, {**data, "evaluated_in": "train_job"})
    shutil.rmtree(staged, ignore_errors=True)
    log(f"adopted the evaluation its train job made (job {data.get('slurm_job_id') or 'local'}): {data['status']}")
    return data
