"""Capture and intervene inside transformers' attention interface.

transformers 5 routes the attention of most models through one pluggable function, chosen
by ``config._attn_implementation`` from ``ALL_ATTENTION_FUNCTIONS`` (the
``AttentionInterface`` registry). That function receives every head's queries, keys and
values ``[batch, heads, seq, head_dim]`` (rotary embeddings already applied), the
additive mask (padding, causality, sliding windows; ALiBi lives in the mask or in
``position_bias``), the scaling and optional soft-capping, and returns the per-head
output ``[batch, query, heads, head_dim]`` *before* the output projection. It is the one
place where attention can be both recorded and edited for every model that uses it.

This module registers :func:`probe_attention_forward` under :data:`INTERFACE_NAME` (with
transformers' eager mask builder for it). :class:`InterfaceSwitch` selects it for the
duration of a capture or intervention and restores the model's own setting afterwards.
Work is attached to attention modules as *sessions* (:class:`AttentionSession`),
registered in a weak per-module table and removed on exit — like hook handles, nothing
lingers and nested sessions compose.

:func:`eager_attention` is the toolkit's own implementation of what transformers'
``eager_attention_forward`` functions compute (scaling, additive mask, soft-capping as in
Gemma 2, learned sinks as in gpt-oss, T5's ``position_bias``, grouped/multi-query key-value
sharing, dropout only in training); ``tests/test_coverage.py`` checks it against each
architecture's own eager ``output_attentions``. Layers no session needs weights from run
through PyTorch's SDPA (same function, no ``[query, key]`` matrix kept), so capturing one
layer of a long input costs one layer's map.
"""

from __future__ import annotations

import sys
import weakref
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

import torch

from probe.errors import InputError

if TYPE_CHECKING:
    from probe.models.adapter import ModelAdapter
    from probe.tracing.layer_calls import LayerCalls

INTERFACE_NAME = "probe_eager"
_SESSIONS: "weakref.WeakKeyDictionary[torch.nn.Module, list]" = weakref.WeakKeyDictionary()
_REGISTERED = False
_PREVIOUS: dict[int, str] = {}
_CONFIGS: "weakref.WeakKeyDictionary[torch.nn.Module, dict]" = (
    weakref.WeakKeyDictionary()
)  # id(config) -> the implementation it had before the switch


def register() -> str:
    """Register :func:`probe_attention_forward` (and the eager mask builder) in
    transformers' ``AttentionInterface`` under :data:`INTERFACE_NAME`; idempotent."""
    global _REGISTERED
    if not _REGISTERED:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, eager_mask

        AttentionInterface.register(INTERFACE_NAME, probe_attention_forward)
        AttentionMaskInterface.register(INTERFACE_NAME, eager_mask)
        _REGISTERED = True
    return INTERFACE_NAME


def calls_interface(module: torch.nn.Module) -> bool:
    """True when ``module``'s forward dispatches attention through ``ALL_ATTENTION_FUNCTIONS``
    (transformers 5's functional attention)."""
    mod = sys.modules.get(type(module).__module__)
    if mod is None or "ALL_ATTENTION_FUNCTIONS" not in vars(mod):
        return False
    # the module's own forward looks the function up (BigBird-Pegasus's encoder attention,
    # in a file whose decoder uses the interface, does not)
    import inspect

    code = getattr(inspect.unwrap(type(module).forward), "__code__", None)
    return code is None or "ALL_ATTENTION_FUNCTIONS" in code.co_names


def uses_interface(model: torch.nn.Module, attention_modules: Sequence[torch.nn.Module]) -> bool:
    """True when ``model`` can switch its attention implementation at run time and every
    module in ``attention_modules`` calls the interface."""
    can_set = getattr(type(model), "_can_set_attn_implementation", None)
    if can_set is None or not can_set():
        return False
    return all(calls_interface(m) for m in attention_modules)


def attention_path(adapter: ModelAdapter, stack: Optional[str] = None) -> str:
    """``"interface"`` when the adapter's attention modules of ``stack`` call transformers'
    attention interface, else ``"hooks"`` (forward hooks on the modules, eager switch)."""
    return "interface" if uses_interface(adapter.model, adapter.attention_modules(stack)) else "hooks"


