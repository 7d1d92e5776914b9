"""The necessity and weights claims on the whole corpus, each head decided in blocks (issue 44).

The exhaustive path removes every head on every example, so a report caps it at the
first examples. This path takes the corpus in random blocks (:data:`BLOCK` sentences) and
stops each head as soon as its claim is decided, so every head sees as much of the corpus
as its decision needs and the hard ones see all of it:

1. **the null model's bar** — every head of the null model (:mod:`.null_model`) removed
   block by block (:data:`NULL_BLOCK` sentences) in each deciding mode (mean: necessity; uniform weights: weights) and
   decided against the floor; the bar a trained head must pass is the largest of the
   floor, the null heads' mean harms and the mean over the first block's sentences of
   their per-sentence ``1 − q`` quantile over the null's heads (the exhaustive path's
   three bars, each on the examples the null heads took);
2. **the model's heads** — removed block by block (the exhaustive path's removals,
   :func:`probe.analyses.necessity.sequential.sequential_necessity`) until an
   anytime-valid test decides each against the bar: betting e-processes on per-example
   harms (Waudby-Smith & Ramdas 2023), or on a corpus-level objective (the similarity
   structure) normal-mixture e-processes on each block's size-corrected harm and its
   jackknife variance (Robbins 1970; Howard et al. 2021); e-BH over every head at
   :data:`.thresholds.FDR` (Wang & Ramdas 2022). A head the corpus leaves undecided has
   taken every example, so it is decided as the exhaustive path decides (one-sided Wilcoxon
   of its per-example harms against the bar, Benjamini–Hochberg counting every head), which
   is more powerful near the bar than the anytime test; the early stops are controlled by
   e-BH and these by BH, and the union has no proved FDR bound;
3. **beside a necessary head** — zero- and resample-ablation and the same-norm random
   perturbation on the first block (context, never a test).

Every claim states the examples its head took (``count``) and why it stopped
(``extra['decision']``). Shapes: ``DecidedClaims.table`` one row per head and mode.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, TYPE_CHECKING

if TYPE_CHECKING:
    from probe.analyses.common.objective import Objective

import numpy as np
import pandas as pd

from . import thresholds as T
from .baselines import BASELINES, baselines_info, baselines_note, judge
from .claim import Claim

__all__ = [
    "BLOCK",
    "Decide",
    "DecidedPass",
    "decided_pass",
    "NULL_BLOCK",
    "DecidedClaims",
    "DecidedRun",
    "BlockRecord",
    "decided_claims",
    "decided_removals",
    "block_removals",
    "at_the_end",
    "decided_effect",
    "null_bar",
]

#: sentences per block: the similarity structure's size correction and jackknife are
#: measured at 64 (docs/screening.md); a per-example objective's betting test takes them one by one
BLOCK = 64
#: sentences per block of the null model's heads and groups: they sit far below the floor
#: (MiniLM's reinitialised null on EWT dev: every head's harm under a tenth of it), so their
#: first block decides them and a smaller one halves what the bar costs
NULL_BLOCK = 32

_STATEMENT = {"mean": "needed alone", "uniform": "where it looks matters"}
_KIND = {"mean": "necessity", "uniform": "weights"}


@dataclass(frozen=True)
class DecidedClaims:
    """The decided path's claims.

    Attributes:
        necessity, weights: ``{(layer, head): Claim}``; info: what summary.json states
            (examples, blocks, removals used against the exhaustive count, the null's bar,
            per mode the heads decided early, at the end and undecided); table: per head
            and mode its decision, examples taken, mean harm and interval, e-values;
            means, null_means: the mean mode's head means of the model and the null model,
            clean: ``[n, ...]`` the clean readouts the runs took (NaN rows elsewhere) — for the
            redundancy groups' removals, :mod:`.decided_groups`.
    """

    necessity: dict
    weights: dict
    info: dict
    table: pd.DataFrame
    means: Any = None
    null_means: Any = None
    clean: Any = None

    def note(self) -> str:
        """One line for the report's notes."""
        i = self.info
        parts = []
        for mode, s in i["modes"].items():
            parts.append(
                f"{_KIND[mode]} ({mode}): {s['necessary']} decided necessary by it, {s['not_necessary']} stopped below "
                f"the bar, {s['undecided']} undecided after every example ({s['held_at_the_end']} of them held by "
                f"the exhaustive test on all of them); {s['holds']} hold; examples per head "
                f"{s['examples_min']}–{s['examples_max']} (median {s['examples_median']:g})"
            )
        return (
            f"necessity and weights decided head by head on all {i['examples']} examples in random blocks of "
            f"{i['block']} ({i['test']}; e-BH at q = {T.FDR} over {i['heads']} heads): "
            + "; ".join(parts)
            + f"; {i['removals']} head × example removals of the exhaustive {i['exhaustive_removals']} "
            f"({i['removals'] / max(1, i['exhaustive_removals']):.0%})"
            + (
                "; the bar "
                + ", ".join(f"{b:.3g} ({mode})" for mode, b in i["bars"].items())
                + f" with {i['null']['source']}"
                if i.get("null")
                else ""
            )
            + (f"; {baselines_note(i['baselines'])}" if i.get("baselines") else "")
        )


