"""What the keys of a trace's ``read`` and ``edit`` name: the sites of a name, a tuple or a
bare kind (:func:`expand_key`), any module's input or output (:class:`ModuleSite`), and the
sites a model refuses, each with its reason in one line (:func:`refusal`,
:func:`available_sites`; the refusals are :mod:`probe.models.block_parts`'s)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional

import torch

from probe.errors import InputError, NotApplicable
from probe.models.sites import (
    INTERFACE_KINDS,
    MODEL_KINDS,
    SITE_KINDS,
    Site,
    parse_site,
    site_module,
    site_names,
    site_side,
    value_layout,
)
from probe.tracing.attention_interface import choose_path

if TYPE_CHECKING:
    from probe.models.adapter import ModelAdapter
    from probe.models.architectures import UnsupportedModel

__all__ = [
    "Reader",
    "ModuleSite",
    "as_list",
    "expand_key",
    "refusal",
    "interface_values",
    "available_sites",
    "keys_of",
    "unsupported",
]


@dataclass(frozen=True)
class Reader:
    """Read a site with your own function ``fn(value, ctx)`` (called inside the forward,
    the value not detached); ``out(shape, dtype, device)`` (optional, ``pattern`` on the
    interface path) may name a tensor the weights are computed in."""

    fn: Callable
    out: Optional[Callable] = None


@dataclass(frozen=True, eq=False)
class ModuleSite:
    """Any module's input (its first argument, or ``hidden_states``) or output (its first
    output), as nnsight's ``module.input`` / ``module.output``: for sites no architecture
    table names (a query projection, an embedding, a final norm). Read without a
    :class:`Reader`, it is cached under ``label``. Two ModuleSites are the same site only
    when they are the same object."""

    module: torch.nn.Module
    side: str = "output"
    label: str = ""

    def __post_init__(self) -> None:
        if self.side not in ("input", "output"):
            raise InputError(f"a module site is a module's 'input' or 'output', got {self.side!r}")


def as_list(x: object) -> list:
    """``x`` as a list: a list or tuple as its items, anything else as the one item."""
    return list(x) if isinstance(x, (list, tuple)) else [x]


def expand_key(adapter: ModelAdapter, key: Any, stack: Optional[str]) -> list:
    """Sites of a name, tuple or bare kind (``"pattern"``: every layer of the stack); a
    :class:`ModuleSite` as is."""
    if isinstance(key, ModuleSite):
        return [key]
    if isinstance(key, str) and key in SITE_KINDS:
        st = stack or adapter.default_stack
        if key in MODEL_KINDS:
            return [Site(key, -1, st)]
        return [Site(key, layer, st) for layer in range(adapter.n_layers_of(st))]
    site = parse_site(key, adapter if isinstance(key, str) else None)
    if site.stack is None and stack is not None:
        site = Site(site.kind, site.layer, stack)
    return [parse_site(site, adapter)]


def refusal(adapter: ModelAdapter, site: Site) -> Optional[str]:
    """Why ``adapter``'s model has no ``site`` (one line), or None when it has it."""
    if interface_values(adapter, site):
        return None
    try:
        site_module(adapter, site)
    except NotApplicable as e:
        return str(e)
    if (
        site.kind in INTERFACE_KINDS
        and site_side(adapter, site) == "interface"
        and choose_path(adapter, site.stack, "auto") != "interface"
    ):
        return (
            f"{adapter.name} has no site {site.kind}: queries, keys and scores after rotary are read "
            "inside transformers' attention interface, which its attention does not call"
        )
    return None


def interface_values(adapter: ModelAdapter, site: object) -> bool:
    """True when ``site`` is ``v`` of a model with no separate value projection (a fused
    q|k|v other than GPT-2's: GPT-NeoX, Phi-3, CodeGen) whose attention calls the
    interface: the values are then read there, as the attention function receives them."""
    if not isinstance(site, Site) or site.kind != "v" or value_layout(adapter) is not None:
        return False
    try:
        adapter.value_modules(site.stack)
        return False
    except NotApplicable:
        return choose_path(adapter, site.stack, "auto") == "interface"


def available_sites(adapter: ModelAdapter, stack: Optional[str] = None) -> list:
    """The names of every site ``adapter``'s model has (those :func:`site_names` lists
    minus the ones it refuses, see :mod:`probe.models.block_parts`)."""
    st = stack or adapter.default_stack
    out, refused = [], {}
    for name in site_names(adapter, stack=st):
        site = parse_site(parse_site(name), adapter) if st == adapter.default_stack else None
        site = site or Site(parse_site(name).kind, parse_site(name).layer, st)
        key = (site.kind, site.spec.module)
        if key not in refused:
            refused[key] = refusal(adapter, site)
        if refused[key] is None:
            out.append(name)
    return out


def keys_of(adapter: ModelAdapter, read: Any, stack: Optional[str]) -> list:
    """The site keys of a names filter: a name, a list, or a predicate over site names."""
    if callable(read) and not isinstance(read, (str, Site, ModuleSite)):
        return [n for n in available_sites(adapter, stack) if read(n)]
    single = isinstance(read, (str, Site, ModuleSite)) or (
        isinstance(read, tuple) and len(read) in (2, 3) and isinstance(read[1], int)
    )
    return [read] if single else list(read)


def unsupported(adapter: ModelAdapter, what: str, capture: bool = True) -> UnsupportedModel:
    """:class:`probe.models.architectures.UnsupportedModel` naming the model and its type:
    ``what`` it does, and (``capture``) that the toolkit cannot capture it."""
    from probe.models.architectures import UnsupportedModel

    t = getattr(adapter.config, "model_type", "?")
    tail = "; the toolkit cannot capture it" if capture else ""
    return UnsupportedModel(f"{adapter.name} (model type {t!r}): {what}{tail}")
