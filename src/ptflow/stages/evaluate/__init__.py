"""The evaluate stage: turning an eval's config (``ptflow.config.entries.Eval``: task spec, task args, limits, sampling,
token budgets, grader) and the site's provider into one *call* document (``settings``), checking the eval's data is
complete offline and fetching it where the network is (``sources``), running the evaluation through inspect-ai with
PostTrainBench's retry ladder limited to budget-curable failures and writing eval.json with the task's own headline
metric (``run``), and the evaluate stage's preflight checks (``preflight``). ``kit/`` is the standalone
``evaluate.py`` (with ptflow's own GPQA-main and Arena-Hard writing tasks and the family chat templates) that the
final evaluation and an agent both run on the same call; ``inspect_eval`` is the embedded default's toy task."""
