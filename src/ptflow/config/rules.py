"""What each rule of the workflow asks of a site: the stage whose request it gets, whether it runs on the login node,
and whether it submits its stage's request itself. Rules get their threads, resources and ``localrule`` through this
table (``workflow/rules/common.smk``), and ``ptflow plan`` prices each planned job through it, so a plan and a run see
one request (a dry-run prints no threads, and nothing of the jobs a login-node supervisor submits).
"""

from __future__ import annotations

RULE_STAGES = {
    "cache_dataset": "cache",
    "cache_model": "cache",
    "cache_eval_data": "cache",
    "cache_resources": "cache",
    "hf_cache": "cache",
    "posttrainbench_checkout": "cache",  # a clone needs the network, as the cache stage does
    "env": "image",
    # registry imports get the site's `convert` request instead (ptflow.cluster.images.image_stage)
    "image": "image",
    "edf": "aggregate",
    "preprocess": "preprocess",
    "train": "train",
    "train_supervised": "train",
    "evaluate": "evaluate",
    "judge": "aggregate",
    "aggregate": "aggregate",
}

# The two rules of a training, disjoint by agent (workflow/rules/train.smk): a plugin job, or a login-node supervisor.
TRAIN_RULES = frozenset({"train", "train_supervised"})

# Login-node rules that submit their stage's request themselves (ptflow.cluster.supervise), and the helper requests
# of the agent's kind (``site_requests``: SkyRL's runtime server) before it. Their Slurm jobs are the rule's jobs.
SUPERVISOR_RULES = frozenset({"train_supervised"})

# On the login node, never submitted by the plugin (their stage's request only sizes Snakemake's local scheduling,
# or, for supervisors, the job they submit): an EDF file is a few lines of TOML. (The judge is a CPU job: its agent
# CLI runs in the site's agent image, which the login node may not have; compute nodes reach the agents' APIs, as
# the agent cells themselves need.)
LOGIN_NODE_RULES = frozenset({"edf"}) | SUPERVISOR_RULES


def stage_of(rule: str) -> str:
    """The site stage of a rule; a one-line error for a rule the table does not know."""
    if rule not in RULE_STAGES:
        raise ValueError(
            f"rule {rule!r} has no site request: add it to ptflow.config.rules.RULE_STAGES "
            f"(rules: {', '.join(RULE_STAGES)})"
        )
    return RULE_STAGES[rule]
