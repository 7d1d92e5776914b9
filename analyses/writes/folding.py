"""The norms folded as TransformerLens folds them, and the unembedding, of one causal LM.

A LayerNorm or RMSNorm is ``y = g ⊙ centre(x) / s(x) + b`` with ``s(x)`` one scalar per
position (``sqrt(var(x) + ε)``; RMSNorm: ``sqrt(mean(x²) + ε)``, no centring, usually no
bias). With the scale ``s`` of the whole residual stream held fixed, the norm is linear in
``x``, so a component ``c`` of the stream contributes ``g ⊙ centre(c) / s`` to the norm's
output (Elhage et al. 2021, "A Mathematical Framework for Transformer Circuits";
TransformerLens's ``apply_ln_to_stack`` / ``fold_ln``). The gain and bias are read by
feeding the module known inputs, so a norm that computes ``(1 + w)`` (Gemma) folds too;
:func:`check_fold` verifies the fold on a real forward before anything uses it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import torch

from probe.errors import NotApplicable

if TYPE_CHECKING:
    from probe.models.adapter import ModelAdapter

__all__ = [
    "NormFold",
    "norm_fold",
    "final_norm",
    "pre_attention_norm",
    "unembedding",
    "check_fold",
    "PRE_ATTENTION_NORMS",
]

#: names of a block's norm before attention (Llama ``input_layernorm``, GPT-2 ``ln_1``, …)
PRE_ATTENTION_NORMS = ("input_layernorm", "ln_1", "ln1", "attention_norm", "input_norm", "norm1", "ln_attn")


@dataclass(frozen=True)
class NormFold:
    """One norm as a linear map at a fixed scale: ``kind`` ``"layer"`` | ``"rms"``, ``gain``
    and ``bias`` ``[d_model]`` (float64), ``eps``."""

    kind: str
    gain: torch.Tensor
    bias: torch.Tensor
    eps: float

    def scale(self, x: torch.Tensor) -> torch.Tensor:
        """``[...]``: the scale the norm divides ``x [..., d_model]`` by."""
        x = x.double()
        if self.kind == "layer":
            return (x.var(-1, unbiased=False) + self.eps).sqrt()
        return (x.pow(2).mean(-1) + self.eps).sqrt()

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        """The norm of ``x [..., d_model]`` from the fold (its own scale), float64."""
        return self.linear(x.double()) / self.scale(x)[..., None] + self.bias

    def linear(self, c: torch.Tensor) -> torch.Tensor:
        """``g ⊙ centre(c)``: the norm's linear part before the division by the scale."""
        c = c.double()
        if self.kind == "layer":
            c = c - c.mean(-1, keepdim=True)
        return c * self.gain

    def direction(self, w: torch.Tensor) -> torch.Tensor:
        """``w' [..., d_model]`` with ``linear(c) · w = c · w'`` for every ``c``: the read
        direction ``w`` with the gain folded in (centred for a LayerNorm)."""
        w = w.double() * self.gain
        return w - w.mean(-1, keepdim=True) if self.kind == "layer" else w


def _eps(module: torch.nn.Module) -> float:
    for attr in ("eps", "variance_epsilon", "epsilon", "layer_norm_eps"):
        v = getattr(module, attr, None)
        if isinstance(v, (int, float)):
            return float(v)
    return 1e-5


def norm_fold(module: torch.nn.Module, d_model: int) -> NormFold:
    """The :class:`NormFold` of a LayerNorm or RMSNorm ``module`` (by its class name),
    its gain and bias read off its outputs on known inputs (zeros give ``b``; a ±1
    alternation of mean 0 gives ``g``).

    Raises:
        NotApplicable: a module that is neither (no fold is defined).
    """
    name = type(module).__name__.lower()
    if "rms" in name:
        kind = "rms"
    elif "layernorm" in name or isinstance(module, torch.nn.LayerNorm):
        kind = "layer"
    else:
        raise NotApplicable(f"{type(module).__name__} is neither a LayerNorm nor an RMSNorm: no fold")
    eps = _eps(module)
    p = next(module.parameters(), None)
    dev, dt = (p.device, p.dtype) if p is not None else (torch.device("cpu"), torch.float32)
    x = torch.ones(d_model, dtype=torch.float64)
    x[1::2] = -1.0
    if d_model % 2:
        x[-1] = 0.0
    with torch.no_grad():
        bias = module(torch.zeros(1, 1, d_model, device=dev, dtype=dt))[0, 0].double().cpu()
        y = module(x.to(device=dev, dtype=dt)[None, None])[0, 0].double().cpu()
    if kind == "rms":
        bias = torch.zeros_like(bias)  # 0/sqrt(eps) = 0: an RMSNorm's output at zero is its bias
    var = x.pow(2).mean()
    gain = (y - bias) * x * (var + eps).sqrt() / torch.where(x == 0, 1.0, x * x)
    if d_model % 2:  # the last entry was 0: read its gain from a second input
        x2 = torch.zeros(d_model, dtype=torch.float64)
        x2[-1], x2[0] = 1.0, -1.0
        with torch.no_grad():
            y2 = module(x2.to(device=dev, dtype=dt)[None, None])[0, 0].double().cpu()
        gain[-1] = (y2[-1] - bias[-1]) * (x2.pow(2).mean() + eps).sqrt()
    return NormFold(kind, gain, bias, eps)


