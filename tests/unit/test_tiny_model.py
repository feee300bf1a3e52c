import json

import pytest

from ptflow.stages.data.verl_format import INSTRUCTION
from ptflow.stages.tiny_model import build_char_tokenizer, create_tiny_llama

MSGS = [
    {"role": "user", "content": "What is 3 + 4? " + INSTRUCTION},
    {"role": "assistant", "content": "3 + 4 = 7\n#### 7"},
]


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer(["What is 3 + 4?", "é"])


def test_char_round_trip(tok):
    text = "What is 12 - 7?\n#### 5 é"
    ids = tok(text)["input_ids"]
    assert len(ids) == len(text)  # one token per char, nothing added
    assert tok.decode(ids) == text
    assert tok.convert_ids_to_tokens(tok("é")["input_ids"]) == ["é"]  # chars from texts are in the vocab
    assert tok.convert_ids_to_tokens(tok("ß")["input_ids"]) == [tok.unk_token]


def test_instruction_is_one_token(tok):
    assert len(tok(INSTRUCTION)["input_ids"]) == 1
    assert tok.decode(tok("x " + INSTRUCTION)["input_ids"]) == "x " + INSTRUCTION


def test_special_tokens_and_chat_template(tok):
    assert tok.pad_token and tok.eos_token and tok.bos_token
    assert len({tok.pad_token_id, tok.eos_token_id, tok.bos_token_id}) == 3
    prompt = tok.apply_chat_template(MSGS[:1], tokenize=False, add_generation_prompt=True)
    full = tok.apply_chat_template(MSGS, tokenize=False)
    assert prompt == "<|user|>" + MSGS[0]["content"] + "<|assistant|>"
    assert full == prompt + MSGS[1]["content"] + tok.eos_token
    ids = tok(full)["input_ids"]
    assert ids[-1] == tok.eos_token_id
    assert tok.decode(ids, skip_special_tokens=True) == MSGS[0]["content"] + MSGS[1]["content"]


def test_model_saves_and_loads(tok, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "m"
    create_tiny_llama(out, tok, layers=2, hidden=32, heads=2, seed=0)
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json"} <= names
    assert [p.name for p in tmp_path.iterdir()] == ["m"]  # temp dir renamed away
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["num_hidden_layers"] == 2 and cfg["hidden_size"] == 32 and cfg["vocab_size"] == len(tok)

    tok2 = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    assert tok2.chat_template == tok.chat_template
    assert tok2(INSTRUCTION)["input_ids"] == tok(INSTRUCTION)["input_ids"]
    enc = tok2(tok2.apply_chat_template(MSGS[:1], tokenize=False, add_generation_prompt=True), return_tensors="pt")
    gen = model.generate(**enc, max_new_tokens=4, do_sample=False)
    assert gen.shape[1] <= enc["input_ids"].shape[1] + 4

    # Same seed -> same weights (deterministic model creation).
    create_tiny_llama(tmp_path / "m2", tok, layers=2, hidden=32, heads=2, seed=0)
    m2 = AutoModelForCausalLM.from_pretrained(tmp_path / "m2")
    for a, b in zip(model.state_dict().values(), m2.state_dict().values(), strict=True):
        assert torch.equal(a, b)
