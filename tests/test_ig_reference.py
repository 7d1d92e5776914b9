"""The faithfulness reference where integrated gradients cannot be trusted, and the IG gate's
stop rule (issue 54: SmolLM2's faithfulness section skipped as IG missed 1% completeness on
every example, after 700 s of raising its steps)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from probe.analyses.common.objective import parse_target

TEXTS = [
    "the cat sat on the mat by the door",
    "a dog ran home after the long day",
    "we met at noon by the sea and the sky",
    "the old man read a book in the park",
    "she left the keys on the kitchen table",
]


def _tiny_lm(bert_tokenizer):
    from test_faithfulness import _tiny_lm as build

    return build(bert_tokenizer)


def test_ig_failing_everywhere_falls_back_to_blank_out(bert_tokenizer, monkeypatch):
    """IG passing the gate on no example (tolerance 0): the study still runs, with blank-out
    (computed for it, the run asked IG only) as the reference of the verdict, the agreement,
    the null model's bar (on which IG is not computed) and the attribution claim, and says
    why in one line. The old code raised NotApplicable ("raise --steps")."""
    from probe.analyses.claims.attribution import attribution_claims
    from probe.analyses.common.metrics import as_corpus
    from probe.analyses.explanation import attributions, completeness, faithfulness
    from probe.analyses.explanation.attributions import attribute

    lm = _tiny_lm(bert_tokenizer)
    target = parse_target("loss:6", lm)
    monkeypatch.setattr(completeness, "TOLERANCE", 0.0)
    calls: list = []

    def spy(adapter, objective, encs, *, methods, **kw):
        calls.append((adapter.card.get("null_source", adapter.name), tuple(methods), len(encs)))
        return attribute(adapter, objective, encs, methods=methods, **kw)

    monkeypatch.setattr(attributions, "attribute", spy)
    rep = faithfulness.run_faithfulness(lm, as_corpus(TEXTS), target, methods=("ig",), n_steps=2, permute=False)

    why = rep.info["reference_why"]
    assert rep.info["reference"] == "blank_out" and rep.verdict.attrs["reference"] == "blank_out"
    # the pilot (4 of 5, spread over the lengths) attributed first, none passes at 2 steps nor raised:
    # the 5th is never given IG
    assert why.startswith("integrated gradients missed 1% completeness on a pilot of 4 of the 5 examples, ")
    assert why.endswith(": the reference is blank-out (leave-one-out occlusion), computed for it")
    assert rep.info["ig_gate"]["excluded"] == 5 and rep.info["ig_gate"]["n"] == 5
    assert rep.info["ig_gate"]["pilot"] == 4 and rep.info["ig_gate"]["untried"] == 1
    assert "tau_blank_out" in rep.verdict.columns and not any(
        c.endswith("_ig") or "_ig_" in c for c in rep.verdict.columns
    )
    assert set(rep.agreement.summary["attribution"]) == {"blank_out"}
    assert set(rep.agreement.summary["n_examples"]) == {5}  # every example, none excluded for IG
    # the blank-out scores are those attribute() gives on its own
    encs = [lm.encode(t) for t in TEXTS]
    own = attribute(lm, target, encs, methods=("blank_out",))
    for ex, o in zip(rep.attributions.examples, own.examples):
        np.testing.assert_allclose(ex.scores["blank_out"], o.scores["blank_out"], atol=1e-6)
        assert ex.value == pytest.approx(o.value, abs=1e-5)  # the one never given IG too: its value read
    never = [i for i, s in enumerate(rep.attributions.settings["ig_steps_per_example"]) if s == 0]
    assert len(never) == 1 and np.isnan(rep.attributions.examples[never[0]].scores["ig"]).all()
    # the null model: blank-out only, no IG (the gate ran once, on the model itself)
    null = rep.info["null_agreement"]
    assert null["reference"] == "blank_out" and null["n"] == 5
    assert calls[0] == ("tiny-lm", ("ig",), 4)  # the pilot
    assert {c for c in calls if c[1] == ("ig",)} <= {("tiny-lm", ("ig",), k) for k in range(1, 5)}
    assert [c for c in calls if c[1] != ("ig",)] == [
        ("tiny-lm", ("blank_out",), 5),
        (null["source"], ("blank_out",), 5),
    ]
    # the attribution claim: tested against blank-out on every example
    heads = [(0, 0), (1, 1)]
    claims = attribution_claims(heads, rep.verdict, rep.info)
    for k in heads:
        c = claims[k]
        assert c.statement == "agrees with blank_out" and c.extra["reference"] == "blank_out"
        assert c.count == 5 - rep.info["agreement_skipped_short"] and c.status != "not tested"
        assert "ig_excluded" not in c.extra and c.null == max(0.0, null["tau_max"])


def test_ig_within_completeness_stays_the_reference(bert_tokenizer):
    """Where IG passes the gate the study is as before: IG the reference, no reason line,
    the null model gated with IG."""
    from probe.analyses.common.metrics import as_corpus
    from probe.analyses.explanation.faithfulness import run_faithfulness

    lm = _tiny_lm(bert_tokenizer)
    rep = run_faithfulness(
        lm, as_corpus(TEXTS), parse_target("loss:6", lm), methods=("ig", "saliency"), n_steps=8, permute=False
    )
    assert rep.info["ig_gate"]["excluded"] < 5  # the premise: IG passes on some example here
    assert rep.info["reference"] == "ig" and "reference_why" not in rep.info
    assert rep.verdict.attrs["reference"] == "ig" and "tau_ig" in rep.verdict.columns
    assert set(rep.agreement.summary["attribution"]) == {"ig", "saliency"}
    assert rep.info["null_agreement"]["reference"] == "ig"


def test_reference_without_ig_is_the_first_fallback_computed():
    """``choose_reference``: IG not asked → blank-out where asked, else input × gradient,
    else saliency; blank-out computed for it where no fallback was asked."""
    from probe.analyses.explanation.completeness import IGGate
    from probe.analyses.explanation.reference import choose_reference

    assert choose_reference(("saliency", "blank_out"), None)[0] == "blank_out"
    assert choose_reference(("saliency", "input_x_gradient"), None) == (
        "input_x_gradient",
        "integrated gradients were not computed: the reference is input × gradient",
    )
    failed = IGGate(passed=(), excluded=(0, 1), steps=(16, 32), errors=(0.5, 0.2), start=8, stopped=(1,))
    ref, why = choose_reference(("ig", "saliency"), failed)
    assert ref == "saliency" and "on all 2 examples at up to 32 steps (1 stopped early, not converging" in why
    assert choose_reference(("ig",), failed)[1].endswith("blank-out (leave-one-out occlusion), computed for it")
    ok = replace(failed, passed=(0,), excluded=(1,))
    assert choose_reference(("ig", "blank_out"), ok) == ("ig", "")


def test_attribution_claim_with_a_non_ig_reference_excludes_nothing_for_ig():
    """With blank-out the reference, IG's 40 failed examples are not subtracted from the
    claim's count (the old code counted 0 and called it "not enough evidence")."""
    from probe.analyses.claims.attribution import attribution_claims

    verdict = pd.DataFrame({"layer": [0], "head": [0], "tau_blank_out": [0.3], "tau_blank_out_significant": [0.9]})
    verdict.attrs["reference"] = "blank_out"
    info = {"target": "loss:-1", "n_examples": 40, "ig_gate": {"excluded": 40}, "agreement_skipped_short": 2}
    c = attribution_claims([(0, 0)], verdict, info)[(0, 0)]
    assert c.count == 38 and c.status == "holds" and c.statement == "agrees with blank_out"
    assert "ig_excluded" not in c.extra and "of 38 examples" in c.reason


