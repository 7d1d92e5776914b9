"""The trace's work inside transformers' attention function (the interface path,
:mod:`probe.tracing.attention_interface`): read and replace attention weights, edit
queries, keys, values and scores, edit the per-head output ``z``."""

from __future__ import annotations

from typing import Any, Optional, Protocol

import torch


from probe.errors import NotApplicable
from probe.tracing.attention_interface import AttentionSession, repeat_kv
from probe.tracing.edits import SiteContext

__all__ = ["TraceSession", "TraceWork"]


class TraceWork(Protocol):
    """What a session reads of the trace that opened it
    (:class:`probe.tracing.trace_context.Trace` is one; named here so that this module does
    not import the trace back): the work planned per attention module and layer, and how
    a site's value passes through its edits and readers."""

    _pattern: dict
    _qk: dict
    _z_interface: dict
    _pending: dict

    def now(self, plan: dict, module: torch.nn.Module) -> Any:
        """The work of ``plan`` for the layer whose call of ``module`` is running."""
        ...

    def _edited(self, x: torch.Tensor, work: dict) -> tuple:
        """``(value, changed)``: ``x`` through the work's edits, then handed to its readers."""
        ...


class TraceSession(AttentionSession):
    """The trace's work inside the attention function: read/replace weights, edit ``z``
    (the work of the layer whose call is running: :meth:`Trace.now`)."""

    def __init__(self, layer_of: dict, tr: TraceWork) -> None:
        super().__init__(layer_of)
        self.tr = tr

    def needs_weights(self, module: torch.nn.Module) -> bool:
        """Whether the running call of ``module`` reads or edits its weights (the attention function must compute them)."""
        return self.tr.now(self.tr._pattern, module) is not None

    def on_qkv(
        self, module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor
    ) -> Optional[tuple]:
        """Queries, keys ``[batch, heads, seq, d]`` and values ``[batch, kv_heads, seq, d]`` read or edited at the ``rot_q``/``rot_k`` (``q``/``k`` without rotary)/``v`` sites (viewed ``[batch, seq, head, d]``); None when nothing is planned."""
        work = self.tr.now(self.tr._qk, module)
        if not work or not any(kind in work for kind in ("q", "k", "rot_q", "rot_k", "v")):
            return None
        # the site is [batch, seq, head, d]: a transposed view the attention then reads from,
        # so that a gradient at the site is one of the forward's own tensors
        out = []
        for kind, x in (("q", query), ("k", key)):
            # hook_rot_q/k on a rotary model, hook_q/k on one without (never both: models.sites.site_side)
            w = work.get(f"rot_{kind}") or work.get(kind)
            if w is None:
                out.append(x)
                continue
            site = x.transpose(1, 2)
            site, _ = self.tr._edited(site, w)
            out.append(site.transpose(1, 2))
        w = work.get("v")
        if w is not None:  # fused projections: the values as the attention function receives them
            if w["edit"] and value.shape[1] != query.shape[1]:
                raise NotApplicable(
                    "edits of the values of a grouped-query model are not supported (its key/value heads "
                    "are shared by several query heads); edit hook_z instead"
                )
            site, _ = self.tr._edited(repeat_kv(value, query.shape[1]).transpose(1, 2), w)
            value = site.transpose(1, 2)
        return out[0], out[1], value

    def needs_scores(self, module: torch.nn.Module) -> bool:
        """Whether the running call of ``module`` reads or edits its pre-softmax scores."""
        work = self.tr.now(self.tr._qk, module)
        return bool(work) and "attn_scores" in work

    def on_scores(self, module: torch.nn.Module, scores: torch.Tensor) -> torch.Tensor:
        """The scores ``[batch, heads, q, k]`` through the ``attn_scores`` site's edits and readers."""
        work = self.tr.now(self.tr._qk, module)
        w = work.get("attn_scores") if work else None
        if w is None:
            return scores
        return self.tr._edited(scores, w)[0]

    def weights_out(
        self, module: torch.nn.Module, shape: tuple, dtype: torch.dtype, device: torch.device
    ) -> Optional[torch.Tensor]:
        """A tensor of ``shape`` ``[batch, heads, q, k]`` a reader asks the weights to be computed in, else None."""
        work = self.tr.now(self.tr._pattern, module)
        for reader, _ in work["read"] if work is not None else ():
            if reader.out is not None:
                return reader.out(shape, dtype, device)
        return None

    def on_weights(
        self, module: torch.nn.Module, weights: torch.Tensor, mask: Optional[torch.Tensor]
    ) -> Optional[torch.Tensor]:
        """The weights ``[batch, heads, q, k]`` edited at the ``pattern`` site (a copy; ``mask``: the additive mask they were computed with) and read; None when unchanged."""
        work = self.tr.now(self.tr._pattern, module)
        if work is None:
            return None
        new = None
        if work["edit"]:
            ctx = work["ctx"]
            ctx = SiteContext(ctx.name, ctx.kind, ctx.layer, ctx.stack, ctx.head_axis, mask)
            new = weights.clone()
            for e in work["edit"]:
                new = e(new, ctx)
        for reader, ctx in work["read"]:
            reader.fn(weights if new is None else new, ctx)
        return new

    def on_output(self, module: torch.nn.Module, output: torch.Tensor) -> Optional[torch.Tensor]:
        """The per-head output ``z`` ``[batch, seq, head, head_dim]`` through this layer's ``z`` edits (a copy); None when none is planned here."""
        work = self.tr.now(self.tr._z_interface, module)
        if work is None:
            return None
        edits, ctx = work
        self.tr._pending[module] = True
        z = output.clone()
        for e in edits:
            z = e(z, ctx)
        return z