@dataclass(frozen=True)
class DecidedRun:
    """One deciding mode's sequential removals of every head (:func:`decided_removals`).

    Attributes:
        result: the :class:`probe.analyses.necessity.sequential.SequentialResult`; harm:
            ``[m, n]`` each head's per-example harm on the examples it took (NaN elsewhere);
        measured: ``{key: [m, n]}`` per-example measures (keyed as :class:`Decide`'s ``measures``) of the same removals (NaN where
            not taken); heads, mode, bar, n: what was run; means: the mean mode's head means;
        first: the first block's examples (every head took it); clean: ``[n, ...]`` the
            clean readouts of the examples the run took (NaN rows elsewhere), what
            ``readout`` describes (the objective's, pooling included: a sentence encoder's
            embeddings, which the faithfulness section's similarity target reuses).
    """

    result: Any
    harm: np.ndarray
    measured: dict
    heads: tuple
    mode: str
    bar: float
    n: int
    means: Any = None
    first: Optional[np.ndarray] = None
    clean: Optional[np.ndarray] = None
    readout: str = ""


@dataclass(frozen=True)
class DecidedPass:
    """The runs of one :func:`decided_pass`, one per family (the report's ablation section's:
    every head in the mean and the uniform mode, which the claims take instead of running
    them again).

    Attributes:
        runs: ``(DecidedRun, …)`` in the order asked; clean, readout, n: the clean
            readouts the pass took (every run's), what they are and the corpus size.
    """

    runs: tuple

    def of(self, mode: str) -> Optional[DecidedRun]:
        """The run of single heads in ``mode``, or ``None``."""
        return next(
            (r for r in self.runs if r.mode == mode and all(not isinstance(h[0], tuple) for h in r.heads)), None
        )

    @property
    def clean(self) -> Optional[np.ndarray]:
        return self.runs[0].clean if self.runs else None

    @property
    def readout(self) -> str:
        return self.runs[0].readout if self.runs else ""

    @property
    def n(self) -> int:
        return self.runs[0].n if self.runs else 0


@dataclass(frozen=True)
class Decide:
    """One family of a decided pass (:func:`decided_pass`): ``heads`` (``[(layer, head)]``, or
    groups ``[[(layer, head), …]]`` removed together) removed in ``mode`` and decided against
    ``bar`` (default: the objective's floor), e-BH over ``tests`` hypotheses (default: the
    heads); ``measures``: ``{key: f(clean [b, d], perturbed [b, d]) -> [b]}`` computed from
    each block's readouts of each head (the ablation section's embedding drift, keyed by its
    per-example :class:`probe.analyses.common.objective.Objective`, never by a name)."""

    heads: Sequence
    mode: str = "mean"
    bar: Optional[float] = None
    measures: Optional[dict] = None
    tests: Optional[int] = None


