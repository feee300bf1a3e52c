"""Programs spread over Slurm allocations: the Ray launcher (verl, NeMo-RL) and SkyRL's two-job coordination.

Launchers are rendered from ``ptflow.templates`` into the job's log dir, so what ran sits beside its logs. This
package may import ``config`` and ``cluster``; it must not import ``stages`` or ``ops``.
"""
