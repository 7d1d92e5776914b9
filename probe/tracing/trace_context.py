"""The trace as a context manager: :class:`Trace` reads and edits sites on every forward
inside it (how each site is reached is planned once, at construction), :class:`TraceView`
is the base of the views built on it (capture, head interventions, gates, reweighting), and
:class:`Restart` starts a forward at a layer from a cached stream.

The entry points that run a forward are :mod:`probe.tracing.trace`; the planning of the
keys is :mod:`probe.tracing.site_keys`, the hook functions :mod:`probe.tracing.site_hooks`,
the interface path's work :mod:`probe.tracing.session`.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Optional, Self, Sequence, Union

import torch

from probe.errors import InputError, NotApplicable

from probe.tracing.attention_interface import InterfaceSwitch, choose_path
from probe.tracing.cache import Cache
from probe.tracing.edits import SiteContext, as_edit, check_at_site
from probe.models.hooks import HookContext, HookSet
from probe.tracing.hooks import eager_attention
from probe.tracing.layer_calls import LayerCalls
from probe.tracing.session import TraceSession
from probe.tracing.site_hooks import SiteHooks, accepts_keyword, ask_for_attentions, hidden_of
from probe.tracing.site_keys import ModuleSite, Reader, as_list, expand_key, interface_values, keys_of, refusal
from probe.models.sites import (
    BLOCK_KINDS,
    NORM_KINDS,
    MODEL_KINDS,
    Site,
    site_side,
    layer_modules,
    site_module,
    supports_restart,
    supports_site_restart,
)

if TYPE_CHECKING:
    from probe.models.adapter import ModelAdapter

__all__ = ["Trace", "TraceView", "Restart", "StopForward"]


class StopForward(Exception):
    """Ends a forward inside a :class:`Trace` with ``stop_before`` (the trace swallows it)."""


def site_heads(adapter: ModelAdapter, site: "Site | ModuleSite") -> Optional[int]:
    """The heads on ``site``'s head axis (the key/value heads on ``hook_k`` under grouped-query
    attention; None: the site has no head axis)."""
    if isinstance(site, ModuleSite) or site.spec.head_axis is None:
        return None
    if site.kind == "k":
        c = adapter.config
        kv = getattr(c, "num_key_value_heads", None) or (1 if getattr(c, "multi_query", False) else None)
        return int(kv) if isinstance(kv, int) and kv > 0 else adapter.n_heads
    return adapter.n_heads


def _stop(module: Any, args: Any, kwargs: Any) -> None:
    raise StopForward()


def _stop_after(module: Any, args: Any, output: Any) -> None:
    raise StopForward()


@dataclass(frozen=True)
class Restart:
    """Restart the forward at ``layer`` from ``hidden`` ``[rows, seq, d_model]`` (the
    stream entering it); with ``context`` ``[rows, seq, head·head_dim]`` (the layer's
    clean output-projection input) at its output projection."""

    layer: int
    hidden: torch.Tensor
    context: Optional[torch.Tensor] = None


#: the sites a trace reads but does not edit, with why and what to edit instead
READ_ONLY = {
    **{
        kind: " (computed from the norm's input); edit the stream the norm reads (hook_resid_pre, "
        "hook_resid_mid) instead"
        for kind in NORM_KINDS
    },
    "router": ": the router's top-k choice is made inside its forward; edit hook_mlp_in or hook_mlp_out instead",
}


class Trace(HookContext, SiteHooks):
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
        stop_before: end every forward as this layer is entered (layers before it and the
            embeddings run; nothing after): the sites read before it are in :attr:`cache`,
            the forward returns nothing (the caller's result stays unassigned) and
            :attr:`stopped` says so. A clean run whose output is already known reads only
            what it restarts from (TransformerLens's ``stop_at_layer``, nnsight's ``stop()``).
            The number of layers ends it after the last layer: the final norm and the
            head do not run (what reads the head outputs alone needs no logits).
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
        adapter: ModelAdapter,
        read: Union[Iterable, Mapping, str, Callable] = (),
        edit: Optional[Mapping] = None,
        *,
        rows: Optional[Sequence[int]] = None,
        restart_from: Optional[Restart] = None,
        stop_before: Optional[int] = None,
        stack: Optional[str] = None,
        path: str = "auto",
        keep_grad: bool = False,
    ) -> None:
        self.adapter = adapter
        self.stopped = False
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
                readers += [(s, r) for s in expand_key(adapter, key, stack)]
        else:
            for key in keys_of(adapter, read, stack):
                readers += [(s, None) for s in expand_key(adapter, key, stack)]
        edits: list = []
        for key, value in (edit or {}).items():
            es = [as_edit(e).with_rows(None if rows is None else tuple(rows)) for e in as_list(value)]
            edits += [(s, es) for s in expand_key(adapter, key, stack)]
        for site, es in edits:  # heads, gates and sites checked before the forward
            n_heads = site_heads(adapter, site)
            for e in es:
                check_at_site(e, self._ctx(site), n_heads)
        self._plan(readers, edits)
        self._restart = self._check_restart(restart_from, stack) if restart_from is not None else None
        self._stop_module, self._stop_after_it = (
            self._check_stop(stop_before, stack) if stop_before is not None else (None, False)
        )
        self._stubbed: list = []

    # ---- planning: which module, which path ---------------------------------------
    def path_of(self, stack: str) -> str:
        """How ``stack``'s attention weights and ``z`` edits are reached (``interface`` | ``hooks``), chosen once per stack."""
        if stack not in self._paths:
            self._paths[stack] = choose_path(self.adapter, stack, self._path_arg)
        return self._paths[stack]

    def _ctx(self, site: Site | ModuleSite) -> SiteContext:
        if isinstance(site, ModuleSite):
            return SiteContext(site.label or type(site.module).__name__, "module", -1, "", None)
        return SiteContext(
            site.name(self.adapter.default_stack), site.kind, site.layer, site.stack or "", site.spec.head_axis
        )

    def _reader(self, site: Site, reader: Optional[Reader]) -> Reader:
        if reader is not None:
            return reader
        name = site.label if isinstance(site, ModuleSite) else site.name(self.adapter.default_stack)
        keep, cache = self.keep_grad, self.cache  # not ``self``: a trace → reader → trace cycle kept
        # every read tensor alive until the cyclic collector ran (SmolLM2's batched writes peaked at 2.84 GiB, 1.94 without it)
        return Reader(lambda v, ctx: cache.add(name, v if keep else v.detach()))

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

    def now(self, plan: dict, module: torch.nn.Module) -> Any:
        """The work of ``plan`` (module -> {layer: work}) for the call of ``module`` that
        is running: its one layer's, or, for a module several layers call, the layer of
        this call (None: nothing to do on this call)."""
        by_layer = plan.get(module)
        if by_layer is None:
            return None
        if self._calls is None or module not in self._calls.shared_set:
            return next(iter(by_layer.values()))
        return by_layer.get(self._calls.current(module))

    def _serve(self, module: torch.nn.Module, kind: str, stack: str) -> None:
        """Record which layers ``module`` serves for sites of ``kind`` (for layer by call)."""
        if module in self._served:
            return
        n = self.adapter.n_layers_of(stack)
        self._served[module] = [
            layer for layer in range(n) if site_module(self.adapter, Site(kind, layer, stack)) is module
        ]

    def _add(self, site: Site | ModuleSite, reader: Optional[Reader], edits: Optional[list]) -> None:
        ctx = self._ctx(site)
        if isinstance(site, ModuleSite):
            work = self._modules.setdefault((site.module, site.side), {"read": [], "edit": [], "ctx": ctx})
            if reader is not None:
                work["read"].append((reader, ctx))
            if edits:
                work["edit"].extend(edits)
            return
        stack = site.stack or self.adapter.default_stack
        why = refusal(self.adapter, site)
        if why is not None:
            raise NotApplicable(why)
        if interface_values(self.adapter, site):
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
        elif edits and site.kind in READ_ONLY:
            raise InputError(f"{ctx.name} is read only{READ_ONLY[site.kind]}")
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

    def _check_stop(self, layer: int, stack: Optional[str]) -> tuple:
        """``(module, after)``: the layer a forward stops as it enters, or the last layer a
        forward stops as it leaves (``stop_before`` the number of layers)."""
        layers = layer_modules(self.adapter, stack or self.adapter.default_stack)
        if len(set(map(id, layers))) < len(layers):
            raise NotApplicable(
                f"{self.adapter.name} shares one module between layers: a forward cannot stop before one"
            )
        if not 1 <= int(layer) <= len(layers):
            raise InputError(
                f"a forward can stop before layers 1–{len(layers) - 1} or after the last ({len(layers)}), not {layer}"
            )
        return (layers[-1], True) if int(layer) == len(layers) else (layers[int(layer)], False)

    # ---- hooks ------------------------------------------------------------------------
    def _register(self, hooks: HookSet) -> None:
        calls = self._calls
        if calls is not None:  # first: every other hook on a shared module reads the layer of its call
            hooks.pre(self.adapter.model, lambda module, args: calls.reset())
            for m in calls.shared:
                hooks.pre(m, lambda module, args: (calls.advance(module), None)[1])
        if self.eager and accepts_keyword(self.adapter.model, "output_attentions"):
            # DeBERTa-v2, MPNet, …: the modules return their probabilities only when asked
            hooks.pre(self.adapter.model, ask_for_attentions, with_kwargs=True)
        r = self._restart
        if r is not None:  # first, so that what reads the restarted layer's input sees the cached stream
            for layer in self._layers[: r.layer]:
                self._stub(layer, lambda *a, **k: hidden_of(a, k))
            if r.context is not None:
                self._stub(self._attention, self._attention_from_site)
            hooks.pre(self._layers[r.layer], self._replace, with_kwargs=True)
        if self._stop_module is not None and not self._stop_after_it:
            hooks.pre(self._stop_module, _stop, with_kwargs=True)
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
        if self._stop_after_it:  # last: what reads the last layer's output reads it first
            hooks.forward(self._stop_module, _stop_after)

    # ---- restart ------------------------------------------------------------------------
    def _stub(self, module: torch.nn.Module, forward: Callable) -> None:
        saved = module.__dict__.get("forward")
        module.forward = forward
        self._stubbed.append((module, saved))

    def _attention_from_site(self, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, None]:
        """Stand-in for the attention module's forward: ``(output, None)`` from the site
        (its rows are checked against the batch by :meth:`_replace`, which runs first)."""
        assert self._restart is not None and self._restart.context is not None  # stubbed only for such a restart
        ctx = self._restart.context
        return (self._projection(ctx) if self._projected else ctx), None

    def _replace(self, module: torch.nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        assert self._restart is not None  # hooked only for a restart
        h = hidden_of(args, kwargs)
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
                session = TraceSession(
                    {m: 0 for m in set(self._pattern) | set(self._z_interface) | set(self._qk)}, self
                )
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

    def __exit__(self, *exc: Any) -> bool:
        self.stopped = exc[0] is StopForward and self._stop_module is not None
        if self.stopped:
            exc = (None, None, None)  # the forward ended where it was asked to
        try:
            super().__exit__(*exc)
            self._unstub()
        finally:
            self._pending.clear()
            self._context.__exit__(*exc)
        return self.stopped


class TraceView:
    """Base of the context managers that are views of a :class:`Trace` (capture, head
    interventions, recorders, gates, reweighting): :meth:`_trace` declares the sites the
    view reads and edits; entering the view enters that trace, leaving it leaves the trace
    (hooks removed, also after an exception)."""

    _active: Optional[Trace] = None

    def _trace(self) -> Trace:
        raise NotImplementedError

    def __enter__(self) -> Self:
        tr = self._trace()
        tr.__enter__()
        self._active = tr
        self._entered(tr)
        return self

    def _entered(self, tr: Trace) -> None:
        """Called with the entered trace (e.g. to read its ``attention_source``)."""

    def __exit__(self, *exc: Any) -> bool:
        """Leaves the trace; ``True`` (the exception swallowed) where it stopped a forward
        as asked (:class:`StopForward`)."""
        tr, self._active = self._active, None
        return bool(tr.__exit__(*exc)) if tr is not None else False
