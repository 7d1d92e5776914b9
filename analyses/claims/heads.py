"""All claims of every head: :func:`head_claims` → :class:`HeadClaims`.

Each kind of claim is computed by its module; a kind that cannot run on this model or
corpus becomes ``not tested`` with the reason (never an error for the whole set).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Optional, TYPE_CHECKING, cast

import pandas as pd

from probe.errors import InputError, NotApplicable

from .causal_paths import PATHS, CausalRecord
from .claim import STATUSES, Claim
from .null_model import null_model_for
from .protocol import ClaimInputs, claim_kinds, claim_tests
from .summary import summary_sentence
from .thresholds import thresholds_in_force

if TYPE_CHECKING:
    from probe.analyses.common.objective import Objective

log = logging.getLogger(__name__)


@dataclass
class HeadClaims:
    """``claims[(layer, head)][kind] = Claim``; ``tables`` name -> tidy evidence tables."""

    claims: dict
    tables: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    objective: dict = field(default_factory=dict)
    #: what the causal path decided and how (:class:`.causal_paths.CausalRecord`; ``objective`` is its ``info``)
    record: Optional[CausalRecord] = None

    def summary(self, key: Any) -> str:
        return summary_sentence(self.claims[key])

    def head_dict(self, key: Any) -> dict:
        """``{kind: claim dict}`` for one head (JSON-able)."""
        from .evidence import claim_evidence

        out = {}
        for k in claim_kinds():
            if k in self.claims[key]:
                c = self.claims[key][k]
                out[k] = dict(c.to_dict(), evidence=claim_evidence(k, c).to_dict())
        return out

    def evidence(self, key: Any) -> dict:
        """``{kind: Evidence}`` of one head (what every renderer shows)."""
        from .evidence import claim_evidence

        return {k: claim_evidence(k, c) for k, c in self.claims[key].items()}

    def to_frame(self) -> pd.DataFrame:
        """Tidy: ``layer, head, claim, status, statement, effect, ci_low, ci_high, count,
        null, unit, threshold, reason``."""
        rows = []
        for (layer, head), by in sorted(self.claims.items()):
            for kind in claim_kinds():
                c = by.get(kind)
                if c is not None:
                    rows.append(
                        {
                            "layer": layer,
                            "head": head,
                            "claim": kind,
                            "status": c.status,
                            "statement": c.statement,
                            "effect": c.effect,
                            "ci_low": c.ci_low,
                            "ci_high": c.ci_high,
                            "count": c.count,
                            "null": c.null,
                            "unit": c.unit,
                            "threshold": c.threshold,
                            "reason": c.reason,
                        }
                    )
        return pd.DataFrame(rows)

    def counts(self) -> pd.DataFrame:
        """Heads per claim and status: ``claim`` × :data:`.claim.STATUSES`."""
        t = self.to_frame()
        out = pd.crosstab(t["claim"], t["status"]).reindex(
            index=list(claim_kinds()), columns=list(STATUSES), fill_value=0
        )
        return out.fillna(0).astype(int)


def zoo_sentences(corpus: Any) -> Optional[list]:
    """Treebank-like sentences from zoo examples that carry ``gold_heads``/``gold_rels``
    (``zoo:brackets``), else ``None``."""
    from probe.inputs.readers import Sentence

    ex = corpus.examples or []
    if not ex or "gold_heads" not in ex[0]:
        return None
    out = []
    for e in ex:  # zoo words are joined by single spaces
        starts = [0]
        for w in e["words"][:-1]:
            starts.append(starts[-1] + len(w) + 1)
        out.append(
            Sentence(
                text=e["text"],
                words=tuple(e["words"]),
                spans=tuple((s, s + len(w)) for s, w in zip(starts, e["words"])),
                heads=tuple(int(h) + 1 for h in e["gold_heads"]),
                deprels=tuple(e["gold_rels"]),
                upos=(),
                misc=(),
            )
        )
    return out


def structure_sentences(corpus: Any) -> tuple:
    """``(sentences, own)``: the dependency-annotated sentences of ``corpus`` (its
    treebank's, or :func:`zoo_sentences`) and whether they are the corpus's own items
    (``corpus.sentences``, what an engine streams); ``(None, False)`` without annotation."""
    if corpus.sentences and all(s.heads for s in corpus.sentences):
        return list(corpus.sentences), True
    return zoo_sentences(corpus), False


def evidence_accumulators(corpus: Any, summed: Optional[tuple] = None) -> dict:
    """The pattern and structure claims' evidence as accumulators over ``corpus`` (the
    protocol of :mod:`probe.analyses.common.accumulate`): ``{"pattern":
    PatternFeatures, "structure": StructureCounts}`` (no ``structure`` without dependency
    annotation). A run fills them from its held maps or streams its corpus through them;
    :func:`head_claims` reads them (``evidence=``). ``summed``: ``(token features kept per
    example, punctuation share)`` already summed over the same examples, which the pattern
    evidence takes instead of summing them again (:class:`.pattern.PatternFeatures`)."""
    from .pattern import PatternFeatures
    from .structure import StructureCounts

    accs: dict = {"pattern": PatternFeatures(*summed) if summed is not None else PatternFeatures()}
    sentences, own = structure_sentences(corpus)
    if sentences:
        accs["structure"] = StructureCounts(None if own else sentences)
    return accs


def _filled(accumulators: dict, maps, corpus) -> dict:
    """``accumulators`` (a dict) filled from ``corpus``'s held ``maps`` (:func:`probe.runs.streaming.feed_maps`)."""
    from probe.runs.streaming import feed_maps, held_items

    feed_maps(list(accumulators.values()), maps, items=held_items(corpus))
    return accumulators


