"""A real decision for a sentence model: a logistic-regression probe on UD properties.

The bundled model only embeds sentences; to have something to explain, a scikit-learn
``LogisticRegression`` is trained on its sentence embeddings (mean pooling, L2-normalised,
as the model card says) to predict a property read off the Universal Dependencies
annotation (Conneau et al., 2018, "What you can cram into a single vector", probe
sentence embeddings for such properties, e.g. subject number and tense):

* ``subject-number`` — ``Number`` (Sing = 0 / Plur = 1) of the root's subject
  (``nsubj`` or ``nsubj:pass``); the evidence word is that subject;
* ``tense`` — ``Tense`` (Pres = 0 / Past = 1) of the root, or of its ``aux``/``cop``
  child when the root has none; the evidence word is the word carrying it.

Sentences are split into train and held-out sets (stratified, seeded); the held-out
accuracy is reported with the majority baseline. The fitted probe becomes a
:class:`probe.analyses.common.targets.ProbeLogit`: a ``torch.nn.Linear`` holding ``coef_`` and
``intercept_``, so the probe's logit is a differentiable function of the model that
captum can attribute.

UD FEATS are not kept in :class:`probe.inputs.readers.Sentence`, so they are read here with the
``conllu`` library, sentence by sentence in file order (the same order and the same word
numbering — empty nodes and multiword ranges skipped — as :func:`probe.inputs.readers.read_conllu`).
"""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

import numpy as np
import torch

from probe.analyses.common.targets import ProbeLogit
from probe.errors import InputError, NotApplicable

if TYPE_CHECKING:
    import os

    from probe.models.adapter import ModelAdapter

log = logging.getLogger(__name__)

__all__ = ["PROPERTIES", "UDLabel", "ud_labels", "FittedProbe", "sentence_embeddings", "fit_probe"]

PROPERTIES = {
    "subject-number": ("Number", ("Sing", "Plur")),
    "tense": ("Tense", ("Pres", "Past")),
}


@dataclass(frozen=True)
class UDLabel:
    """The property of one sentence: ``sentence`` (index in the file), ``label`` (0/1),
    ``evidence_word`` (0-based word index carrying the feature)."""

    sentence: int
    label: int
    evidence_word: int


def _words(tl):
    return [t for t in tl if isinstance(t["id"], int)]


def _label(words, prop: str) -> Optional[tuple]:
    feat, values = PROPERTIES[prop]
    pos = {t["id"]: k for k, t in enumerate(words)}
    roots = [t for t in words if t["head"] == 0]
    if not roots:
        return None
    root = roots[0]
    if prop == "subject-number":
        cands = [t for t in words if t["head"] == root["id"] and t["deprel"] in ("nsubj", "nsubj:pass")]
    else:
        cands = [root] + [t for t in words if t["head"] == root["id"] and t["deprel"] in ("aux", "cop", "aux:pass")]
    for t in cands:
        v = (t["feats"] or {}).get(feat)
        if v in values:
            return values.index(v), pos[t["id"]]
    return None


def ud_labels(path: str | os.PathLike, prop: str = "subject-number", limit: Optional[int] = None) -> list[UDLabel]:
    """:class:`UDLabel` s of the sentences of a CoNLL-U file that have the property.

    Args:
        path: the ``.conllu`` file.
        prop: a key of :data:`PROPERTIES`.
        limit: read only the first ``limit`` sentences (as ``read_conllu(limit=...)``).

    Raises:
        ValueError: unknown property (listing the known ones), unreadable file.
    """
    import conllu

    if prop not in PROPERTIES:
        raise InputError(f"unknown UD property {prop!r}; choose from {', '.join(PROPERTIES)}")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {path}: {exc}") from None
    out = []
    for k, tl in enumerate(conllu.parse_incr(io.StringIO(text))):
        if limit is not None and k >= limit:
            break
        got = _label(_words(tl), prop)
        if got is not None:
            out.append(UDLabel(sentence=k, label=got[0], evidence_word=got[1]))
    return out


