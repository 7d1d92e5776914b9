"""Where the residual-stream sites of a block live, per model type: data, not classes.

TransformerLens (Nanda & Bloom 2022) names the tensors of a transformer block
``hook_attn_out``, ``hook_mlp_in``, ``hook_mlp_out``, ``hook_resid_mid``, and those of the
model ``hook_embed``, ``hook_pos_embed`` and ``ln_final.hook_normalized``. Each row below
says, for one ``config.model_type``, which module inside the block (a path relative to the
block module) holds each, and on which side (``input`` | ``output``). A site a layout
lacks holds the reason instead, refused in one line by :func:`part_of`:

* parallel blocks (GPT-NeoX/Pythia with ``use_parallel_residual``, Phi, GPT-J): attention
  and MLP both read ``resid_pre``; there is no stream between them (no ``resid_mid``);
* post-norm encoders (BERT): the stream after attention is ``LayerNorm(resid_pre +
  attn_out)``, not a sum, and there is no final norm.

Differences from TransformerLens, stated once: ``hook_mlp_in`` here is the MLP module's
input (after the block's pre-MLP norm); TransformerLens's is the stream before that norm
(our ``hook_resid_mid``). ``hook_attn_out`` and ``hook_mlp_out`` are what is added to the
stream: in Gemma 2/3, after the post-attention / post-feed-forward norms. MoE blocks
(Mixtral, Qwen-MoE) also have ``mlp.hook_router_logits`` ``[batch, seq, expert]``: the
router's logits before top-k selection.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch

from .errors import NotApplicable

__all__ = ["BlockLayout", "LAYOUTS", "layout_of", "part_of", "model_part", "MODEL_PARTS"]

_PARALLEL = "attention and MLP run in parallel from resid_pre (parallel block): there is no stream between them"
_POST_NORM = (
    "the block is post-norm: the stream after attention is LayerNorm(resid_pre + attn_out), not a sum; "
    "read that LayerNorm's output with probe.trace.ModuleSite"
)


@dataclass(frozen=True)
class BlockLayout:
    """The block-level sites of one model type: kind -> ``(path in the block, side)`` or a
    reason string (the site does not exist in such blocks). ``sequential``: resid_mid =
    resid_pre + attn_out and resid_post = resid_mid + mlp_out hold; ``parallel``:
    resid_post = resid_pre + attn_out + mlp_out."""

    parts: dict
    sequential: bool = True
    parallel: bool = False
    model: dict = field(default_factory=dict)


def _llama_like(router: Optional[str] = None, final: str = "norm") -> BlockLayout:
    parts = {
        "attn_out": ("self_attn", "output"),
        "resid_mid": ("post_attention_layernorm", "input"),
        "mlp_in": ("mlp", "input"),
        "mlp_out": ("mlp", "output"),
        "router": (router, "output") if router else "the MLP is dense (no experts): there is no router",
    }
    return BlockLayout(
        parts,
        model={
            "embed": "embed_tokens",
            "pos_embed": "rotary position embeddings rotate q and k; nothing is added to the stream",
            "ln_final": final,
        },
    )


_GEMMA = BlockLayout(
    {
        "attn_out": ("post_attention_layernorm", "output"),
        "resid_mid": ("pre_feedforward_layernorm", "input"),
        "mlp_in": ("mlp", "input"),
        "mlp_out": ("post_feedforward_layernorm", "output"),
        "router": "the MLP is dense (no experts): there is no router",
    },
    model={
        "embed": "embed_tokens",
        "pos_embed": "rotary position embeddings rotate q and k; nothing is added to the stream",
        "ln_final": "norm",
    },
)

_NO_ROUTER = "the MLP is dense (no experts): there is no router"

LAYOUTS: dict[str, BlockLayout] = {
    "gpt2": BlockLayout(
        {
            "attn_out": ("attn", "output"),
            "resid_mid": ("ln_2", "input"),
            "mlp_in": ("mlp", "input"),
            "mlp_out": ("mlp", "output"),
            "router": _NO_ROUTER,
        },
        model={"embed": "wte", "pos_embed": "wpe", "ln_final": "ln_f"},
    ),
    "llama": _llama_like(),
    "mistral": _llama_like(),
    "qwen2": _llama_like(),
    "qwen3": _llama_like(),
    "olmo": _llama_like(),
    "mixtral": _llama_like(router="mlp.gate"),
    "qwen2_moe": _llama_like(router="mlp.gate"),
    "qwen3_moe": _llama_like(router="mlp.gate"),
    "gemma2": _GEMMA,
    "gemma3_text": _GEMMA,
    "phi": BlockLayout(
        {
            "attn_out": ("self_attn", "output"),
            "resid_mid": _PARALLEL,
            "mlp_in": ("mlp", "input"),
            "mlp_out": ("mlp", "output"),
            "router": _NO_ROUTER,
        },
        sequential=False,
        parallel=True,
        model={
            "embed": "embed_tokens",
            "pos_embed": "rotary position embeddings rotate q and k; nothing is added to the stream",
            "ln_final": "final_layernorm",
        },
    ),
    "bert": BlockLayout(
        {
            "attn_out": ("attention.output.dense", "output"),
            "resid_mid": _POST_NORM,
            "mlp_in": ("intermediate", "input"),
            "mlp_out": ("output.dense", "output"),
            "router": _NO_ROUTER,
        },
        sequential=False,
        model={
            "embed": "word_embeddings",
            "pos_embed": "position_embeddings",
            "ln_final": "a post-norm encoder has no final norm (each block ends in its own LayerNorm)",
        },
    ),
}


def _neox(config) -> BlockLayout:
    parallel = bool(getattr(config, "use_parallel_residual", True))
    return BlockLayout(
        {
            "attn_out": ("attention", "output"),
            "resid_mid": _PARALLEL if parallel else ("post_attention_layernorm", "input"),
            "mlp_in": ("mlp", "input"),
            "mlp_out": ("mlp", "output"),
            "router": _NO_ROUTER,
        },
        sequential=not parallel,
        parallel=parallel,
        model={
            "embed": "embed_in",
            "pos_embed": "rotary position embeddings rotate q and k; nothing is added to the stream",
            "ln_final": "final_layer_norm",
        },
    )


#: the model-level sites and where their value is (the module's output)
MODEL_PARTS = ("embed", "pos_embed", "ln_final")


def layout_of(adapter) -> Optional[BlockLayout]:
    """The :class:`BlockLayout` of ``adapter``'s model type, or None when no row names it."""
    config = adapter.config
    t = getattr(config, "model_type", None)
    if t == "gpt_neox":
        return _neox(config)
    if t in ("roberta", "xlm-roberta", "camembert", "electra"):
        t = "bert"
    return LAYOUTS.get(t)


