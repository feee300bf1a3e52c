"""One of Snakemake's per-job checks, done once per rule instead of once per job (the same check, not a new one).

While it builds the DAG, Snakemake's ``ScriptProcessor.process_job`` (snakemake/dag.py) checks for every job of a
``script:`` rule that the script can be read: it formats the script's path with the job's wildcards and params and
reads the file through the workflow's source cache (three ``smart_open.parse_uri`` calls, each building a namedtuple
class). For ptflow's rules the path has no ``{...}`` placeholder, so every job of a rule checks the same file. At
10,000 cells that is ~15 s of a ~95 s dry-run (bench/snakemake_costs.py), and the largest reason ``snakemake -n``
and ``ptflow plan`` were over 1.5x a trivial workflow of the same shape (issue 16; Snakemake 9.27.1, smart_open
9.0.2, the newest of both, still check per job).

:func:`check_each_script_once` wraps that method of this process's Snakemake: the first job of each rule runs
Snakemake's own check (so a missing script still fails the dry-run with Snakemake's own error); later jobs of the
same rule and script skip it. A script path with a placeholder is checked per job, as before. Where Snakemake has no
such method (a later release that moved it), nothing is wrapped and Snakemake behaves as shipped.
"""

from __future__ import annotations

import functools

_MARK = "_ptflow_once_per_rule"


def check_each_script_once() -> bool:
    """Wrap Snakemake's per-job script check (idempotent); False where this Snakemake has no such check to wrap."""
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
