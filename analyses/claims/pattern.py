"""The *pattern* claim: what a head attends to, as a profile of shares.

Per head, over all non-special query rows of the corpus (features of
:mod:`probe.analyses.patterns.role_features`): the shares of attention on the previous /
next token, itself, the first special token ([CLS]/BOS), the other special tokens
([SEP]/EOS), punctuation, the rarest token, and for causal models the induction and
duplicate-token targets (Olsson et al. 2022); with the entropy ratio (broad attention).

A role is claimed only when a rule of :mod:`.thresholds` clears its threshold (Voita et
al. 2019; Clark et al. 2019; Olsson et al. 2022); otherwise the claim *does not hold* and
states the two largest components ("43% [CLS], 31% next token"). Each share comes with a
bootstrap interval over examples (row-weighted means of per-example shares).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np
import pandas as pd

from probe.analyses.common.bootstrap import resample_counts
from probe.analyses.patterns.role_features import LayerwiseHeadFeatures, PunctuationShare
from probe.runs.streaming import feed_maps

from probe.analyses.patterns.vocabulary import COMPONENTS, choose_rule, nearest_rule, profile_words
from probe.analyses.patterns.vocabulary import RULES as VOCAB_RULES

from . import thresholds as T
from probe.errors import NotApplicable

from .claim import Claim
from .protocol import ClaimInputs, ClaimTest
from .statistics import detectable_from_se, se_from_interval

#: the role rules' thresholds (:data:`probe.analyses.patterns.vocabulary.RULES`, the ones ``probe roles`` applies)
THRESHOLDS = {
    "induction": T.INDUCTION,
    "duplicate": T.DUPLICATE,
    "positional": T.POSITIONAL,
    "rare": T.RARE,
    "special": T.SPECIAL,
    "punctuation": T.PUNCTUATION,
    "broad_entropy_ratio": T.BROAD_ENTROPY,
}
RULES = tuple((role, feat, key, THRESHOLDS[key]) for role, feat, key in VOCAB_RULES)
FEATURES = tuple(dict.fromkeys(list(COMPONENTS) + [r[1] for r in RULES] + ["rare_chance", "max_attention"]))


@dataclass(frozen=True)
class PatternEvidence:
    """What the pattern claims read, as per-example sums (one streamed pass suffices).

    Attributes:
        values: ``[E, L·H, F]`` each example's mean of every feature of :data:`FEATURES`
            (``NaN`` where the example has no row for it); heads layer-major.
        rows: ``[E, F]`` query rows behind each example's feature.
        layers: the captured layers; ``n_heads``: heads per layer.
        punct_chance: share of punctuation among the corpus's non-special tokens.
        special_names: ``(first, other)`` special tokens' text (``[CLS]``, ``[SEP]``).
    """

    values: np.ndarray
    rows: np.ndarray
    layers: tuple
    n_heads: int
    punct_chance: float
    special_names: tuple


class PatternFeatures:
    """The accumulator of :class:`PatternEvidence` (the protocol of
    :mod:`probe.analyses.common.accumulate`): head features of every example (the rarest
    token resolved once the whole corpus was counted), the punctuation share and the
    first example's special tokens. Fed layer by layer by a streamed run
    (``update``), or whole examples at once from held maps (``update_examples``, what
    :func:`probe.runs.streaming.feed_maps` calls): the same numbers either way
    (tests/test_report_engine.py). Memory: ``E × L·H × F`` float64 (EWT dev's 2,001
    sentences: 20 MB).
    """

    def __init__(
        self, features: Optional[LayerwiseHeadFeatures] = None, punct: Optional[PunctuationShare] = None
    ) -> None:
        """``features`` and ``punct``: token features (kept per example) and the punctuation
        share another accumulator already summed over the same examples (the roles section's,
        :func:`probe.app.registry.analyses.claims.summed_by_roles`), taken as they are: the
        updates then only note the first example's special tokens."""
        self.shared = features is not None and punct is not None
        if features is not None and punct is not None:
            self.features, self.punct = features, punct
        else:
            self.features, self.punct = LayerwiseHeadFeatures("token", keep_examples=True), PunctuationShare()
        self.first: Optional[tuple] = None  # (corpus index, special names)
        self.not_applicable = ""  # why the maps have no pattern features (cross-attention), said by result()

    def _first(self, meta, maps) -> None:
        for index, m in zip(meta.indices, maps):
            if self.first is None or index < self.first[0]:
                self.first = (int(index), _special_names(m))

    def update(self, layer: int, maps: Sequence, meta: Any) -> None:
        """One layer of a batch (single-layer maps ``[1, H, n, n]``)."""
        if self.shared:
            self._first(meta, maps)
            return
        try:
            self.features.update(layer, maps, meta)
        except NotApplicable as exc:  # the other claims still run; this one says why at result()
            self.not_applicable = exc.reason
            return
        self.punct.update(layer, maps, meta)
        self._first(meta, maps)

    def update_examples(self, maps: Sequence, meta: Any) -> None:
        """Whole examples (``[L, H, n, n]``) of a batch."""
        if self.shared:
            self._first(meta, maps)
            return
        try:
            self.features.update_examples(maps, meta)
        except NotApplicable as exc:
            self.not_applicable = exc.reason
            return
        self.punct.update(meta.first_layer, maps, meta)
        self._first(meta, maps)

    def merge(self, other: "PatternFeatures") -> "PatternFeatures":
        self.features.merge(other.features)
        self.punct.merge(other.punct)
        if other.first is not None and (self.first is None or other.first[0] < self.first[0]):
            self.first = other.first
        self.not_applicable = self.not_applicable or other.not_applicable
        return self

    def result(self) -> PatternEvidence:
        """Raises: NotApplicable: no example was added, or the maps have no pattern features."""
        if self.not_applicable:
            raise NotApplicable(self.not_applicable)
        if self.first is None:
            raise NotApplicable("no examples to measure attention patterns on")
        values, rows, _ = self.features.example_values(FEATURES)
        layers, n_heads = self.features.shape()
        return PatternEvidence(
            values=values,
            rows=rows,
            layers=layers,
            n_heads=n_heads,
            punct_chance=self.punct.result(),
            special_names=self.first[1],
        )


