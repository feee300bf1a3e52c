"""The train stage: ``cell.train_cell`` runs one cell's trainer into its checkpoint dir and writes the manifest.

One module per agent kind (``sft``, ``grpo``, ``verl``, ``nemo``; SkyRL in ``ptflow.launch.skyrl``, the cli-agent kind's
cell in ``ptflow.stages.train.agent.cell``), each found through the registry ``ptflow.config.kinds``.
"""
