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

import numpy as np
import pandas as pd

from probe.analyses.common.bootstrap import resample_counts
from probe.analyses.patterns.role_features import HeadFeatureAccumulator, example_values, token_frequencies

from probe.analyses.patterns.vocabulary import COMPONENTS, choose_rule, nearest_rule, profile_words
from probe.analyses.patterns.vocabulary import RULES as VOCAB_RULES

from . import thresholds as T
from probe.errors import NotApplicable

from .claim import Claim
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


def example_features(maps) -> tuple:
    """Per-example features in one pass: ``(values [E, L·H, F], rows [E, F], layers,
    n_heads)`` with ``F = len(FEATURES)`` (NaN where an example has no row for a feature)."""
    acc = HeadFeatureAccumulator(level="token", frequencies=token_frequencies(maps, "token"), keep_examples=True)
    for m in maps:
        acc.update(m)
    values, rows = example_values(acc, FEATURES)
    return values, rows, tuple(acc.layers or ()), acc.n_heads


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


def punctuation_share(maps) -> float:
    """Share of non-special tokens that are punctuation over the corpus (what a head
    attending at random puts on punctuation)."""
    from probe.analyses.patterns.role_features import is_punctuation

    n = p = 0
    for m in maps:
        for t, s in zip(m.tokens, m.special_mask.tolist()):
            if not s:
                n += 1
                p += is_punctuation(str(t))
    return p / max(n, 1)


def _special_names(maps) -> tuple:
    m = maps[0]
    idx = [i for i, s in enumerate(m.special_mask.tolist()) if s]
    if not idx or idx[0] != 0:
        return "[CLS]", "[SEP]"
    return str(m.tokens[idx[0]]), (str(m.tokens[idx[-1]]) if len(idx) > 1 else "[SEP]")


def pattern_claims(maps) -> tuple:
    """Pattern claims of every head over ``maps`` (a list of :class:`probe.maps.AttentionMaps`).

    Returns:
        ``(claims, table)``: ``{(layer, head): Claim}`` and the tidy profile table
        (``layer, head, feature, share, ci_low, ci_high``).

    Raises:
        ValueError: no examples.
    """
    if not maps:
        raise NotApplicable("no examples to measure attention patterns on")
    values, rows, layers, H = example_features(maps)
    mean, low, high = weighted_shares(values, rows[:, None, :])
    weights = rows[:, list(FEATURES).index("self")]  # non-special query rows with a self position
    cls, sep = _special_names(maps)
    names = {c: w.format(cls=cls, sep=sep) for c, w in COMPONENTS.items()}
    fi = {f: i for i, f in enumerate(FEATURES)}
    n_rows = int(weights.sum())
    punct_chance = punctuation_share(maps)
    claims, rows = {}, []
    for j in range(values.shape[1]):
        layer, head = layers[j // H], j % H
        share = {f: float(mean[j, fi[f]]) for f in FEATURES}
        for f in FEATURES:
            rows.append((layer, head, f, share[f], float(low[j, fi[f]]), float(high[j, fi[f]])))
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
        if n_rows < T.PATTERN_MIN_ROWS:
            claims[(layer, head)] = Claim(
                "pattern",
                "not enough evidence",
                statement=words,
                count=n_rows,
                threshold="pattern_min_rows",
                unit="share of attention",
                reason=f"{n_rows} query rows < {T.PATTERN_MIN_ROWS}",
                extra=extra,
            )
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
            reason=f"{feat} {share[feat]:.0%} {'≤' if feat == 'max_attention' else '≥'} {value:.0%}; profile: {words}",
            extra=extra,
        )
    table = pd.DataFrame(rows, columns=["layer", "head", "feature", "share", "ci_low", "ci_high"])
    return claims, table
