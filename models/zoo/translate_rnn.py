"""``zoo:translate-rnn``: the ``zoo:translate`` task with a GRU encoder-decoder and
additive attention (Bahdanau et al. 2015), so that recurrent attention and transformer
cross-attention can be compared on the same gold alignments.

Model (:class:`GRUAttention`): a bidirectional GRU encoder; a GRU-cell decoder that at
step ``t`` scores every encoder state ``h_j`` with ``v·tanh(W s_{t-1} + U h_j)``,
softmaxes over the (unpadded) source to get ``α_t`` and feeds the context
``Σ_j α_tj h_j`` with the previous word into the cell. ``α_t`` is the attention used to
produce target word ``t``: one layer, one head of cross-attention.

Not a Hugging Face model: weights are a plain safetensors state dict
(``model.safetensors``) with ``config.json`` holding the sizes;
``card["family"] == "gru-attention"``. :func:`attention_maps` returns the attention of
one (source, target) pair as :class:`probe.maps.AttentionMaps` fields with ``kind="cross"``.

Data, lexicon, ground truth and metric: as in :mod:`models.zoo.translate`.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence
import os

import json
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import _common
from . import translate as _t
from ..errors import InputError

TASK = "translate-rnn"
FAMILY = "gru-attention"
SEED = 0
# 1000 steps at lr 3e-3: 100% exact match, attention argmax = gold for every word, mean
# attention on the gold word 0.93 (500 steps at lr 5e-3: 0.89); ~45 s on one thread.
STEPS = 1000
EVAL_SEED = _t.EVAL_SEED
N_EVAL = _t.N_EVAL
METRIC = _t.METRIC
GENERATOR = _t.GENERATOR
GROUND_TRUTH = dict(
    _t.GROUND_TRUTH,
    regenerate="models.zoo.eval_examples('translate-rnn')",
    description="alignment[j] = index of the source word that target word j "
    "translates; row j of the additive attention is the step that produces target word j",
)
CONFIG = dict(embed=48, hidden=64)
generate = _t.generate
tokenizer = _t.tokenizer


class GRUAttention(nn.Module):
    """GRU encoder-decoder with additive attention.

    ``forward(src, src_mask, dec_in)`` with ``src`` ``[B, S]`` token ids, ``src_mask``
    ``[B, S]`` (1 = token), ``dec_in`` ``[B, T]`` (``<s> y_1 … y_{T-1}``) returns
    ``(logits [B, T, V], attention [B, T, S])``; attention rows sum to 1 over the
    unpadded source.
    """

    def __init__(self, vocab_size: int, pad_id: int, embed: int = 48, hidden: int = 64) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, embed, padding_idx=pad_id)
        self.encoder = nn.GRU(embed, hidden, batch_first=True, bidirectional=True)
        self.init = nn.Linear(2 * hidden, hidden)
        self.w_query = nn.Linear(hidden, hidden, bias=False)
        self.w_key = nn.Linear(2 * hidden, hidden)
        self.v = nn.Linear(hidden, 1, bias=False)
        self.cell = nn.GRUCell(embed + 2 * hidden, hidden)
        self.out = nn.Linear(hidden + 2 * hidden + embed, vocab_size)

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> tuple:
        lengths = src_mask.sum(1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(self.embed(src), lengths, batch_first=True, enforce_sorted=False)
        h, _ = self.encoder(packed)
        h, _ = nn.utils.rnn.pad_packed_sequence(h, batch_first=True, total_length=src.shape[1])
        mean = (h * src_mask[..., None]).sum(1) / lengths[:, None].to(h.dtype)
        return h, torch.tanh(self.init(mean))

    def forward(self, src: torch.Tensor, src_mask: torch.Tensor, dec_in: torch.Tensor) -> tuple:
        h, s = self.encode(src, src_mask)
        keys = self.w_key(h)
        emb = self.embed(dec_in)
        logits, attn = [], []
        for t in range(dec_in.shape[1]):
            score = self.v(torch.tanh(self.w_query(s)[:, None] + keys)).squeeze(-1)
            a = score.masked_fill(src_mask == 0, float("-inf")).softmax(-1)
            ctx = torch.bmm(a[:, None], h).squeeze(1)
            s = self.cell(torch.cat([emb[:, t], ctx], -1), s)
            logits.append(self.out(torch.cat([s, ctx, emb[:, t]], -1)))
            attn.append(a)
        return torch.stack(logits, 1), torch.stack(attn, 1)


def build(seed: int) -> tuple:
    tok = tokenizer()
    _common.seed_everything(seed)
    return GRUAttention(len(tok), tok.pad_token_id, **CONFIG), tok


def _loss(model: Any, b: dict) -> torch.Tensor:
    logits, _ = model(b["input_ids"], b["attention_mask"], b["decoder_input_ids"])
    return F.cross_entropy(logits.flatten(0, 1), b["labels"].flatten(), ignore_index=-100)


def fit(model: Any, tok: Any, steps: int, seed: int, avoid: Iterable[str] = (), batch_size: int = 64) -> dict:
    sample = _common.fresh_sampler(generate, avoid, seed)
    return _common.train_loop(
        model, lambda _: _t.encode(tok, sample(batch_size)), _loss, steps=steps, lr=3e-3, warmup=50
    )


@torch.no_grad()
def greedy(model: Any, tok: Any, texts: Sequence[str], max_new: int = 20) -> list[str]:
    """Greedy translations of ``texts`` (stops at ``</s>``)."""
    src = tok(list(texts), padding=True, return_tensors="pt")
    h, s = model.encode(src["input_ids"], src["attention_mask"])
    keys = model.w_key(h)
    y = torch.full((len(texts),), tok.bos_token_id)
    out = []
    for _ in range(max_new):
        score = model.v(torch.tanh(model.w_query(s)[:, None] + keys)).squeeze(-1)
        a = score.masked_fill(src["attention_mask"] == 0, float("-inf")).softmax(-1)
        ctx = torch.bmm(a[:, None], h).squeeze(1)
        e = model.embed(y)
        s = model.cell(torch.cat([e, ctx], -1), s)
        y = model.out(torch.cat([s, ctx, e], -1)).argmax(-1)
        out.append(y)
        if (torch.stack(out, 1) == tok.eos_token_id).any(1).all():
            break
    return _t._decode(tok, torch.stack(out, 1))


def accuracy(model: Any, tok: Any, examples: Sequence[dict], batch_size: int = 250) -> float:
    return _t.exact_match(greedy, model, tok, examples, batch_size)


@torch.no_grad()
def attention_fields(model: Any, tok: Any, source: str, target: str) -> dict:
    """Additive attention of one (source, target) pair, teacher-forced, as plain fields.

    Returns a dict with ``attentions`` ``[1, 1, n_target + 1, n_source]`` and the token
    lists of both sides, ready for :class:`probe.maps.AttentionMaps` (``kind="cross"``;
    :func:`probe.analyses.paper.alignment.rnn_attention_maps` builds it, so this floor
    stays below the core). Key side: the source words (the source carries no special
    token, see :func:`models.zoo.translate.tokenizer`). Query side, as in
    :func:`probe.runs.capture.capture` for encoder-decoder models: the decoder *inputs*
    ``<s> y_1 … y_n``, so query row ``j`` is the step that *produces* target word ``j``
    (row ``n``: ``</s>``). Raises ``ValueError`` on empty input.
    """
    if not source.split() or not target.split():
        raise InputError("source and target must both contain at least one word")
    b = _t.encode(tok, [{"text": source, "target_text": target}])
    _, attn = model(b["input_ids"], b["attention_mask"], b["decoder_input_ids"])
    src_enc = tok(source)
    tgt_enc = tok(target)
    t_wids = tgt_enc.word_ids()
    return dict(
        attentions=attn[0][None, None].float(),
        tokens=tok.convert_ids_to_tokens(src_enc["input_ids"]),
        word_ids=src_enc.word_ids(),
        special_mask=[w is None for w in src_enc.word_ids()],
        words=source.split(),
        layers=(0,),
        kind="cross",
        query_tokens=[tok.bos_token] + tok.convert_ids_to_tokens(tgt_enc["input_ids"]),
        query_word_ids=[None] + t_wids,
        query_special_mask=[True] + [w is None for w in t_wids],
        query_words=target.split(),
        text=source,
        meta={
            "model": "zoo:translate-rnn",
            "attention": "additive (Bahdanau et al. 2015)",
            "query_convention": "row j = decoder input j (<s> y_1 ...); it produces target word j",
        },
    )


def save(model: Any, tok: Any, directory: str | os.PathLike) -> None:
    from safetensors.torch import save_file

    directory = Path(directory)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(directory / _common.WEIGHTS))
    with open(directory / "config.json", "w") as f:
        json.dump(
            {"model_type": FAMILY, "vocab_size": len(tok), "pad_token_id": tok.pad_token_id, **CONFIG}, f, indent=2
        )
    tok.save_pretrained(directory)


def load(directory: str | os.PathLike) -> tuple:
    from safetensors.torch import load_file
    from transformers import PreTrainedTokenizerFast

    directory = Path(directory)
    path = directory / _common.WEIGHTS
    _common.check_safetensors(path)
    with open(directory / "config.json") as f:
        cfg = json.load(f)
    model = GRUAttention(cfg["vocab_size"], cfg["pad_token_id"], embed=cfg["embed"], hidden=cfg["hidden"])
    try:
        model.load_state_dict(load_file(str(path)), strict=True)
    except RuntimeError as e:
        raise InputError(f"weights file {path} does not fit the GRU model in config.json: {e}") from None
    model.eval()
    return model, PreTrainedTokenizerFast.from_pretrained(directory, trust_remote_code=False)
