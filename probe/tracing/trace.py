"""One trace: read and edit any site of a live model, the one place that hooks it.

TransformerLens's ``run_with_cache`` / ``run_with_hooks`` and nnsight's ``model.trace``
in one function over the sites of :mod:`probe.models.sites`::

    cache = trace(adapter, ["The cat sat."], read="pattern")          # every layer's pattern
    cache["blocks.0.attn.hook_pattern"]                               # [batch, head, q, k]
    cache = trace(adapter, texts, edit={"blocks.1.attn.hook_z": Zero(head=2)}, read=["blocks.1.hook_resid_post"])
    cache.output                                                      # the model's output

:class:`Trace` is the same as a context manager, for forwards run by other code (every
forward inside the block is read and edited). How each site is reached is chosen once,
per stack (``path="auto"``): attention weights and the per-head output through
transformers' attention interface where the model's attention calls it
(:mod:`probe.tracing.attention_interface`), else forward hooks with eager attention
(:func:`probe.tracing.hooks.eager_attention`); residual, value and output-projection sites by
hooks on the modules the adapter names. Hooks are own-handle (:class:`probe.tracing.hooks.HookSet`)
and removed on exit, also after an exception; traces nest; nothing is global.

``restart_from=Restart(layer, hidden, context)`` runs layers ``< layer`` as pass-throughs
and feeds ``hidden`` into ``layer`` (with ``context``, the clean output-projection input of
``layer``, its attention is skipped too): a sweep of edits in layer ``l`` need not
recompute what comes before (:func:`probe.models.sites.supports_restart`).
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from typing import Callable, Iterable, Literal, Mapping, Optional, Sequence, Union

import torch

from probe.errors import InputError, NotApplicable

from probe.tracing.attention_interface import AttentionSession, InterfaceSwitch, choose_path, repeat_kv
from probe.tracing.cache import Cache
from probe.tracing.edits import SiteContext, as_edit
from probe.tracing.hooks import HookContext, HookSet, eager_attention
from probe.tracing.layer_calls import LayerCalls
from probe.models.sites import (
    BLOCK_KINDS,
    INTERFACE_KINDS,
    MODEL_KINDS,
    SITE_KINDS,
    Site,
    site_names,
    site_side,
    layer_modules,
    parse_site,
    site_module,
    split_heads,
    supports_restart,
    supports_site_restart,
    value_heads,
    value_layout,
)

__all__ = [
    "Cache",
    "Trace",
    "TraceView",
    "ModuleSite",
    "Restart",
    "Reader",
    "trace",
    "run_with_cache",
    "run_with_hooks",
    "unsupported",
    "available_sites",
]


@dataclass(frozen=True)
class Reader:
    """Read a site with your own function ``fn(value, ctx)`` (called inside the forward,
    the value not detached); ``out(shape, dtype, device)`` (optional, ``pattern`` on the
    interface path) may name a tensor the weights are computed in."""

    fn: Callable
    out: Optional[Callable] = None


@dataclass(frozen=True)
class Restart:
    """Restart the forward at ``layer`` from ``hidden`` ``[rows, seq, d_model]`` (the
    stream entering it); with ``context`` ``[rows, seq, head·head_dim]`` (the layer's
    clean output-projection input) at its output projection."""

    layer: int
    hidden: torch.Tensor
    context: Optional[torch.Tensor] = None


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

    def __post_init__(self):
        if self.side not in ("input", "output"):
            raise InputError(f"a module site is a module's 'input' or 'output', got {self.side!r}")


def _as_list(x) -> list:
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _expand(adapter, key, stack: Optional[str]) -> list:
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


def _refusal(adapter, site: Site) -> Optional[str]:
    """Why ``adapter``'s model has no ``site`` (one line), or None when it has it."""
    if _interface_values(adapter, site):
        return None
    try:
        site_module(adapter, site)
    except NotApplicable as e:
        return str(e)
    if site.kind in INTERFACE_KINDS and choose_path(adapter, site.stack, "auto") != "interface":
        return (
            f"{adapter.name} has no site {site.kind}: queries, keys and scores after rotary are read "
            "inside transformers' attention interface, which its attention does not call"
        )
    return None


def _interface_values(adapter, site) -> bool:
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


def available_sites(adapter, stack: Optional[str] = None) -> list:
    """The names of every site ``adapter``'s model has (those :func:`site_names` lists
    minus the ones it refuses, see :mod:`probe.models.block_parts`)."""
    st = stack or adapter.default_stack
    out, refused = [], {}
    for name in site_names(adapter, stack=st):
        site = parse_site(parse_site(name), adapter) if st == adapter.default_stack else None
        site = site or Site(parse_site(name).kind, parse_site(name).layer, st)
        key = (site.kind, site.spec.module)
        if key not in refused:
            refused[key] = _refusal(adapter, site)
        if refused[key] is None:
            out.append(name)
    return out


