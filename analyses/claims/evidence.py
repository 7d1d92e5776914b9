"""Per-head evidence objects: the one source of every number a head page, report.md and
summary.json show about a claim.

:func:`claim_evidence` turns a :class:`.claim.Claim` into an :class:`Evidence`: its sentence
(``text``) is written only from the evidence's own fields (value, interval, count, test,
floor, p) through :func:`fmt`, so a renderer that shows ``text`` cannot contradict the
numbers beside it, and the count in an interval is the count the claim used.
"""

from __future__ import annotations

from typing import Any

import math
from dataclasses import asdict, dataclass, field

from typing import TYPE_CHECKING

from . import thresholds as T
from .baselines import BASELINE_WORDS

if TYPE_CHECKING:
    from .claim import Claim

__all__ = [
    "Evidence",
    "baseline_words",
    "builtin_evidence",
    "claim_evidence",
    "fmt",
    "pct",
    "pct_pair",
    "screened_out_words",
]


def fmt(v: Any, signed: bool = False) -> str:
    """A number as every renderer prints it: 3 significant digits (``—`` for none)."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    return f"{v:+.3g}" if signed else f"{v:.3g}"


def pct(v: Any) -> str:
    """A share in percent, no decimals (``—`` for none)."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    return f"{v:.0%}"


def pct_pair(a: Any, b: Any) -> tuple:
    """``(pct a, pct b)`` with as many decimals as it takes (up to 3) for two different
    shares to print differently, so a comparison never reads "90% < 90%"."""
    if a is None or b is None or a != a or b != b:
        return pct(a), pct(b)
    for d in range(4):
        x, y = f"{a:.{d}%}", f"{b:.{d}%}"
        if x != y or a == b:
            return x, y
    return x, y


def _null_words(c, decimals=fmt) -> str:
    """The null-model side of a calibrated claim, in words (``""`` when uncalibrated)."""
    x = c.extra
    if x.get("null_source") is None or x.get("null_quantile") is None:
        return ""
    words = (
        f"; null: {x['null_source']}, whose heads' {pct(x.get('null_quantile_level'))} quantile per example "
        f"is {decimals(x['null_quantile'])} on average"
    )
    if x.get("null_max") is not None:
        words += f" and largest head mean {decimals(x['null_max'])}"
    if x.get("p_null") is not None:
        words += f"; one-sided Wilcoxon p={fmt(x['p_null'])} against it"
    return words


@dataclass(frozen=True)
class Evidence:
    """What a claim rests on, in words and numbers.

    Attributes:
        kind, status: the claim's. text: the sentence (numbers formatted from the fields).
        value, ci_low, ci_high: the effect the decision used and its 95% interval.
        count: instances the effect and its interval rest on. units: what ``value`` is in.
        test: the test and threshold it was held to. floor: the threshold value; p: its p-value.
        detectable: for a claim that does not hold, the smallest effect its sample could have
            detected with 80% power (units in ``detectable_units``; NaN otherwise).
        numbers: every other number the text quotes, by name.
    """

    kind: str
    status: str
    text: str
    value: float = float("nan")
    ci_low: float = float("nan")
    ci_high: float = float("nan")
    count: int = 0
    units: str = ""
    test: str = ""
    floor: float = float("nan")
    p: float = float("nan")
    detectable: float = float("nan")
    detectable_units: str = ""
    numbers: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        def clean(v):
            if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
                return None
            if isinstance(v, dict):
                return {str(k): clean(x) for k, x in v.items()}
            return v.item() if hasattr(v, "item") else v

        return clean(asdict(self))


def _ci(c, percent: bool = False) -> str:
    f = pct if percent else (lambda v: fmt(v, signed=True))
    return f"[{f(c.ci_low)}, {f(c.ci_high)}]"


def _detectable(c) -> float:
    """The claim's stated power (NaN unless it does not hold and has one)."""
    d = c.extra.get("detectable")
    return float(d) if c.status == "does not hold" and d is not None else float("nan")


