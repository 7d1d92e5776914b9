"""A necessity claim holds only if it holds under each removal baseline (issue 58): one
that holds under per-kind means and not under one mean over all positions is reported
"depends on the baseline" with each value, side by side."""

from __future__ import annotations

import numpy as np
import pytest


def _sweep(one_mean_of_second: float):
    from probe.analyses.claims.removal import RemovalSweep

    rng = np.random.default_rng(0)
    n = 24
    big = 0.05 + 0.005 * rng.standard_normal((2, n))
    harm = {
        "mean": big,
        "one-mean": np.stack([big[0] + 0.001, one_mean_of_second + 0.0005 * rng.standard_normal(n)]),
        "resample": big + 0.002,
    }
    return RemovalSweep(
        units=(((0, 0),), ((0, 1),)), objective="similarity-structure", units_text="1 − ρ", harm=harm,
        measures={}, corpus={}, n=n, describe="similarity structure",
    )  # fmt: skip


def test_a_claim_that_fails_one_baseline_depends_on_it_with_each_value():
    from probe.analyses.claims.claim import DEPENDS, STATUSES
    from probe.analyses.claims.evidence import claim_evidence
    from probe.analyses.claims.held_heads import confirm_baselines
    from probe.analyses.claims.necessity import necessity_claims
    from probe.analyses.claims.summary import summary_sentence

    assert DEPENDS in STATUSES
    sweep = _sweep(0.002)
    claims = necessity_claims(sweep)
    assert claims[(0, 0)].holds and claims[(0, 1)].holds  # under the default, per-kind means
    got = confirm_baselines(claims, (sweep,), tests=72)
    assert got[(0, 0)].status == "holds"
    c = got[(0, 1)]
    assert c.status == DEPENDS and not c.holds
    side = c.extra["baselines"]
    assert set(side) == {"mean", "one-mean", "resample"}
    assert side["mean"]["holds"] and side["resample"]["holds"] and not side["one-mean"]["holds"]
    assert side["one-mean"]["effect"] == pytest.approx(sweep.harm["one-mean"][1].mean())
    assert side["mean"]["effect"] == pytest.approx(sweep.harm["mean"][1].mean())
    assert "not under one mean over all positions (+0.002" in c.reason
    ev = claim_evidence("necessity", c)
    assert ev.status == DEPENDS
    assert "one mean over all positions +0.002" in ev.text and "per-kind means +0.05" in ev.text
    assert ev.numbers["baseline:one-mean"] == pytest.approx(side["one-mean"]["effect"])
    assert ev.numbers["baseline_holds:one-mean"] == 0.0 and ev.numbers["baseline_holds:mean"] == 1.0
    assert "under some baselines only" in summary_sentence({"necessity": c})


def test_the_head_page_shows_the_baselines_side_by_side():
    from probe.analyses.claims.evidence import claim_evidence
    from probe.analyses.claims.held_heads import confirm_baselines
    from probe.analyses.claims.necessity import necessity_claims
    from probe.app.report.claims_html import STATUS_CLASS, baselines_table

    sweep = _sweep(0.002)
    c = confirm_baselines(necessity_claims(sweep), (sweep,), tests=72)[(0, 1)]
    html = baselines_table(claim_evidence("necessity", c))
    assert "<th>per-kind means</th><th>one mean over all positions</th><th>resample (same kind)</th>" in html
    assert "<td>+0.002" in html and "<td>holds</td><td>does not hold</td><td>holds</td>" in html
    assert STATUS_CLASS[c.status]
    held = confirm_baselines(necessity_claims(_sweep(0.05)), (_sweep(0.05),), tests=72)
    assert all(x.status == "holds" for x in held.values())


def test_the_confirmation_counts_every_head_in_its_false_discovery_rate():
    """The heads not run again count as p = 1 in Benjamini–Hochberg: a head just above the
    floor on a few examples passes alone and not among 72."""
    from probe.analyses.claims.baselines import confirm_sweep
    from probe.analyses.claims.claim import Claim
    from probe.analyses.claims.removal import RemovalSweep

    rng = np.random.default_rng(1)
    harm = 0.021 + 0.004 * rng.random((1, 10))
    sweep = RemovalSweep(
        units=(((0, 0),),), objective="similarity-structure", units_text="", measures={}, corpus={}, n=10,
        harm={"mean": harm, "one-mean": harm, "resample": harm},
    )  # fmt: skip
    claim = {(0, 0): Claim("necessity", "holds", effect=float(harm.mean()), extra={"bar": 0.02})}
    assert confirm_sweep(claim, sweep, tests=1)[(0, 0)].status == "holds"
    assert confirm_sweep(claim, sweep, tests=72)[(0, 0)].status == "depends on the baseline"
