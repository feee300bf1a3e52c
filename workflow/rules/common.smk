# Configuration, site and paths, loaded once; every rule input, param and resource comes from here. What a job's
# params hold is ptflow.jobs (typed specs, built by one Jobs object); these functions only look them up. Names:
# get_* take a job's wildcards (Snakemake calls them per job); *_of(rule) give a rule its threads or resources when
# the workflow is parsed; other names are values of the whole matrix, read at parse.
import functools
import json
import time
from pathlib import Path

from snakemake.exceptions import WorkflowError

from ptflow.cluster import envs, images
from ptflow.config import naming
from ptflow.config.load import reference_table, resolve, share_config
from ptflow.config.rules import LOGIN_NODE_RULES
from ptflow.config.spend import spend_settings
from ptflow.config.validate import ConfigError
from ptflow.jobenv import apply_site_env
from ptflow.jobs.build import Jobs, JobsError
from ptflow.jobs.rule_values import (
    RuleError,
    RuleInputs,
    RuleValues,
    rule_request,
    sign_job_functions,
)
from ptflow.ops.run_hooks import RunHooks
from ptflow.results.overrides import decisions_for_config

try:
    # Snakemake has merged the embedded default, --configfile and --config into `config` already.
    _LOADED = resolve(config, Path(workflow.basedir))
    # scoring.overrides' file, checked against the matrix: its accepted cells are no targets of the run
    DECISIONS = decisions_for_config(_LOADED.cfg, Path(workflow.basedir))
    SPEND = spend_settings(_LOADED.cfg, Path(workflow.basedir))  # caps and prices
except ConfigError as exc:
    raise WorkflowError(str(exc)) from None
# CFG: the validated config; SITE: the site file; LAYOUT: where every output, log and cache path lies
# (ptflow.config.layout.Layout); RUNTIME: the site's software runtime (images, containers, envs).
CFG, SITE, LAYOUT = _LOADED.cfg, _LOADED.site, _LOADED.layout
share_config(config)  # for `ptflow plan` (only where it asks)
RUNTIME = SITE.runtime
apply_site_env(SITE.process_env)
JOBS = Jobs(CFG, SITE, LAYOUT, lambda: _ptb_checkout_marker(), SPEND)
VALUES = RuleValues(JOBS)
INPUTS = RuleInputs(JOBS, DECISIONS.accepted, SPEND, announce=workflow.is_main_process)
# HOOKS' onstart writes the matrix cap's ledger (JOBS.spend), among the driver's other steps
HOOKS = RunHooks(JOBS, workflow)
HOOKS.patient_slurm_clients()
# Software of every rule: the conda env (with --sdm conda) or the venv/container the site provides.
CONDA_ENV = str(Path(workflow.basedir) / "envs" / "ptflow.yaml")
HF_HOME = LAYOUT.hf_home


wildcard_constraints:
    model=naming.MODEL_NAME_PATTERN,
    dataset=naming.MODEL_NAME_PATTERN,
    eval=naming.SAFE_ID_PATTERN,
    agent=naming.SLOT_PATTERN,
    judge=r"[a-z0-9][a-z0-9-]*",  # a judge panel's ids (ptflow.config.judges.JUDGE_ID)
    run=r"\d+",


