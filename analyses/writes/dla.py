"""Direct logit attribution (DLA): how much of an answer's logit each head, MLP and
embedding writes directly.

Each component ``c`` of the final residual stream at a position (:mod:`.stream`),
divided by the scale ``s`` the final norm applies to the *whole* stream there, times the
norm's gain (centred for a LayerNorm), dotted with the answer's unembedding row
(Elhage et al. 2021, "A Mathematical Framework for Transformer Circuits"; TransformerLens
``cache.stack_head_results(apply_ln=True)`` then ``cache.logit_attrs``)::

    dla(c) = (g ⊙ centre(c) / s) · W_U[answer]        (− W_U[against] for a difference)

The parts plus ``rest`` (the stream not covered by a component, over ``s``) plus
``constant`` (the norm's bias through ``W_U``, plus ``b_U``) equal the logit exactly.
DLA is the direct effect only: a head may write the answer and be compensated when it is
removed (McGrath et al. 2023, "The Hydra Effect"; Wang et al. 2022 pair it with path
patching). :func:`source_parts` splits a head's part over the positions it read from
(``pattern[q, k] · v_k W_O^h``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import pandas as pd
import torch

from .answers import Target
from .folding import unembedding
from .stream import Stream

if TYPE_CHECKING:
    from probe.models.adapter import ModelAdapter

__all__ = [
    "Attribution",
    "direction",
    "attribute",
    "attribute_positions",
    "source_parts",
    "component_writes",
    "logit_attribution",
]


@dataclass(frozen=True)
class Attribution:
    """One position's DLA.

    Attributes:
        table: ``component, layer, head, dla`` (one row per component of :class:`Stream`).
        logit: the model's logit (or logit difference) read at ``position``.
        rest, constant: the uncovered stream's part and the biases' (module docstring).
        position: the position read (its token predicts the next one); answer: token id
            scored (the top prediction when none was given); against: id or None.
    """

    table: pd.DataFrame
    logit: float
    rest: float
    constant: float
    position: int
    answer: int
    against: Optional[int]

    def to_frame(self) -> pd.DataFrame:
        return self.table

    def heads(self) -> pd.DataFrame:
        """``layer, head, dla``: the heads' rows."""
        t = self.table
        return t[t["component"] == "head"][["layer", "head", "dla"]].reset_index(drop=True)

    @property
    def total(self) -> float:
        """Σ parts + rest + constant (= :attr:`logit`)."""
        return float(self.table["dla"].sum()) + self.rest + self.constant


def direction(adapter: ModelAdapter, answer: int, against: Optional[int] = None) -> tuple:
    """``(u [d_model], b)``: the answer's unembedding row (minus ``against``'s) and its bias
    (float64), so that ``logit = normed · u + b``."""
    w_u, b_u = unembedding(adapter)
    u = w_u[answer].double().cpu()
    b = 0.0 if b_u is None else float(b_u[answer])
    if against is not None:
        u = u - w_u[against].double().cpu()
        b -= 0.0 if b_u is None else float(b_u[against])
    return u, b


def attribute_positions(stream: Stream, u: torch.Tensor, b: torch.Tensor) -> tuple:
    """Every position at once: ``u [seq, d_model]`` the read direction and ``b [seq]`` its
    bias at each position; returns ``(parts [component, seq], rest [seq], constant [seq])``."""
    folded = stream.fold.direction(u)  # [seq, d]
    parts = torch.einsum("csd,sd->cs", stream.parts, folded) / stream.scale
    rest = (stream.rest * folded).sum(-1) / stream.scale
    constant = (stream.fold.bias * u).sum(-1) + b
    return parts, rest, constant


def attribute(adapter: ModelAdapter, stream: Stream, target: Target, position: int = -1) -> Attribution:
    """The DLA of ``target`` at ``position`` (-1: the last) of ``stream``.

    Raises:
        InputError: a position outside the text.
    """
    from probe.errors import InputError

    n = len(stream.ids)
    if not -n <= position < n:
        raise InputError(f"position {position} is outside the text's {n} tokens")
    pos = position % n
    answer = int(stream.logits[pos].argmax()) if target.answer is None else target.answer
    u, b = direction(adapter, answer, target.against)
    parts, rest, constant = attribute_positions(stream, u[None].expand(n, -1), torch.full((n,), b, dtype=u.dtype))
    table = stream.labels.assign(dla=parts[:, pos].numpy())
    logit = float(stream.logits[pos, answer] - (0 if target.against is None else stream.logits[pos, target.against]))
    return Attribution(table, logit, float(rest[pos]), float(constant[pos]), pos, answer, target.against)


def source_parts(adapter: ModelAdapter, stream: Stream, attribution: Attribution) -> pd.DataFrame:
    """``layer, head, source, token, dla``: each head's DLA split over the positions it read
    (``pattern[pos, k] · (v_k · W_O^hᵀ u')/s``); summed over ``source`` it is the head's DLA.

    Raises:
        InputError: the stream was decomposed without ``sources=True``.
    """
    from probe.errors import InputError

    from probe.analyses.patterns.decoder_circuits import ov_circuit

    if stream.pattern is None or stream.values is None:
        raise InputError("decompose(..., sources=True) reads the patterns and values this needs")
    pos = attribution.position
    u, _ = direction(adapter, attribution.answer, attribution.against)
    folded = stream.fold.direction(u) / float(stream.scale[pos])
    rows = []
    for layer in range(stream.pattern.shape[0]):
        for h in range(stream.pattern.shape[1]):
            _, w_o = ov_circuit(adapter, layer, h)  # [d_model, head_dim]
            read = stream.values[layer, :, h] @ (w_o.double().T @ folded)  # [seq]
            contrib = stream.pattern[layer, h, pos] * read
            rows += [
                (layer, h, k, stream.tokens[k], float(contrib[k]))
                for k in range(pos + 1)
                if stream.pattern[layer, h, pos, k] > 0
            ]
    return pd.DataFrame(rows, columns=["layer", "head", "source", "token", "dla"])


def component_writes(adapter: ModelAdapter, stream: Stream, index: int, position: int, k: int = 10) -> pd.DataFrame:
    """``rank, token, token_str, dla``: the ``k`` tokens whose logits component ``index`` (a
    row of ``stream.labels``) raises most at ``position`` — its DLA to every token at once
    (``W_U' · (g ⊙ centre(c)) / s``), what the head actually writes there."""
    w_u, _ = unembedding(adapter)
    folded = stream.fold.linear(stream.parts[index, position]) / float(stream.scale[position])  # [d]
    logits = w_u.double().cpu() @ folded
    vals, idx = logits.topk(k)
    dec = adapter.tokenizer.decode
    return pd.DataFrame(
        {"rank": range(k), "token": idx.tolist(), "token_str": [dec([int(i)]) for i in idx], "dla": vals.tolist()}
    )


def logit_attribution(
    adapter: ModelAdapter, text: str, target: Target, position: int = -1, sources: bool = False
) -> tuple:
    """``(Attribution, source table or None)`` of one text (:func:`attribute`, :func:`source_parts`)."""
    from .stream import decompose

    stream = decompose(adapter, text, sources=sources)
    att = attribute(adapter, stream, target, position)
    return att, (source_parts(adapter, stream, att) if sources else None)
