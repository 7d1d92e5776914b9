"""Per-head features of attention over a corpus, the evidence for naming head roles.

For every (layer, head) the features are pooled over all *query rows* of all examples
(each non-special query token of each sentence weighs the same):

``prev2, prev, self, next, next2``
    mean attention from position ``i`` to ``i−2 … i+2`` (Clark et al. 2019), over the
    rows where that position exists and is not a special token (the first word's
    "previous token" is not [CLS]: special tokens are left out of positional
    evaluations, as Clark et al. leave them out of word-level argmax evaluations).
``argmax_prev2 … argmax_next2``
    share of rows whose maximum sits on that relative position (Voita et al. 2019's
    positional criterion is ``≥ 0.9``); ``positional_share`` / ``positional_offset``:
    the largest of these shares and its offset.
``to_cls``, ``to_sep``, ``to_special``
    attention to the first token when it is special ([CLS], ``<s>``/BOS), to the other
    special tokens ([SEP], EOS), and to both (the "no-op" sinks of Clark et al. 2019).
    ``NaN`` when the corpus has no such token (e.g. GPT-2), so the role is dropped.
``to_punct``
    attention to tokens made only of punctuation/symbol characters.
``to_rare``, ``argmax_rare``, ``rare_chance``
    attention to the rarest token of the sentence, the share of rows whose maximum is
    on it (Voita et al. 2019: 66% for their rare-word head), and that share for a
    head attending uniformly at random. Frequencies are counted in the analysed
    corpus itself (lower-cased token strings, or words at word level), not in the
    training data as Voita did; pass ``frequencies=`` to use another count. All tokens
    sharing the lowest frequency count as "the rarest" (ties are common in a small
    corpus; ``rare_chance`` says how much they help a random head).
``entropy``, ``entropy_ratio``, ``max_attention``
    row entropy in nats, its ratio to the entropy of a uniform row over the keys the
    row may see (``log n``, causal ``log(i+1)``), and the mean largest weight of a row
    ("broad" heads put ≤ 10% on any single word, Clark et al. 2019).
``duplicate``, ``induction`` (causal attention only, else ``NaN``)
    Olsson et al. (2022): mass on earlier occurrences of the query's own token, and on
    the tokens right *after* those occurrences, over the rows that have one.

At word level (``level="word"``) the same features are computed on Clark et al.'s
word-level maps (``AttentionMaps.word_level(keep_special=True)``): units are words and
special tokens, offsets count words.

Every example is processed as whole ``[layer, head, query, key]`` tensors; Python loops
run over examples and the five offsets, never over heads or tokens of a head.
"""

from __future__ import annotations

import functools
import logging
import unicodedata
from collections import Counter
from collections.abc import Sized
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional, Sequence

import numpy as np
import pandas as pd
import torch

from probe.errors import InputError, NotApplicable
from probe.analyses.common.accumulate import PerLayer

if TYPE_CHECKING:
    from typing import Self

    from probe.maps import AttentionMaps
    from probe.runs.streaming import BatchMeta
    from probe.store.directory import Store

log = logging.getLogger(__name__)

__all__ = [
    "FEATURES",
    "OFFSETS",
    "LEVELS",
    "head_features",
    "token_frequencies",
    "is_punctuation",
    "PunctuationShare",
    "HeadFeatureAccumulator",
    "example_values",
    "LayerwiseHeadFeatures",
]

OFFSETS = (-2, -1, 0, 1, 2)
OFFSET_NAMES = {-2: "prev2", -1: "prev", 0: "self", 1: "next", 2: "next2"}
LEVELS = ("token", "word")
FEATURES = (
    [OFFSET_NAMES[k] for k in OFFSETS]
    + [f"argmax_{OFFSET_NAMES[k]}" for k in OFFSETS]
    + [
        "positional_share",
        "positional_offset",
        "to_cls",
        "to_sep",
        "to_special",
        "to_punct",
        "to_rare",
        "argmax_rare",
        "rare_chance",
        "entropy",
        "entropy_ratio",
        "max_attention",
        "duplicate",
        "induction",
    ]
)
_MARKERS = ("##", "Ġ", "▁", "Ċ")


