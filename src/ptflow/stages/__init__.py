"""What the workflow's rules call: one room per rule's job, from files in to files out.

The rooms: ``cache`` (rules cache_*, hf_cache; ``tiny_model`` makes the embedded default's models), ``data`` (rule
preprocess), ``train`` (rules train, train_supervised: one module per agent kind, dispatched through
``ptflow.config.kinds``; the cli-agent kind's cell in ``train.agent``), ``evaluate`` (rules evaluate, evaluate_seed,
seed_mean) and ``judge`` (rules judge_run, judge). Shared by the rooms: ``checkpoint`` (a checkpoint's manifest and its
check), ``gsm8k_answer`` (the one answer rule training rewards and evaluation scores) and ``agent_task`` (an agent
cell's task: the interface between the train room's cell and the PostTrainBench adapter's checkout task).
PostTrainBench's protocol pieces are its adapter, ``posttrainbench``, which the rooms call. What reads the finished
cells (score, report, export) is ``ptflow.results``. Scripts in ``workflow/scripts`` are thin adapters over these.
Stages may import ``config``, ``cluster`` and ``launch``; they never read Snakemake's globals and never import
``ops``.
"""

import getpass
import os
import re
import tempfile

# What the stages' jobs import (mostly lazily, inside the stage functions) that takes seconds: a local run's
# warm-start zygotes import these once for all its jobs (ptflow.warmstart; site key warm_start). A name missing here
# costs time, never correctness: the job imports it itself.
WARM_IMPORTS = (
    "torch",
    "transformers",
    "transformers.modeling_utils",
    "transformers.trainer",
    "transformers.models.auto.modeling_auto",
    "transformers.models.auto.tokenization_auto",
    "transformers.models.llama.modeling_llama",
    "transformers.models.llama.configuration_llama",
    "tokenizers",
    "trl",
    "trl.trainer.sft_trainer",
    "trl.trainer.grpo_trainer",
    "datasets",
    "pandas",
    "pyarrow.parquet",
    "huggingface_hub",
    "inspect_ai",
    "inspect_ai.model._providers.hf",
    "inspect_ai.agent._acp.server",
    "inspect_ai.log",
    "inspect_evals._registry",
    # what an evaluation imports only once it runs (sample start, hooks): ~1 s each time. (Not FastAPI and uvicorn:
    # inspect's control server, which imports them, is off in the kit's attempts; kit.control_server_off)
    "inspect_ai.model._openai_responses",
    "inspect_ai.hooks._startup",
    "aiohttp",
    "markdown_it",
    "jsonschema",
    "snakemake.script",
    "ptflow.stages.cache",
    "ptflow.results.report",  # the aggregate job's stage
    "ptflow.stages.train.cell",
    "ptflow.stages.train.sft",
    "ptflow.stages.train.grpo",
    "ptflow.stages.evaluate.run",
    "ptflow.stages.evaluate.inspect_eval",
)


def warm_import_env() -> dict[str, str]:
    """Variables that importing WARM_IMPORTS sets in ``os.environ``, with the values it sets. A local run's driver
    sets them before its jobs start, so that a job's environment is the same before and after a zygote's imports:
    the evaluation kit's zygote, forked ahead from the job's environment (ptflow.warmstart companions), then is
    the one the kit asks for. torch sets TORCHINDUCTOR_CACHE_DIR to its default (torch._inductor.runtime
    .cache_dir_utils.default_cache_dir, repeated here so that the driver need not import torch); a value set
    beforehand it leaves alone.
    """
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid_{os.getuid()}"
    return {
        "TORCHINDUCTOR_CACHE_DIR": os.path.join(
            tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user)
        )
    }
