"""The logit lens (nostalgebraist 2020, "interpreting GPT: the logit lens"): each layer's
residual stream through the model's own final norm and unembedding.

For one text and one position, every layer's ``resid_pre``, ``resid_mid`` (where blocks
have one) and ``resid_post`` are normed with their *own* scale (the final norm applied to
that stream; TransformerLens ``accumulated_resid`` then ``apply_ln_to_stack(...,
recompute_ln=True)``) and unembedded: the answer's rank, probability and logit, and the
top tokens, per stage. The last ``resid_post`` gives the model's logits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import pandas as pd
import torch

from .answers import Target

if TYPE_CHECKING:
    from probe.models.adapter import ModelAdapter

__all__ = ["LogitLens", "logit_lens", "STAGES"]

#: the stages of a layer, in the order the stream passes them
STAGES = ("resid_pre", "resid_mid", "resid_post")


@dataclass(frozen=True)
class LogitLens:
    """One text's logit lens at one position.

    Attributes:
        table: ``layer, stage, rank, probability, logit, top`` (``rank`` 0 = top-1;
            ``top``: the ``k`` most likely tokens, ``|``-separated), stages in stream order.
        answer: the token id read; position: the position read; tokens: the text's tokens.
        logits: ``[stage, vocab]`` float32, rows as ``table``.
    """

    table: pd.DataFrame
    answer: int
    position: int
    tokens: tuple
    logits: torch.Tensor

    def to_frame(self) -> pd.DataFrame:
        return self.table

    def becomes_top1(self) -> Optional[tuple]:
        """``(layer, stage)`` from which the answer is top-1 at every later stage, else None."""
        ranks = self.table["rank"].tolist()
        if not ranks or ranks[-1] != 0:
            return None
        i = len(ranks) - 1
        while i > 0 and ranks[i - 1] == 0:
            i -= 1
        row = self.table.iloc[i]
        return int(row["layer"]), str(row["stage"])


def _streams(adapter: ModelAdapter, batch: dict, position: int) -> tuple:
    from probe.tracing.site_keys import available_sites
    from probe.tracing.trace import trace

    have = set(available_sites(adapter))
    names = [
        (layer, stage, f"blocks.{layer}.hook_{stage}")
        for layer in range(adapter.n_layers_of())
        for stage in STAGES
        if f"blocks.{layer}.hook_{stage}" in have
    ]
    cache = trace(adapter, batch, read=[n for _, _, n in names])
    rows = torch.stack([cache[n][0, position] for _, _, n in names])  # [stage, d_model]
    return [(layer, stage) for layer, stage, _ in names], rows, cache.output.logits[0, position]


def logit_lens(
    adapter: ModelAdapter, text: str, target: Target = Target(), position: int = -1, k: int = 5
) -> LogitLens:
    """The logit lens of ``text`` at ``position`` (-1: the last) for ``target.answer`` (None:
    the model's own top prediction there).

    Raises:
        InputError: empty or over-long text, a position outside it.
        NotApplicable: not a causal LM, no unembedding or final norm, logits that are not the
            unembedding of the final norm (:func:`~.folding.check_fold`).
    """
    from probe.errors import InputError

    from .folding import final_norm, unembedding
    from .stream import check_causal, encode_text

    check_causal(adapter)
    module, _ = final_norm(adapter)
    head = adapter.model.get_output_embeddings()
    unembedding(adapter)  # refuses a model without one
    batch = encode_text(adapter, text)
    n = batch["input_ids"].shape[1]
    if not -n <= position < n:
        raise InputError(f"position {position} is outside the text's {n} tokens")
    pos = position % n
    stages, rows, final = _streams(adapter, batch, pos)
    with torch.no_grad():
        logits = head(module(rows[:, None, :]))[:, 0, : final.shape[-1]].float()  # [stage, vocab]
    answer = int(final.argmax()) if target.answer is None else target.answer
    probs = logits.softmax(-1)
    rank = (logits > logits[:, answer : answer + 1]).sum(-1)
    top = logits.topk(k, dim=-1).indices
    tok = adapter.tokenizer
    table = pd.DataFrame(
        {
            "layer": [s[0] for s in stages],
            "stage": [s[1] for s in stages],
            "rank": rank.tolist(),
            "probability": probs[:, answer].tolist(),
            "logit": logits[:, answer].tolist(),
            "top": ["|".join(tok.decode([int(i)]) for i in row) for row in top],
        }
    )
    ids = batch["input_ids"][0].tolist()
    return LogitLens(table, answer, pos, tuple(tok.convert_ids_to_tokens(ids)), logits)