def final_norm(adapter: ModelAdapter) -> tuple:
    """``(module, NormFold)`` of the final norm of ``adapter``'s model.

    Raises:
        NotApplicable: no final norm (post-norm encoders such as BERT: their stream is not
            a sum of the components) or one that is not a LayerNorm/RMSNorm.
    """
    from probe.models.block_parts import layout_of, model_part

    layout = layout_of(adapter)
    if layout is not None and layout.post_norms:
        raise NotApplicable(
            f"{adapter.name} is post-norm: its residual stream is LayerNorm(resid + block output), not a sum of "
            "what each head and MLP writes, so no direct logit attribution is defined"
        )
    module = model_part(adapter, "ln_final")
    return module, norm_fold(module, int(adapter.config.hidden_size))


def pre_attention_norm(adapter: ModelAdapter, layer: int) -> NormFold:
    """The :class:`NormFold` of the norm ``layer``'s attention reads the stream through.

    Raises:
        NotApplicable: the block has no child named as in :data:`PRE_ATTENTION_NORMS`.
    """
    from probe.models.sites import layer_modules

    block = layer_modules(adapter)[layer]
    children = dict(block.named_children())
    for name in PRE_ATTENTION_NORMS:
        if name in children:
            return norm_fold(children[name], int(adapter.config.hidden_size))
    raise NotApplicable(
        f"{adapter.name}: no pre-attention norm in block {type(block).__name__} "
        f"(looked for {', '.join(PRE_ATTENTION_NORMS)})"
    )


def unembedding(adapter: ModelAdapter) -> tuple:
    """``(W_U [vocab, d_model], b_U [vocab] or None)`` of the model's language-model head.

    Raises:
        NotApplicable: the model has no unembedding (an encoder or decoder loaded without a
            language-model head): there are no logits to attribute.
    """
    head = adapter.model.get_output_embeddings() if hasattr(adapter.model, "get_output_embeddings") else None
    w = getattr(head, "weight", None)
    if head is None or w is None:
        raise NotApplicable(
            f"{adapter.name} ({type(adapter.model).__name__}) has no unembedding (no language-model head): there are "
            "no logits to attribute; load it with its LM head (a *ForCausalLM or *ForMaskedLM checkpoint)"
        )
    bias: Optional[torch.Tensor] = getattr(head, "bias", None)
    return w.detach(), (bias.detach() if isinstance(bias, torch.Tensor) else None)


def check_fold(
    adapter: ModelAdapter, fold: NormFold, resid: torch.Tensor, normed: torch.Tensor, logits: torch.Tensor
) -> None:
    """Refuse unless the fold reproduces the final norm on ``resid [seq, d]`` (``normed``)
    and the unembedding of ``normed`` gives ``logits [seq, vocab]`` (a model whose logits
    are soft-capped, scaled or go through an MLM transform is not a linear read-out).

    Raises:
        NotApplicable: either does not hold to 1e-3 of the values' scale.
    """
    got = fold.apply(resid)
    tol = 1e-3 * max(1.0, float(normed.abs().max()))
    if float((got - normed.double()).abs().max()) > tol:
        raise NotApplicable(
            f"{adapter.name}: the final norm is not g ⊙ centre(x)/s(x) + b of the residual stream (max "
            f"|Δ| {float((got - normed.double()).abs().max()):.2g}): no folded attribution"
        )
    w_u, b_u = unembedding(adapter)
    # in float32 at least (its rounding is far under the 1e-3 tolerance; float32 weights are not
    # copied): a float64 copy of SmolLM2's 49,152 × 576 unembedding per text was 40% of the writes section
    dt = torch.promote_types(w_u.dtype, torch.float32)
    out = normed.to(dt) @ w_u.to(dt).T[:, : logits.shape[-1]] + (0 if b_u is None else b_u.to(dt))
    tol = 1e-3 * max(1.0, float(logits.abs().max()))
    if out.shape != logits.shape or float((out - logits.to(dt)).abs().max()) > tol:
        raise NotApplicable(
            f"{adapter.name}: its logits are not the unembedding of the final norm's output (a transform, scale or "
            "soft-cap between them): the logit is not a sum of the components' parts"
        )
