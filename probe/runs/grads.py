"""Attention probabilities together with the gradient of a scalar output with respect to
them, for gradient-weighted attention (Chefer et al., 2021).

One forward with grad enabled inside :class:`probe.runs.capture.AttentionCapture`
(``keep_grad=True``, eager attention), then ``torch.autograd.grad`` of the target with
respect to each layer's probabilities. Torch's global grad mode is restored afterwards,
and no parameter's ``.grad`` is touched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional

import torch

from probe.errors import InputError, NotApplicable

from probe.runs.capture import AttentionCapture
from probe.maps import AttentionMaps

if TYPE_CHECKING:
    from probe.models.adapter import ModelAdapter

__all__ = ["AttentionGradients", "attention_gradients", "default_target"]


@dataclass(frozen=True)
class AttentionGradients:
    """``maps`` (``[layer, head, n, n]``), ``grads`` of the same shape, and the target's
    value and description."""

    maps: AttentionMaps
    grads: torch.Tensor
    target_value: float
    target: str


def default_target(outputs: Any, position: int) -> tuple[torch.Tensor, str]:
    """The scalar explained by default, and its description.

    * a model with ``logits [1, C]`` (sequence classification): the top class's logit;
    * ``logits [1, n, V]`` (language model): the top token's logit at ``position``;
    * otherwise the norm of the last hidden state at ``position``.
    """
    logits = getattr(outputs, "logits", None)
    if logits is not None and logits.dim() == 2:
        c = int(logits[0].argmax())
        return logits[0, c], f"logit of class {c}"
    if logits is not None and logits.dim() == 3:
        v = int(logits[0, position].argmax())
        return logits[0, position, v], f"logit of token id {v} at position {position}"
    h = outputs.last_hidden_state if hasattr(outputs, "last_hidden_state") else outputs[0]
    return h[0, position].norm(), f"norm of the last hidden state at position {position}"


def attention_gradients(
    adapter: ModelAdapter,
    text: str,
    *,
    target: Optional[Callable] = None,
    position: Optional[int] = None,
) -> AttentionGradients:
    """Attention of ``text`` and ``∂target/∂attention`` for every layer.

    Args:
        adapter: a :class:`models.ModelAdapter` of an encoder or decoder model.
        text: one input text.
        target: ``target(outputs) -> (scalar tensor, description)``; default
            :func:`default_target` at ``position``.
        position: output position for the default target ([CLS] = 0 for encoders, the
            last token for decoders when ``None``).

    Returns:
        :class:`AttentionGradients` with ``grads [layer, head, n, n]``.

    Raises:
        ValueError: encoder-decoder models, bad text, a target that is not a scalar.
    """
    if adapter.arch == "encoder-decoder":
        raise NotApplicable("gradient-weighted attention supports encoder or decoder models")
    enc = adapter.encode(text)
    n = len(enc)
    kind = "causal" if adapter.arch == "decoder" else "self"
    if position is None:
        position = n - 1 if kind == "causal" else 0
    if not -n <= position < n:
        raise InputError(f"position {position} out of range 0..{n - 1}")
    inputs = adapter.batch([enc])
    with AttentionCapture(adapter, keep_grad=True) as cap, torch.enable_grad():
        outputs = adapter.model(**inputs)
        value, what = (target or (lambda o: default_target(o, position % n)))(outputs)
        if not torch.is_tensor(value) or value.numel() != 1:
            raise InputError("the target must return a scalar tensor and a description")
        probs = [cap.layer_tensors()[layer] for layer in cap.layers]
        if not all(p.requires_grad for p in probs):
            raise NotApplicable("the attention probabilities are not part of the autograd graph")
        grads = torch.autograd.grad(value.reshape(()), probs, allow_unused=True)
    g = torch.stack([torch.zeros_like(p) if gr is None else gr for p, gr in zip(probs, grads)])
    a = torch.stack([p.detach() for p in probs])
    maps = AttentionMaps(
        attentions=a[:, 0].float(),
        tokens=enc.tokens,
        word_ids=enc.word_ids,
        special_mask=enc.special_mask,
        words=enc.words,
        layers=tuple(cap.layers),
        kind=kind,
        text=text,
        meta={"model": adapter.name, "attention_source": cap.attention_source},
    )
    return AttentionGradients(
        maps=maps, grads=g[:, 0].float().detach(), target_value=float(value.detach()), target=what
    )