# ---- the gate's stop rule ------------------------------------------------------------------------
def _fake_ig(errors_at: dict):
    """An ``attribute`` whose IG of example ``i`` at ``s`` steps has relative error
    ``errors_at[i][s]`` (``f(x) − f(x') = 1``), and the start attributions at 1 step."""
    from probe.analyses.explanation.attributions import Attributions, ExampleAttribution

    def ex(i, s):
        e = errors_at[i][s]
        return ExampleAttribution(
            index=i, tokens=("a",), word_ids=(0,), special_mask=(False,), words=("a",),
            scores={"ig": np.array([1.0 + e])}, value=1.0, baseline_value=0.0, ig_delta=e,
        )  # fmt: skip

    def attribute(adapter, target, encs, *, methods, n_steps, **kw):
        return Attributions(examples=tuple(ex(i, n_steps) for i in encs), methods=("ig",), target="t")

    start = Attributions(examples=tuple(ex(i, 1) for i in errors_at), methods=("ig",), target="t")
    return attribute, start


def test_gate_stops_raising_steps_where_the_error_cannot_reach_the_tolerance(monkeypatch):
    """From 1 step, cap 8. Example 0: 0.5 → 0.3 at 2 steps; even converging exponentially at that
    rate (0.3 · 0.6⁶ = 0.014 by 8 steps) it would miss 1%: stopped at 2, excluded, its last error
    kept. Example 1 converges fast enough to hope (0.5 → 0.2 → 0.04) and goes to the cap, still
    missing. Example 2 falls slowly (0.05 → 0.03, not halved) but is near the tolerance (within
    10×) and passes at 4. Example 3: 0.5 → 0.45 at 2 steps (0.45 · 0.9⁶ = 0.24), stopped there.
    Example 4 passes at 1. Example 5: 0.0135 → 0.013 at 2 (the rate alone would stop it: 0.013 ·
    0.96⁶ > 1%), near the tolerance, passes at 4 (zoo:agreement's case). The old code raised
    examples 0 and 3 to 8 steps."""
    from probe.analyses.explanation import attributions, completeness

    errors_at = {
        0: {1: 0.5, 2: 0.3, 4: 0.001, 8: 0.001},
        1: {1: 0.5, 2: 0.2, 4: 0.04, 8: 0.03},
        2: {1: 0.05, 2: 0.03, 4: 0.005},
        3: {1: 0.5, 2: 0.45, 4: 0.4, 8: 0.001},
        4: {1: 0.002},
        5: {1: 0.0135, 2: 0.013, 4: 0.0006},
    }
    fake, start = _fake_ig(errors_at)
    monkeypatch.setattr(attributions, "attribute", fake)
    out, gate = completeness.gate_ig(None, None, list(errors_at), start, 1)
    assert gate.steps == (2, 8, 4, 2, 1, 4) and gate.stopped == (0, 3)
    assert gate.passed == (2, 4, 5) and gate.excluded == (0, 1, 3)
    assert gate.errors == pytest.approx((0.3, 0.03, 0.005, 0.45, 0.002, 0.0006))
    said = gate.to_dict()
    assert said["stopped_not_converging"] == 2 and said["max_steps"] == 8 and said["excluded"] == 3
    assert out.settings["ig_steps_per_example"] == [2, 8, 4, 2, 1, 4]
    assert out.examples[0].ig_delta == pytest.approx(0.3)


