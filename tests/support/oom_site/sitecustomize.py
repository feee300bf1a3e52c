"""Imported by every Python process started with this directory on ``PYTHONPATH`` (the site module's hook): where
``PTFLOW_TEST_OOM_AGENTS`` is set, the agent kind ``trl-sft`` trains with the stand-in of
``tests/support/oom_trainer.py`` (its named agents run out of GPU memory, the others train for real). Only
tests/slurm/test_failure_causes_on_slurm.py puts it there, for its run's jobs."""

import os

if os.environ.get("PTFLOW_TEST_OOM_AGENTS"):
    import dataclasses

    from ptflow.config import kinds

    kinds.KINDS["trl-sft"] = dataclasses.replace(kinds.KINDS["trl-sft"], trainer="tests.support.oom_trainer:run")
