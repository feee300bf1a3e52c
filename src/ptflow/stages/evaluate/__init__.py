"""The evaluate stage: one cell through inspect-ai (``inspect_eval``), then eval.json derived from inspect's log and
written atomically (``run``), with PostTrainBench's retry ladder of smaller generation budgets."""
