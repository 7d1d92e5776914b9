"""The causal claims on the screened path, whose cost does not grow with the head count.

The exhaustive path removes every head in every deciding mode on every model-run example
(``n_heads × modes`` restarted forwards per batch, on the model and on the null); the
sequential path removes every head exactly on at least one block. At SmolLM2's 270 heads
either is hours on two cores. Here:

* **necessity** — :func:`.screened.screened_necessity`: every head screened at once by
  attribution patching (Nanda 2023; Kramár et al. 2024; one forward + backward per batch,
  on every example), the heads whose screened upper bound reaches the floor plus a random
  audit removed exactly and stopped in blocks when decided; a head never removed exactly
  is not necessary, with the audit's Clopper–Pearson bound on the screen's miss rate. The
  report's ablation section runs it and the claims reuse it (``reuse``).
* **weights** — uniform attention weights are not a replacement of the head's output the
  screen linearises (the uniform output depends on the head's values, not a fixed vector):
  the heads removed exactly for necessity are given uniform weights on the model-run
  examples, against the null model's uniform harms over a seeded random sample of its heads
  (the per-example quantile over heads is estimated from the sample), BH counting every
  head; every other head's weights claim is *not tested*, with that reason.
* **redundancy** and the baselines beside a necessary head as on the exhaustive path (their
  removals are of candidate groups and held heads, not of every head), the null's bar from
  :data:`NULL_GROUPS` random groups of each size in all (the exhaustive path: 4 of each
  size from every layer, 240 per size at SmolLM2's 30 layers). The candidate groups (heads
  of one layer sharing a pattern, none needed alone) are at most one per layer and role:
  their count grows with the layers, not with the heads per layer.

Shapes: claims ``{(layer, head): Claim}``.
"""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any, Optional, TYPE_CHECKING

import numpy as np
import pandas as pd

from . import thresholds as T
from .claim import Claim

if TYPE_CHECKING:
    from probe.analyses.common.objective import Objective

__all__ = [
    "screened_claims",
    "reusable_screen",
    "NULL_WEIGHT_HEADS",
    "NULL_WEIGHT_EXAMPLES",
    "NULL_WEIGHT_NEGLIGIBLE",
    "NULL_GROUPS",
    "REPORT_SCREEN",
    "SCREENED_EXAMPLES",
]

#: null-model heads given uniform weights for the weights claims' bar on the screened path
NULL_WEIGHT_HEADS = 16

#: of the :data:`SCREENED_EXAMPLES` the weights claims read, the null model's heads are given
#: uniform weights on this many drawn at random (:func:`.screened.null_examples`); the others
#: take the mean of the sampled per-example quantiles (:func:`.necessity._null_side`), as the
#: necessity bar's null sample does. The decided path's null block is as large
#: (:data:`.decided.NULL_BLOCK`): the null's heads sit far below the floor (SmolLM2's: a 95%
#: quantile of 0.0006 nats, its largest head 0.0001, against a floor of 0.01), and 16 × 64
#: rows of it cost SmolLM2's report 46 s, more than the model's own 8 × 64
NULL_WEIGHT_EXAMPLES = 32

#: the null model's :data:`NULL_WEIGHT_HEADS` are given uniform weights in two halves, in the
#: order drawn: where every harm of the first half (each head on each sampled example) lies
#: within this share of the objective's floor, the second half is not run. A null at or under
#: the floor on every example leaves the bar at the floor and its Wilcoxon statistic at least
#: the floor's (the signed-rank statistic counts the positive Walsh averages, which a lower
#: null can only add to), so the floor's test decides: the second half could move a verdict
#: only with a head over the floor on some example, twice the bound every harm of the first
#: half kept to. On SmolLM2's 32 sampled sentences the first 8 heads' largest harm was
#: 0.0021 nats (the second 8's 0.0048) under a floor of 0.01: the second half's 256 rows
#: (about 15 s) changed the bar's stated digits and no verdict
NULL_WEIGHT_NEGLIGIBLE = 0.5

#: null-model groups of each size the redundancy claims' bar takes on the screened path (in
#: all, each from a random layer; the exhaustive path takes 4 of each size from every layer)
NULL_GROUPS = 8

#: the report's screened necessity (:func:`.screened.screened_necessity`): the null model's
#: heads ranked by a screen of 64 random examples and its 8 largest removed exactly on those
#: 64 (the bar: their per-example 95% quantile's mean and their largest mean, at least the
#: whole null's where the screen ranks its largest first, so it errs towards "not
#: necessary"); a cost that grows neither with the head count nor with the corpus
REPORT_SCREEN: dict[str, Any] = {"null_top": 8, "null_screen": 64, "null_sample": 64}

#: the examples the weights, baselines and redundancy claims read on the screened path: the
#: first 64 of the model-run examples (two blocks of the decide step,
#: :data:`.screened.SCREENED_BLOCK`). Their cost is heads × modes × examples; on SmolLM2 the
#: confirmed heads given uniform weights and each necessary head's three baselines on all
#: 128 would cost more than the screen of every head on every example
SCREENED_EXAMPLES = 64


