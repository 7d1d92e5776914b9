"""Interventions on attention heads at the per-head output site.

The site is each layer's per-head attention output before the output projection, ``[batch,
seq, head, head_dim]`` (TransformerLens's ``hook_z``). For models whose attention calls
transformers' attention interface, :class:`HeadIntervention` edits it there, inside the
toolkit's attention function (:mod:`probe.tracing.attention_interface`); for the others, a
forward-pre hook on the output projection edits the projection's input ``[batch, seq,
n_heads * head_dim]`` — the same values (transformers 5 removed ``head_mask``; Michel et al.
2019 gate heads at exactly this point).

* :class:`HeadIntervention` — zero, mean-ablate, patch or scale chosen heads, on all
  batch rows or on chosen rows (so one forward can carry many different ablations).
* :func:`ablate_heads` — the common cases in one call.
* :class:`HeadOutputRecorder` — record head outputs (for patching and for means).
* :class:`HeadGates` — multiply every head by a (differentiable) gate ξ[layer, head].

All are views of :class:`probe.tracing.trace.Trace` on the ``z`` site (layer identity by call
where layers share a module: ALBERT).

Replacing a head's attention *weights* is :mod:`probe.interventions.reweighting`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from probe.errors import InputError

from probe.tracing.edits import Edit, Gate, SiteContext
from probe.models.sites import Site
from probe.tracing.trace import Reader, Trace, TraceView

MODES = ("zero", "mean", "patch", "scale")


@dataclass(frozen=True)
class HeadEdit:
    """One change to one head's output.

    Attributes:
        layer, head: which head (model indices).
        mode: ``zero`` | ``mean`` | ``patch`` | ``scale``.
        value: ``mean``: ``[head_dim]`` or ``[seq, head_dim]``; ``patch``: the head's
            output from another run, ``[batch, seq, head_dim]`` (or ``[seq, head_dim]``).
        rows: batch rows the edit applies to (``None``: all rows).
        scale: the factor for ``scale`` mode.
    """

    layer: int
    head: int
    mode: str = "zero"
    value: Optional[torch.Tensor] = None
    rows: Optional[tuple] = None
    scale: float = 0.0


def apply_edits(z: torch.Tensor, edits: Sequence[HeadEdit], layer: int) -> torch.Tensor:
    """Apply ``edits`` to per-head outputs ``z`` ``[batch, seq, head, head_dim]`` in place
    (``z`` must be a copy the caller owns) and return it.

    Raises:
        ValueError: a mean value shorter than the input, a patch of another length.
    """
    b, s = z.shape[:2]
    for e in edits:
        rows = slice(None) if e.rows is None else list(e.rows)
        if e.mode == "zero":
            z[rows, :, e.head] = 0
        elif e.mode == "scale":
            z[rows, :, e.head] = z[rows, :, e.head] * e.scale
        elif e.mode == "mean":
            v = e.value.to(z.dtype).to(z.device)  # type: ignore[union-attr]  # HeadEdit checks on construction that mean/patch carry a value
            if v.dim() == 2:
                if v.shape[0] < s:
                    raise InputError(f"mean value covers {v.shape[0]} positions, input has {s}")
                v = v[:s]
            z[rows, :, e.head] = v
        else:  # patch
            v = e.value.to(z.dtype).to(z.device)  # type: ignore[union-attr]  # HeadEdit checks on construction that mean/patch carry a value
            if v.dim() == 2:
                v = v.unsqueeze(0)
            if v.shape[-2] != s:
                raise InputError(
                    f"patch for head ({layer}, {e.head}) has {v.shape[-2]} positions but the "
                    f"input has {s}: clean and corrupted inputs must have the same length"
                )
            if e.rows is not None and v.shape[0] == len(e.rows):
                z[rows, :, e.head] = v
            else:
                z[rows, :, e.head] = v[rows] if v.shape[0] == b else v
    return z


@dataclass(frozen=True)
class LayerEdits(Edit):
    """The :class:`HeadEdit` s of one layer as one edit of its ``z`` site (:func:`apply_edits`)."""

    edits: tuple = ()
    layer: int = 0

    def __call__(self, x: torch.Tensor, ctx: SiteContext) -> torch.Tensor:
        return apply_edits(x, self.edits, self.layer)


class HeadIntervention(TraceView):
    """Context manager applying :class:`HeadEdit` s on every forward inside it.

    Args:
        adapter: a :class:`models.ModelAdapter`.
        edits: the head edits.
        stack: ``encoder`` / ``decoder`` / ``cross`` (default: the main stack).
        path: ``auto`` (the attention interface where the model's attention modules call
            it, else hooks), ``interface`` or ``hooks``. On the interface path the edit
            is made to the per-head output the attention function returns; a forward-pre
            hook on the output projection stands by and makes it there only when that
            layer's attention function did not run (a restart that stubs the attention
            module, :mod:`probe.analyses.necessity.restart`), so each edit applies once.
            On the hook path it is made at the output projection's input.

    Raises:
        ValueError: a head out of range (naming the valid range), an unknown mode, a
            missing value for ``mean``/``patch``, a value of the wrong shape.
    """

    def __init__(self, adapter, edits: Sequence[HeadEdit], stack: Optional[str] = None, path: str = "auto"):
        from probe.tracing.attention_interface import choose_path

        self.adapter = adapter
        self.stack = stack or adapter.default_stack
        self.n_heads = adapter.n_heads
        by_layer: dict[int, list] = {}
        for e in edits:
            adapter.check_head(e.layer, e.head, self.stack)
            if e.mode not in MODES:
                raise InputError(f"unknown ablation mode {e.mode!r}; use one of {', '.join(MODES)}")
            if e.mode in ("mean", "patch") and e.value is None:
                raise InputError(f"mode {e.mode!r} needs a value for head ({e.layer}, {e.head})")
            by_layer.setdefault(int(e.layer), []).append(e)
        self._by_layer = by_layer
        adapter.check_head_site(self.stack)
        self.path = choose_path(adapter, self.stack, path)

    def _trace(self) -> Trace:
        edit = {Site("z", layer, self.stack): LayerEdits(tuple(es), layer) for layer, es in self._by_layer.items()}
        return Trace(self.adapter, edit=edit, path=self.path)


def ablate_heads(
    adapter,
    heads: Sequence[tuple],
    mode: str = "zero",
    *,
    means: Optional[torch.Tensor] = None,
    source: Optional[dict] = None,
    per_row: bool = False,
    stack: Optional[str] = None,
) -> HeadIntervention:
    """Ablate ``heads`` (a list of ``(layer, head)``) on every forward inside the block.

    Args:
        mode: ``zero``; ``mean`` (``means[layer, head]`` is ``[head_dim]`` or
            ``[seq, head_dim]``, e.g. from :func:`head_output_means`); or ``patch``
            (``source[layer]`` is ``[batch, seq, head, head_dim]`` from a
            :class:`HeadOutputRecorder` run on other inputs).
        per_row: batch row ``r`` ablates ``heads[r]`` only (one forward, many
            ablations); the batch must have ``len(heads)`` rows.

    Example::

        with ablate_heads(adapter, [(3, 5)], mode="zero"):
            out = adapter.model(**batch)
    """
    edits = []
    for r, (layer, head) in enumerate(heads):
        rows = (r,) if per_row else None
        value = None
        if mode == "mean":
            if means is None:
                raise InputError("mode 'mean' needs means (see head_output_means)")
            value = means[layer][head]
        elif mode == "patch":
            if source is None:
                raise InputError("mode 'patch' needs the source run's head outputs (HeadOutputRecorder)")
            src = source[layer][:, :, head]
            value = src[r : r + 1] if per_row and src.shape[0] == len(heads) else src
        edits.append(HeadEdit(layer=int(layer), head=int(head), mode=mode, value=value, rows=rows))
    return HeadIntervention(adapter, edits, stack=stack)


class HeadOutputRecorder(TraceView):
    """Record each layer's head outputs ``[batch, seq, head, head_dim]`` (detached).

    ``recorder.outputs[layer]`` holds the last forward's outputs.
    """

    def __init__(self, adapter, layers: Optional[Sequence[int]] = None, stack: Optional[str] = None):
        self.adapter = adapter
        self.stack = stack or adapter.default_stack
        modules = adapter.head_output_modules(self.stack)
        self.layers = list(range(len(modules))) if layers is None else [int(x) for x in layers]
        for layer in self.layers:
            adapter.check_head(layer, 0, self.stack)
        self.outputs: dict[int, torch.Tensor] = {}

    def _keep(self, layer: int) -> Reader:
        def fn(z, ctx):
            self.outputs[layer] = z.detach()

        return Reader(fn)

    def _trace(self) -> Trace:
        read = {Site("z", layer, self.stack): self._keep(layer) for layer in self.layers}
        return Trace(self.adapter, read=read, path="hooks")


@dataclass(frozen=True)
class LayerGate(Edit):
    """Layer ``layer``'s gates of ``gates`` ``[n_layers, n_heads]`` or ``[rows, n_layers,
    n_heads]`` as a :class:`probe.tracing.edits.Gate` (sliced at each call, so a backward through
    each forward reaches ``gates``)."""

    gates: Optional[torch.Tensor] = None
    layer: int = 0
    in_place = False

    def __call__(self, x: torch.Tensor, ctx: SiteContext) -> torch.Tensor:
        assert self.gates is not None
        return Gate(gates=self.gates[..., self.layer, :])(x, ctx)


class HeadGates(TraceView):
    """Multiply head ``h`` of layer ``l`` by a gate ξ (Michel et al. 2019).

    ``gates`` is ``[n_layers, n_heads]`` (the same gates for every batch row) or
    ``[rows, n_layers, n_heads]`` (one set per batch row, e.g. per-example gradients
    from one backward). Make it ``requires_grad`` to get ``∂L/∂ξ`` for every head.
    The gates multiply the output projection's input (the ``z`` site on the hook path).

    Raises:
        ValueError: gates of another shape; per-row gates that do not cover the batch.
    """

    def __init__(self, adapter, gates: torch.Tensor, stack: Optional[str] = None):
        self.adapter = adapter
        self.stack = stack or adapter.default_stack
        modules = adapter.head_output_modules(self.stack)
        expected = (len(modules), adapter.n_heads)
        if tuple(gates.shape[-2:]) != expected or gates.dim() not in (2, 3):
            raise InputError(
                f"gates must have shape {expected} (layers, heads) or [rows, {expected[0]}, "
                f"{expected[1]}], got {tuple(gates.shape)}"
            )
        self.gates = gates
        self.n_layers = len(modules)

    def _trace(self) -> Trace:
        edit = {Site("z", layer, self.stack): LayerGate(self.gates, layer) for layer in range(self.n_layers)}
        return Trace(self.adapter, edit=edit, path="hooks")


def head_output_means(
    adapter, texts: Sequence[str], *, batch_size: int = 16, stack: Optional[str] = None, by_special: bool = False
) -> torch.Tensor:
    """Mean head output over all (non-padding) token positions of ``texts``.

    Returns:
        ``[n_layers, n_heads, head_dim]``; with ``by_special``, a pair of such tensors
        stacked as ``[2, n_layers, n_heads, head_dim]`` (index 0: word tokens, 1: special
        tokens), the "per position kind" mean used for mean-ablation.

    Raises:
        ValueError: on an empty corpus.
    """
    texts = list(texts)
    if not texts:
        raise InputError("mean-ablation needs at least one example to average over")
    stack = stack or adapter.default_stack
    n_layers = len(adapter.head_output_modules(stack))
    sums = torch.zeros(2, n_layers, adapter.n_heads, adapter.head_dim, dtype=torch.float64)
    counts = torch.zeros(2, dtype=torch.float64)
    with HeadOutputRecorder(adapter, stack=stack) as rec:
        for start in range(0, len(texts), batch_size):
            encs = [adapter.encode(t) for t in texts[start : start + batch_size]]
            inputs = adapter.batch(encs)
            if adapter.arch == "encoder-decoder":
                inputs.update(
                    adapter.decoder_inputs([adapter.encode(t, target=True) for t in texts[start : start + batch_size]])
                )
            with torch.no_grad():
                adapter.model(**inputs)
            for i, e in enumerate(encs):
                n = len(e)
                kinds = e.special_mask.long()
                for layer in range(n_layers):
                    z = rec.outputs[layer][i, :n].double().cpu()  # [seq, head, dh]
                    for k in (0, 1):
                        sel = kinds == k
                        if sel.any():
                            sums[k, layer] += z[sel].sum(0)
                for k in (0, 1):
                    counts[k] += float((kinds == k).sum())
    means = sums / counts.clamp(min=1)[:, None, None, None]
    if by_special:
        return means.float()
    total = (sums[0] + sums[1]) / counts.sum().clamp(min=1)
    return total.float()
