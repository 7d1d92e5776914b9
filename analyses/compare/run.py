"""``compare_checkpoints``: the whole comparison of checkpoints A, B [, C …] on one corpus,
the library function behind ``probe compare`` (and a notebook's one call).

Each checkpoint is loaded, fingerprinted, checked against the first for shape, measured
(:func:`.measure.measure_checkpoint`) and released; consecutive pairs are compared
(:func:`.pairs.compare_pair`); with three or more checkpoints every score is tabulated
against the step (:mod:`.dynamics`); with ``attribute`` each pair's objective change is
attributed to heads (:func:`.attribution.attribute_change`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence


import pandas as pd

from probe.errors import InputError, NotApplicable

from .dynamics import icl_by_step, phase_change, scores_by_step, top_heads
from .measure import measure_checkpoint
from .pairs import compare_pair, head_summary, same_weights_warning

log = logging.getLogger(__name__)

__all__ = ["Comparison", "compare_checkpoints", "check_shapes"]


@dataclass
class Comparison:
    """Everything ``probe compare`` writes.

    Attributes:
        checkpoints: ``label, step, fingerprint, family, layers, heads, source`` per checkpoint.
        changes: every measure's change per head and consecutive pair (:data:`.changes.CHANGE_COLUMNS`
            with ``from``, ``to``).
        heads: one row per pair and head (:func:`.pairs.head_summary`), largest changes first.
        scores: every measure's mean per checkpoint and head (:func:`.dynamics.scores_by_step`).
        icl: the in-context-learning score per checkpoint (causal LMs), or empty.
        phase: where the ICL score and the induction heads' score move most (3+ checkpoints
            of a causal LM), or ``None``.
        induction_heads: the heads ``phase`` follows (highest induction score at the last step).
        attribution: ``{(from, to): AttributionResult}`` (with ``attribute``).
        warnings: lines for people (identical weights …); ``notes``: what was left out.
        n_examples: examples compared; ``source``: the corpus.
    """

    checkpoints: pd.DataFrame
    changes: pd.DataFrame
    heads: pd.DataFrame
    scores: pd.DataFrame
    icl: pd.DataFrame
    phase: Optional[pd.DataFrame] = None
    induction_heads: list = field(default_factory=list)
    attribution: dict = field(default_factory=dict)
    warnings: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    n_examples: int = 0
    source: str = ""

    def summary(self) -> dict:
        """JSON-able numbers: per pair, the flagged heads and the largest changes."""
        pairs = []
        for (a, b), g in self.heads.groupby(["from", "to"], sort=False):
            flagged = g[g["flagged"]]
            pairs.append(
                {
                    "from": a,
                    "to": b,
                    "flagged": [f"L{r.layer}H{r.head}" for r in flagged.itertuples()],
                    "largest_jsd": [
                        {"head": f"L{r.layer}H{r.head}", "jsd": float(r.jsd)} for r in g.head(5).itertuples()
                    ],
                }
            )
        out = {
            "n_examples": self.n_examples,
            "source": self.source,
            "checkpoints": self.checkpoints.to_dict("records"),
            "pairs": pairs,
            "warnings": list(self.warnings),
            "notes": list(self.notes),
        }
        if self.phase is not None:
            out["phase_change"] = self.phase.to_dict("records")
            out["induction_heads"] = [f"L{layer}H{head}" for layer, head in self.induction_heads]
        for (a, b), res in self.attribution.items():
            out.setdefault("attribution", []).append(
                {"from": a, "to": b, "objective": res.objective, "total": res.total, "total_ci": list(res.total_ci)}
            )
        return _no_nan(out)


def _no_nan(value: Any) -> Any:
    """``value`` with every NaN float replaced by ``None`` (strict JSON has no NaN)."""
    if isinstance(value, dict):
        return {k: _no_nan(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_no_nan(v) for v in value]
    if isinstance(value, float) and value != value:
        return None
    return value


def check_shapes(labels: Sequence[str], shapes: Sequence[dict]) -> None:
    """Refuse checkpoints whose shapes (:func:`probe.models.checkpoints.shape_of`) differ,
    in one line naming the first pair that does."""
    for label, shape in zip(labels[1:], shapes[1:]):
        if shape != shapes[0]:
            diff = ", ".join(f"{k} {shapes[0][k]} vs {shape[k]}" for k in shape if shape[k] != shapes[0].get(k))
            raise InputError(
                f"{labels[0]} and {label} differ in shape ({diff}): compare checkpoints of one architecture"
            )


def _resolved(objective: Any, adapter: Any, corpus: Any, needed: bool) -> tuple:
    """``(objective or None, notes)``: the run's objective (a name, ``auto`` or an
    :class:`Objective`) resolved once, against the first checkpoint (every checkpoint has
    its shape), for necessity and attribution; ``None`` with the reason in a note where it
    does not fit the model, or where neither is measured."""
    from probe.analyses.common.objective import resolve_objective
    from probe.errors import NotApplicable

    if not needed:
        return None, []
    try:
        return resolve_objective(objective, adapter, corpus, use="per-example")[0], []
    except NotApplicable as exc:
        return None, [f"necessity and attribution not measured: {exc}"]


def compare_checkpoints(
    checkpoints: Sequence,
    corpus: Any,
    *,
    device: str = "cpu",
    necessity: bool = True,
    attribute: bool = False,
    objective: Any = "auto",
    q: float = 0.05,
    n_boot: int = 1000,
    batch_size: int = 8,
    seed: int = 0,
    loader: Any = None,
) -> Comparison:
    """Compare ``checkpoints`` (:class:`probe.models.checkpoints.Checkpoint`, two or more)
    on ``corpus`` (:class:`probe.inputs.corpus.Corpus`).

    ``loader(checkpoint, device) -> adapter`` opens one (default
    :func:`probe.models.checkpoints.load_checkpoint`; a test passes its own to compare
    models built in memory).

    Raises:
        InputError: fewer than two checkpoints, checkpoints of different shape.
    """
    from probe.inputs.corpus import fit_to_model
    from probe.models.checkpoints import load_checkpoint, shape_of, weights_fingerprint
    from probe.models.fingerprint import tokenizer_fingerprint

    if len(checkpoints) < 2:
        raise InputError(f"compare needs two or more checkpoints, got {len(checkpoints)}")
    loader = loader or load_checkpoint
    # every checkpoint is opened (and held: zoo runs and sentence models are small) and
    # checked for shape before anything is measured, so a mismatch costs no compute
    adapters, shapes = [], []
    for i, ck in enumerate(checkpoints):
        adapters.append(loader(ck, device))
        shapes.append(shape_of(adapters[-1]))
        check_shapes([c.label for c in checkpoints[: i + 1]], shapes)
    corpus = fit_to_model(corpus, adapters[0])
    objective, notes = _resolved(objective, adapters[0], corpus, necessity or attribute)
    rows, measured, warnings = [], [], []
    attribution: dict = {}
    for ck, adapter, shape in zip(checkpoints, adapters, shapes):
        fp = weights_fingerprint(adapter.model)
        tok = tokenizer_fingerprint(adapter.tokenizer) if adapter.tokenizer is not None else ""
        row = {"label": ck.label, "step": ck.step, "fingerprint": fp, "tokenizer": tok, "source": adapter.source}
        rows.append({**row, **shape})
        log.info("measuring %s (%d examples)", ck.label, len(corpus))
        m = measure_checkpoint(
            adapter, corpus, label=ck.label, step=ck.step, fingerprint=fp, necessity=necessity, objective=objective,
            batch_size=batch_size,
        )  # fmt: skip
        notes.extend(f"{ck.label}: {n}" for n in m.notes)
        for earlier in rows[:-1]:  # any earlier checkpoint, not only the previous: byte-identical copies
            w = same_weights_warning(earlier["label"], m.label, earlier["fingerprint"], fp, earlier["tokenizer"], tok)
            if w:
                warnings.append(w)
                break
        if attribute and measured and objective is not None:
            from .attribution import attribute_change

            try:
                attribution[(measured[-1].label, m.label)] = attribute_change(
                    adapters[len(measured) - 1],
                    adapter,
                    corpus,
                    objective,
                    batch_size=batch_size,
                    n_boot=n_boot,
                    seed=seed,
                )
            except NotApplicable as exc:
                notes.append(f"attribution {measured[-1].label} -> {m.label} not measured: {exc}")
        measured.append(m)
    changes = pd.concat(
        [compare_pair(a, b, q=q, n_boot=n_boot, seed=seed) for a, b in zip(measured, measured[1:])],
        ignore_index=True,
    )
    scores = scores_by_step(measured)
    icl = icl_by_step(measured, n_boot=n_boot, seed=seed)
    phase, induction = None, []
    if len(measured) >= 3 and len(icl) == len(measured) and "induction" in measured[0].values:
        induction = top_heads(scores, "induction", k=1)
        steps = icl["step"].tolist()
        series = {"icl": icl["icl"].to_numpy()}
        for layer, head in induction:
            s = scores[(scores["measure"] == "induction") & (scores["layer"] == layer) & (scores["head"] == head)]
            series[f"induction L{layer}H{head}"] = s.sort_values("step")["value"].to_numpy()
        try:
            phase = phase_change(steps, series)
        except InputError as exc:
            notes.append(f"no phase change located: {exc}")
    return Comparison(
        checkpoints=pd.DataFrame(rows),
        changes=changes,
        heads=head_summary(changes),
        scores=scores,
        icl=icl,
        phase=phase,
        induction_heads=induction,
        attribution=attribution,
        warnings=warnings,
        notes=notes,
        n_examples=len(corpus),
        source=getattr(corpus, "source", ""),
    )
