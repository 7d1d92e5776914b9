"""``zoo:constructed``: a one-layer BERT whose attention weights are set by hand, so that
head 0 of layer 0 is by construction a previous-token head and head 1 a copy-of-[CLS]
head (the positional and [CLS]-attending patterns of Clark et al. 2019).

Construction (hidden 64 = two heads of 32; positions up to 32):

* position ``p`` embeds as the one-hot ``e_p`` in dimensions 0–31; each token embeds as a
  fixed random vector in dimensions 32–63, centred and of unit norm so the embedding
  LayerNorm maps every position's one-hot to the same height;
* head 0: ``W_Q`` shifts the position one-hot down by one (``q_i ∝ e_{i−1}``) and
  ``W_K`` is the identity on positions, so ``q_i·k_j`` is large only when ``j = i − 1``
  (row 0 has no previous token and is uniform);
* head 1: the query is a constant (a bias) and ``W_K`` reads the position-0 dimension,
  so every row attends to position 0, the ``[CLS]`` token.

Nothing is trained. The "accuracy" is the fraction of rows whose argmax is the
constructed target (token positions ``i ≥ 1`` for head 0, every row for head 1); other
weights (values, feed-forward) are seeded random and irrelevant to the attention.
"""

from __future__ import annotations

import os

from typing import Any, Iterable, Sequence
import torch

from . import _common
from . import prev_token as _pt

TASK = "constructed"
FAMILY = "bert"
SEED = 0
STEPS = 0
EVAL_SEED = 12345
N_EVAL = 200
METRIC = "fraction of rows whose argmax is the constructed target (both heads)"
GENERATOR: dict[str, Any] = dict(_pt.GENERATOR)
GROUND_TRUTH = {
    "field": "heads",
    "description": "token-level, [CLS] at position 0: layer 0 head 0 attends i -> i-1 for every "
    "token position i >= 1; layer 0 head 1 attends every position -> 0 ([CLS])",
    "heads": {"0.0": "previous token (i -> i-1)", "0.1": "[CLS] (i -> 0)"},
    "regenerate": "models.zoo.eval_examples('constructed')",
}
CONFIG: dict[str, Any] = dict(
    hidden_size=64,
    num_hidden_layers=1,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=32,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)
PREV_GAIN = 3.0  # head 0 score margin ≈ PREV_GAIN · 32 / √32 ≈ 17 logits
CLS_GAIN = 12.0  # head 1 score margin ≈ 12 logits
generate = _pt.generate
tokenizer = _pt.tokenizer


def build(seed: int) -> tuple:
    """The hand-set model (``BertModel``) and its tokenizer; ``seed`` fixes the token
    vectors and the irrelevant weights."""
    from transformers import BertConfig, BertModel

    tok = tokenizer()
    _common.seed_everything(seed)
    cfg = BertConfig(vocab_size=len(tok), pad_token_id=tok.pad_token_id, **CONFIG)
    cfg._attn_implementation = "eager"  # the point of this model is its attention weights
    model = BertModel(cfg, add_pooling_layer=False)
    d, P = cfg.hidden_size, cfg.max_position_embeddings
    half = d // 2
    if P > half:
        raise ValueError("constructed model needs max_position_embeddings <= hidden_size / 2")
    with torch.no_grad():
        emb = model.embeddings
        words = torch.randn(len(tok), half)
        words = words - words.mean(1, keepdim=True)
        words = words / words.norm(dim=1, keepdim=True)
        emb.word_embeddings.weight.zero_()
        emb.word_embeddings.weight[:, half:] = words
        emb.position_embeddings.weight.zero_()
        emb.position_embeddings.weight[:, :P] = torch.eye(P)
        emb.token_type_embeddings.weight.zero_()
        emb.LayerNorm.weight.fill_(1.0)
        emb.LayerNorm.bias.zero_()
        block: Any = model.encoder.layer[0]  # BertLayer (mypy sees Module | Tensor attributes)
        att = block.attention.self
        for lin in (att.query, att.key):
            lin.weight.zero_()
            lin.bias.zero_()
        for m in range(P - 1):  # head 0 (output dims 0..half-1): q_i ∝ e_{i-1}, k_j ∝ e_j
            att.query.weight[m, m + 1] = PREV_GAIN
        for m in range(P):
            att.key.weight[m, m] = 1.0
        att.query.bias[half] = 1.0  # head 1: constant query ...
        att.key.weight[half, 0] = CLS_GAIN  # ... matching only position 0
    model.eval()
    return model, tok


def fit(model: Any, tok: Any, steps: int, seed: int, avoid: Iterable[str] = (), batch_size: int = 0) -> dict:
    """Nothing to train: the weights are set by :func:`build`."""
    return {"steps": 0, "seconds": 0.0, "loss": None}


@torch.no_grad()
def head_hits(model: Any, tok: Any, examples: Sequence[dict]) -> tuple[float, float]:
    """(fraction of rows i ≥ 1 of head 0 whose argmax is i − 1, fraction of rows of head 1
    whose argmax is 0), over the unpadded tokens of ``examples``."""
    enc = tok([e["text"] for e in examples], padding=True, return_tensors="pt")
    a = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], output_attentions=True).attentions[0]
    prev = cls = n_prev = n_cls = 0
    for b in range(len(examples)):
        n = int(enc["attention_mask"][b].sum())
        am = a[b, :, :n, :n].argmax(-1)  # [head, query]
        prev += (am[0, 1:] == torch.arange(n - 1)).sum().item()
        cls += (am[1] == 0).sum().item()
        n_prev += n - 1
        n_cls += n
    return prev / n_prev, cls / n_cls


def accuracy(model: Any, tok: Any, examples: Sequence[dict]) -> float:
    p, c = head_hits(model, tok, examples)
    return min(p, c)


save = _common.save_hf


def load(directory: str | os.PathLike) -> Any:
    from transformers import BertModel

    return _common.load_hf(BertModel, directory, add_pooling_layer=False)
