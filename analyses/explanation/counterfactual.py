"""Counterfactual attention: permute one head's weights, measure the output change.

Jain & Wallace (2019), "Attention is not Explanation", Section 4.2: shuffle the attention
weights of each query row over its (non-padding) keys, keep everything else of the model,
and measure how much the output distribution moves; the median over permutations per
example. A head whose permutation changes nothing carries no decision-relevant
information in *how* its weights are spread.

How the permutation is applied. For every family in
:data:`models.architectures.ARCHITECTURES` the head's output before the output
projection is ``z_h = α_h V_h`` (``[seq, head_dim]``). A clean forward records ``α`` (the
attention module's probabilities) and ``V`` (the ``v`` site of :mod:`probe.models.sites`:
GQA heads repeated, GPT-2's fused projection's last third); the layer's input does not
depend on the edit, so ``z_h' = π(α_h) V_h`` is exact, and a second forward substitutes it
at the ``z`` site with a :class:`probe.tracing.edits.Patch` (:func:`probe.tracing.trace.trace`). Many
permutations and examples run as the rows of one batch.

Measures per (example, permutation), over the target's distribution ``p`` (class
softmax, the Bernoulli of a probe, the next-token softmax): total variation
``½‖p − p'‖₁``, Jensen–Shannon divergence (base 2, in [0, 1]), and ``|f(x') − f(x)|`` of
the target scalar.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Optional, Sequence, TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

    from probe.models.adapter import ModelAdapter

import torch

from probe.analyses.common.objective import Objective, check_scalar
from probe.errors import InputError, NotApplicable

log = logging.getLogger(__name__)

__all__ = ["PermutationEffects", "permutation_effects", "permute_rows", "head_output", "jsd", "tvd"]


def tvd(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Total variation ``½ Σ |p − q|`` over the last axis: ``[..., k]`` distributions to ``[...]``."""
    return 0.5 * (p - q).abs().sum(-1)


