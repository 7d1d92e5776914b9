"""The causal claims' one engine: three paths behind one interface.

The claims that remove heads (necessity, weights, redundancy: :mod:`.removal`) are decided on
one of three paths, the strategy the run's ``--causal`` names (``auto`` is settled by the run,
``probe.app.registry.analyses._shared.causal_path``):

* ``exhaustive`` — every head removed in every deciding mode on every example of the
  (capped) corpus, the claims tested with Benjamini–Hochberg across the heads
  (:func:`exhaustive`; Wang et al. 2022 for mean-ablation);
* ``screened`` — every head screened on the whole corpus at once by attribution patching
  (Syed et al. 2023), those that could matter removed exactly (:mod:`.screened_claims`);
* ``sequential`` — each head removed on random blocks of the whole corpus until a betting
  test decides it (:mod:`.decided`; Waudby-Smith & Ramdas 2024).

Each path is a :class:`CausalPath`: ``decide(inputs, record)`` with the same
:class:`CausalInputs` (the model and its null, the corpora, the run's resolved objective,
the heads and their pattern claims, what an earlier section removed) and fills the same
:class:`CausalRecord` — what was decided (the three claim kinds) and how (the path, the
objective, its floor, the null, the decision's own summary in ``info["causal"]``, the notes
and tables). :func:`decide_causal` is the one entry: it picks the path by name, states
*not tested* with the reason where no live model or the objective does not fit, and returns
the record. A new path is one class registered in :data:`PATHS`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol, TYPE_CHECKING

import pandas as pd

from probe.errors import InputError, NotApplicable

from . import thresholds as T
from .claim import Claim

if TYPE_CHECKING:
    from probe.analyses.common.objective import Objective

log = logging.getLogger(__name__)

__all__ = ["CAUSAL", "PATHS", "CausalInputs", "CausalRecord", "CausalPath", "decide_causal", "not_tested"]

#: the modes that decide a claim on the exhaustive path (mean: necessity; uniform: weights)
DECIDING_MODES = ("mean", "uniform")


def not_tested(kind: str, heads: list, reason: str) -> dict:
    """``{head: Claim(kind, "not tested", reason)}`` for every head."""
    return {k: Claim(kind, "not tested", reason=reason) for k in heads}


@dataclass(frozen=True)
class CausalInputs:
    """What every causal path decides from.

    Attributes:
        adapter: the live model; null_adapter: its null model (:mod:`.null_model`) or ``None``.
        corpus: the examples the exhaustive path (and the screened path's weights and
            redundancy) remove heads on: the run's capped corpus.
        screen_corpus: the examples the screened and sequential paths decide necessity on
            (the whole corpus; ``None`` on the exhaustive path).
        objective: the run's resolved :class:`probe.analyses.common.objective.Objective`
            (``use="corpus"``); why: how the run chose it.
        heads: ``[(layer, head)]``; pattern: the pattern claims (the weights claims read them).
        importance: table ``layer, head, importance`` shown beside necessity, or ``None``.
        reuse: removals an earlier section ran (the ablation section's sweep, screen or
            decided pass), taken instead of running them again where they fit.
        runner: where the removal batches run (``None``: this process); seed; progress.
    """

    adapter: Any
    null_adapter: Any
    corpus: Any
    screen_corpus: Any
    objective: Objective
    why: str
    heads: list
    pattern: dict
    importance: Any = None
    reuse: Any = None
    runner: Any = None
    seed: int = 0
    progress: bool = False


@dataclass
class CausalRecord:
    """What a causal path decided and how.

    Attributes:
        path: the path that decided (:data:`PATHS`).
        necessity, weights, redundancy: ``{head: Claim}`` of each kind.
        info: the objective (name, described, why, units, floor and its source, examples),
            the null model's source, and the path's own summary (``causal``: the screened
            or sequential decision's counts and note; the exhaustive path's baselines).
        notes: the sentences the report shows; tables: the evidence tables
            (``removal``, ``groups``, ``screened``, ``decided``).
    """

    path: str
    necessity: dict = field(default_factory=dict)
    weights: dict = field(default_factory=dict)
    redundancy: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    tables: dict = field(default_factory=dict)


class CausalPath(Protocol):
    """One way of deciding the causal claims: fills ``record``'s claims, info, notes and tables."""

    name: str

    def decide(self, inputs: CausalInputs, record: CausalRecord) -> None: ...


