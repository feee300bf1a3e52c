# BENCH ONLY: the floor of Snakemake itself for ptflow's DAG shape, used by bench/plan_scale.py. The same jobs per rule
# as a matrix of config["models"] x config["evals"] x (baseline + config["agents"] agents that train and are judged):
# cache_model -> train -> evaluate -> judge -> aggregate, with touch bodies, constant resources and no ptflow code.
MODELS = [f"org--model-{i}" for i in range(int(config["models"]))]
EVALS = [f"eval-{i}" for i in range(int(config["evals"]))]
AGENTS = [f"agent-{i}" for i in range(int(config["agents"]))]
CELLS = [(m, e, a) for m in MODELS for e in EVALS for a in ["baseline", *AGENTS]]
TRAINED = [(m, e, a) for m, e, a in CELLS if a != "baseline"]


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


rule train:
    input:
        "results/cache/models/{model}.json",
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
