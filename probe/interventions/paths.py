"""Sites for path patching and edge attribution between attention heads.

Three sites, all views of :class:`probe.tracing.trace_context.Trace` (its ``z`` site and
:class:`probe.tracing.site_keys.ModuleSite` s: a projection's output, a norm's input; removed on exit):

* the **receiver inputs**: the outputs of each layer's query, key and value projections,
  split per head ``[batch, seq, slots, head_dim]`` (:class:`ProjectionHooks`). A *slot*
  is a query head for ``q`` and a key/value head for ``k``/``v``; under grouped-query
  attention (Ainslie et al. 2023) query head ``h`` reads key/value slot
  ``h // (n_heads // n_kv_heads)`` (:func:`kv_slot`). Rotary embeddings are applied after
  these projections, so a value recorded in one run and written in another with the same
  positions is the same input. GPT-2's fused ``c_attn`` is split in thirds.
* the **sender outputs**: the per-head output before the output projection
  ``[batch, seq, heads, head_dim]`` (TransformerLens's ``hook_z``), read or replaced by a
  function per layer (:class:`HeadOutputOverride`).
* the **residual stream** of pre-LayerNorm decoders (GPT-2, Llama): the input of each
  block's attention norm and of the final norm, where :class:`EdgeMixer` gives every
  receiver its own input in which senders outside a circuit contribute their corrupted
  output (Wang et al. 2022; Conmy et al. 2023, ACDC). LayerNorm is recomputed on each
  receiver's own input: nothing is linearised.

Layers are **head sites**, :func:`head_sites`: the attention sublayers in the order a
forward runs them. For encoders and decoders that is layer ``l`` of the one stack; for an
encoder-decoder (BART, T5) the encoder's layers come first, then each decoder block's
self-attention and cross-attention (site ``L_enc + 2l`` and ``L_enc + 2l + 1``). The hooks
below take site indices unless a ``stack`` is named (then layers of that stack).

Used by :mod:`probe.analyses.circuits`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import torch

from probe.errors import NotApplicable

from probe.tracing.edits import Apply, Edit, SiteContext
from probe.models.sites import Site
from probe.tracing.site_keys import ModuleSite, Reader
from probe.tracing.trace_context import Trace, TraceView

if TYPE_CHECKING:
    from probe.models.adapter import ModelAdapter

CHANNELS = ("q", "k", "v")
_NAMES = {
    "q": ("q_proj", "query", "q_lin", "q"),
    "k": ("k_proj", "key", "k_lin", "k"),
    "v": ("v_proj", "value", "v_lin", "v"),
}
_FUSED = ("c_attn", "qkv_proj", "Wqkv", "query_key_value")


@dataclass(frozen=True)
class ProjectionSite:
    """Where one channel of one layer lives: ``module``'s output columns
    ``offset .. offset + slots * head_dim`` hold ``slots`` heads of ``head_dim``."""

    module: torch.nn.Module
    offset: int
    slots: int
    head_dim: int


def n_kv_heads(adapter: ModelAdapter) -> int:
    """Key/value heads per layer (``num_key_value_heads``; the query heads without GQA)."""
    n = getattr(adapter.config, "num_key_value_heads", None)
    return int(n) if n else adapter.n_heads


def kv_slot(adapter: ModelAdapter, head: int) -> int:
    """The key/value slot query head ``head`` reads (its own group under GQA)."""
    return int(head) // (adapter.n_heads // n_kv_heads(adapter))


#: the one-letter tag of a stack in edge names (``e0.1->x1.2.k``)
STACK_TAGS = {"encoder": "e", "decoder": "d", "cross": "x"}


def head_sites(adapter: ModelAdapter) -> list:
    """``[(stack, layer)]`` of every attention sublayer in forward order (``stack`` None for a
    one-stack model; an encoder-decoder: encoder layers, then decoder self/cross per block).

    Raises:
        ValueError: an encoder-decoder whose stacks have different head counts or head sizes.
    """
    if adapter.arch != "encoder-decoder":
        return [(None, layer) for layer in range(adapter.n_layers)]
    widths = {s: adapter.head_output_modules(s)[0].weight.shape[-1] for s in ("encoder", "decoder", "cross")}
    if len(set(widths.values())) > 1:
        raise NotApplicable(
            f"{adapter.name}: its encoder, decoder and cross-attention heads differ in width {widths}; "
            "the head graph needs one head count and size"
        )
    sites = [("encoder", layer) for layer in range(adapter.n_layers_of("encoder"))]
    for layer in range(adapter.n_layers_of("decoder")):
        sites += [("decoder", layer), ("cross", layer)]
    return sites


def site_name(adapter: ModelAdapter, site: int) -> str:
    """``"3"`` for layer 3 of a one-stack model; ``"e0"``/``"d1"``/``"x1"`` for an encoder-decoder."""
    stack, layer = head_sites(adapter)[site]
    return str(layer) if stack is None else f"{STACK_TAGS[stack]}{layer}"


def _site(adapter: ModelAdapter, layer: int, stack: str | None) -> tuple:
    """``(stack, layer in stack)`` of site ``layer`` (or of ``stack``'s layer ``layer``)."""
    return (stack, layer) if stack is not None else head_sites(adapter)[layer]


def projection_sites(adapter: ModelAdapter, layer: int, stack: str | None = None) -> dict:
    """``{channel: ProjectionSite}`` of layer ``layer``.

    Raises:
        ValueError: an attention module without recognisable q/k/v projections (naming it).
    """
    stack, layer = _site(adapter, layer, stack)
    att = adapter.attention_modules(stack)[layer]
    dh, n_q, n_kv = adapter.head_dim, adapter.n_heads, n_kv_heads(adapter)
    slots = {"q": n_q, "k": n_kv, "v": n_kv}
    out = {}
    for c in CHANNELS:
        for name in _NAMES[c]:
            sub = getattr(att, name, None)
            if isinstance(sub, torch.nn.Module):
                out[c] = ProjectionSite(sub, 0, slots[c], dh)
                break
    if len(out) == 3:
        return out
    for name in _FUSED:
        sub = getattr(att, name, None)
        if isinstance(sub, torch.nn.Module) and name == "c_attn":
            width = n_q * dh
            return {c: ProjectionSite(sub, i * width, slots[c], dh) for i, c in enumerate(CHANNELS)}
    raise NotApplicable(
        f"{adapter.name}: cannot find separate query/key/value projections in layer {layer} "
        f"({type(att).__name__}); path patching needs them"
    )


def _slot_view(out: torch.Tensor, site: ProjectionSite) -> torch.Tensor:
    """``out[..., offset:offset + slots*dh]`` as ``[batch, seq, slots, dh]`` (a view)."""
    part = out[..., site.offset : site.offset + site.slots * site.head_dim]
    return part.reshape(*out.shape[:-1], site.slots, site.head_dim)


#: one write into a projection output: ``(rows, slot, value [len(rows), seq, dh])``
Patch = tuple


class ProjectionHooks(TraceView):
    """Record and/or overwrite per-head q/k/v projection outputs of chosen layers.

    Args:
        adapter: a :class:`probe.models.ModelAdapter`.
        layers: the layers to hook.
        record: keep ``outputs[(layer, channel)]`` ``[batch, seq, slots, dh]`` (detached
            unless ``keep_graph``).
        patches: ``{(layer, channel): [(rows, slot, value), ...]}``: on every forward,
            rows ``rows`` (a long tensor) of slot ``slot`` take ``value`` ``[rows, seq, dh]``.
        replace: ``{(layer, channel): fn(out [batch, seq, slots, dh]) -> same shape}``.
        keep_graph: record the outputs inside the autograd graph (for gradients).
    """

    def __init__(
        self,
        adapter: ModelAdapter,
        layers: Sequence[int],
        *,
        record: bool = False,
        patches: dict | None = None,
        replace: dict | None = None,
        keep_graph: bool = False,
        stack: str | None = None,
    ) -> None:
        self.adapter, self.stack = adapter, stack
        self.layers = [int(x) for x in layers]
        self.record, self.keep_graph = record, keep_graph
        self.patches = patches or {}
        self.replace = replace or {}
        self.outputs: dict = {}

    def _trace(self) -> Trace:
        by_module: dict = {}
        for layer in self.layers:
            for c, site in projection_sites(self.adapter, layer, self.stack).items():
                by_module.setdefault(id(site.module), (site.module, []))[1].append((layer, c, site))
        read, edit = {}, {}
        for module, items in by_module.values():
            key = ModuleSite(module, "output", f"projection {type(module).__name__}")
            changed = self.keep_graph or any(
                (layer, c) in self.patches or (layer, c) in self.replace for layer, c, _ in items
            )
            if changed:  # the trace hands the edit a copy of the output
                edit[key] = Apply(self._edit(items))
            elif self.record:
                read[key] = Reader(self._keep(items))
        return Trace(self.adapter, read=read, edit=edit, path="hooks")

    def _keep(self, items: list) -> Callable:
        def fn(out: torch.Tensor, ctx: SiteContext) -> None:
            for layer, c, site in items:
                self.outputs[(layer, c)] = _slot_view(out, site).detach().clone()

        return fn

    def _edit(self, items: list) -> Callable:
        def fn(out: torch.Tensor, ctx: SiteContext) -> torch.Tensor:
            for layer, c, site in items:
                view = _slot_view(out, site)
                if (layer, c) in self.replace:
                    view[...] = self.replace[(layer, c)](view.clone())
                for rows, slot, value in self.patches.get((layer, c), ()):
                    view[rows, :, slot] = value.to(view.dtype)
                if self.record and self.keep_graph:
                    # a tensor of the graph the rest of the forward reads (so gradients reach it)
                    mine = view.clone()
                    view[...] = mine
                    self.outputs[(layer, c)] = mine
                elif self.record:
                    self.outputs[(layer, c)] = view.detach().clone()
            return out

        return fn


@dataclass(frozen=True)
class _LayerFn(Edit):
    """``fn(layer, z) -> z'`` (or None: unchanged) as an edit of one layer's ``z`` site,
    given the value itself (no copy)."""

    fn: Callable | None = None
    layer: int = 0
    in_place = False

    def __call__(self, z: torch.Tensor, ctx: SiteContext) -> torch.Tensor:
        assert self.fn is not None
        out = self.fn(self.layer, z)
        return z if out is None else out


class HeadOutputOverride(TraceView):
    """Read or replace the per-head outputs ``z`` ``[batch, seq, heads, dh]`` of chosen
    layers (head sites, :func:`head_sites`; default all) at the output projection's input:
    ``fn(layer, z) -> z'`` (or None: unchanged)."""

    def __init__(
        self, adapter: ModelAdapter, fn: Callable, layers: Sequence[int] | None = None, stack: str | None = None
    ) -> None:
        self.adapter, self.fn, self.stack = adapter, fn, stack
        n = len(adapter.head_output_modules(stack)) if stack is not None else len(head_sites(adapter))
        self.layers = list(range(n)) if layers is None else [int(x) for x in layers]

    def edits(self) -> dict:
        """The trace edits of this override: ``{z site: edit}``."""
        out = {}
        for layer in self.layers:
            st, i = _site(self.adapter, layer, self.stack)
            out[Site("z", i, st)] = _LayerFn(self.fn, layer)
        return out

    def _trace(self) -> Trace:
        return Trace(self.adapter, edit=self.edits(), path="hooks")


def head_writes(adapter: ModelAdapter, layer: int, z: torch.Tensor, stack: str | None = None) -> torch.Tensor:
    """What each head writes into the residual stream: ``z`` ``[batch, seq, heads, dh]``
    through its columns of the output projection (no bias) -> ``[batch, seq, heads, d_model]``."""
    proj = adapter.head_output_modules(stack)[layer]
    w = proj.weight
    n, dh = adapter.n_heads, z.shape[-1]
    # Conv1D (GPT-2) stores [in, out]; Linear stores [out, in]
    w_in_out = w if type(proj).__name__ == "Conv1D" else w.t()
    return torch.einsum("bshd,hdm->bshm", z, w_in_out.reshape(n, dh, -1).to(z.dtype))


# ---- the residual stream of pre-LayerNorm decoders ----------------------------------------
#: family -> (block pattern, attention-norm attribute, final-norm pattern)
RESIDUAL_SITES = {
    "gpt2": (r"h\.(\d+)$", "ln_1", r"(^|\.)ln_f$"),
    "llama": (r"layers\.(\d+)$", "input_layernorm", r"(^|\.)model\.norm$|^norm$"),
}


def additive_residual(adapter: ModelAdapter) -> bool:
    """True for pre-LayerNorm decoders whose residual stream is a sum of head writes
    (the families of :data:`RESIDUAL_SITES`); post-LN encoders (BERT) renormalise it."""
    return adapter.family in RESIDUAL_SITES


def residual_sites(adapter: ModelAdapter) -> tuple:
    """``(attention norms per layer, final norm)`` of a pre-LN decoder.

    Raises:
        ValueError: a model whose residual stream is not additive (post-LayerNorm).
    """
    if not additive_residual(adapter):
        raise NotApplicable(
            f"{adapter.name} ({adapter.family}) is not a pre-LayerNorm decoder: its residual stream "
            "is renormalised after every sublayer, so a circuit's edges cannot be mixed "
            "additively; edge scores and exact path patching still apply"
        )
    block_re, norm_attr, final_re = RESIDUAL_SITES[adapter.family]
    blocks, final = {}, None
    for name, m in adapter.model.named_modules():
        hit = re.search(block_re, name)
        if hit and hasattr(m, norm_attr):
            blocks[int(hit.group(1))] = getattr(m, norm_attr)
        if re.search(final_re, name):
            final = m
    if final is None or not blocks:
        raise NotApplicable(f"{adapter.name}: cannot find its attention norms and final norm")
    return [blocks[i] for i in sorted(blocks)], final


class EdgeMixer(TraceView):
    """Run a circuit: every receiver reads its own residual stream, in which each sender
    whose edge to it is *not* kept writes its corrupted output instead of its actual one
    (Wang et al. 2022; Conmy et al. 2023). Pre-LayerNorm decoders only.

    For receiver slot ``r`` of channel ``c`` at layer ``l`` the projection input is
    ``norm(x_l − Σ_s drop[s] · W_O^s (z_s − z_s^corr))`` (``x_l`` the actual residual
    stream, ``z_s`` the sender's actual output in this run, LayerNorm recomputed on that
    input); the final norm reads the same mix with the output edges. MLPs and embeddings
    read the actual residual stream (they are not nodes of this graph).

    Args:
        corrupted_z: ``{layer: [batch, seq, heads, dh]}`` per-head outputs of the corrupted run.
        drop: ``{(layer, channel): bool [slots, n_senders]}`` (``True``: that sender's edge
            is cut) and ``{"out": bool [n_senders]}``; senders are numbered
            ``layer * n_heads + head`` over the layers before the receiver.
    """

    def __init__(self, adapter: ModelAdapter, corrupted_z: dict, drop: dict) -> None:
        self.adapter, self.corrupted_z, self.drop = adapter, corrupted_z, drop
        self.norms, self.final = residual_sites(adapter)
        self._writes: dict = {}
        self._resid: dict = {}

    def _delta(self, n_layers: int) -> torch.Tensor | None:
        """``[n_senders, batch, seq, d_model]``: what switching each sender of the first
        ``n_layers`` layers to its corrupted output changes (actual − corrupted write)."""
        if n_layers == 0:
            return None
        return torch.cat([self._writes[i] for i in range(n_layers)], dim=0)

    def _trace(self) -> Trace:
        adapter = self.adapter

        def on_z(layer: int, z: torch.Tensor) -> None:
            d = head_writes(adapter, layer, z - self.corrupted_z[layer].to(z.dtype))
            self._writes[layer] = d.permute(2, 0, 1, 3)  # [heads, b, s, m]

        edit: dict = HeadOutputOverride(adapter, on_z).edits()
        read: dict = {}
        for layer, norm in enumerate(self.norms):

            def keep(x: torch.Tensor, ctx: SiteContext, layer: int = layer) -> None:
                self._resid[layer] = x

            read[ModuleSite(norm, "input", f"attention norm {layer}")] = Reader(keep)
        for layer in range(len(self.norms)):
            sites = projection_sites(adapter, layer)
            for c, site in sites.items():
                mix = self._mix_edit(layer, c, site, sites)
                if mix is not None:
                    edit[ModuleSite(site.module, "output", f"projection {layer}.{c}")] = Apply(mix, in_place=False)

        def final_pre(x: torch.Tensor, ctx: SiteContext) -> Optional[torch.Tensor]:
            delta = self._delta(len(self.norms))
            mask = self.drop.get("out")
            if delta is None or mask is None or not bool(mask.any()):
                return None
            w = mask.to(delta.dtype).to(delta.device)
            return x - torch.einsum("n,nbsm->bsm", w, delta)

        edit[ModuleSite(self.final, "input", "final norm")] = Apply(final_pre, in_place=False)
        return Trace(adapter, read=read, edit=edit, path="hooks")

    def _mix_edit(self, layer: int, c: str, site: ProjectionSite, sites: dict) -> Callable | None:
        # a fused projection (GPT-2) carries q, k and v: one edit makes the three channels
        mine = [(cc, s) for cc, s in sites.items() if s.module is site.module]
        if mine[0][0] != c:
            return None

        def fn(out: torch.Tensor, ctx: SiteContext) -> Optional[torch.Tensor]:
            delta = self._delta(layer)
            if delta is None:
                return None
            out = out.clone()
            resid = self._resid[layer]
            for cc, s in mine:
                mask = self.drop.get((layer, cc))
                if mask is None or not bool(mask.any()):
                    continue
                w = mask.to(delta.dtype).to(delta.device)  # [slots, n_senders]
                x = resid.unsqueeze(0) - torch.einsum("rn,nbsm->rbsm", w, delta)  # [slots, b, s, m]
                y = _forward_unhooked(site.module, self.norms[layer], x)
                view = _slot_view(out, s)
                for r in range(s.slots):
                    if bool(mask[r].any()):
                        view[:, :, r] = _slot_view(y[r], s)[:, :, r]
            return out

        return fn


def _forward_unhooked(projection: torch.nn.Module, norm: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``projection(norm(x))`` through the modules' own ``forward`` (no hook of a trace on
    them runs again for this side computation)."""
    return projection.forward(norm.forward(x))


def input_embedding(adapter: ModelAdapter) -> torch.nn.Module:
    """The token-embedding module of the input the corruption changes: the model's input
    embeddings, or the encoder's for an encoder-decoder (its decoder reads the same targets
    in the clean and the corrupted run)."""
    if adapter.arch == "encoder-decoder":
        return adapter.model.get_encoder().get_input_embeddings()
    return adapter.embeddings()


class EmbeddingRecorder(TraceView):
    """Keep the token-embedding output ``[batch, seq, d_model]`` of the last forward (``.value``)."""

    def __init__(self, adapter: ModelAdapter) -> None:
        self.adapter = adapter
        self.value: torch.Tensor | None = None

    def _trace(self) -> Trace:
        def fn(out: torch.Tensor, ctx: SiteContext) -> None:
            self.value = out.detach().clone()

        site = ModuleSite(input_embedding(self.adapter), "output", "input embedding")
        return Trace(self.adapter, read={site: Reader(fn)}, path="hooks")


class EmbeddingMix(TraceView):
    """Replace the token embeddings by ``e_from + alpha · (e_to − e_from)`` (both
    ``[batch, seq, d_model]``): the integration path of integrated gradients
    (Sundararajan et al. 2017) between two inputs of the same length. Set ``alpha`` between forwards."""

    def __init__(self, adapter: ModelAdapter, e_from: torch.Tensor, e_to: torch.Tensor, alpha: float = 1.0) -> None:
        self.adapter, self.e_from, self.e_to, self.alpha = adapter, e_from, e_to, float(alpha)

    def _trace(self) -> Trace:
        def fn(out: torch.Tensor, ctx: SiteContext) -> torch.Tensor:
            return (self.e_from + self.alpha * (self.e_to - self.e_from)).to(out.dtype)

        site = ModuleSite(input_embedding(self.adapter), "output", "input embedding")
        return Trace(self.adapter, edit={site: Apply(fn, in_place=False)}, path="hooks")


def final_site(adapter: ModelAdapter) -> tuple:
    """``(module, "input" | "output")``: where the model's final representation is read —
    the final norm's input for pre-LN decoders (the residual stream before it), else the
    last layer's output (post-LN encoders, whose last LayerNorm is inside the layer; the
    decoder's last block for an encoder-decoder).

    Raises:
        ValueError: when no last layer module is found.
    """
    if additive_residual(adapter):
        return residual_sites(adapter)[1], "input"
    stack = "decoder" if adapter.arch == "encoder-decoder" else None
    att = adapter.attention_modules(stack)[-1]
    names = {id(m): n for n, m in adapter.model.named_modules()}
    name = names[id(att)]
    last = adapter.n_layers_of(stack) - 1
    hit = re.search(rf"^(.*?\.{last})\.", name + ".")
    if not hit:
        raise NotApplicable(f"{adapter.name}: cannot find its last layer module")
    return dict(adapter.model.named_modules())[hit.group(1)], "output"


class FinalRepresentation(TraceView):
    """Record the final representation ``[batch, seq, d_model]`` (:func:`final_site`) as a
    tensor of the autograd graph the rest of the forward reads (``.value``), so that
    ``∂m/∂value`` can be taken; with ``replace`` (same shape), substitute it."""

    def __init__(self, adapter: ModelAdapter, replace: Callable | None = None) -> None:
        self.adapter, self.replace = adapter, replace
        self.value: torch.Tensor | None = None

    def _take(self, x: torch.Tensor, ctx: Optional[SiteContext] = None) -> torch.Tensor:
        mine = x.clone() if self.replace is None else self.replace(x)
        self.value = mine
        return mine

    def _trace(self) -> Trace:
        module, where = final_site(self.adapter)
        site = ModuleSite(module, where, "final representation")
        return Trace(self.adapter, edit={site: Apply(self._take, in_place=False)}, path="hooks")