def _workflow_error(func):
    """A rule or job the package cannot build fails the workflow with its one line (no traceback)."""

    @functools.wraps(func)
    def call(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except (RuleError, JobsError) as exc:
            raise WorkflowError(str(exc)) from None

    return call


# ---- driver hooks (the Snakefile's onstart/onsuccess/onerror): ptflow.ops.run_hooks ----


def on_driver_start():
    HOOKS.on_start()


def on_driver_end():
    HOOKS.on_end()


def on_driver_error(log):
    HOOKS.on_error(log)


# ---- threads and resources: from the site file, per job kind (and per agent for train) ----


@_workflow_error
def is_local(rule):
    """localrule: the login-node rules of ptflow.config.rules (the plan prices them from the same table)."""
    rule_request(rule)
    return rule in LOGIN_NODE_RULES


threads_of = _workflow_error(VALUES.threads)
resources_of = _workflow_error(VALUES.resources)
supervised_held_of = _workflow_error(VALUES.supervised_held)
supervised_agents = VALUES.supervised_agents
agent_constraint = VALUES.agent_constraint
rescorer_constraint = VALUES.rescorer_constraint


def get_attempt(wildcards, attempt):
    return attempt


# ---- cache and data ----


def get_dataset_spec(wildcards):
    return JOBS.dataset_spec(wildcards.dataset)


def get_model_spec(wildcards):
    return JOBS.model_spec(wildcards.model)


def get_tokenizer_datasets(wildcards):
    return JOBS.tokenizer_datasets(wildcards.model)


def get_eval_data_spec(wildcards):
    return JOBS.eval_data_spec(wildcards.eval)


def get_preprocess_input(wildcards):
    return LAYOUT.dataset_marker(CFG.evals[wildcards.eval].dataset_name)


def get_eval_spec(wildcards):
    return JOBS.eval_spec(wildcards.eval)


cache_markers = JOBS.cache_markers
data_markers = JOBS.data_markers


def cache_resource_files():
    return list(CFG.raw.get("cache_resources") or [])


# ---- train ----


@_workflow_error
def get_train_input(wildcards):
    return INPUTS.train(wildcards.model, wildcards.eval, wildcards.agent)


def get_env_build_spec(wildcards):
    return envs.env_spec(RUNTIME, wildcards.env)


def get_env_build_input(wildcards):
    return INPUTS.env_build(wildcards.env)


@_workflow_error
def get_train_params(wildcards):
    """Rule train's one params value (Jobs.train_params): the spec, compared to decide a
    rerun; beside it, what reruns no training (the evaluation handoff, the spend)."""
    w = wildcards
    checkout = "checkout" in INPUTS.train(w.model, w.eval, w.agent)
    return JOBS.train_params(w.model, w.eval, w.agent, _ptb_objects, checkout)


# ---- evaluate ----


def get_evaluate_input(wildcards):
    return INPUTS.evaluate(wildcards.model, wildcards.eval, wildcards.agent)


def get_evaluate_params(wildcards):
    return JOBS.evaluate(
        wildcards.model, wildcards.eval, wildcards.agent, _ptb_objects
    ).to_params()


def get_adopts_evaluation(wildcards):
    """Whether the evaluate job adopts the evaluation its cell's train job made (RuleValues.adopts_evaluation)."""
    return VALUES.adopts_evaluation(
        wildcards.model,
        wildcards.eval,
        wildcards.agent,
        lambda: get_evaluate_params(wildcards),
    )


def get_evaluate_seed_input(wildcards):
    return INPUTS.evaluate_seed(
        wildcards.model, wildcards.eval, wildcards.agent, int(wildcards.seed)
    )


def get_evaluate_seed_params(wildcards):
    return JOBS.evaluate(
        wildcards.model,
        wildcards.eval,
        wildcards.agent,
        _ptb_objects,
        seed=int(wildcards.seed),
    ).to_params()


def get_seed_is_light(wildcards):
    """Whether an evaluate_seed job adopts its train job's evaluation or is skipped: a CPU job (RuleValues)."""
    params = lambda: get_evaluate_seed_params(wildcards)
    w = wildcards
    return VALUES.seed_is_light(w.model, w.eval, w.agent, int(w.seed), params)


def get_seed_mean_input(wildcards):
    return INPUTS.seed_mean(wildcards.model, wildcards.eval, wildcards.agent)


def get_seed_changes_data(wildcards):
    return CFG.evals[wildcards.eval].seed_changes_data


eval_constraint = VALUES.eval_constraint
evaluate_threads = VALUES.evaluate_threads(get_adopts_evaluation)
evaluate_resources = VALUES.evaluate_resources(get_adopts_evaluation)
evaluate_seed_threads = VALUES.evaluate_threads(get_seed_is_light)
evaluate_seed_resources = VALUES.evaluate_resources(get_seed_is_light)


# ---- judge: agent-CLI cells' traces checked for contamination / disallowed models (optional) ----


judge_jsons = INPUTS.judge_jsons


def get_judge_run_input(w):
    return INPUTS.judge_run(w.model, w.eval, w.agent, w.judge)


def get_judge_run_params(w):
    return JOBS.judge(
        w.model, w.eval, w.agent, _ptb_objects, w.judge, int(w.run)
    ).to_params()


def get_judge_input(wildcards):
    return INPUTS.judge(wildcards.model, wildcards.eval, wildcards.agent)


def get_judge_params(w):
    return JOBS.judge_panel(w.model, w.eval, w.agent).to_params()


# ---- rescore: a cell's stored inspect log scored again (no model, no GPU) ----


rescore_jsons = INPUTS.rescore_jsons


# ---- report ----


eval_jsons = INPUTS.eval_jsons
final_outputs = INPUTS.final_outputs


def scoring_params():
    reference = reference_table(CFG.raw, Path(workflow.basedir))
    return INPUTS.scoring(JOBS.scoring(reference))  # + the spend cap's unstarted


def overrides_input():
    """scoring.overrides (ptflow.results.overrides): an input of rule aggregate alone, so editing it rescores
    and reruns no job of a cell (an accepted cell leaves the targets; once no longer accepted, it
    is made again)."""
    return {"overrides": str(DECISIONS.path)} if DECISIONS.path else {}


# ---- images: only on sites whose runtime is a container and only for stages/agents that name an image ----

IMAGES_DIR = images.images_dir(RUNTIME)
# Changes every run: re-imports :latest sources, but only under force_reconvert_latest.
RUN_TOKEN = time.strftime("%Y%m%dT%H%M%S")


def get_image_name(wildcards):
    """The image behind a file stem (ngc-ray+25.06 -> ngc-ray:25.06)."""
    return images.name_of(RUNTIME, wildcards.image)


@_workflow_error
def get_image_spec(wildcards):
    return JOBS.image_spec(
        get_image_name(wildcards), workflow.basedir, _ptb_checkout_marker
    )


def get_image_runtime(wildcards):
    """The part of the site's runtime that defines this image (so unrelated site edits do not rebuild it)."""
    spec = {k: v for k, v in get_image_spec(wildcards).items() if k != "build_args"}
    return images.image_runtime(RUNTIME, get_image_name(wildcards), spec).to_dict()


@_workflow_error
def get_image_recipe(wildcards):
    spec_of = lambda: get_image_spec(wildcards)
    return INPUTS.image_recipe(get_image_name(wildcards), spec_of, workflow.basedir)


def get_image_digest(wildcards):
    spec = get_image_spec(wildcards)
    return images.image_digest(
        RUNTIME,
        get_image_name(wildcards),
        spec,
        workflow.basedir,
        spec.get("build_args"),
    )


def get_image_reconvert(wildcards):
    return images.reconvert_token(RUNTIME, get_image_spec(wildcards), RUN_TOKEN)


def get_image_request(wildcards):
    """The site request of an image job: registry imports get `convert` (TAO's conversion partition), builds
    `image`."""
    return images.image_request(RUNTIME, wildcards.image)


def get_image_threads(wildcards):
    return JOBS.request(get_image_request(wildcards)).threads


def image_resources():
    return VALUES.image_resources(get_image_request)


def get_edf_image(wildcards):
    return images.image_path(
        RUNTIME, images.name_of(RUNTIME, wildcards.image, edf=True)
    )


def get_edf_name(wildcards):
    return images.name_of(RUNTIME, wildcards.image, edf=True)


# ---- PostTrainBench checkout (config key posttrainbench; ptflow.config.posttrainbench) ----


@_workflow_error
def ptb_checkout_spec():
    return JOBS.checkout_spec()


aggregate_checkout_input = INPUTS.aggregate_checkout


def get_ptb_cache_input(wildcards):
    return INPUTS.checkout_cache()


def get_ptb_cache_params(wildcards):
    return JOBS.checkout_cache_spec(_ptb_objects)


def _ptb_checkout_marker():
    """The checkout checkpoint's marker (after the checkpoint: until then the params are 'to be determined' and
    Snakemake evaluates them again once the checkout exists)."""
    return json.loads(
        Path(checkpoints.posttrainbench_checkout.get().output[0]).read_text()
    )


def _ptb_objects(paths):
    """The git object ids of ``paths`` from the checkout's marker."""
    objects = _ptb_checkout_marker()["objects"]
    return {p: objects[p] for p in sorted(paths)}


# Every get_* that rules call per job: its signature stated once.
sign_job_functions(globals())