def is_punctuation(token: str) -> bool:
    """True when ``token`` (subword markers ``##``/``Ġ``/``▁`` stripped) is non-empty and
    made only of Unicode punctuation (P*) or symbol (S*) characters."""
    t = token
    for m in _MARKERS:
        t = t.replace(m, "")
    t = t.strip()
    return bool(t) and all(unicodedata.category(c)[0] in "PS" for c in t)


def _key(unit: str) -> str:
    return str(unit).lower()


def token_frequencies(source: Store | Iterable[AttentionMaps], level: str = "token") -> Counter:
    """Count lower-cased non-special tokens (or words) in a corpus.

    Args:
        source: a :class:`probe.store.directory.Store` (counted from its index, no tensor is read)
            or an iterable of :class:`AttentionMaps` (iterated once).
        level: ``"token"`` or ``"word"``.

    Returns:
        ``collections.Counter`` unit → count.
    """
    _check_level(level)
    counts: Counter = Counter()
    records = getattr(source, "records", None)
    if records is not None:
        for r in records:
            if level == "word":
                counts.update(_key(w) for w in r.get("words", ()))
            else:
                counts.update(_key(t) for t, s in zip(r["tokens"], r["special"]) if not s)
        return counts
    for m in source:
        if level == "word":
            counts.update(_key(w) for w in m.words)
        else:
            counts.update(_key(t) for t, s in zip(m.tokens, m.special_mask.tolist()) if not s)
    return counts


def _check_level(level: str) -> None:
    if level not in LEVELS:
        raise InputError(f"level must be one of {LEVELS}, got {level!r}")


def _units(maps, level: str):
    """(attention [L, H, n, n] float32, unit labels, special bool [n])."""
    if maps.kind == "cross":
        raise NotApplicable(
            "head roles are defined for self- and causal attention; got cross-attention "
            "(capture the encoder or decoder stack instead)"
        )
    if level == "token":
        return maps.attentions.float(), list(maps.tokens), maps.special_mask.clone()
    w = maps.word_level(keep_special=True)
    return w.attentions, list(w.units), w.is_special.clone()


