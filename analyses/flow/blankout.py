"""Blank-out importance and its rank correlation with raw attention, rollout and flow
(Abnar & Zuidema, 2020, Table 1).

* Blank-out importance of input position ``j``: ``p(y | x) − p(y | x with token j
  replaced by [UNK])``, ``y`` the model's predicted class on ``x`` (or a given label).
* Attention-based importance at layer ``l`` (1-based): the [CLS] row (position 0) of
  raw attention (head mean of layer ``l``), of rollout over layers ``1..l`` and of
  attention flow over layers ``1..l``.
* Per example, the Spearman ρ between the two over the input positions; the table
  reports mean ± std over examples per layer and method. ``positions="all"`` ranks
  every position (also [CLS]/[SEP]); ``"words"`` only non-special ones. (The paper does
  not say; at layer 1 rollout and flow equal raw attention up to the residual term, so
  under ``"words"`` all three have the same ranks there.)
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Optional, Sequence

import numpy as np
import torch

from probe.analyses.flow.attention_flow import attention_flow
from probe.analyses.flow.rollout import rollout
from probe.errors import NotApplicable

if TYPE_CHECKING:
    import pandas as pd

    from probe.models.adapter import ModelAdapter

log = logging.getLogger(__name__)

__all__ = ["blank_out_importance", "importance_correlations", "correlation_table"]


@torch.no_grad()
def blank_out_importance(adapter: ModelAdapter, text: str, label: Optional[int] = None) -> tuple:
    """Blank-out importance of every token of ``text`` for a sequence classifier.

    Returns:
        ``(importance [n] float64, label)``.

    Raises:
        ValueError: the model has no ``logits [batch, classes]`` or the tokenizer no
            [UNK] token.
    """
    unk = getattr(adapter.tokenizer, "unk_token_id", None)
    if unk is None:
        raise NotApplicable("blank-out needs a tokenizer with an [UNK] token")
    enc = adapter.encode(text)
    n = len(enc)
    ids = enc.input_ids.repeat(n + 1, 1)
    ids[torch.arange(1, n + 1), torch.arange(n)] = unk
    out = adapter.model(input_ids=ids.to(adapter.device), attention_mask=torch.ones_like(ids).to(adapter.device))
    logits = getattr(out, "logits", None)
    if logits is None or logits.dim() != 2:
        raise NotApplicable("blank-out importance needs a sequence classifier (logits [batch, classes])")
    p = torch.softmax(logits.double(), -1).cpu()
    y = int(p[0].argmax()) if label is None else int(label)
    return (p[0, y] - p[1:, y]).numpy(), y


def importance_correlations(
    attentions: Sequence[torch.Tensor],
    importances: Sequence[np.ndarray],
    special_masks: Sequence[torch.Tensor],
    *,
    positions: Sequence[str] = ("all", "words"),
) -> pd.DataFrame:
    """Per-example Spearman ρ of raw attention / rollout / flow ([CLS] row) with
    importance, for every layer: a tidy table ``example, layer, method, positions, rho``
    (layer 1-based).

    Args:
        attentions: per example ``[L, H, n, n]``.
        importances: per example ``[n]``.
        special_masks: per example bool ``[n]``.
    """
    import pandas as pd
    from scipy.stats import spearmanr

    rows = []
    for e, (a, imp, special) in enumerate(zip(attentions, importances, special_masks)):
        a = a.double()
        L, n = a.shape[0], a.shape[-1]
        if len(imp) != n:
            raise ValueError(f"example {e}: {len(imp)} importances for {n} tokens")
        keep = {"all": np.arange(n), "words": np.flatnonzero(~np.asarray(special, dtype=bool))}
        flow = attention_flow(a, output_positions=[0])  # validate once
        for l in range(1, L + 1):
            scores = {
                "raw": a[l - 1].mean(0)[0].numpy(),
                "rollout": rollout(a[:l], output_positions=[0], validate=False)[0].numpy(),
                "flow": flow[0].numpy() if l == L else attention_flow(a[:l], output_positions=[0])[0].numpy(),
            }
            for method, s in scores.items():
                for pos in positions:
                    k = keep[pos]
                    rho = spearmanr(s[k], imp[k]).statistic if len(k) > 2 else np.nan
                    rows.append({"example": e, "layer": l, "method": method, "positions": pos, "rho": float(rho)})
    return pd.DataFrame(rows)


def correlation_table(per_example: pd.DataFrame) -> pd.DataFrame:
    """Mean ± std of ρ over examples: one row per ``positions, method``, columns per
    layer (``L1 …``), like Abnar & Zuidema's Table 1; ``n`` counts defined ρ."""
    g = per_example.dropna(subset=["rho"]).groupby(["positions", "method", "layer"])["rho"]
    stats = g.agg(["mean", "std", "count"]).reset_index()
    return stats.sort_values(["positions", "method", "layer"]).reset_index(drop=True)
