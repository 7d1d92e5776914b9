"""Batched head perturbations with their nulls: the evidence of the *necessity* and
*weights* claims.

For every head and example, four metric values beside the clean one:

* ``zero`` — the head's output ``z`` removed (Michel et al. 2019);
* ``uniform`` — the head's attention replaced by uniform weights over the keys it may
  see, its values kept: ``z_u = mean_k V_k`` (where it looks, not whether it contributes);
* ``zero_null`` / ``uniform_null`` — the same perturbation ``δ`` (``z`` or ``z − z_u``)
  turned in a random direction: the head's output becomes ``z − Q δ`` with ``Q`` a random
  orthogonal ``[head_dim, head_dim]`` matrix per (example, head). What is compared is the
  *change* of the head's output: removal changes it by ``−z``, the null by ``−Q z``, and
  ``|Q z| = |z|`` at every position (the null's output ``z − Q z`` itself has norm about
  ``√2·|z|``, but that is not the size of the perturbation). So the null moves the head's
  output by exactly as much as the real perturbation, in a random direction; it is the
  noise floor of a metric that cannot go below 0 (embedding drift) and of heads whose
  output is tiny.

Batched as :func:`probe.analyses.necessity.ablation.sweep_heads`: one clean forward per
chunk (recording the head outputs, the values and the residual stream), then per layer
and per kind forwards of ``k·b`` rows (``k`` heads × ``b`` examples) restarted at the
layer's output projection where the family allows, cut to the chunk's token budget.

Shapes: ``PerturbationSweep.scores[kind]`` ``[n_heads, n_examples]``; ``clean`` ``[n_examples]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np
import torch

from probe.analyses.common.metrics import as_corpus, get_metric
from probe.analyses.necessity.ablation import MAX_TOKENS, _cut, _take, _trimmable, check_heads, plan_forwards, run_rows
from probe.models.sites import supports_restart, supports_site_restart
from probe.trace import Trace

__all__ = ["PerturbationSweep", "perturbation_sweep", "uniform_output", "random_rotations", "rotate"]

KINDS = ("zero", "zero_null", "uniform", "uniform_null")


@dataclass(frozen=True)
class PerturbationSweep:
    """Metric per head and example under each perturbation.

    Attributes:
        heads: ``(layer, head)`` in row order; metric: its name; higher_is_better: its sense.
        clean: ``[n]``; scores: kind -> ``[n_heads, n]`` (kinds of :data:`KINDS` that ran).
        path: how the forwards ran (``site-restart`` / ``layer-restart`` / ``full forward``).
        skipped: kind -> why it did not run (e.g. ``uniform`` on an encoder-decoder).
    """

    heads: tuple
    metric: str
    higher_is_better: bool
    clean: np.ndarray
    scores: dict
    path: str
    skipped: dict

    def harm(self, kind: str) -> np.ndarray:
        """``[n_heads, n]``: how much worse the metric gets under ``kind`` (sign-corrected)."""
        d = self.scores[kind] - self.clean[None, :]
        return -d if self.higher_is_better else d


def uniform_output(values: torch.Tensor, mask: torch.Tensor, causal: bool) -> torch.Tensor:
    """Head outputs under uniform attention over the keys a query may see.

    Args:
        values: ``[b, seq, heads, head_dim]``; mask: ``[b, seq]`` (1 = real token).
        causal: query ``i`` sees keys ``0..i`` only.

    Returns:
        ``[b, seq, heads, head_dim]``.
    """
    b, s = mask.shape
    w = mask[:, None, :].to(values.dtype).expand(b, s, s)
    if causal:
        w = w * torch.ones(s, s, dtype=values.dtype, device=values.device).tril()
    w = w / w.sum(-1, keepdim=True).clamp(min=1)
    return torch.einsum("bqk,bkhd->bqhd", w, values)


def random_rotations(b: int, h: int, d: int, generator: torch.Generator) -> torch.Tensor:
    """``[b, h, d, d]`` random orthogonal matrices (QR of a Gaussian, signs fixed: Haar)."""
    g = torch.randn(b * h, d, d, generator=generator, dtype=torch.float64)
    q, r = torch.linalg.qr(g)
    q = q * torch.sign(torch.diagonal(r, dim1=-2, dim2=-1))[:, None, :]
    return q.reshape(b, h, d, d)


def rotate(delta: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``delta [b, seq, h, d]`` turned by ``q [b, h, d, d]`` (norms kept at every position)."""
    return torch.einsum("bshd,bhde->bshe", delta, q.to(delta.dtype).to(delta.device))


