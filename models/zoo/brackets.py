"""``zoo:brackets``: an encoder that finds, at each closing bracket, the type of its match.

Data: Dyck-2 strings (two bracket types, nested). Openers are written ``(`` and ``[``;
every closer is written with the same generic word ``/``, so the input does not reveal
which opener a closer matches. At each closer the model predicts the type of its
matching opener (``round`` or ``square``); to do so it must locate the match, the
most recent opener that is still open.

Ground truth: the matching pairs, as dependency arcs (``example["gold_heads"]``,
``example["gold_rels"]``, 0-based word indices, −1 for the root):

* a closer's head is its matching opener, relation ``match``;
* an opener's head is the opener that encloses it, relation ``nest``;
* the first top-level opener is the root (``root``); later top-level openers attach
  to it with relation ``sibling``.

:func:`to_conllu` writes these arcs as CoNLL-U (1-based HEAD, 0 = root) so that the
syntax probe runs on them unchanged; closers carry ``Type=Round|Square`` in FEATS.
Metric: per-closer accuracy of the predicted type.

Attention supervision: trained on the type loss alone, the model solves the task (100%)
with the matching spread over heads and layers — no head attends from closers to their
openers (best 58.6%, the previous-word baseline; with openers tagged uniquely per
string, 93.2%, short matches in one layer and long ones in another). So one head,
:data:`SUPERVISED_HEAD`, is also trained to attend from each closer to its opener, as
Strubell et al. (2018, LISA) trained a head to attend to each word's syntactic parent:
``loss = type cross-entropy + ATTENTION_WEIGHT · mean over closers of
−log a[closer → opener]``. The model still has to compute the match (the head's
query/key weights must find the most recent unclosed opener); the supervision only
fixes *where* it is done, so the syntax probe has a known answer: the best ``match``
head must be :data:`SUPERVISED_HEAD`, and no other head is told to do it.
"""

from __future__ import annotations

import os

from typing import Any, Iterable, Optional, Sequence
import random

import torch

from . import _common

TASK = "brackets"
FAMILY = "bert"
SEED = 0
STEPS = 1500
EVAL_SEED = 12345
N_EVAL = 500
METRIC = "per-closer accuracy of the matching opener's type"
OPEN = {"(": 0, "[": 1}
TYPES = ["round", "square"]
CLOSE = "/"
GENERATOR: dict[str, Any] = {
    "openers": list(OPEN),
    "closer": CLOSE,
    "min_pairs": 2,
    "max_pairs": 12,
    "max_depth": 5,
    "p_open": 0.5,
}
SUPERVISED_HEAD = (2, 1)  # (layer, head) trained to attend closer -> matching opener
ATTENTION_WEIGHT = 1.0
GROUND_TRUTH = {
    "field": "gold_heads",
    "description": "0-based head index per word (-1 root) with gold_rels: closer -> its matching "
    "opener ('match'), opener -> enclosing opener ('nest'), later top-level openers -> the first "
    "('sibling'), first top-level opener = root; models.zoo.brackets.to_conllu writes CoNLL-U",
    "regenerate": "models.zoo.eval_examples('brackets')",
    "supervised_head": list(SUPERVISED_HEAD),
    "supervision": f"head (layer {SUPERVISED_HEAD[0]}, head {SUPERVISED_HEAD[1]}) trained to attend from each "
    "closer to its matching opener (LISA, Strubell et al. 2018); no other head is supervised",
}
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
CONFIG: dict[str, Any] = dict(
    hidden_size=64,
    num_hidden_layers=3,
    num_attention_heads=4,
    intermediate_size=128,
    max_position_embeddings=32,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)


def _dyck(rng: random.Random) -> tuple:
    g = GENERATOR
    pairs = rng.randint(g["min_pairs"], g["max_pairs"])
    words, heads, rels = [], [], []
    labels: list[Optional[int]] = []  # the bracket kind of a closing bracket, None for an opening one
    stack, opened, first_top = [], 0, None
    while opened < pairs or stack:
        can_open = opened < pairs and len(stack) < g["max_depth"]
        if can_open and (not stack or rng.random() < g["p_open"]):
            w = rng.choice(list(OPEN))
            i = len(words)
            if stack:
                heads.append(stack[-1])
                rels.append("nest")
            elif first_top is None:
                first_top = i
                heads.append(-1)
                rels.append("root")
            else:
                heads.append(first_top)
                rels.append("sibling")
            words.append(w)
            labels.append(None)
            stack.append(i)
            opened += 1
        else:
            j = stack.pop()
            words.append(CLOSE)
            heads.append(j)
            rels.append("match")
            labels.append(OPEN[words[j]])
    return words, heads, rels, labels


