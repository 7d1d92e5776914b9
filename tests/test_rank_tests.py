"""The agreement test's vectorised rank correlations equal scipy's, pair by pair."""

import warnings

import numpy as np
import pytest
from scipy.stats import kendalltau, spearmanr

from probe.analyses.explanation.rank_tests import kendall_exact_p, rank_tests


def _scipy(x, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t, r = kendalltau(x, y), spearmanr(x, y)
    return t.statistic, t.pvalue, r.statistic, r.pvalue


@pytest.mark.parametrize("w", [3, 5, 12, 33, 34, 61])
@pytest.mark.parametrize("ties", [False, True])
def test_every_pair_equals_scipy(w, ties):
    rng = np.random.default_rng(w + 100 * ties)
    a = rng.normal(size=(7, w))
    b = a[:4] * 0.6 + rng.normal(size=(4, w))  # some correlated rows: small p-values
    if ties:  # rounded scores tie; an attention row of zeros but one
        a, b = np.round(a, 0), np.round(b, 1)
        a[0] = 0.0
        a[0, 1] = 1.0
    got = rank_tests(a, b)
    for i in range(len(a)):
        for j in range(len(b)):
            want = _scipy(a[i], b[j])
            have = tuple(v[i, j] for v in got)
            np.testing.assert_allclose(have, want, rtol=1e-9, atol=1e-12, equal_nan=True, err_msg=f"{w=} {i=} {j=}")


def test_perfect_and_reversed_orders_and_constant_rows():
    x = np.arange(10.0)
    got = rank_tests(np.stack([x, -x, np.ones(10)]), np.stack([x, x**3]))
    assert got.tau[0, 0] == pytest.approx(1.0) and got.tau[1, 0] == pytest.approx(-1.0)
    assert got.rho[1, 1] == pytest.approx(-1.0) and got.rho[0, 1] == pytest.approx(1.0)
    np.testing.assert_allclose(got.tau_p[0, 0], kendalltau(x, x).pvalue, rtol=1e-12)
    assert got.rho_p[0, 0] < 1e-30 and spearmanr(x, x).pvalue < 1e-30  # 0 here, 7e-64 in scipy (its r reads 1 − 2e-16)
    assert np.isnan([v[2] for v in got]).all()  # a constant row has no ranking: NaN, as scipy
    nan_row = rank_tests(np.array([[1.0, np.nan, 3.0, 4.0]]), np.array([[1.0, 2.0, 3.0, 4.0]]))
    assert np.isnan(nan_row.tau).all() and np.isnan(nan_row.rho_p).all()


def test_exact_p_is_the_permutation_distribution():
    from itertools import permutations

    n = 6
    inv = [sum(p[i] > p[j] for i in range(n) for j in range(i + 1, n)) for p in permutations(range(n))]
    for c in range(0, 16):
        lo = min(c, 15 - c)
        want = min(1.0, 2 * np.mean(np.array(inv) <= lo)) if 4 * c != n * (n - 1) else 1.0
        assert kendall_exact_p(n, c) == pytest.approx(want, rel=1e-12)


def test_refuses_rows_of_different_words():
    with pytest.raises(ValueError, match="same words"):
        rank_tests(np.zeros((2, 5)), np.zeros((2, 6)))


def test_exact_p_of_many_items_takes_scipys_scaled_recursion():
    from scipy.stats import _mstats_basic  # the reference: scipy's own exact p (private)

    for n, c in ((12, 20), (170, 3), (171, 3), (200, 40)):
        assert kendall_exact_p(n, c) == pytest.approx(_mstats_basic._kendall_p_exact(n, c), rel=1e-9, abs=1e-300)
