# Configuration, site and paths, loaded once; every rule input, param and resource comes from a get_* here.
import time
from pathlib import Path

from snakemake.exceptions import WorkflowError

from ptflow.cluster import images

from ptflow.config import naming
from ptflow.config.model import Cell, ConfigError, build_config
from ptflow.jobenv import apply_site_env
from ptflow.config.layout import Layout
from ptflow.cluster.preflight import PreflightError, ensure_ok
from ptflow.config.sites import load_site

try:
    CFG = build_config(config)
    SITE = load_site(
        config["site"],
        config.get("sites_dir", str(Path(workflow.basedir) / "config" / "sites")),
    )
except ConfigError as exc:
    raise WorkflowError(str(exc)) from None

L = Layout.from_config(config, SITE.raw)
apply_site_env(SITE.env)
# Software of every rule: the conda env (with --sdm conda) or the venv/container the site provides.
CONDA_ENV = str(Path(workflow.basedir) / "envs" / "ptflow.yaml")
HF_HOME = L.hf_home


wildcard_constraints:
    model=naming.MODEL_NAME_PATTERN,
    dataset=naming.MODEL_NAME_PATTERN,
    eval=naming.SAFE_ID_PATTERN,
    agent=naming.SAFE_ID_PATTERN,


# ---- resources: from the site file, per stage (and per agent for train) ----


def _agent_of(wildcards):
    return CFG.agents[wildcards.agent] if "agent" in wildcards.keys() else None


def get_threads(stage):
    def threads(wildcards):
        if is_supervised(stage):
            # a login-node supervisor: one thread (Snakemake would cap more at --local-cores and run fewer at once);
            # the job it submits gets the site's CPUs (_supervise_param)
            return 1
        return SITE.request(stage, _agent_of(wildcards)).get("threads", 1)

    return threads


def is_supervised(stage):
    """Sites with infra_retries run the stage's rule on the login node as a supervisor (ptflow.cluster.supervise)."""
    return SITE.supervises(stage) is not None


def get_resources(stage):
    """Snakemake/slurm-plugin resources of a stage; keys are the union over agents, values per job."""
    agents = list(CFG.agents.values()) if stage == "train" else [None]
    keys = sorted(
        {k for a in agents for k in SITE.snakemake_resources(SITE.request(stage, a))}
    )

    def value_of(key):
        def value(wildcards, attempt):
            req = SITE.request(stage, _agent_of(wildcards))
            return SITE.snakemake_resources(req, attempt).get(key)

        return value

    return {key: value_of(key) for key in keys}


# ---- cache ----


def get_dataset_spec(wildcards):
    return next(
        e.dataset for e in CFG.evals.values() if e.dataset_name == wildcards.dataset
    )


def get_model_spec(wildcards):
    m = CFG.models[wildcards.model]
    return {"id": m.id, "source": m.source, "revision": m.revision, "tiny": m.tiny}


def get_tokenizer_datasets(wildcards):
    """A local tiny model's tokenizer is built from the text of every local dataset."""
    if CFG.models[wildcards.model].source != "local":
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
    datasets = sorted({CFG.evals[c.eval].dataset_name for c in CFG.cells} - {None})
    return [L.model_marker(m) for m in models] + [L.dataset_marker(d) for d in datasets]


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
    agent = CFG.agents[wildcards.agent]
    if not agent.trains:
        raise WorkflowError(f"agent {agent.id!r} is a baseline: it has no train job")
    inputs = {"base": L.model_marker(wildcards.model)}
    if agent.kind in ("trl-sft", "trl-grpo", "verl"):
        inputs["data"] = L.data(wildcards.eval, "train")
    if agent.kind == "cli-agent" and CFG.evals[wildcards.eval].uses_parquet:
        inputs["data"] = L.data(
            wildcards.eval, "train"
        )  # given to the agent in its task dir
    if agent.start_from:
        inputs["parent"] = L.manifest(wildcards.model, wildcards.eval, agent.start_from)
    inputs.update(get_image_inputs("train", wildcards))
    return inputs