def _power(c) -> str:
    d = c.extra.get("detectable")
    if c.status != "does not hold" or d is None or d != d:
        return ""
    return f"; the smallest mean harm this sample could have detected: {fmt(d)} (80% power)"


def _decided(c) -> bool:
    """Was the claim decided by a sequential test (its stop and e-value stated)?"""
    return c.extra.get("e_value") is not None and c.extra.get("decision") is not None


def _decided_words(c, units: str) -> str:
    """A sequentially decided claim's interval, bar and decision, in words."""
    x = c.extra
    bar = x.get("bar", c.null)
    return (
        f"(95% interval over the {c.count} examples it took; {c.unit}); bar {fmt(bar)} (floor {fmt(c.null)}"
        + (f", {x['null_source']}" if x.get("null_source") else "")
        + f"); {x['decision']}; e-value {fmt(x['e_value'])} against the bar (e-BH at q={fmt(T.FDR)} over "
        f"{x.get('tests')} {units})"
    )


def _decided_test(c, units: str) -> str:
    return f"{c.extra.get('test', 'sequential test')} against the bar, e-BH q={T.FDR} over {units}"


def _rank_words(x: dict) -> str:
    """A necessity claim's rank among the heads by removal harm and by gradient importance."""
    words = ""
    if x.get("removal_rank") is not None:
        words += f"; rank {x['removal_rank']} of {x.get('of')} heads by harm"
        if x.get("ranked_among"):
            words += f" ({x['ranked_among']})"
    if x.get("importance_rank") is not None:
        words += (
            f"; gradient importance rank {x['importance_rank']} (Spearman ρ over heads "
            f"{fmt(x.get('rank_agreement_spearman'))})"
        )
    return words


def screened_out_words(x: dict, count: int, unit: str, bar: float) -> str:
    """Why a head the screen ruled out is not necessary, from its claim's ``extra`` (the
    screen's ``screen`` kind, ``screened_estimate``, ``screened_upper``, the audit's
    ``miss_rate_upper`` and ``miss_rate_confidence``): a first-order screen's estimate of the
    harm and its upper bound under ``bar``; a sketch's score, which ranks heads and is not in
    the objective's units, below the heads it confirmed. The claim's reason and its evidence
    both say this."""
    kind = x.get("screen", "first-order")
    if kind == "first-order":
        why = (
            f"the first-order screen (attribution patching, one forward and backward over all {count} examples) "
            f"puts mean-ablating it at {fmt(x.get('screened_estimate'), True)} ({unit}), its upper bound "
            f"{fmt(x.get('screened_upper'))} under the bar {fmt(bar)}"
        )
    else:
        why = (
            f"the {kind} screen over all {count} examples ranks it below the heads it confirmed (its score "
            f"{fmt(x.get('screened_upper'))}, a squared change of the readout, not in {unit})"
        )
    return (
        f"never removed exactly: {why}; a random audit of the screened-out heads, removed exactly, bounds the "
        f"screen's miss rate at {x['miss_rate_upper']:.1%} ({pct(x.get('miss_rate_confidence', 0.95))})"
    )


def _screened_out_words(c) -> tuple:
    """A necessity claim the screen ruled out (never removed exactly), in words
    (:func:`screened_out_words`) with its ranks; ``(text, test, numbers)`` as :func:`_causal`."""
    x = c.extra
    text = screened_out_words(x, c.count, c.unit, c.null) + _rank_words(x)
    numbers = {k: x[k] for k in ("screened_estimate", "screened_upper", "miss_rate_upper") if x.get(k) is not None}
    test = f"{x.get('screen', 'first-order')} screen; a random audit by exact removal bounds its miss rate"
    return text, test, numbers