def _refuse(adapter, kind: str, why: str) -> NotApplicable:
    t = getattr(adapter.config, "model_type", "?")
    return NotApplicable(f"{adapter.name} ({t}) has no site {kind}: {why}")


def part_of(adapter, block: torch.nn.Module, kind: str) -> tuple:
    """``(module, side)`` of block-level site ``kind`` inside ``block``.

    Raises:
        NotApplicable: the model type has no row here, or its blocks have no such site
            (the reason in one line).
    """
    layout = layout_of(adapter)
    if layout is None:
        raise _refuse(adapter, kind, "its block layout is not in probe.models.block_parts.LAYOUTS")
    where = layout.parts[kind]
    if isinstance(where, str):
        raise _refuse(adapter, kind, where)
    path, side = where
    return block.get_submodule(path), side


def model_part(adapter, kind: str) -> torch.nn.Module:
    """The module whose output is model-level site ``kind`` (``embed``, ``pos_embed``,
    ``ln_final``): the first module, outside the blocks, whose name ends in the layout's
    attribute.

    Raises:
        NotApplicable: as :func:`part_of`, or no such module in this model (a base model
            without it).
    """
    layout = layout_of(adapter)
    if layout is None:
        raise _refuse(adapter, kind, "its block layout is not in probe.models.block_parts.LAYOUTS")
    attr = layout.model[kind]
    if " " in attr:
        raise _refuse(adapter, kind, attr)
    for name, module in adapter.model.named_modules():
        parts = name.split(".")
        if parts[-1] == attr and not any(p.isdigit() for p in parts):
            return module
    raise _refuse(adapter, kind, f"no module named {attr!r} in this model")
