"""The train stage: ``cell.train_cell`` runs one cell's trainer into its checkpoint dir and writes the manifest.

One module per agent kind (``sft``, ``grpo``, ``verl``, ``nemo``, ``agent_cell``; SkyRL in ``ptflow.launch.skyrl``),
each found through the registry ``ptflow.config.kinds``.
"""