def _causal(kind: str, c) -> tuple:
    x = c.extra
    if kind == "necessity" and x.get("reading") == "screened out":
        return _screened_out_words(c)
    obj = x.get("objective", "")
    what = {
        "necessity": "Mean-ablating the head (its output replaced by its corpus mean)",
        "weights": "Uniform attention weights (values kept)",
    }.get(kind, "")
    verb = ("harms" if c.effect >= 0 else "changes") if kind == "necessity" else ("harm" if c.effect >= 0 else "change")
    if _decided(c):
        text = f"{what} {verb} {obj} by {fmt(c.effect, True)} {_ci(c)} " + _decided_words(c, "heads")
    else:
        text = (
            f"{what} {verb} {obj} by {fmt(c.effect, True)} {_ci(c)} (95% bootstrap CI over {c.count} examples; "
            f"{c.unit}); floor {fmt(c.null)}, one-sided Wilcoxon p={fmt(x.get('p'))} against the floor, "
            f"{'significant' if x.get('bh_significant') else 'not significant'} after BH at q={fmt(x.get('fdr'))} "
            f"over {x.get('tests')} heads"
        ) + _null_words(c)
    numbers = {k: x[k] for k in ("null_quantile", "null_max", "p_null") if x.get(k) is not None}
    if kind == "necessity":
        for mode, words in (("zero", "zero-ablation"), ("resample", "resample-ablation")):
            side = x.get(f"{mode}_harm")
            if side:
                text += (
                    f"; {words} {fmt(side['effect'], True)} [{fmt(side['ci_low'], True)}, {fmt(side['ci_high'], True)}]"
                )
                numbers[f"{mode}_harm"] = side["effect"]
        if x.get("neighbour_changed") is not None:
            text += f"; nearest neighbour changes for {pct(x['neighbour_changed'])} of the sentences"
            numbers["neighbour_changed"] = x["neighbour_changed"]
        if x.get("embedding_drift") is not None:
            text += f"; embedding drift {fmt(x['embedding_drift'])}"
            numbers["embedding_drift"] = x["embedding_drift"]
        if x.get("times_random") is not None:
            text += f"; removing it harms {fmt(x['times_random'])}× as much as a same-norm random perturbation"
            numbers["times_random"] = x["times_random"]
        if x.get("baselines"):
            text += baseline_words(c)
            for mode, side in x["baselines"].items():
                numbers[f"baseline:{mode}"] = side.get("effect")
                numbers[f"baseline_holds:{mode}"] = 1.0 if side.get("holds") else 0.0
        text += _rank_words(x)
    else:
        if x.get("removal_harm") is not None:
            text += f"; mean-ablation harms it by {fmt(x['removal_harm'], True)}"
            numbers["removal_harm"] = x["removal_harm"]
        if c.holds and x.get("reading") == "inert sink":
            text = (
                f"{c.statement} (removing it harms {obj} by {fmt(x.get('removal_harm'), True)}, under the "
                f"floor); spreading it harms {fmt(c.effect, True)} {_ci(c)}: a no-op head (Clark et al. 2019; "
                f"attention sinks, Xiao et al. 2023). " + text
            )
        elif c.holds:
            text = f"{c.statement}: uniform weights do {pct(x.get('share_of_removal'))} of the removal's harm. " + text
    text += _power(c)
    if _decided(c):
        return text, _decided_test(c, "heads"), numbers
    test = f"one-sided Wilcoxon of harm − floor ({T.floor_source(obj)}), Benjamini–Hochberg q={T.FDR}"
    if x.get("null_source"):
        test += f"; and of harm − the null model's {pct(x.get('null_quantile_level'))} head quantile (the larger p)"
    return text, test, numbers


def _base(kind: str, c: Claim) -> dict:
    """The fields every claim's evidence copies from the claim."""
    return dict(
        kind=kind,
        status=c.status,
        value=c.effect,
        ci_low=c.ci_low,
        ci_high=c.ci_high,
        count=c.count,
        units=c.unit,
        p=float(c.extra.get("p", float("nan")) or float("nan")),
    )


