"""Stop when decided: an anytime-valid test per head, sentences added in blocks.

Each head's claim "its mean harm exceeds the floor" is tested by **testing by betting**
(Waudby-Smith & Ramdas 2023, "Estimating means of bounded random variables by betting",
JRSS-B; Shafer 2021): harms are clipped to known bounds ``[lo, hi]`` and rescaled to
``x ∈ [0, 1]``, the floor to ``m₀``, and two wealth processes run over the examples::

    K_t  = Π_{i≤t} (1 + λ_i (x_i − m₀))     H₀: E x ≤ m₀  (the head is not necessary)
    K'_t = Π_{i≤t} (1 + λ'_i (m₀ − x_i))    H₀': E x ≥ m₀ (the head is necessary)

with predictable bets ``λ_i, λ'_i ≥ 0`` from the examples before ``i`` (aGRAPA: the
running ``(μ̂ − m₀)/(σ̂² + (μ̂ − m₀)²)``, truncated to ``[0, c/m₀]`` resp. ``[0, c/(1 − m₀)]``,
``c = 1/2``). Under ``H₀`` ``K`` is a nonnegative supermartingale, so by Ville's
inequality ``P(sup_t K_t ≥ 1/α) ≤ α`` and ``K_τ`` is an e-value at any stopping time ``τ``,
however the stopping was chosen (optional stopping: data-dependent, per head).

Across heads the false-discovery rate is controlled by **e-BH** (Wang & Ramdas 2022,
"False discovery rate control with e-values", JRSS-B): with ``m`` heads and e-values
``e_j = K_j(τ_j)``, reject the ``k*`` largest, ``k* = max{k : e_(k) ≥ m / (q k)}``; FDR ≤ q
under any dependence between heads (they share sentences). After each block a head stops

* as **necessary** when e-BH over the heads' e-values *now* rejects it — a stopped head's
  frozen at its stop, 0 for one stopped as not necessary — (alone: ``K ≥ m/q``; with ``r``
  heads rejected together, ``K ≥ m/(q r)``): every head of a rejected set ``R`` stops, so
  its e-values stay ``≥ m/(q |R|)`` and the final e-BH, whose set only grows, rejects them
  all (a head rejected with many others stops sooner than the ``m/q`` a lone head needs);
* as **not necessary** when ``K' ≥ 1/α'`` (its own anytime-valid test at level ``α'``,
  default ``q``: the chance of stopping a head whose mean harm reaches the floor is ``≤ α'``);
* **undecided** when the corpus is used up; e-BH on every head's final e-value (0 for the
  heads stopped as not necessary) then decides which are called necessary: the heads
  stopped early are among them, and the rejected set is e-BH's own on e-values taken at
  stopping times (FDR ≤ q).

Several **families** (the heads in two removal modes, the redundancy groups), each with
its own floor and e-BH, can share one pass (:func:`sequential_families`,
:func:`sequential_removals`): a block goes to every family that still has an undecided head,
and its clean forward runs once for all of them.

**Corpus-level objectives** (the similarity structure: a sentence's harm is over the
others in its block, so the harms of one block's sentences are dependent) are tested one
**block** at a time (:func:`sequential_block_test`): each block of random sentences gives
an estimate ``T_b`` of the head's mean harm (size-corrected,
:func:`probe.analyses.common.similarity.block_row_harm`) and its jackknife variance
``v_b``; with ``S_t = Σ_b (T_b − floor)`` and ``V_t = Σ_b v_b`` the one-sided normal
mixture (Robbins 1970; Howard, Ramdas, McAuliffe & Sekhon 2021, "Time-uniform, nonparametric,
nonasymptotic confidence sequences", Ann. Statist.)::

    E_t = ∫_0^∞ exp(λ S_t − λ² V_t / 2) dF(λ) = 2 exp(S_t² / 2a) Φ(S_t / √a) / √(1 + c V_t),  a = V_t + 1/c

with ``F`` the half-normal of variance ``c = (s / floor)²`` (``s`` :data:`MIXTURE_SCALE`) is
a nonnegative supermartingale under ``H₀`` when the ``T_b`` are Gaussian with variances
``v_b`` (each ``exp(λS − λ²V/2)``, ``λ ≥ 0``, is), so it is an e-process there: asymptotically
valid (the block means of 64 sentences are close to Gaussian and ``v_b`` is estimated,
Waudby-Smith, Arbour, Sinha, Kennedy & Ramdas 2024, "Time-uniform central limit theory and
asymptotic confidence sequences", Ann. Statist.). ``E'_t`` is the same with ``−S_t``. The
stops and e-BH are the betting test's.

The examples must come in random order (exchangeable): :func:`sequential_necessity`
shuffles them with ``seed`` and runs the exact removals of the heads still undecided, one
block at a time (:func:`probe.analyses.claims.removal.run_removal_batches`, the head means
of the whole corpus). The test is of the mean of the clipped harm: clipping at ``hi``
only lowers it (conservative for "necessary"), clipping at ``lo`` raises it (a head whose
removal helps some sentences by more than ``|lo|`` is credited with less of that help).
Choose the bounds before the data, around the floor: the bets are capped by the range
(``c/(1 − m₀)``), so a head just under the floor on a wide range takes many sentences to
be called not necessary (bench/bench_sequential.py uses ``(−2, 20) × floor``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Optional, Sequence, TYPE_CHECKING

if TYPE_CHECKING:
    from probe.analyses.common.objective import Objective

import numpy as np

from probe.errors import InputError

__all__ = [
    "Family",
    "RemovalTest",
    "sequential_families",
    "sequential_removals",
    "BettingTest",
    "MixtureTest",
    "SequentialResult",
    "e_bh",
    "sequential_test",
    "sequential_block_test",
    "sequential_necessity",
    "floored_block_variance",
    "as_units",
    "MIXTURE_SCALE",
]

#: the largest fraction of the wealth a bet may stake (Waudby-Smith & Ramdas 2023's c)
MAX_BET = 0.5
#: the block test's mixing scale ``s``: the half-normal over ``λ`` has standard deviation
#: ``s / floor``. Chosen on MiniLM's EWT harms (first 512 sentences, blocks of 64): 10 used the
#: fewest removals of 3, 10, 30, 100, 300 (18% of the exhaustive sweep's, mean mode), all five
#: deciding every head they decided as the 512-sentence harm does
MIXTURE_SCALE = 10.0


class BettingTest:
    """The two wealth processes of ``m`` heads (module docstring), updated one example at a
    time: ``update(x [t, m])``; ``active [m]`` bool masks which heads take the examples.

    Attributes:
        wealth, wealth_against: ``[m]`` ``K`` and ``K'``; count: ``[m]`` examples taken.
    """

    def __init__(self, m: int, m0: float):
        if not 0.0 < m0 < 1.0:
            raise InputError(f"the floor must lie strictly inside the harm bounds (rescaled: {m0:.3g})")
        self.m0 = m0
        self.wealth = np.ones(m)
        self.wealth_against = np.ones(m)
        self.count = np.zeros(m, int)
        self._sum = np.zeros(m)
        self._sq = np.zeros(m)

    def _bets(self) -> tuple:
        t = self.count
        mu = (0.5 + self._sum) / (t + 1)  # shrunk towards 1/2, predictable
        var = (0.25 + self._sq) / (t + 1)
        d = mu - self.m0
        lam = d / (var + d * d)
        return np.clip(lam, 0.0, MAX_BET / self.m0), np.clip(-lam, 0.0, MAX_BET / (1.0 - self.m0))

    def update(self, x: np.ndarray, active: Optional[np.ndarray] = None) -> None:
        x = np.asarray(x, np.float64)
        x = x.reshape(len(x), -1)
        on = np.ones(x.shape[1], bool) if active is None else np.asarray(active, bool)
        for row in x:
            lam, lam_against = self._bets()
            self.wealth = np.where(on, self.wealth * (1.0 + lam * (row - self.m0)), self.wealth)
            self.wealth_against = np.where(
                on, self.wealth_against * (1.0 + lam_against * (self.m0 - row)), self.wealth_against
            )
            mu = (0.5 + self._sum) / (self.count + 1)
            self._sq = np.where(on, self._sq + (row - mu) ** 2, self._sq)
            self._sum = np.where(on, self._sum + row, self._sum)
            self.count = self.count + on


class MixtureTest:
    """The block test's two normal-mixture e-processes of ``m`` heads (module docstring),
    updated one block at a time: ``update(estimates [m], variances [m], sizes [m], active [m])``.

    Attributes:
        log_wealth, log_wealth_against: ``[m]`` ``log E`` and ``log E'``; count: ``[m]``
        examples taken; blocks: ``[m]`` blocks taken; mean: ``[m]`` the examples-weighted
        mean of the estimates; variance: ``[m]`` the variance of ``mean``.

    Raises:
        InputError: a floor that is not positive (the scale is in its units).
    """

    def __init__(self, m: int, floor: float, scale: float = MIXTURE_SCALE):
        if not floor > 0.0 or not scale > 0.0:
            raise InputError(f"the block test needs a positive floor and scale; got floor={floor}, scale={scale}")
        self.floor = float(floor)
        self.c = (float(scale) / self.floor) ** 2
        self.excess = np.zeros(m)  # S_t
        self.var = np.zeros(m)  # V_t
        self.count = np.zeros(m, int)
        self.blocks = np.zeros(m, int)
        self._weighted = np.zeros(m)
        self._weighted_var = np.zeros(m)

    def _log_e(self, s: np.ndarray) -> np.ndarray:
        from scipy.special import log_ndtr

        a = self.var + 1.0 / self.c
        return np.log(2.0) + s * s / (2.0 * a) + log_ndtr(s / np.sqrt(a)) - 0.5 * np.log1p(self.c * self.var)

    @property
    def log_wealth(self) -> np.ndarray:
        return self._log_e(self.excess)

    @property
    def log_wealth_against(self) -> np.ndarray:
        return self._log_e(-self.excess)

    @property
    def mean(self) -> np.ndarray:
        return np.where(self.count > 0, self._weighted / np.maximum(self.count, 1), np.nan)

    @property
    def variance(self) -> np.ndarray:
        return np.where(self.count > 0, self._weighted_var / np.maximum(self.count, 1) ** 2, np.nan)

    def update(self, estimates, variances, sizes, active: Optional[np.ndarray] = None) -> None:
        est, var = np.asarray(estimates, np.float64), np.asarray(variances, np.float64)
        size = np.broadcast_to(np.asarray(sizes, int), est.shape)
        on = np.ones(len(est), bool) if active is None else np.asarray(active, bool)
        self.excess = np.where(on, self.excess + np.nan_to_num(est - self.floor), self.excess)
        self.var = np.where(on, self.var + np.nan_to_num(var), self.var)
        self._weighted = np.where(on, self._weighted + np.nan_to_num(est) * size, self._weighted)
        self._weighted_var = np.where(on, self._weighted_var + np.nan_to_num(var) * size * size, self._weighted_var)
        self.count = self.count + np.where(on, size, 0)
        self.blocks = self.blocks + on


def e_bh(values, q: float) -> np.ndarray:
    """``[m]`` bool: the e-BH rejections of e-values ``values`` at level ``q`` (Wang & Ramdas 2022)."""
    e = np.asarray(values, np.float64)
    m = len(e)
    if m == 0:
        return np.zeros(0, bool)
    order = np.argsort(-e, kind="stable")
    ks = np.arange(1, m + 1)
    ok = np.flatnonzero(e[order] >= m / (q * ks))
    out = np.zeros(m, bool)
    if len(ok):
        out[order[: ok[-1] + 1]] = True
    return out


@dataclass(frozen=True)
class SequentialResult:
    """Per head: ``decision`` (``necessary`` | ``not necessary`` | ``undecided``; ``necessary``
    covers heads stopped early and heads e-BH rejects at the end), ``n_used`` (examples
    taken before it stopped), ``e_value`` (``K`` at its stop), ``e_against`` (``K'``),
    ``mean`` (its clipped harms' mean), and the settings."""

    decision: tuple
    n_used: np.ndarray
    e_value: np.ndarray
    e_against: np.ndarray
    mean: np.ndarray
    floor: float
    bounds: tuple
    q: float
    n: int
    #: ``betting`` (per-example harms) or ``block mixture`` (:func:`sequential_block_test`)
    method: str = "betting"
    #: ``[m]`` the variance of ``mean`` (the block test's jackknife), else ``None``
    variance: Optional[np.ndarray] = None

    @property
    def necessary(self) -> np.ndarray:
        return np.array([d == "necessary" for d in self.decision])

    def summary(self) -> dict:
        dec = list(self.decision)
        return {
            "heads": len(dec),
            "necessary": dec.count("necessary"),
            "not_necessary": dec.count("not necessary"),
            "undecided": dec.count("undecided"),
            "examples_used": int(self.n_used.sum()),
            "examples_exhaustive": len(dec) * self.n,
            "q": self.q,
            "method": self.method,
        }


@dataclass(frozen=True)
class Family:
    """One family of hypotheses decided in a shared pass (:func:`sequential_families`): ``m``
    heads (or groups) tested against ``floor``, e-BH over ``tests`` hypotheses (default
    ``m``) at ``q``; ``alpha_against`` the level of a "not necessary" stop (default ``q``);
    ``bounds`` the harm's a-priori range (the betting test's); ``scale`` the block test's
    mixing scale (:data:`MIXTURE_SCALE`)."""

    m: int
    floor: float
    q: float = 0.05
    tests: Optional[int] = None
    alpha_against: Optional[float] = None
    bounds: Optional[tuple] = None
    scale: float = MIXTURE_SCALE


class _Decider:
    """One family's test and stops as a pass takes blocks (module docstring)."""

    def __init__(self, family: Family, kind: str):
        f = family
        self.family, self.kind = f, kind
        self.total = _check_levels(f.q, f.m, f.tests)
        self.alpha_against = f.q if f.alpha_against is None else f.alpha_against
        if kind == "betting":
            if f.bounds is None:
                raise InputError("the betting test needs the harm's a-priori bounds (bounds=(lo, hi))")
            lo, hi = map(float, f.bounds)
            if not lo < f.floor < hi:
                raise InputError(f"the harm bounds {f.bounds} must contain the floor {f.floor} strictly")
            self.lo, self.hi = lo, hi
            self.test: Any = BettingTest(f.m, (f.floor - lo) / (hi - lo))
        else:
            self.test = MixtureTest(f.m, f.floor, f.scale)
        self.state = np.array(["undecided"] * f.m, dtype=object)

    def live(self) -> np.ndarray:
        return np.flatnonzero(self.state == "undecided")

    def _log_e(self, against: bool = False) -> np.ndarray:
        if self.kind == "betting":
            with np.errstate(divide="ignore"):
                return np.log(self.test.wealth_against if against else self.test.wealth)
        return self.test.log_wealth_against if against else self.test.log_wealth

    def take(self, live: np.ndarray, values: Any, size: int) -> None:
        """One block's values of the ``live`` heads: harms ``[k, b]`` (betting) or
        ``(estimates [k], variances [k])`` (the block test)."""
        m, on = self.family.m, self.state == "undecided"
        if self.kind == "betting":
            h = np.asarray(values, np.float64).reshape(len(live), size)
            x = np.full((size, m), np.nan)
            x[:, live] = ((np.clip(h, self.lo, self.hi) - self.lo) / (self.hi - self.lo)).T
            self.test.update(np.nan_to_num(x, nan=self.test.m0), on)
        else:
            est, var = (np.asarray(v, np.float64).reshape(len(live)) for v in values)
            full_est, full_var = np.full(m, np.nan), np.full(m, np.nan)
            full_est[live], full_var[live] = est, var
            self.test.update(full_est, full_var, size, on)
        # e-BH over the family's e-values now (a stopped head's frozen at its stop, 0 for one
        # stopped as not necessary): every head it rejects stops as necessary
        now = np.where(self.state == "not necessary", 0.0, np.exp(np.minimum(self._log_e(), 700.0)))
        self.state[on & e_bh(np.concatenate([now, np.zeros(self.total - m)]), self.family.q)[:m]] = "necessary"
        against = self._log_e(against=True) >= np.log(1.0 / self.alpha_against)
        self.state[on & (self.state == "undecided") & against] = "not necessary"

    def result(self, n: int) -> SequentialResult:
        f, state = self.family, self.state.copy()
        if self.kind == "betting":
            e_value, e_against = self.test.wealth.copy(), self.test.wealth_against.copy()
        else:
            e_value = np.exp(np.minimum(self.test.log_wealth, 700.0))
            e_against = np.exp(np.minimum(self.test.log_wealth_against, 700.0))
        # e-BH on e-values that are 0 for the heads stopped as not necessary (a smaller
        # e-value is still one), so the rejected set is e-BH's own: self-consistent, FDR ≤ q
        e = np.where(state == "not necessary", 0.0, e_value)
        state[e_bh(np.concatenate([e, np.zeros(self.total - f.m)]), f.q)[: f.m]] = "necessary"
        common = dict(decision=tuple(state.tolist()), n_used=self.test.count.copy(), e_value=e_value,
                      e_against=e_against, floor=float(f.floor), q=f.q, n=n)  # fmt: skip
        if self.kind == "betting":
            mean = self.lo + (self.hi - self.lo) * self.test._sum / np.maximum(self.test.count, 1)
            return SequentialResult(mean=mean, bounds=(self.lo, self.hi), **common)
        return SequentialResult(
            mean=self.test.mean, bounds=(), method="block mixture", variance=self.test.variance, **common
        )


def sequential_families(
    harms: Callable[[list, np.ndarray], list],
    families: Sequence[Family],
    n: int,
    *,
    kind: str = "betting",
    block: int = 32,
) -> list:
    """Several families decided in one pass over ``n`` examples: each block goes to every
    family that still has an undecided head, so a pass that removes the heads of several
    families (several modes, heads and groups) runs each block's clean forward once.

    Args:
        harms: ``harms(live [per family: heads [k]], examples [b]) -> [per family: values]``
            of the undecided heads on the next block (examples ``0..n-1`` in the order they
            are taken: shuffle before): harms ``[k, b]`` (``kind="betting"``,
            :func:`sequential_test`) or ``(estimates [k], variances [k])`` (``"mixture"``,
            :func:`sequential_block_test`); anything for a family with no live head.
        block: examples per block (the betting test: consecutive ``block`` examples; the
            block test: :func:`blocks_of`).

    Returns:
        ``[SequentialResult]`` per family; each family's stops and e-BH are its own.

    Raises:
        InputError: ``block < 1``, a family's ``q`` outside (0, 1), ``tests < m``, bounds that
            do not contain the floor (betting), a floor that is not positive (mixture).
    """
    if block < 1:
        raise InputError(f"block must be ≥ 1; got block={block}")
    deciders = [_Decider(f, kind) for f in families]
    cuts = [np.arange(s, min(n, s + block)) for s in range(0, n, block)] if kind == "betting" else blocks_of(n, block)
    for examples in cuts:
        lives = [d.live() for d in deciders]
        if not any(len(live) for live in lives):
            break
        got = harms(lives, examples)
        for d, live, values in zip(deciders, lives, got):
            if len(live):
                d.take(live, values, len(examples))
    return [d.result(n) for d in deciders]


def sequential_test(
    harms: Callable[[np.ndarray, np.ndarray], np.ndarray],
    m: int,
    n: int,
    *,
    floor: float,
    bounds: tuple,
    q: float = 0.05,
    alpha_against: Optional[float] = None,
    block: int = 32,
    tests: Optional[int] = None,
) -> SequentialResult:
    """Run the test over ``n`` examples in blocks of ``block``.

    Args:
        harms: ``harms(heads [k], examples [b]) -> [k, b]`` exact harms of the heads still
            undecided on the next block of examples (examples ``0..n-1`` in the order they
            are to be taken: shuffle before).
        m: heads; floor: the claim's floor; bounds: ``(lo, hi)`` the harm's a-priori range.
        q: the FDR level; alpha_against: the level of a "not necessary" stop (default ``q``).
        tests: the hypotheses e-BH counts (default ``m``); more than ``m`` when the ``m``
            heads were selected from ``tests`` (a screen): the others enter e-BH with
            e-value 0, so FDR ≤ q over all ``tests`` whatever chose the ``m``.

    Raises:
        InputError: bounds that do not contain the floor, ``block < 1``, ``q`` outside (0, 1),
            ``tests < m``.
    """
    family = Family(m, floor, q=q, tests=tests, alpha_against=alpha_against, bounds=bounds)
    return sequential_families(lambda lives, ex: [harms(lives[0], ex)], [family], n, kind="betting", block=block)[0]


def _check_levels(q: float, m: int, tests: Optional[int]) -> int:
    if not 0.0 < q < 1.0:
        raise InputError(f"q must lie in (0, 1); got q={q}")
    total = m if tests is None else int(tests)
    if total < m:
        raise InputError(f"tests ({total}) counts every hypothesis, so it cannot be fewer than the {m} heads tested")
    return total


def blocks_of(n: int, block: int) -> list:
    """``n`` examples (in the order taken) cut into ``max(1, n // block)`` blocks of
    near-equal size (so none is smaller than ``block``, unless ``n`` is): ``[[indices]]``."""
    return [b for b in np.array_split(np.arange(n), max(1, n // max(1, block))) if len(b)]


def sequential_block_test(
    harms: Callable[[np.ndarray, np.ndarray], tuple],
    m: int,
    n: int,
    *,
    floor: float,
    q: float = 0.05,
    alpha_against: Optional[float] = None,
    block: int = 64,
    tests: Optional[int] = None,
    scale: float = MIXTURE_SCALE,
) -> SequentialResult:
    """The block test (module docstring) over ``n`` examples cut by :func:`blocks_of`.

    Args:
        harms: ``harms(heads [k], examples [b]) -> (estimates [k], variances [k])``: each
            undecided head's mean harm on the next block and the variance of that mean
            (examples ``0..n-1`` in the order they are to be taken: shuffle before).
        m, floor, q, alpha_against, tests: as :func:`sequential_test`'s; block: examples
            per block; scale: the mixture's (:data:`MIXTURE_SCALE`).

    Raises:
        InputError: a floor that is not positive, ``block < 1``, ``q`` outside (0, 1),
            ``tests < m``.
    """
    family = Family(m, floor, q=q, tests=tests, alpha_against=alpha_against, scale=scale)
    return sequential_families(lambda lives, ex: [harms(lives[0], ex)], [family], n, kind="mixture", block=block)[0]


def as_units(heads: Sequence) -> list:
    """``[((layer, head), …)]``: each of ``heads`` as a unit removed at once — a head
    ``(layer, head)`` alone, or a group ``[(layer, head), …]`` together."""
    out = []
    for h in heads:
        h = tuple(h)
        group = len(h) > 0 and isinstance(h[0], (tuple, list))
        out.append(tuple(tuple(map(int, x)) for x in h) if group else (tuple(map(int, h)),))
    return out


@dataclass(frozen=True)
class RemovalTest:
    """One family of :func:`sequential_removals`: ``heads`` (``[(layer, head)]``, or groups
    ``[[(layer, head), …]]`` each removed at once) removed in ``mode`` and decided against
    ``floor``, e-BH over ``tests`` hypotheses (default: the heads); ``bounds`` the harm's
    a-priori range (a per-example objective's betting test); ``spread`` ``[len(heads)]`` a
    floor under each unit's per-example variance in the block test
    (:func:`floored_block_variance`), known before the data (e.g. a screen's)."""

    heads: Sequence
    floor: float
    mode: str = "mean"
    tests: Optional[int] = None
    bounds: Optional[tuple] = None
    spread: Optional[np.ndarray] = None


def sequential_removals(
    adapter,
    corpus,
    tests: Sequence[RemovalTest],
    *,
    objective: Objective,
    q: float = 0.05,
    block: int = 64,
    batch_size: int = 8,
    seed: int = 0,
    stack: Optional[str] = None,
    means=None,
    runner: Optional[Callable] = None,
    on_block: Optional[Callable] = None,
    on_readouts: Optional[Callable] = None,
    known: Optional[np.ndarray] = None,
    test: Optional[str] = None,
) -> list:
    """Every family of ``tests`` decided on a live model in one pass (:func:`sequential_families`):
    each block's exact removals of the units still undecided in every family, one clean
    forward per batch for all of them (:func:`probe.analyses.claims.removal.run_removal_batches`,
    each unit in its family's mode; the mean mode's head means from
    :func:`~probe.analyses.necessity.ablation.position_kind_means`).

    For a corpus-level objective (the similarity structure) a block's harms compare its
    sentences with the block's others, corrected for the block's size, and the families are
    decided by the block test (:func:`sequential_block_test`'s; ``bounds`` unused); per-example
    objectives by the betting test (:func:`sequential_test`'s).

    Args:
        runner: where each block's batches run (:mod:`probe.runs.blocks`; default this
            process), as :func:`~probe.analyses.claims.removal.removal_sweep`'s.
        on_block: called as ``on_block(family, heads [k], examples [b], harms [k, b])`` with
            each block's exact harms (heads index the family's, examples index ``corpus``; a
            corpus-level objective's: each sentence's size-corrected harm in its block).
        on_readouts: called as ``on_readouts(family, heads [k], examples [b], clean [b, ...],
            perturbed [k, b, ...])`` with each block's readouts (e.g. for measures beside the
            objective's harm).
        known: ``[n, ...]`` the clean readouts an earlier pass read (NaN rows where it did
            not): a batch of known examples runs its clean forward only up to the layers
            it removes (:class:`probe.analyses.claims.removal.RemovalPlan`'s ``known``).
        test: ``"betting"`` or ``"mixture"`` for a per-example objective (default betting);
            ``"mixture"`` tests each block's mean harm with its variance (the sample
            variance over the block's examples / its size) by the block test, whose power
            follows the harms' own spread instead of an a-priori range (no ``bounds``
            needed). A corpus-level objective is always tested by the block test.

    Returns:
        ``[SequentialResult]``, one per family of ``tests``.

    Raises:
        InputError: a runner bound to another model, a per-example objective's family without
            ``bounds``, and :func:`sequential_families`' refusals.
    """
    import torch

    from probe.analyses.claims.removal import RemovalJob, RemovalPlan, block_batches, known_readouts, placed_readouts
    from probe.analyses.common.metrics import as_corpus
    from probe.analyses.common.objective import given_objective
    from probe.analyses.necessity.ablation import position_kind_means
    from probe.runs.blocks import InProcess, check_runs_on

    if runner is not None:
        check_runs_on(runner, adapter)
    corpus = as_corpus(corpus)
    obj: Any = given_objective(objective, adapter, corpus)  # its block_harm, where corpus-level
    stack = stack or adapter.default_stack
    units = [as_units(t.heads) for t in tests]
    if means is None and any(t.mode == "mean" for t in tests):
        means = position_kind_means(adapter, corpus, obj, batch_size, stack)
    order = np.random.default_rng(seed).permutation(len(corpus))
    read = known_readouts(known, len(corpus)) or {}
    calls = [0]
    block_level = bool(getattr(obj, "corpus_level", False)) and hasattr(obj, "block_harm")
    by_block = _by_block(obj, tests, test, block_level)

    def harms(lives: list, examples: np.ndarray) -> list:
        idx = [int(order[i]) for i in examples]
        entries = [(f, int(j)) for f, live in enumerate(lives) for j in live]  # the plan's units, family by family
        modes = tuple(dict.fromkeys(tests[f].mode for f, _ in entries))
        plan = RemovalPlan(
            corpus, obj, tuple(units[f][j] for f, j in entries), modes, means, seed, stack, batch_size,
            unit_modes=None if len(modes) == 1 else tuple((tests[f].mode,) for f, _ in entries),
            known={i: read[i] for i in idx if i in read},
        )  # fmt: skip
        batches = block_batches(adapter, corpus, idx, batch_size, first=calls[0])
        calls[0] += len(batches)
        at = {i: k for k, i in enumerate(idx)}  # the block's rows, not the corpus's (memory: units × block)
        parts = [
            replace(p.value, indices=[at[i] for i in p.value.indices])
            for p in (runner or InProcess(adapter))(RemovalJob(plan), batches)
        ]
        clean_block, pert_all = placed_readouts(parts, len(idx), len(entries))
        assert clean_block is not None  # at least one example in a block
        clean = clean_block.double().numpy()
        out: list = []
        first = 0
        for f, live in enumerate(lives):
            rows = torch.arange(first, first + len(live))
            first += len(live)
            if not len(live):
                out.append(None)
                continue
            pert = pert_all[tests[f].mode][rows].double().numpy()
            if on_readouts is not None:
                on_readouts(f, live, np.asarray(idx), clean, pert)
            if block_level:
                got = [obj.block_harm(clean, pert[j]) for j in range(len(live))]
                if on_block is not None:
                    on_block(f, live, np.asarray(idx), np.stack([p.rows for p in got]))
                out.append((np.array([p.estimate for p in got]), np.array([p.variance for p in got])))
                continue
            rows_harm = np.stack([obj.harm(clean, pert[j]) for j in range(len(live))])
            if on_block is not None:
                on_block(f, live, np.asarray(idx), rows_harm)
            out.append(floored_block_variance(rows_harm, tests[f].spread, live) if by_block else rows_harm)
        return out

    families = [Family(len(u), t.floor, q=q, tests=t.tests, bounds=t.bounds) for u, t in zip(units, tests)]
    kind = "mixture" if by_block else "betting"
    return sequential_families(harms, families, len(corpus), kind=kind, block=block)


def _by_block(objective: Any, tests: Sequence[RemovalTest], test: Optional[str], block_level: bool) -> bool:
    """Whether :func:`sequential_removals` decides by the block test (a corpus-level objective,
    or ``test="mixture"``); refuses an unknown ``test`` and a betting family without bounds."""
    if test not in (None, "betting", "mixture"):
        raise InputError(f"test must be 'betting' or 'mixture', got {test!r}")
    by_block = block_level or test == "mixture"
    if not by_block and any(t.bounds is None for t in tests):
        raise InputError(f"the betting test of {objective.name} needs the harm's a-priori bounds (bounds=(lo, hi))")
    return by_block


def block_mean_and_variance(harms: np.ndarray) -> tuple:
    """``(estimates [k], variances [k])`` of per-example harms ``[k, b]``: each row's mean
    and the variance of that mean (the sample variance, ``ddof=1``, over ``b``; 0 for
    ``b = 1``), the block test's inputs for a per-example objective."""
    h = np.asarray(harms, np.float64)
    b = h.shape[1]
    var = h.var(axis=1, ddof=1) / b if b > 1 else np.zeros(len(h))
    return h.mean(axis=1), var


def floored_block_variance(harms: np.ndarray, spread: Optional[np.ndarray] = None, rows: Any = None) -> tuple:
    """``(estimates [k], variances [k])``: :func:`block_mean_and_variance` of per-example harms
    ``[k, b]``, each row's per-example variance at least ``spread`` ``[k]`` (its variance of
    the mean at least ``spread / b``; ``rows``: the ``k`` entries of a longer ``spread`` the
    rows are).

    Why: a block test on a head whose harms are strongly skewed (rare large harms, most
    sentences near zero) reads its variance from a block that usually holds none of the
    large harms, so the block's variance is low exactly when its mean is, and the test
    stops the head as "not necessary" far more often than its level. On SmolLM2's own harms
    resampled with their mean at the bar (``bench/bench_block_size.py``, 16 heads, 256 EWT
    sentences), blocks of 64 did so for L0H6 (skewness 13) in 34% of the sequences against
    a level of 5%; with the first-order screen's per-example spread over every sentence as
    the floor, 0% (the largest over the 16 heads 5.9%, from 34%). A floor fixed before the
    data keeps each block's term a function of that block alone."""
    est, var = block_mean_and_variance(harms)
    if spread is None:
        return est, var
    floor = np.asarray(spread, np.float64) if rows is None else np.asarray(spread, np.float64)[np.asarray(rows)]
    return est, np.maximum(var, np.nan_to_num(floor) / max(1, np.asarray(harms).shape[1]))


def sequential_necessity(
    adapter,
    corpus,
    heads: Sequence,
    *,
    floor: float,
    bounds: Optional[tuple] = None,
    objective: Objective,
    mode: str = "mean",
    q: float = 0.05,
    block: int = 64,
    batch_size: int = 8,
    seed: int = 0,
    stack: Optional[str] = None,
    means=None,
    runner: Optional[Callable] = None,
    on_block: Optional[Callable] = None,
    tests: Optional[int] = None,
    on_readouts: Optional[Callable] = None,
    test: Optional[str] = None,
    known: Optional[np.ndarray] = None,
    spread: Optional[np.ndarray] = None,
) -> SequentialResult:
    """:func:`sequential_removals` of one family: ``heads`` removed in ``mode`` (``[(layer,
    head)]``, or groups ``[[(layer, head), …]]`` each removed at once, :func:`as_units`) until
    each is decided against ``floor``; ``on_block(heads [k], examples [b], harms [k, b])`` and
    ``on_readouts(heads [k], examples [b], clean [b, ...], perturbed [k, b, ...])`` as there,
    without the family; ``test`` and ``known`` as there; ``spread`` ``[len(heads)]`` as
    :class:`RemovalTest`'s (the block test's floor under each head's per-example variance)."""
    got = sequential_removals(
        adapter, corpus, [RemovalTest(heads, floor, mode, tests, bounds, spread)], objective=objective, q=q, block=block,
        batch_size=batch_size, seed=seed, stack=stack, means=means, runner=runner,
        on_block=None if on_block is None else (lambda f, *a: on_block(*a)),
        on_readouts=None if on_readouts is None else (lambda f, *a: on_readouts(*a)), test=test, known=known,
    )  # fmt: skip
    return got[0]