def decided_pass(
    adapter: Any,
    corpus: Any,
    objective: Objective,
    asks: Sequence[Decide],
    *,
    seed: int = 0,
    runner: Optional[Callable] = None,
    batch_size: int = 8,
    block: int = BLOCK,
    means: Any = None,
    known: Optional[np.ndarray] = None,
) -> list:
    """``[DecidedRun]`` per family of ``asks``, all decided in one pass over random blocks of
    ``corpus`` (:func:`probe.analyses.necessity.sequential.sequential_removals`: each block
    goes to every family with a unit still undecided, and its clean forward runs once for all
    of them); each family's test, stops and e-BH are its own (module docstring, step 2), so
    each run equals the pass of its family alone. ``known``: ``[n, ...]`` clean readouts an
    earlier pass took (a :class:`DecidedRun`'s ``clean``): their batches' clean forwards stop
    after the layers removed (:func:`probe.analyses.necessity.sequential.sequential_removals`)."""
    from probe.analyses.common.metrics import as_corpus
    from probe.analyses.necessity.ablation import position_kind_means
    from probe.analyses.necessity.sequential import RemovalTest, as_units, sequential_removals

    from .screened import betting_bounds

    corpus = as_corpus(corpus)
    heads = [tuple(u[0] if len(u) == 1 else u for u in as_units(a.heads)) for a in asks]  # a head, or a group
    bars = [T.min_effect(objective.name) if a.bar is None else float(a.bar) for a in asks]
    if means is None and any(a.mode == "mean" for a in asks):
        means = position_kind_means(adapter, corpus, objective, batch_size, adapter.default_stack)
    recs = [BlockRecord(len(h), len(corpus)) for h in heads]
    measured = [
        {name: np.full((len(h), len(corpus)), np.nan) for name in (a.measures or {})} for h, a in zip(heads, asks)
    ]
    seen: list = []  # the clean readouts [n, ...] of the examples taken, once the first block is read

    def read(f, live, examples, clean, pert):
        if not seen:
            seen.append(np.full((len(corpus),) + tuple(clean.shape[1:]), np.nan))
        seen[0][examples] = clean
        for name, fn in (asks[f].measures or {}).items():
            for j, i in enumerate(live):
                measured[f][name][i, examples] = fn(clean, pert[j])

    tests = [RemovalTest(h, bar, a.mode, a.tests, betting_bounds(None)(bar)) for h, a, bar in zip(heads, asks, bars)]
    results = sequential_removals(
        adapter, corpus, tests, objective=objective, q=T.FDR, block=block, batch_size=batch_size, seed=seed,
        means=means, runner=runner, on_block=lambda f, *a: recs[f].keep(*a), on_readouts=read, known=known,
    )  # fmt: skip
    clean = seen[0] if seen else None
    return [
        DecidedRun(
            res,
            rec.harm,
            got,
            h,
            a.mode,
            bar,
            len(corpus),
            means if a.mode == "mean" else None,
            rec.first,
            clean,
            objective.describe(),
        )  # fmt: skip
        for res, rec, got, h, a, bar in zip(results, recs, measured, heads, asks, bars)
    ]


def decided_removals(
    adapter: Any,
    corpus: Any,
    objective: Objective,
    heads: Sequence,
    *,
    mode: str = "mean",
    bar: Optional[float] = None,
    measures: Optional[dict] = None,
    seed: int = 0,
    runner: Optional[Callable] = None,
    batch_size: int = 8,
    block: int = BLOCK,
    means: Any = None,
    tests: Optional[int] = None,
) -> DecidedRun:
    """Every head of ``heads`` (or group: ``[(layer, head), …]`` removed together) removed in
    ``mode`` on random blocks of ``corpus`` until the sequential test decides it against
    ``bar`` (default: the objective's floor), e-BH over the heads (module docstring, step 2):
    :func:`decided_pass` of one family (:class:`Decide`, ``measures`` as there)."""
    ask = Decide(heads, mode, bar, measures, tests)
    return decided_pass(
        adapter, corpus, objective, [ask], seed=seed, runner=runner, batch_size=batch_size, block=block, means=means
    )[0]


class BlockRecord:
    """Each head's per-example harms on the examples it took (``on_block``)."""

    def __init__(self, m: int, n: int):
        self.harm = np.full((m, n), np.nan)
        self.first: Optional[np.ndarray] = None  # the first block's examples (every head takes it)

    def keep(self, live: np.ndarray, examples: np.ndarray, harms: np.ndarray) -> None:
        if self.first is None:
            self.first = np.asarray(examples)
        self.harm[np.ix_(np.asarray(live), np.asarray(examples))] = harms


