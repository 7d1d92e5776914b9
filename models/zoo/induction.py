"""``zoo:induction``: a 2-layer causal decoder (Llama) that completes a repeated sequence.

Data: ``<s>`` + a random prefix of ``L`` distinct tokens (``L`` varies, so no fixed
offset solves it) + the same prefix again. Predicting the second copy requires the
two-step circuit of Olsson et al. (2022): a previous-token head (layer 0) writes "my
previous token was A" into each position; an induction head (layer 1) at a position
holding A attends to the position *after* the earlier A and copies its token.

Ground truth (word indices, ``<s>`` excluded): ``example["prefix_len"] = L``; for word
``j ≥ L`` (second copy) ``example["induction_target"][str(j)] = j − L + 1`` — the word
after the previous occurrence of word ``j``; the previous-token target of word ``j`` is
``j − 1``. Metric: next-token accuracy over the second copy, excluding its first token
(which cannot be predicted).
"""

from __future__ import annotations

import os

from typing import Any, Callable, Iterable, Optional, Sequence
import random

import torch
import torch.nn.functional as F

from . import _common

TASK = "induction"
FAMILY = "llama"
SEED = 0
STEPS = 1500
EVAL_SEED = 12345
N_EVAL = 500
METRIC = "next-token accuracy on the second copy (excluding its first token)"
VOCAB = [f"t{i}" for i in range(40)]
GENERATOR: dict[str, Any] = {
    "vocab_size": len(VOCAB),
    "min_prefix": 6,
    "max_prefix": 14,
    "distinct_tokens": True,
    "layout": "<s> prefix prefix",
}
GROUND_TRUTH = {
    "field": "induction_target",
    "description": "word indices without <s>: for word j >= prefix_len (second copy) the "
    "induction head should attend to word j - prefix_len + 1 (the word after the previous "
    "occurrence of word j); the previous-token head attends j -> j - 1",
    "regenerate": "models.zoo.eval_examples('induction')",
}
SPECIALS = ["<pad>", "<unk>", "<s>"]
# Rotary positions (Su et al. 2021) rather than GPT-2's learned absolute ones: with no
# position vector in the residual stream, layer 1 cannot find "the position after the
# previous occurrence" by copying that occurrence's position (the duplicate-token +
# Q-composition shortcut a GPT-2 of this size learned instead, with no previous-token
# head); it must match keys on "my previous token was A", which only a layer-0
# previous-token head can write (K-composition, Olsson et al. 2022).
CONFIG: dict[str, Any] = dict(
    hidden_size=96,
    intermediate_size=192,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=4,
    max_position_embeddings=32,
    tie_word_embeddings=False,
)


def generate(n: int, seed: int) -> list[dict]:
    """``n`` examples ``{"text", "words", "prefix_len", "induction_target"}``."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        L = rng.randint(GENERATOR["min_prefix"], GENERATOR["max_prefix"])
        prefix = rng.sample(VOCAB, L)
        words = prefix + prefix
        out.append(
            {
                "text": " ".join(words),
                "words": words,
                "prefix_len": L,
                "induction_target": {str(j): j - L + 1 for j in range(L, 2 * L)},
            }
        )
    return out


def tokenizer() -> Any:
    return _common.word_tokenizer(
        VOCAB,
        SPECIALS,
        template="<s> $A",
        roles=dict(pad_token="<pad>", unk_token="<unk>", bos_token="<s>"),
        max_length=CONFIG["max_position_embeddings"],
    )


def build(seed: int) -> tuple:
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = tokenizer()
    _common.seed_everything(seed)
    cfg = LlamaConfig(
        vocab_size=len(tok),
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.bos_token_id,
        pad_token_id=tok.pad_token_id,
        **CONFIG,
    )
    return LlamaForCausalLM(cfg), tok


def encode(tok: Any, examples: Sequence[dict]) -> tuple:
    """Batch tensors and ``target[b, t]``: the token to predict from position ``t`` on the
    scored positions (second copy, from its first token up to the one before last), −100
    elsewhere. Token position = word index + 1 (``<s>`` first)."""
    enc = tok([e["text"] for e in examples], padding=True, return_tensors="pt")
    ids = enc["input_ids"]
    target = torch.full_like(ids, -100)
    for b, e in enumerate(examples):
        L = e["prefix_len"]
        for t in range(L + 1, 2 * L):  # second copy tokens 0 .. L-2 predict the next one
            target[b, t] = ids[b, t + 1]
    return enc, target


def _loss(model: Any, batch: dict) -> torch.Tensor:
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    return F.cross_entropy(logits.flatten(0, 1), batch["target"].flatten(), ignore_index=-100)


def fit(
    model: Any,
    tok: Any,
    steps: int,
    seed: int,
    avoid: Iterable[str] = (),
    batch_size: int = 64,
    on_step: Optional[Callable] = None,
) -> dict:
    sample = _common.fresh_sampler(generate, avoid, seed)

    def batch_fn(_: int) -> dict:
        enc, target = encode(tok, sample(batch_size))
        return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"], "target": target}

    return _common.train_loop(model, batch_fn, _loss, steps=steps, lr=3e-3, warmup=100, on_step=on_step)


def accuracy(model: Any, tok: Any, examples: Sequence[dict], batch_size: int = 256) -> float:
    return _common.token_accuracy(model, tok, examples, encode, batch_size)


save = _common.save_hf


def load(directory: str | os.PathLike) -> Any:
    from transformers import LlamaForCausalLM

    return _common.load_hf(LlamaForCausalLM, directory)
