"""Head importance scores from head gates ξ.

* ``gradient`` — Michel et al. (2019, "Are Sixteen Heads Really Better than One?"):
  ``I_h = E_x |∂L(x)/∂ξ_h|`` at ξ = 1, then normalised per layer by the layer's ℓ2
  norm. Every example gets its own gates (``[rows, layer, head]``), so one forward and
  one backward over the corpus give the exact per-example gradients of all heads
  (their absolute values are averaged, not the absolute value of a batch gradient).
* ``ig`` — integrated gradients over the gates (Sundararajan et al. 2017) from ξ = 0
  (every head off) to ξ = 1 (or a pruning mask), via captum: the head-level form of
  Hao et al.'s (2021) attention attribution, which scales attention from 0 to 1. The
  attributions sum to ``f(ξ) − f(0)`` (completeness); captum's convergence delta is kept.
  Importance is ``|attribution|``, normalised per layer like ``gradient``.

``embedding-drift`` is 0 at ξ = 1 and minimal there, so its gradient is exactly zero
and Michel's score is degenerate: ``method="auto"`` uses ``ig`` for metrics marked
``stationary_at_clean`` (and for non-differentiable ones it is refused).

Shapes: ``ImportanceResult.scores`` / ``.raw`` are ``[n_layers, n_heads]``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Optional

import numpy as np
import pandas as pd
import torch

from probe.analyses.common.metrics import Chunk, as_corpus, prepare
from probe.analyses.common.objective import Objective, given_objective
from probe.inputs.budget import length_groups, rows_for
from probe.errors import InputError
from probe.interventions.heads import HeadGates

log = logging.getLogger(__name__)

__all__ = [
    "ImportanceResult",
    "head_importance",
    "gradient_importance",
    "importance_from_gate_gradients",
    "ig_importance",
    "normalize_per_layer",
    "IMPORTANCE_METHODS",
    "COMPLETENESS_TOLERANCE",
]

IMPORTANCE_METHODS = ("auto", "gradient", "ig")
#: the relative completeness error the report's integrated gradients keep under (the
#: faithfulness section's gate, :mod:`probe.analyses.explanation.completeness`, uses the same 1%)
COMPLETENESS_TOLERANCE = 0.01


def normalize_per_layer(scores: torch.Tensor) -> torch.Tensor:
    """Divide each layer's row of ``[n_layers, n_heads]`` scores by its ℓ2 norm."""
    return scores / scores.norm(dim=-1, keepdim=True).clamp(min=1e-20)


@dataclass(frozen=True)
class ImportanceResult:
    """Head importance.

    Attributes:
        scores: ``[n_layers, n_heads]`` importance normalised per layer.
        raw: ``[n_layers, n_heads]`` before normalisation (``gradient``: mean
            |∂L/∂ξ|; ``ig``: the signed attribution).
        method: ``gradient`` or ``ig``.
        metric: the metric's name.
        delta: ``ig`` only: captum's convergence delta averaged over chunks.
        steps: ``ig`` only: the interpolation steps each chunk used (all ``n_steps``
            without a ``tolerance``); tolerance: the relative completeness error the
            steps were chosen to keep under, or ``None``.
    """

    scores: np.ndarray
    raw: np.ndarray
    method: str
    metric: str
    delta: Optional[float] = None
    steps: tuple = ()
    tolerance: Optional[float] = None

    def to_frame(self) -> pd.DataFrame:
        """``layer, head, importance, raw, rank, method, metric`` (rank 1 = most important)."""
        L, H = self.scores.shape
        imp = self.scores.reshape(-1)
        rank = np.empty(imp.size, dtype=int)
        rank[np.argsort(-imp, kind="stable")] = np.arange(1, imp.size + 1)
        return pd.DataFrame(
            {
                "layer": np.repeat(np.arange(L), H),
                "head": np.tile(np.arange(H), L),
                "importance": imp,
                "raw": self.raw.reshape(-1),
                "rank": rank,
                "method": self.method,
                "metric": self.metric,
            }
        )


def _base_gates(adapter, mask, stack) -> torch.Tensor:
    shape = (adapter.n_layers_of(stack), adapter.n_heads)
    if mask is None:
        return torch.ones(shape)
    mask = torch.as_tensor(mask, dtype=torch.float32)
    if tuple(mask.shape) != shape:
        raise InputError(f"head mask must have shape {shape} (layers, heads), got {tuple(mask.shape)}")
    return mask


def _lengths(adapter, corpus) -> list:
    """Token count of every example (the model's tokenizer, special tokens included)."""
    spans = corpus.word_spans
    return [len(adapter.encode(corpus.texts[i], spans[i] if spans else None)) for i in range(len(corpus))]


