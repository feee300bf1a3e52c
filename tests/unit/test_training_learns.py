"""Real SFT then GRPO on 1-digit addition, evaluated through inspect (the workflow's path).

Train and test share the 100-problem space here: this checks that the trainers fit and GRPO keeps it. That the
models *generalise* (held-out problems) is checked end to end on the default config in tests/e2e.

Slow-ish (~40 s on 2 CPU cores) but the only test proving the agents actually learn.
"""

from ptflow.config.model import eval_from_entry
from ptflow.stages.data.synthetic import generate_arithmetic
from ptflow.stages.data.verl_format import to_verl_frame, write_parquet
from ptflow.stages.evaluate.run import evaluate, with_toy_data
from ptflow.stages.evaluate.settings import Provider, build_call
from ptflow.stages.tiny_model import build_char_tokenizer, create_tiny_llama
from ptflow.stages.train.grpo import train_grpo
from ptflow.stages.train.sft import train_sft


def test_sft_learns_and_grpo_keeps_it(tmp_path):
    train, test = tmp_path / "train.parquet", tmp_path / "test.parquet"
    write_parquet(to_verl_frame(generate_arithmetic("add", 1, 400, 0), "synthetic/add", "train"), train)
    write_parquet(to_verl_frame(generate_arithmetic("add", 1, 64, 1), "synthetic/add", "test"), test)
    base = tmp_path / "base"
    create_tiny_llama(base, build_char_tokenizer([]), layers=2, hidden=64, heads=4, seed=0)

    toy = eval_from_entry({"id": "add", "task": "ptflow", "max_new_tokens": 20, "dataset": {"source": "local",
                           "repo": "synthetic/add", "generator": {}}})  # fmt: skip
    call = with_toy_data(build_call(toy, Provider()), test)

    def accuracy(model, agent):
        out = evaluate(call, model, tmp_path / "logs" / agent, hf_home=tmp_path / "hf", evals_cache=tmp_path / "c",
                       threads=1, log=lambda _: None)  # fmt: skip
        assert out.log_path == str(tmp_path / "logs" / agent / "add.eval")
        h = out.headline
        assert h["n"] == 64 and h["scorer"] == "gsm8k_strict" and h["name"] == "accuracy"
        return h["value"]

    acc_base = accuracy(base, "baseline")

    lines = []
    sft = train_sft(
        base, train, tmp_path / "sft", steps=200, batch_size=32, learning_rate=3e-3, seed=0, log=lines.append
    )
    assert sft["step"] == 200 and sft["train_loss"] > 0 and lines
    assert (tmp_path / "sft" / "model.safetensors").exists()
    acc_sft = accuracy(tmp_path / "sft", "sft")
    assert acc_sft >= acc_base + 0.5, (acc_base, acc_sft)

    grpo = train_grpo(
        tmp_path / "sft",
        train,
        tmp_path / "grpo",
        steps=16,
        batch_size=8,
        num_generations=4,
        learning_rate=2e-5,
        max_completion_length=20,
        seed=0,
        log=lambda s: None,
    )
    assert grpo["step"] == 16
    assert grpo["reward_mean"] > 0.5  # the reward sees the completion text (else it would be ~0)
    acc_grpo = accuracy(tmp_path / "grpo", "grpo")
    assert acc_grpo >= acc_sft - 0.05, (acc_sft, acc_grpo)
