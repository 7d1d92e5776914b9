"""The *structure* claim: the head's attention follows a syntactic relation better than
the best positional baseline (Clark et al. 2019; Voita et al. 2019's 10-point margin).

For every head, relation and direction with at least :data:`.thresholds.STRUCTURE_MIN_COUNT`
instances: the accuracy of the head's word-level argmax (:mod:`probe.analyses.structure.syntax`)
minus the best fixed offset's accuracy for that relation. The interval is a percentile
bootstrap over *sentences* (the baseline's best offset is re-chosen in each resample);
the one-sided p-value of ``margin > 0`` uses the bootstrap standard error, and
Benjamini–Hochberg runs across every head × relation × direction tested. A head holds the
claim when a relation is significant after BH *and* its margin is at least
:data:`.thresholds.STRUCTURE_MARGIN`; the claim names the largest such margin.
"""

from __future__ import annotations

from typing import Any

import functools
from typing import Optional, Sequence

import numpy as np

from probe.analyses.common.bootstrap import resample_counts
from probe.analyses.structure.streaming import GraphsByIndex, SkippingPerLayer
from probe.analyses.structure.syntax import (
    DIRECTIONS,
    NOT_APPLICABLE_CAUSAL,
    OFFSETS,
    argmax_predictions,
    reachable_counts,
    reachable_offsets,
)
from probe.analyses.structure.word_graph import AlignmentError, word_graph

from . import thresholds as T
from probe.errors import NotApplicable

from .claim import Claim, not_tested
from .protocol import ClaimInputs, ClaimTest
from .statistics import benjamini_hochberg, detectable_from_se, se_from_interval


def sentence_record(g: Any) -> Optional[tuple]:
    """One sentence's evidence from its :class:`probe.analyses.structure.word_graph.WordGraph`
    (any layers): ``(hits bool [2, L·H, n], relations (n names), offset_hits bool [n, O],
    left bool [n], causal)`` over its ``n`` non-root words (each direction's argmax is the
    gold head; each fixed offset is; the gold head lies left of the word; the maps are a
    causal model's), or ``None`` when it has no non-root word."""
    L, H = g.attention.shape[:2]
    keep = g.heads >= 0
    if not bool(keep.any()):
        return None
    pred = argmax_predictions(g.attention)[..., keep].reshape(2, L * H, -1).numpy()
    gold = g.heads[keep].numpy()
    pos = np.nonzero(keep.numpy())[0]
    rels = tuple(r for r, k in zip(g.deprels, keep.tolist()) if k)
    off = (pos[:, None] + np.asarray(OFFSETS)[None, :]) == gold[:, None]
    return pred == gold[None, None, :], rels, off, gold < pos, bool(getattr(g, "causal", False))


def counts_from_records(records: Sequence, layers: Sequence[int], n_heads: int) -> dict:
    """Per-sentence sums from :func:`sentence_record` s (corpus order; ``None`` ones left
    out): ``hits [S, 2, L·H, R]``, ``counts [S, R]``, ``offset_hits [S, R, O]``,
    ``relations`` (in order of first appearance), ``layers``, ``n_heads``.

    Raises:
        NotApplicable: no sentence with a non-root word.
    """
    per = [r for r in records if r is not None]
    if not per:
        raise NotApplicable("no dependency to evaluate: no sentence with a non-root word")
    vocab: dict[str, int] = {}
    for rec in per:
        for r in rec[1]:
            vocab.setdefault(r, len(vocab))
    S, R, O = len(per), len(vocab), len(OFFSETS)
    LH = per[0][0].shape[1]
    hits = np.zeros((S, 2, LH, R))
    counts = np.zeros((S, R))
    offs = np.zeros((S, R, O))
    left = np.zeros((S, R))
    causal = bool(per[0][4]) if len(per[0]) > 4 else False
    for s, (hit, rels, off, *rest) in enumerate(per):
        onehot = np.eye(R)[[vocab[r] for r in rels]]  # [n, R]
        hits[s] = hit.astype(np.float64) @ onehot
        counts[s] = onehot.sum(0)
        offs[s] = onehot.T @ off.astype(np.float64)
        if rest:
            left[s] = rest[0].astype(np.float64) @ onehot
    reach = np.stack([reachable_counts(counts[s], left[s], causal) for s in range(S)])  # [S, 2, R]
    return {
        "hits": hits,
        "counts": counts,
        "offset_hits": offs,
        "reach": reach,
        "causal": causal,
        "relations": tuple(vocab),
        "layers": tuple(layers),
        "n_heads": int(n_heads),
    }


