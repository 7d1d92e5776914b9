"""``zoo:relay``: a 2-layer GPT-2 whose weights are set by hand so that a two-step circuit
across layers is known exactly: the output at token ``i`` is the token at ``i − 2``.

Residual stream (80 dimensions, four blocks of 16 one-hots plus a junk block)::

    T 0-15   token id          (the token embedding)
    P 16-31  position          (the position embedding)
    S 32-47  previous token    (written by head 0.0)
    U 48-63  token two back    (written by head 1.0, read by the unembedding)
    J 64-79  junk              (written by heads 0.1 and 1.1, read by nothing)

* head **0.0** attends ``i -> i−1`` (``W_Q`` shifts the position one-hot, ``W_K`` is the
  identity on positions), reads the token block ``T`` through ``W_V`` and writes it into
  ``S``: "my previous token was A";
* head **1.0** attends ``i -> i−1`` the same way and moves that position's ``S`` into ``U``
  (V-composition, Elhage et al. 2021): the token two back;
* heads **0.1** (uniform attention) and **1.1** (attends to ``<s>``) read ``T`` and write
  into ``J``, which no later weight reads; MLPs are zero; the unembedding reads ``U`` only.

So the edges that carry the answer are exactly ``0.0 -> 1.0.v`` and ``1.0 -> out``; every
other edge can act only through LayerNorm's shared scale. Nothing is trained; the
"accuracy" is next-but-one copying (``argmax`` at token ``i`` equals the token at ``i − 2``).
"""

from __future__ import annotations

import os

import random
from typing import Any, Iterable, Sequence

import torch

from . import _common

TASK = "relay"
FAMILY = "gpt2"
SEED = 0
STEPS = 0
EVAL_SEED = 12345
N_EVAL = 200
METRIC = "accuracy of the output at token i naming the token at i - 2 (words 2 and later)"
SPECIALS = ["<pad>", "<unk>", "<s>"]
VOCAB = [f"w{i}" for i in range(13)]
GENERATOR: dict[str, Any] = {"vocab_size": len(VOCAB), "min_words": 5, "max_words": 12, "layout": "<s> words"}
BLOCK = 16
GROUND_TRUTH = {
    "field": "edges",
    "description": "set by hand: head 0.0 writes the previous token, head 1.0 moves it one more step "
    "and the unembedding reads it; heads 0.1 and 1.1 write into a subspace nothing reads",
    "edges": ["0.0->1.0.v", "1.0->out"],
    "heads": {
        "0.0": "previous token (writes S)",
        "1.0": "previous token (moves S to U)",
        "0.1": "uniform, writes junk",
        "1.1": "attends <s>, writes junk",
    },
    "regenerate": "models.zoo.eval_examples('relay')",
}
CONFIG: dict[str, Any] = dict(
    n_embd=5 * BLOCK,
    n_layer=2,
    n_head=2,
    n_positions=BLOCK,
    n_inner=4,
    resid_pdrop=0.0,
    embd_pdrop=0.0,
    attn_pdrop=0.0,
    tie_word_embeddings=False,
)
ATTN_GAIN = 3.0  # a LayerNormed one-hot is ≈ 6: score margin ≈ ATTN_GAIN · 6² / √40 ≈ 17 logits
WRITE_GAIN = 0.16  # a LayerNormed one-hot (≈ 6) written back at height ≈ 1
READ_GAIN = 4.0


