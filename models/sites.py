"""Sites as data: the named activations of every architecture, and how to read them.

A *site* is one tensor inside a forward that the toolkit can read or edit, named as in
TransformerLens (``blocks.3.attn.hook_z``; Nanda & Bloom 2022). This module says, for any
adapter, which module holds each site, on which side of it (input or output) and what
post-processing turns the module's tensor into the site's shape: the fused q|k|v split
(GPT-2's ``c_attn``), the grouped-query repeat of key/value heads (Ainslie et al. 2023) and
the head split. The module tables themselves are :data:`probe.models.architectures.ARCHITECTURES`
(or discovered by shape); nothing here runs a model. :mod:`probe.trace` is the one place
that hooks these sites.

Site kinds (``batch`` = rows of the forward, ``seq`` = padded positions)::

    kind        name                          module          side     shape
    resid_pre   blocks.{l}.hook_resid_pre     layer (block)   input    [batch, seq, d_model]
    resid_post  blocks.{l}.hook_resid_post    layer (block)   output   [batch, seq, d_model]
    pattern     blocks.{l}.attn.hook_pattern  attention       output   [batch, head, query, key]
    v           blocks.{l}.attn.hook_v        value proj.     output   [batch, seq, head, head_dim]
    z           blocks.{l}.attn.hook_z        output proj.    input    [batch, seq, head, head_dim]
    proj_in     blocks.{l}.attn.hook_proj_in  output proj.    input    [batch, seq, head * head_dim]

``z`` and ``proj_in`` are the same values (the output projection's input), split into heads
or not. ``v`` has one entry per query head (key/value heads repeated). Stacks other than
the model's main one are prefixed: ``decoder.blocks.0.attn.hook_pattern``,
``cross.blocks.0.attn.hook_z`` (encoder-decoder models).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Union

import torch

from .architectures import RESTARTABLE_FAMILIES
from .errors import InputError, NotApplicable

__all__ = [
    "SITE_KINDS",
    "SiteKind",
    "Site",
    "parse_site",
    "site_names",
    "layer_modules",
    "site_module",
    "value_layout",
    "value_heads",
    "split_heads",
    "supports_restart",
    "supports_site_restart",
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
    )
}
_BY_SUFFIX = {k.suffix: k.kind for k in SITE_KINDS.values()}
_NAME = re.compile(r"^(?:(encoder|decoder|cross)\.)?blocks\.(\d+)\.(.+)$")

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
        return f"{prefix}blocks.{self.layer}.{self.spec.suffix}"


SiteKey = Union[str, tuple, Site]


def parse_site(key: SiteKey, adapter=None) -> Site:
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
            raise InputError(f"unknown site kind {key[0]!r}; use one of {', '.join(SITE_KINDS)}")
        site = Site(kind, int(key[1]), key[2] if len(key) == 3 else None)
    elif isinstance(key, str):
        m = _NAME.match(key)
        if not m or m.group(3) not in _BY_SUFFIX:
            raise InputError(
                f"unknown site {key!r}; sites are named like blocks.0.attn.hook_pattern "
                f"(suffixes: {', '.join(_BY_SUFFIX)})"
            )
        site = Site(_BY_SUFFIX[m.group(3)], int(m.group(2)), m.group(1))
    else:
        raise InputError(f"a site is a name like 'blocks.0.attn.hook_z' or a (kind, layer) pair, got {key!r}")
    if adapter is None:
        return site
    stack = site.stack or adapter.default_stack
    if stack not in adapter.stacks:
        raise InputError(f"{adapter.name} has no {stack!r} attention; it has: {', '.join(adapter.stacks)}")
    n = adapter.n_layers_of(stack)
    if not 0 <= site.layer < n:
        raise InputError(f"layer {site.layer} out of range: {adapter.name} has layers 0..{n - 1}")
    return Site(site.kind, site.layer, stack)


def site_names(adapter, kind: Optional[str] = None, stack: Optional[str] = None) -> list[str]:
    """Every site name of ``adapter``'s ``stack`` (default the main one), or of one kind."""
    stack = stack or adapter.default_stack
    kinds = [kind] if kind else list(SITE_KINDS)
    return [
        Site(k, layer, stack).name(adapter.default_stack) for layer in range(adapter.n_layers_of(stack)) for k in kinds
    ]


def layer_modules(adapter, stack: Optional[str] = None) -> list:
    """The transformer layer (block) module of each layer, in order: the ancestor of the
    layer's attention module at the path component that is the layer index.

    Raises:
        ValueError: when the layers cannot be located.
        UnsupportedModel: layers share one attention module (ALBERT): no block per layer.
    """
    adapter.refuse_shared_layers(stack, "per-layer residual sites (resid_pre/resid_post, residual cache, restart)")
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
    return out


def site_module(adapter, site: Site) -> torch.nn.Module:
    """The module that holds ``site`` (``site.stack`` resolved)."""
    role = site.spec.module
    if role == "layer":
        return layer_modules(adapter, site.stack)[site.layer]
    if role == "attention":
        return adapter.attention_modules(site.stack)[site.layer]
    if role == "value":
        return adapter.value_modules(site.stack)[site.layer]
    return adapter.head_output_modules(site.stack)[site.layer]


def value_layout(adapter) -> Optional[tuple]:
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


def supports_restart(adapter, stack: Optional[str] = None) -> bool:
    """True when a forward may restart at any layer from a cached residual stream (the
    families of :data:`RESTARTABLE_FAMILIES`, their main stack)."""
    stack = stack or adapter.default_stack
    return (
        adapter.family in RESTARTABLE_FAMILIES and adapter.arch != "encoder-decoder" and stack == adapter.default_stack
    )


def supports_site_restart(adapter, stack: Optional[str] = None) -> bool:
    """True when a restart may also skip the attention of its layer, from the clean output
    projection input: layer restart is supported, every family in
    :data:`RESTARTABLE_FAMILIES` returns ``(output, weights)`` from its attention module
    with ``output`` the site or its projection, and the model is in eval mode."""
    return supports_restart(adapter, stack) and not adapter.model.training