def get_train_params(wildcards):
    agent = CFG.agents[wildcards.agent]
    model = CFG.models[wildcards.model]
    return {
        "cell": {
            "model": model.id,
            "model_name": model.name,
            "eval": wildcards.eval,
            "agent": agent.id,
        },
        "kind": agent.kind,
        "params": agent.params,
        "model_revision": model.revision,
        "checkpoint_dir": L.checkpoint_dir(
            wildcards.model, wildcards.eval, wildcards.agent
        ),
        "config_hash": CFG.training_hash(_cell(wildcards)),
        "hf_home": HF_HOME,
        **_runtime_param("train", wildcards),
        **_supervise_param("train", wildcards),
        **_agent_param(agent, wildcards),
        **_skyrl_param(agent, wildcards),
    }


def _supervise_param(stage, wildcards):
    """Only on supervised sites, so other sites' params (and outputs) stay as they were."""
    spec = SITE.supervises(stage)
    if not spec:
        return {}
    cpus = SITE.request(stage, _agent_of(wildcards)).get("threads", 1)
    return {"supervise": {**spec, "cpus": cpus}}


def _skyrl_param(agent, wildcards):
    """skyrl cells only: what the launcher needs to submit the runtime server job (site request, coord dir)."""
    if agent.kind != "skyrl":
        return {}
    raw = SITE.raw
    return {
        "agent": {
            "coord_dir": str(
                Path(
                    L.cell_dir(wildcards.model, wildcards.eval, wildcards.agent),
                    "skyrl",
                )
            ),
            "site": {
                k: raw[k]
                for k in ("name", "account", "env", "runtime", "resources")
                if k in raw
            },
        }
    }


def _agent_param(agent, wildcards):
    """cli-agent cells only (other kinds' params, hence their cells, stay as they were)."""
    if agent.kind != "cli-agent":
        return {}
    e = CFG.evals[wildcards.eval]
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
            "eval_task": e.task,
            "max_new_tokens": e.max_new_tokens,
        }
    }


# ---- evaluate ----


def get_evaluate_input(wildcards):
    agent = CFG.agents[wildcards.agent]
    inputs = {}
    if agent.trains:
        inputs["manifest"] = L.manifest(
            wildcards.model, wildcards.eval, wildcards.agent
        )
    else:
        inputs["base"] = L.model_marker(wildcards.model)
    if CFG.evals[wildcards.eval].uses_parquet:
        inputs["test"] = L.data(wildcards.eval, "test")
    inputs.update(get_image_inputs("evaluate", wildcards))
    return inputs


def get_evaluate_params(wildcards):
    e = CFG.evals[wildcards.eval]
    model = CFG.models[wildcards.model]
    return {
        "cell": {
            "model": model.id,
            "model_name": model.name,
            "eval": e.id,
            "agent": wildcards.agent,
        },
        "task": e.task,
        "max_new_tokens": e.max_new_tokens,
        "retry_max_new_tokens": list(e.retry_max_new_tokens),
        "model_revision": model.revision,
        "hf_home": HF_HOME,
        **_runtime_param("evaluate", wildcards),
    }


# ---- report ----


def get_eval_jsons():
    return [L.eval_json(c.model, c.eval, c.agent) for c in CFG.cells]


def get_agent_order():
    return list(CFG.agents)


def get_final_outputs():
    # Every cell's eval.json (and judge.json) is a target itself: Snakemake does not redo a missing intermediate file
    # when what was made from it (summary.csv) is up to date, so a deleted eval.json would otherwise stay deleted.
    return [
        L.cache_marker(),
        *get_eval_jsons(),
        *get_judge_jsons(),
        L.summary(),
        L.leaderboard(),
        L.heatmap(),
    ]


# ---- preflight: before anything is submitted (Snakemake runs onstart only for real runs, not in jobs) ----


def run_preflight():
    try:
        ensure_ok(CFG, SITE, L)
    except PreflightError as exc:
        raise WorkflowError(str(exc)) from None