def reusable_screen(got: Any, objective: Objective, n: int) -> bool:
    """Whether ``got`` (the ablation section's removals) is a screened necessity run of
    ``objective`` on ``n`` examples, so the claims take it instead of screening again."""
    from .screened import ScreenedNecessity

    return (
        isinstance(got, ScreenedNecessity)
        and got.info.get("objective") == objective.name
        and int(got.info.get("examples_screened", -1)) == int(n)
    )


def screened_readouts(got: Any, whole: Any, corpus: Any) -> Optional[np.ndarray]:
    """``[len(corpus), ...]`` the clean readouts the screen ``got`` (a ScreenedNecessity) read
    on ``whole``, for ``corpus`` where it is ``whole``'s first examples (the model-run ones);
    ``None`` where the screen kept none or ``corpus`` is not such a prefix."""
    clean = got.screen.clean if got.screen is not None else None
    k = len(corpus)
    if clean is None or k > len(whole) or tuple(corpus.texts) != tuple(whole.texts[:k]):
        return None
    if (corpus.targets or whole.targets) and tuple(corpus.targets or ()) != tuple((whole.targets or ())[:k]):
        return None
    return clean[:k]


def _weights(
    adapter, nadapter, corpus, objective, heads, exact, necessity, pattern, *, seed, runner, progress, known=None
) -> tuple:
    """``(weights claims of every head, the uniform sweep or None)``: ``exact`` given uniform
    weights on ``corpus`` (``known``: its clean readouts already read), the null's bar from
    :data:`NULL_WEIGHT_HEADS` of its heads (half of them where those sit within
    :data:`NULL_WEIGHT_NEGLIGIBLE` × the floor) on :data:`NULL_WEIGHT_EXAMPLES` of the examples."""
    from .necessity import NullSweep, weights_claims
    from .removal import removal_sweep
    from .screened import null_examples, placed_sweep

    why = (
        f"not tested on the screened path ({len(heads)} heads): uniform attention weights are not a replacement "
        f"of the head's output the screen linearises, so only the {len(exact)} heads the necessity screen "
        "confirmed were given uniform weights; this head was not among them"
    )
    out = {h: Claim("weights", "not tested", reason=why) for h in heads}
    if not exact:
        return out, None
    sweep = removal_sweep(
        adapter, corpus, objective, units=exact, modes=("uniform",), seed=seed, runner=runner, progress=progress,
        known=known,
    )  # fmt: skip
    null = None
    if nadapter is not None and "uniform" in sweep.harm:
        sample = null_examples(len(corpus), NULL_WEIGHT_EXAMPLES, seed)
        sub = corpus if len(sample) == len(corpus) else corpus.subset(sample, reason="the null model's weights sample")
        ns, drawn, largest = _null_uniform(nadapter, sub, objective, heads, seed)
        on = f"{len(ns.units)} of its heads at random"
        if len(sample) < len(corpus):  # NaN on the examples it was not given uniform weights on
            ns = placed_sweep(ns, "uniform", len(corpus), sample)
            on += f", on {len(sample)} of the {len(corpus)} examples"
        if drawn > len(ns.units):
            on += (
                f"; the other {drawn - len(ns.units)} of the {drawn} drawn not run: every harm of these within "
                f"{NULL_WEIGHT_NEGLIGIBLE:g} × the floor, the largest {largest:.3g}"
            )
        null = NullSweep(ns, nadapter.card["null_source"] + f" ({on})")
    removal = np.array([necessity[h].effect for h in exact], np.float64)
    out.update(weights_claims(sweep, pattern, null=null, tests=len(heads), removal=removal))
    return out, sweep