def decide_causal(path: str, inputs: Optional[CausalInputs], heads: list) -> CausalRecord:
    """The causal claims of ``heads`` decided on ``path`` (one of :data:`CAUSAL`):
    *not tested* with the reason without ``inputs`` (no live model) or where the
    objective does not fit the model or corpus.

    Raises:
        InputError: an unknown path.
        TypeError: ``inputs.objective`` is a name, not an Objective.
    """
    from probe.analyses.common.objective import given_objective

    if path not in PATHS:
        raise InputError(f"unknown causal path {path!r}; use {' or '.join(PATHS)}")
    record = CausalRecord(path)
    reason = "no live model" if inputs is None else f"not decided on the {path} path"
    record.necessity, record.weights, record.redundancy = (
        not_tested(k, heads, reason) for k in ("necessity", "weights", "redundancy")
    )
    if inputs is None:
        return record
    try:
        obj = given_objective(inputs.objective, inputs.adapter, inputs.corpus)
        record.info = {
            "objective": obj.name,
            "described": obj.describe(),
            "why": inputs.why,
            "units": obj.units,
            "floor": T.min_effect(obj.name),
            "floor_source": T.floor_source(obj.name),
            "n": len(inputs.corpus),
        }
        PATHS[path].decide(inputs, record)
    except NotApplicable as exc:  # an objective that does not fit this model or corpus: say so per claim
        log.warning("causal claims not tested: %s", exc.reason)
        why = f"not tested on this model: {exc.reason}"
        record.necessity, record.weights, record.redundancy = (
            not_tested(k, heads, why) for k in ("necessity", "weights", "redundancy")
        )
    return record


class Exhaustive:
    """Every head removed in the deciding modes (and, beside a necessary head's claim, the
    other baselines) on every example of ``inputs.corpus``; the null model's same removals."""

    name = "exhaustive"

    def decide(self, inputs: CausalInputs, record: CausalRecord) -> None:
        from .baselines import baselines_info
        from .decided import DecidedPass, DecidedRun
        from .held_heads import beside_necessary, confirm_baselines, measured_beside, removal_table
        from .necessity import necessity_claims, weights_claims
        from .redundancy import redundancy_claims
        from .removal import removal_sweep

        x, info = inputs, record.info
        reuse = None if isinstance(x.reuse, (DecidedRun, DecidedPass)) else x.reuse  # decided on other examples
        # every head in the modes that decide a claim; the modes beside a necessary head's claim
        # (zero, resample, random) for those heads, below
        sweep = removal_sweep(
            x.adapter, x.corpus, x.objective, units=x.heads, modes=DECIDING_MODES + measured_beside(reuse),
            seed=x.seed, progress=x.progress, reuse=reuse, runner=x.runner,
        )  # fmt: skip
        null_sweep = _null_sweep(x.null_adapter, x.corpus, x.objective, x.heads, x.seed, x.progress)
        if null_sweep is not None:
            info.update(null=null_sweep.source, null_quantile_level=1.0 - T.FDR)
        necessity = necessity_claims(sweep, x.importance, null=null_sweep)
        beside = beside_necessary(x.adapter, x.corpus, x.objective, necessity, sweep, x.seed, x.runner)
        record.necessity = confirm_baselines(necessity, (sweep, beside), len(x.heads))
        info["baselines"] = baselines_info(record.necessity, sweep.kinds)
        record.weights = weights_claims(sweep, x.pattern, null=null_sweep)
        record.redundancy, groups = redundancy_claims(
            x.adapter, x.corpus, x.objective, x.pattern, record.necessity, seed=x.seed, runner=x.runner,
            null_adapter=x.null_adapter,
        )  # fmt: skip
        if groups:
            record.tables["groups"] = pd.DataFrame(groups)
        tables = [removal_table(sweep)] + ([] if beside is None else [removal_table(beside)])
        record.tables["removal"] = tables[0] if len(tables) == 1 else pd.concat(tables, ignore_index=True)
        record.notes.append(_exhaustive_note(x, info, null_sweep))


def _exhaustive_note(x: CausalInputs, info: dict, null_sweep: Any) -> str:
    """The exhaustive path's sentence: the objective, the removals and how necessity is decided."""
    from .baselines import baselines_note

    obj = x.objective
    return (
        f"objective: {obj.describe()} — {x.why}; units: {obj.units}; each head mean-ablated alone "
        f"(Wang et al. 2022; beside a necessary head's claim: zero-, one-mean and resample-ablation and a same-norm "
        f"random perturbation of it) on {len(x.corpus)} examples; necessity holds "
        f"when the harm exceeds the floor {T.min_effect(obj.name):g} "
        f"({T.floor_source(obj.name)}), BH at q = {T.FDR} across {len(x.heads)} heads"
        + (
            f", and the {1 - T.FDR:.0%} quantile over the heads of {null_sweep.source} per example"
            if null_sweep is not None
            else ""
        )
        + f"; {baselines_note(info['baselines'])}"
    )


