"""OV and QK token circuits with the norms folded in, never as a vocab × vocab matrix.

Elhage et al. 2021 ("A Mathematical Framework for Transformer Circuits"): a head's *full
OV circuit* ``M = W_E' W_V^hᵀ W_O^hᵀ W_U'ᵀ`` ``[source token, output logit]`` says which
logits the head raises when it attends to a token; its *QK circuit* ``W_E' W_Q^hᵀ W_K^h
W_E'ᵀ`` ``[destination, source]`` which tokens a token attends to. Here, as TransformerLens
folds them (``fold_ln``): ``W_E'`` is the embedding through the layer's pre-attention norm's
linear part (gain; centred for a LayerNorm) and ``W_U'`` the unembedding with the final
norm's gain folded in (centred for a LayerNorm); the norms' per-token scales and all biases
are left out (as TransformerLens's ``FactoredMatrix`` circuits leave them). Grouped-query
heads read their key/value head (:func:`probe.models.sites.kv_head_of`); rotary position
is left out of QK (a token-to-token circuit).

Memory: ``M`` is kept as the factors ``A = W_E' W_V^hᵀ`` ``[vocab, head_dim]`` and ``B =
W_O^hᵀ W_U'ᵀ`` ``[head_dim, vocab]``; rows are formed in blocks and only their top-k kept.
The **copying score** ``Σλ/Σ|λ|`` over ``M``'s eigenvalues (Olsson et al. 2022) is read
from ``B A`` ``[head_dim, head_dim]`` (the same non-zero eigenvalues): :func:`copying_scores`,
the one implementation the decoder taxonomy uses too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence, cast

import numpy
import pandas as pd
import torch

from probe.errors import NotApplicable

if TYPE_CHECKING:
    from probe.models.adapter import ModelAdapter

__all__ = [
    "COPYING_THRESHOLD",
    "ov_circuit",
    "ov_factors",
    "ov_top_tokens",
    "ov_copied_tokens",
    "qk_top_sources",
    "copying_scores",
    "BLOCK",
]

#: rows of a circuit formed at once (BLOCK × vocab floats)
BLOCK = 256


def _embed_unembed(adapter: ModelAdapter) -> tuple:
    """``(W_E [vocab, d], W_U [vocab, d])`` float32, cut to the rows both have."""
    from .folding import unembedding

    w_u, _ = unembedding(adapter)
    w_e = cast(torch.Tensor, adapter.embeddings().weight).detach().float().cpu()
    n = min(len(w_e), len(w_u))
    return w_e[:n], w_u.float().cpu()[:n]


def _folds(adapter: ModelAdapter, layer: int) -> tuple:
    from .folding import final_norm, pre_attention_norm

    return pre_attention_norm(adapter, layer), final_norm(adapter)[1]


def _read(fold, w: torch.Tensor, project: Optional[torch.Tensor] = None, unembed: bool = False) -> torch.Tensor:
    """Each row of ``w [vocab, d]`` through the fold (``fold.linear``: an embedding the norm
    reads; ``unembed``: ``fold.direction``, an unembedding row reading the norm's output),
    times ``project [d, k]`` when given, in float64 (block-wise: no float64 vocabulary copy)."""
    out = torch.empty(
        (len(w), w.shape[1] if project is None else project.shape[1]),
        dtype=w.dtype if project is None else torch.float64,
    )
    for i in range(0, len(w), 8192):
        x = fold.direction(w[i : i + 8192]) if unembed else fold.linear(w[i : i + 8192])
        out[i : i + 8192] = x if project is None else x @ project.double()
    return out


#: the copying score over which the decoder taxonomy calls a head a copying head (Olsson et al.
#: 2022 report copying heads' positive-eigenvalue share near 1; 0.5: more positive than negative)
COPYING_THRESHOLD = 0.5


def _weight(module: torch.nn.Module) -> torch.Tensor:
    from probe.runs.values import projection_weight

    return projection_weight(module).detach().float()


def ov_circuit(adapter: ModelAdapter, layer: int, head: int) -> tuple:
    """``(W_V^h [head_dim, d_model], W_O^h [d_model, head_dim])`` of ``head`` in ``layer``: its
    rows of the value projection (the value part of a fused q|k|v; its key/value head under
    grouped-query attention) and its columns of the output projection.

    Raises:
        NotApplicable: the model has no separate output projection per head, or its value
            projection is not a linear map of the residual stream.
    """
    from probe.models.sites import kv_head_of, value_layout

    adapter.check_head_site()
    dh = adapter.head_dim
    w_v = _weight(adapter.value_modules()[layer])  # [out, d_model]
    layout = value_layout(adapter)
    if layout is not None:
        parts, index = layout
        width = w_v.shape[0] // parts
        w_v = w_v[index * width : (index + 1) * width]
    n_kv = w_v.shape[0] // dh
    g = kv_head_of(adapter, head, n_kv)
    w_o = _weight(adapter.head_output_modules()[layer])  # [d_model, heads * dh]
    return w_v[g * dh : (g + 1) * dh], w_o[:, head * dh : (head + 1) * dh]


def ov_factors(adapter: ModelAdapter, layer: int, head: int) -> tuple:
    """``(A [vocab, head_dim], B [head_dim, vocab])`` with ``M = A @ B`` the full OV circuit
    (module docstring), float64.

    Raises:
        NotApplicable: no unembedding, no foldable norms, no per-head output projection.
    """
    pre, final = _folds(adapter, layer)
    w_e, w_u = _embed_unembed(adapter)
    w_v, w_o = ov_circuit(adapter, layer, head)  # [dh, d], [d, dh]
    a = _read(pre, w_e, w_v.T)
    b = _read(final, w_u, w_o, unembed=True).T
    return a, b


def _top_rows(a: torch.Tensor, b: torch.Tensor, rows: Sequence[int], k: int) -> tuple:
    vals, idx = [], []
    for i in range(0, len(rows), BLOCK):
        block = a[list(rows[i : i + BLOCK])] @ b  # [block, vocab]
        v, j = block.topk(k, dim=-1)
        vals.append(v)
        idx.append(j)
    return torch.cat(vals), torch.cat(idx)


def _frame(
    adapter: ModelAdapter, rows: Sequence[int], vals: torch.Tensor, idx: torch.Tensor, cols: tuple
) -> pd.DataFrame:
    dec = adapter.tokenizer.decode
    out = [
        (int(r), dec([int(r)]), rank, int(j), dec([int(j)]), float(v))
        for r, vr, jr in zip(rows, vals, idx)
        for rank, (v, j) in enumerate(zip(vr.tolist(), jr.tolist()))
    ]
    return pd.DataFrame(out, columns=list(cols))


def ov_top_tokens(adapter: ModelAdapter, layer: int, head: int, sources: Sequence[int], k: int = 10) -> pd.DataFrame:
    """``source, source_token, rank, token, token_str, logit``: for each source token id, the
    ``k`` output tokens whose logits ``head``'s OV circuit raises most when it attends to it."""
    a, b = ov_factors(adapter, layer, head)
    vals, idx = _top_rows(a, b, list(sources), k)
    return _frame(adapter, list(sources), vals, idx, ("source", "source_token", "rank", "token", "token_str", "logit"))


def ov_copied_tokens(adapter: ModelAdapter, layer: int, head: int, k: int = 10) -> pd.DataFrame:
    """``token, token_str, self_logit, self_rank``: the ``k`` tokens whose own logit the OV
    circuit raises most when the head attends to them (``M``'s diagonal), with the rank of
    that logit in the token's row (0: the head promotes that token most of all)."""
    a, b = ov_factors(adapter, layer, head)
    diag = (a * b.T).sum(-1)  # [vocab]
    vals, idx = diag.topk(k)
    ranks = [int(((a[int(t)] @ b) > v).sum()) for t, v in zip(idx, vals)]
    dec = adapter.tokenizer.decode
    return pd.DataFrame(
        {
            "token": idx.tolist(),
            "token_str": [dec([int(t)]) for t in idx],
            "self_logit": vals.tolist(),
            "self_rank": ranks,
        }
    )


def _qk_weights(adapter: ModelAdapter, layer: int, head: int) -> tuple:
    """``(W_Q^h [dh, d], W_K^kv(h) [dh, d])`` of one head."""
    from probe.models.sites import kv_head_of, value_layout
    from probe.runs.values import projection_weight

    dh = adapter.head_dim
    layout = value_layout(adapter)
    if layout is not None:  # fused q|k|v
        w = projection_weight(adapter.value_modules()[layer]).detach().float()
        width = w.shape[0] // layout[0]
        w_q, w_k = w[:width], w[width : 2 * width]
    else:
        children = dict(adapter.attention_modules()[layer].named_children())
        q = next((children[n] for n in ("q_proj", "query", "q", "q_lin") if n in children), None)
        kk = next((children[n] for n in ("k_proj", "key", "k", "k_lin") if n in children), None)
        if q is None or kk is None:
            raise NotApplicable(f"{adapter.name}: no separate query/key projections found in layer {layer}")
        w_q, w_k = projection_weight(q).detach().float(), projection_weight(kk).detach().float()
    g = kv_head_of(adapter, head, w_k.shape[0] // dh)
    return w_q[head * dh : (head + 1) * dh].cpu(), w_k[g * dh : (g + 1) * dh].cpu()


def qk_top_sources(
    adapter: ModelAdapter, layer: int, head: int, destinations: Sequence[int], k: int = 10
) -> pd.DataFrame:
    """``destination, destination_token, rank, token, token_str, score``: for each destination
    token id, the ``k`` source tokens ``head``'s QK circuit scores highest (unscaled
    ``q · k``; positions left out)."""
    pre, _ = _folds(adapter, layer)
    w_e, _ = _embed_unembed(adapter)
    w_q, w_k = _qk_weights(adapter, layer, head)
    keys = _read(pre, w_e, w_k.T).T  # [dh, vocab]
    queries = _read(pre, w_e, w_q.T)  # [vocab, dh]
    vals, idx = _top_rows(queries, keys, list(destinations), k)
    cols = ("destination", "destination_token", "rank", "token", "token_str", "score")
    return _frame(adapter, list(destinations), vals, idx, cols)


def _unembed_embed(final, w_u: torch.Tensor, w_e: torch.Tensor, centre: bool) -> torch.Tensor:
    """``W_U'ᵀ W_E`` ``[d, d]`` in float64, summed over blocks of the vocabulary."""
    out = torch.zeros(w_u.shape[1], w_e.shape[1], dtype=torch.float64)
    for i in range(0, len(w_u), 8192):
        e = w_e[i : i + 8192].double()
        out += final.direction(w_u[i : i + 8192]).T @ (e - e.mean(-1, keepdim=True) if centre else e)
    return out


def copying_scores(adapter: ModelAdapter, threshold: Optional[float] = None) -> pd.DataFrame:
    """``layer, head, copying, copying_head``: ``Σλ/Σ|λ|`` over the eigenvalues ``λ`` of each
    head's full OV circuit with the norms folded in (module docstring; Elhage et al. 2021,
    Olsson et al. 2022), from ``[head_dim, head_dim]`` matrices in float64 (0 when every
    eigenvalue is 0); ``copying_head``: the score exceeds ``threshold`` (default the
    taxonomy's :data:`COPYING_THRESHOLD`).

    Raises:
        NotApplicable: no unembedding, or norms that do not fold.
    """
    from .folding import final_norm

    limit = COPYING_THRESHOLD if threshold is None else threshold
    w_e, w_u = _embed_unembed(adapter)
    final = final_norm(adapter)[1]
    bases: dict = {}  # W_U'ᵀ W_E (centred where the pre-attention norm is a LayerNorm): [d, d]
    rows = []
    for layer in range(adapter.n_layers_of()):
        pre = _folds(adapter, layer)[0]
        if pre.kind not in bases:
            bases[pre.kind] = _unembed_embed(final, w_u, w_e, centre=pre.kind == "layer")
        c = bases[pre.kind] * pre.gain[None, :]  # the gain folded into the embedding's read
        for h in range(adapter.n_heads):
            w_v, w_o = ov_circuit(adapter, layer, h)
            k = w_o.double().T @ c @ w_v.double().T  # [dh, dh]: M's non-zero eigenvalues
            lam = torch.from_numpy(numpy.linalg.eigvals(k.numpy()))  # LAPACK via numpy: torch's fails on repeated ones
            total = float(lam.abs().sum())
            score = float(lam.real.sum()) / total if total > 1e-9 * max(float(k.abs().max()), 1e-30) else 0.0
            rows.append({"layer": layer, "head": h, "copying": score, "copying_head": score > limit})
    return pd.DataFrame(rows)