class HeadFeatureAccumulator:
    """Streams over examples and accumulates the per-head sums behind :data:`FEATURES`.

    ``update(maps)`` adds one example; ``result()`` returns the tidy table. Memory is
    ``O(layers × heads)`` per feature, plus, when no frequencies are given, a small
    summary per example (``[layer, head, distinct units]`` ×2, float32) kept until ``result()``
    because the rarest unit is only known once the whole corpus was counted.
    """

    def __init__(
        self, level: str = "token", frequencies: Optional[Mapping[str, int]] = None, keep_examples: bool = False
    ):
        _check_level(level)
        #: with ``keep_examples``: per example, feature name -> ``(sum [L, H], rows)``, for
        #: intervals over examples (:func:`example_values`); without ``frequencies`` the
        #: rare-token entries are filled when the corpus was counted (:meth:`resolve`)
        self.examples: Optional[list] = [] if keep_examples else None
        #: with ``keep_examples``: each kept example's corpus index (``update(index=)``)
        self.example_ids: list = []
        self.level = level
        self.frequencies = None if frequencies is None else {_key(k): v for k, v in frequencies.items()}
        self._counts: Counter = Counter()
        self._sum: dict = {}
        self._n: dict = {}
        self._deferred: list = []
        self._deferred_at: list = []  # the position in ``examples`` of each deferred summary (-1: none kept)
        self.n_examples = 0
        self.layers: Optional[tuple] = None
        self.n_heads: Optional[int] = None
        self.kind: Optional[str] = None

    # ---- accumulation -------------------------------------------------------------
    def _add(self, name: str, total: torch.Tensor, count, at: int = -1) -> None:
        """Add ``total`` ([L, H], a sum over rows) and its number of rows (of the kept
        example at position ``at``, the last one by default)."""
        total = total.double()
        if self.examples is not None:
            self.examples[at][name] = (total, float(count))
        if name in self._sum:
            self._sum[name] += total
            self._n[name] += torch.as_tensor(count, dtype=torch.float64)
        else:
            self._sum[name] = total.clone()
            self._n[name] = torch.as_tensor(count, dtype=torch.float64).clone()

    def update(self, maps: AttentionMaps, index: Optional[int] = None) -> None:
        """Add one :class:`AttentionMaps` (``index``: its corpus index, kept with its
        values when the accumulator keeps examples; default: its order of arrival).

        Raises:
            InputError: cross-attention, or an example with other layers/heads/kind
                than the first one.
        """
        a, units, special = _units(maps, self.level)
        L, H, n, _ = a.shape
        if self.examples is not None:
            self.examples.append({})
            self.example_ids.append(len(self.example_ids) if index is None else int(index))
        if self.layers is None:
            self.layers, self.n_heads, self.kind = tuple(maps.layers), H, maps.kind
        elif tuple(maps.layers) != self.layers or H != self.n_heads or maps.kind != self.kind:
            raise InputError(
                f"example {self.n_examples} has layers {list(maps.layers)}, {H} heads, {maps.kind} "
                f"attention; earlier ones had layers {list(self.layers)}, {self.n_heads} heads, "
                f"{self.kind} attention: analyse one model's capture at a time"
            )
        self.n_examples += 1
        causal = maps.kind == "causal"
        q = ~special  # query rows that count
        nq = int(q.sum())
        if nq == 0 or n == 0:
            return
        qf = q.to(a.dtype)
        pos = torch.arange(n)

        # mean attention to relative offsets, and argmax offset shares
        am = a.argmax(-1)  # [L, H, n]
        rel = am - pos
        for k in OFFSETS:
            name = OFFSET_NAMES[k]
            inside = (pos + k >= 0) & (pos + k < n)
            valid = q & inside & ~special[(pos + k).clamp(0, n - 1)]
            if causal and k > 0:
                valid = torch.zeros_like(valid)
            nv = int(valid.sum())
            d = torch.diagonal(a, offset=k, dim1=-2, dim2=-1)  # [L, H, n-|k|]
            rows = torch.arange(max(0, n - abs(k))) + (abs(k) if k < 0 else 0)  # none when |k| ≥ n
            vmask = valid[rows].to(a.dtype) if nv else torch.zeros(len(rows))
            self._add(name, (d * vmask).sum(-1), nv)
            self._add(f"argmax_{name}", ((rel == k) & valid).sum(-1), nv)

        # special tokens: the first ([CLS]/BOS) and the others ([SEP]/EOS)
        cls = torch.zeros(n, dtype=torch.bool)
        if bool(special[0]):
            cls[0] = True
        sep = special & ~cls
        mass = lambda cols: (a[..., cols].sum(-1) * qf).sum(-1)  # noqa: E731  [L, H]
        zeros = torch.zeros(L, H)
        self._add("to_cls", mass(cls) if cls.any() else zeros, nq if cls.any() else 0)
        self._add("to_sep", mass(sep) if sep.any() else zeros, nq if sep.any() else 0)
        self._add("to_special", mass(special) if special.any() else zeros, nq if special.any() else 0)
        punct = torch.tensor([is_punctuation(u) and not s for u, s in zip(units, special.tolist())])
        self._add("to_punct", mass(punct) if punct.any() else zeros, nq)

        # entropy and peak weight
        ent = -(torch.special.xlogy(a, a)).sum(-1)  # [L, H, n]
        allowed = (pos + 1) if causal else torch.full((n,), n)
        rmask = q & (allowed > 1)
        log_allowed = torch.log(allowed.to(a.dtype).clamp(min=2))
        self._add("entropy", (ent * qf).sum(-1), nq)
        self._add("entropy_ratio", (ent / log_allowed * rmask.to(a.dtype)).sum(-1), int(rmask.sum()))
        self._add("max_attention", (a.max(-1).values * qf).sum(-1), nq)

        # per distinct unit: attention mass and argmax counts (for the rarest unit)
        keys = [_key(u) for u in units]
        distinct = sorted({k for k, s in zip(keys, special.tolist()) if not s})
        if distinct:
            unit_index = {k: i for i, k in enumerate(distinct)}
            onehot = torch.zeros(n, len(distinct))
            for t, (key, s) in enumerate(zip(keys, special.tolist())):
                if not s:
                    onehot[t, unit_index[key]] = 1.0
            unit_mass = ((a * qf[:, None]).sum(-2)) @ onehot  # [L, H, U]
            hit = onehot[am]  # [L, H, n, U]: the unit of each row's argmax
            unit_argmax = (hit * qf[:, None]).sum(-2)  # [L, H, U]
            unit_chance = (
                (onehot.sum(0) / n) * nq if not causal else ((onehot.cumsum(0) / allowed[:, None]) * qf[:, None]).sum(0)
            )  # [U]
            summary = (distinct, unit_mass, unit_argmax, unit_chance, nq)
            if self.frequencies is not None:
                self._resolve_rare(summary, self.frequencies)
            else:
                self._counts.update(k for k, s in zip(keys, special.tolist()) if not s)
                self._deferred.append((distinct, unit_mass, unit_argmax, unit_chance, nq))
                self._deferred_at.append(len(self.examples) - 1 if self.examples is not None else -1)

        # duplicate-token and induction scores (causal only)
        if causal:
            ids = (
                torch.tensor([unit_index.get(k, -1) if not s else -1 for k, s in zip(keys, special.tolist())])
                if distinct
                else torch.full((n,), -1)
            )
            same = (ids[:, None] == ids[None, :]) & (ids[:, None] >= 0) & (pos[None, :] < pos[:, None])
            same &= q[:, None]
            ind = torch.zeros_like(same)
            ind[:, 1:] = same[:, :-1]
            for name, m in (("duplicate", same), ("induction", ind)):
                has = m.any(-1)
                nh = int(has.sum())
                self._add(name, (a * m.to(a.dtype)).sum(-1).sum(-1) if nh else zeros, nh)

    # ---- pickling (a Ray worker hands its accumulators to the driver) ----------------
    def __getstate__(self) -> dict:
        """The state with the per-example rare-unit summaries packed into a few flat
        arrays: thousands of small tensors pickle ~100× slower than one large one (a
        block of 500 EWT sentences took ~1 s to pickle, the same again to load)."""
        state = dict(self.__dict__)
        deferred = state.pop("_deferred")
        examples = state.pop("examples")
        if examples:
            state["_packed_examples"] = _pack_examples(examples)
        else:
            state["examples"] = examples
        if deferred:
            sizes = [len(d[0]) for d in deferred]
            state["_packed"] = {
                "words": [w for d in deferred for w in d[0]],
                "sizes": sizes,
                "mass": torch.cat([d[1] for d in deferred], -1),
                "argmax": torch.cat([d[2] for d in deferred], -1),
                "chance": torch.cat([d[3] for d in deferred], -1),
                "nq": [d[4] for d in deferred],
            }
        return state

    def __setstate__(self, state: dict) -> None:
        packed = state.pop("_packed", None)
        packed_examples = state.pop("_packed_examples", None)
        self.__dict__.update(state)
        if packed_examples is not None:
            self.examples = _unpack_examples(packed_examples)
        self._deferred = []
        if packed:
            sizes, words, offset = packed["sizes"], packed["words"], 0
            for size, mass, argmax, chance, nq in zip(
                sizes,
                packed["mass"].split(sizes, -1),
                packed["argmax"].split(sizes, -1),
                packed["chance"].split(sizes, -1),
                packed["nq"],
            ):
                self._deferred.append((words[offset : offset + size], mass, argmax, chance, nq))
                offset += size

    def merge(self, other: "HeadFeatureAccumulator") -> "HeadFeatureAccumulator":
        """Add the sums of ``other`` (same level, frequencies, layers and heads) into
        this accumulator and return it (results as if one had seen both corpora).

        Raises:
            ValueError: another level or frequency table, or other layers/heads/kind.
        """
        if other.level != self.level or other.frequencies != self.frequencies:
            raise ValueError("cannot merge head features of another level or frequency table")
        if other.layers is None:
            return self
        if self.layers is None:
            self.layers, self.n_heads, self.kind = other.layers, other.n_heads, other.kind
        elif (other.layers, other.n_heads, other.kind) != (self.layers, self.n_heads, self.kind):
            raise ValueError(
                f"cannot merge features of layers {list(other.layers)} × {other.n_heads} heads "
                f"into layers {list(self.layers)} × {self.n_heads}: one model's capture at a time"
            )
        if (self.examples is None) != (other.examples is None):
            raise ValueError("cannot merge an accumulator that keeps examples with one that does not")
        offset = len(self.examples) if self.examples is not None else 0
        kept, self.examples = self.examples, None  # the other's sums are not an example of this one
        for name, total in other._sum.items():
            self._add(name, total, other._n[name])
        self.examples = kept
        if self.examples is not None and other.examples is not None:
            self.examples.extend(other.examples)
            self.example_ids.extend(other.example_ids)
        self._counts.update(other._counts)
        self._deferred.extend(other._deferred)
        self._deferred_at.extend(at + offset if at >= 0 else -1 for at in other._deferred_at)
        self.n_examples += other.n_examples
        return self

    def _resolve_rare(self, summary, freqs, at: int = -1) -> None:
        distinct, unit_mass, unit_argmax, unit_chance, nq = summary
        f = torch.tensor([freqs.get(k, 0) for k in distinct], dtype=torch.float64)
        rare = (f == f.min()).to(torch.float64)  # float64 sums: the same to 1e-15 however the corpus was split
        self._add("to_rare", unit_mass.double() @ rare, nq, at)
        self._add("argmax_rare", unit_argmax.double() @ rare, nq, at)
        self._add("rare_chance", torch.full(unit_mass.shape[:2], float(unit_chance.double() @ rare)), nq, at)

    def resolve(self) -> None:
        """Resolve the rare-token features deferred until the corpus was counted (called
        by :meth:`result` and :func:`example_values`; a no-op once done)."""
        if self._deferred:
            freqs = self._counts
            for s, at in zip(self._deferred, self._deferred_at):
                self._resolve_rare(s, freqs, at)
            self._deferred, self._deferred_at = [], []

    # ---- results --------------------------------------------------------------
    def result(self) -> pd.DataFrame:
        """The tidy table: one row per (layer, head), columns ``layer, head,
        n_examples, n_rows`` and every name of :data:`FEATURES` (``NaN`` where a feature
        has no rows, e.g. ``to_cls`` without special tokens).

        Raises:
            ValueError: no example was added.
        """
        if self.layers is None:
            raise InputError("no examples: give at least one captured example")
        self.resolve()
        assert self.layers is not None and self.n_heads is not None  # set by the first example (checked above)
        L, H = len(self.layers), self.n_heads
        out: dict[str, Any] = {
            "layer": np.repeat(np.array(self.layers), H),
            "head": np.tile(np.arange(H), L),
            "n_examples": self.n_examples,
        }
        for name in FEATURES:
            if name in ("positional_share", "positional_offset"):
                continue
            if name in self._sum:
                n = self._n[name]
                val = torch.where(n > 0, self._sum[name] / n.clamp(min=1), torch.tensor(float("nan")))
                val = val.expand(L, H) if val.dim() < 2 else val
            else:
                val = torch.full((L, H), float("nan"))
            out[name] = val.reshape(-1).numpy()
        out["n_rows"] = self._n["self"].expand(L, H).reshape(-1).numpy().astype(int) if "self" in self._n else 0
        shares = np.stack([out[f"argmax_{OFFSET_NAMES[k]}"] for k in OFFSETS], 1)
        filled = np.nan_to_num(shares, nan=-1.0)
        best = filled.argmax(1)
        out["positional_share"] = np.where(filled.max(1) >= 0, filled.max(1), np.nan)
        out["positional_offset"] = np.array(OFFSETS)[best]
        cols = ["layer", "head", "n_examples", "n_rows"] + list(FEATURES)
        return pd.DataFrame(out)[cols]


