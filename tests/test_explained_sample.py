"""Which examples faithfulness explains, and how many: a length-stratified draw across the
corpus (analyses/explanation/sample.py) sized by the attribution claim's power
(analyses/claims/attribution.py ``examples_needed``), and IG's steps per example
(analyses/explanation/completeness.py)."""

from __future__ import annotations

import numpy as np
import pytest

from probe.errors import InputError


def test_stratified_sample_covers_every_stratum_and_is_deterministic():
    from probe.analyses.explanation.sample import length_strata, stratified_sample

    rng = np.random.default_rng(3)
    lengths = rng.integers(3, 60, size=500)
    strata = length_strata(lengths, 8)
    assert np.bincount(strata).tolist() == [63, 62, 63, 62, 63, 62, 63, 62]  # equal-count quantile bins
    # every example of a shorter stratum is at most as long as every one of the next
    assert all(lengths[strata == s].max() <= lengths[strata == s + 1].min() for s in range(7))
    picked = stratified_sample(lengths, 40, seed=5, n_strata=8)
    assert len(picked) == 40 and len(set(picked.tolist())) == 40 and (np.diff(picked) > 0).all()
    assert np.bincount(strata[picked], minlength=8).tolist() == [5] * 8  # 40 · 62.5/500 each
    assert stratified_sample(lengths, 40, seed=5, n_strata=8).tolist() == picked.tolist()
    assert stratified_sample(lengths, 40, seed=6, n_strata=8).tolist() != picked.tolist()
    for n in (3, 8, 9, 13, 71):  # fewer examples than strata: one per stratum, still all covered
        got = stratified_sample(lengths, n, seed=0, n_strata=8)
        k = min(n, 8)
        assert len(got) == n and set(length_strata(lengths, k)[got].tolist()) == set(range(k))
    assert stratified_sample(lengths[:7], 20).tolist() == list(range(7))  # n ≥ m: every example


def test_stratified_sample_refuses_bad_input_in_one_line():
    from probe.analyses.explanation.sample import stratified_sample

    for args, words in [(([], 3), "no examples"), (([4, 5], 0), "≥ 1, got 0"), (([4, 5], 1, 0, 0), "strata")]:
        with pytest.raises(InputError, match=words):
            stratified_sample(*args)


def test_on_a_corpus_sorted_by_length_the_draw_reaches_the_long_sentences():
    """The first-N rule explains only the shortest sentences of a corpus sorted by length;
    the stratified draw takes from every length, the longest stratum included."""
    from probe.analyses.explanation.sample import stratified_sample

    lengths = np.sort(np.random.default_rng(0).integers(4, 80, size=2001))
    first = np.arange(16)
    drawn = stratified_sample(lengths, 16, seed=0)
    assert drawn.tolist() != first.tolist()
    assert lengths[first].max() <= 6  # the first 16 are the shortest
    assert lengths[drawn].max() >= np.quantile(lengths, 7 / 8)  # one from the longest eighth
    assert (drawn >= 1751).sum() == 2  # the longest stratum, ranks 1751–2000: 16 · 250/2001 → 2


def test_power_rule_needs_more_examples_for_a_finer_margin_or_a_noisier_pilot():
    """``⌈((z_{1−q} + z_power) · sd / margin)²⌉`` by hand: z_0.8 = 0.8416, z_0.95 = 1.6449."""
    from probe.analyses.claims.statistics import examples_for_power

    assert examples_for_power(0.5, 0.1) == 18  # (0.8416 · 0.5 / 0.1)² = 17.7
    assert examples_for_power(0.5, 0.05) == 71  # (0.8416 · 0.5 / 0.05)² = 70.8: a finer margin
    assert examples_for_power(1.0, 0.1) == 71  # twice the spread: four times the examples
    assert examples_for_power(0.5, 0.1, q=0.05) == 155  # ((1.6449 + 0.8416) · 5)² = 154.6: a test at level q
    assert examples_for_power(0.0, 0.1) == 1
    for bad in [dict(sd=0.5, margin=0.0), dict(sd=-1.0, margin=0.1), dict(sd=0.5, margin=0.1, power=1.0)]:
        with pytest.raises(InputError):
            examples_for_power(**bad)