def jsd(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Jensen–Shannon divergence in bits (base 2) over the last axis, in [0, 1]."""
    m = 0.5 * (p + q)

    def kl(a, b):
        return torch.where(a > 0, a * (torch.log2(a.clamp_min(1e-30)) - torch.log2(b.clamp_min(1e-30))), 0.0).sum(-1)

    return (0.5 * kl(p, m) + 0.5 * kl(q, m)).clamp_min(0.0)


def permute_rows(
    alpha: torch.Tensor, lengths: Sequence[int], *, causal: bool, generator: torch.Generator, identity: bool = False
) -> torch.Tensor:
    """Shuffle each query row of ``alpha`` ``[batch, seq, seq]`` over its valid keys.

    Valid keys of row ``i`` in an example of ``n`` tokens: ``0..n−1`` (self-attention) or
    ``0..i`` (causal). Weights on padding stay 0. ``identity`` returns ``alpha`` unchanged
    (the control: it must leave the output unchanged).
    """
    if identity:
        return alpha.clone()
    B, S, _ = alpha.shape
    pos = torch.arange(S)
    limit = torch.tensor([int(n) for n in lengths])[:, None, None].expand(B, S, 1)
    if causal:
        limit = torch.minimum(limit, (pos + 1)[None, :, None])
    invalid = pos[None, None, :] >= limit  # [B, S, S]
    r = torch.rand(B, S, S, generator=generator)
    r = r.masked_fill(invalid, float("inf"))
    idx = r.argsort(-1).to(alpha.device)  # first m entries: a random permutation of 0..m−1
    return alpha.gather(-1, idx)


def head_output(alpha_h: torch.Tensor, v_h: torch.Tensor) -> torch.Tensor:
    """``z_h = α_h V_h``: ``[batch, seq, seq] × [batch, seq, head_dim] → [batch, seq, head_dim]``."""
    return alpha_h @ v_h


@dataclass(frozen=True)
class PermutationEffects:
    """Output change under permuted attention, per head.

    Attributes:
        per_example: ``example, layer, head, tvd, jsd, abs_delta`` (medians over the
            permutations of that example).
        summary: per ``layer, head``: ``n_examples, tvd_median, tvd_mean, jsd_median,
            abs_delta_median, share_unchanged`` (examples whose median TVD is below
            ``tolerance``).
        n_permutations, tolerance: settings.
    """

    per_example: pd.DataFrame
    summary: pd.DataFrame
    n_permutations: int
    tolerance: float

    def to_frame(self) -> pd.DataFrame:
        """The :attr:`summary`."""
        return self.summary

    def by_layer(self) -> pd.DataFrame:
        """Per layer: median over heads of the per-head median TVD / JSD."""
        return (
            self.summary.groupby("layer")
            .agg(
                tvd_median=("tvd_median", "median"), jsd_median=("jsd_median", "median"), tvd_max=("tvd_median", "max")
            )
            .reset_index()
        )


def _permutation_groups(adapter: ModelAdapter, lengths: Sequence[int], k: int, batch_rows: int) -> list:
    """``[(start, stop, kc)]`` over examples sorted by ``lengths`` (ascending): each forward
    carries examples ``start:stop`` × ``kc`` permutations, at most ``batch_rows`` rows and
    what the memory budget allows at the group's longest length (:func:`probe.inputs.budget.rows_for`,
    no gradients); ``kc < k`` only for a single example whose ``k`` rows do not fit. The
    groups are the cheapest split of the sorted examples (padded tokens plus
    :data:`probe.analyses.necessity.sweep.FORWARD_TOKENS` a forward, as the removal sweep's
    :func:`~probe.analyses.necessity.sweep.plan_forwards`): 16 explained sentences of 9 to 82
    tokens in groups of 12 padded half their tokens. A model whose padding leaks
    (``adapter.batching``) gets groups of one length."""
    from probe.analyses.necessity.sweep import FORWARD_TOKENS, cheapest_runs
    from probe.inputs.budget import rows_for
    from probe.models.batching import ONE_LENGTH

    per = max(1, batch_rows // k)
    fit = [rows_for(adapter, max(1, int(n)), cap=batch_rows, grad=False) for n in lengths]
    kc = [k if f >= k else max(1, f) for f in fit]

    def cost(start: int, stop: int) -> Optional[int]:  # examples start:stop, the longest the last
        size = stop - start
        leaks = adapter.batching == ONE_LENGTH and lengths[start] != lengths[stop - 1]
        if size > 1 and (size > per or size > fit[stop - 1] // k or leaks):
            return None  # a longer group only grows
        return size * k * max(1, int(lengths[stop - 1])) + -(-k // kc[stop - 1]) * FORWARD_TOKENS

    return [(start, stop, kc[stop - 1]) for start, stop in cheapest_runs(len(lengths), cost)]


def _permutations(alpha, lengths, examples, layer, head, k, causal, seed, identity) -> torch.Tensor:
    """``[B, k, S, S]``: ``k`` permutations of each example's rows of ``alpha`` ``[B, S, S]``
    (:func:`permute_rows`, over its ``lengths[b]`` tokens; rows of padding as they were),
    each example's drawn from its own generator (``seed``, its index ``examples[b]``, the
    head), so the draws do not depend on which examples share a forward."""
    import numpy as np

    B, S, _ = alpha.shape
    out = alpha[:, None].repeat(1, k, 1, 1)
    for b, (i, n) in enumerate(zip(examples, lengths)):
        state = np.random.SeedSequence([int(seed), int(i), int(layer), int(head)]).generate_state(1)[0]
        g = torch.Generator().manual_seed(int(state))
        a = alpha[b, :n, :n].expand(k, n, n)
        out[b, :, :n, :n] = permute_rows(a, [n] * k, causal=causal, generator=g, identity=identity)
    return out


def permutation_effects(
    adapter: ModelAdapter,
    objective: Objective,
    encodings: Sequence,
    *,
    heads: Optional[Sequence[tuple]] = None,
    n_permutations: int = 10,
    seed: int = 0,
    batch_rows: int = 64,
    tolerance: float = 1e-3,
    identity: bool = False,
    progress: bool = False,
    restart: bool = True,
) -> PermutationEffects:
    """Median output change when one head's attention is permuted (Jain & Wallace 2019).

    Args:
        adapter: an encoder or decoder :class:`models.ModelAdapter`.
        objective: what to measure (:mod:`probe.analyses.common.targets`).
        encodings: the examples (``adapter.encode(...)``).
        heads: ``(layer, head)`` pairs (default: every head).
        n_permutations: random permutations per example and head.
        seed: seeds the permutations.
        batch_rows: most rows (examples × permutations) per forward; fewer where the
            memory budget (:mod:`probe.inputs.budget`, no gradients) allows fewer rows at the
            group's length, down to one example whose permutations are split over
            several forwards, so a long input does not raise the peak.
        tolerance: median TVD below which an example counts as "unchanged".
        identity: use identity "permutations" (a control: every effect must be ~0).
        restart: start each permuted forward at the head's layer's output projection from
            the clean run's cached stream (:class:`probe.tracing.restart.RestartFrom`, where the
            family supports it): layers before it and the layer's own attention are not
            recomputed; the outputs are the full forward's (float rounding aside).

    Returns:
        :class:`PermutationEffects`.

    Raises:
        ValueError: no examples, a head out of range (naming the range), encoder-decoder
            models, ``n_permutations < 1``.
    """
    from contextlib import ExitStack

    import pandas as pd

    from probe.tracing.edits import Patch
    from probe.models.sites import supports_site_restart
    from probe.tracing.restart import RestartFrom
    from probe.tracing.trace_context import Trace

    encodings = list(encodings)
    if not encodings:
        raise InputError("no examples to permute attention on")
    if adapter.arch == "encoder-decoder":
        raise NotApplicable("permutation effects support encoder or decoder models, not encoder-decoder")
    if n_permutations < 1:
        raise InputError(f"n_permutations must be ≥ 1, got {n_permutations}")
    if batch_rows < 1:
        raise InputError(f"batch_rows must be ≥ 1, got {batch_rows}")
    L, H = adapter.n_layers, adapter.n_heads
    if heads is None:
        heads = [(l, h) for l in range(L) for h in range(H)]
    heads = [(int(l), int(h)) for l, h in heads]
    for l, h in heads:
        adapter.check_head(l, h)
    layers = sorted({l for l, _ in heads})
    causal = adapter.arch == "decoder"
    K = n_permutations
    order = sorted(range(len(encodings)), key=lambda i: len(encodings[i]))
    groups = _permutation_groups(adapter, [len(encodings[i]) for i in order], K, batch_rows)
    rows = []
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(encodings) * len(heads), unit="ex·head", desc="permutations")
    # the clean forward reads each layer's attention and values (GQA repeated, fused q|k|v split)
    read = [(kind, layer) for layer in layers for kind in ("pattern", "v")]
    site = restart and supports_site_restart(adapter, None)
    if site:  # and what a forward restarted at the layer's output projection starts from
        read += [(kind, layer) for layer in layers for kind in ("resid_pre", "proj_in")]
    try:
        for start, stop, kc in groups:
            idx = order[start:stop]
            encs = [encodings[i] for i in idx]
            inputs = adapter.batch(encs)
            ids, mask = inputs["input_ids"], inputs["attention_mask"]
            lengths = [len(e) for e in encs]
            B, S = ids.shape
            aux = objective.aux(adapter, ids, mask)
            with Trace(adapter, read=read) as clean, torch.no_grad():
                out = objective.gradient_output(adapter, ids, mask, aux)  # the positions read only
            with torch.no_grad():
                p0 = objective.distribution(out, mask, aux).float()
                f0 = check_scalar(objective.scalar(out, mask, aux), B, objective.describe()).float()
            rep = lambda t: t.repeat_interleave(kc, 0)  # noqa: E731, B023  row b*kc + k (this group's kc)
            ids_k, mask_k, aux_k = rep(ids), rep(mask), rep(aux)
            p0_k, f0_k = rep(p0), rep(f0)
            for l, h in heads:
                alpha = clean.cache["pattern", l][:, h].float()  # [B, S, S]
                v = clean.cache["v", l].float()  # [B, S, H, dh]
                parts: list = [[], [], []]  # tvd, jsd, |Δ| as [B, kc] per forward
                drawn = _permutations(alpha, lengths, idx, l, h, -(-K // kc) * kc, causal, seed, identity)
                for c in range(0, K, kc):  # kc < K only when one example's K rows exceed the budget
                    alpha_k = drawn[:, c : c + kc].reshape(-1, S, S)  # row b*kc + k, as rep
                    z = head_output(alpha_k, rep(v[:, :, h]))
                    with ExitStack() as st, torch.no_grad():
                        st.enter_context(Trace(adapter, edit={("z", l): Patch(z, head=h)}))
                        if site:
                            hidden, context = rep(clean.cache["resid_pre", l]), rep(clean.cache["proj_in", l])
                            st.enter_context(RestartFrom(adapter, l, hidden, context=context))
                        out_k = objective.gradient_output(adapter, ids_k, mask_k, aux_k)
                        p1 = objective.distribution(out_k, mask_k, aux_k).float()
                        f1 = objective.scalar(out_k, mask_k, aux_k).float()
                    del out_k
                    for part, d in zip(parts, (tvd(p0_k, p1), jsd(p0_k, p1), (f1 - f0_k).abs())):
                        part.append(d.reshape(B, kc))
                d_tvd, d_jsd, d_abs = (torch.cat(part, 1)[:, :K].median(1).values for part in parts)
                for r, i in enumerate(idx):
                    rows.append((i, l, h, float(d_tvd[r]), float(d_jsd[r]), float(d_abs[r])))
                if bar is not None:
                    bar.update(B)
    finally:
        if bar is not None:
            bar.close()
    per = pd.DataFrame(rows, columns=["example", "layer", "head", "tvd", "jsd", "abs_delta"])
    per = per.sort_values(["layer", "head", "example"]).reset_index(drop=True)
    per["_unchanged"] = per["tvd"] < tolerance
    summary = (
        per.groupby(["layer", "head"])
        .agg(
            n_examples=("tvd", "size"),
            tvd_median=("tvd", "median"),
            tvd_mean=("tvd", "mean"),
            jsd_median=("jsd", "median"),
            abs_delta_median=("abs_delta", "median"),
            share_unchanged=("_unchanged", "mean"),
        )
        .reset_index()
    )
    per = per.drop(columns=["_unchanged"])
    return PermutationEffects(per_example=per, summary=summary, n_permutations=K, tolerance=tolerance)