def sentence_counts(graphs: Any) -> dict:
    """Per-sentence sums (:func:`counts_from_records`) from
    :class:`probe.analyses.structure.word_graph.WordGraph` s of every layer."""
    graphs = list(graphs)
    if not graphs:
        raise NotApplicable("no dependency to evaluate: no sentence with a non-root word")
    g = graphs[-1]
    return counts_from_records([sentence_record(g) for g in graphs], g.layers, g.attention.shape[1])


class StructureCounts(SkippingPerLayer):
    """The streaming accumulator of the structure claims' evidence (the protocol of
    :mod:`probe.analyses.common.accumulate`): each sentence's :func:`sentence_record`,
    layer by layer, joined at the end. ``result()`` is ``(counts, n_skipped)`` with
    ``counts`` as :func:`sentence_counts` of the whole word graphs (``None``: no
    sentence aligned). Memory: ``2 × L·H`` booleans per word of the corpus.

    Args:
        sentences: the treebank sentence of each corpus index, when the streamed items
            are not the sentences themselves (``None``: ``meta.items``).
    """

    def __init__(self, sentences: Optional[Sequence] = None) -> None:
        super().__init__(functools.partial(GraphsByIndex, sentence_record))
        self.sentences = sentences
        self.whole_layers: tuple = ()  # the layers of the whole examples (update_examples)

    def _sentence(self, meta, position: int):
        index = meta.indices[position]
        return self.sentences[index] if self.sentences is not None else meta.items[position]

    def inner_update(self, acc: Any, maps: Any, meta: Any, position: int) -> None:
        try:
            acc.update(word_graph(maps, self._sentence(meta, position), index=meta.indices[position]))
        except AlignmentError as exc:
            self._skip(meta, position, maps.layers[0], exc)

    def whole_update(self, acc: Any, maps: Any, meta: Any, position: int) -> None:
        """A whole example (``[L, H, n, n]``): one word graph with every layer."""
        self.whole_layers = tuple(maps.layers)
        self.inner_update(acc, maps, meta, position)

    def merge(self, other: Any) -> Any:
        super().merge(other)
        self.whole_layers = self.whole_layers or other.whole_layers
        return self

    def result(self) -> tuple:
        """``(counts, n_skipped)``; ``counts`` is ``None`` when no sentence aligned.

        Raises:
            NotApplicable: no aligned sentence has a non-root word.
        """
        if self.whole is not None and self.whole.graphs:
            records = [self.whole.graphs[i] for i in sorted(self.whole.graphs)]
            if not any(r is not None for r in records):
                raise NotApplicable("no dependency to evaluate: no sentence with a non-root word")
            first = next(r for r in records if r is not None)
            L = len(self.whole_layers)
            return counts_from_records(records, self.whole_layers, first[0].shape[1] // L), len(self.skipped)
        if not self.inner:
            return None, len(self.skipped)
        parts = self.results()
        layers = self.layers
        records = []
        for index in sorted(parts[layers[0]]):
            pieces = [parts[layer][index] for layer in layers]
            if pieces[0] is None:
                records.append(None)
                continue
            hits = np.concatenate([p[0] for p in pieces], axis=1)  # [2, L·H, n], layer-major
            records.append((hits, *pieces[0][1:]))
        if not any(r is not None for r in records):
            raise NotApplicable("no dependency to evaluate: no sentence with a non-root word")
        H = next(r for r in records if r is not None)[0].shape[1] // len(layers)
        return counts_from_records(records, layers, H), len(self.skipped)


def relation_margins(sc: dict, n_boot: int = T.N_BOOT, confidence: float = T.CONFIDENCE, seed: int = 0) -> dict:
    """Margins over the best offset with bootstrap intervals and p-values for the relations
    and directions with at least :data:`.thresholds.STRUCTURE_MIN_COUNT` instances (and not
    excluded). On a causal model each direction counts only the instances it can attend,
    and its baseline only the offsets on that side (:mod:`probe.analyses.structure.syntax`):
    a relation and direction a causal model cannot attend is not tested, never a miss.

    Returns dict of arrays over tested ``(direction, head index, relation)``: ``margin,
    low, high, p, accuracy, baseline, count`` and the index arrays ``d, j, r``."""
    from scipy.stats import norm

    hits, counts, offs = sc["hits"], sc["counts"], sc["offset_hits"]
    reach = sc.get("reach")
    reach = np.stack([counts, counts], 1) if reach is None else reach  # [S, 2, R]
    causal = bool(sc.get("causal", False))
    total = reach.sum(0)  # [2, R]
    named = [
        r for r, name in enumerate(sc["relations"]) if name.split(":")[0] not in T.STRUCTURE_EXCLUDED
    ]  # fmt: skip
    S = hits.shape[0]
    C = resample_counts(S, n_boot, seed).astype(np.float64)  # [B, S]
    out = {k: [] for k in ("margin", "low", "high", "p", "accuracy", "baseline", "count", "d", "j", "r")}
    a = (1 - confidence) / 2
    for r in named:
        for d in range(len(DIRECTIONS)):
            n = total[d, r]
            if n < T.STRUCTURE_MIN_COUNT:  # too few (or, on a causal model, none it can attend)
                continue
            o = reachable_offsets(sc.get("offsets", OFFSETS), d, causal)
            base = offs[:, r][:, o].sum(0).max() / n
            acc = hits[:, d, :, r].sum(0) / n  # [LH]
            nb = np.maximum(C @ reach[:, d, r], 1)  # [B]
            base_b = (C @ offs[:, r][:, o]).max(1) / nb  # [B]
            acc_b = (C @ hits[:, d, :, r]) / nb[:, None]  # [B, LH]
            margin_b = acc_b - base_b[:, None]
            margin = acc - base
            se = margin_b.std(0)
            with np.errstate(divide="ignore", invalid="ignore"):
                p = np.where(se > 0, norm.sf(margin / np.where(se > 0, se, 1)), np.where(margin > 0, 0.0, 1.0))
            low, high = np.quantile(margin_b, [a, 1 - a], axis=0)
            k = margin.size
            for name, v in (
                ("margin", margin),
                ("low", low),
                ("high", high),
                ("p", p),
                ("accuracy", acc),
                ("baseline", np.full(k, base)),
                ("count", np.full(k, n)),
                ("d", np.full(k, d)),
                ("j", np.arange(k)),
                ("r", np.full(k, r)),
            ):
                out[name].append(v)
    return {k: (np.concatenate(v) if v else np.zeros(0)) for k, v in out.items()}


def structure_claims(graphs: Any, n_sentences_skipped: int = 0) -> tuple:
    """Structure claims of every head from treebank word graphs, or from their
    per-sentence sums (:func:`sentence_counts`, streamed by :class:`StructureCounts`).

    Returns:
        ``(claims, table)``: ``{(layer, head): Claim}`` and the tested rows as a tidy table
        (``layer, head, relation, direction, accuracy, baseline, margin, ci_low, ci_high,
        p, significant, count``).
    """
    import pandas as pd

    sc = graphs if isinstance(graphs, dict) else sentence_counts(graphs)
    L, H = len(sc["layers"]), sc["n_heads"]
    S = sc["hits"].shape[0]
    heads = [(sc["layers"][j // H], j % H) for j in range(L * H)]
    if S < T.STRUCTURE_MIN_SENTENCES:
        why = f"{S} sentences < {T.STRUCTURE_MIN_SENTENCES}"
        return {
            k: Claim("structure", "not enough evidence", count=S, threshold="structure_min_sentences", reason=why)
            for k in heads
        }, pd.DataFrame()
    m = relation_margins(sc)
    sig = benjamini_hochberg(m["p"], T.FDR) if len(m["p"]) else np.zeros(0, bool)
    table = pd.DataFrame(
        {
            "layer": [heads[j][0] for j in m["j"].astype(int)],
            "head": [heads[j][1] for j in m["j"].astype(int)],
            "relation": [sc["relations"][r] for r in m["r"].astype(int)],
            "direction": [DIRECTIONS[d] for d in m["d"].astype(int)],
            "accuracy": m["accuracy"],
            "baseline": m["baseline"],
            "margin": m["margin"],
            "ci_low": m["low"],
            "ci_high": m["high"],
            "p": m["p"],
            "significant": sig,
            "count": m["count"].astype(int),
        }
    )
    most = int(sc["counts"].sum(0).max()) if sc["counts"].size else 0
    blocked = causal_blocked(sc)
    claims = {}
    for key in heads:
        t = table[(table["layer"] == key[0]) & (table["head"] == key[1])]
        if t.empty:
            claims[key] = Claim(
                "structure",
                "not enough evidence",
                count=most,
                threshold="structure_min_count",
                reason=f"no relation with ≥ {T.STRUCTURE_MIN_COUNT} instances (most: {most})",
            )
            continue
        ok = t[t["significant"] & (t["margin"] >= T.STRUCTURE_MARGIN)]
        best = (ok if len(ok) else t).sort_values(["margin", "count"], ascending=False).iloc[0]
        status = "holds" if len(ok) else "does not hold"
        # power: the smallest margin this many sentences could have shown (bootstrap SE from the interval)
        se = se_from_interval(float(best["ci_low"]), float(best["ci_high"]), T.CONFIDENCE)
        detectable = detectable_from_se(se, T.STRUCTURE_MARGIN, q=T.FDR, power=T.POWER)
        what = f"{best['relation']} ({best['direction'].replace('_', ' ')})"
        claims[key] = Claim(
            "structure",
            status,
            statement=what,
            effect=float(best["margin"]),
            ci_low=float(best["ci_low"]),
            ci_high=float(best["ci_high"]),
            count=int(best["count"]),
            null=float(best["baseline"]),
            unit="accuracy above the best offset",
            threshold="structure_margin",
            reason=(
                f"{best['accuracy']:.0%} vs {best['baseline']:.0%} best offset over {int(best['count'])} "
                f"instances in {S} sentences" + (f"; {NOT_APPLICABLE_CAUSAL}: {', '.join(blocked)}" if blocked else "")
            ),
            extra={
                "accuracy": float(best["accuracy"]),
                "p": float(best["p"]),
                "bh_significant": bool(best["significant"]),
                "relations_tested": int(len(t)),
                "sentences": S,
                "sentences_skipped": int(n_sentences_skipped),
                **({"not_applicable_causal": blocked} if blocked else {}),
                **({"detectable": detectable} if status == "does not hold" else {}),
            },
        )
    return claims, table


def causal_blocked(sc: dict) -> list:
    """``relation (direction)`` of each relation with enough instances that a causal model
    cannot attend in that direction (every instance's head on the unreachable side); ``[]``
    on a bidirectional model."""
    if not sc.get("causal") or "reach" not in sc:
        return []
    total, reach = sc["counts"].sum(0), sc["reach"].sum(0)
    return [
        f"{name} ({DIRECTIONS[d].replace('_', ' ')})"
        for r, name in enumerate(sc["relations"])
        for d in range(len(DIRECTIONS))
        if total[r] >= T.STRUCTURE_MIN_COUNT and reach[d, r] == 0 and name.split(":")[0] not in T.STRUCTURE_EXCLUDED
    ]


def no_treebank(heads: Any, reason: str) -> dict:
    return {k: not_tested("structure", reason) for k in heads}


def structure_kind(inputs: ClaimInputs) -> dict:
    """The structure claims from the filled structure accumulator (``inputs.evidence``), its
    evidence table into ``inputs.tables``; *not tested* without dependency annotation or
    where no sentence aligned with its words."""
    acc = inputs.evidence.get("structure")
    if acc is None:
        return no_treebank(inputs.heads, "no dependency annotation (give a treebank with --conllu)")
    counts, n_skipped = acc.result()
    if counts is None:
        return no_treebank(inputs.heads, "no sentence aligned with its words")
    claims, table = structure_claims(counts, n_sentences_skipped=n_skipped)
    if table is not None and len(table):
        inputs.tables["structure"] = table
    return claims


#: this module's claim kind (:mod:`.protocol`)
CLAIMS = (
    ClaimTest(
        "structure",
        "Structure",
        "it finds a dependency relation better than the best fixed offset",
        structure_kind,
        order=20,
    ),
)