def claim_evidence(kind: str, c: Claim) -> Evidence:
    """The :class:`Evidence` of claim ``c`` of kind ``kind``: a claim not tested (or without
    enough evidence) says why; a tested one is rendered by its kind's registered
    :class:`.protocol.ClaimTest` (``evidence``; default: :func:`builtin_evidence`).

    Raises:
        KeyError: ``kind`` is not a registered claim kind.
    """
    from .protocol import claim_test

    base = _base(kind, c)
    if c.status in ("not tested", "not enough evidence"):
        return Evidence(text=c.reason.removeprefix("not tested: ") or "no reason recorded", test=c.threshold, **base)
    render = claim_test(kind).evidence
    return render(c) if render is not None else builtin_evidence(kind, c)


def _pattern_evidence(kind: str, c: Claim, base: dict) -> Evidence:
    """The evidence of a pattern claim that was tested."""
    if c.holds:
        text = (
            f"{c.statement}: {c.unit} {pct_pair(c.effect, c.null)[0]} {_ci(c, True)} (95% CI over examples, "
            f"{c.count} query rows) {'≤' if c.unit == 'max_attention' else '≥'} {pct_pair(c.effect, c.null)[1]} "
            f"({c.threshold}); profile: "
            f"{c.reason.split('profile: ')[-1]}"
        )
        if c.extra.get("null_quantile") is not None:
            text += (
                f"; beyond the null model ({c.extra['null_source']}): above its heads' "
                f"{pct(c.extra['null_quantile_level'])} quantile on {pct(c.extra.get('beyond_null_share'))} of "
                f"{c.extra.get('null_examples')} examples, p={fmt(c.extra.get('p_null'))}"
            )
        return Evidence(text=text, test=c.threshold, floor=c.null, **base)
    x = c.extra
    if c.threshold == "null_quantile":  # a rule cleared, but a model that learned nothing clears it too
        text = f"no role beyond the null model over {c.count} query rows: {c.reason}; largest components: {c.statement}"
        d = x.get("detectable")
        if d is not None and d == d:
            text += (
                f"; the smallest {x['nearest_feature']} this sample could have detected: {pct(d)} "
                f"(80% power, beyond every null head)"
            )
        return Evidence(
            text=text,
            test="role rules, then the null model (null_model.py)",
            detectable=_detectable(c),
            detectable_units=str(x.get("nearest_feature", "")),
            **base,
        )
    text = f"no role rule cleared its threshold over {c.count} query rows; largest components: {c.statement}"
    d = x.get("detectable")
    if d is not None and d == d:
        share, thr = pct_pair(x["nearest_share"], x["nearest_threshold"])
        text += (
            f"; nearest rule {x['nearest_rule']} ({x['nearest_feature']} {share} < "
            f"{thr}); the smallest {x['nearest_feature']} this sample could have "
            f"detected: {pct(d)} (80% power: a head at it is named {x['nearest_rule']} in 80% of samples "
            f"this size)"
        )
    return Evidence(
        text=text,
        test="every role rule of thresholds.py",
        detectable=_detectable(c),
        detectable_units=str(x.get("nearest_feature", "")),
        **base,
    )


def _structure_evidence(kind: str, c: Claim, base: dict) -> Evidence:
    """The evidence of a structure claim that was tested."""
    x = c.extra
    verb = "follows" if c.holds else "best relation"
    text = (
        f"{verb} {c.statement}: accuracy {pct(x.get('accuracy'))} vs best fixed offset {pct(c.null)}, margin "
        f"{pct(c.effect)} {_ci(c, True)} (bootstrap over {x.get('sentences')} sentences), {c.count} "
        f"instances, p={fmt(x.get('p'))} ({'significant' if x.get('bh_significant') else 'not significant'} "
        f"after BH); holds at margin ≥ {pct(T.STRUCTURE_MARGIN)}"
    )
    if c.status == "does not hold" and x.get("detectable") is not None:
        text += f"; the smallest margin this sample could have detected: {pct(x['detectable'])} (80% power)"
    return Evidence(
        text=text,
        test="bootstrap margin over the best offset, BH",
        detectable=_detectable(c),
        detectable_units=c.unit,
        floor=T.STRUCTURE_MARGIN,
        numbers={"accuracy": x.get("accuracy"), "baseline": c.null},
        **base,
    )


