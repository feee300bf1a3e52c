"""The judge's room: rules judge_run and judge (``workflow/rules/judge.smk``, ``workflow/scripts/judge*.py``).

- ``vote``     — rule judge_run's job, one vote: a judge of the panel reads a cli-agent cell's trace (an agent CLI in a
  copy of its workspace, or a command reading the trace on stdin) and its verdict goes to ``judges/<id>/run<k>.json``;
- ``ptb_vote`` — a vote of a PostTrainBench checkout's own panel (v1.1, main's), run here as the adapter says its
  judge runs;
- ``panel``    — rule judge's job: the panel's decision over a cell's votes into judge.json;
- ``ballot``   — what one vote is about (the judged cell) and what it casts (its judge, its place in the panel);
- ``trace``    — an agent's stream as readable markdown (trace.md, a judge's own judge_trace.md);
- ``sign_in``  — a judge's CLI signed in with a subscription instead of an API key.

PostTrainBench's protocol pieces (its judges' homes, prompts, command lines and verdict files) are its adapter's,
``ptflow.stages.posttrainbench.judge_v10``/``judge_v11``/``judge_run_v11``/``judge_main`` (by protocol:
``judge_panels``), which this room calls and which never
import it. The panel's rules as configured are ``ptflow.config.judges``.
"""
