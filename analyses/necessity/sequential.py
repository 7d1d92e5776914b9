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
under any dependence between heads (they share sentences). A head stops

* as **necessary** when ``K ≥ m/q`` (e-BH rejects it whatever the others do);
* as **not necessary** when ``K' ≥ 1/α'`` (its own anytime-valid test at level ``α'``,
  default ``q``: the chance of stopping a head whose mean harm reaches the floor is ``≤ α'``);
* **undecided** when the corpus is used up; e-BH on every head's final e-value (0 for the
  heads stopped as not necessary) then decides which are called necessary: the heads
  stopped early are among them, and the rejected set is e-BH's own (FDR ≤ q).

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

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np

from probe.errors import InputError

__all__ = ["BettingTest", "SequentialResult", "e_bh", "sequential_test", "sequential_necessity"]

#: the largest fraction of the wealth a bet may stake (Waudby-Smith & Ramdas 2023's c)
MAX_BET = 0.5


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
        }


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
    lo, hi = map(float, bounds)
    if not lo < floor < hi:
        raise InputError(f"the harm bounds {bounds} must contain the floor {floor} strictly")
    if block < 1 or not 0.0 < q < 1.0:
        raise InputError(f"block must be ≥ 1 and q in (0, 1); got block={block}, q={q}")
    total = m if tests is None else int(tests)
    if total < m:
        raise InputError(f"tests ({total}) counts every hypothesis, so it cannot be fewer than the {m} heads tested")
    a_against = q if alpha_against is None else alpha_against
    test = BettingTest(m, (floor - lo) / (hi - lo))
    state = np.array(["undecided"] * m, dtype=object)
    for start in range(0, n, block):
        live = np.flatnonzero(state == "undecided")
        if not len(live):
            break
        examples = np.arange(start, min(n, start + block))
        h = np.asarray(harms(live, examples), np.float64).reshape(len(live), len(examples))
        x = np.full((len(examples), m), np.nan)
        x[:, live] = ((np.clip(h, lo, hi) - lo) / (hi - lo)).T
        on = state == "undecided"
        test.update(np.nan_to_num(x, nan=test.m0), on)
        state[on & (test.wealth >= total / q)] = "necessary"
        state[on & (state == "undecided") & (test.wealth_against >= 1.0 / a_against)] = "not necessary"
    # e-BH on e-values that are 0 for the heads stopped as not necessary (a smaller
    # e-value is still one), so the rejected set is e-BH's own: self-consistent, FDR ≤ q
    e = np.where(state == "not necessary", 0.0, test.wealth)
    final = e_bh(np.concatenate([e, np.zeros(total - m)]), q)[:m]
    state[final] = "necessary"
    mean = lo + (hi - lo) * test._sum / np.maximum(test.count, 1)
    return SequentialResult(
        decision=tuple(state.tolist()),
        n_used=test.count.copy(),
        e_value=test.wealth.copy(),
        e_against=test.wealth_against.copy(),
        mean=mean,
        floor=float(floor),
        bounds=(lo, hi),
        q=q,
        n=n,
    )


def sequential_necessity(
    adapter,
    corpus,
    heads: Sequence,
    *,
    floor: float,
    bounds: tuple,
    objective="auto",
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
) -> SequentialResult:
    """:func:`sequential_test` of ``heads`` on a live model: each block's exact removals of
    the heads still undecided (:func:`probe.analyses.claims.removal.run_removal_batches`,
    the same replacements as :func:`~probe.analyses.claims.removal.removal_sweep`; the
    mean mode's head means from the whole corpus).

    For a corpus-level objective (the similarity structure) a block's harms compare its
    sentences with the block's others, not the whole corpus's.

    Args:
        runner: where each block's batches run (:mod:`probe.runs.blocks`; default this
            process), as :func:`~probe.analyses.claims.removal.removal_sweep`'s.
        on_block: called as ``on_block(heads [k], examples [b], harms [k, b])`` with each
            block's exact harms (heads index ``heads``, examples index ``corpus``).
        tests: as :func:`sequential_test`'s.
    """
    import torch

    from probe.analyses.claims.removal import RemovalJob, RemovalPlan, placed_readouts
    from probe.analyses.common.batch import batch_indices, by_one_length
    from probe.analyses.common.metrics import as_corpus
    from probe.analyses.common.objective import resolve_objective
    from probe.analyses.necessity.ablation import position_kind_means
    from probe.runs.blocks import InProcess

    corpus = as_corpus(corpus)
    obj, _ = resolve_objective(objective, adapter, corpus)
    stack = stack or adapter.default_stack
    units = [(tuple(map(int, h)),) for h in heads]
    if mode == "mean" and means is None:
        means = position_kind_means(adapter, corpus, obj, batch_size, stack)
    order = np.random.default_rng(seed).permutation(len(corpus))
    calls = [0]

    def harms(live: np.ndarray, examples: np.ndarray) -> np.ndarray:
        idx = [int(order[i]) for i in examples]
        plan = RemovalPlan(corpus, obj, tuple(units[j] for j in live), (mode,), means, seed, stack, batch_size)
        texts = [corpus.texts[i] for i in idx]
        batches = []
        for chunk in by_one_length(adapter, batch_indices(texts, batch_size, by_length=True), texts):
            batches.append((calls[0], tuple(idx[c] for c in chunk)))
            calls[0] += 1
        parts = [p.value for p in (runner or InProcess(adapter))(RemovalJob(plan), batches)]
        clean_all, pert_all = placed_readouts(parts, len(corpus), len(live))
        assert clean_all is not None  # at least one example in a block
        take = torch.as_tensor(idx)
        clean = clean_all[take].double().numpy()
        pert = pert_all[mode][:, take].double().numpy()
        got = np.stack([obj.harm(clean, pert[j]) for j in range(len(live))])
        if on_block is not None:
            on_block(live, np.asarray(idx), got)
        return got

    return sequential_test(harms, len(units), len(corpus), floor=floor, bounds=bounds, q=q, block=block, tests=tests)
