# Configuration, site and paths, loaded once; every rule input, param and resource comes from a get_* here.
import inspect
import json
import os
import re
import time
from pathlib import Path

from snakemake.common import overwrite_function_params
from snakemake.exceptions import WorkflowError

from ptflow.cluster import envs, images
from ptflow.cluster.preflight import ensure_ok
from ptflow.cluster.runtime import JobRuntime
from ptflow.config import naming
from ptflow.config import posttrainbench as ptb
from ptflow.config.kinds import TRAIN_DATA_ALWAYS, TRAIN_DATA_IF_PARQUET
from ptflow.config.load import reference_table, resolve, share_config
from ptflow.config.model import Cell, ConfigError
from ptflow.config.rules import LOGIN_NODE_RULES, stage_of
from ptflow.jobenv import apply_site_env
from ptflow.launch.check import check_ray_launchers
from ptflow.launch.skyrl import JOBS_DIR, ServerSite
from ptflow.stages.evaluate.preflight import evaluation_problems
from ptflow.stages.evaluate.run import kit_companion
from ptflow.stages.evaluate.settings import Provider, build_call

try:
    # Snakemake has merged the embedded default, --configfile and --config into `config` already.
    _LOADED = resolve(config, Path(workflow.basedir))
except ConfigError as exc:
    raise WorkflowError(str(exc)) from None
CFG, SITE, L = _LOADED.cfg, _LOADED.site, _LOADED.layout
share_config(config)  # for `ptflow plan` (only where it asks)
RT = SITE.runtime
apply_site_env(SITE.process_env)


def _patient_slurm_clients():
    """The driver's Slurm commands, and its jobs' srun, wait out an absent controller and a full submit cap
    (ptflow.cluster.patience); jobs inherit the PATH."""
    if SITE.scheduler != "slurm" or not workflow.is_main_process:
        return
    from ptflow.cluster import patience

    patience.install(
        SITE.controller_wait_seconds, Path(".snakemake", "ptflow", "slurm").resolve()
    )


_patient_slurm_clients()
# Software of every rule: the conda env (with --sdm conda) or the venv/container the site provides.
CONDA_ENV = str(Path(workflow.basedir) / "envs" / "ptflow.yaml")
HF_HOME = L.hf_home


wildcard_constraints:
    model=naming.MODEL_NAME_PATTERN,
    dataset=naming.MODEL_NAME_PATTERN,
    eval=naming.SAFE_ID_PATTERN,
    agent=naming.SLOT_PATTERN,


# ---- resources: from the site file, per stage (and per agent for train) ----


def _signed(func):
    """Snakemake reads the parameters of an input, param or resource function twice on every call (which arguments to
    pass it), through inspect.signature: ~0.1 ms each, a tenth of a 10,000-cell dry-run. Stated once with
    Snakemake's own overwrite_function_params (what its ioutils helpers use), it reads them from the function.
    """
    overwrite_function_params(func, inspect.signature(func).parameters)
    return func