def pattern_evidence(maps: Any) -> PatternEvidence:
    """:class:`PatternEvidence` of held maps (a list of :class:`probe.maps.AttentionMaps`
    ``[L, H, n, n]``, corpus order), through the accumulator a streamed run fills."""
    if not maps:
        raise NotApplicable("no examples to measure attention patterns on")
    (acc,) = feed_maps([PatternFeatures()], maps)
    return acc.result()


def weighted_shares(
    values: np.ndarray, weights: np.ndarray, n_boot: int = T.N_BOOT, confidence: float = T.CONFIDENCE, seed: int = 0
) -> tuple:
    """Row-weighted means over examples with percentile bootstrap intervals.

    Args:
        values: ``[E, ...]`` per-example values (NaN: no row in that example).
        weights: ``[E]`` rows per example, or ``[E, 1, F]`` rows per example and feature.

    Returns:
        ``(mean, low, high)`` each ``values.shape[1:]``.
    """
    E = values.shape[0]
    flat = values.reshape(E, -1)
    w = np.broadcast_to(
        weights if weights.ndim == values.ndim else weights.reshape((E,) + (1,) * (values.ndim - 1)), values.shape
    ).reshape(E, -1) * ~np.isnan(flat)
    v = np.nan_to_num(flat)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = (w * v).sum(0) / w.sum(0)
        counts = resample_counts(E, n_boot, seed).astype(np.float64)  # [B, E]
        boot = (counts @ (w * v)) / (counts @ w)  # [B, k]
    a = (1 - confidence) / 2
    with warnings.catch_warnings():  # a feature no example has (induction in an encoder): NaN, said once
        warnings.simplefilter("ignore", RuntimeWarning)
        low, high = np.nanquantile(boot, [a, 1 - a], axis=0) if E > 1 else (mean, mean)
    shape = values.shape[1:]
    return mean.reshape(shape), np.asarray(low).reshape(shape), np.asarray(high).reshape(shape)