def _pack_examples(examples: list) -> dict:
    """Per-example ``{name: (sum [L, H], rows)}`` as a few flat arrays (for pickling)."""
    names = sorted({name for ex in examples for name in ex})
    first = next((ex[name][0] for ex in examples for name in ex), None)
    shape = tuple(first.shape) if first is not None else (0, 0)
    totals = torch.zeros((len(examples), len(names)) + shape, dtype=torch.float64)
    rows = np.zeros((len(examples), len(names)))
    has = np.zeros((len(examples), len(names)), dtype=bool)
    for e, ex in enumerate(examples):
        for k, name in enumerate(names):
            if name in ex:
                total, n = ex[name]
                totals[e, k] = total.expand(shape)
                rows[e, k], has[e, k] = n, True
    return {"names": names, "totals": totals, "rows": rows, "has": has}


def _unpack_examples(packed: dict) -> list:
    names, totals, rows, has = packed["names"], packed["totals"], packed["rows"], packed["has"]
    return [
        {name: (totals[e, k], float(rows[e, k])) for k, name in enumerate(names) if has[e, k]} for e in range(len(has))
    ]


def example_values(acc: HeadFeatureAccumulator, names: Sequence[str]) -> tuple:
    """Per-example features from an accumulator built with ``keep_examples=True``.

    Returns:
        ``(values [E, L·H, F], rows [E, F])``: each example's mean of every feature in
        ``names`` (``NaN`` where the example has no row for it) and its number of rows.
    """
    if acc.examples is None:
        raise InputError("build the accumulator with keep_examples=True")
    acc.resolve()
    assert acc.layers is not None and acc.n_heads is not None  # set by the first example (checked above)
    L, H = len(acc.layers), acc.n_heads
    E, F = len(acc.examples), len(names)
    values = np.full((E, L * H, F), np.nan)
    rows = np.zeros((E, F))
    for e, ex in enumerate(acc.examples):
        for f, name in enumerate(names):
            if name not in ex:
                continue
            total, n = ex[name]
            rows[e, f] = n
            if n > 0:
                values[e, :, f] = (total.expand(L, H) / n).reshape(-1).numpy()
    return values, rows


