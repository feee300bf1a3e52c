"""The agent kinds: what each kind needs and does, in one table that config checks, rules, scripts and preflight ask.

A new agent kind is one entry here plus its trainer module (``ptflow.stages.train.<module>``, a ``run(job)``
function), and its params' keys in the config schema (``agents[].params``); the schema's ``kind`` is a string,
checked against this table by ``ptflow.config.entries`` (docs/howto-add-an-agent-kind.md walks through it).
"""

from __future__ import annotations

from dataclasses import dataclass

# How a kind gets the eval's preprocessed train split (verl parquet, rule preprocess).
TRAIN_DATA_NONE = "none"
TRAIN_DATA_ALWAYS = "always"  # it trains on it: the eval must have a dataset to preprocess
TRAIN_DATA_IF_PARQUET = "if-parquet"  # given to it when the eval is evaluated on the parquet (task 'ptflow')


@dataclass(frozen=True)
class AgentKind:
    name: str
    description: str
    trains: bool = True
    required_params: tuple[str, ...] = ()  # under the agent's params: no silent defaults for a run's definition
    required_fields: tuple[str, ...] = ()  # keys of the agent entry itself
    variants: tuple[str, ...] = ()  # allowed params.variant values ((): none)
    train_data: str = TRAIN_DATA_NONE
    # The rule's process re-runs itself inside the site's container/venv. False: it stays on the batch host and
    # puts only its children there (Ray kinds start srun steps per node; a cli-agent puts only the agent inside).
    reexec_in_runtime: bool = True
    trainer: str | None = None  # "module:function" taking a ptflow.stages.train.cell.Training
    agent_cli: bool = False  # an LLM coding agent under a time budget: keys, task dir, judge, budget preflight
    site_requests: tuple[str, ...] = ()  # further site requests its jobs submit (preflight: the site must have them)
    # evaluates each model's instruct counterpart zero-shot (models[].instruct): the reference of PostTrainBench's
    # weights; it has cells only for models that name one
    evaluates_instruct: bool = False
    # How a train job on several nodes runs: "torchrun" (one launcher per node with the rendezvous env, TAO's
    # contract, ptflow.cluster.multinode), "ray" (its own Ray launcher), None (one node only: preflight refuses more).
    multinode: str | None = None

    @property
    def evaluates_in_train_job(self) -> bool:
        """An agent cell's train job evaluates its model in the same allocation once the agent has ended (one GPU
        queue wait per cell, as PostTrainBench's one sbatch job per cell); the evaluate job then adopts the result
        (ptflow.stages.evaluate.in_train_job)."""
        return self.agent_cli

    @property
    def ray_launcher(self) -> bool:
        """Its train job brings up Ray over the allocation (ptflow.launch.ray; preflight checks the launcher)."""
        return self.multinode == "ray"


KINDS: dict[str, AgentKind] = {
    k.name: k
    for k in (
        AgentKind("baseline", "evaluates the untouched base model", trains=False),
        AgentKind(
            "instruct",
            "evaluates the model's instruct counterpart zero-shot (models[].instruct)",
            trains=False,
            evaluates_instruct=True,
        ),
        AgentKind(
            "trl-sft",
            "TRL SFTTrainer on the eval's train split",
            required_params=("steps", "batch_size", "learning_rate", "seed"),
            train_data=TRAIN_DATA_ALWAYS,
            trainer="ptflow.stages.train.sft:run",
            multinode="torchrun",
        ),
        AgentKind(
            "trl-grpo",
            "TRL GRPOTrainer rewarded by the eval's scorer",
            required_params=(
                "steps",
                "batch_size",
                "num_generations",
                "learning_rate",
                "max_completion_length",
                "seed",
            ),
            train_data=TRAIN_DATA_ALWAYS,
            trainer="ptflow.stages.train.grpo:run",
            multinode="torchrun",
        ),
        AgentKind(
            "cli-agent",
            "a coding agent (claude, codex, gemini, scripted) post-trains the model within its budget",
            required_fields=("cli", "model", "hours"),
            train_data=TRAIN_DATA_IF_PARQUET,
            reexec_in_runtime=False,
            trainer="ptflow.stages.train.agent.cell:run",
            agent_cli=True,
        ),
        AgentKind(
            "verl",
            "verl's PPO/DAPO recipes on a Ray cluster over the job's allocation",
            variants=("ppo-gsm8k", "dapo"),
            train_data=TRAIN_DATA_ALWAYS,
            reexec_in_runtime=False,
            trainer="ptflow.stages.train.verl:run",
            multinode="ray",
        ),
        AgentKind(
            "nemo-distill",
            "NeMo-RL on-policy distillation from a teacher on a Ray cluster",
            required_params=("teacher",),
            variants=("full", "smoke"),
            reexec_in_runtime=False,
            trainer="ptflow.stages.train.nemo:run",
            multinode="ray",
        ),
        AgentKind(
            "skyrl",
            "SkyRL-style training beside a CPU job of the SkyRL server",
            trainer="ptflow.stages.train.skyrl:run",
            site_requests=("runtime_server",),
        ),
    )
}


def kind_of(agent) -> AgentKind:
    """The kind of an agent (a config Agent or anything with ``.kind``)."""
    return KINDS[agent.kind]