def _keys_of(adapter, read, stack: Optional[str]) -> list:
    """The site keys of a names filter: a name, a list, or a predicate over site names."""
    if callable(read) and not isinstance(read, (str, Site, ModuleSite)):
        return [n for n in available_sites(adapter, stack) if read(n)]
    single = isinstance(read, (str, Site, ModuleSite)) or (
        isinstance(read, tuple) and len(read) in (2, 3) and isinstance(read[1], int)
    )
    return [read] if single else list(read)


class _Session(AttentionSession):
    """The trace's work inside the attention function: read/replace weights, edit ``z``
    (the work of the layer whose call is running: :meth:`Trace.now`)."""

    def __init__(self, layer_of, tr: "Trace"):
        super().__init__(layer_of)
        self.tr = tr

    def needs_weights(self, module) -> bool:
        return self.tr.now(self.tr._pattern, module) is not None

    def on_qkv(self, module, query, key, value):
        work = self.tr.now(self.tr._qk, module)
        if not work or not ("q" in work or "k" in work or "v" in work):
            return None
        # the site is [batch, seq, head, d]: a transposed view the attention then reads from,
        # so that a gradient at the site is one of the forward's own tensors
        out = []
        for kind, x in (("q", query), ("k", key)):
            w = work.get(kind)
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

    def needs_scores(self, module) -> bool:
        work = self.tr.now(self.tr._qk, module)
        return bool(work) and "attn_scores" in work

    def on_scores(self, module, scores):
        work = self.tr.now(self.tr._qk, module)
        w = work.get("attn_scores") if work else None
        if w is None:
            return scores
        return self.tr._edited(scores, w)[0]

    def weights_out(self, module, shape, dtype, device):
        work = self.tr.now(self.tr._pattern, module)
        for reader, _ in work["read"] if work is not None else ():
            if reader.out is not None:
                return reader.out(shape, dtype, device)
        return None

    def on_weights(self, module, weights, mask):
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

    def on_output(self, module, output):
        work = self.tr.now(self.tr._z_interface, module)
        if work is None:
            return None
        edits, ctx = work
        self.tr._pending[module] = True
        z = output.clone()
        for e in edits:
            z = e(z, ctx)
        return z