def _special_names(m) -> tuple:
    """``(first, other)`` special tokens of one example's maps (``[CLS]``, ``[SEP]``)."""
    idx = [i for i, s in enumerate(m.special_mask.tolist()) if s]
    if not idx or idx[0] != 0:
        return "[CLS]", "[SEP]"
    return str(m.tokens[idx[0]]), (str(m.tokens[idx[-1]]) if len(idx) > 1 else "[SEP]")


def _pair(a: float, b: float) -> str:
    """``a`` in percent with as many decimals as it takes to differ from ``b`` (up to 3)."""
    for d in range(4):
        if f"{a:.{d}%}" != f"{b:.{d}%}" or a == b:
            return f"{a:.{d}%}"
    return f"{a:.3%}"


def _too_little_evidence(words: str, n_rows: int, n_examples: int, extra: dict) -> Claim:
    """The pattern claim of a head seen on fewer than ``PATTERN_MIN_ROWS`` query rows or
    ``PATTERN_MIN_EXAMPLES`` examples (its interval is a bootstrap over examples: one long
    sentence would give a zero-width one): not enough evidence, with which bar it missed."""
    few_rows = n_rows < T.PATTERN_MIN_ROWS
    return Claim(
        "pattern",
        "not enough evidence",
        statement=words,
        count=n_rows,
        threshold="pattern_min_rows" if few_rows else "pattern_min_examples",
        unit="share of attention",
        reason=f"{n_rows} query rows < {T.PATTERN_MIN_ROWS}"
        if few_rows
        else f"{n_examples} examples < {T.PATTERN_MIN_EXAMPLES} (the share's interval is a bootstrap over examples)",
        extra=extra,
    )