def null_bar(run: DecidedRun, rows: Any, floor: float) -> dict:
    """``{bar, null_max, null_level}`` from the null model's units ``rows`` of ``run`` (its
    decided removals against the floor): the largest of the floor, their mean harms and the
    mean over the first block's examples of their per-example ``1 − q`` quantile (module
    docstring, step 1)."""
    from .null_model import null_quantile

    rows = np.asarray(rows)
    null_max = float(np.nanmax(run.result.mean[rows]))
    first = run.harm[np.ix_(rows, run.first)] if run.first is not None else np.full((len(rows), 1), np.nan)
    null_level = float(np.nanmean(null_quantile(first, T.FDR)))
    return {
        "bar": float(max(floor, np.nan_to_num(null_max, nan=floor), np.nan_to_num(null_level, nan=floor))),
        "null_max": null_max,
        "null_level": null_level,
    }


def _null_bar(nadapter, corpus, objective, heads, mode, *, floor, block, seed, batch_size) -> tuple:
    """``({bar, null_max, null_level, decided_below, removals}, head means or None)``: the null
    model's heads decided against the floor in ``mode`` (module docstring, step 1), in this
    process (the run's runner holds the trained model)."""
    run = decided_removals(
        nadapter,
        corpus,
        objective,
        heads,
        mode=mode,
        bar=floor,
        seed=seed,
        runner=None,
        batch_size=batch_size,
        block=block,
    )
    res = run.result
    got = null_bar(run, np.arange(len(heads)), floor)
    got.update(decided_below=int(sum(d == "not necessary" for d in res.decision)), removals=int(res.n_used.sum()))
    return got, run.means


def block_removals(adapter, corpus, objective, heads, modes, examples, *, seed, batch_size, means=None) -> dict:
    """``{mode: [k, b]}``: the harm of each head in ``heads`` removed in each of ``modes`` on
    the block ``examples`` of ``corpus``, per example: a corpus-level objective's
    size-corrected harm over the block's others (:meth:`block_harm`), else the objective's
    own (:func:`probe.analyses.claims.removal.run_removal_batches`, the sweep's removals)."""

    from probe.analyses.necessity.sequential import as_units

    from .removal import RemovalPlan, block_batches, placed_readouts, run_removal_batches

    idx = [int(i) for i in examples]
    batches = block_batches(adapter, corpus, idx, batch_size)
    units = tuple(as_units(heads))
    plan = RemovalPlan(corpus, objective, units, tuple(modes), means, seed, adapter.default_stack, batch_size)
    clean_all, pert_all = placed_readouts([run_removal_batches(adapter, plan, batches)], len(corpus), len(units))
    assert clean_all is not None
    take = np.asarray(idx)
    clean = clean_all[take].double().numpy()
    out = {}
    for mode in modes:
        pert = pert_all[mode][:, take].double().numpy()
        if getattr(objective, "corpus_level", False):
            out[mode] = np.stack([objective.block_harm(clean, pert[j]).rows for j in range(len(units))])
        else:
            out[mode] = np.stack([objective.harm(clean, pert[j]) for j in range(len(units))])
    return out


def at_the_end(res, rec, bar: float, m: int) -> dict:
    """``{head index: (p, significant)}`` of the heads the sequential test left undecided after
    every example: the exhaustive path's test of their per-example harms against ``bar``
    (one-sided Wilcoxon), Benjamini–Hochberg at :data:`.thresholds.FDR` counting all ``m`` heads."""
    from .statistics import benjamini_hochberg, floor_test

    end = [i for i, d in enumerate(res.decision) if d == "undecided" and res.n_used[i] == res.n]
    if not end:
        return {}
    p = np.array([floor_test(rec.harm[i][~np.isnan(rec.harm[i])], bar) for i in end])
    padded = np.concatenate([np.nan_to_num(p, nan=1.0), np.ones(m - len(end))])
    sig = benjamini_hochberg(padded, T.FDR)[: len(end)]
    return {i: (float(p[j]), bool(sig[j])) for j, i in enumerate(end)}