def generate(n: int, seed: int) -> list[dict]:
    """``n`` examples ``{"text", "words"}`` of random words (repeats allowed)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = [rng.choice(VOCAB) for _ in range(rng.randint(GENERATOR["min_words"], GENERATOR["max_words"]))]
        out.append({"text": " ".join(words), "words": words})
    return out


def tokenizer() -> Any:
    return _common.word_tokenizer(
        VOCAB,
        SPECIALS,
        template="<s> $A",
        roles=dict(pad_token="<pad>", unk_token="<unk>", bos_token="<s>"),
        max_length=BLOCK,
    )


def build(seed: int) -> tuple:
    """The hand-set ``GPT2LMHeadModel`` and its tokenizer (``seed`` is unused: nothing is random)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    tok = tokenizer()
    if len(tok) > BLOCK:
        raise ValueError(f"relay needs at most {BLOCK} tokens, the tokenizer has {len(tok)}")
    cfg = GPT2Config(
        vocab_size=len(tok),
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.bos_token_id,
        pad_token_id=tok.pad_token_id,
        **CONFIG,
    )
    cfg._attn_implementation = "eager"
    _common.seed_everything(seed)
    model = GPT2LMHeadModel(cfg)
    T, P, S, U, J = (slice(i * BLOCK, (i + 1) * BLOCK) for i in range(5))
    d, dh = cfg.n_embd, cfg.n_embd // cfg.n_head
    eye = torch.eye(BLOCK)
    shift = torch.zeros(BLOCK, BLOCK)  # shift[p, p - 1] = 1: query at p looks for position p - 1
    for pos in range(1, BLOCK):
        shift[pos, pos - 1] = 1.0
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        tr: Any = model.transformer
        tr.wte.weight[:, T] = eye[: len(tok)]
        tr.wpe.weight[:, P] = eye
        for ln in [tr.ln_f] + [b.ln_1 for b in tr.h] + [b.ln_2 for b in tr.h]:
            ln.weight.fill_(1.0)
        for layer, (read, write) in enumerate([(T, S), (S, U)]):
            att: Any = tr.h[layer].attn
            w = att.c_attn.weight  # Conv1D [in, 3·d]: columns q | k | v, heads of dh each
            q0, k0, v0 = 0, d, 2 * d
            w[P, q0 : q0 + BLOCK] = ATTN_GAIN * shift  # head 0: q_i = e_{i-1}
            w[P, k0 : k0 + BLOCK] = eye  # k_j = e_j
            w[read, v0 : v0 + BLOCK] = eye  # v reads T (layer 0) or S (layer 1)
            att.c_proj.weight[0:BLOCK, write] = WRITE_GAIN * eye
            # head 1: layer 0 uniform (no q, k); layer 1 attends to <s> (position 0)
            if layer == 1:
                att.c_attn.bias[q0 + dh] = 1.0
                w[P.start, k0 + dh] = 4 * ATTN_GAIN
            w[T, v0 + dh : v0 + dh + BLOCK] = eye
            att.c_proj.weight[dh : dh + BLOCK, J] = WRITE_GAIN * eye
        model.lm_head.weight[:, U] = READ_GAIN * eye[: len(tok)]
    model.eval()
    return model, tok


def encode(tok: Any, examples: Sequence[dict]) -> tuple:
    """Batch tensors and ``labels[b, t]`` = the token at ``t − 2`` for word positions
    ``t ≥ 3`` (word 2 on; ``<s>`` is position 0), −100 elsewhere."""
    enc = tok([e["text"] for e in examples], padding=True, return_tensors="pt")
    ids = enc["input_ids"]
    labels = torch.full_like(ids, -100)
    for b in range(len(examples)):
        n = int(enc["attention_mask"][b].sum())
        labels[b, 3:n] = ids[b, 1 : n - 2]
    return enc, labels


def fit(model: Any, tok: Any, steps: int, seed: int, avoid: Iterable[str] = (), batch_size: int = 0) -> dict:
    """Nothing to train: the weights are set by :func:`build`."""
    return {"steps": 0, "seconds": 0.0, "loss": None}


@torch.no_grad()
def accuracy(model: Any, tok: Any, examples: Sequence[dict], batch_size: int = 256) -> float:
    return _common.token_accuracy(model, tok, examples, encode, batch_size)


def corrupt(examples: Sequence[dict], seed: int = 0) -> list:
    """Each word replaced by a different random word (same length): the answer changes everywhere."""
    rng = random.Random(seed)
    out = []
    for e in examples:
        words = [rng.choice([v for v in VOCAB if v != w]) for w in e["words"]]
        out.append(dict(e, text=" ".join(words), words=words))
    return out


save = _common.save_hf


def load(directory: str | os.PathLike) -> Any:
    from transformers import GPT2LMHeadModel

    return _common.load_hf(GPT2LMHeadModel, directory)
