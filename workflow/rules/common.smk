# Configuration, site and paths, loaded once; every rule input, param and resource comes from here. What a job's
# params hold is ptflow.jobs (typed specs, built by one Jobs object); these functions only look them up. Names:
# get_* take a job's wildcards (Snakemake calls them per job); *_of(rule) give a rule its threads or resources when
# the workflow is parsed; other names are values of the whole matrix, read at parse.
import functools
import json
import re
import time
from pathlib import Path

from snakemake.exceptions import WorkflowError

from ptflow.cluster import envs, images
from ptflow.config import naming
from ptflow.config.kinds import TRAIN_DATA_ALWAYS, TRAIN_DATA_IF_PARQUET
from ptflow.config.load import reference_table, resolve, share_config
from ptflow.config.matrix import Cell
from ptflow.config.rules import LOGIN_NODE_RULES
from ptflow.config.validate import ConfigError
from ptflow.jobenv import apply_site_env
from ptflow.jobs.build import Jobs, JobsError
from ptflow.jobs.rule_values import (
    RuleError,
    RuleValues,
    rule_request,
    sign_job_functions,
)
from ptflow.ops.run_hooks import RunHooks
from ptflow.stages.evaluate import in_train_job

try:
    # Snakemake has merged the embedded default, --configfile and --config into `config` already.
    _LOADED = resolve(config, Path(workflow.basedir))
except ConfigError as exc:
    raise WorkflowError(str(exc)) from None
# CFG: the validated config; SITE: the site file; LAYOUT: where every output, log and cache path lies
# (ptflow.config.layout.Layout); RUNTIME: the site's software runtime (images, containers, envs).
CFG, SITE, LAYOUT = _LOADED.cfg, _LOADED.site, _LOADED.layout
share_config(config)  # for `ptflow plan` (only where it asks)
RUNTIME = SITE.runtime
apply_site_env(SITE.process_env)
JOBS = Jobs(CFG, SITE, LAYOUT)
VALUES = RuleValues(JOBS)
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


# ---- threads and resources: from the site file, per job kind (and per agent for train) ----


@_workflow_error
def is_local(rule):
    """localrule: the login-node rules of ptflow.config.rules (the plan prices them from the same table)."""
    rule_request(rule)
    return rule in LOGIN_NODE_RULES


threads_of = _workflow_error(VALUES.threads)
resources_of = _workflow_error(VALUES.resources)
supervised_held_of = _workflow_error(VALUES.supervised_held)


def supervised_agents(supervised=True):
    """Agents whose train job a login-node supervisor submits (ptflow.cluster.supervise): every agent on sites with
    infra_retries, and kinds that submit a helper job first (SkyRL's runtime server). The others' train jobs are
    the plugin's."""
    return [
        a.id
        for a in CFG.agents.values()
        if a.trains and (SITE.supervises("train", a) is not None) == supervised
    ]


def agent_constraint(supervised):
    """The agent wildcard of the train rules, disjoint: plugin jobs (train) or login-node supervisors
    (train_supervised)."""
    ids = supervised_agents(supervised)
    return "|".join(re.escape(i) for i in ids) if ids else "(?!)"


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


def get_train_input(wildcards):
    agent = JOBS.agent(wildcards.agent)
    if not agent.trains:
        raise WorkflowError(f"agent {agent.id!r} is a baseline: it has no train job")
    inputs = {"base": LAYOUT.model_marker(wildcards.model)}
    data = agent.spec.train_data
    if data == TRAIN_DATA_ALWAYS or (
        data == TRAIN_DATA_IF_PARQUET and CFG.evals[wildcards.eval].uses_parquet
    ):
        inputs["data"] = LAYOUT.data(wildcards.eval, "train")
    # the agent's evaluate.py reads what the final evaluation reads
    if agent.spec.agent_cli:
        inputs.update(_evaluation_data_input(wildcards.eval))
    parent = CFG.parent_slot(wildcards.agent)
    if parent:
        inputs["parent"] = LAYOUT.manifest(wildcards.model, wildcards.eval, parent)
    inputs.update(image_inputs_of("train", wildcards))
    inputs.update(env_inputs(wildcards))
    return inputs


def env_inputs(wildcards):
    """The software environments (rule env) this agent's train job runs with."""
    names = envs.envs_for(RUNTIME, JOBS.agent(wildcards.agent))
    return {f"env_{n}": LAYOUT.env_record(n) for n in names}


def get_env_build_spec(wildcards):
    return envs.env_spec(RUNTIME, wildcards.env)


def get_env_build_input(wildcards):
    """An overlay venv sits on its image: the image (and EDF file) first."""
    spec = envs.env_spec(RUNTIME, wildcards.env)
    if spec["build"] != "overlay-venv":
        return {}
    return {
        key: ancient(path)
        for key, path in images.image_inputs(
            RUNTIME, spec["image"] if images.needs_images(RUNTIME) else None
        ).items()
    }


def get_train_params(wildcards):
    return JOBS.train(
        wildcards.model, wildcards.eval, wildcards.agent, _ptb_objects
    ).to_params()


# ---- evaluate ----


def get_evaluate_input(wildcards):
    agent = JOBS.agent(wildcards.agent)
    inputs = {}
    if agent.trains:
        inputs["manifest"] = LAYOUT.manifest(
            wildcards.model, wildcards.eval, wildcards.agent
        )
    else:
        cell = Cell(wildcards.model, wildcards.eval, wildcards.agent)
        inputs["base"] = LAYOUT.model_marker(CFG.evaluated_model(cell).name)
    inputs.update(_evaluation_data_input(wildcards.eval))
    inputs.update(image_inputs_of("evaluate", wildcards))
    return inputs