def test_agreement_rule_is_right_both_ways_at_its_margin_exactly():
    """The 71 examples the agreement claim asks for: the exact binomial of its call
    (significant in ≥ half) is ≥ 80% right at 55% and at 45%; 70 would miss at 45%."""
    from scipy.stats import binom

    from probe.analyses.claims import thresholds as T
    from probe.analyses.claims.attribution import examples_needed, sizing_rule
    from probe.analyses.claims.statistics import detectable_share

    n = examples_needed()
    assert n == 71 and T.AGREEMENT_MARGIN == 0.05 and T.AGREEMENT_SHARE == 0.5
    k = 36  # ⌈0.5 · 71⌉ significant examples make the call
    assert binom.sf(k - 1, n, 0.55) >= 0.8 and binom.sf(k - 1, n, 0.45) <= 0.2
    assert detectable_share(n, 0.5, 0.8) <= 0.55  # the claim's own power statement agrees
    assert binom.sf(35 - 1, 70, 0.45) > 0.2  # an even 70 calls a 45% head agreeing too often
    assert examples_needed(margin=0.1) == 18 < n
    assert sizing_rule(n).startswith("71 = the fewest") and "capped at 256" in sizing_rule(n)


def test_ig_steps_are_the_fewest_of_the_doubling_ladder(bert_tokenizer):
    """Each example's IG steps are the first of 1, 2, 4, 8 whose completeness error is
    within 1%: recomputed at half the steps, every raised example missed it."""
    import torch
    import transformers as T_

    from conftest import _tiny_configs
    from probe.analyses.common.objective import resolve_objective
    from probe.analyses.explanation.attributions import attribute
    from probe.analyses.explanation.completeness import TOLERANCE, gate_ig, relative_errors
    from probe.app.report.bundled import sample_corpus
    from probe.models import ModelAdapter

    torch.manual_seed(0)
    model = T_.BertForSequenceClassification(_tiny_configs(len(bert_tokenizer))["bert"]).eval()
    adapter = ModelAdapter(name="random-bert-classifier", model=model, tokenizer=bert_tokenizer, family="bert")
    target, _ = resolve_objective("logit", adapter, use="explain")
    encs = [adapter.encode(t) for t in sample_corpus(limit=4).texts]
    attrs = attribute(adapter, target, encs, methods=("ig",), n_steps=1)
    attrs, gate = gate_ig(adapter, target, encs, attrs, 1)
    steps = np.array(gate.steps)
    assert attrs.settings["ig_steps_per_example"] == steps.tolist()
    assert attrs.completeness()["steps"].tolist() == steps.tolist()
    assert len(set(steps.tolist())) > 1  # some examples needed more steps than others
    assert (relative_errors(attrs) <= TOLERANCE).all() and len(gate.passed) == 4
    for s in set(steps.tolist()) - {1}:  # the examples raised to s steps, at s/2: all beyond 1%
        raised = [encs[i] for i in np.flatnonzero(steps == s)]
        assert (relative_errors(attribute(adapter, target, raised, methods=("ig",), n_steps=s // 2)) > TOLERANCE).all()
    said = gate.to_dict()
    assert said["start_steps"] == 1 and said["max_steps"] == steps.max() == 4
    assert said["median_steps"] == np.median(steps) and sum(said["steps_counts"].values()) == 4


def test_attribution_claim_counts_only_the_examples_its_agreement_test_used():
    """Of 40 explained, 2 beyond IG's completeness and 5 too short for a Kendall test: the
    claim counts 33, and its power statement is that of 33."""
    import pandas as pd

    from probe.analyses.claims.attribution import attribution_claims
    from probe.analyses.claims.statistics import detectable_share

    verdict = pd.DataFrame({"layer": [0], "head": [0], "tau_ig": [0.1], "tau_ig_significant": [0.2]})
    info = {"target": "logit", "n_examples": 40, "ig_gate": {"excluded": 2}, "agreement_skipped_short": 5}
    c = attribution_claims([(0, 0)], verdict, info)[(0, 0)]
    assert c.count == 33 and c.extra["detectable"] == detectable_share(33) != detectable_share(40)
    assert "of 33 examples" in c.reason