class LayerwiseHeadFeatures(PerLayer):
    """:class:`HeadFeatureAccumulator` fed one layer at a time (the streaming protocol of
    :mod:`probe.analyses.common.accumulate`); ``result()`` equals :func:`head_features`
    of the same corpus (to float rounding)."""

    def __init__(
        self, level: str = "token", frequencies: Optional[Mapping[str, int]] = None, keep_examples: bool = False
    ):
        _check_level(level)
        super().__init__(
            functools.partial(HeadFeatureAccumulator, level=level, frequencies=frequencies, keep_examples=keep_examples)
        )
        self.whole: Optional[HeadFeatureAccumulator] = None  # whole examples (update_examples)

    def inner_update(self, acc: HeadFeatureAccumulator, maps: AttentionMaps, meta: BatchMeta, position: int) -> None:
        """Add one single-layer example (``[1, head, n, n]``) under its corpus index."""
        acc.update(maps, index=meta.indices[position])

    def update_examples(self, maps: Sequence, meta: Any) -> None:
        """Whole examples (``[L, H, n, n]``, held maps: :func:`probe.runs.streaming.feed_maps`)
        at once, each in one pass over its layers; ``result()`` is the same table."""
        if self.whole is None:
            self.whole = self.make()
        for index, m in zip(meta.indices, maps):
            self.whole.update(m, index=index)

    def merge(self, other: Self) -> Self:
        """Add ``other``'s sums (per layer and whole examples) to these; returns self."""
        super().merge(other)
        if other.whole is not None:
            self.whole = other.whole if self.whole is None else self.whole.merge(other.whole)
        return self

    @property
    def n_examples(self) -> int:
        if self.whole is not None:
            return self.whole.n_examples
        return next(iter(self.inner.values())).n_examples if self.inner else 0

    def _fed_one_way(self) -> None:
        if self.whole is not None and self.inner:
            raise ValueError("LayerwiseHeadFeatures was fed both by layer and whole examples: feed one way")

    def shape(self) -> tuple:
        """``(layers, n_heads)`` of the captured maps (``((), 0)`` before any example)."""
        if self.whole is not None:
            return tuple(self.whole.layers or ()), int(self.whole.n_heads or 0)
        if not self.inner:
            return (), 0
        return self.layers, int(next(iter(self.inner.values())).n_heads or 0)

    def example_values(self, names: Sequence[str]) -> tuple:
        """Per-example features of every layer (built with ``keep_examples=True``).

        Returns:
            ``(values [E, L·H, F], rows [E, F], ids [E])``: examples in corpus order
            (``ids``: their indices), heads layer-major as :func:`example_values` of
            whole maps.
        """
        self._fed_one_way()
        accs = [self.whole] if self.whole is not None else [self.inner[layer] for layer in self.layers]
        if not accs:
            raise InputError("no examples: give at least one captured example")
        parts = []
        for acc in accs:  # the whole examples' accumulator, or one per layer
            values, rows = example_values(acc, names)
            order = np.argsort(np.asarray(acc.example_ids), kind="stable")
            parts.append((values[order], rows[order], np.asarray(acc.example_ids)[order]))
        values = np.concatenate([p[0] for p in parts], axis=1)
        return values, parts[0][1], parts[0][2]

    def result(self) -> pd.DataFrame:
        self._fed_one_way()
        if self.whole is not None:
            return self.whole.result()
        tables = list(self.results().values())
        return pd.concat(tables, ignore_index=True)


