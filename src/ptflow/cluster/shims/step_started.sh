#!/bin/sh
# Task prolog (SLURM_TASK_PROLOG, set by ptflow's srun shim): the step's task started, so the step is never run twice.
if [ -n "${PTFLOW_STEP_TOKEN:-}" ]; then
    : >"$PTFLOW_STEP_TOKEN" 2>/dev/null || true
fi
exit 0