def _copied(value):
    """A fresh copy of a cached param value (dicts and lists of plain values), for each job to own; copy.deepcopy
    costs ten times more and was a few percent of a large dry-run."""
    if isinstance(value, dict):
        return {k: _copied(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copied(v) for v in value]
    return value


# cell slot -> Agent: CFG.agent_for once per slot, not once per job and function
_AGENTS = {}


def _agent_of(wildcards):
    """The agent of a cell's slot wildcard (its id, or <id>@run<k> for a repeat)."""
    if "agent" not in wildcards.keys():
        return None
    slot = wildcards.agent
    if slot not in _AGENTS:
        _AGENTS[slot] = CFG.agent_for(slot)
    return _AGENTS[slot]


# (stage, agent id) -> Request; shared by the jobs alike: read, never changed
_REQUESTS = {}
# (stage, agent id, attempt) -> the plugin's resources of that request
_PLUGIN_RESOURCES = {}


def _request(stage, agent=None):
    """SITE.request once per stage and agent, not once per job."""
    key = (stage, agent.id if agent is not None else None)
    if key not in _REQUESTS:
        _REQUESTS[key] = SITE.request(stage, agent)
    return _REQUESTS[key]


def _plugin_resources(stage, agent, attempt):
    key = (stage, agent.id if agent is not None else None, attempt)
    if key not in _PLUGIN_RESOURCES:
        _PLUGIN_RESOURCES[key] = _request(stage, agent).snakemake_resources(attempt)
    return _PLUGIN_RESOURCES[key]


def _stage_of(rule):
    """A rule's site stage (ptflow.config.rules); one not in the table fails when the workflow is loaded."""
    try:
        return stage_of(rule)
    except ValueError as exc:
        raise WorkflowError(str(exc)) from None


def _rule_agents(stage, agent_ids=None):
    """The agents whose requests a rule's jobs may get: only train requests differ per agent (all agents, or
    those of the rule)."""
    if stage != "train":
        return [None]
    if agent_ids is None:
        return list(CFG.agents.values())
    return [CFG.agents[a] for a in agent_ids] or [None]


def is_local(rule):
    """localrule: the login-node rules of ptflow.config.rules (the plan prices them from the same table)."""
    _stage_of(rule)
    return rule in LOGIN_NODE_RULES


def get_threads(rule, agents=None):
    """The threads of a rule's jobs: a number where every agent of the rule gets the same, else per job."""
    stage = _stage_of(rule)
    values = {_request(stage, a).threads for a in _rule_agents(stage, agents)}
    if len(values) == 1:
        return values.pop()

    @_signed
    def threads(wildcards):
        return _request(stage, _agent_of(wildcards)).threads

    return threads


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


@_signed
def get_attempt(wildcards, attempt):
    return attempt


def get_resources(rule, agents=None):
    """Snakemake/slurm-plugin resources of a rule's stage; keys are the union over the rule's agents. A value the
    same for every agent and attempt is given as it is (Snakemake then evaluates nothing per job); the others
    (per agent, or grown by the attempt) per job, from a cache."""
    stage = _stage_of(rule)
    requests = [_request(stage, a) for a in _rule_agents(stage, agents)]
    tables = [r.snakemake_resources() for r in requests]
    keys = sorted({k for t in tables for k in t})

    def value_of(key):
        @_signed
        def value(wildcards, attempt):
            return _plugin_resources(stage, _agent_of(wildcards), attempt).get(key)

        return value

    def constant(key):
        if any(key in r.attempt_scaled for r in requests):
            return False
        first = tables[0].get(key)
        return all(
            key in t and type(t[key]) is type(first) and t[key] == first for t in tables
        )

    return {key: tables[0][key] if constant(key) else value_of(key) for key in keys}


def get_supervised_held(rule):
    """gpus_total/cpus_total of the Slurm jobs a supervisor rule submits itself (its own and its agent kind's helper
    jobs): they count against the run's caps like the plugin's jobs (ptflow.cluster.limits).
    """
    if SITE.scheduler != "slurm":
        return {}
    _stage_of(rule)

    def held(key):
        @_signed
        def value(wildcards):
            agent = _agent_of(wildcards)
            own = _request("train", agent)
            helpers = [_request(s) for s in agent.spec.site_requests]
            return sum(r.snakemake_resources().get(key, 0) for r in (own, *helpers))

        return value

    return {"gpus_total": held("gpus_total"), "cpus_total": held("cpus_total")}


# ---- cache ----


def get_dataset_spec(wildcards):
    return next(
        e.dataset for e in CFG.evals.values() if e.dataset_name == wildcards.dataset
    )


def get_model_spec(wildcards):
    m = CFG.model_named(wildcards.model)
    return {"id": m.id, "source": m.source, "revision": m.revision, "tiny": m.tiny}


def get_tokenizer_datasets(wildcards):
    """A local tiny model's tokenizer is built from the text of every local dataset."""
    if CFG.model_named(wildcards.model).source != "local":
        return []
    names = sorted(
        {
            e.dataset_name
            for e in CFG.evals.values()
            if e.dataset and e.dataset["source"] == "local"
        }
    )
    return [L.dataset_marker(n) for n in names]


def get_cache_markers():
    models = sorted({c.model for c in CFG.training_cells() + CFG.cells})
    models += sorted({CFG.evaluated_model(c).name for c in CFG.cells} - set(models))
    datasets = sorted({CFG.evals[c.eval].dataset_name for c in CFG.cells} - {None})
    return [L.model_marker(m) for m in models] + [L.dataset_marker(d) for d in datasets]


def _evals_with_data():
    """Evals of the matrix whose task reads data of its own (every task but the toy one, which reads the parquet,
    and the PostTrainBench checkout's, whose code loads its own as PostTrainBench's run does).
    """
    return sorted(
        {
            c.eval
            for c in CFG.cells
            if not (CFG.evals[c.eval].uses_parquet or CFG.evals[c.eval].from_checkout)
        }
    )


def get_data_markers():
    """What the evals' evaluations read (and cache_resources): fetched by CPU cache jobs, read offline by GPU jobs."""
    markers = [L.eval_data_marker(e) for e in _evals_with_data()]
    return markers + ([L.resources_marker()] if CFG.raw.get("cache_resources") else [])


def get_eval_data_spec(wildcards):
    e = CFG.evals[wildcards.eval]
    return {"id": e.id, "task": e.task, "task_args": e.task_args, "grader": e.grader}


def get_cache_resources():
    return list(CFG.raw.get("cache_resources") or [])


# ---- data ----


def get_preprocess_input(wildcards):
    return L.dataset_marker(CFG.evals[wildcards.eval].dataset_name)


def get_eval_spec(wildcards):
    e = CFG.evals[wildcards.eval]
    return {"id": e.id, "dataset": e.dataset, "preprocess": e.preprocess}


# ---- train ----


def _cell(wildcards):
    return Cell(wildcards.model, wildcards.eval, wildcards.agent)


def get_train_input(wildcards):
    agent = _agent_of(wildcards)
    if not agent.trains:
        raise WorkflowError(f"agent {agent.id!r} is a baseline: it has no train job")
    inputs = {"base": L.model_marker(wildcards.model)}
    data = agent.spec.train_data
    if data == TRAIN_DATA_ALWAYS or (
        data == TRAIN_DATA_IF_PARQUET and CFG.evals[wildcards.eval].uses_parquet
    ):
        inputs["data"] = L.data(wildcards.eval, "train")
    # the agent's evaluate.py reads what the final evaluation reads
    if agent.spec.agent_cli:
        inputs.update(_evaluation_data_input(wildcards.eval))
    parent = CFG.parent_slot(wildcards.agent)
    if parent:
        inputs["parent"] = L.manifest(wildcards.model, wildcards.eval, parent)
    inputs.update(get_image_inputs("train", wildcards))
    inputs.update(get_env_inputs(wildcards))
    return inputs


def get_env_inputs(wildcards):
    """The software environments (rule env) this agent's train job runs with."""
    names = envs.envs_for(RT, _agent_of(wildcards))
    return {f"env_{n}": L.env_record(n) for n in names}


def get_env_build_spec(wildcards):
    return envs.env_spec(RT, wildcards.env)


def get_env_build_input(wildcards):
    """An overlay venv sits on its image: the image (and EDF file) first."""
    spec = envs.env_spec(RT, wildcards.env)
    if spec["build"] != "overlay-venv":
        return {}
    return {
        key: ancient(path)
        for key, path in images.image_inputs(
            RT, spec["image"] if images.needs_images(RT) else None
        ).items()
    }


def _cell_param(model, eval_id, slot):
    """The cell as its files record it; "run" only for repeats, so other cells' params stay as they were."""
    cell = {"model": model.id, "model_name": model.name, "eval": eval_id, "agent": slot}
    run = Cell(model.name, eval_id, slot).run
    return {**cell, "run": run} if run > 1 else cell


def get_train_params(wildcards):
    agent = _agent_of(wildcards)
    model = CFG.models[wildcards.model]
    return {
        "cell": _cell_param(model, wildcards.eval, wildcards.agent),
        "kind": agent.kind,
        "params": CFG.trained_params(wildcards.agent),
        "model_revision": model.revision,
        "checkpoint_dir": L.checkpoint_dir(
            wildcards.model, wildcards.eval, wildcards.agent
        ),
        "config_hash": CFG.training_hash(_cell(wildcards)),
        "hf_home": HF_HOME,
        **_runtime_param("train", wildcards),
        **_supervise_param("train", wildcards),
        **_multinode_param(agent),
        **_agent_param(agent, wildcards),
        **_skyrl_param(agent, wildcards),
    }


def _supervise_param(stage, wildcards):
    """Only for supervised train jobs, so other jobs' params (and outputs) stay as they were. The submitted job's
    request travels resolved; the supervisor scales it by the rule's attempt."""
    agent = _agent_of(wildcards)
    spec = SITE.supervises(stage, agent)
    if not spec:
        return {}
    return {
        "supervise": {
            "max_retries": spec.max_retries,
            "max_resumes": spec.max_resumes,
            "internal_timeout_fraction": spec.internal_timeout_fraction,
            "request": _copied(_request_dict(stage, agent)),
        }
    }


_REQUEST_DICTS = {}  # (stage, agent id) -> Request.to_dict()


def _request_dict(stage, agent):
    key = (stage, agent.id if agent is not None else None)
    if key not in _REQUEST_DICTS:
        _REQUEST_DICTS[key] = _request(stage, agent).to_dict()
    return _REQUEST_DICTS[key]


def _multinode_param(agent):
    """Only for train jobs over several nodes of a torchrun kind: each node runs the rule's script under torchrun
    with the rendezvous env (ptflow.cluster.multinode). Ray kinds bring their own launcher.
    """
    request = _request("train", agent)
    if request.get("nodes", 1) <= 1 or agent.spec.multinode != "torchrun":
        return {}
    return {"multinode": {"nodes": request["nodes"], "gpus_per_node": request.gpus}}


def _skyrl_param(agent, wildcards):
    """Kinds that submit a runtime server beside their trainer (skyrl): its resolved request and where the
    coordination dirs go (<cell>/.skyrl_jobs/<stamp>_<server job>/). A site without the request gets no server here;
    preflight names it before anything is submitted.
    """
    if "runtime_server" not in agent.spec.site_requests or not SITE.has_request(
        "runtime_server"
    ):
        return {}
    return {
        "agent": {
            "coord_base": str(
                Path(
                    L.cell_dir(wildcards.model, wildcards.eval, wildcards.agent),
                    JOBS_DIR,
                )
            ),
            "server": ServerSite.from_site(SITE).to_dict(),
        }
    }


def _agent_param(agent, wildcards):
    """Agent-CLI cells only (other kinds' params, hence their cells, stay as they were)."""
    if not agent.spec.agent_cli:
        return {}
    e = CFG.evals[wildcards.eval]
    if e.from_checkout:
        return {"agent": _ptb_agent_param(agent, e, wildcards)}
    return {
        "agent": {
            "id": agent.id,
            "cli": agent.cli,
            "model": agent.model,
            "hours": agent.hours,
            "grace_minutes": agent.grace_minutes,
            "command": list(agent.command) if agent.command else None,
            "keys": list(agent.keys),  # names only; values come from the environment
            "trace_dir": L.agent_trace_dir(
                wildcards.model, wildcards.eval, wildcards.agent
            ),
            "hf_home": HF_HOME,
            "evals_cache": L.evals_cache,
            "eval_task": e.task,
            "max_new_tokens": e.max_new_tokens,
            # the same task and settings as the final evaluation, on the agent's own allocation
            "eval_call": build_call(e, Provider.from_site(SITE, "train", agent)),
            **(
                {"eval_test_parquet": L.data(wildcards.eval, "test")}
                if e.uses_parquet
                else {}
            ),
            # only when set, so the params (and finished cells) of agents without them stay as they were
            **(
                {"on_restart": agent.on_restart}
                if agent.on_restart != "continue"
                else {}
            ),
            **(
                {"sync_minutes": agent.sync_minutes}
                if agent.sync_minutes is not None
                else {}
            ),
            # the real CLIs only: a changed pin reruns that CLI's cells (the scripted agent's stay as they were)
            **(
                {"cli_version": CFG.cli_versions[agent.cli]}
                if agent.cli in CFG.cli_versions and not agent.command
                else {}
            ),
            **({"base_url": agent.base_url} if agent.base_url else {}),
            # the eval's grader key names: the agent's evaluate.py needs them, no other key reaches it
            **({"grader_keys": list(e.grader_keys)} if e.grader_keys else {}),
        }
    }


# ---- evaluate ----


def get_evaluate_input(wildcards):
    agent = _agent_of(wildcards)
    inputs = {}
    if agent.trains:
        inputs["manifest"] = L.manifest(
            wildcards.model, wildcards.eval, wildcards.agent
        )
    else:
        inputs["base"] = L.model_marker(CFG.evaluated_model(_cell(wildcards)).name)
    inputs.update(_evaluation_data_input(wildcards.eval))
    inputs.update(get_image_inputs("evaluate", wildcards))
    return inputs


def _evaluation_data_input(eval_id):
    """The toy task's test parquet, the PostTrainBench checkout (its code loads its own data), or the marker of
    everything else a task reads from the caches."""
    if CFG.evals[eval_id].uses_parquet:
        return {"test": L.data(eval_id, "test")}
    if CFG.evals[eval_id].from_checkout:
        return get_ptb_input()
    return {"eval_data": L.eval_data_marker(eval_id)}


def get_evaluate_params(wildcards):
    e = CFG.evals[wildcards.eval]
    model = CFG.models[wildcards.model]
    evaluated = CFG.evaluated_model(_cell(wildcards))
    return {
        "cell": _cell_param(model, e.id, wildcards.agent),
        # an instruct cell evaluates the counterpart; only there, so other cells' params stay as they were
        **(
            {"evaluated_model": {"id": evaluated.id, "revision": evaluated.revision}}
            if evaluated is not model
            else {}
        ),
        "call": (
            _ptb_eval_call(e)
            if e.from_checkout
            else build_call(e, Provider.from_site(SITE))
        ),
        "model_revision": model.revision,
        "hf_home": HF_HOME,
        "evals_cache": L.evals_cache,
        **_runtime_param("evaluate", wildcards),
    }


# ---- report ----


def get_eval_jsons():
    return [L.eval_json(c.model, c.eval, c.agent) for c in CFG.cells]


def get_agent_order():
    return list(CFG.agents)


def get_scoring():
    """What aggregation scores with — the config's scoring settings, the reference table loaded (a changed
    table rescores), GPUs per agent from the site's requests, and every cell the score expects.
    """
    return {
        "raw": {k: CFG.raw.get(k) for k in ("scoring", "models", "agents")},
        "reference": reference_table(CFG.raw, Path(workflow.basedir)),
        "agent_gpus": {
            a.id: {
                "train": SITE.request("train", a).gpus if a.trains else 0,
                "eval": SITE.request("evaluate", a).gpus,
            }
            for a in CFG.agents.values()
        },
        "expected": [
            {"model": c.model, "eval": c.eval, "agent": c.agent} for c in CFG.cells
        ],
        "model_ids": {m.name: m.id for m in CFG.models.values()},
    }


def get_final_outputs():
    # Every cell's eval.json (and judge.json) is a target itself: Snakemake does not redo a missing intermediate file
    # when what was made from it (summary.csv) is up to date, so a deleted eval.json would otherwise stay deleted.
    return [
        L.cache_marker(),
        *get_eval_jsons(),
        *get_judge_jsons(),
        L.summary(),
        L.agents_csv(),
        L.leaderboard(),
        L.heatmap(),
        L.report_index(),
    ]


# ---- driver start: before anything is submitted (Snakemake runs onstart only for real runs, not in jobs) ----


def _keep_under_limits():
    """The driver keeps under the user's QOS/association caps: --jobs at most the submit cap, gpus_total/cpus_total
    at most the GPU/CPU caps (ptflow.cluster.limits). From onstart: real runs only (a dry-run asks Slurm nothing),
    before the scheduler has started a job.
    """
    if SITE.scheduler != "slurm":
        return None
    from snakemake.logging import logger

    from ptflow.cluster import limits as cluster_limits

    try:
        found = cluster_limits.for_matrix(CFG, SITE)
        caps = cluster_limits.driver_caps(found, workflow.nodes)
        cluster_limits.apply(workflow, caps)
    except cluster_limits.LimitsError as exc:
        raise WorkflowError(str(exc)) from None
    if found.any:
        shown = (
            ", ".join(f"{k.replace('_nodes', '--jobs')}={v}" for k, v in caps.items())
            or "Slurm itself keeps jobs past a running cap pending"
        )
        logger.info(
            f"ptflow: cluster limits: {'; '.join(found.lines())}; the run keeps under them ({shown})"
        )
    return found


LIMITS = None  # read by the driver at its start (_keep_under_limits)


def _limits_problems(cfg, site, layout):
    """Jobs that could never start under the caps read at the driver's start (more GPUs/CPUs than the user may
    hold)."""
    from ptflow.cluster.limits import request_problems
    from ptflow.cluster.preflight import requests_in_use

    return request_problems(LIMITS, requests_in_use(cfg, site), site) if LIMITS else []


def run_preflight():
    global LIMITS
    LIMITS = _keep_under_limits()
    # a PreflightError goes to ptflow.ops.driver.on_start, which refuses the run with the problems alone
    ensure_ok(
        CFG,
        SITE,
        L,
        extra_checks=[check_ray_launchers, evaluation_problems, _limits_problems],
    )


def on_driver_start():
    """One driver per working directory (a lock naming the live holder), the preflight, then the live jobs of
    earlier runs of this directory adopted instead of submitted again (ptflow.ops.driver).
    """
    from snakemake.logging import logger

    from ptflow.ops import driver

    driver.on_start(
        workflow,
        scheduler=SITE.scheduler,
        earlier_jobs=CFG.raw.get("earlier_jobs", "wait"),
        log=logger.warning,
        preflight=run_preflight,
    )
    if SITE.warm_start:
        from ptflow import warmstart
        from ptflow.stages import WARM_IMPORTS, warm_import_env

        for name, value in warm_import_env().items():
            os.environ.setdefault(name, value)
        global WARM_BROKER
        WARM_BROKER = warmstart.start(
            WARM_IMPORTS,
            log=L.log("warmstart", "broker"),
            companions=[
                kit_companion(HF_HOME, L.evals_cache, _request("evaluate").threads)
            ],
        )


WARM_BROKER = None  # a local run's warm-start broker (site warm_start), from onstart to the end of the run


def on_driver_end():
    from ptflow import warmstart
    from ptflow.ops import driver

    if WARM_BROKER is not None:
        warmstart.stop(WARM_BROKER)
    driver.on_end()


# ---- images: only on sites whose runtime is a container and only for stages/agents that name an image ----

IMAGES_DIR = images.images_dir(RT)
# Changes every run: re-imports :latest sources, but only under force_reconvert_latest.
RUN_TOKEN = time.strftime("%Y%m%dT%H%M%S")


def _image_name(stage, wildcards):
    return images.image_for(RT, stage, _agent_of(wildcards))


def get_image_inputs(stage, wildcards):
    """ancient(): a rebuilt image does not make finished 10-hour cells stale; only a missing one is made."""
    files = images.image_inputs(RT, _image_name(stage, wildcards))
    return {key: ancient(path) for key, path in files.items()}


def _job_runtime_dict(image_name, gpus, agent_cell=False, overlay=None):
    return JobRuntime(
        **(overlay or {}),
        runtime=RT,
        image=images.runtime_handle(RT, image_name) if image_name else None,
        gpus=gpus,
        binds=tuple(
            sorted(
                {
                    str(Path(p).resolve())
                    for p in (L.results, L.scratch, L.hf_home, L.evals_cache)
                }
            )
        ),
        hf_home=str(Path(L.hf_home).resolve()),
        agent_cell=agent_cell,
    ).to_dict()


# (stage, agent id) -> the job runtime dict (or None): all it depends on
_JOB_RUNTIMES = {}


def get_job_runtime(stage, wildcards):
    """How the job re-runs itself (in a container or the site venv), or None to stay in the job's own Python; each
    job gets its own copy."""
    agent = _agent_of(wildcards)
    key = (stage, agent.id if agent is not None else None)
    if key not in _JOB_RUNTIMES:
        _JOB_RUNTIMES[key] = _job_runtime(stage, agent)
    return _copied(_JOB_RUNTIMES[key])


def _job_runtime(stage, agent):
    name = images.image_for(RT, stage, agent)
    overlay = envs.overlay_venv(RT, agent) if stage == "train" else None
    if name is None and not (RT.kind == "venv" and RT.venv) and not overlay:
        return None
    return _job_runtime_dict(
        name,
        _request(stage, agent).gpus,
        agent_cell=bool(agent is not None and agent.spec.agent_cli),
        overlay=overlay,
    )


def _runtime_param(stage, wildcards):
    """Only present when the job re-runs itself elsewhere, so local params (and outputs) stay as they were."""
    spec = get_job_runtime(stage, wildcards)
    return {"runtime": spec} if spec else {}


def get_image_name(wildcards):
    """The image behind a file stem (ngc-ray+25.06 -> ngc-ray:25.06)."""
    return images.name_of(RT, wildcards.image)


def get_image_spec(wildcards):
    """The site's spec of the image, with the build arguments its recipe declares (the agent CLIs' pins) only when
    it declares some, so other images' params stay as they were."""
    spec = _site_image_spec(get_image_name(wildcards))
    recipe = str(spec.get("recipe") or "")
    if recipe.startswith(
        ptb.RECIPE_PREFIX
    ):  # a recipe of the PostTrainBench checkout (after its checkpoint)
        rel = recipe[len(ptb.RECIPE_PREFIX) :]
        marker = json.loads(
            Path(checkpoints.posttrainbench_checkout.get().output[0]).read_text()
        )
        spec = {
            **spec,
            "recipe": str(Path(marker["path"], rel)),
            "recipe_object": marker["objects"][rel],
            "build_dir": marker["path"],
        }
    args = images.build_args_for(spec, CFG.image_build_args, workflow.basedir)
    return {**spec, "build_args": args} if args else spec


def get_image_runtime(wildcards):
    """The part of the site's runtime that defines this image (so unrelated site edits do not rebuild it)."""
    spec = {k: v for k, v in get_image_spec(wildcards).items() if k != "build_args"}
    return images.image_runtime(RT, get_image_name(wildcards), spec).to_dict()


def get_image_recipe(wildcards):
    raw = _site_image_spec(get_image_name(wildcards))
    if str(raw.get("recipe") or "").startswith(ptb.RECIPE_PREFIX):
        return [ancient(L.posttrainbench_marker())]
    spec = get_image_spec(wildcards)
    return [str(Path(workflow.basedir) / spec["recipe"])] if spec.get("recipe") else []


def get_image_digest(wildcards):
    spec = get_image_spec(wildcards)
    return images.image_digest(
        RT, get_image_name(wildcards), spec, workflow.basedir, spec.get("build_args")
    )


def get_image_reconvert(wildcards):
    return images.reconvert_token(RT, get_image_spec(wildcards), RUN_TOKEN)


def get_image_stage(wildcards):
    """Registry imports run with the site's `convert` request (TAO's conversion partition), builds with `image`."""
    return images.image_stage(RT, wildcards.image)


def get_image_threads(wildcards):
    return _request(get_image_stage(wildcards)).threads


def get_image_resources():
    """Per image: its stage's request (keys are the union of both stages' resources)."""
    keys = sorted(
        set(SITE.request("image").snakemake_resources())
        | set(SITE.request("convert").snakemake_resources())
    )

    def value_of(key):
        @_signed
        def value(wildcards, attempt):
            return _plugin_resources(get_image_stage(wildcards), None, attempt).get(key)

        return value

    return {key: value_of(key) for key in keys}


def get_edf_image(wildcards):
    return images.image_path(RT, images.name_of(RT, wildcards.image, edf=True))


def get_edf_name(wildcards):
    return images.name_of(RT, wildcards.image, edf=True)


# ---- judge: agent-CLI cells' traces checked for contamination / disallowed models (optional) ----


def get_judge_cells():
    return [c for c in CFG.cells if CFG.agent_for(c.agent).spec.agent_cli]


def get_judge_jsons():
    return [L.judge_json(c.model, c.eval, c.agent) for c in get_judge_cells()]


def get_judge_input(wildcards):
    return {
        **(get_ptb_input() if CFG.evals[wildcards.eval].from_checkout else {}),
        "manifest": L.manifest(wildcards.model, wildcards.eval, wildcards.agent),
        "eval_json": L.eval_json(wildcards.model, wildcards.eval, wildcards.agent),
        # an agentic judge runs its CLI in the agent's image (a CPU job)
        **(
            get_image_inputs("train", wildcards)
            if (CFG.judge or {}).get("agent")
            else {}
        ),
    }


def get_judge_params(wildcards):
    """The judge's config (None: skipped, with a visible mark) and the cell."""
    e = CFG.evals[wildcards.eval]
    return {
        "judge": CFG.judge,
        # the checkout's judge prompt for the cells of its evals (only there: other cells' params stay as they were)
        **(
            {"posttrainbench": _ptb_judge_param(e)}
            if e.from_checkout and CFG.judge
            else {}
        ),
        "keys": list(
            _agent_of(wildcards).keys
        ),  # names: their values are redacted from trace.md
        "cell": {
            "model": CFG.models[wildcards.model].id,
            "model_name": wildcards.model,
            "eval": wildcards.eval,
            "agent": wildcards.agent,
        },
        **_judge_runtime_param(wildcards),
    }


def _judge_runtime_param(wildcards):
    """An agentic judge (judge.agent) runs its CLI in the cell's agent image, without GPUs."""
    if not (CFG.judge or {}).get("agent"):
        return {}
    name = images.image_for(RT, "train", _agent_of(wildcards))
    if name is None and not (RT.kind == "venv" and RT.venv):
        return {}
    return {"runtime": _job_runtime_dict(name, 0, agent_cell=True)}


# ---- PostTrainBench checkout (config key posttrainbench; ptflow.config.posttrainbench) ----

PTB = CFG.posttrainbench


def get_ptb_checkout_spec():
    """What the checkout checkpoint makes - the commit, where, from where, and the paths this run uses (nothing
    without posttrainbench: then no job asks for it)."""
    if not PTB:
        return {}
    return {
        "commit": PTB.commit,
        "location": PTB.location(L.scratch),
        "repo": PTB.repo,
        "paths": sorted(_ptb_used_paths()),
    }


def _ptb_used_paths():
    paths = set()
    for c in CFG.cells:
        e = CFG.evals[c.eval]
        if not e.from_checkout:
            continue
        name = ptb.eval_dir_name(e.task)
        paths.update(ptb.eval_paths(name))
        agent = CFG.agent_for(c.agent)
        if agent.spec.agent_cli:
            paths.update(ptb.agent_paths(CFG.ptb_agent(agent) or "", name))
            paths.discard(ptb.AGENT_DIR.format(agent=""))
            if CFG.judge:
                paths.update(ptb.judge_paths(name))
    for name in RT.images if images.needs_images(RT) else ():
        recipe = str(_site_image_spec(name).get("recipe") or "")
        if recipe.startswith(ptb.RECIPE_PREFIX):
            paths.add(recipe[len(ptb.RECIPE_PREFIX) :])
    return paths


def _site_image_spec(name):
    """The site's spec of an image, or PostTrainBench's recipe for the images the checkout builds
    (posttrainbench.images)."""
    spec = images.image_spec(RT, name)
    recipe = PTB.recipe(name) if PTB else None
    if recipe is None:
        return spec
    if RT.kind != "apptainer":
        raise WorkflowError(
            f"posttrainbench.images: site {RT.site} builds {RT.kind} images; PostTrainBench's recipes are apptainer "
            ".def files (remove images there, or use an apptainer site)"
        )
    return {k: v for k, v in spec.items() if k not in ("source", "context")} | {
        "recipe": recipe
    }


def get_ptb_input():
    """ancient(): a re-made checkout marker (a new commit) reruns only the cells whose paths' ids changed (params)."""
    return {"checkout": ancient(L.posttrainbench_marker())}


def _ptb_objects(paths):
    """The git object ids of ``paths`` from the checkout's marker (after the checkpoint: until then the params are
    'to be determined' and Snakemake evaluates them again once the checkout exists)."""
    marker = checkpoints.posttrainbench_checkout.get().output[0]
    objects = json.loads(Path(marker).read_text())["objects"]
    return {p: objects[p] for p in sorted(paths)}


def _ptb_eval_call(e):
    name = ptb.eval_dir_name(e.task)
    return {
        "eval_id": e.id,
        "task": e.task,
        "retry_max_tokens": list(e.retry_max_new_tokens),
        **({"limit": e.limit} if e.limit else {}),
        **({"keys": list(e.keys)} if e.keys else {}),
        "posttrainbench": {
            "eval_dir": name,
            "objects": _ptb_objects(ptb.eval_paths(name)),
        },
    }


def _ptb_agent_param(agent, e, wildcards):
    """An agent cell of a checkout eval: run_task.sh's task dir and prompt; the real CLIs run the checkout's
    agents/<dir>/solve.sh, ptflow's scripted agent and own commands their command."""
    name = ptb.eval_dir_name(e.task)
    solve = CFG.ptb_agent(agent)
    paths = [
        p
        for p in ptb.agent_paths(solve or "", name)
        if p != ptb.AGENT_DIR.format(agent="")
    ]
    return {
        "id": agent.id,
        "cli": agent.cli,
        "model": agent.model,
        "hours": agent.hours,
        "grace_minutes": agent.grace_minutes,
        "command": list(agent.command) if agent.command else None,
        "keys": list(agent.keys),
        "trace_dir": L.agent_trace_dir(
            wildcards.model, wildcards.eval, wildcards.agent
        ),
        "hf_home": HF_HOME,
        **({"on_restart": agent.on_restart} if agent.on_restart != "continue" else {}),
        **(
            {"sync_minutes": agent.sync_minutes}
            if agent.sync_minutes is not None
            else {}
        ),
        **(
            {"cli_version": CFG.cli_versions[agent.cli]}
            if agent.cli in CFG.cli_versions and not agent.command
            else {}
        ),
        **({"base_url": agent.base_url} if agent.base_url else {}),
        **({"grader_keys": list(e.grader_keys)} if e.grader_keys else {}),
        "posttrainbench": {
            "eval_dir": name,
            "solve": solve,
            "num_gpus": max(_request("train", agent).gpus, 1),
            "objects": _ptb_objects(paths),
        },
    }


def _ptb_judge_param(e):
    name = ptb.eval_dir_name(e.task)
    return {"eval_dir": name, "objects": _ptb_objects(ptb.judge_paths(name))}


# Every get_* that rules call per job: its signature stated once (_signed).
for _name, _function in list(globals().items()):
    if _name.startswith("get_") and inspect.isfunction(_function):
        _signed(_function)