def head_features(
    source: Iterable, level: str = "token", frequencies: Optional[Mapping[str, int]] = None, progress: bool = False
) -> pd.DataFrame:
    """Per-head features (:data:`FEATURES`) of a corpus of captured attention.

    Args:
        source: a :class:`probe.store.directory.Store` or any iterable of
            :class:`probe.maps.AttentionMaps` of one model (streamed, read once).
        level: ``"token"`` or ``"word"`` (Clark et al. 2019's word-level maps).
        frequencies: unit → count for the rare-word features; default: counted in
            ``source`` (from a Store's index before the pass, so memory stays bounded;
            from the stream itself otherwise).
        progress: show a tqdm bar.

    Returns:
        ``DataFrame`` with ``layer, head, n_examples, n_rows`` and one column per
        feature (see the module docstring), one row per captured (layer, head).

    Raises:
        ValueError: unknown level, no examples, cross-attention, mixed captures.
    """
    _check_level(level)
    if frequencies is None and getattr(source, "records", None) is not None:
        frequencies = token_frequencies(source, level)
    acc = HeadFeatureAccumulator(level=level, frequencies=frequencies)
    it = source
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(
            source, total=len(source) if isinstance(source, Sized) else None, unit="ex", desc=f"head features ({level})"
        )
    for maps in it:
        acc.update(maps)
    return acc.result()