class Trace(HookContext):
    """Context manager: read ``read`` and apply ``edit`` on every forward inside it.

    Args:
        adapter: a :class:`probe.models.ModelAdapter`.
        read: site names, ``(kind, layer)`` pairs or bare kinds (``"pattern"``: every
            layer), a predicate over site names, stored in :attr:`cache`; or a mapping
            site -> :class:`Reader` / function.
        edit: site -> an edit (:mod:`probe.tracing.edits`), a function ``fn(value, ctx)``, or a
            list of them (applied in order).
        rows: batch rows of edits that name none themselves (None: every row).
        restart_from: a :class:`Restart`.
        stack: stack of names without a stack prefix (default: the main one).
        path: ``auto`` | ``interface`` | ``hooks`` for attention weights and edits of ``z``.
        keep_grad: keep cached values in the autograd graph.

    ``attention_source`` says how attention weights were reached (``interface …`` /
    ``eager …``; empty when no weights were needed).

    Raises:
        InputError: an unknown site (naming the closest names), a layer out of range, a
            weight edit on a model that does not call the attention interface, an edit
            that returns a tensor of another shape (naming both).
        NotApplicable: a site the model does not have (its reason in one line: a parallel
            block has no resid_mid, …), a restart the model does not support.
    """

    def __init__(
        self,
        adapter,
        read: Union[Iterable, Mapping, str, Callable] = (),
        edit: Optional[Mapping] = None,
        *,
        rows: Optional[Sequence[int]] = None,
        restart_from: Optional[Restart] = None,
        stack: Optional[str] = None,
        path: str = "auto",
        keep_grad: bool = False,
    ):
        self.adapter = adapter
        self.keep_grad = keep_grad
        self.cache = Cache(adapter.default_stack)
        self.attention_source = ""
        self._paths: dict[str, str] = {}
        self._path_arg = path
        if path not in ("auto", "interface", "hooks"):
            choose_path(adapter, stack, path)  # raises naming the choices
        readers: list = []
        if isinstance(read, Mapping):
            for key, fn in read.items():
                r = fn if isinstance(fn, Reader) else Reader(fn)
                readers += [(s, r) for s in _expand(adapter, key, stack)]
        else:
            for key in _keys_of(adapter, read, stack):
                readers += [(s, None) for s in _expand(adapter, key, stack)]
        edits: list = []
        for key, value in (edit or {}).items():
            es = [as_edit(e).with_rows(None if rows is None else tuple(rows)) for e in _as_list(value)]
            edits += [(s, es) for s in _expand(adapter, key, stack)]
        self._plan(readers, edits)
        self._restart = self._check_restart(restart_from, stack) if restart_from is not None else None
        self._stubbed: list = []

    # ---- planning: which module, which path ---------------------------------------
    def path_of(self, stack: str) -> str:
        if stack not in self._paths:
            self._paths[stack] = choose_path(self.adapter, stack, self._path_arg)
        return self._paths[stack]

    def _ctx(self, site) -> SiteContext:
        if isinstance(site, ModuleSite):
            return SiteContext(site.label or type(site.module).__name__, "module", -1, "", None)
        return SiteContext(
            site.name(self.adapter.default_stack), site.kind, site.layer, site.stack or "", site.spec.head_axis
        )

    def _reader(self, site: Site, reader: Optional[Reader]) -> Reader:
        if reader is not None:
            return reader
        name = site.label if isinstance(site, ModuleSite) else site.name(self.adapter.default_stack)
        keep = self.keep_grad
        return Reader(lambda v, ctx: self.cache.add(name, v if keep else v.detach()))

    def _plan(self, readers: list, edits: list) -> None:
        # module -> {layer: work}: a module serves one layer, or several called in turn
        # (ALBERT's one layer for all layers: the layer of a call is its place among the
        # module's calls in the forward, :class:`probe.tracing.layer_calls.LayerCalls`)
        self._pattern: dict = {}  # attention module -> {layer: {"read": [(reader, ctx)], "edit": [...], "ctx": ctx}}
        self._z_interface: dict = {}  # attention module -> {layer: (edits, ctx)}: z edited in the attention function
        self._pending: dict = {}
        self._qk: dict = {}  # attention module -> {layer: {kind: work}}: q, k, scores in the attention function
        self._router_shape = False  # a block site is read: record each forward's [batch, seq]
        self._shape: Optional[tuple] = None
        self._hooks_plan: dict = {}  # (module, side) -> {layer: {kind: {"read": [...], "edit": [...], "ctx": ...}}}
        self._served: dict = {}  # module -> the layers it serves, in call order (all of them, wanted or not)
        self._modules: dict = {}  # (module, side) -> work of a ModuleSite: every call of the module
        self.eager = False
        self.interface = False
        for site, es in edits:
            self._add(site, None, es)
        for site, reader in readers:
            self._add(site, self._reader(site, reader), None)
        shared = {m: layers for m, layers in self._served.items() if len(layers) > 1}
        self._calls = LayerCalls.of(shared) if shared else None

    def now(self, plan: dict, module):
        """The work of ``plan`` (module -> {layer: work}) for the call of ``module`` that
        is running: its one layer's, or, for a module several layers call, the layer of
        this call (None: nothing to do on this call)."""
        by_layer = plan.get(module)
        if by_layer is None:
            return None
        if self._calls is None or module not in self._calls.shared_set:
            return next(iter(by_layer.values()))
        return by_layer.get(self._calls.current(module))

    def _serve(self, module, kind: str, stack: str) -> None:
        """Record which layers ``module`` serves for sites of ``kind`` (for layer by call)."""
        if module in self._served:
            return
        n = self.adapter.n_layers_of(stack)
        self._served[module] = [
            layer for layer in range(n) if site_module(self.adapter, Site(kind, layer, stack)) is module
        ]

    def _add(self, site, reader: Optional[Reader], edits: Optional[list]) -> None:
        ctx = self._ctx(site)
        if isinstance(site, ModuleSite):
            work = self._modules.setdefault((site.module, site.side), {"read": [], "edit": [], "ctx": ctx})
            if reader is not None:
                work["read"].append((reader, ctx))
            if edits:
                work["edit"].extend(edits)
            return
        stack = site.stack or self.adapter.default_stack
        why = _refusal(self.adapter, site)
        if why is not None:
            raise NotApplicable(why)
        if _interface_values(self.adapter, site):
            module, side = self.adapter.attention_modules(stack)[site.layer], "interface"
            self._serve(module, "pattern", stack)
        else:
            module, side = site_module(self.adapter, site), site_side(self.adapter, site)
            if site.kind not in MODEL_KINDS:
                self._serve(module, site.kind, stack)
        if side == "interface":
            self.interface = True
            work = self._qk.setdefault(module, {}).setdefault(site.layer, {})
            work = work.setdefault(site.kind, {"read": [], "edit": [], "ctx": ctx})
        elif site.kind == "router" and edits:
            raise InputError(
                f"{ctx.name} is read only: the router's top-k choice is made inside its forward; "
                "edit hook_mlp_in or hook_mlp_out instead"
            )
        elif site.kind == "pattern":
            path = choose_path(self.adapter, stack, "interface") if edits else self.path_of(stack)
            if path == "interface":
                self.interface = True
                work = self._pattern.setdefault(module, {}).setdefault(site.layer, {"read": [], "edit": [], "ctx": ctx})
            else:
                self.eager = True
                work = (
                    self._hooks_plan.setdefault((module, "pattern"), {})
                    .setdefault(site.layer, {})
                    .setdefault("pattern", {"read": [], "edit": [], "ctx": ctx})
                )
        else:
            # router logits, and OPT's MLP (flattened rows), need each forward's [batch, seq]
            self._router_shape = self._router_shape or site.kind in BLOCK_KINDS
            work = (
                self._hooks_plan.setdefault((module, side), {})
                .setdefault(site.layer, {})
                .setdefault(site.kind, {"read": [], "edit": [], "ctx": ctx})
            )
            if site.kind == "z" and edits and self.path_of(stack) == "interface":
                attention = self.adapter.attention_modules(stack)[site.layer]
                self._serve(attention, "pattern", stack)
                self.interface = True
                self._z_interface.setdefault(attention, {})[site.layer] = (edits, ctx)
                work["standby"] = attention  # edited here only when the attention function did not run
        if reader is not None:
            work["read"].append((reader, ctx))
        if edits:
            work["edit"].extend(edits)

    def _check_restart(self, r: Restart, stack: Optional[str]) -> Restart:
        adapter = self.adapter
        if not supports_restart(adapter, stack):
            raise NotApplicable(
                f"layer restart is not supported for {adapter.name} ({adapter.family}); use full forwards"
            )
        self._layers = layer_modules(adapter, stack)
        if len(set(map(id, self._layers))) < len(self._layers):
            raise NotApplicable(f"layer restart is not supported for {adapter.name}: its layers share one module")
        if not 0 <= r.layer < len(self._layers):
            raise InputError(f"layer {r.layer} out of range: {adapter.name} has layers 0..{len(self._layers) - 1}")
        if r.context is not None:
            if not supports_site_restart(adapter, stack):
                raise InputError(f"restart at the output projection needs {adapter.name} in eval mode")
            if tuple(r.context.shape[:2]) != tuple(r.hidden.shape[:2]):
                raise InputError(f"context {tuple(r.context.shape)} does not fit the residual {tuple(r.hidden.shape)}")
            self._attention = adapter.attention_modules(stack)[r.layer]
            self._projection = adapter.head_output_modules(stack)[r.layer]
            # does the attention module's output already include the projection?
            self._projected = any(m is self._projection for m in self._attention.modules())
        return r

    # ---- hooks ------------------------------------------------------------------------
    def _register(self, hooks: HookSet) -> None:
        calls = self._calls
        if calls is not None:  # first: every other hook on a shared module reads the layer of its call
            hooks.pre(self.adapter.model, lambda module, args: calls.reset())
            for m in calls.shared:
                hooks.pre(m, lambda module, args: (calls.advance(module), None)[1])
        if self.eager and _accepts(self.adapter.model, "output_attentions"):
            # DeBERTa-v2, MPNet, …: the modules return their probabilities only when asked
            hooks.pre(self.adapter.model, _ask_for_attentions, with_kwargs=True)
        r = self._restart
        if r is not None:  # first, so that what reads the restarted layer's input sees the cached stream
            for layer in self._layers[: r.layer]:
                self._stub(layer, lambda *a, **k: _hidden(a, k))
            if r.context is not None:
                self._stub(self._attention, self._attention_from_site)
            hooks.pre(self._layers[r.layer], self._replace, with_kwargs=True)
        if self._router_shape:
            hooks.pre(self.adapter.model, self._record_shape, with_kwargs=True)
        for (module, side), by_layer in self._hooks_plan.items():
            if side == "result":
                fns = {layer: self._result_hook(kinds["result"]) for layer, kinds in by_layer.items()}
                hooks.forward(module, self._by_call(module, fns))
            elif side == "pattern":
                fns = {layer: self._pattern_hook(kinds["pattern"]) for layer, kinds in by_layer.items()}
                hooks.forward(module, self._by_call(module, fns), with_kwargs=True)
            elif side == "output":
                fns = {layer: self._output_hook(kinds) for layer, kinds in by_layer.items()}
                hooks.forward(module, self._by_call(module, fns))
            else:
                fns = {layer: self._input_hook(kinds) for layer, kinds in by_layer.items()}
                hooks.pre(module, self._by_call(module, fns), with_kwargs=True)
        for (module, side), work in self._modules.items():
            if side == "input":
                hooks.pre(module, self._module_input_hook(work), with_kwargs=True)
            else:
                hooks.forward(module, self._module_output_hook(work))

    @staticmethod
    def _edited(x: torch.Tensor, work: dict) -> tuple:
        """``(value, changed)``: ``x`` through the work's edits (a copy for edits that write
        in place), then handed to its readers."""
        changed = bool(work["edit"])
        if changed:
            if any(e.in_place for e in work["edit"]):
                x = x.clone()
            for e in work["edit"]:
                x = _checked(e(x, work["ctx"]), x, work["ctx"])
        for reader, c in work["read"]:
            reader.fn(x, c)
        return x, changed

    def _module_input_hook(self, work: dict) -> Callable:
        def fn(module, args, kwargs):
            x, changed = self._edited(_hidden(args, kwargs), work)
            if not changed:
                return None
            return ((x,) + tuple(args[1:]), kwargs) if args else (args, dict(kwargs, hidden_states=x))

        return fn

    def _module_output_hook(self, work: dict) -> Callable:
        def fn(module, args, output):
            x, changed = self._edited(output[0] if isinstance(output, tuple) else output, work)
            if not changed:
                return None
            return (x,) + tuple(output[1:]) if isinstance(output, tuple) else x

        return fn

    def _by_call(self, module, fns: dict) -> Callable:
        """The hook of ``module``: its one layer's, or, for a module several layers call,
        the one of the layer whose call is running (nothing on the calls of other layers)."""
        calls = self._calls
        if calls is None or module not in calls.shared_set:
            return next(iter(fns.values()))

        def fn(mod, *args):
            f = fns.get(calls.current(mod))
            return None if f is None else f(mod, *args)

        return fn

    def _pattern_hook(self, work: dict) -> Callable:
        ctx = work["ctx"]
        adapter = self.adapter

        def fn(module, args, kwargs, output):
            probs = _probabilities(output)
            if probs is None or not torch.is_tensor(probs) or probs.dim() != 4:
                raise unsupported(
                    adapter,
                    f"layer {ctx.layer} returns no attention probabilities under eager attention "
                    "with output_attentions=True",
                )
            hidden = args[0] if args and torch.is_tensor(args[0]) else kwargs.get("hidden_states")
            n_query = hidden.shape[1] if torch.is_tensor(hidden) and hidden.dim() == 3 else probs.shape[-2]
            if probs.shape[-2] != n_query or (ctx.stack != "cross" and probs.shape[-1] != probs.shape[-2]):
                raise unsupported(
                    adapter,
                    f"layer {ctx.layer} returns attention of shape {tuple(probs.shape)} for "
                    f"{n_query} positions, not [batch, head, query, key] (a local band, "
                    "or pooled queries)",
                )
            for reader, c in work["read"]:
                reader.fn(probs, c)

        return fn

    def _input_hook(self, kinds: dict) -> Callable:
        n_heads = self.adapter.n_heads

        adapter = self.adapter

        def fn(module, args, kwargs):
            x = _hidden(args, kwargs)
            flat, x = self._unflatten(x, kinds)
            changed = False
            z_work = kinds.get("z")
            # z edited here unless the attention function already did (interface path), and read here
            edit_here = z_work is not None and z_work["edit"] and not self._pending.pop(z_work.get("standby"), False)
            if (edit_here or (z_work is not None and z_work["read"])) and x.dim() != 3:
                raise unsupported(
                    adapter,
                    f"the output projection's input has shape {tuple(x.shape)}, not [batch, seq, "
                    "heads * head_dim] (windowed 2-D attention, ViTDet): no per-head site to edit",
                    capture=False,
                )
            if edit_here or (z_work is not None and z_work["read"]):
                other = adapter.other_head_columns(z_work["ctx"].stack)  # ConvBERT's convolution half
                if other:
                    from probe.models.architectures import UnsupportedModel

                    raise UnsupportedModel(other)
            if edit_here:
                assert z_work is not None
                b, s, _ = x.shape
                z = split_heads(x, n_heads)
                z = z.clone() if any(e.in_place for e in z_work["edit"]) else z
                for e in z_work["edit"]:
                    z = _checked(e(z, z_work["ctx"]), z, z_work["ctx"])
                x, changed = z.reshape(b, s, -1), True
            for kind in _INPUT_KINDS:
                work = kinds.get(kind)
                if work is not None and work["edit"]:
                    x = x.clone()
                    for e in work["edit"]:
                        x = _checked(e(x, work["ctx"]), x, work["ctx"])
                    changed = True
            if z_work is not None and z_work["read"]:
                z = split_heads(x, n_heads)
                for reader, c in z_work["read"]:
                    reader.fn(z, c)
                if self.keep_grad:  # the projection reads the site's tensor: a gradient there is defined
                    x, changed = z.reshape(x.shape), True
            for kind in _INPUT_KINDS:
                work = kinds.get(kind)
                for reader, c in work["read"] if work is not None else ():
                    reader.fn(x, c)
            if not changed:
                return None
            x = x.reshape(flat) if flat is not None else x
            return ((x,) + tuple(args[1:]), kwargs) if args else (args, dict(kwargs, hidden_states=x))

        return fn

    def _output_hook(self, kinds: dict) -> Callable:
        adapter = self.adapter
        layout = value_layout(adapter) if "v" in kinds else None

        def fn(module, args, output):
            out = output[0] if isinstance(output, tuple) else output
            flat, out = self._unflatten(out, kinds)
            new = out
            for kind in _OUTPUT_KINDS:
                work = kinds.get(kind)
                if work is None:
                    continue
                if work["edit"]:
                    new = new.clone()
                    for e in work["edit"]:
                        new = _checked(e(new, work["ctx"]), new, work["ctx"])
                for reader, c in work["read"]:
                    reader.fn(new, c)
            work = kinds.get("router")
            if work is not None:  # [batch·seq, expert] as the router computes it -> [batch, seq, expert]
                logits = new.reshape(*self._shape, new.shape[-1]) if new.dim() == 2 else new
                for reader, c in work["read"]:
                    reader.fn(logits, c)
            work = kinds.get("v")
            if work is not None:
                v = value_heads(new, adapter.n_heads, adapter.head_dim, layout)
                if work["edit"]:
                    new = _write_values(new, v, work, adapter.n_heads, adapter.head_dim, layout)
                    v = value_heads(new, adapter.n_heads, adapter.head_dim, layout)
                for reader, c in work["read"]:
                    reader.fn(v, c)
            if new is out:
                return None
            new = new.reshape(flat) if flat is not None else new
            return (new,) + tuple(output[1:]) if isinstance(output, tuple) else new

        return fn

    def _unflatten(self, x: torch.Tensor, kinds: dict) -> tuple:
        """``(the flat shape or None, x)``: a block site a layer computes on flattened rows
        ``[batch·seq, d]`` (OPT's MLP) as ``[batch, seq, d]``."""
        if x.dim() != 2 or self._shape is None or not any(k in BLOCK_KINDS for k in kinds):
            return None, x
        return tuple(x.shape), x.reshape(*self._shape, x.shape[-1])

    def _record_shape(self, module, args, kwargs):
        """Model pre-hook: ``[batch, seq]`` of this forward (router logits come flattened)."""
        x = kwargs.get("input_ids", kwargs.get("inputs_embeds"))
        x = x if torch.is_tensor(x) else (args[0] if args else None)
        self._shape = tuple(x.shape[:2])

    def _result_hook(self, work: dict) -> Callable:
        """Forward hook of the output projection: each head's contribution ``result``
        ``[batch, seq, head, d_model]`` (its ``z`` times its slice of the projection); with an
        edit (or gradients kept) the projection's output becomes Σ_h result_h + bias."""
        n_heads = self.adapter.n_heads
        keep = self.keep_grad

        def fn(module, args, output):
            x = _hidden(args, {})
            z = split_heads(x, n_heads)  # [b, s, H, d]
            w = module.weight
            if type(module).__name__ == "Conv1D":  # GPT-2: x @ W, W [H·d, d_model]
                per_head = w.reshape(n_heads, -1, w.shape[-1])
            else:  # Linear: x @ Wᵀ, W [d_model, H·d]
                per_head = w.reshape(w.shape[0], n_heads, -1).permute(1, 2, 0)
            result = torch.einsum("bshd,hdm->bshm", z, per_head.to(z.dtype))
            result, changed = self._edited(result, work)
            if not (changed or keep):
                return None
            out = result.sum(2)
            bias = getattr(module, "bias", None)
            return out + bias if bias is not None else out

        return fn

    # ---- restart ------------------------------------------------------------------------
    def _stub(self, module, forward) -> None:
        saved = module.__dict__.get("forward")
        module.forward = forward
        self._stubbed.append((module, saved))

    def _attention_from_site(self, *args, **kwargs):
        """Stand-in for the attention module's forward: ``(output, None)`` from the site
        (its rows are checked against the batch by :meth:`_replace`, which runs first)."""
        ctx = self._restart.context
        return (self._projection(ctx) if self._projected else ctx), None

    def _replace(self, module, args, kwargs):
        h = _hidden(args, kwargs)
        hidden = self._restart.hidden
        if tuple(h.shape) != tuple(hidden.shape):
            raise InputError(f"cached residual {tuple(hidden.shape)} does not fit the batch {tuple(h.shape)}")
        new = hidden.to(h.dtype)
        if args:
            return (new,) + tuple(args[1:]), kwargs
        return args, dict(kwargs, hidden_states=new)

    # ---- enter / exit -----------------------------------------------------------------
    def __enter__(self) -> "Trace":
        self._context = ExitStack()
        try:
            if self.interface:
                switch = InterfaceSwitch(self.adapter.model)
                self.attention_source = switch.__enter__()
                self._context.push(switch.__exit__)
                session = _Session({m: 0 for m in set(self._pattern) | set(self._z_interface) | set(self._qk)}, self)
                session.attach()
                self._context.callback(session.detach)
            if self.eager:
                self.attention_source = self._context.enter_context(eager_attention(self.adapter.model))
            super().__enter__()
        except BaseException:
            self._unstub()
            self._context.close()
            raise
        return self

    def _unstub(self) -> None:
        while self._stubbed:
            module, saved = self._stubbed.pop()
            if saved is None:
                del module.forward
            else:
                module.forward = saved

    def __exit__(self, *exc) -> Literal[False]:
        try:
            super().__exit__(*exc)
            self._unstub()
        finally:
            self._pending.clear()
            self._context.__exit__(*exc)
        return False


