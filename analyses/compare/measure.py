"""One checkpoint's per-example, per-head measurements on a corpus (what :mod:`.changes`
compares).

* role scores and detectors of :mod:`probe.analyses.patterns.role_features` (Clark et al.
  2019's positional and special-token shares, Voita et al. 2019's positional share, the
  entropy ratio, Olsson et al. 2022's duplicate-token and induction scores) per example;
* necessity: the harm to the objective when the head is zeroed alone (Michel et al. 2019),
  per example (:func:`probe.analyses.necessity.ablation.sweep_heads`);
* the captured maps themselves (for :func:`.divergence.pattern_divergence`);
* for a causal LM, the in-context-learning score per example (:func:`icl_scores`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, TYPE_CHECKING, Optional, Sequence

import numpy as np
import torch

from probe.errors import InputError, NotApplicable

from .floors import RATIO_FLOOR, SHARE_FLOOR

if TYPE_CHECKING:
    from probe.analyses.common.objective import Objective
    from probe.models.adapter import ModelAdapter

log = logging.getLogger(__name__)

__all__ = ["ROLE_MEASURES", "CAUSAL_MEASURES", "Measurements", "measure_checkpoint", "icl_scores", "role_values"]

#: role scores compared for every model, with their floors
ROLE_MEASURES = {
    "prev": SHARE_FLOOR,
    "self": SHARE_FLOOR,
    "next": SHARE_FLOOR,
    "to_cls": SHARE_FLOOR,
    "to_sep": SHARE_FLOOR,
    "to_punct": SHARE_FLOOR,
    "positional_share": SHARE_FLOOR,
    "max_attention": SHARE_FLOOR,
    "entropy_ratio": RATIO_FLOOR,
}
#: the detectors of causal attention (Olsson et al. 2022), NaN elsewhere
CAUSAL_MEASURES = {"duplicate": SHARE_FLOOR, "induction": SHARE_FLOOR}


@dataclass
class Measurements:
    """What one checkpoint measured on the corpus.

    Attributes:
        label: the checkpoint's name.
        step: its training step, when known.
        fingerprint: its weights fingerprint (:func:`probe.models.checkpoints.weights_fingerprint`).
        layers: the captured model layers; ``n_heads``: heads per layer.
        maps: one :class:`probe.maps.AttentionMaps` per example.
        values: measure -> ``[examples, L·H]`` per-example values (heads layer-major).
        floors: measure -> its floor (:mod:`.floors`).
        objective: the necessity objective's name (``None``: necessity not measured).
        icl: ``[examples]`` in-context-learning score (causal LMs), else ``None``.
        notes: what was left out and why.
    """

    label: str
    layers: tuple
    n_heads: int
    maps: list
    values: dict
    floors: dict
    step: Optional[int] = None
    fingerprint: str = ""
    objective: Optional[str] = None
    icl: Optional[np.ndarray] = None
    notes: list = field(default_factory=list)


def role_values(maps: Sequence, names: Sequence[str]) -> dict:
    """measure -> ``[examples, L·H]``: each example's role score per head (NaN where the
    example has no row for it), from :class:`probe.analyses.patterns.role_features.HeadFeatureAccumulator`."""
    from probe.analyses.patterns.role_features import HeadFeatureAccumulator, example_values

    acc = HeadFeatureAccumulator("token", keep_examples=True)
    for m in maps:
        acc.update(m)
    values, _rows = example_values(acc, list(names))  # [E, L·H, F]
    return {name: values[:, :, f] for f, name in enumerate(names)}


@torch.no_grad()
def icl_scores(adapter: ModelAdapter, texts: Sequence[str]) -> np.ndarray:
    """``[examples]``: the in-context-learning score of a causal LM (Olsson et al. 2022):
    the mean next-token loss (nats) over the second half of an example's predicted
    tokens minus that over the first half. Negative: the model predicts better late in
    the context, from what the context showed (on ``zoo:induction``'s ``prefix prefix``
    examples the second half is the repeated copy). Olsson et al. take the loss at token
    500 minus token 50 of long texts; the halves are that difference for short inputs.

    Raises:
        NotApplicable: a model that is not a causal LM with an LM head, or an example of
            fewer than 3 tokens.
    """
    if not adapter.causal or not hasattr(adapter.model, "get_output_embeddings"):
        raise NotApplicable(f"the in-context-learning score needs a causal LM; {adapter.name} is not one")
    if adapter.model.get_output_embeddings() is None:
        raise NotApplicable(f"{adapter.name} has no LM head: no next-token loss for the in-context-learning score")
    out = []
    for text in texts:
        ids = adapter.tokenizer(text, return_tensors="pt")["input_ids"].to(adapter.device)
        if ids.shape[1] < 3:
            raise NotApplicable(f"the in-context-learning score needs examples of 3+ tokens; {text!r} has fewer")
        logits = adapter.model(input_ids=ids).logits[0, :-1].float()
        nll = torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="none")
        half = len(nll) // 2
        out.append(float(nll[half:].mean() - nll[:half].mean()))
    return np.asarray(out)


def _necessity(adapter, corpus, objective: Objective, batch_size: int, n_heads: int) -> tuple:
    """``(harm [examples, L·H], objective name, floor)``: each head zeroed alone."""
    from probe.analyses.common.objective import floor_of, given_objective
    from probe.analyses.necessity.ablation import sweep_heads

    obj = given_objective(objective, adapter, corpus)
    heads = [(layer, h) for layer in range(adapter.n_layers) for h in range(n_heads)]
    sweep = sweep_heads(adapter, corpus, obj, heads=heads, batch_size=batch_size, n_boot=10)
    delta = (np.asarray(sweep.ablated) - np.asarray(sweep.clean)[None, :]).T  # [E, L·H] score changes
    harm = -delta if obj.higher_is_better else delta  # positive: worse without the head
    floor, _source = floor_of(obj)
    return harm, obj.called, float(floor)


def measure_checkpoint(
    adapter: ModelAdapter,
    corpus: Any,
    *,
    label: str = "",
    step: Optional[int] = None,
    fingerprint: str = "",
    necessity: bool = True,
    objective: Optional[Objective] = None,
    batch_size: int = 8,
) -> Measurements:
    """Measure one checkpoint on ``corpus`` (a :class:`probe.inputs.corpus.Corpus`): its maps,
    every role score per example, necessity (``necessity``, on ``objective``: resolved by
    the run, :func:`probe.analyses.compare.run.compare_checkpoints`; ``None``: not measured)
    and, for a causal LM, the in-context-learning score.

    Raises:
        InputError: an empty corpus.
    """
    from probe.runs.capture import capture

    if not len(corpus):
        raise InputError("no examples to measure: give at least one input")
    maps = capture(adapter, list(corpus.texts), word_spans=corpus.word_spans, batch_size=batch_size)
    measures = dict(ROLE_MEASURES)
    if maps[0].kind == "causal":
        measures.update(CAUSAL_MEASURES)
    values = role_values(maps, list(measures))
    n_heads = int(maps[0].attentions.shape[1])
    notes = []
    name = None
    if necessity and objective is not None:
        try:
            harm, name, floor = _necessity(adapter, corpus, objective, batch_size, n_heads)
        except NotApplicable as exc:
            notes.append(f"necessity not measured: {exc}")
        else:
            values["necessity"] = harm
            measures["necessity"] = floor
    icl = None
    if maps[0].kind == "causal":
        try:
            icl = icl_scores(adapter, list(corpus.texts))
        except NotApplicable as exc:
            notes.append(f"in-context-learning score not measured: {exc}")
    return Measurements(
        label=label or adapter.name,
        layers=tuple(maps[0].layers),
        n_heads=n_heads,
        maps=maps,
        values=values,
        floors=measures,
        step=step,
        fingerprint=fingerprint,
        objective=name,
        icl=icl,
        notes=notes,
    )