def generate(n: int, seed: int) -> list[dict]:
    """``n`` examples ``{"text", "words", "labels", "gold_heads", "gold_rels"}``;
    ``labels[i]`` is 0 (round) / 1 (square) at closers and ``None`` at openers."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words, heads, rels, labels = _dyck(rng)
        out.append({"text": " ".join(words), "words": words, "labels": labels, "gold_heads": heads, "gold_rels": rels})
    return out


def to_conllu(examples: Sequence[dict]) -> str:
    """CoNLL-U text of the gold arcs of ``examples`` (one sentence each; see module doc).

    Each bracket is a word: FORM is the input word, LEMMA the true bracket, UPOS
    ``PUNCT``, FEATS ``Type=Round|Square`` and ``Side=Open|Close``, HEAD 1-based (0 =
    root), DEPREL ``root|nest|sibling|match``.
    """
    lines = []
    for k, e in enumerate(examples):
        lines.append(f"# sent_id = brackets-{k}")
        lines.append(f"# text = {e['text']}")
        for i, (w, h, r) in enumerate(zip(e["words"], e["gold_heads"], e["gold_rels"])):
            if w == CLOSE:
                opener = e["words"][h]
                lemma = ")" if opener == "(" else "]"
                side = "Close"
            else:
                opener, lemma, side = w, w, "Open"
            feats = f"Side={side}|Type={'Round' if opener == '(' else 'Square'}"
            lines.append("\t".join([str(i + 1), w, lemma, "PUNCT", "_", feats, str(h + 1), r, "_", "_"]))
        lines.append("")
    return "\n".join(lines) + "\n"


def tokenizer() -> Any:
    return _common.bert_word_tokenizer(list(OPEN) + [CLOSE], SPECIALS, CONFIG["max_position_embeddings"])


def build(seed: int) -> tuple:
    from transformers import BertConfig, BertForTokenClassification

    tok = tokenizer()
    _common.seed_everything(seed)
    cfg = BertConfig(
        vocab_size=len(tok),
        num_labels=2,
        pad_token_id=tok.pad_token_id,  # type: ignore[call-arg]  # transformers' typed config lists no num_labels; PretrainedConfig takes it
        id2label=dict(enumerate(TYPES)),
        label2id={t: i for i, t in enumerate(TYPES)},
        attn_implementation="eager",
        **CONFIG,
    )  # eager: training reads the attention
    return BertForTokenClassification(cfg), tok


def encode(tok: Any, examples: Sequence[dict]) -> tuple:
    enc = tok([e["text"] for e in examples], padding=True, return_tensors="pt")
    labels = torch.full_like(enc["input_ids"], -100)
    for b, e in enumerate(examples):
        for t, w in enumerate(enc.word_ids(b)):
            if w is not None and e["labels"][w] is not None:
                labels[b, t] = e["labels"][w]
    return enc, labels


def match_targets(enc: Any, examples: Sequence[dict]) -> torch.Tensor:
    """``[batch, seq]``: at each closer's token, the token index of its matching opener;
    −100 elsewhere (word indices mapped through ``enc.word_ids``)."""
    target = torch.full_like(enc["input_ids"], -100)
    for b, e in enumerate(examples):
        token_of = {w: t for t, w in enumerate(enc.word_ids(b)) if w is not None}
        for w, (h, r) in enumerate(zip(e["gold_heads"], e["gold_rels"])):
            if r == "match":
                target[b, token_of[w]] = token_of[h]
    return target


def supervised_loss(model: Any, batch: dict) -> torch.Tensor:
    """Type cross-entropy + ``ATTENTION_WEIGHT`` × the negative log attention that
    :data:`SUPERVISED_HEAD` puts from each closer on its opener (Strubell et al. 2018)."""
    out = model(
        input_ids=batch["input_ids"],
        attention_mask=batch["attention_mask"],
        labels=batch["labels"],
        output_attentions=True,
    )
    layer, head = SUPERVISED_HEAD
    attn = out.attentions[layer][:, head]  # [batch, query, key]
    log_attn = attn.clamp_min(1e-9).log().flatten(0, 1)
    att_loss = torch.nn.functional.nll_loss(log_attn, batch["match"].flatten(), ignore_index=-100)
    return out.loss + ATTENTION_WEIGHT * att_loss


def fit(model: Any, tok: Any, steps: int, seed: int, avoid: Iterable[str] = (), batch_size: int = 64) -> dict:
    sample = _common.fresh_sampler(generate, avoid, seed)

    def batch_fn(_: int) -> dict:
        examples = sample(batch_size)
        enc, labels = encode(tok, examples)
        return {
            "input_ids": enc["input_ids"],
            "attention_mask": enc["attention_mask"],
            "labels": labels,
            "match": match_targets(enc, examples),
        }

    return _common.train_loop(model, batch_fn, supervised_loss, steps=steps, lr=3e-3, warmup=100)


def accuracy(model: Any, tok: Any, examples: Sequence[dict], batch_size: int = 256) -> float:
    return _common.token_accuracy(model, tok, examples, encode, batch_size)


save = _common.save_hf


def load(directory: str | os.PathLike) -> Any:
    from transformers import BertForTokenClassification

    return _common.load_hf(BertForTokenClassification, directory)