class TraceView:
    """Base of the context managers that are views of a :class:`Trace` (capture, head
    interventions, recorders, gates, reweighting): :meth:`_trace` declares the sites the
    view reads and edits; entering the view enters that trace, leaving it leaves the trace
    (hooks removed, also after an exception)."""

    _active: Optional[Trace] = None

    def _trace(self) -> Trace:
        raise NotImplementedError

    def __enter__(self):
        tr = self._trace()
        tr.__enter__()
        self._active = tr
        self._entered(tr)
        return self

    def _entered(self, tr: Trace) -> None:
        """Called with the entered trace (e.g. to read its ``attention_source``)."""

    def __exit__(self, *exc) -> Literal[False]:
        tr, self._active = self._active, None
        if tr is not None:
            tr.__exit__(*exc)
        return False


def unsupported(adapter, what: str, capture: bool = True):
    """:class:`probe.models.architectures.UnsupportedModel` naming the model and its type:
    ``what`` it does, and (``capture``) that the toolkit cannot capture it."""
    from probe.models.architectures import UnsupportedModel

    t = getattr(adapter.config, "model_type", "?")
    tail = "; the toolkit cannot capture it" if capture else ""
    return UnsupportedModel(f"{adapter.name} (model type {t!r}): {what}{tail}")