def _null_uniform(nadapter, corpus, objective, heads, seed: int) -> tuple:
    """``(the null's uniform sweep, the heads drawn, the first half's largest harm)``:
    :data:`NULL_WEIGHT_HEADS` of ``heads`` drawn at random and given uniform weights on
    ``corpus``, the first half of the draw first and the second only where a harm of the
    first exceeds :data:`NULL_WEIGHT_NEGLIGIBLE` × the floor (rows in head order either way)."""
    from .removal import removal_sweep

    drawn = np.random.default_rng(seed).choice(len(heads), min(len(heads), NULL_WEIGHT_HEADS), replace=False)
    halves = [sorted(drawn[: (len(drawn) + 1) // 2].tolist()), sorted(drawn[(len(drawn) + 1) // 2 :].tolist())]
    ns = removal_sweep(nadapter, corpus, objective, units=[heads[i] for i in halves[0]], modes=("uniform",), seed=seed)
    floor = T.min_effect(objective.name)
    largest = float(np.nanmax(ns.harm["uniform"])) if ns.harm["uniform"].size else float("nan")
    if halves[1] and not largest <= NULL_WEIGHT_NEGLIGIBLE * floor:
        rest = removal_sweep(
            nadapter, corpus, objective, units=[heads[i] for i in halves[1]], modes=("uniform",), seed=seed
        )  # fmt: skip
        ns = _joined(ns, rest)
    return ns, len(drawn), largest


def _joined(first: Any, second: Any) -> Any:
    """The removal sweeps ``first`` and ``second`` of other units on the same examples as one,
    its units (and their rows) in head order."""
    units = list(first.units) + list(second.units)
    order = sorted(range(len(units)), key=lambda i: units[i])

    def rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.concatenate([np.asarray(a), np.asarray(b)])[order]

    harm = {m: rows(first.harm[m], second.harm[m]) for m in first.harm}
    measures = {m: {k: rows(v, second.measures[m][k]) for k, v in first.measures[m].items()} for m in first.measures}
    return replace(first, units=tuple(units[i] for i in order), harm=harm, measures=measures)


def _screen(adapter, nadapter, whole, objective, heads, *, seed, runner, progress, reuse) -> Any:
    """The ablation section's screened run ``reuse`` when :func:`reusable_screen`, else a new
    one on ``whole`` with the report's settings (:data:`REPORT_SCREEN`)."""
    from .screened import screened_necessity

    if reusable_screen(reuse, objective, len(whole)):
        return reuse
    return screened_necessity(
        adapter, whole, objective, heads, null_adapter=nadapter, seed=seed, runner=runner, progress=progress,
        **REPORT_SCREEN,
    )  # fmt: skip


def _note(objective, why: str, n_whole: int, n_corpus: int, n_exact: int, n_heads: int, baselines: dict) -> str:
    """The claims' note on the screened path: what was screened, removed and tested on what."""
    from .baselines import baselines_note

    return (
        f"objective: {objective.describe()} — {why}; units: {objective.units}; necessity by screening every head on all "
        f"{n_whole} examples (below); the {n_exact} heads it confirmed also given uniform attention weights on "
        f"{n_corpus} examples (weights; the other {n_heads - n_exact} not tested), the redundancy groups and the "
        f"baselines beside a necessary head on the same {n_corpus}; " + baselines_note(baselines)
    )


def screened_claims(
    adapter: Any,
    nadapter: Any,
    corpus: Any,
    whole: Any,
    objective: Objective,
    heads: list,
    pattern: dict,
    importance: Optional[pd.DataFrame],
    runner: Any,
    notes: list,
    tables: dict,
    info: dict,
    *,
    seed: int,
    why: str,
    progress: bool = False,
    reuse: Any = None,
) -> tuple:
    """``(necessity, weights, redundancy)`` on the screened path (module docstring):
    necessity screened on ``whole`` (every example; ``reuse``: the ablation section's run,
    when :func:`reusable_screen`), weights, redundancy and the baselines on the first
    :data:`SCREENED_EXAMPLES` of ``corpus`` (the model-run examples). Fills ``tables`` (``screened``, ``removal``, ``groups``), ``info``
    (``causal``: the screened run's summary and note) and ``notes``."""
    from .baselines import baselines_info
    from .held_heads import beside_necessary, confirm_baselines, removal_table
    from .necessity import add_importance
    from .redundancy import redundancy_claims

    got = _screen(adapter, nadapter, whole, objective, heads, seed=seed, runner=runner, progress=progress, reuse=reuse)
    if len(corpus) > SCREENED_EXAMPLES:
        corpus = corpus.subset(range(SCREENED_EXAMPLES), reason="the screened path's weights, baselines and groups")
    necessity = add_importance(dict(got.claims), importance)
    tables["screened"] = got.table
    info["causal"] = dict(got.info, note=got.note(), reused=got is reuse)
    if nadapter is not None:
        info.update(null=nadapter.card["null_source"], null_quantile_level=1.0 - T.FDR)
    roles = {(int(r.layer), int(r.head)): r.role for r in got.table.itertuples(index=False)}
    exact = [h for h in heads if roles.get(h) == "confirmed"]
    known = screened_readouts(got, whole, corpus)  # the screen's clean readouts: no clean forward to read them again
    weights, sweep = _weights(
        adapter, nadapter, corpus, objective, heads, exact, necessity, pattern, seed=seed, runner=runner,
        progress=progress, known=known,
    )  # fmt: skip
    beside = beside_necessary(
        adapter, corpus, objective, necessity, sweep or SimpleNamespace(harm={}), seed, runner, known=known
    )
    necessity = confirm_baselines(necessity, (sweep, beside), len(heads))
    info["baselines"] = baselines_info(necessity, getattr(beside or sweep, "kinds", {}))
    redundancy, groups = redundancy_claims(
        adapter, corpus, objective, pattern, necessity, seed=seed, runner=runner, null_adapter=nadapter,
        null_per_size=NULL_GROUPS, known=known,
    )  # fmt: skip
    if groups:
        tables["groups"] = pd.DataFrame(groups)
    done = [removal_table(s) for s in (sweep, beside) if s is not None]
    if done:
        tables["removal"] = pd.concat(done, ignore_index=True)
    notes.append(_note(objective, why, len(whole), len(corpus), len(exact), len(heads), info["baselines"]))
    return necessity, weights, redundancy
