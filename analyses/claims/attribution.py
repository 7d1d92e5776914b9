"""The *attribution* claim: the head's attention ranks tokens as a gradient attribution
does (Jain & Wallace 2019; Kendall τ against integrated gradients, Sundararajan et al. 2017).

Tested only on a valid target: a probe target must beat its majority class on held-out
sentences with a Wilson interval that excludes the majority rate
(:func:`target_validity`); a model's own predicted class (``logit``) is valid by
construction. The claim holds when τ is significant in at least
:data:`.thresholds.AGREEMENT_SHARE` of the examples and larger than every head's τ on the
model re-initialised (``info["null_agreement"]``, :mod:`.null_model`; 0 without one).
Word scores average a word's pieces (:mod:`probe.analyses.explanation.agreement`), and
examples whose integrated gradients miss completeness by more than 1% are not counted
(:mod:`probe.analyses.explanation.completeness`); where IG misses it on every example the
reference is blank-out on every example (:mod:`probe.analyses.explanation.reference`), and
the statement names it ("agrees with blank_out"). A claim that does not hold states its
power: the smallest per-example rate of significant agreement at which its ``n`` examples
would reach that share with 80% probability (:func:`.statistics.detectable_share`). Fewer than :data:`.thresholds.MIN_EXAMPLES` examples
counted: "not enough evidence", as every other claim says it, on every causal path.
"""

from __future__ import annotations

import math
from typing import Any

from typing import Optional

from . import thresholds as T
from .claim import Claim
from .protocol import ClaimInputs, ClaimTest
from .statistics import detectable_share, examples_for_power, wilson_interval


def examples_needed(
    margin: float = T.AGREEMENT_MARGIN, share: float = T.AGREEMENT_SHARE, power: float = T.POWER
) -> int:
    """The fewest examples at which the claim's call (significant in at least ``share`` of the
    examples) is right with probability ``power`` both for a head whose true rate of significant
    agreement is ``share + margin`` (called agreeing) and for one at ``share − margin`` (called
    not): ``⌈(z_power · √(share·(1 − share)) / margin)²⌉`` (:func:`.statistics.examples_for_power`;
    the normal approximation to the binomial, Cohen 1988). ``√(share·(1 − share))`` is the
    spread of one example's significant-or-not at the bar, the largest a rate near it can
    have, so the rule needs no pilot. 71 at the defaults (⌈(0.8416 · 0.5 / 0.05)²⌉ = ⌈70.8⌉)."""
    return examples_for_power(math.sqrt(share * (1 - share)), margin, power)


def sizing_rule(n: int) -> str:
    """The words the report states beside the ``n`` examples :func:`examples_needed` chose."""
    return (
        f"{n} = the fewest at which the attribution claim calls a head significant in "
        f"{T.AGREEMENT_SHARE + T.AGREEMENT_MARGIN:.0%} of examples agreeing and one in "
        f"{T.AGREEMENT_SHARE - T.AGREEMENT_MARGIN:.0%} not, each with {T.POWER:.0%} power "
        f"(⌈(z_{T.POWER:g} · {math.sqrt(T.AGREEMENT_SHARE * (1 - T.AGREEMENT_SHARE)):g} / {T.AGREEMENT_MARGIN:g})²⌉), "
        f"capped at {T.EXPLAIN_CAP}"
    )


def target_validity(info: dict) -> tuple:
    """``(valid, words)`` for a faithfulness run's ``info`` (``info["probe"]`` from
    :func:`probe.analyses.explanation.faithfulness.fit_objective` when the target is a probe)."""
    target = str(info.get("target", ""))
    probe = info.get("probe")
    if not probe:
        return True, f"target {target} (the model's own output)"
    n = int(probe.get("n_test") or 0)
    acc, major = float(probe.get("test_accuracy", 0.0)), float(probe.get("majority_baseline", 1.0))
    if n < 1:
        return False, f"target {target}: no held-out sentences"
    lo, hi = wilson_interval(int(round(acc * n)), n, T.TARGET_CONFIDENCE)
    words = (
        f"target {target}: held-out accuracy {acc:.2f} [{lo:.2f}, {hi:.2f}] vs majority class {major:.2f} "
        f"on {n} sentences"
    )
    return lo > major, words