def _chunk(adapter, metric, batch, layers: dict, stack, restart: bool, max_tokens: int, kinds, gen):
    site = restart and supports_site_restart(adapter, stack)
    want_v = "uniform" in kinds
    # one clean forward reads the residual stream (restart), the output-projection inputs
    # (site restart), the head outputs and the values (the sites of probe.models.sites)
    read: list = [("z", layer) for layer in layers]
    if want_v:
        read += [("v", layer) for layer in layers]
    if restart:
        read += ["resid_pre"] + (["proj_in"] if site else [])
    with Trace(adapter, read=read, stack=stack, path="hooks") as tr:
        out = metric.forward(adapter, batch)
    cache = tr.cache
    ref = metric.reference(out, batch)
    clean = metric.score(out, batch, ref)
    trim = _trimmable(adapter, metric, batch)
    lengths = batch.lengths.tolist() if trim else [batch.inputs["input_ids"].shape[1]] * batch.rows
    mask = batch.inputs["attention_mask"]
    scores = {k: {} for k in kinds}
    for layer, heads in layers.items():
        z = cache["z", layer, stack]
        q = random_rotations(z.shape[0], z.shape[2], z.shape[3], gen)
        values = {"zero": None, "zero_null": z - rotate(z, q)}  # "zero" runs unless reused
        if want_v:
            zu = uniform_output(cache["v", layer, stack].to(z.dtype), mask, causal=adapter.arch == "decoder")
            values["uniform"] = zu
            values["uniform_null"] = z - rotate(z - zu, q)
        for kind in kinds:
            s = torch.empty(len(heads), batch.rows, dtype=clean.dtype, device=clean.device)
            for examples, part in plan_forwards(lengths, len(heads), max_tokens):
                rows = torch.as_tensor(examples)
                length = max(lengths[i] for i in examples) if trim else None
                sub = _take(batch, rows, length)
                v_kind = values[kind]
                vals = None if v_kind is None else _cut(v_kind, rows, length)
                residual = _cut(cache["resid_pre", layer, stack], rows, length) if restart else None
                context = _cut(cache["proj_in", layer, stack], rows, length) if site else None
                sub_ref = None if ref is None else _cut(ref, rows)
                r = run_rows(adapter, metric, sub, sub_ref, layer, heads[part], vals, residual, stack, context)
                s[part, rows.to(s.device)] = r.to(s.dtype)
            scores[kind][layer] = s
    return clean, scores


@torch.no_grad()
def perturbation_sweep(
    adapter,
    corpus,
    metric="loss",
    heads: Optional[Sequence] = None,
    *,
    batch_size: int = 8,
    restart: bool = True,
    max_tokens: int = MAX_TOKENS,
    seed: int = 0,
    stack: Optional[str] = None,
    progress: bool = False,
    zero: Any = None,
) -> PerturbationSweep:
    """Zero, uniform-weight and null perturbations of every head on every example.

    ``zero``: a :class:`probe.analyses.necessity.ablation.SweepResult` of zero-ablation
    on the same corpus, metric and heads (the report's ablation section); its per-example
    scores are reused instead of running the removals again.

    Raises:
        ValueError: an unknown metric or one that does not apply, a head out of range, an
            empty corpus.
    """
    from tqdm.auto import tqdm

    corpus = as_corpus(corpus)
    metric = get_metric(metric, adapter, corpus)
    heads = check_heads(adapter, heads, stack)
    skipped = {}
    kinds = list(KINDS)
    if adapter.arch == "encoder-decoder":
        kinds = ["zero", "zero_null"]
        skipped["uniform"] = "attention replacement supports encoder or decoder models, not encoder-decoder"
    reuse = (
        zero is not None
        and getattr(zero, "table", None) is not None
        and len(zero.table)
        and zero.table["metric"].iloc[0] == metric.name
        and zero.table["mode"].iloc[0] == "zero"
        and tuple(zero.heads) == tuple(heads)
        and zero.ablated.shape[1] == len(corpus)
    )
    if reuse:
        kinds.remove("zero")
    use_restart = restart and supports_restart(adapter, stack)
    path = (
        ("site-restart" if supports_site_restart(adapter, stack) else "layer-restart")
        if use_restart
        else "full forward"
    )
    by_layer: dict = {}
    for j, (layer, head) in enumerate(heads):
        by_layer.setdefault(layer, []).append((j, head))
    layers = {layer: [h for _, h in items] for layer, items in by_layer.items()}
    n = len(corpus)
    clean = np.zeros(n)
    scores = {k: np.zeros((len(heads), n)) for k in kinds}
    gen = torch.Generator().manual_seed(seed)
    for idx, batch in tqdm(
        metric.batches(adapter, corpus, batch_size),
        total=-(-n // batch_size),
        disable=not progress,
        desc="perturbations",
    ):
        c, by = _chunk(adapter, metric, batch, layers, stack, use_restart, max_tokens, kinds, gen)
        clean[idx] = c.double().cpu().numpy()
        for kind in kinds:
            for layer, items in by_layer.items():
                scores[kind][np.ix_([j for j, _ in items], idx)] = by[kind][layer].double().cpu().numpy()
    if reuse:
        scores["zero"] = np.asarray(zero.ablated, dtype=np.float64)
    return PerturbationSweep(
        heads=tuple(heads),
        metric=metric.name,
        higher_is_better=bool(metric.higher_is_better),
        clean=clean,
        scores=scores,
        path=path,
        skipped=skipped,
    )