def decided_effect(res, rec, i: int, block_level: bool) -> tuple:
    """``(harms taken [k], effect, low, high)`` of unit ``i`` of a sequential test: on a
    corpus-level objective the test's own mean of its block means ± 1.96 of its jackknife
    standard error, else the mean of the per-example harms with its bootstrap interval."""
    from .statistics import mean_ci

    h = rec.harm[i][~np.isnan(rec.harm[i])]
    if block_level:
        eff = float(res.mean[i])
        half = 1.96 * float(np.sqrt(max(res.variance[i], 0.0)))
        return h, eff, eff - half, eff + half
    eff, lo, hi = mean_ci(h, seed=i)
    return h, eff, lo, hi


def _claim(kind, mode, res, rec, i, *, bar, floor, objective, m, null, block_level, end=None) -> Claim:
    if res.n < T.MIN_EXAMPLES:  # as the exhaustive path says it (issue 59, row 17)
        return Claim(
            kind, "not enough evidence", statement=_STATEMENT[mode], count=int(res.n), unit=objective.units,
            threshold="min_effect+fdr", reason=f"{res.n} examples < the minimum {T.MIN_EXAMPLES}",
        )  # fmt: skip
    decision, used = res.decision[i], int(res.n_used[i])
    _, eff, lo, hi = decided_effect(res, rec, i, block_level)
    e_value = float(res.e_value[i])
    stopped = used < res.n
    why = {
        "necessary": "its e-value passed m/q" if stopped else "e-BH on the final e-values",
        "not necessary": "its e-value against passed 1/q (below the bar)",
        "undecided": "undecided",
    }[decision]
    from .screened import stopped_extra

    extra = stopped_extra(
        objective, mode=mode, decision=f"{decision} after {used} of {res.n} examples ({why})",
        necessary=decision == "necessary", e_value=e_value, m=m, bar=bar,
    )  # fmt: skip
    extra.update(stopped_early=bool(stopped), e_against=float(res.e_against[i]), test=res.method)
    if null is not None:
        extra.update(null_quantile=null["null_level"], null_max=null["null_max"], null_source=null["source"])
    holds = decision == "necessary" and eff >= bar
    reason = f"undecided after all {res.n} examples" if decision == "undecided" else ""
    if end is not None:  # every example taken: the exhaustive path's test decides
        p, sig = end
        holds, reason = sig and eff >= bar, ""
        extra.update(
            p=p, bh_significant=sig, test=f"{res.method}, then Wilcoxon against the bar on every example",
            decision=f"undecided by the sequential test after all {res.n} examples; the exhaustive test on them: "
            f"p = {p:.3g} (Wilcoxon against the bar, BH over {m} heads) — {'holds' if holds else 'does not hold'}",
        )  # fmt: skip
    return Claim(
        kind, "holds" if holds else "does not hold", statement=_STATEMENT[mode], effect=eff, ci_low=lo, ci_high=hi,
        count=used, null=floor, unit=objective.units, threshold="min_effect+fdr", reason=reason, extra=extra,
    )  # fmt: skip