def layer_summary(features: pd.DataFrame, columns: Sequence[str] = ("to_cls", "to_sep", "to_punct")) -> pd.DataFrame:
    """Mean over heads, per layer, of some feature columns (Clark et al. 2019, Fig. 2:
    the share of attention to [CLS], [SEP] and punctuation per layer).

    Raises:
        ValueError: a column missing from ``features``.
    """
    missing = [c for c in ("layer", *columns) if c not in features.columns]
    if missing:
        raise InputError(f"feature table lacks columns {missing}; compute it with head_features()")
    return features.groupby("layer", as_index=False)[list(columns)].mean()


class PunctuationShare:
    """The share of punctuation among the non-special tokens of a corpus: what a random
    head puts on punctuation (the chance rule of the roles' ``to_punct``), summed as the
    streamed maps pass (each example counted once, at its first streamed layer)."""

    def __init__(self) -> None:
        self.words = 0
        self.punct = 0
        self.seen: set = set()

    def update(self, layer: int, maps: Sequence, meta: Any) -> None:
        for index, m in zip(meta.indices, maps):
            if int(index) in self.seen:
                continue
            self.seen.add(int(index))
            for t, sp in zip(m.tokens, m.special_mask.tolist()):
                if not sp:
                    self.words += 1
                    self.punct += is_punctuation(str(t))

    def merge(self, other: "PunctuationShare") -> "PunctuationShare":
        new = other.seen - self.seen
        if new == other.seen:
            self.words += other.words
            self.punct += other.punct
            self.seen |= other.seen
            return self
        raise ValueError("PunctuationShare: two blocks share examples")  # blocks are disjoint by construction

    def result(self) -> float:
        return self.punct / max(self.words, 1)
