"""``zoo:prev-token``: an encoder that outputs, at each word, the previous word.

Data: random strings of single-letter words (letters may repeat). At word ``i ≥ 1`` the
label is word ``i − 1``; word 0 is not scored. A bidirectional BERT encoder can only
solve this by moving information from position ``i − 1`` to ``i``, so some head must
attend ``i → i−1`` (the previous-token head of Clark et al. 2019 and Olsson et al. 2022).

Ground truth: ``example["gold_prev"][i] = i − 1`` (word index; ``None`` for word 0).
Metric: per-word accuracy over words ``i ≥ 1``.

One head carries the task. Trained on the cross-entropy alone, the heads share the work
(both attended ``i → i−1``; zero-ablating the stronger one left 88% accuracy), so no head
ablation could show the mechanism. Training therefore adds a group-lasso penalty
``HEAD_SPARSITY · (step / steps) · Σ_h ‖W_O[:, h]‖_F`` on each head's block of the
attention output projection (ramped in, so that a head first learns the task): copying
the previous word through one head costs less than through several, the task
concentrates in one head and the others' outputs shrink to ~0, so ablating the task
head drops accuracy to about chance (5%) while ablating any other head changes
nothing (seeds 0, 1, 2: 5–6% vs 0.0 points). Which head wins is decided by the seed;
tests find it by its attention. A silenced head may keep the attention pattern it had
learned (in the committed model head 0.0 still puts ~0.9 on i−1 with an output of ~0):
attention weights alone do not say which head matters.
"""

from __future__ import annotations

import os

from typing import Any, Callable, Iterable, Optional, Sequence
import random

import torch

from . import _common

TASK = "prev-token"
FAMILY = "bert"
SEED = 0
STEPS = 1000
EVAL_SEED = 12345
N_EVAL = 500
METRIC = "per-word accuracy over words i >= 1"
LETTERS = [chr(c) for c in range(ord("a"), ord("a") + 20)]
GENERATOR: dict[str, Any] = {"alphabet": "".join(LETTERS), "min_len": 4, "max_len": 24, "repeats_allowed": True}
GROUND_TRUTH = {
    "field": "gold_prev",
    "description": "for word i, the word it must copy is i-1 (None for word 0); a head attending i -> i-1 is required",
    "regenerate": "models.zoo.eval_examples('prev-token')",
}
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
CONFIG: dict[str, Any] = dict(
    hidden_size=64,
    num_hidden_layers=1,
    num_attention_heads=2,
    intermediate_size=128,
    max_position_embeddings=32,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)
HEAD_SPARSITY = 3e-3  # final weight of the group-lasso penalty on per-head output projections
CARD_EXTRA = {
    "training_objective": f"cross-entropy + {HEAD_SPARSITY} * (step / steps) * sum over heads of "
    "the Frobenius norm of the head's block of the attention output "
    "projection (concentrates the task in one head)"
}


def generate(n: int, seed: int) -> list[dict]:
    """``n`` examples: ``{"text", "words", "gold_prev"}``, deterministic in ``seed``."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.randint(GENERATOR["min_len"], GENERATOR["max_len"])
        words = [rng.choice(LETTERS) for _ in range(k)]
        out.append({"text": " ".join(words), "words": words, "gold_prev": [None] + list(range(k - 1))})
    return out


def tokenizer() -> Any:
    return _common.bert_word_tokenizer(LETTERS, SPECIALS, CONFIG["max_position_embeddings"])


def build(seed: int) -> tuple:
    from transformers import BertConfig, BertForTokenClassification

    tok = tokenizer()
    _common.seed_everything(seed)
    cfg = BertConfig(vocab_size=len(tok), num_labels=len(tok), pad_token_id=tok.pad_token_id, **CONFIG)  # type: ignore[call-arg]  # transformers' typed config lists no num_labels; PretrainedConfig takes it
    return BertForTokenClassification(cfg), tok


def encode(tok: Any, examples: Sequence[dict]) -> tuple:
    """Batch tensors; ``labels[b, t]`` = token id of the previous word, −100 elsewhere."""
    enc = tok([e["text"] for e in examples], padding=True, return_tensors="pt")
    labels = torch.full_like(enc["input_ids"], -100)
    for b in range(len(examples)):
        wids = enc.word_ids(b)
        for t, w in enumerate(wids):
            if w is not None and w >= 1:
                labels[b, t] = enc["input_ids"][b, t - 1]
    return enc, labels


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
    at = {"step": 0}

    def batch_fn(step: int) -> dict:
        at["step"] = step
        enc, labels = encode(tok, sample(batch_size))
        return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"], "labels": labels}

    def loss_fn(m: Any, b: dict) -> torch.Tensor:
        # the penalty ramps up linearly: at full weight from the start it silences every
        # head before any has learned to attend i -> i-1
        return m(**b).loss + HEAD_SPARSITY * (at["step"] / steps) * head_norms(m).sum()

    return _common.train_loop(model, batch_fn, loss_fn, steps=steps, lr=3e-3, on_step=on_step)


def head_norms(model: Any) -> torch.Tensor:
    """``[layers, heads]``: Frobenius norm of each head's block of the attention output
    projection (the columns that read that head's context vector)."""
    cfg = model.config
    d = cfg.hidden_size // cfg.num_attention_heads
    rows = []
    for layer in model.bert.encoder.layer:
        w = layer.attention.output.dense.weight  # [hidden, heads · d]
        rows.append(w.view(w.shape[0], cfg.num_attention_heads, d).pow(2).sum((0, 2)).sqrt())
    return torch.stack(rows)


def accuracy(model: Any, tok: Any, examples: Sequence[dict], batch_size: int = 256) -> float:
    return _common.token_accuracy(model, tok, examples, encode, batch_size)


save = _common.save_hf


def load(directory: str | os.PathLike) -> Any:
    from transformers import BertForTokenClassification

    return _common.load_hf(BertForTokenClassification, directory)
