"""Tiny random-init Llama models with a char-level tokenizer, for CPU-only benchmark runs.

A char-level vocabulary keeps the embedding table to a few dozen rows and lets a 2-layer model
learn digit arithmetic in seconds; the chat template is minimal so prompts stay short.
"""

from __future__ import annotations

import os
import string
from collections.abc import Iterable

from ptflow.files import staged_dir
from ptflow.stages.data.verl_format import INSTRUCTION

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
ROLE_TOKENS = {"system": "<|system|>", "user": "<|user|>", "assistant": "<|assistant|>"}
SPECIAL_TOKENS = [PAD, BOS, EOS, UNK, *ROLE_TOKENS.values()]

# Each turn is "<|role|>content"; assistant turns end with EOS so generation learns to stop.
# Content parts given as a list (multimodal-style messages) are joined as text.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['content'] is string -%}{%- set content = message['content'] -%}"
    "{%- else -%}{%- set content = message['content'] | map(attribute='text') | join('') -%}{%- endif -%}"
    "{%- if message['role'] == 'system' -%}<|system|>{{ content }}"
    "{%- elif message['role'] == 'user' -%}<|user|>{{ content }}"
    "{%- elif message['role'] == 'assistant' -%}<|assistant|>{% generation %}{{ content }}</s>{% endgeneration %}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|assistant|>{%- endif -%}"
)


def build_char_tokenizer(texts: Iterable[str], *, phrases: Iterable[str] = (INSTRUCTION,)):
    """A ``PreTrainedTokenizerFast`` whose vocabulary is the special tokens + every char in ``texts``.

    Printable ASCII and newline are always included, so one tokenizer covers every eval's prompts
    (a model is created once and trained on several evals); other unseen chars map to ``<unk>``.
    Each of ``phrases`` becomes one extra (non-special) token: the verl instruction is ~70 chars,
    identical in every prompt, and as one token it makes sequences ~3x shorter and brings the
    question's digits close to the answer, which is what lets a 2-layer model learn in seconds.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    chars = set(string.printable) - set("\t\r\x0b\x0c")
    for t in texts:
        chars.update(t)
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for ch in sorted(chars):
        vocab.setdefault(ch, len(vocab))
    # BPE without merges and without a pre-tokenizer == one token per character (newlines too).
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK))
    tok.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        additional_special_tokens=list(ROLE_TOKENS.values()),
        clean_up_tokenization_spaces=False,
        model_max_length=512,
    )
    extra = [AddedToken(p, normalized=False, special=False) for p in phrases if p]
    if extra:
        tokenizer.add_tokens(extra)
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def create_tiny_llama(
    out_dir, tokenizer, *, layers: int, hidden: int, heads: int, seed: int, intermediate: int | None = None
) -> None:
    """Write a random-init Llama (HF format: config, safetensors, tokenizer, generation config).

    ``intermediate`` is the MLP width (default ``4 * hidden``).

    The directory is written to a temp sibling and renamed into place, so a crashed job never
    leaves a half-written model where the workflow expects a complete one.
    """

    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    if hidden % heads:
        raise ValueError(f"hidden={hidden} must be divisible by heads={heads}")
    out_dir = os.fspath(out_dir)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=intermediate or 4 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=512,
        # Measured on 1-digit add/sub: untied embeddings and a 5x larger init than HF's 0.02 cut the
        # SFT steps needed for ~100 % accuracy by 2x or more (0.02 + tied: ~40 % after 150 steps).
        tie_word_embeddings=False,
        initializer_range=0.1,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        dtype="float32",
    )
    model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        do_sample=False,
    )
    with staged_dir(out_dir) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
