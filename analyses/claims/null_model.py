"""Null models of the same shape: what a claim gives on a model that learned nothing.

A claim about a head holds only where its effect is beyond what the same claim gives on a
**null model** of the same architecture, run on the same examples with the same objective
(the calibration of Sanity Checks for Saliency Maps, Adebayo et al. 2018: an explanation
that a re-initialised model also produces says nothing about the trained one). The null
here is the model **re-initialised**: every weight drawn again from the model's own
initialiser (``PreTrainedModel._init_weights``, else each module's ``reset_parameters``),
with a fixed seed, the tokenizer and card unchanged.

:func:`null_quantile` turns the null model's per-example effects of every head
``[m, n]`` into the per-example ``(1 − q)`` quantile over its heads ``[n]`` — the largest
effect a head of a model that learned nothing reaches on that example, but for a share
``q`` of its heads; a claim is then tested against it per example (paired), so a head of
the null model itself clears it on too few examples to be declared.
"""

from __future__ import annotations

from typing import Any

import copy
import logging

import numpy as np
import torch

from probe.errors import InputError

from . import thresholds as T

log = logging.getLogger(__name__)

__all__ = ["reinitialised", "null_adapter", "null_quantile", "NULL_SOURCE"]

#: how the null model is made (stated on every calibrated claim)
NULL_SOURCE = "the model re-initialised (same architecture, its own initialiser, seed {seed})"


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


def null_adapter(adapter: Any, seed: int = 0) -> Any:
    """The :class:`probe.models.ModelAdapter` of :func:`reinitialised` ``adapter.model``
    (same tokenizer, family and card), named ``<name> (null)``."""
    from probe.models import ModelAdapter

    return ModelAdapter(
        name=f"{adapter.name} (null)",
        model=reinitialised(adapter.model, seed),
        tokenizer=adapter.tokenizer,
        family=adapter.family,
        source=f"null of {adapter.source or adapter.name}",
        card=dict(adapter.card),
    )


def null_quantile(null_effects: Any, q: float = T.FDR) -> np.ndarray:
    """``[n]``: per example, the ``1 − q`` quantile over the null model's heads of their
    effects ``[m, n]`` (linear interpolation; NaN heads ignored)."""
    e = np.asarray(null_effects, dtype=np.float64)
    if e.ndim != 2 or e.shape[0] < 1:
        raise InputError(f"null effects must be [heads, examples], got shape {e.shape}")
    return np.nanquantile(e, 1.0 - q, axis=0)
