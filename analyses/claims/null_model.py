"""Null models of the same shape: what a claim gives on a model that learned nothing.

A claim about a head holds only where its effect is beyond what the same claim gives on a
**null model** of the same architecture, run on the same examples with the same objective
(the calibration of Sanity Checks for Saliency Maps, Adebayo et al. 2018: an explanation
that a re-initialised model also produces says nothing about the trained one). The null
here is the model **re-initialised**: every weight drawn again from the model's own
initialiser (``PreTrainedModel._init_weights``, else each module's ``reset_parameters``),
with a fixed seed, the tokenizer and card unchanged — or its attention weights
**permuted** (:func:`permuted`): each kind of attention weight (query, key, value and output
projection, their per-head biases) pooled over every head and layer and its entries
shuffled, embeddings, MLPs and norms kept — a model whose heads carry the trained weights'
scale and distribution but no learned arrangement (the permutation null of weight
statistics; the re-initialised model keeps neither the scale nor the rest of the network).

:func:`null_quantile` turns the null model's per-example effects of every head
``[m, n]`` into the per-example ``(1 − q)`` quantile over its heads ``[n]`` — the largest
effect a head of a model that learned nothing reaches on that example, but for a share
``q`` of its heads; a claim is then tested against it per example (paired), so a head of
the null model itself clears it on too few examples to be declared.
"""

from __future__ import annotations

from typing import Any, Optional

import copy
import logging

import numpy as np
import torch

from probe.errors import InputError

from . import thresholds as T

log = logging.getLogger(__name__)

__all__ = [
    "reinitialised",
    "permuted",
    "null_adapter",
    "null_model_for",
    "null_quantile",
    "null_source",
    "NULL_SOURCE",
    "NULLS",
]

#: how each null model is made (stated on every calibrated claim), by its name
NULLS = {
    "reinit": "the model re-initialised (same architecture, its own initialiser, seed {seed})",
    "permute": "the model with its attention weights permuted across heads and layers (each kind of "
    "attention weight's entries shuffled over every head and layer, the rest kept; seed {seed})",
}
#: the null a claim is calibrated on unless asked otherwise. Measured (docs/claims-statistics.md,
#: "Which null"): both nulls leave every random model of bench/null_claims_table.py with 0
#: heads on every claim and the zoo with 18 of 18 expectations; on the bundled MiniLM the
#: permuted null's heads harm the similarity structure more (95% head quantile 0.069 per
#: sentence) than the trained heads do (L5H10 0.065), so it holds necessity for none of them,
#: including the heads an independent removal sweep ranks first; the re-initialised null
#: (0.0051) keeps them. ``permute`` stays a stricter choice (``--null permute``).
DEFAULT_NULL = "reinit"
#: the re-initialised null's source (kept for callers that name it)
NULL_SOURCE = NULLS["reinit"]


def null_source(kind: str, seed: int = 0) -> str:
    """How the null model ``kind`` (a key of :data:`NULLS`) is made, in words.

    Raises:
        InputError: an unknown ``kind``.
    """
    if kind not in NULLS:
        raise InputError(f"unknown null model {kind!r}; known: {', '.join(NULLS)}, none")
    return NULLS[kind].format(seed=int(seed))