@torch.no_grad()
def sized_chunks(adapter, corpus, objective: Objective, batch_size: int = 16) -> list:
    """Like :func:`probe.analyses.common.metrics.prepare`, but each chunk holds examples
    of similar length (longest first), as many (at most ``batch_size``) as fit one
    forward with gradients under the memory budget (:mod:`probe.inputs.budget`): a long input
    no longer pads a whole batch to its length, and its rows are few. The clean forward
    runs only for an objective with a reference (its own :meth:`~Objective.reference`):
    importance reads nothing else of it, and a loss's was a tenth of SmolLM2's section."""
    if getattr(corpus, "examples", ()):  # zoo tasks: the metric builds the inputs itself
        return prepare(adapter, corpus, objective, batch_size)
    lengths = _lengths(adapter, corpus)
    clean_run = type(objective).reference is not Objective.reference  # else no reference: no clean forward
    chunks = []
    for idx in length_groups(lengths, adapter, batch_size, grad=True):
        idx = sorted(idx)
        batch = objective.make_batch(adapter, corpus, idx)
        if not clean_run:
            chunks.append(Chunk(tuple(idx), batch, None, None))
            continue
        out = objective.forward(adapter, batch)
        ref = objective.reference(out, batch)
        chunks.append(Chunk(tuple(idx), batch, ref, objective.score(out, batch, ref).detach()))
    return chunks


def _bar(chunks: list, progress: bool, desc: str):
    """The chunks, with a progress bar counting examples (items, rate, ETA) when ``progress``."""
    if not progress:
        yield from chunks
        return
    from tqdm.auto import tqdm

    with tqdm(total=sum(len(ch.indices) for ch in chunks), unit="ex", desc=desc) as bar:
        for ch in chunks:
            yield ch
            bar.update(len(ch.indices))


def gradient_importance(
    adapter,
    corpus,
    objective: Objective,
    *,
    mask=None,
    batch_size: int = 16,
    chunks: Optional[list] = None,
    stack: Optional[str] = None,
    progress: bool = False,
) -> ImportanceResult:
    """Michel et al.'s ``E_x |∂L(x)/∂ξ_h|`` at ξ = ``mask`` (default all ones).

    One forward and one backward per chunk of examples; chunks group examples of similar
    length, as many as the memory budget allows (:func:`sized_chunks`).

    Raises:
        ValueError: a non-differentiable metric, or one whose gradient vanishes at the
            clean model (use ``ig``); a mask of the wrong shape.
    """
    corpus = as_corpus(corpus)
    objective = given_objective(objective, adapter, corpus)
    if not objective.differentiable:
        raise InputError(
            f"objective {objective.name!r} is not differentiable; gradient importance needs a loss (use --objective loss)"
        )
    if objective.stationary_at_clean and mask is None:
        raise InputError(
            f"{objective.name!r} is zero with zero gradient on the unablated model, so "
            "|∂L/∂ξ| vanishes: use method 'ig' (integrated gradients over the gates)"
        )
    base = _base_gates(adapter, mask, stack).to(adapter.device)
    chunks = chunks if chunks is not None else sized_chunks(adapter, corpus, objective, batch_size)
    total = torch.zeros_like(base, dtype=torch.float64)
    n = 0
    for ch in _bar(chunks, progress, "importance (gradient)"):
        gates = base.expand(ch.batch.rows, *base.shape).clone().requires_grad_(True)
        with torch.enable_grad():
            with HeadGates(adapter, gates, stack):
                out = objective.forward(adapter, ch.batch)
            s = objective.score(out, ch.batch, ch.reference)
            (grad,) = torch.autograd.grad(s.sum(), gates)
        total += grad.abs().sum(0).double().cpu()
        n += ch.batch.rows
    raw = (total / max(n, 1)).float()
    return ImportanceResult(
        scores=normalize_per_layer(raw).numpy(), raw=raw.numpy(), method="gradient", metric=objective.name
    )


def importance_from_gate_gradients(gradients: np.ndarray, objective: Objective) -> ImportanceResult:
    """Michel et al.'s ``E_x |∂L(x)/∂ξ_h|`` (:func:`gradient_importance`'s) from per-example
    gate gradients ``[n, n_layers, n_heads]`` of ``objective`` that another backward already gave, such as a head
    screen's (:attr:`probe.analyses.necessity.screen.HeadScreen.gate_gradient`, the same
    ``Σ g·z_h``): the same values to float rounding, without a forward and backward of its own."""
    g = np.asarray(gradients, np.float64)
    raw = torch.from_numpy(np.abs(g).sum(0) / max(len(g), 1)).float()
    return ImportanceResult(
        scores=normalize_per_layer(raw).numpy(), raw=raw.numpy(), method="gradient", metric=objective.name
    )


