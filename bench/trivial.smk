# BENCH ONLY: the floor of Snakemake itself for ptflow's DAG shape, used by bench/plan_scale.py. The same jobs per rule
# as a matrix of config["models"] x config["evals"] x (baseline + config["agents"] agents that train and are judged):
# cache_model -> train -> evaluate -> judge -> aggregate, with touch bodies, constant resources and no ptflow code.
# config["edges"]="ptflow" gives its jobs ptflow's inputs on the generic site as well: train and evaluate read the
# model (or checkpoint), the eval's cache marker and an image (cache_eval_data, image jobs), judge reads the
# checkpoint and eval.json. Without it each job has one input.
MODELS = [f"org--model-{i}" for i in range(int(config["models"]))]
EVALS = [f"eval-{i}" for i in range(int(config["evals"]))]
AGENTS = [f"agent-{i}" for i in range(int(config["agents"]))]
CELLS = [(m, e, a) for m in MODELS for e in EVALS for a in ["baseline", *AGENTS]]
TRAINED = [(m, e, a) for m, e, a in CELLS if a != "baseline"]
EDGES = config.get("edges", "one") == "ptflow"
# the inputs ptflow's jobs have beyond the one of each job here (none unless edges=ptflow)
EXTRA = ["results/cache/evals/{eval}.json", "images/{rule}.sif"] if EDGES else []
CHECKPOINT = ["results/cells/{model}/{eval}/{agent}/checkpoint.json"] if EDGES else []


wildcard_constraints:
    model=r"[^/]+",
    eval=r"[^/]+",
    agent=r"[^/]+",


rule all:
    default_target: True
    input:
        "results/summary.csv",


rule cache_model:
    output:
        "results/cache/models/{model}.json",
    resources:
        runtime=60,
        mem_mb=8000,
    shell:
        "touch {output}"


rule cache_eval_data:
    output:
        "results/cache/evals/{eval}.json",
    resources:
        runtime=60,
        mem_mb=8000,
    shell:
        "touch {output}"


rule image:
    output:
        "images/{image}.sif",
    resources:
        runtime=60,
        mem_mb=8000,
    shell:
        "touch {output}"


rule train:
    input:
        "results/cache/models/{model}.json",
        [p.replace("{rule}", "train") for p in EXTRA],
    output:
        "results/cells/{model}/{eval}/{agent}/checkpoint.json",
    resources:
        runtime=720,
        mem_mb=131072,
    shell:
        "touch {output}"


def evaluate_input(wildcards):
    if wildcards.agent == "baseline":
        return f"results/cache/models/{wildcards.model}.json"
    return f"results/cells/{wildcards.model}/{wildcards.eval}/{wildcards.agent}/checkpoint.json"


rule evaluate:
    input:
        evaluate_input,
        [p.replace("{rule}", "evaluate") for p in EXTRA],
    output:
        "results/cells/{model}/{eval}/{agent}/eval.json",
    resources:
        runtime=180,
        mem_mb=131072,
    shell:
        "touch {output}"


rule judge:
    input:
        "results/cells/{model}/{eval}/{agent}/eval.json",
        CHECKPOINT,
    output:
        "results/cells/{model}/{eval}/{agent}/judge.json",
    localrule: True
    shell:
        "touch {output}"


rule aggregate:
    input:
        [f"results/cells/{m}/{e}/{a}/eval.json" for m, e, a in CELLS],
        [f"results/cells/{m}/{e}/{a}/judge.json" for m, e, a in TRAINED],
    output:
        "results/summary.csv",
    resources:
        runtime=15,
        mem_mb=4000,
    shell:
        "touch {output}"
