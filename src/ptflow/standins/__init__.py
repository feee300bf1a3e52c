"""Stand-ins: real programs that take the place of what cannot run here, selectable on purpose and named as such.

- ``scripted_agent`` — a coding agent without an LLM (cli ``scripted``): post-trains through ptflow's own trainer
  inside the real agent-cell machinery (task dir, timeout, container flags, final_model), so the path is proven
  without an agent API.
- ``skyrl_trainer`` — the default trainer of the ``skyrl`` kind: calls the SkyRL server like a SkyRL trainer would
  and learns nothing (no GPU here for SkyRL itself); set ``params.trainer`` to SkyRL's entry point on a GPU site.

Nothing in ``config``, ``cluster``, ``launch`` or ``stages`` imports this package; they name its modules only as
commands to run.
"""
