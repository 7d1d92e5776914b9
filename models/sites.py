"""Sites as data: the named activations of every architecture, and how to read them.

A *site* is one tensor inside a forward that the toolkit can read or edit, named as in
TransformerLens (``blocks.3.attn.hook_z``; Nanda & Bloom 2022). This module says, for any
adapter, which module holds each site, on which side of it (input or output) and what
post-processing turns the module's tensor into the site's shape: the fused q|k|v split
(GPT-2's ``c_attn``), the grouped-query repeat of key/value heads (Ainslie et al. 2023) and
the head split. The module tables themselves are :data:`probe.models.architectures.ARCHITECTURES`
(or discovered by shape); nothing here runs a model. :mod:`probe.tracing.trace` is the one place
that hooks these sites.

Site kinds (``batch`` = rows of the forward, ``seq`` = padded positions)::

    kind        name                               module            side       shape
    embed       hook_embed                         token embedding   output     [batch, seq, d_model]
    pos_embed   hook_pos_embed                     position embed.   output     [batch, seq, d_model]
    resid_pre   blocks.{l}.hook_resid_pre          layer (block)     input      [batch, seq, d_model]
    q           blocks.{l}.attn.hook_q             query proj.*      output     [batch, seq, head, head_dim]
    k           blocks.{l}.attn.hook_k             key proj.*        output     [batch, seq, kv_head, head_dim]
    rot_q       blocks.{l}.attn.hook_rot_q         attention         interface  [batch, seq, head, head_dim]
    rot_k       blocks.{l}.attn.hook_rot_k         attention         interface  [batch, seq, kv_head, head_dim]
    attn_scores blocks.{l}.attn.hook_attn_scores   attention         interface  [batch, head, query, key]
    pattern     blocks.{l}.attn.hook_pattern       attention         output     [batch, head, query, key]
    v           blocks.{l}.attn.hook_v             value proj.       output     [batch, seq, head, head_dim]
    z           blocks.{l}.attn.hook_z             output proj.      input      [batch, seq, head, head_dim]
    proj_in     blocks.{l}.attn.hook_proj_in       output proj.      input      [batch, seq, head * head_dim]
    result      blocks.{l}.attn.hook_result        output proj.      result     [batch, seq, head, d_model]
    attn_out    blocks.{l}.hook_attn_out           (block_parts)     …          [batch, seq, d_model]
    resid_mid   blocks.{l}.hook_resid_mid          (block_parts)     …          [batch, seq, d_model]
    mlp_in      blocks.{l}.hook_mlp_in             (block_parts)     …          [batch, seq, d_model]
    mlp_out     blocks.{l}.hook_mlp_out            (block_parts)     …          [batch, seq, d_model]
    router      blocks.{l}.mlp.hook_router_logits  MoE router        output     [batch, seq, expert]
    ln1_normalized blocks.{l}.ln1.hook_normalized  pre-attention norm input   [batch, seq, d_model]
    ln1_scale   blocks.{l}.ln1.hook_scale          pre-attention norm input   [batch, seq, 1]
    ln2_normalized blocks.{l}.ln2.hook_normalized  pre-MLP norm      input      [batch, seq, d_model]
    ln2_scale   blocks.{l}.ln2.hook_scale          pre-MLP norm      input      [batch, seq, 1]
    resid_post  blocks.{l}.hook_resid_post         layer (block)     output     [batch, seq, d_model]
    ln_final    ln_final.hook_normalized           final norm        output     [batch, seq, d_model]

``q`` and ``k`` are TransformerLens's: the queries and keys *before* rotary embeddings
(Su et al. 2021) and q/k norms. (*) On a model with rotary positions they are read at the
output of the query and key projections (:data:`QUERY_KEY_PROJECTIONS`), split into heads;
``rot_q`` and ``rot_k`` (TransformerLens's ``hook_rot_q``/``hook_rot_k``) are read inside
transformers' attention interface, after rotary and q/k norms, as the attention function
receives them. A model without rotary positions has no ``rot_q``/``rot_k`` (refused with
the reason) and reads ``q`` and ``k`` inside the interface, where they equal the
projections' output. A rotary model whose projection is fused (GPT-NeoX's
``query_key_value``, Phi-3's ``qkv_proj``) has no separable ``q``/``k``: refused, read
``rot_q``/``rot_k``. ``k`` has one entry per key/value head (grouped-query attention:
query head ``h`` reads key head :func:`kv_head_of` ``h``). ``attn_scores`` are
the scaled, soft-capped, masked logits the softmax turns into ``pattern``. ``result`` is
each head's ``z`` through its slice of the output projection (TransformerLens's
``hook_result``): Σ_h result_h + bias is the projection's output. ``z`` and ``proj_in`` are
the same values (the output projection's input), split into heads or not. ``v`` has one
entry per query head (key/value heads repeated; its consumers read it per head). ``ln1``/``ln2`` are TransformerLens's
norm sites of the norms before attention and before the MLP (read only, computed from the
norm's input ``x``): ``hook_scale`` = sqrt(mean(x'²) + eps) and ``hook_normalized`` =
x' / scale, before the norm's weight and bias, with x' = x − mean(x) for LayerNorm and x' = x
for RMSNorm (Zhang & Sennrich 2019). Where the
block-level sites live, and why a family lacks one, is :mod:`probe.models.block_parts`.
Stacks other than the model's main one are prefixed: ``decoder.blocks.0.attn.hook_pattern``,
``cross.blocks.0.attn.hook_z`` (encoder-decoder models).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Union

import torch

from .architectures import RESTARTABLE_FAMILIES
from .errors import InputError, NotApplicable

if TYPE_CHECKING:
    from probe.models.adapter import ModelAdapter

__all__ = [
    "SITE_KINDS",
    "SiteKind",
    "Site",
    "parse_site",
    "site_names",
    "layer_modules",
    "site_module",
    "site_side",
    "kv_head_of",
    "MODEL_KINDS",
    "INTERFACE_KINDS",
    "BLOCK_KINDS",
    "value_layout",
    "value_heads",
    "split_heads",
    "supports_restart",
    "supports_site_restart",
    "after_last_layer",
    "has_rotary",
    "query_key_projection",
    "NORM_KINDS",
    "norm_parts",
]


@dataclass(frozen=True)
class SiteKind:
    """One kind of site: its name suffix, the adapter's module that holds it (``layer``,
    ``attention``, ``value``, ``head_output``), the side of that module (``input`` |
    ``output``), the shape, and the axis of heads in that shape (None: no head axis)."""

    kind: str
    suffix: str
    module: str
    side: str
    shape: str
    head_axis: Optional[int]


SITE_KINDS: dict[str, SiteKind] = {
    k.kind: k
    for k in (
        SiteKind("resid_pre", "hook_resid_pre", "layer", "input", "[batch, seq, d_model]", None),
        SiteKind("resid_post", "hook_resid_post", "layer", "output", "[batch, seq, d_model]", None),
        SiteKind("pattern", "attn.hook_pattern", "attention", "output", "[batch, head, query, key]", 1),
        SiteKind("v", "attn.hook_v", "value", "output", "[batch, seq, head, head_dim]", 2),
        SiteKind("z", "attn.hook_z", "head_output", "input", "[batch, seq, head, head_dim]", 2),
        SiteKind("proj_in", "attn.hook_proj_in", "head_output", "input", "[batch, seq, head * head_dim]", None),
        SiteKind("q", "attn.hook_q", "attention", "interface", "[batch, seq, head, head_dim]", 2),
        SiteKind("k", "attn.hook_k", "attention", "interface", "[batch, seq, kv_head, head_dim]", 2),
        SiteKind("rot_q", "attn.hook_rot_q", "attention", "interface", "[batch, seq, head, head_dim]", 2),
        SiteKind("rot_k", "attn.hook_rot_k", "attention", "interface", "[batch, seq, kv_head, head_dim]", 2),
        SiteKind("attn_scores", "attn.hook_attn_scores", "attention", "interface", "[batch, head, query, key]", 1),
        SiteKind("result", "attn.hook_result", "head_output", "result", "[batch, seq, head, d_model]", 2),
        SiteKind("attn_out", "hook_attn_out", "block", "", "[batch, seq, d_model]", None),
        SiteKind("resid_mid", "hook_resid_mid", "block", "", "[batch, seq, d_model]", None),
        SiteKind("mlp_in", "hook_mlp_in", "block", "", "[batch, seq, d_model]", None),
        SiteKind("mlp_out", "hook_mlp_out", "block", "", "[batch, seq, d_model]", None),
        SiteKind("router", "mlp.hook_router_logits", "block", "", "[batch, seq, expert]", None),
        SiteKind("ln1_normalized", "ln1.hook_normalized", "block", "", "[batch, seq, d_model]", None),
        SiteKind("ln1_scale", "ln1.hook_scale", "block", "", "[batch, seq, 1]", None),
        SiteKind("ln2_normalized", "ln2.hook_normalized", "block", "", "[batch, seq, d_model]", None),
        SiteKind("ln2_scale", "ln2.hook_scale", "block", "", "[batch, seq, 1]", None),
        SiteKind("embed", "hook_embed", "model", "output", "[batch, seq, d_model]", None),
        SiteKind("pos_embed", "hook_pos_embed", "model", "output", "[batch, seq, d_model]", None),
        SiteKind("ln_final", "ln_final.hook_normalized", "model", "output", "[batch, seq, d_model]", None),
    )
}
#: kinds with one site per model (no layer): named by their suffix alone
MODEL_KINDS = frozenset(k.kind for k in SITE_KINDS.values() if k.module == "model")
#: kinds read inside transformers' attention interface (``q``/``k`` only on models without
#: rotary positions: :func:`site_side`)
INTERFACE_KINDS = frozenset(k.kind for k in SITE_KINDS.values() if k.side == "interface")
#: the norm sites (read only: computed from the norm's input, :func:`norm_parts`)
NORM_KINDS = ("ln1_normalized", "ln1_scale", "ln2_normalized", "ln2_scale")
#: kinds held by a module of the block found through :mod:`probe.models.block_parts`
BLOCK_KINDS = frozenset(k.kind for k in SITE_KINDS.values() if k.module == "block")
_BY_SUFFIX = {k.suffix: k.kind for k in SITE_KINDS.values()}
_NAME = re.compile(r"^(?:(encoder|decoder|cross)\.)?blocks\.(\d+)\.(.+)$")
_TOP = re.compile(r"^(?:(encoder|decoder|cross)\.)?(.+)$")

#: the query and key projections' names inside an attention module, where a rotary model's
#: ``q`` and ``k`` (before rotary, TransformerLens's ``hook_q``/``hook_k``) are read
QUERY_KEY_PROJECTIONS = {
    "q": ("q_proj", "query", "q_lin", "query_proj", "wq"),
    "k": ("k_proj", "key", "k_lin", "key_proj", "wk"),
}
#: families with rotary positions (others: their config says so, :func:`has_rotary`)
ROTARY_FAMILIES = frozenset({"llama"})
_ROTARY_KINDS = {"q": "rot_q", "k": "rot_k"}

#: families whose value projection is fused with the queries and keys: the number of equal
#: parts of its output and which part is the value (GPT-2's ``c_attn``: q | k | v)
FUSED_VALUE = {"gpt2": (3, 2)}


@dataclass(frozen=True)
class Site:
    """One site of one layer of one stack (``stack`` None: the model's main stack)."""

    kind: str
    layer: int
    stack: Optional[str] = None

    @property
    def spec(self) -> SiteKind:
        return SITE_KINDS[self.kind]

    def name(self, default_stack: Optional[str] = None) -> str:
        """The TransformerLens-style name; prefixed with the stack unless it is the main one."""
        prefix = "" if self.stack in (None, default_stack) else f"{self.stack}."
        if self.kind in MODEL_KINDS:
            return f"{prefix}{self.spec.suffix}"
        return f"{prefix}blocks.{self.layer}.{self.spec.suffix}"


SiteKey = Union[str, tuple, Site]


def parse_site(key: SiteKey, adapter: Optional[ModelAdapter] = None) -> Site:
    """A :class:`Site` from a name (``blocks.0.attn.hook_z``), a ``(kind, layer)`` or
    ``(kind, layer, stack)`` tuple, or a Site. With ``adapter``, the layer and stack are
    checked and the stack resolved to a concrete one.

    Raises:
        ValueError: an unknown name or kind, a layer out of range (naming the range), a
            stack the model does not have.
    """
    if isinstance(key, Site):
        site = key
    elif isinstance(key, tuple) and 2 <= len(key) <= 3:
        kind = _BY_SUFFIX.get(key[0], key[0])
        if kind not in SITE_KINDS:
            raise InputError(f"unknown site kind {key[0]!r}{_closest(str(key[0]), list(SITE_KINDS))}")
        site = Site(kind, -1 if kind in MODEL_KINDS else int(key[1]), key[2] if len(key) == 3 else None)
    elif isinstance(key, str):
        m = _NAME.match(key)
        top = _TOP.match(key)
        if top and top.group(2) in _BY_SUFFIX and _BY_SUFFIX[top.group(2)] in MODEL_KINDS:
            site = Site(_BY_SUFFIX[top.group(2)], -1, top.group(1))
        elif m and m.group(3) in _BY_SUFFIX and _BY_SUFFIX[m.group(3)] not in MODEL_KINDS:
            site = Site(_BY_SUFFIX[m.group(3)], int(m.group(2)), m.group(1))
        else:
            names = site_names(adapter) if adapter is not None else []
            raise InputError(f"unknown site {key!r}{_closest(key, names or _example_names())}")
    else:
        raise InputError(f"a site is a name like 'blocks.0.attn.hook_z' or a (kind, layer) pair, got {key!r}")
    if adapter is None:
        return site
    stack = site.stack or adapter.default_stack
    if stack not in adapter.stacks:
        raise InputError(f"{adapter.name} has no {stack!r} attention; it has: {', '.join(adapter.stacks)}")
    if site.kind in MODEL_KINDS:
        return Site(site.kind, -1, stack)
    n = adapter.n_layers_of(stack)
    if not 0 <= site.layer < n:
        raise InputError(f"layer {site.layer} out of range: {adapter.name} has layers 0..{n - 1}")
    return Site(site.kind, site.layer, stack)


def _example_names() -> list:
    return [Site(k, 0).name() for k in SITE_KINDS]


def _closest(name: str, names: list) -> str:
    """``; closest: a, b, c`` (the nearest valid names), or the kinds when none is near."""
    near = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    if near:
        return f"; closest: {', '.join(near)}"
    return f"; sites are named like blocks.0.attn.hook_pattern (suffixes: {', '.join(_BY_SUFFIX)})"


def site_names(adapter: ModelAdapter, kind: Optional[str] = None, stack: Optional[str] = None) -> list[str]:
    """Every site name of ``adapter``'s ``stack`` (default the main one), or of one kind
    (names only: a site the model's blocks lack is refused when it is traced)."""
    stack = stack or adapter.default_stack
    kinds = [kind] if kind else list(SITE_KINDS)
    top = [Site(k, -1, stack).name(adapter.default_stack) for k in kinds if k in MODEL_KINDS]
    return top + [
        Site(k, layer, stack).name(adapter.default_stack)
        for layer in range(adapter.n_layers_of(stack))
        for k in kinds
        if k not in MODEL_KINDS
    ]


def layer_modules(adapter: ModelAdapter, stack: Optional[str] = None) -> list:
    """The transformer layer (block) module of each layer, in order: the ancestor of the
    layer's attention module at the path component that is the layer index.

    Raises:
        ValueError: when the layers cannot be located.
        UnsupportedModel: layers share one attention module (ALBERT): no block per layer.
    """
    adapter.refuse_shared_layers(stack, "per-layer residual sites (resid_pre/resid_post, residual cache, restart)")
    key = ("layer_modules", stack or adapter.default_stack)
    cache = getattr(adapter, "_cache", None)
    if isinstance(cache, dict) and key in cache:  # walking named_modules twice per call: 7 s of 2,001 sentences' sweep
        return list(cache[key])
    attention = adapter.attention_modules(stack)  # the adapter's lookup in the architectures table
    names = {id(m): n for n, m in adapter.model.named_modules()}
    modules = dict(adapter.model.named_modules())
    out = []
    for i, module in enumerate(attention):
        parts = names[id(module)].split(".")
        k = next((k for k, part in enumerate(parts) if part == str(i)), None)
        if k is None:
            raise NotApplicable(f"cannot locate the layer modules of {adapter.name}")
        out.append(modules[".".join(parts[: k + 1])])
    if isinstance(cache, dict):
        cache[key] = list(out)
    return out


def site_module(adapter: ModelAdapter, site: Site) -> torch.nn.Module:
    """The module that holds ``site`` (``site.stack`` resolved).

    Raises:
        NotApplicable: the model has no such site (its reason in one line, see
            :mod:`probe.models.block_parts`).
    """
    from .block_parts import model_part, part_of

    if site.kind in ("q", "k", "rot_q", "rot_k"):
        projection = query_key_projection(adapter, site)
        if projection is not None:
            return projection
    role = site.spec.module
    if role == "layer":
        return layer_modules(adapter, site.stack)[site.layer]
    if role == "attention":
        return adapter.attention_modules(site.stack)[site.layer]
    if role == "value":
        return adapter.value_modules(site.stack)[site.layer]
    if role == "block":
        return part_of(adapter, layer_modules(adapter, site.stack)[site.layer], site.kind)[0]
    if role == "model":
        return model_part(adapter, site.kind)
    return adapter.head_output_modules(site.stack)[site.layer]


def site_side(adapter: ModelAdapter, site: Site) -> str:
    """The side of :func:`site_module` that holds ``site``: ``input`` | ``output`` (hooks),
    ``interface`` (inside the attention function), ``result`` (the output projection's
    input, weighted per head)."""
    if site.spec.module == "block":
        from .block_parts import part_of

        return part_of(adapter, layer_modules(adapter, site.stack)[site.layer], site.kind)[1]
    if site.kind in ("q", "k") and has_rotary(adapter):
        return "output"  # the projection's output: before rotary
    return "output" if site.kind == "v" else site.spec.side


def has_rotary(adapter: ModelAdapter) -> bool:
    """Whether the model rotates its queries and keys by position (rotary embeddings, Su et al.
    2021): a family of :data:`ROTARY_FAMILIES`, or a config with ``rope_parameters``,
    ``rope_theta``, ``rotary_dim`` or ``position_embedding_type="rotary"``."""
    c = adapter.config
    return adapter.family in ROTARY_FAMILIES or bool(
        getattr(c, "rope_parameters", None)
        or getattr(c, "rope_theta", None)
        or getattr(c, "rotary_dim", None)
        or getattr(c, "position_embedding_type", None) == "rotary"
    )


def query_key_projection(adapter: ModelAdapter, site: Site) -> Optional[torch.nn.Module]:
    """The projection whose output is ``site`` (``q``/``k`` of a rotary model, before rotary),
    or ``None`` where the site is read inside the attention interface.

    Raises:
        NotApplicable: ``rot_q``/``rot_k`` of a model without rotary positions; ``q``/``k`` of a
            rotary model with no separate query/key projection (fused q|k|v).
    """
    rotary = has_rotary(adapter)
    if site.kind in ("rot_q", "rot_k"):
        if not rotary:
            raise NotApplicable(
                f"{adapter.name} has no rotary embeddings, so no {site.spec.suffix}: its queries and keys "
                f"are attn.hook_{site.kind[-1]} (TransformerLens has hook_rot_q/hook_rot_k only on rotary models)"
            )
        return None
    if not rotary:
        return None
    attention = adapter.attention_modules(site.stack)[site.layer]
    for name in QUERY_KEY_PROJECTIONS[site.kind]:
        module = getattr(attention, name, None)
        if isinstance(module, torch.nn.Linear):
            return module
    raise NotApplicable(
        f"{adapter.name} fuses its query/key/value projection, so its {site.spec.suffix} before rotary "
        f"cannot be read apart: read attn.hook_rot_{site.kind} (after rotary)"
    )


def kv_head_of(adapter: ModelAdapter, head: int, n_kv_heads: Optional[int] = None) -> int:
    """The key/value head query head ``head`` reads in grouped-query attention (Ainslie et
    al. 2023): ``head // (n_heads // n_kv_heads)``, as transformers' ``repeat_kv`` repeats.
    ``n_kv_heads`` defaults to the config's (``num_key_value_heads``; 1 for multi-query
    models, Shazeer 2019; else one per query head); ``hook_k``'s head axis says it too."""
    c = adapter.config
    kv = n_kv_heads or getattr(c, "num_key_value_heads", None) or (1 if getattr(c, "multi_query", False) else None)
    return head // (adapter.n_heads // int(kv or adapter.n_heads))


def value_layout(adapter: ModelAdapter) -> Optional[tuple]:
    """``(parts, index)`` when the value projection is fused with queries and keys (its
    output split in ``parts`` equal parts, the value being part ``index``), else None."""
    return FUSED_VALUE.get(adapter.family)


def value_heads(out: torch.Tensor, n_heads: int, head_dim: int, layout: Optional[tuple]) -> torch.Tensor:
    """The value site ``[batch, seq, n_heads, head_dim]`` from the value projection's
    output ``[batch, seq, width]``: the value part of a fused projection, split into
    key/value heads, each repeated for its group of query heads."""
    if layout is not None:
        parts, index = layout
        width = out.shape[-1] // parts
        out = out[..., index * width : (index + 1) * width]
    b, s, width = out.shape
    v = out.reshape(b, s, width // head_dim, head_dim)
    if v.shape[2] != n_heads:  # grouped-query attention: repeat the kv heads
        v = v.repeat_interleave(n_heads // v.shape[2], dim=2)
    return v


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """``[batch, seq, n_heads * head_dim]`` → ``[batch, seq, n_heads, head_dim]`` (a view)."""
    b, s, width = x.shape
    return x.reshape(b, s, n_heads, width // n_heads)


def supports_restart(adapter: ModelAdapter, stack: Optional[str] = None) -> bool:
    """True when a forward may restart at any layer from a cached residual stream (the
    families of :data:`RESTARTABLE_FAMILIES`, their main stack)."""
    stack = stack or adapter.default_stack
    return (
        adapter.family in RESTARTABLE_FAMILIES and adapter.arch != "encoder-decoder" and stack == adapter.default_stack
    )


def after_last_layer(adapter: ModelAdapter, stack: Optional[str] = None) -> Optional[int]:
    """The ``stop_before`` that ends a forward after ``stack``'s last layer (its number of
    layers: no final norm, no head), where the family's layers are located modules of their
    own (:func:`supports_restart`; not an encoder-decoder, whose other stack would not run);
    ``None`` (run the whole forward) elsewhere."""
    return adapter.n_layers_of(stack) if supports_restart(adapter, stack) else None


def supports_site_restart(adapter: ModelAdapter, stack: Optional[str] = None) -> bool:
    """True when a restart may also skip the attention of its layer, from the clean output
    projection input: layer restart is supported, every family in
    :data:`RESTARTABLE_FAMILIES` returns ``(output, weights)`` from its attention module
    with ``output`` the site or its projection, and the model is in eval mode."""
    return supports_restart(adapter, stack) and not adapter.model.training


def norm_parts(norm: torch.nn.Module, x: torch.Tensor) -> tuple:
    """``(normalized, scale)`` of a LayerNorm or RMSNorm module ``norm`` on its input ``x``
    ``[batch, seq, d_model]``, as TransformerLens's ``hook_normalized`` ``[batch, seq, d_model]``
    and ``hook_scale`` ``[batch, seq, 1]``: before the norm's weight and bias (computed in
    float32, as transformers' RMSNorms do, then cast back).

    Raises:
        NotApplicable: ``norm`` is neither a ``torch.nn.LayerNorm`` nor an RMSNorm.
    """
    name = type(norm).__name__
    if isinstance(norm, torch.nn.LayerNorm):
        centred = x.float() - x.float().mean(-1, keepdim=True)
    elif "RMSNorm" in name or name == "T5LayerNorm":
        centred = x.float()
    else:
        raise NotApplicable(f"{name} is neither LayerNorm nor RMSNorm: its hook_normalized is not defined here")
    eps = next(
        (getattr(norm, a) for a in ("variance_epsilon", "eps") if isinstance(getattr(norm, a, None), float)), 1e-5
    )
    scale = (centred.pow(2).mean(-1, keepdim=True) + eps).sqrt()
    return (centred / scale).to(x.dtype), scale.to(x.dtype)
