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
"""

from __future__ import annotations

import functools
import inspect

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
