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
    from probe.analyses.explanation import completeness, faithfulness
    from probe.analyses.explanation.attributions import attribute

    lm = _tiny_lm(bert_tokenizer)
    target = parse_target("loss:6", lm)
    monkeypatch.setattr(completeness, "TOLERANCE", 0.0)
    calls: list = []

    def spy(adapter, objective, encs, *, methods, **kw):
        calls.append((adapter.name, tuple(methods)))
        return attribute(adapter, objective, encs, methods=methods, **kw)

    monkeypatch.setattr(faithfulness, "attribute", spy)
    rep = faithfulness.run_faithfulness(lm, as_corpus(TEXTS), target, methods=("ig",), n_steps=2, permute=False)

    why = rep.info["reference_why"]
    assert rep.info["reference"] == "blank_out" and rep.verdict.attrs["reference"] == "blank_out"
    assert why.startswith("integrated gradients missed 1% completeness on all 5 examples at up to ")
    assert why.endswith(": the reference is blank-out (leave-one-out occlusion), computed for it")
    assert rep.info["ig_gate"]["excluded"] == 5 and rep.info["ig_gate"]["n"] == 5
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
    # the null model: blank-out only, no IG (the gate ran once, on the model itself)
    null = rep.info["null_agreement"]
    assert null["reference"] == "blank_out" and null["n"] == 5
    assert calls[0] == ("tiny-lm", ("ig",)) and [m for _, m in calls[1:]] == [("blank_out",)]
    assert calls[1][0] != "tiny-lm"
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
    failed = IGGate(passed=(), excluded=(0, 1), steps=(16, 32), errors=(0.5, 0.2), start=8)
    ref, why = choose_reference(("ig", "saliency"), failed)
    assert ref == "saliency" and "on all 2 examples at up to 32 steps: the reference is saliency" in why
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
