"""An agent-CLI cell: its task dir and workspace, budget and attempts, the CLI's launch and environment, and the
CLIs' own code (``clis/``: each CLI's home settings, environment, stream traces, API spend and judge command).

The facts config and the cluster need about the CLIs (names, pins, Node.js, the container home) stay in
``ptflow.config.agent_clis``, below this layer.
"""
