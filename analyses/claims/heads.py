"""All claims of every head: :func:`head_claims` → :class:`HeadClaims`.

Each kind of claim is computed by its module; a kind that cannot run on this model or
corpus becomes ``not tested`` with the reason (never an error for the whole set).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Optional

import pandas as pd

from . import thresholds as T
from .attribution import attribution_claims
from .claim import KINDS, STATUSES, Claim
from .summary import summary_sentence

log = logging.getLogger(__name__)


@dataclass
class HeadClaims:
    """``claims[(layer, head)][kind] = Claim``; ``tables`` name -> tidy evidence tables."""

    claims: dict
    tables: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)

    def summary(self, key) -> str:
        return summary_sentence(self.claims[key])

    def head_dict(self, key) -> dict:
        """``{kind: claim dict}`` for one head (JSON-able)."""
        return {k: self.claims[key][k].to_dict() for k in KINDS if k in self.claims[key]}

    def to_frame(self) -> pd.DataFrame:
        """Tidy: ``layer, head, claim, status, statement, effect, ci_low, ci_high, count,
        null, unit, threshold, reason``."""
        rows = []
        for (layer, head), by in sorted(self.claims.items()):
            for kind in KINDS:
                c = by.get(kind)
                if c is not None:
                    rows.append({"layer": layer, "head": head, "claim": kind, "status": c.status,
                                 "statement": c.statement, "effect": c.effect, "ci_low": c.ci_low,
                                 "ci_high": c.ci_high, "count": c.count, "null": c.null, "unit": c.unit,
                                 "threshold": c.threshold, "reason": c.reason})
        return pd.DataFrame(rows)

    def counts(self) -> pd.DataFrame:
        """Heads per claim and status: ``claim`` × :data:`.claim.STATUSES`."""
        t = self.to_frame()
        out = pd.crosstab(t["claim"], t["status"]).reindex(index=list(KINDS), columns=list(STATUSES), fill_value=0)
        return out.fillna(0).astype(int)


def default_metric(adapter, corpus) -> str:
    """``loss`` where the model has one, else the first applicable metric."""
    from probe.analyses.common.metrics import applicable_metrics

    metrics = applicable_metrics(adapter, corpus)
    return "loss" if "loss" in metrics else metrics[0]


def zoo_sentences(corpus) -> Optional[list]:
    """Treebank-like sentences from zoo examples that carry ``gold_heads``/``gold_rels``
    (``zoo:brackets``), else ``None``."""
    from probe.corpus import Sentence

    ex = corpus.examples or []
    if not ex or "gold_heads" not in ex[0]:
        return None
    out = []
    for e in ex:  # zoo words are joined by single spaces
        starts = [0]
        for w in e["words"][:-1]:
            starts.append(starts[-1] + len(w) + 1)
        out.append(Sentence(text=e["text"], words=tuple(e["words"]),
                            spans=tuple((s, s + len(w)) for s, w in zip(starts, e["words"])),
                            heads=tuple(int(h) + 1 for h in e["gold_heads"]), deprels=tuple(e["gold_rels"]),
                            upos=(), misc=()))
    return out


def _structure(maps, corpus, heads) -> tuple:
    from probe.analyses.structure.word_graph import Skipped, word_graphs

    from .structure import no_treebank, structure_claims

    sentences = corpus.sentences if corpus.sentences and all(s.heads for s in corpus.sentences) else \
        zoo_sentences(corpus)
    if not sentences:
        return no_treebank(heads, "no dependency annotation (give a treebank with --conllu)"), None
    skipped = Skipped([])
    graphs = list(word_graphs(maps, sentences, skipped=skipped))
    if not graphs:
        return no_treebank(heads, "no sentence aligned with its words"), None
    return structure_claims(graphs, n_sentences_skipped=len(skipped))


def _fill(kind: str, heads, reason: str) -> dict:
    return {k: Claim(kind, "not tested", reason=reason) for k in heads}


def head_claims(adapter, corpus, maps, *, importance=None, faithfulness=None, faithfulness_info=None,
                faithfulness_reason: str = "", metric: Optional[str] = None, seed: int = 0,
                progress: bool = False, ablation=None) -> HeadClaims:
    """Every claim of every captured head.

    Args:
        adapter: the live model (``None``: causal claims are not tested).
        corpus: the :class:`probe.inputs.Corpus` the interventions run on (cut it first).
        maps: captured :class:`probe.maps.AttentionMaps` (the pattern and structure claims).
        importance: table ``layer, head, importance`` shown beside necessity.
        faithfulness, faithfulness_info: the faithfulness verdict table and run info.
        metric: intervention metric (default :func:`default_metric`).
        ablation: a zero-ablation :class:`probe.analyses.necessity.ablation.SweepResult` on
            the same corpus and metric, reused for the removals.
    """
    from .necessity import necessity_claims, weights_claims
    from .pattern import pattern_claims
    from .perturb import perturbation_sweep
    from .redundancy import redundancy_claims

    heads = [(int(layer), h) for layer in maps[0].layers for h in range(maps[0].n_heads)]
    notes = []
    tables = {}
    try:
        pattern, tables["profile"] = pattern_claims(maps)
    except ValueError as exc:  # e.g. cross-attention: no query-side token pattern
        pattern = _fill("pattern", heads, str(exc))
    try:
        structure, st_table = _structure(maps, corpus, heads)
    except ValueError as exc:
        structure, st_table = _fill("structure", heads, str(exc)), None
    if st_table is not None and len(st_table):
        tables["structure"] = st_table
    necessity = _fill("necessity", heads, "no live model")
    weights = _fill("weights", heads, "no live model")
    redundancy = _fill("redundancy", heads, "no live model")
    if adapter is not None:
        try:
            metric = metric or default_metric(adapter, corpus)
            sweep = perturbation_sweep(adapter, corpus, metric=metric, heads=heads, seed=seed, progress=progress,
                                       zero=ablation)
            necessity = necessity_claims(sweep, importance)
            weights = weights_claims(sweep)
            redundancy, groups = redundancy_claims(adapter, corpus, metric, pattern, necessity, seed=seed)
            if groups:
                tables["groups"] = pd.DataFrame(groups)
            notes.append(f"removal and uniform weights of each head on {len(corpus)} examples, metric {sweep.metric} "
                         f"({sweep.path}), against a same-norm random-direction null; BH at q = {T.FDR}")
        except Exception as exc:
            log.warning("causal claims not tested: %s: %s", type(exc).__name__, exc)
            why = f"interventions could not run on this model: {type(exc).__name__}: {exc}"
            necessity, weights, redundancy = (_fill(k, heads, why) for k in ("necessity", "weights", "redundancy"))
    attribution = attribution_claims(heads, faithfulness, faithfulness_info, reason=faithfulness_reason)
    claims = {k: {"pattern": pattern[k], "structure": structure.get(k, Claim("structure", "not tested")),
                  "necessity": necessity[k], "redundancy": redundancy[k], "weights": weights[k],
                  "attribution": attribution[k]} for k in heads}
    return HeadClaims(claims=claims, tables=tables, notes=notes)
