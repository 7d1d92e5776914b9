"""Which head links a pronoun to its antecedent (Clark et al. 2019, Section 5, coreference).

For each pronoun mention (a mention whose head word has UPOS ``PRON``) that has an
antecedent in its window, and each (layer, head): among the heads of all mentions that
start before it in the window, the one the pronoun attends to most is a *correct*
antecedent when it belongs to the same entity (word-level attention, Clark et al.'s
"head word of the mention most attends to the head word of an antecedent"). Baselines:
the nearest preceding mention, and the nearest preceding mention that agrees in number
(UD ``Number``; a word without it agrees with anything). Clark et al. report head 5-4 of
BERT-base at 65% vs 27% for the nearest mention (CoNLL-2012).

Windows: the pronoun's sentence plus up to ``context`` preceding sentences of the same
document, joined by one space; only pronouns of the last sentence are evaluated, so each
pronoun is counted once. Settings: ``all`` pronouns, ``same_sentence`` (the nearest
antecedent is in the pronoun's sentence) and ``earlier_sentence`` (it is not).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

import numpy as np
import torch

from probe.analyses.structure.coref_mentions import Mention, sentence_mentions
from probe.errors import InputError, NotApplicable

log = logging.getLogger(__name__)

SETTINGS = ("all", "same_sentence", "earlier_sentence")
BASELINES = ("nearest_mention", "nearest_agreeing")


@dataclass(frozen=True)
class Pronoun:
    """One evaluated pronoun: its head word, the candidate antecedent heads (sorted word
    positions in the window), which are correct, and its setting."""

    word: int
    candidates: tuple
    correct: tuple
    setting: str
    nearest_agreeing: int  # index into candidates, -1 when none agrees


@dataclass(frozen=True)
class CorefWindow:
    """A few consecutive sentences of one document, joined, with their mentions.

    ``spans`` are the words' character spans in ``text``; ``mentions`` use window word
    indices; ``pronouns`` are the evaluated pronouns of the last sentence.
    """

    text: str
    spans: tuple
    words: tuple
    sentence_index: int
    first_word: int
    mentions: tuple
    pronouns: tuple


def _doc_ids(sentences) -> list:
    doc, out = None, []
    for s in sentences:
        doc = s.meta.get("newdoc id", doc) if s.meta else doc
        out.append(doc if doc is not None else "")
    return out


def coref_windows(sentences: Sequence, numbers: Optional[Sequence] = None, context: int = 2) -> list:
    """Build one :class:`CorefWindow` per sentence that has an evaluable pronoun.

    Args:
        sentences: :class:`probe.inputs.readers.Sentence` s of a CorefUD treebank, in order.
        numbers: per sentence, the ``Number`` of each word (:func:`read_number`), for the
            agreement baseline; ``None``: every mention agrees.
        context: preceding sentences of the same document in each window.

    Raises:
        ValueError: negative context; no ``Entity=`` annotation anywhere (not CorefUD).
    """
    if context < 0:
        raise InputError(f"context must be ≥ 0 sentences, got {context}")
    mentions = [sentence_mentions(s) for s in sentences]
    if not any(mentions):
        raise NotApplicable(
            "the treebank has no coreference annotation (no Entity= in MISC); use a CorefUD treebank such as GUM"
        )
    docs = _doc_ids(sentences)
    out = []
    for k in range(len(sentences)):
        first = k
        while first > 0 and k - first < context and docs[first - 1] == docs[k]:
            first -= 1
        text, spans, words, ms, nums, upos = "", [], [], [], [], []
        first_word = 0
        for j in range(first, k + 1):
            sj = sentences[j]
            base, wbase = (len(text) + 1 if text else 0), len(words)
            text = (text + " " if text else "") + sj.text
            spans += [(a + base, b + base) for a, b in sj.spans]
            words += list(sj.words)
            upos += list(sj.upos)
            if numbers is not None and len(numbers[j]) != len(sj):
                raise InputError(
                    f"sentence {sj.sent_id or j}: {len(numbers[j])} Number values for {len(sj)} words; "
                    "read both from the same file"
                )
            nums += list(numbers[j]) if numbers is not None else [""] * len(sj)
            ms += [Mention(m.start + wbase, m.end + wbase, m.head + wbase, m.entity, m.etype) for m in mentions[j]]
            first_word = wbase
        pronouns = _pronouns(ms, upos, nums, first_word)
        if pronouns:
            out.append(
                CorefWindow(
                    text=text,
                    spans=tuple(spans),
                    words=tuple(words),
                    sentence_index=k,
                    first_word=first_word,
                    mentions=tuple(ms),
                    pronouns=tuple(pronouns),
                )
            )
    return out


def _pronouns(mentions, upos, numbers, first_word) -> list:
    out = []
    for m in mentions:
        if m.head < first_word or upos[m.head] != "PRON":
            continue
        before = {}
        for c in mentions:
            if c.start < m.start and c.head < m.head:
                before.setdefault(c.head, set()).add(c.entity)
        if not before:
            continue
        cands = sorted(before)
        correct = tuple(m.entity in before[h] for h in cands)
        if not any(correct):
            continue
        nearest_correct = max(h for h, ok in zip(cands, correct) if ok)
        setting = "same_sentence" if nearest_correct >= first_word else "earlier_sentence"
        num = numbers[m.head]
        agree = [i for i, h in enumerate(cands) if not num or not numbers[h] or numbers[h] == num]
        out.append(
            Pronoun(
                word=m.head,
                candidates=tuple(cands),
                correct=correct,
                setting=setting,
                nearest_agreeing=agree[-1] if agree else -1,
            )
        )
    return out


@dataclass(frozen=True)
class CorefAccuracy:
    """Correct antecedent choices per setting: heads ``[setting, layer, head]``, baselines
    ``[setting, baseline]``, counts ``[setting]``."""

    hits: np.ndarray
    baseline_hits: np.ndarray
    counts: np.ndarray
    layers: tuple

    def to_frame(self):
        """Tidy table: setting, method (``head`` or a baseline), layer, head, accuracy,
        correct, count."""
        import pandas as pd

        S, L, H = self.hits.shape
        rows: list[tuple] = []
        for s in range(S):
            n = int(self.counts[s])
            for li in range(L):
                for h in range(H):
                    rows.append((SETTINGS[s], "head", self.layers[li], h, int(self.hits[s, li, h]), n))
            for b, name in enumerate(BASELINES):
                rows.append((SETTINGS[s], name, None, None, int(self.baseline_hits[s, b]), n))
        df = pd.DataFrame(rows, columns=["setting", "method", "layer", "head", "correct", "count"])
        df["accuracy"] = df["correct"] / df["count"].clip(lower=1)
        df["layer"] = df["layer"].astype("Int64")
        df["head"] = df["head"].astype("Int64")
        return df[["setting", "method", "layer", "head", "accuracy", "correct", "count"]]

    def best(self):
        """One row per setting: best layer/head and accuracy beside both baselines."""
        import pandas as pd

        S, L, H = self.hits.shape
        rows = []
        for s in range(S):
            n = max(int(self.counts[s]), 1)
            li, h = divmod(int(self.hits[s].argmax()), H)
            rows.append(
                {
                    "setting": SETTINGS[s],
                    "layer": self.layers[li],
                    "head": h,
                    "accuracy": self.hits[s, li, h] / n,
                    "nearest_mention": self.baseline_hits[s, 0] / n,
                    "nearest_agreeing": self.baseline_hits[s, 1] / n,
                    "count": int(self.counts[s]),
                }
            )
        return pd.DataFrame(rows)


def coref_accuracy(pairs: Iterable) -> CorefAccuracy:
    """Antecedent-selection accuracy of every head, with the baselines.

    Args:
        pairs: ``(window, attention, layers)``: a :class:`CorefWindow`, its word-level
            attention ``[layer, head, word, word]`` (specials excluded, see
            :func:`probe.analyses.structure.word_graph.word_attention`) and the model layer indices.

    Returns:
        a :class:`CorefAccuracy` (``.to_frame()``, ``.best()``).

    Raises:
        ValueError: no pronoun with an antecedent to evaluate.
    """
    counter = CorefCounter()
    for window, attention, lay in pairs:
        counter.update(window, attention, lay)
    return counter.result()


class CorefCounter:
    """The integer sums behind :class:`CorefAccuracy`: ``update(window, attention,
    layers)`` per window, ``merge(other)`` for another part of the corpus, ``result()``."""

    def __init__(self) -> None:
        self.hits: Optional[np.ndarray] = None  # [setting, layer, head]; None until the first window
        self.base = np.zeros((0, 0), dtype=np.int64)  # [setting, baseline]
        self.counts = np.zeros(0, dtype=np.int64)  # [setting]
        self.layers = ()

    def update(self, window, attention, layers) -> None:
        """Add one window's word-level attention ``[layer, head, word, word]``."""
        a = attention.float()
        if self.hits is None:
            L, H = a.shape[:2]
            self.hits = np.zeros((len(SETTINGS), L, H), dtype=np.int64)
            self.base = np.zeros((len(SETTINGS), len(BASELINES)), dtype=np.int64)
            self.counts = np.zeros(len(SETTINGS), dtype=np.int64)
            self.layers = tuple(layers)
        for p in window.pronouns:
            cand = torch.tensor(p.candidates)
            ok = torch.tensor(p.correct)
            pick = a[:, :, p.word, cand].argmax(-1)  # [L, H]
            got = ok[pick].numpy().astype(np.int64)
            b = np.array([p.correct[-1], p.nearest_agreeing >= 0 and p.correct[p.nearest_agreeing]], dtype=np.int64)
            for s in (0, SETTINGS.index(p.setting)):
                self.hits[s] += got
                self.base[s] += b
                self.counts[s] += 1

    def merge(self, other: "CorefCounter") -> "CorefCounter":
        if other.hits is None:
            return self
        if self.hits is None:
            self.hits, self.base, self.counts = other.hits.copy(), other.base.copy(), other.counts.copy()
            self.layers = other.layers
            return self
        if other.hits.shape != self.hits.shape:
            raise ValueError("cannot merge coreference counts of another model's layers/heads")
        self.hits += other.hits
        self.base += other.base
        self.counts += other.counts
        return self

    def result(self) -> CorefAccuracy:
        if self.hits is None or self.counts[0] == 0:
            raise NotApplicable("no pronoun with an antecedent in its window to evaluate")
        return CorefAccuracy(
            hits=self.hits.copy(), baseline_hits=self.base.copy(), counts=self.counts.copy(), layers=self.layers
        )
