"""Whether a model's texts may share a padded batch, found at load: :func:`padding_check`.

A right-padded row equals its text alone when the padding is masked out of every layer.
Layers that mix positions without the attention mask let padding leak into a text's real
positions, so a text's maps and outputs depend on its batch-mates: convolutions over the
sequence (ConvBERT's span-based dynamic convolution, Jiang et al. 2020; Nyströmformer's
depthwise convolution on the values, Xiong et al. 2021). Such a model runs **one length
per batch** (:data:`ONE_LENGTH`): texts of one token length need no padding.

The check is structural first (a walk over the modules for a convolution whose kernel spans
more than one position: no forward), and only where it finds one is the leak measured,
on two short rows of token ids (:func:`output_leak`): a masked convolution (one that zeroes
the padding first) is then not flagged, and the card states the measured size.
"""

from __future__ import annotations

import math
from typing import Any, Hashable, Iterable, Iterator, Optional, Sequence

import torch

__all__ = [
    "ANY_LENGTHS",
    "ONE_LENGTH",
    "LEAK_TOLERANCE",
    "sequence_convolutions",
    "main_output",
    "output_leak",
    "layer_prefixes",
    "padding_check",
    "one_length_batches",
]

#: texts of any lengths share a padded batch (padding is masked out everywhere)
ANY_LENGTHS = "any lengths"
#: the padding leaks into real positions: a batch holds texts of one token length only
ONE_LENGTH = "one length per batch"
#: above this max |Δ| (relative to the outputs' scale, float32) a text's outputs depend on
#: its batch-mates; float32 noise between batch shapes is ~1e-6
LEAK_TOLERANCE = 1e-4
_CONVOLUTIONS = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)


def sequence_convolutions(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """``(name, module)`` of each convolution whose kernel spans more than one position (a
    kernel of 1 is a per-position linear map: SqueezeBERT's). In a text model the only axis
    such a kernel can slide over is the sequence."""
    return [
        (name, m) for name, m in model.named_modules() if isinstance(m, _CONVOLUTIONS) and math.prod(m.kernel_size) > 1
    ]


def main_output(out: Any) -> torch.Tensor:
    """The per-position output of a forward: ``logits``, else ``last_hidden_state``, else
    the first element (``[batch, seq, ...]``)."""
    for key in ("logits", "last_hidden_state"):
        v = getattr(out, key, None)
        if torch.is_tensor(v):
            return v
    return out[0]


def output_leak(model: torch.nn.Module, batch: dict, alone: dict) -> tuple[float, float]:
    """``(max |Δ|, max |output|)`` of row 0 on its real positions between the padded
    ``batch`` and ``alone`` (its own unpadded forward), both model inputs."""
    with torch.no_grad():
        together = main_output(model(**batch))[0]
        own = main_output(model(**alone))[0]
    n = own.shape[0]
    own = own.float()
    return float((together[:n].float() - own).abs().max()), float(own.abs().max())


def _probe_rows(model: torch.nn.Module, pad_id: int) -> Optional[tuple[dict, dict]]:
    """A right-padded batch of a 3-token row and a 6-token row, and the short row alone;
    None when the config names no vocabulary large enough."""
    cfg = getattr(model, "config", None)
    vocab = getattr(cfg, "vocab_size", None) or getattr(getattr(cfg, "text_config", None), "vocab_size", None)
    if not isinstance(vocab, int) or vocab < 20:
        return None
    device = next(model.parameters()).device
    long = torch.arange(10, 16, device=device)
    short = torch.full_like(long, pad_id)
    short[:3] = long[:3] + 1
    mask = torch.ones(2, 6, dtype=torch.long, device=device)
    mask[0, 3:] = 0
    batch = {"input_ids": torch.stack([short, long]), "attention_mask": mask}
    alone = {"input_ids": short[None, :3], "attention_mask": mask[:1, :3]}
    return batch, alone


def layer_prefixes(names: Iterable[str]) -> tuple[str, ...]:
    """The layer each named module sits in: its name up to its first numeric part
    (``encoder.layer.3.attention.self`` -> ``encoder.layer.3.``)."""
    out = []
    for name in names:
        parts = name.split(".")
        k = next((i for i, p in enumerate(parts) if p.isdigit()), None)
        if k is not None:
            out.append(".".join(parts[: k + 1]) + ".")
    return tuple(dict.fromkeys(out))


def padding_check(model: torch.nn.Module, pad_id: int, layers: Sequence[str] = ()) -> Optional[str]:
    """Why ``model`` (a text model) must run one length per batch, or None when padded
    batches are exact. Structural (:func:`sequence_convolutions`), then, where a convolution
    is found, measured on two rows of token ids (:func:`output_leak`, right padding as the
    toolkit pads); a forward that cannot run on ids alone (a model that needs pixels or a
    fixed length) leaves the structural verdict, for convolutions inside the ``layers``
    (:func:`layer_prefixes` of the attention modules; all where none are given): one length
    per batch costs speed, never exactness, and a vision tower's patch convolution (Florence-2,
    ViLT) says nothing of the text's padding.
    """
    found = sequence_convolutions(model)
    if not found:
        return None
    name, conv = found[0]
    what = f"{type(conv).__name__} {name} (kernel {tuple(conv.kernel_size)}"  # type: ignore[arg-type]
    what += f", and {len(found) - 1} more)" if len(found) > 1 else ")"
    rows = None if getattr(getattr(model, "config", None), "is_encoder_decoder", False) else _probe_rows(model, pad_id)
    measured = "not measured"
    if rows is not None:
        try:
            leak, scale = output_leak(model, *rows)
        except Exception as e:  # needs more than ids (a fixed length, pixels): the structural verdict stands
            measured = f"not measured: a forward on ids alone raises {type(e).__name__}"
        else:
            low = next(model.parameters()).dtype not in (torch.float32, torch.float64)
            if leak <= (1e-2 if low else LEAK_TOLERANCE) * max(scale, 1.0):
                return None  # the convolution sees no padding (masked, or causal under right padding)
            measured = f"a right-padded row's outputs move by {leak:.3g} (of {scale:.3g})"
    if measured.startswith("not measured") and layers and not any(n.startswith(tuple(layers)) for n, _ in found):
        return None
    return f"its layers mix positions outside the attention mask: {what}; {measured}"


def one_length_batches(batches: Iterable[Sequence[int]], lengths: Sequence[Hashable]) -> Iterator[list[int]]:
    """Each batch of example indices split into groups of one token length (``lengths[k]``:
    example ``k``'s, a number or a tuple such as (source, target) lengths), in the order each
    length first appears; a batch of one length as is. Callers place results by index, so
    the output order is kept."""
    for batch in batches:
        groups: dict[Hashable, list[int]] = {}
        for k in batch:
            groups.setdefault(lengths[k], []).append(k)
        yield from groups.values()
