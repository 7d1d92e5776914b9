"""The necessity claims on the whole corpus by screening (issue 44): screen every head,
confirm exactly what could matter, stop when decided.

The exhaustive path (:func:`.removal.removal_sweep` → :func:`.necessity.necessity_claims`)
removes every head on every example; the report caps it at the first examples. This path
runs on every example and removes exactly only what the screen cannot rule out:

1. **screen** — :func:`probe.analyses.necessity.screen.screen_heads` estimates every head's
   mean-ablation harm from one forward and one backward per batch (attribution patching,
   Nanda 2023; Kramár et al. 2024) on *all* examples;
2. **confirm** — :func:`probe.analyses.necessity.confirm.plan_confirmation` picks the heads
   whose screened upper bound reaches the bar (``first-order`` screens, in the
   objective's units: the floor, or, per example, the null model's bar where higher; the
   null is screened and removed first) or the top share by upper bound (sketch screens, whose estimates are
   not harms), plus a random **audit** of the rest; only these are removed exactly, with
   the exhaustive path's own machinery, so their harms are its numbers;
3. **decide** — per-example objectives: sentences in blocks until each head's e-process
   decides it (:func:`probe.analyses.necessity.sequential.sequential_necessity`; by default
   the block test, a normal-mixture e-process on each block's mean harm and its variance,
   Howard et al. 2021, asymptotically valid as Waudby-Smith et al. 2024 show; the betting
   test, Waudby-Smith & Ramdas 2023, on ``test="betting"``, whose harm range must be fixed
   before the data: at SmolLM2's 270 heads a range of 20 × the bar called no head of 35
   in 256 sentences, while their exact harms' 95% intervals lay 0.07 nats under a bar of
   0.076; e-BH at :data:`.thresholds.FDR` over *all* heads, the unconfirmed ones with e-value 0);
   a head it leaves undecided has then taken every example and is decided by the
   exhaustive path's own test on them (its harms are that path's).
   Corpus-level objectives (the similarity structure compares each sentence with every
   other, so a block's harms are not the corpus's): the confirmed heads on every example,
   decided by the exhaustive path's own test (:func:`.necessity.necessity_claims`), BH
   counting every head (the unconfirmed with p = 1).

A head never removed exactly is never necessary: its claim does not hold, reading
:data:`SCREENED_OUT`, with the audit's Clopper–Pearson bound on the screen's miss rate
(:func:`probe.analyses.necessity.confirm.miss_rate_bound`). The null model (issue 43,
:mod:`.null_model`) is screened the same way and its top heads removed exactly; its
per-example quantile and largest mean harm are taken over those heads (NaN for the
others, which :func:`.null_model.null_quantile` ignores): at least the whole model's where
the screen ranks the null's largest heads first, so the bar errs towards "not necessary".

Shapes: ``ScreenedNecessity.table`` one row per head; harms ``[heads, examples]``.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, replace
from typing import Any, Callable, Optional, Sequence, TYPE_CHECKING

if TYPE_CHECKING:
    from probe.analyses.common.objective import Objective

import numpy as np
import pandas as pd

from . import thresholds as T
from probe.errors import InputError

from .claim import Claim

__all__ = ["SCREENED_BLOCK", "SCREENED_OUT", "ScreenedNecessity", "screened_necessity"]

#: the reading of a head the screen ruled out and no exact removal looked at
SCREENED_OUT = "not necessary (screened out)"

#: sentences per block of the decide step on a per-example objective. Each block's variance
#: is floored by the first-order screen's per-example spread of the head over every sentence
#: (:func:`probe.analyses.necessity.sequential.floored_block_variance`), without which blocks
#: of 64 stopped a skewed SmolLM2 head whose mean harm was the bar as "not necessary" in 34% of
#: resampled sequences (level 5%). With the floor, blocks of 32 and of 64 err alike (at most
#: 5.7% and 5.9% over 16 heads, 0.8% and 0.9% on average) and 32 takes fewer sentences: a
#: clear head stops after one block (``bench/bench_block_size.py``)
SCREENED_BLOCK = 32


@dataclass(frozen=True)
class ScreenedNecessity:
    """The screened path's necessity claims.

    Attributes:
        claims: ``{(layer, head): Claim}``; info: what summary.json states (the path, the
            examples screened, each exactly removed head's examples, the audit and its
            miss-rate bound, the null model's bar); table: per head its screened estimate,
            upper bound, role (``confirmed`` | ``audited`` | ``screened out``), examples
            removed exactly, exact mean harm and status; screen: the
            :class:`probe.analyses.necessity.screen.HeadScreen` itself (per-example estimates).
    """

    claims: dict
    info: dict
    table: pd.DataFrame
    screen: Any = None

    def note(self) -> str:
        """One line for the report's notes."""
        i = self.info
        used = list(i["examples_per_head"].values())
        span = f"{min(used)}–{max(used)}" if used else "0"
        return (
            f"necessity by screening on all {i['examples_screened']} examples ({i['screen']} screen, one "
            f"forward + backward per batch"
            + (
                f"; every head also removed exactly on a pilot of {i['pilot']['examples']} random examples, "
                f"{i['pilot']['flagged']} whose pilot harm could reach the floor confirmed first"
                if (i.get("pilot") or {}).get("examples")
                else ""
            )
            + f"): {i['confirmed']} heads confirmed and {i['audited']} audited by "
            f"exact removal on {span} examples each ({i['decision']}); {i['screened_out']} heads screened out "
            f"and never called necessary; the audit found {i['audit_misses']} of {i['audited']} audited heads "
            f"necessary (miss rate ≤ {i['miss_rate_upper']:.1%} at {i['confidence']:.0%})"
        )


def _plan(screen: Any, rows: list, floor: float, *, top_share, min_top, audit, min_audit, slack, seed, first=None):
    """``(ConfirmationPlan, upper [m], rank [m])`` over the heads at ``rows`` of ``screen``: a
    first-order screen confirms every head whose upper bound reaches ``floor`` and, besides,
    its ``min_top`` largest (a saturated loss's gradient vanishes, docs/screening.md); a
    sketch the larger of ``top_share`` of the heads and ``min_top`` by ``rank``: the upper
    bound, with the heads ``first`` (bool ``[m]``, the exact pilot's: :func:`pilot_flags`)
    ranked before every other and the count grown to hold them and ``min_top`` more."""
    from probe.analyses.necessity.confirm import plan_confirmation

    upper = screen.upper("mean", slack=slack)[rows]
    kw = dict(audit=audit, min_audit=min_audit, seed=seed)
    if screen.kind == "first-order":
        return plan_confirmation(upper, floor, also=min(len(rows), min_top), **kw), upper, upper
    rank, flagged = upper, 0
    if first is not None and np.any(first):
        rank = np.where(np.asarray(first, bool), np.inf, upper)
        flagged = int(np.sum(first))
    top = min(len(rows), max(min_top, math.ceil(top_share * len(rows)), flagged + min_top))
    return plan_confirmation(rank, top=top, **kw), upper, rank


def pilot_flags(harm: np.ndarray, floor: float, slack: float = 0.5, z: float = 2.0) -> tuple:
    """``(flags [m] bool, upper [m])``: the heads whose exact pilot harms ``harm`` ``[m, k]``
    (each head mean-ablated on ``k`` examples) could reach ``floor``: upper bound ``mean +
    z · stderr + slack · |mean|`` at or above it (NaN counts as flagged)."""
    from probe.analyses.necessity.screen import upper_bound

    upper = upper_bound(np.asarray(harm, np.float64).T, z, slack)
    return ~(upper < floor), upper


def _pilot(adapter, corpus, objective, heads, *, size: int, slack: float, seed: int, batch_size: int, runner) -> tuple:
    """``(flags [m], examples)``: every head mean-ablated exactly on ``size``
    examples drawn at random (at most half the corpus), :func:`pilot_flags` of their harms
    against the objective's floor. A sketch screen ranks heads by the linearised change of
    the readout, which misses a head whose effect is not first-order (MiniLM's L0H9 on the
    bundled sample: exact harm 0.055, third of 72; its exact embedding drift eighth; the
    readout sketch ranks it 42nd): the pilot's exact removals catch it on a sample."""
    from .removal import removal_sweep

    n = len(corpus)
    k = min(int(size), n // 2)
    if k < 4:
        return np.zeros(len(heads), bool), 0
    idx = sorted(np.random.default_rng(seed).choice(n, k, replace=False).tolist())
    sub = corpus.subset(idx, reason="the screened path's exact pilot")
    sweep = removal_sweep(
        adapter, sub, objective, [(h,) for h in heads], modes=("mean",), seed=seed, batch_size=batch_size, runner=runner
    )
    flags, _ = pilot_flags(sweep.harm["mean"], T.min_effect(objective.name), slack)
    return flags, k


def _null(nadapter, corpus, objective, heads, examples, *, k, seed, batch_size, runner, screen_on=None):
    """A :class:`.necessity.NullSweep` of every head on every example of ``corpus`` on the null
    model: its ``k`` top screened heads removed exactly on ``examples`` (indices into
    ``corpus``), NaN for the other heads and examples; ``None`` without a null model.
    ``screen_on``: screen (rank) the null's heads on this many of ``examples`` drawn at
    random (default all of them)."""
    from probe.analyses.necessity.ablation import position_kind_means
    from probe.analyses.necessity.screen import screen_heads

    from .necessity import NullSweep
    from .removal import removal_sweep

    if nadapter is None:
        return None
    sub = corpus if len(examples) == len(corpus) else corpus.subset(examples, reason="the null model's sample")
    ranked, pick, means = sub, list(range(len(sub))), None
    if screen_on is not None and screen_on < len(sub):
        pick = sorted(np.random.default_rng(seed).choice(len(sub), int(screen_on), replace=False).tolist())
        ranked = sub.subset(pick, reason="the null model's screened sample")
        means = position_kind_means(nadapter, sub, objective, batch_size, nadapter.default_stack)  # of sub, not ranked
    scr = screen_heads(nadapter, ranked, objective, modes=("mean",), seed=seed, batch_size=batch_size, means=means)
    means = scr.means  # screen and sweep share it (the screen's own forwards sum it where it folds them)
    index = {h: i for i, h in enumerate(scr.heads)}
    upper = scr.upper("mean")[[index[tuple(h)] for h in heads]]
    top = sorted(np.argsort(-np.nan_to_num(upper, nan=np.inf), kind="stable")[:k].tolist())
    known = None  # the screen's clean readouts of the examples it ranked on: no clean forward for them
    if scr.clean is not None:
        known = np.full((len(sub), *scr.clean.shape[1:]), np.nan)
        known[pick] = scr.clean
    sweep = removal_sweep(
        nadapter, sub, objective, [heads[i] for i in top], modes=("mean",), seed=seed, runner=runner, batch_size=batch_size,
        means=means, known=known,
    )  # fmt: skip
    whole = placed_sweep(sweep, "mean", len(corpus), examples, units=tuple((tuple(h),) for h in heads), rows=top)
    return NullSweep(whole, nadapter.card["null_source"]), len(top)


def placed_sweep(sweep: Any, mode: str, n: int, examples: Sequence[int], units: Any = None, rows: Any = None) -> Any:
    """``sweep`` (a :class:`.removal.RemovalSweep` of ``mode`` on ``examples`` of a corpus of
    ``n``) as one on the whole corpus: its harms ``[len(units), n]`` at those examples (and,
    with ``units``, at its ``rows`` of them), NaN elsewhere, which the null's quantiles ignore."""
    units = sweep.units if units is None else units
    full = np.full((len(units), n), np.nan)
    full[np.ix_(list(range(len(units))) if rows is None else list(rows), list(examples))] = sweep.harm[mode]
    return replace(sweep, units=units, harm={mode: full}, n=n)


def null_examples(n: int, size: Optional[int], seed: int) -> list:
    """The examples (of ``n``) the null model's top heads are removed on: all of them, or
    ``size`` drawn at random (sorted); the bar is a mean over examples and the largest null
    head's mean, so a sample estimates it without a removal per head per example."""
    if size is None or size >= n:
        return list(range(n))
    return sorted(np.random.default_rng(seed + 1).choice(n, int(size), replace=False).tolist())


def _null_info(null: Any, removed: int, n: int, screened_on: Optional[int]) -> Optional[dict]:
    """What summary.json states of the null model's side: its source, the heads removed
    exactly, the ``n`` examples they were removed on and the examples its screen ranked them on."""
    if null is None:
        return None
    return {"source": null.source, "heads_removed": removed, "examples": n, "screened_on": min(n, screened_on or n)}


def _bar(floor: float, null: Any) -> tuple:
    """``(bar, null_level, null_max)`` of the sequential path: :func:`.necessity.head_bar` of
    the null model's mean removals (its unremoved heads NaN; NaN parts without a null)."""
    from .necessity import head_bar
    from .null_model import null_quantile

    if null is None:
        return floor, float("nan"), float("nan")
    nh = null.sweep.harm["mean"]
    with warnings.catch_warnings():  # heads and examples the null was not removed on are NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        null_max = float(np.nanmax(np.nanmean(nh, 1)))
        quantiles = null_quantile(nh, T.FDR)
    return (*head_bar(floor, quantiles[~np.isnan(quantiles)], null_max), null_max)


def _screened_out(
    head_upper: float, estimate: float, n: int, bound: float, confidence: float, floor: float, units, kind: str
) -> Claim:
    """The necessity claim of a head the ``kind`` screen ruled out: it does not hold, and says
    why (:func:`.evidence.screened_out_words`)."""
    from .evidence import screened_out_words

    extra = {
        "reading": "screened out",
        "screen": kind,
        "screened_estimate": float(estimate),
        "screened_upper": float(head_upper),
        "miss_rate_upper": float(bound),
        "miss_rate_confidence": float(confidence),
        "mode": "mean",
        "min_effect": floor,
    }
    return Claim(
        "necessity",
        "does not hold",
        statement=SCREENED_OUT,
        count=n,
        null=floor,
        unit=units,
        threshold="min_effect+fdr",
        reason=screened_out_words(extra, n, units, floor),
        extra=extra,
    )


def _merged(sweeps: list) -> Any:
    """One :class:`.removal.RemovalSweep` of the units of ``sweeps`` (same examples, mean mode)."""
    first = sweeps[0]
    stack = lambda get: {k: np.concatenate([get(s)[k] for s in sweeps]) for k in get(first)}  # noqa: E731
    return replace(
        first,
        units=tuple(u for s in sweeps for u in s.units),
        harm=stack(lambda s: s.harm),
        measures={"mean": stack(lambda s: s.measures.get("mean", {}))},
        corpus={"mean": stack(lambda s: s.corpus.get("mean", {}))},
    )


def _whole_corpus(adapter, corpus, objective, heads, plan, upper, null, importance, *, grow, audit_of, kw) -> tuple:
    """``(claims, {head: examples}, plan)``: the planned heads removed on every example and
    decided by the exhaustive path's test, BH counting every head. With ``grow`` (a sketch
    screen: a rank, not a harm) the confirmed heads grow by ``grow`` down the screen's
    ranking while the last ``grow`` confirmed hold a head whose exact mean harm reaches
    the floor; the audit (``audit_of(top)``) is drawn from the heads below."""
    from .necessity import necessity_claims
    from .removal import removal_sweep

    floor = T.min_effect(objective.name)
    run = lambda idx: removal_sweep(adapter, corpus, objective, [(heads[i],) for i in idx], modes=("mean",), **kw)  # noqa: E731
    sweeps = [run(plan.confirm)] if plan.confirm else []
    if grow and sweeps:
        order = np.argsort(-np.nan_to_num(upper, nan=np.inf), kind="stable").tolist()
        k = len(plan.confirm)
        while k < len(heads):
            done = {u[0]: h for s in sweeps for u, h in zip(s.units, s.harm["mean"].mean(1))}
            if not any(done[heads[i]] >= floor for i in order[max(0, k - grow) : k]):
                break
            sweeps.append(run(sorted(order[k : k + grow])))
            k = min(len(heads), k + grow)
        plan = audit_of(k)
    todo_audit = [i for i in plan.audit]
    if todo_audit:
        sweeps.append(run(todo_audit))
    if not sweeps:
        return {}, {}, plan
    sweep = _merged(sweeps)
    claims = necessity_claims(sweep, importance, null=null, tests=len(heads))
    return claims, {u: len(corpus) for u in sweep.units}, plan


def _sequential(
    adapter, corpus, objective, units, null, m, means, importance, *, bounds, seed, block, batch_size, runner, test,
    known=None, spread=None,
):  # fmt: skip
    """``(claims, {head: examples})``: ``units`` removed block by block until ``test``
    (``mixture``: the block test; ``betting``) decides each (e-BH over ``m`` heads), the bar
    the floor and the null model's. A head still undecided when the examples run out has
    every example's exact harm: it is decided as the exhaustive path decides
    (:func:`.necessity.necessity_claims`, BH counting ``m`` heads), which is more powerful
    near the bar than the anytime test. ``known``: the clean readouts of ``corpus`` the
    screen read (a batch's clean forward then stops after the last layer it removes);
    ``spread`` ``[len(units)]``: the block test's floor under each head's per-example
    variance (the screen's spread over every example; :data:`SCREENED_BLOCK`)."""
    from probe.analyses.necessity.sequential import sequential_necessity

    from .necessity import necessity_claims
    from .removal import RemovalSweep
    from .statistics import mean_ci

    floor, n = T.min_effect(objective.name), len(corpus)
    bar, null_level, null_max = _bar(floor, null)
    if not bar > 0:  # the block test's mixing scale is in the bar's units (a floor set at or under 0)
        test = "betting"
    lo, hi = bounds(bar) if test == "betting" else (float("nan"), float("nan"))
    harm = np.full((len(units), n), np.nan)  # [k, n] exact harms of the examples each head took

    def keep(live, examples, harms):
        harm[np.ix_(np.asarray(live), np.asarray(examples))] = harms

    res = sequential_necessity(
        adapter, corpus, [u[0] for u in units], floor=bar, bounds=(lo, hi) if test == "betting" else None,
        objective=objective, q=T.FDR, block=block, batch_size=batch_size, seed=seed, means=means, runner=runner,
        on_block=keep, tests=m, test=test, known=known, spread=spread,
    )  # fmt: skip
    stopped = (res.n_used < n) | (res.e_value >= m / T.FDR)
    claims, used = {}, {u: int(k) for u, k in zip(units, res.n_used)}
    full = [i for i in range(len(units)) if not stopped[i]]
    if full:
        sweep = RemovalSweep(
            units=tuple(units[i] for i in full), objective=objective.name, units_text=objective.units,
            harm={"mean": harm[full]}, measures={}, corpus={}, n=n, describe=objective.describe(),
        )  # fmt: skip
        for k, c in necessity_claims(sweep, importance, null=null, tests=m).items():
            c.extra.update(decision=EXHAUSTIVE, e_value=float(res.e_value[full[0]]))
            claims[k] = c
    for i, u in enumerate(units):
        if not stopped[i]:
            claims[u[0]].extra["e_value"] = float(res.e_value[i])
            continue
        h = harm[i][~np.isnan(harm[i])]
        eff, clo, chi = mean_ci(h, seed=i)
        holds = res.decision[i] == "necessary" and eff >= bar
        extra = stopped_extra(
            objective, mode="mean", decision=f"{res.decision[i]} (stopped by the {TESTS[test]})",
            necessary=res.decision[i] == "necessary", e_value=float(res.e_value[i]), m=m, bar=bar,
        )  # fmt: skip
        if test == "betting":
            extra["bounds"] = [float(lo), float(hi)]
        if null is not None:
            extra.update(null_quantile=null_level, null_max=null_max, null_source=null.source)
        claims[u[0]] = Claim(
            "necessity", "holds" if holds else "does not hold", statement="needed alone", effect=eff,
            ci_low=clo, ci_high=chi, count=len(h), null=floor, unit=objective.units, threshold="min_effect+fdr", extra=extra,
        )  # fmt: skip
    return claims, used


#: the sequential tests of the decide step, as a claim names the one that stopped it
TESTS = {"mixture": "block test", "betting": "betting test"}
#: the decision of a head the anytime test left undecided when the examples ran out
EXHAUSTIVE = "every example: the exhaustive test"


def _exhaustive(claim: Any) -> bool:
    """Whether a sequentially tested head was left undecided and took the exhaustive test."""
    return claim.extra.get("decision") == EXHAUSTIVE


def _check_test(test: str) -> None:
    """Refuse a decide-step ``test`` not in :data:`TESTS` (before any forward)."""
    if test not in TESTS:
        raise InputError(f"test must be one of {', '.join(TESTS)}, got {test!r}")


def _decision(corpus_level: bool, test: str, block: int, m: int, exhaustive: int = 0, floored: bool = False) -> str:
    """How the screened path decided the heads it removed exactly, as ``info["decision"]`` says
    it; ``exhaustive``: how many were still undecided when the examples ran out; ``floored``:
    the block test's variances floored by the screen's spread."""
    if corpus_level:
        return f"BH at q = {T.FDR} over all {m} heads on every example (a corpus-level objective)"
    how = "betting e-processes" if test == "betting" else "normal-mixture e-processes on block means"
    if floored and test != "betting":
        how += " (a block's variance at least the screen's spread of the head over every example)"
    return (
        f"{how} in blocks of {block} stop a head early (e-BH at q = {T.FDR} over all {m} heads); "
        f"{exhaustive} {'head' if exhaustive == 1 else 'heads'} still undecided when the examples ran out, "
        f"decided by the exhaustive test on every example, BH counting {m} heads"
    )


def stopped_extra(
    objective: Objective, *, mode: str, decision: str, necessary: bool, e_value: float, m: int, bar: float
) -> dict:
    """A sequentially decided claim's ``extra``: its mode and decision, the e-value at its stop
    (and ``p = min(1, 1/e)``), whether e-BH called it necessary, the floor, objective, FDR
    level, tests counted and the bar it was tested against."""
    return {
        "mode": mode,
        "decision": decision,
        "e_value": float(e_value),
        "p": float(min(1.0, 1.0 / e_value)) if e_value > 0 else 1.0,
        "bh_significant": bool(necessary),
        "min_effect": T.min_effect(objective.name),
        "floor_source": T.floor_source(objective.name),
        "objective": objective.name,
        "objective_described": objective.describe(),
        "fdr": T.FDR,
        "tests": int(m),
        "bar": float(bar),
    }


def betting_bounds(estimates: Optional[np.ndarray]) -> Callable[[float], tuple]:
    """The betting test's harm range around the bar, chosen before any exact removal: a
    first-order screen's per-example estimates ``[n, k]`` (harms in the objective's units)
    and the bar, widened by a quarter of their span on each side, the top at least
    ``bar + 20 |bar|`` (a saturated loss's estimates are near 0, its harms are not, and a
    range that ends near the bar leaves the bets for "necessary" no room); without them (a sketch)
    ``(bar − 2s, bar + 20s)``, ``s`` the bar (or 1), bench/bench_sequential.py's ``(−2, 20) × floor``."""

    def of(bar: float) -> tuple:
        if estimates is not None and estimates.size and np.isfinite(estimates).all():
            lo, hi = min(float(estimates.min()), bar), max(float(estimates.max()), bar)
            w = max(hi - lo, abs(bar), 1e-6)
            return lo - 0.25 * w, max(hi + 0.25 * w, bar + 20 * max(abs(bar), 1e-6))
        s = bar if bar > 0 else 1.0
        return bar - 2 * s, bar + 20 * s

    return of


def screened_necessity(
    adapter: Any,
    corpus: Any,
    objective: Objective,
    heads: Sequence,
    *,
    null_adapter: Any = None,
    importance: Optional[pd.DataFrame] = None,
    seed: int = 0,
    runner: Optional[Callable] = None,
    batch_size: int = 8,
    top_share: float = 0.25,
    min_top: int = 8,
    audit: float = 0.1,
    min_audit: int = 5,
    slack: float = 0.5,
    block: int = SCREENED_BLOCK,
    pilot: int = 48,
    bounds: Optional[tuple] = None,
    test: str = "mixture",
    confidence: float = 0.95,
    progress: bool = False,
    null_top: Optional[int] = None,
    null_screen: Optional[int] = None,
    null_sample: Optional[int] = None,
) -> ScreenedNecessity:
    """Necessity claims of ``heads`` on every example of ``corpus`` (module docstring).

    Args:
        objective: a resolved :class:`probe.analyses.common.objective.Objective`.
        heads: ``[(layer, head)]`` of the adapter's default stack.
        null_adapter: the null model (:mod:`.null_model`), ``None`` for the floor alone.
        top_share, min_top: a sketch screen confirms this share of the heads (at least
            ``min_top``) with the largest upper bounds; audit, min_audit: the share of the
            others removed exactly as an audit (at least ``min_audit``).
        slack: the first-order upper bound's relative allowance for the linearisation's
            error (:meth:`probe.analyses.necessity.screen.HeadScreen.upper`).
        block: examples per block of the sequential test (:data:`SCREENED_BLOCK`); the
            block test's variance of a head is floored by its screened estimates' spread
            over every example, where the screen is first-order.
        pilot: a sketch screen's exact pilot: every head mean-ablated on this many examples
            drawn at random (at most half the corpus; 0: none), and the heads whose pilot
            harm could reach the floor (:func:`pilot_flags`) confirmed first.
        bounds: the betting test's a-priori ``(lo, hi)`` range of a head's harm per example
            (default :func:`betting_bounds`: from a first-order screen's estimates).
        test: the decide step's sequential test of a per-example objective: ``mixture``
            (the block test on each block's mean harm, the default) or ``betting``
            (module docstring, step 3).
        runner: where every batch runs (screen, exact removals, blocks), as
            :func:`.removal.removal_sweep`'s.
        null_top: the null model's heads removed exactly on every example (default the
            larger of ``min_top`` and twice the FDR's share of the heads); fewer make the
            null's per-example quantile over heads that of its largest heads only, a bar
            that errs towards "not necessary".
        null_screen: screen the null's heads on this many random examples (default all).
        null_sample: remove the null's top heads on this many random examples (default
            all): its bar (a mean over examples, its largest head's mean) estimated on a
            sample; an undecided head's exhaustive test then takes, on the other examples,
            the null's mean quantile (:func:`.necessity.head_bar`'s level).

    Raises:
        InputError: an objective or head that does not fit (from the screen and the sweeps).
    """
    from probe.analyses.necessity.confirm import miss_rate_bound, plan_confirmation
    from probe.analyses.necessity.screen import screen_heads

    _check_test(test)
    started = time.time()
    heads = [tuple(map(int, h)) for h in heads]
    m, n, floor = len(heads), len(corpus), T.min_effect(objective.name)
    scr = screen_heads(
        adapter, corpus, objective, modes=("mean",), seed=seed, runner=runner, batch_size=batch_size,
        progress=progress,
    )  # fmt: skip
    means = scr.means  # its head means (summed by its own forwards where it folds them), for every removal
    index = {h: i for i, h in enumerate(scr.heads)}
    rows = [index[h] for h in heads]
    first, pilot_n = None, 0
    if scr.kind != "first-order" and pilot > 0:
        first, pilot_n = _pilot(
            adapter, corpus, objective, heads, size=pilot, slack=slack, seed=seed, batch_size=batch_size, runner=runner
        )
    corpus_level = bool(getattr(objective, "corpus_level", False))
    k_null = max(min_top, math.ceil(2 * T.FDR * m)) if null_top is None else int(null_top)
    sampled = null_examples(n, null_sample, seed)
    got = _null(
        null_adapter, corpus, objective, heads, sampled, k=k_null, seed=seed, batch_size=batch_size,
        runner=None, screen_on=null_screen,  # the null lives here: the run's runner would run the trained model
    )  # fmt: skip
    null, null_confirmed = got if got is not None else (None, 0)
    # per example, a head under the null's bar is never necessary (_sequential): the plan confirms at the bar
    bar = floor if corpus_level else _bar(floor, null)[0]
    plan, upper, rank = _plan(
        scr, rows, bar, top_share=top_share, min_top=min_top, audit=audit, min_audit=min_audit, slack=slack, seed=seed,
        first=first,
    )  # fmt: skip
    todo = sorted(set(plan.confirm) | set(plan.audit))
    units = [(heads[i],) for i in todo]
    common = dict(seed=seed, batch_size=batch_size, runner=runner)
    if not units:
        exact, used = {}, {}
    elif corpus_level:
        grow = min_top if scr.kind != "first-order" else 0
        audit_of = lambda top: plan_confirmation(rank, top=top, audit=audit, min_audit=min_audit, seed=seed)  # noqa: E731
        exact, used, plan = _whole_corpus(
            adapter, corpus, objective, heads, plan, rank, null, importance, grow=grow, audit_of=audit_of,
            kw=dict(common, means=means),  # every confirmation round shares the screen's head means
        )  # fmt: skip
    else:
        est = scr.estimate["mean"].reshape(n, -1)[:, [rows[i] for i in todo]] if scr.kind == "first-order" else None
        of = betting_bounds(est) if bounds is None else (lambda bar: tuple(bounds))
        exact, used = _sequential(
            adapter, corpus, objective, units, null, m, means, importance, bounds=of, block=block, test=test,
            known=scr.clean, spread=None if est is None else est.var(axis=0, ddof=1), **common,
        )  # fmt: skip
    todo = sorted(set(plan.confirm) | set(plan.audit))
    misses = [i for i in plan.audit if exact[heads[i]].holds]
    bound = miss_rate_bound(len(plan.audit), len(misses), confidence)
    est, err = scr.mean("mean")[rows], scr.stderr("mean")[rows]
    claims, rows_out = {}, []
    for i, h in enumerate(heads):
        role = "confirmed" if i in plan.confirm else "audited" if i in plan.audit else "screened out"
        c = exact.get(h) or _screened_out(upper[i], est[i], n, bound, confidence, bar, objective.units, scr.kind)
        if h in exact:
            c.extra.update(screen_role=role, screened_estimate=float(est[i]), screened_upper=float(upper[i]))
        claims[h] = c
        rows_out.append(
            {"layer": h[0], "head": h[1], "screened": float(est[i]), "stderr": float(err[i]), "upper": float(upper[i]),
             "role": role, "examples": int(used.get((h,), 0)), "exact_harm": c.effect if h in exact else float("nan"),
             "status": c.status}
        )  # fmt: skip
    info = {
        "path": "screened",
        "objective": objective.name,
        "screen": scr.kind,
        "examples_screened": n,
        "heads": m,
        "confirmed": len(plan.confirm),
        "confirmed_at": float(bar),
        "pilot": {"examples": pilot_n, "flagged": int(np.sum(first)) if first is not None else 0},
        "audited": len(plan.audit),
        "screened_out": m - len(todo),
        "examples_per_head": {f"L{u[0][0]}H{u[0][1]}": int(k) for u, k in used.items()},
        "exact_removals": int(sum(used.values())) + m * pilot_n,  # the pilot's removals included
        "exhaustive_removals": m * n,
        "decision": _decision(
            corpus_level, test, block, m, sum(_exhaustive(c) for c in exact.values()), scr.kind == "first-order"
        ),
        "audit_misses": len(misses),
        "miss_rate": len(misses) / len(plan.audit) if plan.audit else None,
        "miss_rate_upper": bound,
        "confidence": confidence,
        "null": _null_info(null, null_confirmed, len(sampled), null_screen),
        "seconds": time.time() - started,
    }
    return ScreenedNecessity(claims=claims, info=info, table=pd.DataFrame(rows_out), screen=scr)