def decided_claims(
    adapter: Any,
    corpus: Any,
    objective: Objective,
    heads: Sequence,
    *,
    null_adapter: Any = None,
    null_source: str = "",
    modes: Sequence[str] = ("mean", "uniform"),
    seed: int = 0,
    runner: Optional[Callable] = None,
    batch_size: int = 8,
    block: int = BLOCK,
    beside: Sequence[str] = ("zero", "resample", "random"),
    pattern: Optional[dict] = None,
    reuse: Any = None,
    baselines: bool = True,
) -> DecidedClaims:
    """Necessity (``mean``) and weights (``uniform``) claims of ``heads`` on every example of
    ``corpus``, each head decided in blocks (module docstring).

    Args:
        objective: a resolved :class:`probe.analyses.common.objective.Objective`.
        heads: ``[(layer, head)]`` of the adapter's default stack.
        null_adapter: the null model (:mod:`.null_model`), ``None`` for the floor alone.
        modes: the deciding modes to run (``mean``, ``uniform``).
        beside: the modes run beside a necessary head's claim, on the first block.
        pattern: the pattern claims (where a head that holds the weights claim parks its attention).
        baselines: decide each necessary head again under the other baselines
            (:func:`confirm_decided`): one that does not hold under each
            *depends on the baseline*.
        reuse: a :class:`DecidedPass` (or :class:`DecidedRun`) of the same heads, corpus and
            objective (the report's ablation section's): a mode it ran is not run again where
            its bar is this one's.
        runner: where each block's batches run (:mod:`probe.runs.blocks`), as
            :func:`.removal.removal_sweep`'s.

    Raises:
        InputError: an objective or head that does not fit (from the removals).
    """
    from probe.analyses.necessity.ablation import position_kind_means
    from .necessity import beside_modes
    from .removal import RemovalSweep

    from probe.analyses.common.metrics import as_corpus

    started = time.time()
    corpus = as_corpus(corpus)
    heads = [tuple(map(int, h)) for h in heads]
    m, n, floor = len(heads), len(corpus), T.min_effect(objective.name)
    skipped = {}
    if "uniform" in modes and adapter.arch == "encoder-decoder":  # as removal_sweep: no attention replacement
        modes = tuple(mode for mode in modes if mode != "uniform")
        skipped["uniform"] = "attention replacement supports encoder or decoder models, not encoder-decoder"
    block_level = bool(getattr(objective, "corpus_level", False))
    common: dict[str, Any] = dict(block=block, seed=seed, batch_size=batch_size, runner=runner)
    bars, nulls, null_means = {}, {}, None
    for mode in modes:
        if null_adapter is None:
            bars[mode] = floor
            continue
        # the null model lives in this process only: the run's runner would run the trained model
        got, got_means = _null_bar(
            null_adapter, corpus, objective, heads, mode, floor=floor, block=min(block, NULL_BLOCK), seed=seed,
            batch_size=batch_size,
        )  # fmt: skip
        null_means = got_means if got_means is not None else null_means
        nulls[mode] = dict(got, source=null_source)
        bars[mode] = got["bar"]
    reused = reuse.runs if isinstance(reuse, DecidedPass) else (() if reuse is None else (reuse,))
    means = next((r.means for r in reused if r.means is not None), None)
    if means is None and "mean" in modes:
        means = position_kind_means(adapter, corpus, objective, batch_size, adapter.default_stack)
    claims: dict = {mode: {} for mode in modes}
    rows, summary, removals, first, beside_removals = [], {}, 0, None, 0
    runs = {
        mode: r for mode in modes for r in reused if r.mode == mode and r.bar == bars[mode] and r.heads == tuple(heads)
    }
    todo = [mode for mode in modes if mode not in runs]  # the ablation section's removals are not run again
    if todo:  # the modes left in one pass: each block's clean forward once for both
        asks = [Decide(heads, mode, bars[mode]) for mode in todo]
        runs.update(zip(todo, decided_pass(adapter, corpus, objective, asks, means=means, **common)))
    for mode in modes:
        rec = runs[mode]
        res = rec.result
        first = rec.first if first is None else first
        removals += int(res.n_used.sum())
        end = at_the_end(res, rec, bars[mode], m)
        for i, h in enumerate(heads):
            c = _claim(
                _KIND[mode], mode, res, rec, i, bar=bars[mode], floor=floor, objective=objective, m=m,
                null=nulls.get(mode), block_level=block_level, end=end.get(i),
            )  # fmt: skip
            claims[mode][h] = c
            rows.append(
                {"layer": h[0], "head": h[1], "mode": mode, "decision": res.decision[i], "examples": int(res.n_used[i]),
                 "harm": c.effect, "ci_low": c.ci_low, "ci_high": c.ci_high, "e_value": float(res.e_value[i]),
                 "e_against": float(res.e_against[i]), "bar": bars[mode], "status": c.status}
            )  # fmt: skip
        used = res.n_used
        summary[mode] = {
            **{k: v for k, v in res.summary().items() if k in ("necessary", "not_necessary", "undecided")},
            "holds": sum(c.holds for c in claims[mode].values()),
            "decided_at_the_end": len(end),
            "held_at_the_end": sum(claims[mode][heads[i]].holds for i in end),
            "stopped_early": int((used < n).sum()),
            "examples_min": int(used.min()),
            "examples_max": int(used.max()),
            "examples_median": float(np.median(used)),
        }
    necessity = claims.get("mean", {})
    baseline_removals = 0
    if "mean" in modes and baselines:  # the held heads decided again under the other baselines
        necessity, baseline_removals = confirm_decided(
            adapter, corpus, objective, necessity, bar=bars["mean"], tests=m, means=means, seed=seed,
            batch_size=batch_size, block=block, runner=runner,
        )  # fmt: skip
        claims["mean"] = necessity
    held = [h for h, c in necessity.items() if c.holds]
    if held and beside and first is not None:
        got = block_removals(
            adapter, corpus, objective, held, beside, first, seed=seed, batch_size=batch_size, means=means
        )
        sweep = RemovalSweep(
            units=tuple((h,) for h in held), objective=objective.name, units_text=objective.units, harm=got,
            measures={}, corpus={}, n=len(first), describe=objective.describe(),
        )  # fmt: skip
        beside_modes(necessity, sweep)
        beside_removals = len(held) * len(beside) * len(first)
    if "uniform" in modes and "mean" in modes:
        from .necessity import read_weights

        removal = np.array([necessity[h].effect for h in heads])
        claims["uniform"] = read_weights(claims["uniform"], heads, removal, pattern, floor)
    info = {
        "path": "sequential",
        "examples": n,
        "block": block,
        "null_block": min(block, NULL_BLOCK),
        "heads": m,
        "test": "normal-mixture e-processes on block means" if block_level else "betting e-processes per example",
        "modes": summary,
        "bars": bars,
        "null": {
            "source": null_source,
            **{mode: {k: v for k, v in s.items() if k != "source"} for mode, s in nulls.items()},
        }
        if nulls
        else None,
        "removals": removals,
        "null_removals": int(sum(s["removals"] for s in nulls.values())),
        "beside_removals": beside_removals,
        "baseline_removals": baseline_removals,
        "baselines": baselines_info(
            necessity, dict(means.to_dict(), described=means.describe()) if means is not None else {}
        ),
        "exhaustive_removals": m * n * len(modes),
        "seconds": time.time() - started,
    }
    weights = claims.get("uniform") or {
        h: Claim("weights", "not tested", reason=skipped.get("uniform", "not run")) for h in heads
    }
    clean = next((r.clean for r in runs.values() if r.clean is not None), None)
    return DecidedClaims(
        necessity=necessity, weights=weights, info=info, table=pd.DataFrame(rows), means=means,
        null_means=null_means, clean=clean,
    )  # fmt: skip