# ---- images: only on sites whose runtime is a container and only for stages/agents that name an image ----

IMAGES_DIR = images.images_dir(SITE.raw)
# Changes every run: re-imports :latest sources, but only under force_reconvert_latest.
RUN_TOKEN = time.strftime("%Y%m%dT%H%M%S")


def _image_name(stage, wildcards):
    return images.image_for(SITE.raw, stage, _agent_of(wildcards))


def get_image_inputs(stage, wildcards):
    """ancient(): a rebuilt image does not make finished 10-hour cells stale; only a missing one is made."""
    files = images.image_inputs(SITE.raw, _image_name(stage, wildcards))
    return {key: ancient(path) for key, path in files.items()}


def get_runtime_spec(stage, wildcards):
    """How the job re-runs itself (in a container or the site venv), or None to stay in the job's own Python."""
    name = _image_name(stage, wildcards)
    rt = images.runtime_of(SITE.raw)
    if name is None and not (rt["kind"] == "venv" and rt.get("venv")):
        return None
    agent = _agent_of(wildcards)
    return {
        "site": {"name": SITE.name, "runtime": rt},
        "image": images.runtime_handle(SITE.raw, name) if name else None,
        "agent_cell": bool(agent is not None and agent.kind == "cli-agent"),
        "gpus": SITE.request(stage, agent).get("gpus", 0),
        "binds": sorted(
            {str(Path(p).resolve()) for p in (L.results, L.scratch, L.hf_home)}
        ),
        "hf_home": str(Path(L.hf_home).resolve()),
    }


def _runtime_param(stage, wildcards):
    """Only present when the job re-runs itself elsewhere, so local params (and outputs) stay as they were."""
    spec = get_runtime_spec(stage, wildcards)
    return {"runtime": spec} if spec else {}


def get_image_spec(wildcards):
    return images.image_spec(SITE.raw, wildcards.image)


def get_image_site(wildcards):
    """The part of the site that defines this image (so unrelated site edits do not rebuild it)."""
    rt = images.runtime_of(SITE.raw)
    keep = {k: rt[k] for k in ("kind", "arch", "build") if k in rt}
    keep["images"] = {wildcards.image: images.image_spec(SITE.raw, wildcards.image)}
    return {"name": SITE.name, "runtime": keep}


def get_image_recipe(wildcards):
    spec = images.image_spec(SITE.raw, wildcards.image)
    return [str(Path(workflow.basedir) / spec["recipe"])] if spec.get("recipe") else []


def get_image_digest(wildcards):
    spec = images.image_spec(SITE.raw, wildcards.image)
    return images.image_digest(SITE.raw, wildcards.image, spec, workflow.basedir)


def get_image_reconvert(wildcards):
    spec = images.image_spec(SITE.raw, wildcards.image)
    return images.reconvert_token(SITE.raw, spec, RUN_TOKEN)


def get_edf_image(wildcards):
    return images.image_path(SITE.raw, wildcards.image)


# ---- judge: cli-agent cells' traces checked for contamination / disallowed models (optional) ----


def get_judge_cells():
    return [c for c in CFG.cells if CFG.agents[c.agent].kind == "cli-agent"]


def get_judge_jsons():
    return [L.judge_json(c.model, c.eval, c.agent) for c in get_judge_cells()]


def get_judge_input(wildcards):
    return {
        "manifest": L.manifest(wildcards.model, wildcards.eval, wildcards.agent),
        "eval_json": L.eval_json(wildcards.model, wildcards.eval, wildcards.agent),
    }


def get_judge_params(wildcards):
    """The judge's config (None: skipped, with a visible mark) and the cell."""
    return {
        "judge": config.get("judge"),
        "keys": list(
            CFG.agents[wildcards.agent].keys
        ),  # names: their values are redacted from trace.md
        "cell": {
            "model": CFG.models[wildcards.model].id,
            "model_name": wildcards.model,
            "eval": wildcards.eval,
            "agent": wildcards.agent,
        },
    }
