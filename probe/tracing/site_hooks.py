"""The hook functions of a trace (:class:`probe.tracing.trace_context.Trace`): for each
module it hooks, the function that reads and edits the sites it serves on that module's
input (residual stream, output-projection input, per-head ``z``), its output (residual
stream, sublayer outputs, router logits, values), the per-head ``result`` of the output
projection and the attention probabilities under eager attention; and the helpers they
share."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Callable, Optional

import torch

from probe.errors import InputError, NotApplicable
from probe.models.sites import BLOCK_KINDS, SITE_KINDS, split_heads, value_heads, value_layout
from probe.tracing.edits import SiteContext
from probe.tracing.site_keys import unsupported

if TYPE_CHECKING:
    from probe.models.adapter import ModelAdapter
    from probe.tracing.layer_calls import LayerCalls

__all__ = [
    "SiteHooks",
    "INPUT_KINDS",
    "OUTPUT_KINDS",
    "accepts_keyword",
    "probabilities",
    "ask_for_attentions",
    "hidden_of",
    "checked",
    "write_values",
]


class SiteHooks:
    """The hook builders of :class:`probe.tracing.trace_context.Trace` (a base of it): each
    returns the hook of one module for the work planned on it (``{"read": [(reader, ctx)],
    "edit": [edits], "ctx": ctx}`` per site kind)."""

    adapter: ModelAdapter
    keep_grad: bool
    _calls: Optional[LayerCalls]
    _pending: dict
    _shape: Optional[tuple]

    @staticmethod
    def _edited(x: torch.Tensor, work: dict) -> tuple:
        """``(value, changed)``: ``x`` through the work's edits (a copy for edits that write
        in place), then handed to its readers."""
        changed = bool(work["edit"])
        if changed:
            if any(e.in_place for e in work["edit"]):
                x = x.clone()
            for e in work["edit"]:
                x = checked(e(x, work["ctx"]), x, work["ctx"])
        for reader, c in work["read"]:
            reader.fn(x, c)
        return x, changed

    def _module_input_hook(self, work: dict) -> Callable:
        def fn(module: torch.nn.Module, args: tuple, kwargs: dict) -> Optional[tuple]:
            x, changed = self._edited(hidden_of(args, kwargs), work)
            if not changed:
                return None
            return ((x,) + tuple(args[1:]), kwargs) if args else (args, dict(kwargs, hidden_states=x))

        return fn

    def _module_output_hook(self, work: dict) -> Callable:
        def fn(module: torch.nn.Module, args: tuple, output: Any) -> Any:
            x, changed = self._edited(output[0] if isinstance(output, tuple) else output, work)
            if not changed:
                return None
            return (x,) + tuple(output[1:]) if isinstance(output, tuple) else x

        return fn

    def _by_call(self, module: torch.nn.Module, fns: dict) -> Callable:
        """The hook of ``module``: its one layer's, or, for a module several layers call,
        the one of the layer whose call is running (nothing on the calls of other layers)."""
        calls = self._calls
        if calls is None or module not in calls.shared_set:
            return next(iter(fns.values()))

        def fn(mod: torch.nn.Module, *args: Any) -> Any:
            f = fns.get(calls.current(mod))
            return None if f is None else f(mod, *args)

        return fn

    def _pattern_hook(self, work: dict) -> Callable:
        ctx = work["ctx"]
        adapter = self.adapter

        def fn(module: torch.nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
            probs = probabilities(output)
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

    def _check_head_input(self, x: torch.Tensor, z_work: dict) -> None:
        """Refuse an output-projection input ``x`` that is not ``[batch, seq, heads * head_dim]``
        of the heads alone (windowed 2-D attention; ConvBERT's convolution half beside the heads)."""
        if x.dim() != 3:
            raise unsupported(
                self.adapter,
                f"the output projection's input has shape {tuple(x.shape)}, not [batch, seq, "
                "heads * head_dim] (windowed 2-D attention, ViTDet): no per-head site to edit",
                capture=False,
            )
        other = self.adapter.other_head_columns(z_work["ctx"].stack)  # ConvBERT's convolution half
        if other:
            from probe.models.architectures import UnsupportedModel

            raise UnsupportedModel(other)

    def _input_hook(self, kinds: dict) -> Callable:
        n_heads = self.adapter.n_heads

        def fn(module: torch.nn.Module, args: tuple, kwargs: dict) -> Optional[tuple]:
            x = hidden_of(args, kwargs)
            flat, x = self._unflatten(x, kinds)
            changed = False
            z_work = kinds.get("z")
            # z edited here unless the attention function already did (interface path), and read here
            edit_here = z_work is not None and z_work["edit"] and not self._pending.pop(z_work.get("standby"), False)
            if z_work is not None and (edit_here or z_work["read"]):
                self._check_head_input(x, z_work)
            if edit_here:
                assert z_work is not None
                b, s, _ = x.shape
                z = split_heads(x, n_heads)
                z = z.clone() if any(e.in_place for e in z_work["edit"]) else z
                for e in z_work["edit"]:
                    z = checked(e(z, z_work["ctx"]), z, z_work["ctx"])
                x, changed = z.reshape(b, s, -1), True
            for kind in INPUT_KINDS:
                work = kinds.get(kind)
                if work is not None and work["edit"]:
                    x = x.clone()
                    for e in work["edit"]:
                        x = checked(e(x, work["ctx"]), x, work["ctx"])
                    changed = True
            if z_work is not None and z_work["read"]:
                z = split_heads(x, n_heads)
                for reader, c in z_work["read"]:
                    reader.fn(z, c)
                if self.keep_grad:  # the projection reads the site's tensor: a gradient there is defined
                    x, changed = z.reshape(x.shape), True
            for kind in INPUT_KINDS:
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

        def fn(module: torch.nn.Module, args: tuple, output: Any) -> Any:
            out = output[0] if isinstance(output, tuple) else output
            flat, out = self._unflatten(out, kinds)
            new = out
            for kind in OUTPUT_KINDS:
                work = kinds.get(kind)
                if work is None:
                    continue
                if work["edit"]:
                    new = new.clone()
                    for e in work["edit"]:
                        new = checked(e(new, work["ctx"]), new, work["ctx"])
                for reader, c in work["read"]:
                    reader.fn(new, c)
            work = kinds.get("router")
            if work is not None:  # [batch·seq, expert] as the router computes it -> [batch, seq, expert]
                assert self._shape is not None  # recorded by the model pre-hook when a block site is planned
                logits = new.reshape(*self._shape, new.shape[-1]) if new.dim() == 2 else new
                for reader, c in work["read"]:
                    reader.fn(logits, c)
            work = kinds.get("v")
            if work is not None:
                v = value_heads(new, adapter.n_heads, adapter.head_dim, layout)
                if work["edit"]:
                    new = write_values(new, v, work, adapter.n_heads, adapter.head_dim, layout)
                    v = value_heads(new, adapter.n_heads, adapter.head_dim, layout)
                for reader, c in work["read"]:
                    reader.fn(v, c)
            for kind in ("q", "k"):  # a rotary model's projections: before rotary, split into heads
                work = kinds.get(kind)
                if work is None:
                    continue
                heads, changed = self._edited(new.reshape(*new.shape[:-1], -1, adapter.head_dim), work)
                if changed or self.keep_grad:  # the attention reads the site's tensor (edits, gradients)
                    new = heads.reshape(new.shape)
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

    def _record_shape(self, module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        """Model pre-hook: ``[batch, seq]`` of this forward (router logits come flattened)."""
        x = kwargs.get("input_ids", kwargs.get("inputs_embeds"))
        x = x if torch.is_tensor(x) else (args[0] if args else None)
        assert x is not None, "the model was called without input_ids, inputs_embeds or a first argument"
        self._shape = tuple(x.shape[:2])

    def _result_hook(self, work: dict) -> Callable:
        """Forward hook of the output projection: each head's contribution ``result``
        ``[batch, seq, head, d_model]`` (its ``z`` times its slice of the projection); with an
        edit (or gradients kept) the projection's output becomes Σ_h result_h + bias."""
        n_heads = self.adapter.n_heads
        keep = self.keep_grad

        def fn(module: Any, args: tuple, output: Any) -> Optional[torch.Tensor]:  # a Linear or Conv1D
            x = hidden_of(args, {})
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


def accepts_keyword(model: torch.nn.Module, name: str) -> bool:
    """Whether ``model.forward`` takes keyword ``name`` (or any keyword)."""
    params = inspect.signature(model.forward).parameters.values()
    return any(p.name == name or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def probabilities(output: Any) -> Optional[torch.Tensor]:
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


def ask_for_attentions(module: torch.nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """Forward pre-hook: run the model with ``output_attentions=True``."""
    return args, {**kwargs, "output_attentions": True}


def hidden_of(args: tuple, kwargs: dict) -> torch.Tensor:
    """The hidden states ``[batch, seq, d]`` a module is called with: its first argument, else ``hidden_states``."""
    return args[0] if args else kwargs["hidden_states"]


#: plain sites on a module's input / output side (the value is the tensor itself)
INPUT_KINDS = ("resid_pre", "proj_in", "resid_mid", "mlp_in")
OUTPUT_KINDS = ("resid_post", "attn_out", "mlp_out", "embed", "pos_embed", "ln_final")


def checked(new: Any, old: torch.Tensor, ctx: SiteContext) -> torch.Tensor:
    """``new`` when it is a tensor of ``old``'s shape, else one line naming both shapes."""
    if not torch.is_tensor(new) or tuple(new.shape) != tuple(old.shape):
        got = tuple(new.shape) if torch.is_tensor(new) else type(new).__name__
        raise InputError(
            f"the edit of {ctx.name} returned {got}, but the site is {tuple(old.shape)} "
            f"{SITE_KINDS[ctx.kind].shape if ctx.kind in SITE_KINDS else ''}: return a tensor of the site's shape"
        )
    return new


def write_values(
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
