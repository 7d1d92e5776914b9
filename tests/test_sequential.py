"""The audit's miss-rate bound and the sequential test, on simulated heads whose effects
are known: coverage of the Clopper–Pearson bound, the false-discovery rate of e-BH over
betting e-processes (≤ q over many runs), power on true effects, early stopping."""

from __future__ import annotations

import numpy as np
import pytest

from probe.analyses.necessity.confirm import miss_rate_bound, plan_confirmation
from probe.analyses.necessity.sequential import BettingTest, e_bh, sequential_test
from probe.errors import InputError


def test_miss_rate_bound_closed_form():
    # no miss among 20: the bound solves (1 − p)^20 = 0.05
    assert miss_rate_bound(20, 0) == pytest.approx(1 - 0.05 ** (1 / 20))
    assert miss_rate_bound(0, 0) == 1.0
    assert miss_rate_bound(10, 10) == 1.0
    with pytest.raises(InputError):
        miss_rate_bound(3, 4)


def test_miss_rate_bound_covers_the_true_rate_of_simulated_screens():
    """A screen rules out 200 heads of which a known fraction would have been necessary;
    the audit samples 25 of them: the 95% bound covers the true rate in ≥ 95% of runs."""
    for rate in (0.0, 0.02, 0.1, 0.3):
        missed = np.zeros(200, bool)
        missed[: int(rate * 200)] = True
        covered = []
        for run in range(400):
            plan = plan_confirmation(np.zeros(200), floor=1.0, audit=0.125, seed=run)  # every head ruled out
            assert len(plan.audit) == 25 and not plan.confirm
            k = int(missed[list(plan.audit)].sum())
            covered.append(miss_rate_bound(25, k) >= rate)
        assert np.mean(covered) >= 0.95, rate
    # and the bound is not vacuous: a perfect audit of 25 bounds the rate under 12%
    assert miss_rate_bound(25, 0) < 0.12


def test_plan_confirmation():
    upper = np.array([0.5, 0.01, 0.2, np.nan, 0.0, 0.03])
    plan = plan_confirmation(upper, floor=0.1, audit=0.5, min_audit=1, seed=0)
    assert plan.confirm == (0, 2, 3)  # a NaN bound is confirmed, never ruled out
    assert plan.ruled_out == (1, 4, 5) and len(plan.audit) == 2 and set(plan.audit) <= {1, 4, 5}
    top = plan_confirmation(upper[[0, 1, 2, 4, 5]], top=2, audit=0.0, min_audit=0)
    assert top.confirm == (0, 2) and top.audit == ()
    with pytest.raises(InputError, match="not both"):
        plan_confirmation(upper, floor=0.1, top=2)


def test_e_bh():
    # m = 4, q = 0.5: thresholds m/(q k) = 8, 4, 2.67, 2
    assert e_bh([9.0, 0.1, 4.5, 1.0], 0.5).tolist() == [True, False, True, False]
    assert e_bh([3.0, 3.0, 3.0, 0.0], 0.5).tolist() == [True, True, True, False]
    assert not e_bh([7.0, 1.0, 1.0, 1.0], 0.5).any()


def test_wealth_is_a_supermartingale_under_the_null():
    """Every path of 10 Bernoulli harms enumerated (one head per path): the expected wealth
    is exactly 1 at ``E x = m₀`` (a fair bet), under 1 below it, and ``K'`` the same
    mirrored; so ``K`` is an e-value at any stopping time (Ville)."""
    t, m0 = 10, 0.3
    paths = ((np.arange(2**t)[:, None] >> np.arange(t)) & 1).astype(float)  # [2^t, t]
    for p, want in ((0.3, "fair"), (0.15, "under"), (0.5, "over")):
        test = BettingTest(len(paths), m0)
        test.update(paths.T)
        k = paths.sum(1)
        weight = p**k * (1 - p) ** (t - k)
        e, e_against = (weight * test.wealth).sum(), (weight * test.wealth_against).sum()
        if want == "fair":
            assert e == pytest.approx(1.0, abs=1e-9) and e_against == pytest.approx(1.0, abs=1e-9)
        elif want == "under":
            assert e < 1.0 - 1e-6 and e_against > 1.0
        else:
            assert e > 1.0 and e_against < 1.0 - 1e-6
    assert (test.wealth > 0).all() and (test.wealth_against > 0).all()


def _simulate(means: np.ndarray, n: int, rng, lo=-1.0, hi=1.0):
    """Harms of heads with mean ``means`` (original units): Bernoulli draws scaled to [lo, hi]."""
    p = (means - lo) / (hi - lo)
    x = rng.random((len(means), n)) < p[:, None]
    h = lo + (hi - lo) * x
    return lambda heads, examples: h[np.ix_(heads, examples)]


def test_sequential_test_controls_fdr_and_finds_true_effects():
    """40 heads: 24 exactly at the floor (the hardest null), 6 under it, 10 over it by 0.3;
    over 60 runs the false-discovery proportion averages ≤ q, most true effects are found
    and the clear heads stop before the corpus is used up."""
    q, floor, n = 0.1, 0.0, 800
    means = np.r_[np.zeros(24), np.full(6, -0.4), np.full(10, 0.3)]
    true = means > floor
    rng = np.random.default_rng(2)
    fdp, power, used_true, used_clear_null = [], [], [], []
    for _ in range(60):
        r = sequential_test(_simulate(means, n, rng), len(means), n, floor=floor, bounds=(-1, 1), q=q, block=32)
        called = r.necessary
        fdp.append((called & ~true).sum() / max(1, called.sum()))
        power.append((called & true).sum() / true.sum())
        used_true.append(r.n_used[true].mean())
        used_clear_null.append(r.n_used[24:30].mean())
    assert np.mean(fdp) <= q
    assert np.mean(power) >= 0.8
    assert np.mean(used_true) < 0.6 * n  # decided early
    assert np.mean(used_clear_null) < 0.6 * n  # stopped as not necessary early
    s = r.summary()
    assert s["examples_used"] < s["examples_exhaustive"]


def test_a_null_head_far_under_the_floor_is_stopped_as_not_necessary():
    rng = np.random.default_rng(3)
    means = np.array([-0.6, 0.6])
    r = sequential_test(_simulate(means, 400, rng), 2, 400, floor=0.0, bounds=(-1, 1), q=0.05, block=16)
    assert r.decision == ("not necessary", "necessary")
    assert (r.n_used < 400).all()
    assert r.mean[0] < 0 < r.mean[1]


def test_sequential_test_refuses_bounds_without_the_floor():
    with pytest.raises(InputError, match="contain the floor"):
        sequential_test(lambda h, e: np.zeros((len(h), len(e))), 2, 10, floor=2.0, bounds=(0, 1))
