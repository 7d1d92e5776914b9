"""Interventions on attention heads at the per-head output site.

The site is each layer's per-head attention output before the output projection, ``[batch,
seq, head, head_dim]`` (TransformerLens's ``hook_z``). For models whose attention calls
transformers' attention interface, :class:`HeadIntervention` edits it there, inside the
toolkit's attention function (:mod:`probe.tracing.attention_interface`); for the others, a
forward-pre hook on the output projection edits the projection's input ``[batch, seq,
n_heads * head_dim]`` — the same values (transformers 5 removed ``head_mask``; Michel et al.
2019 gate heads at exactly this point).

* :class:`HeadIntervention` — the trace's edits (:mod:`probe.tracing.edits`: zero,
  mean-ablate, patch, scale, gate) on chosen layers' heads, on all batch rows or on chosen
  rows (so one forward can carry many different ablations).
* :func:`ablate_heads` — the common cases in one call.
* :class:`HeadOutputRecorder` — record head outputs (for patching and for means).
* :class:`HeadGates` — a :class:`HeadIntervention` multiplying every head by a
  (differentiable) gate ξ[layer, head].

All are views of :class:`probe.tracing.trace_context.Trace` on the ``z`` site (layer identity by call
where layers share a module: ALBERT).

Replacing a head's attention *weights* is :mod:`probe.interventions.reweighting`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Optional, Sequence, Union

import torch

from probe.errors import InputError
from probe.models.batching import ONE_LENGTH, one_length_batches

from probe.tracing.edits import Edit, Gate, Mean, Patch, SiteContext, Zero
from probe.models.sites import Site, after_last_layer
from probe.tracing.site_keys import Reader
from probe.tracing.trace_context import Trace, TraceView

if TYPE_CHECKING:
    from probe.models.adapter import ModelAdapter

#: the ablation modes of :func:`ablate_heads` and the edit each becomes
MODES = ("zero", "mean", "patch")


def _layer_of_edits(edits: Mapping[int, Union[Edit, Sequence[Edit]]]) -> dict[int, list[Edit]]:
    """``{layer: [edit, ...]}`` from a mapping whose values are one edit or a sequence."""
    return {int(layer): [es] if isinstance(es, Edit) else list(es) for layer, es in edits.items()}


class HeadIntervention(TraceView):
    """Context manager applying trace edits (:mod:`probe.tracing.edits`: :class:`Zero`,
    :class:`Mean`, :class:`Patch`, :class:`Scale`, :class:`Gate`, …) to the per-head outputs
    ``z`` ``[batch, seq, head, head_dim]`` of chosen layers on every forward inside it.

    Args:
        adapter: a :class:`models.ModelAdapter`.
        edits: ``{layer: edit or [edits]}``; an edit's ``head`` names the head it changes
            (None: every head, e.g. :class:`Gate`), its ``rows`` the batch rows.
        stack: ``encoder`` / ``decoder`` / ``cross`` (default: the main stack).
        path: ``auto`` (the attention interface where the model's attention modules call
            it, else hooks), ``interface`` or ``hooks``. On the interface path the edit
            is made to the per-head output the attention function returns; a forward-pre
            hook on the output projection stands by and makes it there only when that
            layer's attention function did not run (a restart that stubs the attention
            module, :mod:`probe.tracing.restart`), so each edit applies once.
            On the hook path it is made at the output projection's input.

    Raises:
        InputError: a head or layer out of range (naming the valid range), something that
            is not an edit; a value of the wrong shape (when run).
    """

    def __init__(
        self,
        adapter: ModelAdapter,
        edits: Mapping[int, Union[Edit, Sequence[Edit]]],
        stack: Optional[str] = None,
        path: str = "auto",
    ) -> None:
        from probe.tracing.attention_interface import choose_path

        self.adapter = adapter
        self.stack = stack or adapter.default_stack
        self.n_heads = adapter.n_heads
        by_layer = _layer_of_edits(edits)
        for layer, es in by_layer.items():
            for e in es:
                if not isinstance(e, Edit):
                    raise InputError(f"a head edit is an Edit (Zero(head=h), Patch(value, head=h), …), got {e!r}")
                adapter.check_head(layer, 0 if e.head is None else e.head, self.stack)
        self._by_layer = by_layer
        adapter.check_head_site(self.stack)
        self.path = choose_path(adapter, self.stack, path)

    def _trace(self) -> Trace:
        edit = {Site("z", layer, self.stack): es for layer, es in self._by_layer.items()}
        return Trace(self.adapter, edit=edit, path=self.path)


def ablate_heads(
    adapter: ModelAdapter,
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
    if mode not in MODES:
        raise InputError(f"unknown ablation mode {mode!r}; use one of {', '.join(MODES)}")
    edits: dict[int, list[Edit]] = {}
    for r, (layer, head) in enumerate(heads):
        rows = (r,) if per_row else None
        edit: Edit
        if mode == "mean":
            if means is None:
                raise InputError("mode 'mean' needs means (see head_output_means)")
            edit = Mean(value=means[layer][head], head=int(head), rows=rows)
        elif mode == "patch":
            if source is None:
                raise InputError("mode 'patch' needs the source run's head outputs (HeadOutputRecorder)")
            src = source[layer][:, :, head]
            value = src[r : r + 1] if per_row and src.shape[0] == len(heads) else src
            edit = Patch(value=value, head=int(head), rows=rows)
        else:
            edit = Zero(head=int(head), rows=rows)
        edits.setdefault(int(layer), []).append(edit)
    return HeadIntervention(adapter, edits, stack=stack)


class HeadOutputRecorder(TraceView):
    """Record each layer's head outputs ``[batch, seq, head, head_dim]`` (detached).

    ``recorder.outputs[layer]`` holds the last forward's outputs. With ``stop``, the forward
    ends after the last of ``layers`` (:class:`Trace`'s ``stop_before``: the layers after it,
    the final norm and the head, a language model's vocabulary projection, do not run, and
    the forward returns nothing) where the model's layers are modules of their own; one
    forward per entry then.
    """

    def __init__(
        self,
        adapter: ModelAdapter,
        layers: Optional[Sequence[int]] = None,
        stack: Optional[str] = None,
        stop: bool = False,
    ) -> None:
        self.adapter = adapter
        self.stack = stack or adapter.default_stack
        modules = adapter.head_output_modules(self.stack)
        self.layers = list(range(len(modules))) if layers is None else [int(x) for x in layers]
        for layer in self.layers:
            adapter.check_head(layer, 0, self.stack)
        self.outputs: dict[int, torch.Tensor] = {}
        end = after_last_layer(adapter, self.stack) if stop else None
        self.stop_before = min(end, max(self.layers) + 1) if end is not None and self.layers else end

    def _keep(self, layer: int) -> Reader:
        def fn(z: torch.Tensor, ctx: SiteContext) -> None:
            self.outputs[layer] = z.detach()

        return Reader(fn)

    def _trace(self) -> Trace:
        read = {Site("z", layer, self.stack): self._keep(layer) for layer in self.layers}
        return Trace(self.adapter, read=read, path="hooks", stack=self.stack, stop_before=self.stop_before)


class HeadGates(HeadIntervention):
    """Multiply head ``h`` of layer ``l`` by a gate ξ (Michel et al. 2019).

    ``gates`` is ``[n_layers, n_heads]`` (the same gates for every batch row) or
    ``[rows, n_layers, n_heads]`` (one set per batch row, e.g. per-example gradients
    from one backward). Make it ``requires_grad`` to get ``∂L/∂ξ`` for every head.
    The gates multiply the output projection's input (the ``z`` site on the hook path).

    Raises:
        ValueError: gates of another shape; per-row gates that do not cover the batch.
    """

    def __init__(self, adapter: ModelAdapter, gates: torch.Tensor, stack: Optional[str] = None) -> None:
        modules = adapter.head_output_modules(stack or adapter.default_stack)
        expected = (len(modules), adapter.n_heads)
        if tuple(gates.shape[-2:]) != expected or gates.dim() not in (2, 3):
            raise InputError(
                f"gates must have shape {expected} (layers, heads) or [rows, {expected[0]}, "
                f"{expected[1]}], got {tuple(gates.shape)}"
            )
        self.gates = gates
        # the intervention's trace, without its checks: a gate never leaves the hook path
        self.adapter, self.stack, self.n_heads, self.path = (
            adapter,
            stack or adapter.default_stack,
            adapter.n_heads,
            "hooks",
        )
        self._by_layer = {layer: [Gate(gates=gates, layer=layer)] for layer in range(len(modules))}


def _batches_of(adapter: ModelAdapter, texts: list, batch_size: int) -> list:
    """Indices of ``texts`` in corpus-order batches of ``batch_size``, split into groups of one
    token length where the model leaks padding (``adapter.batching``)."""
    batches = [list(range(s, min(s + batch_size, len(texts)))) for s in range(0, len(texts), batch_size)]
    if adapter.batching != ONE_LENGTH:
        return batches
    return list(one_length_batches(batches, [len(e) for e in adapter.encode_batch(texts)]))


def head_output_means(
    adapter: ModelAdapter,
    texts: Sequence[str],
    *,
    batch_size: int = 16,
    stack: Optional[str] = None,
    by_special: bool = False,
) -> torch.Tensor:
    """Mean head output over all (non-padding) token positions of ``texts``.

    Returns:
        ``[n_layers, n_heads, head_dim]``; with ``by_special``, a pair of such tensors
        stacked as ``[2, n_layers, n_heads, head_dim]`` (index 0: word tokens, 1: special
        tokens, every special token pooled). The toolkit's mean-ablation keeps each special
        token apart (``probe.analyses.necessity.position_kinds``): pooling [CLS] with [SEP]
        puts at one what a head writes at the other (issue 58).

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
        for idx in _batches_of(adapter, texts, batch_size):
            encs = [adapter.encode(texts[k]) for k in idx]
            inputs = adapter.batch(encs)
            if adapter.arch == "encoder-decoder":
                inputs.update(adapter.decoder_inputs([adapter.encode(texts[k], target=True) for k in idx]))
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