def confirm_decided(
    adapter: Any,
    corpus: Any,
    objective: Objective,
    claims: dict,
    *,
    bar: float,
    tests: int,
    means: Any,
    seed: int = 0,
    batch_size: int = 8,
    block: Optional[int] = None,
    runner: Optional[Any] = None,
    modes: Sequence[str] = BASELINES[1:],
) -> tuple:
    """The decided path's held heads (or groups) decided again under each
    other baseline: the same sequential test on the same random blocks (the same ``seed``),
    against the same ``bar``, e-BH over ``tests`` hypotheses. Returns ``(claims as
    :func:`judge` leaves them, removals used)``."""
    held = [k for k, c in claims.items() if c.holds]
    if not held:
        return claims, 0
    block_level = bool(getattr(objective, "corpus_level", False))
    asks = [Decide(held, mode, bar, tests=tests) for mode in modes]
    runs = decided_pass(
        adapter, corpus, objective, asks, means=means, seed=seed, batch_size=batch_size, runner=runner,
        block=BLOCK if block is None else int(block),
    )  # fmt: skip
    values: dict = {}
    used = 0
    for run in runs:
        res = run.result
        used += int(res.n_used.sum())
        end = at_the_end(res, run, bar, tests)
        for i, key in enumerate(held):
            _, eff, lo, hi = decided_effect(res, run, i, block_level)
            ok = res.decision[i] == "necessary"
            if i in end:
                ok = end[i][1]
            values.setdefault(key, {})[run.mode] = {
                "effect": eff, "ci_low": lo, "ci_high": hi, "holds": bool(ok) and eff >= bar,
                "examples": int(res.n_used[i]), "decision": str(res.decision[i]),
            }  # fmt: skip
    return judge(claims, values), used
