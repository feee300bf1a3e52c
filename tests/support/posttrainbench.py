"""PostTrainBench's published reference numbers (aisa-group/PostTrainBench, scripts/baselines.json and
scripts/factors.json): zero-shot scores of the base models and their instruct counterparts, keyed by the bare model
name, and the per-eval weights it derives from them. Test data for ptflow.results.scoring."""

import yaml

from tests.conftest import REPO

# The table as ptflow ships it for users (config/posttrainbench-reference.yaml): one copy of the published numbers.
BASELINES = yaml.safe_load((REPO / "config" / "posttrainbench-reference.yaml").read_text())

# scripts/factors.json: the weights PostTrainBench derived from that table (checked against ours in
# test_matrix_score.py)
FACTORS = {
    "aime2025": 0.226536549919078,
    "arenahardwriting": 0.0903518275042778,
    "bfcl": 0.0746078457817324,
    "gpqamain": 0.22462215653948,
    "gsm8k": 0.0935882347031865,
    "healthbench": 0.184144830733019,
    "humaneval": 0.106148554819225,
}

BASE_MODELS = ["Qwen/Qwen3-1.7B-Base", "Qwen/Qwen3-4B-Base", "HuggingFaceTB/SmolLM3-3B-Base", "google/gemma-3-4b-pt"]
EVALS = sorted(FACTORS)
