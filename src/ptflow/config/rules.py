"""What each rule of the workflow asks of a site: the request (``resources.<name>`` of a site file) that sizes its
jobs, whether it runs on the login node, and whether it submits its request itself. Rules get their threads,
resources and ``localrule`` through this table (``workflow/rules/common.smk``), and ``ptflow plan`` prices each
planned job through it, so a plan and a run see one request (a dry-run prints no threads, and nothing of the jobs a
login-node supervisor submits).

Every job kind has a request name of its own; a site file that leaves one out sizes those jobs with the request
:data:`REQUEST_FALLBACK` names (``resources.judge``, else ``resources.aggregate``), and a site file that leaves that
out too, with ``resources.default``. :meth:`ptflow.config.sites.Site.request` is the one place that applies it.
"""

from __future__ import annotations

# The request names a site file may give under `resources` (besides `default`, which every request starts from).
SITE_REQUESTS = (
    "cache",
    "image",
    "convert",
    "env",
    "preprocess",
    "train",
    "evaluate",
    "aggregate",
    "judge",
    "edf",
    "runtime_server",  # the SkyRL server, submitted by the train job's supervisor (AgentKind.site_requests)
)

# Job kinds whose request a site file may leave out, and the request that sizes them then. Applied in one place,
# ptflow.config.sites.Site.request (the plan, doctor and preflight read requests through it); documented in
# docs/configuration.md (site files) and the site schema.
REQUEST_FALLBACK = {
    "convert": "image",  # a registry import (-> .sqsh/.sif; TAO's conversion partition) is an image job
    "env": "image",  # a software environment is built in a CPU job, as an image is
    "edf": "aggregate",  # an EDF file is written on the login node: its request only sizes local scheduling
    "judge": "aggregate",  # the judge is a CPU job (its agent CLI in the agent's image), as the aggregation is
}

# rule -> the request (SITE_REQUESTS) that sizes its jobs
RULE_REQUESTS = {
    "cache_dataset": "cache",
    "cache_model": "cache",
    "cache_eval_data": "cache",
    "cache_resources": "cache",
    "hf_cache": "cache",
    "posttrainbench_checkout": "cache",  # a clone needs the network, as the cache rules do
    "posttrainbench_cache": "cache",  # the checkout's resources.json into HF_HOME (downloads: a CPU job)
    "env": "env",
    # registry imports get the site's `convert` request instead (ptflow.cluster.images.image_request)
    "image": "image",
    "edf": "edf",
    "preprocess": "preprocess",
    "train": "train",
    "train_supervised": "train",
    "evaluate": "evaluate",
    "judge_run": "judge",  # one vote of the judge panel: a judge's CLI in the agent's image (a CPU job)
    "judge": "aggregate",  # the panel's decision over a cell's votes: JSON files read, on the login node
    "evaluate_seed": "evaluate",  # one evaluation seed of a seeded eval's cell: an evaluation like any other
    "seed_mean": "aggregate",  # the mean over a cell's seeds: JSON files read, on the login node
    "rescore": "aggregate",  # a stored inspect log scored again: no model, no GPU
    "aggregate": "aggregate",
}

# An evaluate job that adopts the evaluation its cell's train job made in its own allocation (AgentKind.
# evaluates_in_train_job) moves a few files: it is sized by this request (a CPU job), not by `evaluate`.
ADOPT_REQUEST = "aggregate"

# The two rules of a training, disjoint by agent (workflow/rules/train.smk): a plugin job, or a login-node supervisor.
TRAIN_RULES = frozenset({"train", "train_supervised"})

# Login-node rules that submit their request themselves (ptflow.cluster.supervise), and the helper requests
# of the agent's kind (``site_requests``: the SkyRL server) before it. Their Slurm jobs are the rule's jobs.
SUPERVISOR_RULES = frozenset({"train_supervised"})

# On the login node, never submitted by the plugin (their request only sizes Snakemake's local scheduling,
# or, for supervisors, the job they submit): an EDF file is a few lines of TOML; the whole cache's marker (hf_cache)
# merges the per-repo markers into one JSON file, and a Slurm job for it would put a queue wait (and two Snakemake
# starts) between the last download and the run's end; the judge panel's decision (rule judge) reads a cell's vote
# files. (A vote, rule judge_run, is a CPU job: its agent CLI runs in the site's agent image, which the login node
# may not have; compute nodes reach the agents' APIs, as the agent cells themselves need.)
LOGIN_NODE_RULES = frozenset({"edf", "hf_cache", "seed_mean", "judge"}) | SUPERVISOR_RULES


def request_of(rule: str) -> str:
    """The site request of a rule (a name of SITE_REQUESTS); a one-line error for a rule the table does not know."""
    if rule not in RULE_REQUESTS:
        raise ValueError(
            f"rule {rule!r} has no site request: add it to ptflow.config.rules.RULE_REQUESTS "
            f"(rules: {', '.join(RULE_REQUESTS)})"
        )
    return RULE_REQUESTS[rule]