def attribution_claims(heads: Any, verdict: Any = None, info: Optional[dict] = None, reason: str = "") -> dict:
    """``{(layer, head): Claim}`` from the faithfulness verdict table (``layer, head,
    tau_<ref>, tau_<ref>_significant``, optional ``top1_rate``) and its ``info``."""
    if verdict is None or info is None:
        why = (reason or "the faithfulness section did not run").removeprefix("not tested: ")
        return {k: Claim("attribution", "not tested", reason=why) for k in heads}
    if info.get("null_agreement_unavailable"):
        why = "the null model's agreement could not be computed, so there is nothing to calibrate the claim against"
        return {k: Claim("attribution", "not tested", reason=why) for k in heads}
    valid, words = target_validity(info)
    if not valid:
        return {k: Claim("attribution", "not tested", reason=f"target no better than chance: {words}") for k in heads}
    ref = verdict.attrs.get("reference") or next(
        c[4:] for c in verdict.columns if c.startswith("tau_") and not c.endswith("significant")
    )
    rows = {(int(r["layer"]), int(r["head"])): r for _, r in verdict.iterrows()}
    n = int(info.get("n_examples") or 0)
    gate = (info.get("ig_gate") or {}) if ref == "ig" else {}  # another reference: IG excluded nothing
    # the examples the agreement test used: IG within completeness (IG the reference), long enough for a Kendall test
    n = n - int(gate.get("excluded") or 0) - int(info.get("agreement_skipped_short") or 0)
    null = info.get("null_agreement") or None
    out = {}
    for k in heads:
        r = rows.get(k)
        if r is None:
            out[k] = Claim("attribution", "not tested", reason="head not in the faithfulness run")
            continue
        tau, share = float(r[f"tau_{ref}"]), float(r[f"tau_{ref}_significant"])
        extra = {"significant_share": share, "reference": ref, "target": words}
        if "top1_rate" in r and r["top1_rate"] == r["top1_rate"]:
            extra["evidence_top1_rate"] = float(r["top1_rate"])
        if gate:
            extra["ig_excluded"] = int(gate.get("excluded") or 0)
        bar = 0.0
        if null:
            bar = max(0.0, float(null["tau_max"]))
            extra.update(
                null_tau_max=null["tau_max"], null_tau_quantile=null["tau_quantile"], null_source=null["source"]
            )
        holds = tau > bar and share >= T.AGREEMENT_SHARE
        status = "holds" if holds else "does not hold"
        if n < T.MIN_EXAMPLES:  # a share of 1 or 2 examples decides nothing (issue 59, row 17)
            status = "not enough evidence"
        elif not holds:
            extra["detectable"] = detectable_share(n, T.AGREEMENT_SHARE, T.POWER)
        few = f"{n} examples < the minimum {T.MIN_EXAMPLES}; " if status == "not enough evidence" else ""
        out[k] = Claim(
            "attribution",
            status,
            statement=f"agrees with {ref}",
            effect=tau,
            count=n,
            null=bar,
            unit=f"mean Kendall τ with {ref}",
            threshold="agreement_share",
            reason=f"{few}τ {tau:+.2f}, significant in {share:.0%} of {n} examples"
            + (f"; the null model's heads reach τ {bar:+.2f}" if null else ""),
            extra=extra,
        )
    return out


def attribution_kind(inputs: ClaimInputs) -> dict:
    """The attribution claims from the faithfulness section's verdict and run info
    (``inputs.faithfulness``; *not tested* with its reason where it did not run)."""
    verdict, info, reason = inputs.faithfulness
    return attribution_claims(inputs.heads, verdict, info, reason=reason)


#: this module's claim kind (:mod:`.protocol`)
CLAIMS = (
    ClaimTest(
        "attribution",
        "Agreement with attributions",
        "its attention ranks tokens as the attributions do",
        attribution_kind,
        order=60,
    ),
)