def _null_sweep(nadapter: Any, corpus: Any, objective: Objective, heads: list, seed: int, progress: bool) -> Any:
    """The :class:`.necessity.NullSweep` of the mean and uniform removals of ``heads`` on
    the null model ``nadapter`` (``None`` without one)."""
    from .necessity import NullSweep
    from .removal import removal_sweep

    if nadapter is None:
        return None
    modes = ("mean",) if nadapter.arch == "encoder-decoder" else ("mean", "uniform")
    sweep = removal_sweep(nadapter, corpus, objective, units=heads, modes=modes, seed=seed, progress=progress)
    return NullSweep(sweep, nadapter.card["null_source"])


class Screened:
    """Necessity screened on ``inputs.screen_corpus`` (every example at once), the heads that
    could matter removed exactly; weights on the heads it confirmed, redundancy on the corpus
    (:func:`.screened_claims.screened_claims`)."""

    name = "screened"

    def decide(self, inputs: CausalInputs, record: CausalRecord) -> None:
        from .screened_claims import screened_claims

        x = inputs
        record.necessity, record.weights, record.redundancy = screened_claims(
            x.adapter, x.null_adapter, x.corpus, x.screen_corpus, x.objective, x.heads, x.pattern, x.importance,
            x.runner, record.notes, record.tables, record.info, seed=x.seed, why=x.why, progress=x.progress,
            reuse=x.reuse,
        )  # fmt: skip


class Sequential:
    """Necessity and weights decided head by head on random blocks of ``inputs.screen_corpus``
    (:func:`.decided.decided_claims`; the ablation section's decided pass reused), and the
    redundancy groups decided the same way (:func:`.decided_groups.decided_redundancy`)."""

    name = "sequential"

    def decide(self, inputs: CausalInputs, record: CausalRecord) -> None:
        from .decided import DecidedPass, DecidedRun, decided_claims
        from .necessity import add_importance

        x, nadapter = inputs, inputs.null_adapter
        source = nadapter.card["null_source"] if nadapter is not None else ""
        reuse = x.reuse if isinstance(x.reuse, (DecidedRun, DecidedPass)) else None
        got = decided_claims(
            x.adapter, x.screen_corpus, x.objective, x.heads, null_adapter=nadapter, null_source=source,
            seed=x.seed, runner=x.runner, pattern=x.pattern, reuse=reuse,
        )  # fmt: skip
        record.necessity, record.weights = add_importance(got.necessity, x.importance), got.weights
        if nadapter is not None:
            record.info.update(null=source, null_quantile_level=1.0 - T.FDR)
        record.tables["decided"] = got.table
        record.info["causal"] = dict(got.info, note=got.note())
        record.redundancy = _decided_redundancy(x, record, got, source)
        obj = x.objective
        record.notes.append(
            f"objective: {obj.describe()} — {x.why}; units: {obj.units}; each head mean-ablated alone (Wang et al. "
            f"2022) and given uniform attention weights, and each redundancy group mean-ablated together, on random "
            f"blocks of the whole corpus until decided (below)"
        )


def _decided_redundancy(x: CausalInputs, record: CausalRecord, got: Any, source: str) -> dict:
    """The sequential path's redundancy claims: candidate groups decided on the same blocks'
    clean readouts and head means as the single heads (its counts into ``info["causal"]``)."""
    from .decided_groups import decided_redundancy

    redundancy, groups, red = decided_redundancy(
        x.adapter, x.screen_corpus, x.objective, x.pattern, record.necessity, null_adapter=x.null_adapter,
        null_source=source, seed=x.seed, runner=x.runner, means=got.means, null_means=got.null_means, known=got.clean,
    )  # fmt: skip
    causal = record.info["causal"]
    causal["redundancy"] = red
    if red["groups"]:
        causal["note"] += (
            f"; redundancy: {red['groups']} candidate group(s) mean-ablated together, decided the same way against "
            f"their size's bar ({red['holds']} hold; {red['removals']} group × example removals of the exhaustive "
            f"{red['exhaustive_removals']})"
        )
    if groups:
        record.tables["groups"] = pd.DataFrame(groups)
    return redundancy


#: the causal paths by the name ``--causal`` gives
PATHS: dict = {p.name: p for p in (Exhaustive(), Screened(), Sequential())}
CAUSAL = tuple(PATHS)