def _evaluation_data_input(eval_id):
    """The toy task's test parquet, the PostTrainBench checkout (its code loads its own data), or the marker of
    everything else a task reads from the caches."""
    if CFG.evals[eval_id].uses_parquet:
        return {"test": LAYOUT.data(eval_id, "test")}
    if CFG.evals[eval_id].from_checkout:
        # ancient(): a refreshed cache does not rerun finished cells
        return {
            **ptb_input(),
            "ptb_cache": ancient(LAYOUT.posttrainbench_cache_marker()),
        }
    return {"eval_data": LAYOUT.eval_data_marker(eval_id)}


def get_evaluate_params(wildcards):
    return JOBS.evaluate(
        wildcards.model, wildcards.eval, wildcards.agent, _ptb_objects
    ).to_params()


_ADOPTS = (
    {}
)  # (cell, record's and manifest's mtimes) -> answer: each resource of a job asks it


def get_adopts_evaluation(wildcards):
    """Whether the cell's train job left an evaluation made in its allocation that this evaluate job can adopt
    (ptflow.stages.evaluate.in_train_job): then the job is a CPU job of seconds, else a GPU evaluation. Snakemake
    asks again when the job is ready to run (after the train job)."""
    if not JOBS.agent(wildcards.agent).spec.evaluates_in_train_job:
        return False
    cell = (wildcards.model, wildcards.eval, wildcards.agent)
    stamp = in_train_job.staged_stamp(LAYOUT.eval_json(*cell), LAYOUT.manifest(*cell))
    if stamp is None:
        return False  # asked first: the params of a checkout eval need the checkout, which may not exist yet
    if (cell, stamp) not in _ADOPTS:
        why_not = in_train_job.why_not_adoptable(
            LAYOUT.eval_json(*cell),
            get_evaluate_params(wildcards),
            LAYOUT.manifest(*cell),
        )
        _ADOPTS[(cell, stamp)] = why_not is None
    return _ADOPTS[(cell, stamp)]


evaluate_threads = VALUES.evaluate_threads(get_adopts_evaluation)
evaluate_resources = VALUES.evaluate_resources(get_adopts_evaluation)


# ---- judge: agent-CLI cells' traces checked for contamination / disallowed models (optional) ----


def judge_jsons():
    cells = [c for c in CFG.cells if CFG.agent_for(c.agent).spec.agent_cli]
    return [LAYOUT.judge_json(c.model, c.eval, c.agent) for c in cells]


def get_judge_input(wildcards):
    return {
        **(ptb_input() if CFG.evals[wildcards.eval].from_checkout else {}),
        "manifest": LAYOUT.manifest(wildcards.model, wildcards.eval, wildcards.agent),
        # an agentic judge runs its CLI in the agent's image (a CPU job)
        **(
            image_inputs_of("train", wildcards)
            if (CFG.judge or {}).get("agent")
            else {}
        ),
    }


def get_judge_params(wildcards):
    return JOBS.judge(
        wildcards.model, wildcards.eval, wildcards.agent, _ptb_objects
    ).to_params()


# ---- report ----


def eval_jsons():
    return [LAYOUT.eval_json(c.model, c.eval, c.agent) for c in CFG.cells]


def scoring_params():
    return JOBS.scoring(reference_table(CFG.raw, Path(workflow.basedir))).to_params()


def final_outputs():
    # Every cell's eval.json (and judge.json) is a target itself: Snakemake does not redo a missing intermediate file
    # when what was made from it (summary.csv) is up to date, so a deleted eval.json would otherwise stay deleted.
    return [
        LAYOUT.cache_marker(),
        *eval_jsons(),
        *judge_jsons(),
        LAYOUT.summary(),
        LAYOUT.agents_csv(),
        LAYOUT.leaderboard(),
        LAYOUT.heatmap(),
        LAYOUT.report_index(),
    ]


# ---- images: only on sites whose runtime is a container and only for stages/agents that name an image ----

IMAGES_DIR = images.images_dir(RUNTIME)
# Changes every run: re-imports :latest sources, but only under force_reconvert_latest.
RUN_TOKEN = time.strftime("%Y%m%dT%H%M%S")


def image_inputs_of(stage, wildcards):
    """ancient(): a rebuilt image does not make finished 10-hour cells stale; only a missing one is made."""
    agent = JOBS.agent(wildcards.agent) if "agent" in wildcards.keys() else None
    files = images.image_inputs(RUNTIME, images.image_for(RUNTIME, stage, agent))
    return {key: ancient(path) for key, path in files.items()}


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
    if JOBS.checkout_recipe(get_image_name(wildcards)) is not None:
        return [ancient(LAYOUT.posttrainbench_marker())]
    spec = get_image_spec(wildcards)
    return [str(Path(workflow.basedir) / spec["recipe"])] if spec.get("recipe") else []


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


def ptb_input():
    """ancient(): a re-made checkout marker (a new commit) reruns only the cells whose paths' ids changed (params)."""
    return {"checkout": ancient(LAYOUT.posttrainbench_marker())}


def aggregate_checkout_input():
    """A run whose evals come from the checkout is scored as PostTrainBench's leaderboard scores it, from the
    checkout's factors.json: the marker says where the checkout is (a new commit re-aggregates: cheap).
    """
    if any(CFG.evals[c.eval].from_checkout for c in CFG.cells):
        return {"checkout": LAYOUT.posttrainbench_marker()}
    return {}


def get_ptb_cache_input(wildcards):
    """The checkout, and the standard image its download script runs in (where the site builds that image)."""
    image = JOBS.download_image()
    return {
        **ptb_input(),
        **{k: ancient(v) for k, v in images.image_inputs(RUNTIME, image).items()},
    }


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