def test_hopeful_extrapolates_exponential_convergence():
    """``e′ · r^(2^(k+1) − 2)`` against 1% beyond 10× the tolerance: the bounds either side, a
    rising error, the cap; within 10× the tolerance always hopeful."""
    from probe.analyses.explanation.completeness import hopeful

    assert hopeful(0.5, 0.3, 4) is False and hopeful(0.5, 0.25, 4) is True  # 0.3·0.6⁶ = 0.014; 0.25·0.5⁶ = 0.0039
    assert hopeful(1.0, 0.5, 2) is False and hopeful(1.0, 0.4, 2) is False  # 0.5·0.5² = 0.125; 0.4·0.4² = 0.064
    assert hopeful(1.0, 0.2, 2) is True  # 0.2·0.2² = 0.008
    assert hopeful(0.2, 0.3, 8) is False and hopeful(0.2, 0.3, 1) is True and hopeful(9.0, 0.009, 8) is True
    assert hopeful(0.1, 0.05, 2) is True and hopeful(0.02, 0.03, 8) is True  # near the tolerance: one more doubling


# ---- the LM head on the read positions only (issue 57) ---------------------------------------------
def test_lm_loss_through_the_head_at_the_read_positions_only(bert_tokenizer):
    """``loss:-1`` on a causal LM: the attribution forward projects only the predicting
    positions onto the vocabulary (logits ``[batch, k, vocab]``, ``k`` the distinct positions,
    examples of different lengths in one padded batch) and gives the same scalar, gradients
    and IG as the forward through every position (1e-5)."""
    import torch

    from probe.analyses.common.objective_base import Objective, scalar_function
    from probe.analyses.common.targets import KeptLogits, LMLoss
    from probe.analyses.explanation.attributions import attribute

    lm = _tiny_lm(bert_tokenizer)
    target = parse_target("loss:-1", lm)
    assert isinstance(target, LMLoss)

    class EveryPosition(LMLoss):
        def gradient_output(self, adapter, input_ids, attention_mask, aux):
            return Objective.gradient_output(self, adapter, input_ids, attention_mask, aux)

    full = EveryPosition(-1)
    encs = [lm.encode(t) for t in TEXTS[:3] + ["a short one here"]]
    inputs = lm.batch(encs)
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    aux = target.aux(lm, ids, mask)
    kept = target.gradient_output(lm, ids, mask, aux)
    assert isinstance(kept, KeptLogits) and kept.logits.shape[:2] == (4, len(set(aux[:, 0].tolist()))) > (4, 1)
    assert kept.logits.shape[1] < ids.shape[1]
    with torch.no_grad():
        np.testing.assert_allclose(
            scalar_function(lm, target)(ids, mask, aux), scalar_function(lm, full)(ids, mask, aux), atol=1e-5
        )
    a = attribute(lm, target, encs, methods=("ig", "saliency"), n_steps=4)
    b = attribute(lm, full, encs, methods=("ig", "saliency"), n_steps=4)
    for x, y in zip(a.examples, b.examples):
        assert x.value == pytest.approx(y.value, abs=1e-5) and x.ig_delta == pytest.approx(y.ig_delta, abs=1e-5)
        for m in ("ig", "saliency"):
            np.testing.assert_allclose(x.scores[m], y.scores[m], atol=1e-5)