def _fill(kind: str, heads, reason: str) -> dict:
    return {k: Claim(kind, "not tested", reason=reason) for k in heads}


def head_claims(
    adapter: Any,
    corpus: Any,
    maps: Any = None,
    *,
    evidence: Optional[dict] = None,
    importance: Any = None,
    faithfulness: Any = None,
    faithfulness_info: Any = None,
    faithfulness_reason: str = "",
    seed: int = 0,
    progress: bool = False,
    ablation: Any = None,
    objective: Optional[Objective] = None,
    objective_why: str = "",
    runner: Any = None,
    null: Optional[str] = None,
    causal: str = "exhaustive",
    screen_corpus: Any = None,
) -> HeadClaims:
    """Every claim of every captured head.

    Args:
        adapter: the live model (``None``: causal claims are not tested).
        corpus: the :class:`probe.inputs.corpus.Corpus` the interventions run on (cut it first).
        maps: captured :class:`probe.maps.AttentionMaps` of ``corpus`` (the pattern and
            structure claims' evidence, unless ``evidence`` is given).
        evidence: :func:`evidence_accumulators` already filled (an engine streamed a
            larger corpus through them than the maps held here).
        importance: table ``layer, head, importance`` shown beside necessity.
        faithfulness, faithfulness_info: the faithfulness verdict table and run info.
        objective: what necessity is measured on: the run's resolved
            :class:`probe.analyses.common.objective.Objective` (``use="corpus"``; needed
            with ``adapter``, a name is refused: resolve it first).
        objective_why: how the run chose it (stated in the notes and
            ``HeadClaims.objective``; default: ``given``).
        ablation: a :class:`.removal.RemovalSweep` already run on these heads, examples and
            objective (the report's ablation section's): its modes are not run again.
        runner: where the removal sweeps' batches run (:func:`.removal.removal_sweep`'s
            ``runner``; ``None``: this process).
        null: the null model the pattern, necessity, weights and redundancy claims are
            calibrated on (:mod:`.null_model`; the same heads, examples and objective, run
            in this process): ``reinit`` (the model re-initialised), ``permute`` (its
            attention weights permuted across heads and layers), ``None`` the default
            (:data:`.null_model.DEFAULT_NULL`); ``none``: against the floor alone.
        causal: ``exhaustive`` (every head removed on ``corpus``); ``screened``: the
            necessity claims by :func:`.screened.screened_necessity` on ``screen_corpus``
            (default ``corpus``; the report passes the whole corpus), weights on the heads
            it removed exactly and redundancy on ``corpus``
            (:func:`.screened_claims.screened_claims`: no head is removed on every example);
            ``sequential``: the necessity and
            weights claims decided head by head in blocks of ``screen_corpus``
            (:func:`.decided.decided_claims`), redundancy on ``corpus``.
    """
    if causal not in PATHS:  # refused before the pattern claims' work
        raise InputError(f"unknown causal path {causal!r}; use {' or '.join(PATHS)}")
    if evidence is None:
        evidence = _filled(evidence_accumulators(corpus), maps or [], corpus)
    notes: list = []
    tables: dict = {}
    heads, pattern, nadapter = _pattern(evidence, maps, adapter, null, corpus, seed, notes, tables)
    decide = _Once(
        lambda: _causal(
            adapter, nadapter, corpus, heads, pattern, importance, ablation, runner, notes, tables,
            objective=objective, objective_why=objective_why, seed=seed, progress=progress,
            screen_corpus=(screen_corpus if screen_corpus is not None else corpus) if causal != "exhaustive" else None,
            path=causal,
        )
    )  # fmt: skip
    inputs = ClaimInputs(
        heads, adapter=adapter, corpus=corpus, maps=list(maps or []), evidence=evidence, objective=objective,
        objective_why=objective_why, runner=runner, null=nadapter, thresholds=thresholds_in_force(), seed=seed,
        progress=progress, importance=importance, faithfulness=(faithfulness, faithfulness_info, faithfulness_reason),
        pattern=pattern, causal=decide, notes=notes, tables=tables,
    )  # fmt: skip
    claims = every_kind(inputs)  # the causal path decides once, when the first causal kind asks
    record = decide()
    return HeadClaims(claims=claims, tables=tables, notes=notes, objective=record.info, record=record)


