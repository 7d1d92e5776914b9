"""The pattern claims take the token features the roles section already summed over the same
held maps (issue 57: sections share what they compute), with the same evidence."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

TEXTS = [
    "The keys to the cabinet are on the table.",
    "She said that it was fine, and left.",
    "A dog barked at the moon all night.",
    "Birds sing in the tall trees at dawn.",
    "We met them (twice) in Paris last year.",
    "Nobody knew why the train was late.",
]


@pytest.fixture(scope="module")
def maps(minilm):
    from probe.runs.capture import capture

    return capture(minilm, TEXTS)


def _roles_sums(maps):
    from probe.app.registry.analyses import roles
    from probe.runs.streaming import feed_maps

    accs = roles.accumulators(None, None)
    feed_maps(list(accs.values()), maps)
    return accs


def test_pattern_evidence_from_the_roles_sums_equals_its_own(maps, monkeypatch):
    from probe.analyses.claims.pattern import PatternFeatures
    from probe.analyses.patterns import role_features
    from probe.runs.streaming import feed_maps

    own = PatternFeatures()
    feed_maps([own], maps)
    calls = []
    roles = _roles_sums(maps)
    update = role_features.HeadFeatureAccumulator.update
    monkeypatch.setattr(  # the shared evidence sums nothing again
        role_features.HeadFeatureAccumulator, "update", lambda *a, **k: calls.append(1) or update(*a, **k)
    )
    shared = PatternFeatures(roles["token"], roles["punct"])
    feed_maps([shared], maps)
    assert calls == []
    a, b = own.result(), shared.result()
    assert a.values.shape == b.values.shape and np.isfinite(a.values).any()
    np.testing.assert_array_equal(a.values, b.values)
    np.testing.assert_array_equal(a.rows, b.rows)
    assert a.punct_chance == b.punct_chance and a.special_names == b.special_names
    assert (a.layers, a.n_heads) == (b.layers, b.n_heads)


def test_the_claims_take_the_roles_sums_only_when_filled_and_kept_per_example(maps):
    from probe.analyses.claims.pattern import PatternFeatures
    from probe.analyses.patterns.role_features import LayerwiseHeadFeatures, PunctuationShare
    from probe.app.registry.analyses.claims import summed_by_roles
    from probe.runs.streaming import feed_maps

    def ctx(streamed):
        return SimpleNamespace(report=SimpleNamespace(streamed=streamed))

    roles = _roles_sums(maps)
    assert summed_by_roles(ctx({"roles": roles})) == (roles["token"], roles["punct"])
    assert summed_by_roles(ctx({})) is None  # the roles section has not run (or an engine declares first)
    unfilled = {"token": LayerwiseHeadFeatures("token", keep_examples=True), "punct": PunctuationShare()}
    assert summed_by_roles(ctx({"roles": unfilled})) is None
    not_kept = {"token": LayerwiseHeadFeatures("token"), "punct": PunctuationShare()}
    feed_maps(list(not_kept.values()), maps)
    assert summed_by_roles(ctx({"roles": not_kept})) is None
    assert PatternFeatures(roles["token"], roles["punct"]).shared and not PatternFeatures().shared
