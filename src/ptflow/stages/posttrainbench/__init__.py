"""PostTrainBench's own pieces run from a pinned checkout (``ptflow.config.posttrainbench`` says where they lie):
the checkout as a file target, its evaluation of a cell, an agent cell's task dir and prompt, the judge's prompt."""
