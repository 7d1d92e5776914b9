"""Attention-based token importance for a target, from the same examples as the attributions.

For the query positions a target reads (``Objective.reads``: [CLS] for a classifier, the
predicting position for an LM loss, every position for a mean-pooled sentence
embedding), each method gives one score per input token, the mean over those rows of:

* ``attention`` — raw attention of every layer and head (``head = -1``: the layer's
  head mean), as Jain & Wallace (2019) compare with gradients;
* ``rollout`` — attention rollout over all layers (Abnar & Zuidema, 2020), via
  :func:`probe.analyses.flow.rollout.rollout`;
* ``flow`` — attention flow (Abnar & Zuidema, 2020), via
  :func:`probe.analyses.flow.attention_flow.attention_flow`;
* ``norm-rollout`` — rollout of the norm-based weights ``‖α f(x)‖`` (Kobayashi et al.,
  2020), via :mod:`probe.analyses.flow.norm_attention` (one extra forward per example).

Results are :class:`probe.analyses.common.word_scores.ScoreSet` s keyed ``(method, layer, head)``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Sequence

import numpy as np
import torch

from probe.analyses.common.word_scores import ScoreSet
from probe.errors import InputError, NotApplicable

if TYPE_CHECKING:
    from probe.models.adapter import ModelAdapter
    from probe.maps import AttentionMaps

log = logging.getLogger(__name__)

__all__ = ["ATTENTION_METHODS", "attention_scores"]

ATTENTION_METHODS = ("attention", "rollout", "flow", "norm-rollout")


def attention_scores(
    maps: AttentionMaps,
    reads: Sequence[int],
    *,
    methods: Sequence[str] = ("attention", "rollout", "flow"),
    index: int = 0,
    adapter: ModelAdapter | None = None,
    flow_workers: int | None = 1,
) -> ScoreSet:
    """Attention-based scores of the input tokens for the rows ``reads`` of one example.

    Args:
        maps: :class:`probe.maps.AttentionMaps` of all layers (self or causal).
        reads: query positions the target reads (scores are the mean over these rows).
        methods: any of :data:`ATTENTION_METHODS`.
        index: the example's index (kept in the result).
        adapter: the model adapter, needed for ``norm-rollout`` (values are captured).
        flow_workers: processes for attention flow.

    Returns:
        :class:`ScoreSet` with keys ``("attention", l, h)`` for every layer ``l`` and head
        ``h``, ``("attention", l, -1)`` for each layer's head mean, then
        ``("rollout", -1, -1)``, ``("flow", -1, -1)``, ``("norm-rollout", -1, -1)``.

    Raises:
        ValueError: unknown method, positions out of range, cross-attention maps.
    """
    bad = [m for m in methods if m not in ATTENTION_METHODS]
    if bad:
        raise InputError(f"unknown attention method(s) {bad}; choose from {', '.join(ATTENTION_METHODS)}")
    if maps.kind == "cross":
        raise NotApplicable("faithfulness compares self- or causal attention with attributions, not cross-attention")
    n = maps.n_tokens
    reads = [int(p) for p in reads]
    out_of_range = [p for p in reads if not 0 <= p < n]
    if out_of_range or not reads:
        raise InputError(f"target positions {out_of_range or reads} out of range 0..{n - 1}")
    a = maps.attentions.double()
    keys, rows = [], []
    if "attention" in methods:
        per_head = a[:, :, reads, :].mean(2)  # [L, H, n]
        for li, layer in enumerate(maps.layers):
            for h in range(maps.n_heads):
                keys.append(("attention", layer, h))
                rows.append(per_head[li, h])
            keys.append(("attention", layer, -1))
            rows.append(per_head[li].mean(0))
    causal = maps.kind == "causal"
    if "rollout" in methods:
        from probe.analyses.flow.rollout import rollout

        keys.append(("rollout", -1, -1))
        rows.append(rollout(a, output_positions=reads, causal=causal).mean(0))
    if "flow" in methods:
        from probe.analyses.flow.attention_flow import attention_flow

        keys.append(("flow", -1, -1))
        rows.append(
            attention_flow(a, output_positions=reads, causal=causal, workers=flow_workers, max_tokens=10**6).mean(0)
        )
    if "norm-rollout" in methods:
        if adapter is None:
            raise InputError("norm-rollout needs the model adapter (values are captured)")
        from probe.analyses.flow.norm_attention import norm_rollout
        from probe.runs.values import capture_values

        vc = capture_values(adapter, maps.text)
        if vc.maps.n_tokens != n:
            raise InputError("norm-rollout: the re-encoded text has a different length; pass word spans")
        keys.append(("norm-rollout", -1, -1))
        rows.append(
            norm_rollout(
                vc.maps.attentions.double(), vc.values.double(), vc.w_o.double(), output_positions=reads, causal=causal
            ).mean(0)
        )
    scores = torch.stack([torch.as_tensor(r, dtype=torch.float64) for r in rows]).numpy() if rows else np.zeros((0, n))
    return ScoreSet(index=index, keys=tuple(keys), scores=scores, word_ids=maps.word_ids, words=maps.words)
