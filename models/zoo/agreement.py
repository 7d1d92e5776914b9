"""``zoo:agreement``: predict the number of a masked verb from its subject.

Data: sentences of a small English-like grammar (Linzen et al. 2016; the verb-number
task Abnar & Zuidema 2020 used)::

    S    -> [PRE] the (ADJ) SUBJ MOD{0,2} [MASK] [TAIL]
    PRE  -> yesterday | in the (ADJ) N ,
    MOD  -> PREP the (ADJ) N            (prepositional phrase)
          | that the (ADJ) N VERB       (object relative clause; VERB agrees with its N)
    TAIL -> here | now | near the (ADJ) N

e.g. ``in the old house , the keys to the small cabinet that the boy likes [MASK] here``.
The label is the number of the verb at ``[MASK]`` (0 = singular, 1 = plural), which is
the number of SUBJ. Nouns other than SUBJ ("attractors") have a random number, biased
to the opposite of the subject's, so only the subject head noun decides the label.

Ground truth: ``example["evidence_word"]`` is the word index of the subject head noun
(the one token whose number decides the label); ``example["attractor_words"]`` are the
other nouns; ``example["mask_word"]`` is the index of ``[MASK]``.
Metric: classification accuracy.
"""

from __future__ import annotations

import os

from typing import Any, Iterable, Optional, Sequence
import random

import torch

from . import _common

TASK = "agreement"
FAMILY = "bert"
SEED = 0
STEPS = 1200
EVAL_SEED = 12345
N_EVAL = 1000
METRIC = "verb-number classification accuracy"
NOUNS = [
    ("key", "keys"),
    ("cabinet", "cabinets"),
    ("dog", "dogs"),
    ("author", "authors"),
    ("table", "tables"),
    ("friend", "friends"),
    ("house", "houses"),
    ("letter", "letters"),
    ("teacher", "teachers"),
    ("boy", "boys"),
    ("girl", "girls"),
    ("car", "cars"),
]
VERBS = [("likes", "like"), ("sees", "see"), ("finds", "find"), ("keeps", "keep")]
ADJS = ["old", "new", "big", "small", "red", "happy"]
PREPS = ["to", "near", "of", "behind", "with", "on"]
FUNCTION = ["the", "that", "yesterday", "in", ",", "here", "now"]
GENERATOR: dict[str, Any] = {
    "nouns": NOUNS,
    "verbs": VERBS,
    "adjectives": ADJS,
    "prepositions": PREPS,
    "p_adjective": 0.3,
    "n_modifiers": [0, 1, 2],
    "p_relative_clause": 0.4,
    "p_attractor_opposite": 0.7,
    "p_preamble": 0.5,
    "p_tail": 0.5,
}
GROUND_TRUTH = {
    "field": "evidence_word",
    "description": "word index of the subject head noun, the only word whose number decides "
    "the label; attractor_words are the other nouns, mask_word the verb slot",
    "regenerate": "models.zoo.eval_examples('agreement')",
}
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
CONFIG: dict[str, Any] = dict(
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=128,
    max_position_embeddings=40,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)


def _np(rng: random.Random, words: Sequence[str], number: Optional[int] = None) -> tuple:
    """``the (ADJ) N``; returns (words, noun offset, number)."""
    g = GENERATOR
    num = rng.randint(0, 1) if number is None else number
    out = ["the"]
    if rng.random() < g["p_adjective"]:
        out.append(rng.choice(ADJS))
    out.append(rng.choice(NOUNS)[num])
    return out, len(out) - 1, num


def _sentence(rng: random.Random) -> tuple:
    g = GENERATOR
    words, nouns = [], []
    subj_num = rng.randint(0, 1)

    def attractor_num() -> int:
        return 1 - subj_num if rng.random() < g["p_attractor_opposite"] else subj_num

    def add_np(number: Optional[int]) -> int:
        np_, k, num = _np(rng, words, number)
        nouns.append(len(words) + k)
        words.extend(np_)
        return num

    if rng.random() < g["p_preamble"]:
        if rng.random() < 0.5:
            words.append("yesterday")
        else:
            words.append("in")
            add_np(attractor_num())
            words.append(",")
    start = len(words)
    add_np(subj_num)
    subject = nouns[-1]
    for _ in range(rng.choice(g["n_modifiers"])):
        if rng.random() < g["p_relative_clause"]:
            words.append("that")
            num = add_np(attractor_num())
            words.append(rng.choice(VERBS)[num])
        else:
            words.append(rng.choice(PREPS))
            add_np(attractor_num())
    mask = len(words)
    words.append("[MASK]")
    if rng.random() < g["p_tail"]:
        r = rng.random()
        if r < 0.33:
            words.append("here")
        elif r < 0.66:
            words.append("now")
        else:
            words.append("near")
            add_np(attractor_num())
    assert start <= subject
    return words, subj_num, subject, [n for n in nouns if n != subject], mask


def generate(n: int, seed: int) -> list[dict]:
    """``n`` examples ``{"text", "words", "label", "evidence_word", "attractor_words",
    "mask_word"}``, deterministic in ``seed``."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words, label, subj, attractors, mask = _sentence(rng)
        out.append(
            {
                "text": " ".join(words),
                "words": words,
                "label": label,
                "evidence_word": subj,
                "attractor_words": attractors,
                "mask_word": mask,
            }
        )
    return out


def tokenizer() -> Any:
    vocab = sorted({w for pair in NOUNS + VERBS for w in pair} | set(ADJS) | set(PREPS) | set(FUNCTION))
    return _common.bert_word_tokenizer(vocab, SPECIALS, CONFIG["max_position_embeddings"])


def build(seed: int) -> tuple:
    from transformers import BertConfig, BertForSequenceClassification

    tok = tokenizer()
    _common.seed_everything(seed)
    cfg = BertConfig(
        vocab_size=len(tok),
        num_labels=2,
        pad_token_id=tok.pad_token_id,  # type: ignore[call-arg]  # transformers' typed config lists no num_labels; PretrainedConfig takes it
        id2label={0: "singular", 1: "plural"},
        label2id={"singular": 0, "plural": 1},
        **CONFIG,
    )
    return BertForSequenceClassification(cfg), tok


def encode(tok: Any, examples: Sequence[dict]) -> tuple:
    enc = tok([e["text"] for e in examples], padding=True, return_tensors="pt")
    return enc, torch.tensor([e["label"] for e in examples])


def fit(model: Any, tok: Any, steps: int, seed: int, avoid: Iterable[str] = (), batch_size: int = 64) -> dict:
    sample = _common.fresh_sampler(generate, avoid, seed)

    def batch_fn(_: int) -> dict:
        enc, labels = encode(tok, sample(batch_size))
        return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"], "labels": labels}

    return _common.train_loop(model, batch_fn, lambda m, b: m(**b).loss, steps=steps, lr=2e-3, warmup=100)


@torch.no_grad()
def accuracy(model: Any, tok: Any, examples: Sequence[dict], batch_size: int = 256) -> float:
    correct = 0
    for i in range(0, len(examples), batch_size):
        enc, labels = encode(tok, examples[i : i + batch_size])
        pred = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).logits.argmax(-1)
        correct += (pred == labels).sum().item()
    return correct / max(1, len(examples))


save = _common.save_hf


def load(directory: str | os.PathLike) -> Any:
    from transformers import BertForSequenceClassification

    return _common.load_hf(BertForSequenceClassification, directory)