def ig_importance(
    adapter,
    corpus,
    objective: Objective,
    *,
    mask=None,
    n_steps: int = 20,
    batch_size: int = 16,
    max_rows: int = 256,
    chunks: Optional[list] = None,
    stack: Optional[str] = None,
    progress: bool = False,
    tolerance: Optional[float] = None,
) -> ImportanceResult:
    """Integrated gradients of the mean metric over head gates, from ξ = 0 to ξ = ``mask``
    (default all ones), with captum's ``IntegratedGradients`` (Gauss–Legendre, ``n_steps``).

    The forward function takes gates ``[k, n_layers, n_heads]`` (k interpolation
    steps) and returns the corpus-chunk mean metric ``[k]``, running ``k·b`` rows.

    With ``tolerance`` each chunk uses the fewest steps of 4, 8, 16, … (up to ``n_steps``)
    whose relative completeness error ``|delta| / |f(mask) − f(0)|`` is at most
    ``tolerance`` (Sundararajan et al. 2017 check completeness to choose the steps; the
    report asks 1%, the faithfulness gate's :data:`COMPLETENESS_TOLERANCE`), ``n_steps``
    where none is: on MiniLM's embedding drift 4 steps already give 0.26% (20: 2·10⁻⁸).

    Raises:
        ValueError: a non-differentiable metric, ``n_steps < 2``, a mask of the wrong shape.
    """
    from captum.attr import IntegratedGradients

    corpus = as_corpus(corpus)
    objective = given_objective(objective, adapter, corpus)
    if not objective.differentiable:
        raise InputError(f"objective {objective.name!r} is not differentiable; use --objective loss or embedding-drift")
    if n_steps < 2:
        raise InputError(f"n_steps must be ≥ 2, got {n_steps}")
    base = _base_gates(adapter, mask, stack).to(adapter.device)
    chunks = chunks if chunks is not None else sized_chunks(adapter, corpus, objective, batch_size)
    total = torch.zeros_like(base, dtype=torch.float64)
    deltas, n, used = [], 0, []
    if tolerance is not None and not tolerance > 0:
        raise InputError(f"tolerance is a relative completeness error above 0, got {tolerance}")
    ladder = [n_steps] if tolerance is None else [k for k in (4, 8, 16, 32, 64, 128) if k < n_steps] + [n_steps]
    for ch in _bar(chunks, progress, f"importance (IG, {n_steps} steps)"):
        b = ch.batch.rows
        # rows of one forward (steps × b) sized from this chunk's length under the budget
        per_forward = rows_for(adapter, int(ch.batch.inputs["input_ids"].shape[1]), max_rows, grad=True)

        def f(g, ch=ch, b=b):
            k = g.shape[0]
            big = ch.batch.repeat(k)
            ref = None if ch.reference is None else ch.reference.repeat(k, *([1] * (ch.reference.dim() - 1)))
            with HeadGates(adapter, g.repeat_interleave(b, 0).reshape(k * b, *base.shape), stack):
                out = objective.forward(adapter, big)
            # repeat() puts copy j at rows j·b…; repeat_interleave gives gate j to those rows
            return objective.score(out, big, ref).reshape(k, b).mean(1)

        ig = IntegratedGradients(f)
        for k in ladder:
            with torch.enable_grad():
                attr, delta = ig.attribute(
                    base[None],
                    baselines=torch.zeros_like(base)[None],
                    n_steps=k,
                    internal_batch_size=max(1, per_forward // b),
                    return_convergence_delta=True,
                )
            change = float(attr.detach().double().sum()) - float(delta.detach().double().sum())  # f(mask) − f(0)
            if tolerance is None or abs(float(delta.sum())) <= tolerance * abs(change):
                break
        used.append(k)
        total += attr[0].detach().double().cpu() * b
        deltas.append(float(delta.abs().sum()) * b)
        n += b
    raw = (total / max(n, 1)).float()
    delta = sum(deltas) / max(n, 1)
    log.info("integrated gradients over head gates: mean |convergence delta| %.3g", delta)
    return ImportanceResult(
        scores=normalize_per_layer(raw.abs()).numpy(),
        raw=raw.numpy(),
        method="ig",
        metric=objective.name,
        delta=delta,
        steps=tuple(used),
        tolerance=tolerance,
    )


def head_importance(adapter, corpus, objective: Objective, method: str = "auto", **kwargs) -> ImportanceResult:
    """Dispatch to :func:`gradient_importance` or :func:`ig_importance`; ``auto`` picks
    ``ig`` for metrics whose gradient vanishes at the clean model (embedding-drift).

    Raises:
        ValueError: an unknown method (listing the known ones) and the callees' errors.
    """
    if method not in IMPORTANCE_METHODS:
        raise InputError(f"unknown importance method {method!r}; use one of {', '.join(IMPORTANCE_METHODS)}")
    m = given_objective(objective, adapter, as_corpus(corpus))
    if method == "auto":
        method = "ig" if m.stationary_at_clean else "gradient"
    fn = gradient_importance if method == "gradient" else ig_importance
    if method == "gradient":
        kwargs.pop("n_steps", None)
        kwargs.pop("max_rows", None)
        kwargs.pop("tolerance", None)
    return fn(adapter, corpus, m, **kwargs)
