"""Two things Snakemake does for every job of a rule that give the same answer for each: done once instead.

Both were measured with bench/snakemake_costs.py on a 10,000-cell dry-run (issue 16), and both are still per job
in the newest Snakemake (9.27.1) and smart_open (9.0.2). Neither changes what Snakemake decides.

- **The script check** (~14 s of ~82 s). While it builds the DAG, Snakemake's ``ScriptProcessor.process_job``
  (snakemake/dag.py) checks for every job of a ``script:`` rule that the script can be read: it formats the script's
  path with the job's wildcards and params and reads the file through the workflow's source cache (three
  ``smart_open.parse_uri`` calls, each building a namedtuple class). ptflow's script paths have no ``{...}``
  placeholder, so every job of a rule checks the same file. :func:`check_each_script_once` wraps that method: the
  first job of each rule runs Snakemake's own check (a missing script still fails with Snakemake's own error);
  later jobs of the same rule and script skip it. A path with a placeholder is still checked per job.
- **The signature of** ``Resource.evaluate`` (~5 s). Snakemake evaluates every callable resource through the bound
  ``Resource.evaluate(*args, **kwargs)`` and reads that method's parameters with ``inspect.signature`` twice per
  resource per job. ptflow's ``runtime`` and ``mem_mb`` grow with each attempt (``retry_growth``), so they are
  callables. :func:`sign_resource_evaluate_once` states the parameters once with Snakemake's own
  ``overwrite_function_params`` (as ``snakemake.ioutils`` does for its helpers, and ptflow for its ``get_*``):
  the same ``(*args, **kwargs)`` that ``inspect.signature`` returns.

Where a later Snakemake no longer has one of these, that one is left alone and Snakemake behaves as shipped.

One more thing every Snakemake command of the workflow repeats, measured with bench/job_start.py (bench/RESULTS.md):

- **The garbage collector's walks over what the imports and the parse made.** Snakemake's imports (SQLAlchemy,
  pydantic, pandas through the Slurm plugin, boto3 through smart_open) and the Snakefile's parse leave ~156,000
  objects the collector tracks (26 of them garbage when a job's parse ends), and every full collection walks them all
  again, the interpreter's at exit included: ~0.45 of a job's ~1.9 CPU-s Snakemake start, twice per Slurm job (the
  batch step's Snakemake and the srun'd one) and once per driver. :func:`freeze_parsed_objects`, at the end of the
  Snakefile, moves them into the collector's permanent generation (``gc.freeze``), so later collections walk only
  what the run makes after the parse. Cycles among the frozen objects (those 26, and any that become garbage later)
  are freed at the process's end only. It acts in Snakemake's own command only (``snakemake ...``, ``python -m
  snakemake ...``: the driver, a job's two, ``ptflow plan``'s dry-run), not in a process that runs the workflow
  through Snakemake's API for something else (a test, ``ptflow`` itself).
"""

from __future__ import annotations

import functools
import gc
import inspect
import sys
from pathlib import Path

_MARK = "_ptflow_once_per_rule"


def install() -> dict[str, bool]:
    """Both of the module's changes (each idempotent); which of them this Snakemake has."""
    return {"script check": check_each_script_once(), "evaluate signature": sign_resource_evaluate_once()}


def check_each_script_once() -> bool:
    """Wrap Snakemake's per-job script check; False where this Snakemake has no such check to wrap."""
    try:
        from snakemake.dag import ScriptProcessor
    except ImportError:
        return False
    original = getattr(ScriptProcessor, "process_job", None)
    if original is None:
        return False
    if getattr(original, _MARK, False):
        return True

    @functools.wraps(original)
    def process_job(self, job):
        entry = getattr(job.rule, self.script_type, None)
        if entry is None or "{" in str(entry):
            return original(self, job)
        # one processor per DAG: the memo lives (and dies) with it
        checked = self.__dict__.setdefault(_MARK, set())
        key = (job.rule.name, str(entry))
        if key not in checked:
            original(self, job)
            checked.add(key)

    setattr(process_job, _MARK, True)
    ScriptProcessor.process_job = process_job
    return True


def sign_resource_evaluate_once() -> bool:
    """State the parameters of ``Resource.evaluate`` as bound; False where this Snakemake lacks what that needs."""
    try:
        from snakemake.common import overwrite_function_params
        from snakemake.resources import Resource
    except ImportError:
        return False
    evaluate = getattr(Resource, "evaluate", None)
    if evaluate is None:
        return False
    # what inspect.signature gives for the bound method: the function's parameters without `self`
    bound = list(inspect.signature(evaluate).parameters.values())[1:]
    overwrite_function_params(evaluate, inspect.Signature(bound).parameters)
    return True


def freeze_parsed_objects(argv0: str | None = None) -> bool:
    """In Snakemake's own command (``argv0``: ``sys.argv[0]`` unless given), leave every object made so far out of the
    garbage collector's later passes (``gc.freeze``); False, and nothing done, in any other process."""
    path = Path(sys.argv[0] if argv0 is None else argv0)
    if not (path.name == "snakemake" or (path.name == "__main__.py" and path.parent.name == "snakemake")):
        return False
    gc.freeze()
    return True