def test_the_report_section_keeps_what_the_attribution_claim_reads(bert_tokenizer):
    """The claims section reads the faithfulness section's summary: the attribution claim from
    it is the claim from the run's own info, held to the null model's bar (the old summary
    dropped ``null_agreement``: the report's claim was held to 0, its null computed for nothing)."""
    from probe.analyses.claims.attribution import attribution_claims
    from probe.analyses.common.metrics import as_corpus
    from probe.analyses.explanation.faithfulness import run_faithfulness
    from probe.app.registry.analyses.faithfulness import section_summary

    lm = _tiny_lm(bert_tokenizer)
    rep = run_faithfulness(lm, as_corpus(TEXTS), parse_target("loss:6", lm), methods=("ig",), n_steps=8, permute=False)
    heads = [(0, 0), (1, 2)]
    said = section_summary(rep.info)
    assert said["null_agreement"] == rep.info["null_agreement"] and said["explained"]["n"] == 5
    for k in heads:
        from_summary, from_info = (
            attribution_claims(heads, rep.verdict, said)[k],
            attribution_claims(heads, rep.verdict, rep.info)[k],
        )
        assert from_summary == from_info and from_summary.null == max(0.0, rep.info["null_agreement"]["tau_max"])
        assert from_summary.extra["null_source"] == rep.info["null_agreement"]["source"]