def sentence_embeddings(
    adapter: ModelAdapter, encodings: Sequence, target: ProbeLogit, batch_size: int = 32
) -> np.ndarray:
    """Pooled embeddings ``[n, d]`` the probe reads (no gradient), via ``target.embed``."""
    from probe.models.batching import ONE_LENGTH, one_length_batches

    rows: list = [None] * len(encodings)
    order = sorted(range(len(encodings)), key=lambda i: len(encodings[i]))
    chunks: list = [order[s : s + batch_size] for s in range(0, len(order), batch_size)]
    if adapter.batching == ONE_LENGTH:  # its padding leaks: one length per forward
        chunks = list(one_length_batches(chunks, [len(e) for e in encodings]))
    with torch.no_grad():
        for idx in chunks:
            inputs = adapter.batch([encodings[i] for i in idx])
            out = target.output(adapter, inputs["input_ids"], inputs["attention_mask"])  # the encoder underneath
            emb = target.embed(out, inputs["attention_mask"]).float().cpu().numpy()
            for r, i in enumerate(idx):
                rows[i] = emb[r]
    return np.stack(rows)


@dataclass(frozen=True)
class FittedProbe:
    """A fitted probe and its evaluation.

    Attributes:
        target: the :class:`ProbeLogit` (class 1's logit).
        prop: the property; ``label_names`` of classes 0 and 1.
        train_idx, test_idx: indices (into the labelled examples) of the two splits.
        train_accuracy, test_accuracy, majority_baseline: on the held-out split for the
            last two.
    """

    target: ProbeLogit
    prop: str
    label_names: tuple
    train_idx: tuple
    test_idx: tuple
    train_accuracy: float
    test_accuracy: float
    majority_baseline: float

    def to_dict(self) -> dict:
        return {
            "property": self.prop,
            "labels": list(self.label_names),
            "n_train": len(self.train_idx),
            "n_test": len(self.test_idx),
            "train_accuracy": self.train_accuracy,
            "test_accuracy": self.test_accuracy,
            "majority_baseline": self.majority_baseline,
        }


def fit_probe(
    adapter: ModelAdapter,
    encodings: Sequence,
    labels: Sequence[int],
    *,
    prop: str = "subject-number",
    test_size: float = 0.3,
    seed: int = 0,
    C: float = 10.0,
) -> FittedProbe:
    """Fit a logistic-regression probe on pooled sentence embeddings.

    Args:
        adapter: the sentence model (an encoder; mean pooling).
        encodings: one encoding per labelled sentence.
        labels: 0/1 per sentence.
        test_size: share of sentences held out.
        seed: split and solver seed.
        C: inverse regularisation strength of ``LogisticRegression``.

    Raises:
        ValueError: fewer than 20 labelled sentences, a single class, or lengths that
            disagree.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import train_test_split

    y = np.asarray(labels, dtype=int)
    if len(y) != len(encodings):
        raise ValueError(f"{len(encodings)} sentences for {len(y)} labels")
    if len(y) < 20:
        raise NotApplicable(f"only {len(y)} labelled sentences: a probe with a held-out accuracy needs at least 20")
    if len(set(y.tolist())) < 2:
        raise NotApplicable("all labelled sentences have the same class; the probe has nothing to learn")
    if not 0 < test_size < 1:
        raise InputError(f"test_size must lie in (0, 1), got {test_size}")
    names = PROPERTIES.get(prop, ("", ("0", "1")))[1]
    d = adapter.config.hidden_size
    template = ProbeLogit(torch.nn.Linear(d, 1), normalize=True, label_names=names, name=f"probe:{prop}")
    X = sentence_embeddings(adapter, encodings, template)
    idx = np.arange(len(y))
    tr, te = train_test_split(idx, test_size=test_size, random_state=seed, stratify=y)
    clf = LogisticRegression(C=C, max_iter=2000, random_state=seed).fit(X[tr], y[tr])
    lin = torch.nn.Linear(d, 1)
    with torch.no_grad():
        lin.weight.copy_(torch.as_tensor(clf.coef_, dtype=torch.float32))
        lin.bias.copy_(torch.as_tensor(clf.intercept_, dtype=torch.float32))
    lin.requires_grad_(False)
    target = ProbeLogit(lin, normalize=True, label_names=names, name=f"probe:{prop}")
    majority = max(np.mean(y[te] == 0), np.mean(y[te] == 1))
    log.info(
        "probe %s: train %.3f, held-out %.3f (majority %.3f)",
        prop,
        clf.score(X[tr], y[tr]),
        clf.score(X[te], y[te]),
        majority,
    )
    return FittedProbe(
        target=target,
        prop=prop,
        label_names=names,
        train_idx=tuple(int(i) for i in tr),
        test_idx=tuple(int(i) for i in te),
        train_accuracy=float(clf.score(X[tr], y[tr])),
        test_accuracy=float(clf.score(X[te], y[te])),
        majority_baseline=float(majority),
    )
