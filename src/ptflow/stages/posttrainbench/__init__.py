"""The PostTrainBench adapter: its own pieces run from a pinned checkout (``ptflow.config.posttrainbench`` says where
they lie and which protocol a checkout has), called by the rooms: the checkout as a file target (``checkout``), its
evaluation of a cell (``checkout_eval``, ``data_probe``), an agent cell's task dir and prompt (``agent``), and its
judges (``judge_v10``: run_task.sh's one judge; ``judge_v11``, ``judge_run_v11``: d27a95e's panel; ``judge_main``:
main's src/judges/; ``judge_panels``: the panels by protocol) — their homes, prompts, command lines and verdict files,
which the judge's room (``ptflow.stages.judge``) runs."""