class _Sized(int):
    """An example id whose ``len`` is its length in :data:`_LENGTHS` (the fake IG's encodings)."""

    def __len__(self) -> int:
        return _LENGTHS[int(self)]


#: lengths that make the pilot (the middle of each quarter of the length order 1, 0, 2, 4, 3, 5)
#: examples 1, 2, 4 and 5
_LENGTHS = {1: 1, 0: 2, 2: 3, 4: 4, 3: 5, 5: 6}


def _gated(monkeypatch, errors_at: dict) -> tuple:
    """``(attrs, gate, encodings the fake IG saw)`` of :func:`gated_attributions` from 1 step on
    the fake IG of ``errors_at`` (examples 0–5, :data:`_LENGTHS`)."""
    from probe.analyses.explanation import attributions, completeness
    from probe.analyses.explanation.attributions import Attributions, ExampleAttribution

    fake, _ = _fake_ig(errors_at)
    seen: list = []

    def counting(adapter, target, encs, **kw):
        seen.extend(int(e) for e in encs)
        return fake(adapter, target, encs, **kw)

    def values_only(adapter, target, encs):
        blank = dict(tokens=("a",), word_ids=(0,), special_mask=(False,), words=("a",), scores={}, value=1.0)
        return Attributions(tuple(ExampleAttribution(index=int(i), **blank) for i in encs), (), "t")

    monkeypatch.setattr(attributions, "attribute", counting)
    monkeypatch.setattr(attributions, "unattributed", values_only)
    encs = [_Sized(i) for i in sorted(errors_at)]
    attrs, gate = completeness.gated_attributions(None, None, encs, ("ig",), 1)
    return attrs, gate, seen


def test_the_pilot_is_the_examples_spread_over_the_lengths():
    """:func:`pilot_of`: the middle example of each of ``k`` equal shares of the length order."""
    from probe.analyses.explanation.completeness import pilot_of

    assert pilot_of([_LENGTHS[i] for i in range(6)], 4) == [1, 2, 4, 5]
    assert pilot_of(list(range(16, 0, -1)), 4) == [1, 5, 9, 13]  # lengths 15, 11, 7, 3 of 16 … 1
    assert pilot_of([5, 3], 4) == [0, 1] and pilot_of([5, 3, 4], 0) == []


def test_gate_attributes_a_pilot_first_and_gives_up_before_the_others_when_it_fails(monkeypatch):
    """From 1 step, cap 8, 6 examples. The pilot, the 4 spread over the lengths (examples 1, 2,
    4, 5), is attributed first: none within 1% at 1 step, raised, none reaches 1% by 8 steps,
    so IG is given up before examples 0 and 3 (which would pass at 2) are attributed at all:
    they get no IG (NaN, steps 0), are excluded and counted as untried. The gate that
    attributed every example first computed their 1-step IG for nothing."""
    from probe.analyses.explanation.reference import choose_reference

    slow = {2: 0.04, 4: 0.03, 8: 0.02}
    errors_at = {
        0: {1: 0.9, 2: 0.001},  # would pass at 2: the pilot's rule gives it up unseen
        1: {1: 0.05, **slow},
        2: {1: 0.06, **slow},
        3: {1: 0.8, 2: 0.001},
        4: {1: 0.07, **slow},
        5: {1: 0.2, **slow},
    }
    attrs, gate, seen = _gated(monkeypatch, errors_at)
    assert gate.pilot == (1, 2, 4, 5) and gate.untried == (0, 3)
    assert set(seen) == {1, 2, 4, 5} and len(seen) == 16  # 4 examples at 1 step and 3 doublings
    assert gate.passed == () and gate.excluded == (0, 1, 2, 3, 4, 5)
    assert gate.steps == (0, 8, 8, 0, 8, 8)
    assert np.isnan(gate.errors[0]) and np.isnan(gate.errors[3]) and gate.errors[1] == pytest.approx(0.02)
    assert [ex.index for ex in attrs.examples] == list(range(6))
    assert np.isnan(attrs.examples[0].scores["ig"]).all() and attrs.examples[0].value == 1.0
    assert attrs.settings["ig_steps_per_example"] == [0, 8, 8, 0, 8, 8]
    said = gate.to_dict()
    assert said["pilot"] == 4 and said["untried"] == 2 and said["excluded"] == 6
    assert said["max_steps"] == 8 and said["median_steps"] == 8 and said["steps_counts"] == {8: 4}
    ref, why = choose_reference(("ig", "blank_out"), gate)
    assert ref == "blank_out" and why.startswith(
        "integrated gradients missed 1% completeness on a pilot of 4 of the 6 examples, spread over their "
        "lengths, at up to 8 steps (the other 2 not given IG)"
    ), why