def reinitialised(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """A copy of ``model`` with every weight drawn again (eval mode; ``model`` untouched).

    A transformers model re-draws through its ``_init_weights`` (its configured
    ``initializer_range``); any other module through each submodule's
    ``reset_parameters``. Raises nothing: a parameter no initialiser touches keeps its
    value (logged)."""
    null = copy.deepcopy(model)
    before = {n: p.detach().clone() for n, p in null.named_parameters()}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        with torch.no_grad():
            init = getattr(null, "_init_weights", None)
            if callable(init):
                null.apply(init)
            else:
                for m in null.modules():
                    reset = getattr(m, "reset_parameters", None)
                    if callable(reset) and m is not null:
                        reset()
    kept = [n for n, p in null.named_parameters() if p.numel() > 1 and torch.equal(p.detach(), before[n])]
    kept = [n for n in kept if not n.endswith(("LayerNorm.weight", "LayerNorm.bias", "norm.weight", "ln_1.weight"))]
    if kept:
        log.info("null model: %d parameters kept by the initialiser (e.g. %s)", len(kept), kept[0])
    return null.eval()


def _attention_parameters(adapter: Any) -> dict:
    """``{(stack, name relative to its layer's module, shape): [full parameter names, one per
    layer]}``: the heads' own weights of every attention stack of ``adapter`` — every
    parameter of each layer's attention module outside its norms, and the weight of its
    output projection (whose input is the heads' outputs side by side; its bias is not a
    head's)."""
    from probe.errors import NotApplicable

    names = {id(m): n for n, m in adapter.model.named_modules()}
    groups: dict = {}
    seen: set = set()
    for stack in adapter.stacks:
        attn = adapter.attention_modules(stack)
        try:
            outs = adapter.head_output_modules(stack)
        except NotApplicable:
            outs = [None] * len(attn)
        for module, out in zip(attn, outs):
            owned = []
            for sub_name, sub in module.named_modules():
                if "norm" in type(sub).__name__.lower() or sub is out:
                    continue
                for pname, p in sub.named_parameters(recurse=False):
                    owned.append((f"{sub_name}.{pname}".lstrip("."), names[id(module)], p))
            if out is not None and id(out) in names:
                owned.append(("<output>.weight", names[id(out)], out.weight))
            for rel, base, p in owned:
                full = f"{base}.{rel}" if not rel.startswith("<output>") else f"{base}.weight"
                if full in seen:  # a module shared by layers (ALBERT) or the projection inside the module
                    continue
                seen.add(full)
                groups.setdefault((stack, rel, tuple(p.shape)), []).append(full)
    return groups


def permuted(adapter: Any, seed: int = 0) -> torch.nn.Module:
    """A copy of ``adapter.model`` whose attention weights are permuted across heads and
    layers (eval mode; the model untouched).

    Each kind of attention weight — a parameter of the attention modules with the same
    name and shape in every layer of a stack (query, key, value, their biases, fused
    projections, relative-position tables), and the output projection's weight — is pooled
    over every layer (so over every head) and its entries shuffled by one seeded
    permutation; embeddings, MLPs, norms and the output projection's bias keep their
    trained values. The heads keep the trained weights' scale and distribution and lose
    their arrangement. Raises nothing for a model without attention modules it can find
    (the adapter raises first)."""
    null = copy.deepcopy(adapter.model)
    params = dict(null.named_parameters())
    gen = torch.Generator().manual_seed(int(seed))
    with torch.no_grad():
        for fulls in _attention_parameters(adapter).values():
            tensors = [params[f] for f in fulls if f in params]
            if not tensors:
                continue
            pooled = torch.cat([t.detach().reshape(-1) for t in tensors])
            pooled = pooled[torch.randperm(pooled.numel(), generator=gen)]
            start = 0
            for t in tensors:
                t.copy_(pooled[start : start + t.numel()].view_as(t))
                start += t.numel()
    return null.eval()


def null_adapter(adapter: Any, seed: int = 0, kind: str = "reinit") -> Any:
    """The :class:`probe.models.ModelAdapter` of the null model ``kind`` of ``adapter``
    (:func:`reinitialised` or :func:`permuted`; same tokenizer, family and card, the card's
    ``null_source`` saying how it was made), named ``<name> (null)``.

    Raises:
        InputError: an unknown ``kind``.
    """
    from probe.models import ModelAdapter

    source = null_source(kind, seed)
    model = reinitialised(adapter.model, seed) if kind == "reinit" else permuted(adapter, seed)
    return ModelAdapter(
        name=f"{adapter.name} (null)",
        model=model,
        tokenizer=adapter.tokenizer,
        family=adapter.family,
        source=f"null of {adapter.source or adapter.name}",
        card=dict(adapter.card, null_source=source),
    )


def null_quantile(null_effects: Any, q: float = T.FDR) -> np.ndarray:
    """``[n]``: per example, the ``1 − q`` quantile over the null model's heads of their
    effects ``[m, n]`` (linear interpolation; NaN heads ignored)."""
    e = np.asarray(null_effects, dtype=np.float64)
    if e.ndim != 2 or e.shape[0] < 1:
        raise InputError(f"null effects must be [heads, examples], got shape {e.shape}")
    return np.nanquantile(e, 1.0 - q, axis=0)


def null_model_for(adapter: Any, null: Optional[str], seed: int) -> Any:
    """The null model ``null`` (``None``: :data:`DEFAULT_NULL`) of ``adapter``;
    ``None`` without a live model or for ``null="none"``."""
    kind = DEFAULT_NULL if null is None else null
    if kind in ("none", ""):
        return None
    null_source(kind, seed)  # an unknown name is refused with or without a live model
    if adapter is None:
        return None
    return null_adapter(adapter, seed=seed, kind=kind)