def _causal_evidence(kind: str, c: Claim, base: dict) -> Evidence:
    """The evidence of a necessity or weights claim that was tested."""
    text, test, numbers = _causal(kind, c)
    return Evidence(
        text=text,
        test=test,
        floor=c.null,
        numbers=numbers,
        detectable=_detectable(c),
        detectable_units=c.unit,
        **base,
    )


def _redundancy_evidence(kind: str, c: Claim, base: dict) -> Evidence:
    """The evidence of a redundancy claim that was tested."""
    x = c.extra
    if _decided(c):
        text = (
            f"{c.statement}: {c.reason}; harm {fmt(c.effect, True)} {_ci(c)} "
            + _decided_words(c, "groups")
            + (
                f"; a same-norm random perturbation of the group harms {fmt(x['random_harm'], True)}"
                if x.get("random_harm") is not None
                else ""
            )
            + _power(c)
        )
        return Evidence(text=text, test=_decided_test(c, "groups"), floor=c.null, detectable=_detectable(c),
                        detectable_units=c.unit, **base)  # fmt: skip
    text = (
        (
            f"{c.statement}: {c.reason}; harm {fmt(c.effect, True)} {_ci(c)} over {c.count} examples, floor "
            f"{fmt(c.null)}, p={fmt(x.get('p'))} (Bonferroni over {x.get('tests')} groups)"
        )
        + (
            f"; a same-norm random perturbation of the group harms {fmt(x['random_harm'], True)}"
            if x.get("random_harm") is not None
            else ""
        )
        + (
            f"; {x['null_source']}: {fmt(x['null_harm'], True)}, p={fmt(x.get('p_null'))} against it"
            if x.get("null_harm") is not None
            else ""
        )
        + _power(c)
    )
    return Evidence(
        text=text,
        test="one-sided Wilcoxon of harm − floor, Bonferroni",
        floor=c.null,
        detectable=_detectable(c),
        detectable_units=c.unit,
        **base,
    )


def _attribution_evidence(kind: str, c: Claim, base: dict) -> Evidence:
    """The evidence of an attribution claim that was tested."""
    text = f"{c.statement}: {c.reason}; {c.extra.get('target', '')}"
    d = _detectable(c)
    if d == d:
        text += (
            f"; the smallest rate of significant agreement this sample could have detected: {pct(d)} "
            f"(80% power of reaching ≥ {pct(T.AGREEMENT_SHARE)} of {c.count} examples)"
        )
    return Evidence(
        text=text,
        test=c.threshold,
        floor=T.AGREEMENT_SHARE,
        detectable=d,
        detectable_units="share of examples with a significant τ",
        **base,
    )


#: the renderer of each built-in kind's tested claims
_BUILTIN = {
    "pattern": _pattern_evidence,
    "structure": _structure_evidence,
    "necessity": _causal_evidence,
    "weights": _causal_evidence,
    "redundancy": _redundancy_evidence,
    "attribution": _attribution_evidence,
}


def builtin_evidence(kind: str, c: Claim) -> Evidence:
    """The :class:`Evidence` of a tested claim ``c`` of a built-in kind (pattern, structure,
    necessity, weights, redundancy, attribution; another kind: its reason)."""
    base = _base(kind, c)
    render = _BUILTIN.get(kind)
    return render(kind, c, base) if render is not None else Evidence(text=c.reason, **base)


def baseline_words(c: Claim) -> str:
    """The baselines of a claim side by side in words (``""`` when it has none)."""
    side = c.extra.get("baselines") or {}
    if not side:
        return ""
    return "; under each baseline: " + ", ".join(
        f"{BASELINE_WORDS.get(m, m)} {fmt(v.get('effect'), True)} [{fmt(v.get('ci_low'), True)}, "
        f"{fmt(v.get('ci_high'), True)}] {'holds' if v.get('holds') else 'does not hold'}"
        for m, v in side.items()
    )