@pytest.mark.parametrize("passes_at", [1, 2, 4])
def test_once_a_pilot_example_passes_every_example_gets_the_steps_of_the_whole_gate(monkeypatch, passes_at):
    """Example 4 of the pilot passing at 1 step, or raised, at 2 or 4: the others are
    attributed and raised, and the steps, errors and passes are those :func:`gate_ig` gives
    attributing every example first (the pilot changes what is computed first, not which
    examples pass)."""
    from probe.analyses.explanation import attributions, completeness

    slow = {2: 0.04, 4: 0.03, 8: 0.02}
    errors_at = {
        0: {1: 0.9, 2: 0.001},
        1: {1: 0.05, **slow},
        2: {1: 0.06, **slow},
        3: {1: 0.8, 2: 0.001},
        4: {1: 0.005} if passes_at == 1 else {1: 0.07, 2: 0.03 if passes_at == 4 else 0.005, 4: 0.005},
        5: {1: 0.2, **slow},
    }
    attrs, gate, _ = _gated(monkeypatch, errors_at)
    fake, start = _fake_ig(errors_at)
    monkeypatch.setattr(attributions, "attribute", fake)
    whole, plain = completeness.gate_ig(None, None, list(errors_at), start, 1)
    assert gate.untried == () and (gate.passed, gate.steps, gate.stopped) == (plain.passed, plain.steps, plain.stopped)
    assert gate.errors == pytest.approx(plain.errors)
    for ex, ref in zip(attrs.examples, whole.examples):
        assert ex.index == ref.index and ex.scores["ig"] == pytest.approx(ref.scores["ig"])


def test_attribute_batches_examples_with_bounded_padding(bert_tokenizer, monkeypatch):
    """``attribute`` groups examples so that padding is at most ``PADDING`` of a group's
    tokens (the short sentences apart from the long one, though all fit one forward), and each
    example's scores are the ones it gets alone (1e-5)."""
    from probe.analyses.explanation import attributions
    from probe.inputs import budget

    lm = _tiny_lm(bert_tokenizer)
    target = parse_target("loss:-1", lm)
    texts = [TEXTS[0], " ".join([TEXTS[1]] * 4), TEXTS[2]]
    encs = [lm.encode(t) for t in texts]
    seen: list = []
    groups_of = budget.length_groups

    def spy(lengths, adapter, cap, grad=True, waste=None):
        seen.append((list(lengths), waste, groups_of(lengths, adapter, cap, grad, waste=waste)))
        return seen[-1][2]

    monkeypatch.setattr(budget, "length_groups", spy)
    together = attributions.attribute(lm, target, encs, methods=("saliency",))
    lengths, waste, groups = seen[0]
    assert waste == attributions.PADDING == 0.15 and max(lengths) > 3 * min(lengths)
    assert sorted(map(sorted, groups)) == [[0, 2], [1]]  # the long one alone
    for ex, enc in zip(together.examples, encs):
        alone = attributions.attribute(lm, target, [enc], methods=("saliency",)).examples[0]
        np.testing.assert_allclose(ex.scores["saliency"], alone.scores["saliency"], atol=1e-5)