def pattern_claims(evidence: Any) -> tuple:
    """Pattern claims of every head.

    Args:
        evidence: a :class:`PatternEvidence` (streamed or not), or a list of
            :class:`probe.maps.AttentionMaps` (its evidence is computed here).

    Returns:
        ``(claims, table)``: ``{(layer, head): Claim}`` and the tidy profile table
        (``layer, head, feature, share, ci_low, ci_high``).

    Raises:
        NotApplicable: no examples.
    """
    ev = evidence if isinstance(evidence, PatternEvidence) else pattern_evidence(evidence)
    values, rows, layers, H = ev.values, ev.rows, ev.layers, ev.n_heads
    mean, low, high = weighted_shares(values, rows[:, None, :])
    weights = rows[:, list(FEATURES).index("self")]  # non-special query rows with a self position
    cls, sep = ev.special_names
    names = {c: w.format(cls=cls, sep=sep) for c, w in COMPONENTS.items()}
    fi = {f: i for i, f in enumerate(FEATURES)}
    n_rows = int(weights.sum())
    n_examples = int((weights > 0).sum())
    punct_chance = ev.punct_chance
    claims, profile_rows = {}, []
    for j in range(values.shape[1]):
        layer, head = layers[j // H], j % H
        share = {f: float(mean[j, fi[f]]) for f in FEATURES}
        for f in FEATURES:
            profile_rows.append((layer, head, f, share[f], float(low[j, fi[f]]), float(high[j, fi[f]])))
        # a component that a head attending at random would reach says nothing: all-bracket corpora are
        # all punctuation; in a small corpus most tokens tie for "the rarest"
        chance = {"to_punct": punct_chance, "to_rare": share.get("rare_chance")}
        profile = {
            c: share[c]
            for c in COMPONENTS
            if not (
                c in chance
                and chance[c] == chance[c]
                and chance[c] is not None
                and share[c] < T.OVER_CHANCE * chance[c]
            )
        }
        words = profile_words(profile, names)
        extra = {
            "profile": {names[c]: v for c, v in profile.items() if v == v},
            "entropy_ratio": share["entropy_ratio"],
        }
        if n_rows < T.PATTERN_MIN_ROWS or n_examples < T.PATTERN_MIN_EXAMPLES:  # issue 59, row 17
            claims[(layer, head)] = _too_little_evidence(words, n_rows, n_examples, extra)
            continue
        hit = choose_rule(
            {**share, "punct_chance": punct_chance},
            THRESHOLDS,
            T.OVER_CHANCE,
            broad_max_attention=T.BROAD_MAX_ATTENTION,
        )
        if hit is None:
            near = nearest_rule({**share, "punct_chance": punct_chance}, THRESHOLDS, T.OVER_CHANCE)
            if near is not None:  # power: the share the nearest rule's feature needs to be named in 80% of samples
                n_role, n_feat, n_thr, n_val = near
                se = se_from_interval(float(low[j, fi[n_feat]]), float(high[j, fi[n_feat]]), T.CONFIDENCE)
                extra.update(
                    nearest_rule=n_role,
                    nearest_feature=n_feat,
                    nearest_share=n_val,
                    nearest_threshold=n_thr,
                    detectable=detectable_from_se(se, n_thr, q=None, power=T.POWER),
                )
            claims[(layer, head)] = Claim(
                "pattern",
                "does not hold",
                statement=words,
                count=n_rows,
                unit="share of attention",
                threshold="no role rule cleared",
                effect=max((v for v in profile.values() if v == v), default=float("nan")),
                reason=f"no single role; largest components: {words}",
                extra=extra,
            )
            continue
        role, feat, value, _ = hit
        tname = "broad_max_attention" if feat == "max_attention" else next(k for r, f, k, _ in RULES if r == role)
        low_j, high_j = (
            (float(low[j, fi[feat]]), float(high[j, fi[feat]])) if feat in fi else (float("nan"), float("nan"))
        )
        extra["rule_feature"] = feat
        if role == "special-token":  # which special token it parks its attention on (in the profile too)
            to_sep = share["to_sep"] if share["to_sep"] == share["to_sep"] else -1.0
            extra["parks_on"] = cls if share["to_cls"] >= to_sep else sep
        claims[(layer, head)] = Claim(
            "pattern",
            "holds",
            statement=role,
            effect=share[feat],
            ci_low=low_j,
            ci_high=high_j,
            count=n_rows,
            null=float(value),
            unit=feat,
            threshold=tname,
            reason=f"{feat} {_pair(share[feat], value)} {'≤' if feat == 'max_attention' else '≥'} "
            f"{_pair(value, share[feat])}; profile: {words}",
            extra=extra,
        )
    table = pd.DataFrame(profile_rows, columns=["layer", "head", "feature", "share", "ci_low", "ci_high"])
    return claims, table


def calibrate_pattern(claims: dict, evidence: PatternEvidence, null_evidence: PatternEvidence, source: str) -> dict:
    """``claims`` with every held role tested against a null model too (:mod:`.null_model`).

    Per example, the ``1 − q`` quantile (:data:`.thresholds.FDR`) over the null model's
    heads of the rule's feature (for ``broad``, whose rule may be read on the row peak, the
    entropy ratio), on the same examples (``evidence``'s first ones, the examples the null
    model read); the head's per-example share is tested against it (one-sided Wilcoxon,
    paired by example), Benjamini–Hochberg across all heads at q. A role the null model's
    heads reach as well is not claimed — where more than q of the null model's heads clear
    the same rule (a random model's heads are all broad), or the head's share is not above
    every null head's mean share, or the paired test fails: the claim does not hold and names the rule as the
    closest one with its share (``extra["nearest_rule"]``, ``nearest_share``).

    Raises:
        NotApplicable: evidence whose heads or features differ from the null's, or that
            does not cover the examples the null model read.
    """
    from dataclasses import replace

    from .statistics import benjamini_hochberg, paired_greater

    E = null_evidence.values.shape[0]
    null_means = null_shares(null_evidence)
    if evidence.values.shape[1:] != null_evidence.values.shape[1:] or evidence.values.shape[0] < E:
        raise NotApplicable(
            f"pattern evidence {evidence.values.shape} does not cover the null's {null_evidence.values.shape}"
        )
    fi = {f: i for i, f in enumerate(FEATURES)}
    level = 1.0 - T.FDR
    H = evidence.n_heads
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a feature no example has: NaN
        nq = np.nanquantile(null_evidence.values, level, axis=1)  # [E, F]
    tested, p, why = {}, {}, {}
    for key, c in claims.items():
        if c.status != "holds":
            continue
        feat = c.extra.get("rule_feature", c.unit)
        feat = "entropy_ratio" if feat == "max_attention" else feat
        j = evidence.layers.index(key[0]) * H + key[1]
        x, y = evidence.values[:E, j, fi[feat]], nq[:, fi[feat]]
        ok = ~(np.isnan(x) | np.isnan(y))
        tested[key] = (feat, float(np.mean(y[ok])) if ok.any() else float("nan"), float(np.mean(x[ok] > y[ok])))
        rule_feat = c.extra.get("rule_feature", c.unit)
        thr = float(c.null)
        nv = null_means[rule_feat]
        clear = (nv <= thr) if rule_feat == "max_attention" else (nv >= thr)
        share_clear = float(np.mean(clear[np.isfinite(nv)])) if np.isfinite(nv).any() else 0.0
        head_max = float(np.nanmax(null_means[feat])) if np.isfinite(null_means[feat]).any() else float("nan")
        mine = c.effect if feat == c.unit else float(c.extra.get("entropy_ratio", np.nan))
        if share_clear > T.FDR:  # a rule the heads of a model that learned nothing clear: says nothing
            p[key] = 1.0
            why[key] = f"{share_clear:.0%} of the null model's heads clear the same rule"
        elif not mine > head_max:
            p[key] = 1.0
            why[key] = f"the null model's largest head mean is {head_max:.1%}"
        else:
            p[key] = paired_greater(x[ok], y[ok]) if ok.sum() >= 2 else float("nan")
            why[key] = (
                f"above its heads' {level:.0%} quantile ({tested[key][1]:.1%} on average) on "
                f"{tested[key][2]:.0%} of {E} examples"
            )
    keys = sorted(claims)
    sig = dict(zip(keys, benjamini_hochberg([np.nan_to_num(p.get(k, 1.0), nan=1.0) for k in keys], T.FDR)))
    out = dict(claims)
    for key, (feat, null_level, beyond) in tested.items():
        c = claims[key]
        extra = {
            **c.extra,
            "null_quantile": null_level,
            "null_quantile_level": level,
            "null_source": source,
            "null_feature": feat,
            "p_null": p[key],
            "beyond_null_share": beyond,
            "null_examples": E,
            "null_why": why[key],
        }
        if sig[key]:
            out[key] = replace(c, extra=extra)
            continue
        mine = c.effect if feat == c.unit else float(c.extra.get("entropy_ratio", np.nan))
        profile = {k: v for k, v in (c.extra.get("profile") or {}).items() if v == v}
        top = sorted(profile.items(), key=lambda kv: -kv[1])[:2]
        words = ", ".join(f"{v:.0%} {k}" for k, v in top) or c.statement
        extra.update(nearest_rule=c.statement, nearest_feature=feat, nearest_share=mine, nearest_threshold=c.null)
        # power: the share this sample could show beyond every null head (the head-level bar)
        bar = float(np.nanmax(null_means[feat])) if np.isfinite(null_means[feat]).any() else float(c.null)
        se = se_from_interval(c.ci_low, c.ci_high, T.CONFIDENCE) if feat == c.unit else float("nan")
        extra["detectable"] = detectable_from_se(se, bar, q=T.FDR, power=T.POWER) if se == se else bar
        out[key] = replace(
            c,
            status="does not hold",
            statement=words,
            threshold="null_quantile",
            reason=f"closest rule {c.statement} ({feat} {mine:.1%}), not beyond the null model: {why[key]} ({source})",
            extra=extra,
        )
    return out


def null_shares(null_evidence: PatternEvidence) -> dict:
    """``{feature: [L·H]}``: every head's row-weighted share of each feature in the null
    model's evidence (:mod:`.null_model`)."""
    values, rows = null_evidence.values, null_evidence.rows
    w = rows[:, None, :] * ~np.isnan(values)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = (w * np.nan_to_num(values)).sum(0) / w.sum(0)  # [L·H, F]
    return {f: mean[:, i] for i, f in enumerate(FEATURES)}


def _carried(inputs: ClaimInputs) -> dict:
    """The pattern claims the pipeline computed first (:func:`.heads.head_claims`: the causal
    path reads them), calibrated on the null model where one is given."""
    return inputs.pattern


#: this module's claim kind (:mod:`.protocol`)
CLAIMS = (
    ClaimTest(
        "pattern",
        "Pattern",
        "its attention follows a named pattern, past a null model (Clark et al. 2019)",
        _carried,
        order=10,
    ),
)