class _Once:
    """``fn()`` called the first time, its value kept (the causal record every causal kind reads)."""

    def __init__(self, fn: Any):
        self._fn, self._got = fn, None

    def __call__(self) -> Any:
        if self._got is None:
            self._got = self._fn()
        return self._got


def _pattern(
    evidence: dict,
    maps: Optional[list],
    adapter: Any,
    null: Optional[str],
    corpus: Any,
    seed: int,
    notes: list,
    tables: dict,
) -> tuple:
    """``(heads, pattern claims, null model)`` from the pattern evidence, calibrated on the
    null model of ``adapter`` (:func:`.null_model.null_model_for`; ``None`` without one); its profile
    table into ``tables``."""
    from .pattern import pattern_claims

    pattern_ev = None
    try:
        pattern_ev = evidence["pattern"].result()
        heads = [(int(layer), h) for layer in pattern_ev.layers for h in range(pattern_ev.n_heads)]
        pattern, tables["profile"] = pattern_claims(pattern_ev)
    except NotApplicable as exc:  # the only source of "not tested" (probe.errors)
        if not maps:
            raise
        heads = [(int(layer), h) for layer in maps[0].layers for h in range(maps[0].n_heads)]
        pattern = _fill("pattern", heads, exc.reason)
    nadapter = null_model_for(adapter, null, seed)
    if nadapter is not None and pattern_ev is not None:
        pattern = _calibrated_pattern(pattern, pattern_ev, nadapter, corpus, seed, notes)
    return heads, pattern, nadapter


def _causal(
    adapter: Any,
    nadapter: Any,
    corpus: Any,
    heads: list,
    pattern: dict,
    importance: Any,
    ablation: Any,
    runner: Any,
    notes: list,
    tables: dict,
    *,
    objective: Optional[Objective],
    objective_why: str,
    seed: int,
    progress: bool,
    screen_corpus: Any = None,
    path: str = "exhaustive",
) -> CausalRecord:
    """The claims that remove heads (necessity, weights, redundancy) decided on ``path``
    through the one interface of :mod:`.causal_paths` (*not tested* without a live model or
    an objective that fits); the record's notes and tables into ``notes`` and ``tables``."""
    from .causal_paths import CausalInputs, decide_causal

    inputs = None
    if adapter is not None:  # the objective is checked by decide_causal (a name: TypeError)
        inputs = CausalInputs(
            adapter, nadapter, corpus, screen_corpus, cast("Objective", objective), objective_why or "given",
            heads, pattern, importance=importance, reuse=ablation, runner=runner, seed=seed, progress=progress,
        )  # fmt: skip
    record = decide_causal(path, inputs, heads)
    notes.extend(record.notes)
    tables.update(record.tables)
    return record


def every_kind(inputs: ClaimInputs) -> dict:
    """``{(layer, head): {kind: Claim}}``: every registered kind's claims
    (:func:`.protocol.claim_tests`, in order) about every head of ``inputs``; a head a kind
    leaves out is *not tested*, and a kind that raises :class:`probe.errors.NotApplicable`
    is *not tested* on every head, with the reason."""
    by_kind = {}
    for test in claim_tests():
        try:
            by_kind[test.kind] = test.compute(inputs)
        except NotApplicable as exc:
            by_kind[test.kind] = _fill(test.kind, inputs.heads, exc.reason)
    return {k: {kind: got.get(k, Claim(kind, "not tested")) for kind, got in by_kind.items()} for k in inputs.heads}


def _calibrated_pattern(pattern: dict, evidence, nadapter, corpus, seed: int, notes: list) -> dict:
    """The pattern claims calibrated on the null model's attention over ``corpus``
    (:func:`.pattern.calibrate_pattern`); unchanged, with a note, where it cannot be captured."""
    from probe.runs.capture import capture
    from probe.errors import InputError

    from .pattern import calibrate_pattern, pattern_evidence

    if not any(c.holds for c in pattern.values()):
        return pattern
    try:
        spans = list(corpus.word_spans) if corpus.word_spans else None
        maps = capture(nadapter, list(corpus.texts), word_spans=spans)
        return calibrate_pattern(pattern, evidence, pattern_evidence(maps), nadapter.card["null_source"])
    except (NotApplicable, InputError) as exc:
        notes.append(f"pattern claims not calibrated on a null model: {getattr(exc, 'reason', exc)}")
        return pattern