def _accepts(model: torch.nn.Module, name: str) -> bool:
    """Whether ``model.forward`` takes keyword ``name`` (or any keyword)."""
    import inspect

    params = inspect.signature(model.forward).parameters.values()
    return any(p.name == name or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def _probabilities(output) -> Optional[torch.Tensor]:
    """The attention probabilities ``[batch, head, query, key]`` in an attention module's
    output tuple: the last 4-D tensor after the attention output (item 0). Most modules
    return ``(output, weights)``; some return their key/value cache after the weights (LED's
    decoder and cross-attention: ``(output, weights, past_key_value)``), which is skipped."""
    if not isinstance(output, tuple):
        return None
    for item in reversed(output[1:]):
        if torch.is_tensor(item) and item.dim() == 4:
            return item
    return None


def _ask_for_attentions(module, args, kwargs):
    """Forward pre-hook: run the model with ``output_attentions=True``."""
    return args, {**kwargs, "output_attentions": True}


def _hidden(args, kwargs):
    return args[0] if args else kwargs["hidden_states"]


#: plain sites on a module's input / output side (the value is the tensor itself)
_INPUT_KINDS = ("resid_pre", "proj_in", "resid_mid", "mlp_in")
_OUTPUT_KINDS = ("resid_post", "attn_out", "mlp_out", "embed", "pos_embed", "ln_final")


def _checked(new, old: torch.Tensor, ctx) -> torch.Tensor:
    """``new`` when it is a tensor of ``old``'s shape, else one line naming both shapes."""
    if not torch.is_tensor(new) or tuple(new.shape) != tuple(old.shape):
        got = tuple(new.shape) if torch.is_tensor(new) else type(new).__name__
        raise InputError(
            f"the edit of {ctx.name} returned {got}, but the site is {tuple(old.shape)} "
            f"{SITE_KINDS[ctx.kind].shape if ctx.kind in SITE_KINDS else ''}: return a tensor of the site's shape"
        )
    return new


def _write_values(
    out: torch.Tensor, v: torch.Tensor, work: dict, n_heads: int, head_dim: int, layout: Optional[tuple]
) -> torch.Tensor:
    """The value projection's output with the value site replaced by its edit."""
    width = out.shape[-1] // (layout[0] if layout else 1)
    if width // head_dim != n_heads:
        raise NotApplicable(
            "edits of the values of a grouped-query model are not supported (its key/value heads "
            "are shared by several query heads); edit hook_z instead"
        )
    v = v.clone()
    for e in work["edit"]:
        v = e(v, work["ctx"])
    flat = v.reshape(out.shape[0], out.shape[1], width).to(out.dtype)
    if layout is None:
        return flat
    parts, index = layout
    pieces = list(out.split(width, dim=-1))
    pieces[index] = flat
    return torch.cat(pieces, dim=-1)


def _batch(adapter, inputs) -> dict:
    """Model inputs from texts, encodings or a ready batch (encoder-decoder: the texts are
    also the decoder's targets, teacher forcing)."""
    if isinstance(inputs, Mapping):
        return dict(inputs)
    items: list = [inputs] if isinstance(inputs, str) else list(inputs)
    if items and not isinstance(items[0], str):  # encodings
        batch = adapter.batch(items)
        if adapter.arch == "encoder-decoder":
            batch.update(adapter.decoder_inputs(adapter.encode_batch([e.text for e in items], target=True)))
        return batch
    return adapter.inputs_of(items)


def trace(
    adapter,
    inputs,
    read: Union[Iterable, Mapping, str, Callable] = (),
    edit: Optional[Mapping] = None,
    *,
    rows: Optional[Sequence[int]] = None,
    restart_from: Optional[Restart] = None,
    stack: Optional[str] = None,
    path: str = "auto",
    keep_grad: bool = False,
    grad: Optional[Callable] = None,
) -> Cache:
    """Run ``adapter``'s model once on ``inputs`` (texts, encodings or a batch dict) with
    ``edit`` applied, and return the :class:`Cache` of ``read`` (shapes in its docstring),
    with ``cache.output`` the model's output. Arguments as :class:`Trace`; ``read`` may also
    be a predicate over site names (``lambda n: n.endswith("hook_q")``: every site the
    model has whose name passes). Without ``keep_grad`` or ``grad`` the forward runs
    without autograd.

    ``grad``: ``fn(output) -> scalar``; the gradient of that scalar at every read site is
    in ``cache.grad(name)`` (same shape as the site), from the same forward.

    Example (TransformerLens: ``model.run_with_hooks(tokens, fwd_hooks=[("blocks.1.attn.hook_z",
    zero_head_2)])``)::

        cache = trace(adapter, ["The cat sat."], edit={"blocks.1.attn.hook_z": Zero(head=2)},
                      read=["blocks.1.hook_resid_post"])
    """
    batch = _batch(adapter, inputs)
    keep = keep_grad or grad is not None
    with (
        Trace(adapter, read, edit, rows=rows, restart_from=restart_from, stack=stack, path=path, keep_grad=keep) as tr,
        torch.set_grad_enabled(keep),
    ):
        out = adapter.model(**batch)
        if grad is not None:
            names = list(tr.cache)
            values = [tr.cache[n] for n in names]
            scalar = grad(out)
            if not torch.is_tensor(scalar) or scalar.numel() != 1:
                raise InputError("grad= must return a scalar tensor of the model's output (e.g. a loss)")
            grads = torch.autograd.grad(scalar, values, allow_unused=True)
            for n, g in zip(names, grads):
                tr.cache.set_grad(n, g)
    tr.cache.output, tr.cache.inputs = out, batch
    return tr.cache


def run_with_cache(adapter, inputs, names: Union[Iterable, str, None] = None, **kwargs) -> tuple:
    """TransformerLens's ``run_with_cache``: ``(output, cache)`` of every site (``names``:
    some sites or kinds)."""
    cache = trace(adapter, inputs, read=available_sites(adapter) if names is None else names, **kwargs)
    return cache.output, cache


def run_with_hooks(adapter, inputs, fwd_hooks: Sequence[tuple] = (), **kwargs):
    """TransformerLens's ``run_with_hooks``: the output with ``fn(value, ctx)`` applied at
    each ``(site, fn)`` of ``fwd_hooks``."""
    edit: dict = {}
    for name, fn in fwd_hooks:
        edit.setdefault(name, []).append(fn)
    return trace(adapter, inputs, edit=edit, **kwargs).output