def choose_path(adapter: ModelAdapter, stack: Optional[str], path: str) -> str:
    """Resolve ``path`` (``auto`` | ``interface`` | ``hooks``) for ``adapter``.

    Raises:
        ValueError: an unknown path, or ``interface`` for a model that does not use it.
    """
    if path not in ("auto", "interface", "hooks"):
        raise InputError(f"unknown attention path {path!r}; use auto, interface or hooks")
    found = attention_path(adapter, stack)
    if path == "interface" and found != "interface":
        raise InputError(
            f"{adapter.name} does not route attention through transformers' attention "
            "interface; use path='hooks' (or 'auto')"
        )
    return found if path == "auto" else path


def repeat_kv(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """``[batch, kv_heads, seq, d]`` → ``[batch, n_heads, seq, d]`` by repeating each key/value
    head ``n_heads // kv_heads`` times (grouped- and multi-query attention; Ainslie et al. 2023)."""
    b, kv, s, d = x.shape
    if kv == n_heads:
        return x
    return x[:, :, None].expand(b, kv, n_heads // kv, s, d).reshape(b, n_heads, s, d)


def eager_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Optional[torch.Tensor],
    scaling: Optional[float] = None,
    dropout: float = 0.0,
    softcap: Optional[float] = None,
    position_bias: Optional[torch.Tensor] = None,
    out: Optional[torch.Tensor] = None,
    on_scores: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The attention weights and per-head output, as transformers' eager functions compute them.

    Args:
        query: ``[batch, heads, q, d]``; key, value: ``[batch, kv_heads, k, d]``.
        attention_mask: additive ``[batch | 1, 1 | heads, q, ≥k]`` or None.
        scaling: score factor (default ``d ** -0.5``); softcap: Gemma 2's
            ``tanh(s / c) · c`` on the scaled scores; position_bias: T5's additive bias.
        module: the calling attention module (``sinks``: gpt-oss's learned per-head sink
            logit, a softmax column that is dropped afterwards); a ``sinks`` keyword
            ``[batch, heads, q, 1]`` (Inkling 2) is such a column given by the caller.
        out: optional contiguous ``[batch, heads, q, k]`` tensor of the scores' dtype and
            device to compute the weights in (a capture's buffer: the weights then need
            no copy); ignored where it does not fit or autograd needs the scores.
        on_scores: optional ``fn(scores) -> scores``: called with the scaled, soft-capped,
            masked scores ``[batch, heads, q, k]`` before the softmax (TransformerLens's
            ``hook_attn_scores``); what it returns goes into the softmax (never written over).

    Returns:
        ``(output [batch, q, heads, d], weights [batch, heads, q, k])``.
    """
    n_heads = query.shape[1]
    key, value = repeat_kv(key, n_heads), repeat_kv(value, n_heads)
    if scaling is None:
        scaling = query.shape[-1] ** -0.5
    # in place where the result has the scores' shape: each out-of-place step of a long
    # input allocates (and page-faults) another [batch, heads, q, k] tensor; same values
    key_t = key.transpose(-1, -2)
    if out is not None and _fits(out, query, key_t):
        scores = torch.matmul(query, key_t, out=out).mul_(scaling)
    else:
        scores = torch.matmul(query, key_t).mul_(scaling)
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    if position_bias is not None:
        scores = scores + position_bias
    if attention_mask is not None:
        mask = attention_mask[..., : key.shape[-2]]
        in_place = mask.dtype == scores.dtype and _broadcasts_to(mask.shape, scores.shape)
        scores = scores.add_(mask) if in_place else scores + mask
    if on_scores is not None:
        scores = on_scores(scores)
    sinks = kwargs.get("sinks")
    sinks = sinks if torch.is_tensor(sinks) else getattr(module, "sinks", None)
    if torch.is_tensor(sinks):  # one extra logit per query (a column of the softmax, dropped after)
        sink = (sinks.reshape(1, -1, 1, 1) if sinks.dim() == 1 else sinks).to(scores.dtype)
        sink = sink.expand(scores.shape[0], scores.shape[1], scores.shape[2], 1)
        logits = torch.cat([scores, sink], dim=-1)
        logits = logits - logits.max(dim=-1, keepdim=True).values
        weights = torch.softmax(logits, dim=-1)[..., :-1]
    elif (
        on_scores is None
        and scores.device.type == "cpu"
        and scores.dtype == torch.float32
        and scores.is_contiguous()
        and not (torch.is_grad_enabled() and scores.requires_grad)
    ):
        # same kernel, written over the scores (no third [b, h, q, k] tensor; the CPU
        # last-dim kernel reads each row before writing it — tests check equality)
        weights = torch.ops.aten.softmax.int_out(scores, -1, None, out=scores).to(query.dtype)
    else:  # float32 softmax for half precision, as transformers does; float64 stays float64
        work = torch.float64 if scores.dtype == torch.float64 else torch.float32
        weights = torch.softmax(scores, dim=-1, dtype=work).to(query.dtype)
    if dropout and module.training:
        weights = torch.nn.functional.dropout(weights, p=dropout, training=True)
    weights = weights.to(value.dtype)
    output = torch.matmul(weights, value).transpose(1, 2).contiguous()
    return output, weights


def _broadcasts_to(shape: tuple, target: tuple) -> bool:
    """Whether ``shape`` broadcasts to ``target`` unchanged (same rank, each size equal or 1).
    ``torch.broadcast_shapes`` says the same in ~130 µs, a per-layer cost at small n."""
    return len(shape) == len(target) and all(a == b or a == 1 for a, b in zip(shape, target))


def _fits(out: torch.Tensor, query: torch.Tensor, key_t: torch.Tensor) -> bool:
    """Whether ``query @ key_t`` can be written into ``out`` as is: same shape, dtype and
    device, contiguous, and no gradient to record (``out=`` does not support autograd)."""
    shape = tuple(query.shape[:-1]) + (key_t.shape[-1],)
    return (
        tuple(key_t.shape[:-2]) == shape[:-2]
        and tuple(out.shape) == shape
        and out.dtype == query.dtype
        and out.device == query.device
        and out.is_contiguous()
        and not (torch.is_grad_enabled() and (query.requires_grad or key_t.requires_grad))
    )


def _fast_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Optional[torch.Tensor],
    **kwargs: Any,
) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """The output without materialising the weights (PyTorch SDPA), where that computes
    the same function (no soft-capping, no sinks) and the model did not run eager before
    the switch (then it stays eager, so layers no one records compute what they did)."""
    previous = _PREVIOUS.get(id(getattr(module, "config", None)), "sdpa")
    if (
        previous == "eager"
        or kwargs.get("softcap") is not None
        or torch.is_tensor(getattr(module, "sinks", None))
        or torch.is_tensor(kwargs.get("sinks"))
    ):
        return eager_attention(module, query, key, value, attention_mask, **kwargs)
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    kwargs.pop("output_attentions", None)
    if attention_mask is not None:
        attention_mask = attention_mask[..., : key.shape[-2]]
    if query.shape[1] != key.shape[1] and not hasattr(module, "num_key_value_groups"):
        key, value = repeat_kv(key, query.shape[1]), repeat_kv(value, query.shape[1])
    return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)


def probe_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Optional[torch.Tensor],
    **kwargs: Any,
) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """The function registered as :data:`INTERFACE_NAME`: eager attention where a session
    (or ``output_attentions``) needs the weights, SDPA elsewhere; then each session attached
    to ``module`` may record or replace the weights and edit the per-head output."""
    sessions = _SESSIONS.get(module, ())
    for s in list(sessions):  # queries, keys, values as the attention function receives them
        edited_qkv = s.on_qkv(module, query, key, value)
        if edited_qkv is not None:
            query, key, value = edited_qkv
    scorers = [s for s in sessions if s.needs_scores(module)]
    if scorers:

        def on_scores(scores: torch.Tensor) -> torch.Tensor:
            for s in scorers:
                scores = s.on_scores(module, scores)
            return scores

        kwargs = dict(kwargs, on_scores=on_scores)
    want = kwargs.get("output_attentions", False) or bool(scorers) or any(s.needs_weights(module) for s in sessions)
    if not want:
        output, weights = _fast_attention(module, query, key, value, attention_mask, **kwargs)
    else:
        shape = (query.shape[0], query.shape[1], query.shape[2], key.shape[2])
        out = next(
            (o for o in (s.weights_out(module, shape, query.dtype, query.device) for s in sessions) if o is not None),
            None,
        )
        output, weights = eager_attention(module, query, key, value, attention_mask, out=out, **kwargs)
    for s in list(sessions):
        if weights is not None:
            new = s.on_weights(module, weights, attention_mask)
            if new is not None:  # reweighted heads: recompute their output from the values
                v = repeat_kv(value, query.shape[1]).to(new.dtype)
                output = torch.matmul(new, v).transpose(1, 2).contiguous().to(output.dtype)
                weights = new
        edited = s.on_output(module, output)
        if edited is not None:
            output = edited
    return output, weights


class AttentionSession:
    """Work attached to attention modules while a capture or intervention is active.

    Subclasses override :meth:`needs_weights`, :meth:`on_weights` (record; or return new
    weights ``[batch, heads, q, k]`` to replace them) and :meth:`on_output` (return an edited
    per-head output ``[batch, q, heads, d]`` or None). ``self.layer_of`` maps each attached
    module to its layer index (from the adapter's module list).
    """

    def __init__(self, layer_of: "dict | LayerCalls") -> None:
        self.layer_of = layer_of

    def needs_weights(self, module: torch.nn.Module) -> bool:
        """Whether this session needs ``module``'s weights ``[batch, heads, q, k]`` computed (not SDPA)."""
        return False

    def weights_out(
        self, module: torch.nn.Module, shape: tuple, dtype: torch.dtype, device: torch.device
    ) -> Optional[torch.Tensor]:
        """A tensor of ``shape`` ``[batch, heads, q, k]`` the weights of ``module`` may be
        computed in (saves the session a copy), or None."""
        return None

    def on_weights(
        self, module: torch.nn.Module, weights: torch.Tensor, mask: Optional[torch.Tensor]
    ) -> Optional[torch.Tensor]:
        """Read (or return edited) weights ``[batch, heads, q, k]``; None leaves them as they are."""
        return None

    def on_qkv(
        self, module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor
    ) -> Optional[tuple]:
        """Read (or return edited) ``(query [batch, heads, q, d], key, value [batch,
        kv_heads, k, d])`` as the attention function receives them (after rotary), or None."""
        return None

    def needs_scores(self, module: torch.nn.Module) -> bool:
        """Whether this session reads or edits ``module``'s pre-softmax scores."""
        return False

    def on_scores(self, module: torch.nn.Module, scores: torch.Tensor) -> torch.Tensor:
        """The pre-softmax scores ``[batch, heads, q, k]`` (masked), read or edited."""
        return scores

    def on_output(self, module: torch.nn.Module, output: torch.Tensor) -> Optional[torch.Tensor]:
        """Return an edited per-head output ``[batch, seq, head, head_dim]``, or None."""
        return None

    def attach(self) -> None:
        """Start receiving the calls of the model's attention functions."""
        for m in self.layer_of:
            _SESSIONS.setdefault(m, []).append(self)

    def detach(self) -> None:
        """Stop receiving them."""
        for m in self.layer_of:
            lst = _SESSIONS.get(m)
            if lst is not None:
                if self in lst:
                    lst.remove(self)
                if not lst:
                    del _SESSIONS[m]


def active_sessions(model: torch.nn.Module) -> int:
    """Number of sessions attached to modules of ``model`` (0 after every block exits)."""
    return sum(len(_SESSIONS.get(m, ())) for m in model.modules())


class InterfaceSwitch:
    """Select :data:`INTERFACE_NAME` as ``model``'s attention implementation inside the
    block and restore the previous one on exit (also after an exception).

    The switch sets the field ``set_attn_implementation`` would set
    (``config._attn_implementation_internal``) on every config the model's modules hold
    (sub-models included), which costs microseconds instead of the milliseconds of the
    full checks (the model was checked by :func:`uses_interface`); an interventions sweep
    enters it once per batch.
    """

    def __init__(self, model: Any) -> None:
        self.model = model
        self.previous: Optional[str] = None
        self._configs: dict = {}

    def __enter__(self) -> str:
        register()
        self.previous = self.model.config._attn_implementation
        if self.previous == INTERFACE_NAME:
            return "interface"
        configs = _CONFIGS.get(self.model)
        if configs is None:  # walking the modules costs milliseconds: once per model
            configs = {}
            for m in self.model.modules():
                cfg = m.__dict__.get("config")
                if cfg is not None and hasattr(cfg, "_attn_implementation_internal"):
                    configs[id(cfg)] = cfg
            _CONFIGS[self.model] = configs
        self._configs = {key: (cfg, cfg._attn_implementation_internal) for key, cfg in configs.items()}
        for key, (cfg, _before) in self._configs.items():
            _PREVIOUS[key] = cfg._attn_implementation
            cfg._attn_implementation_internal = INTERFACE_NAME
        return f"interface (switched from {self.previous})"

    def __exit__(self, *exc: object) -> bool:
        for key, (cfg, before) in self._configs.items():
            cfg._attn_implementation_internal = before
            _PREVIOUS.pop(key, None)
        self._configs = {}
        return False
