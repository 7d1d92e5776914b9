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
from typing import Any, Optional, TYPE_CHECKING

import torch

from .errors import NotApplicable

if TYPE_CHECKING:
    from probe.models.adapter import ModelAdapter

__all__ = ["BlockLayout", "LAYOUTS", "layout_of", "part_of", "model_part", "MODEL_PARTS"]


@dataclass(frozen=True)
class BlockLayout:
    """The block-level sites of one model type: kind -> ``(path in the block, side)`` or a
    reason string (the site does not exist in such blocks). ``sequential``: resid_mid =
    resid_pre + attn_out and resid_post = resid_mid + mlp_out hold; ``parallel``:
    resid_post = resid_pre + attn_out + mlp_out. ``mlp_norm``: the norm whose output is
    ``mlp_in`` (of ``resid_mid``, or of ``resid_pre`` in a parallel block; None: none).
    ``model``: model-level kind -> the module's attribute name, or a reason."""

    parts: dict
    sequential: bool = True
    parallel: bool = False
    mlp_norm: Optional[str] = None
    model: dict = field(default_factory=dict)
    #: post-norm blocks: the norms after attention and after the MLP (resid_mid =
    #: norms[0](resid_pre + attn_out), resid_post = norms[1](that + mlp_out))
    post_norms: Optional[tuple] = None


_PARALLEL = "attention and MLP run in parallel from resid_pre (parallel block): there is no stream between them"
_POST_NORM = (
    "the block is post-norm: the stream after attention is LayerNorm(resid_pre + attn_out), not a sum; "
    "read that LayerNorm's output with probe.tracing.site_keys.ModuleSite"
)
_NO_ROUTER = "the MLP is dense (no experts): there is no router"
_ROTARY = "rotary position embeddings rotate q and k; nothing is added to the stream"
_NO_LN1 = "the block has no norm before attention (post-norm: its norms follow the sums)"
_NO_LN2 = "the block has no norm before the MLP (post-norm: its norms follow the sums)"


def _layout(
    attn: str = "self_attn",
    mid: Optional[str] = "post_attention_layernorm",
    mlp: str = "mlp",
    *,
    attn_out: Optional[str] = None,
    mlp_out: Optional[str] = None,
    mlp_in: Optional[str] = None,
    mid_side: str = "input",
    mlp_norm: Optional[str] = "post_attention_layernorm",
    router: Optional[str] = None,
    parallel: bool = False,
    post_norm: Optional[tuple] = None,
    embed: str = "embed_tokens",
    pos_embed: str = _ROTARY,
    final: str = "norm",
    attn_norm: Optional[str] = "input_layernorm",
) -> BlockLayout:
    """A row: the attention and MLP modules of the block, the module whose input is
    ``resid_mid`` (``mid``), and where a post-norm moves ``attn_out`` / ``mlp_out``."""
    resid_mid: object = (mid, mid_side)
    if parallel:
        resid_mid = _PARALLEL
    elif post_norm:
        resid_mid = _POST_NORM
    parts = {
        "attn_out": (attn_out or attn, "output"),
        "resid_mid": resid_mid,
        "mlp_in": (mlp_in or mlp, "input"),
        "mlp_out": (mlp_out or mlp, "output"),
        "router": (router, "output") if router else _NO_ROUTER,
        # TransformerLens's ln1/ln2 sites: from the input of the norm before attention / the MLP
        "ln1_normalized": (attn_norm, "input") if attn_norm and not post_norm else _NO_LN1,
        "ln1_scale": (attn_norm, "input") if attn_norm and not post_norm else _NO_LN1,
        "ln2_normalized": (mlp_norm, "input") if mlp_norm else _NO_LN2,
        "ln2_scale": (mlp_norm, "input") if mlp_norm else _NO_LN2,
    }
    model = {"embed": embed, "pos_embed": pos_embed, "ln_final": final}
    return BlockLayout(parts, not (parallel or post_norm), parallel, mlp_norm, model, post_norm)


_LLAMA = _layout()
_GEMMA2 = _layout(
    attn_out="post_attention_layernorm",
    mid="pre_feedforward_layernorm",
    mlp_out="post_feedforward_layernorm",
    mlp_norm="pre_feedforward_layernorm",
)
#: OLMo 2 / EXAONE 4: norms after attention and after the MLP only (no pre-norms)
_POST_ONLY = _layout(
    attn_out="post_attention_layernorm",
    mid="mlp",
    mlp_out="post_feedforward_layernorm",
    mlp_norm=None,
    attn_norm=None,
)
_GPT2 = _layout("attn", "ln_2", mlp_norm="ln_2", embed="wte", pos_embed="wpe", final="ln_f", attn_norm="ln_1")
_GPTJ = _layout("attn", None, parallel=True, mlp_norm="ln_1", embed="wte", final="ln_f", attn_norm="ln_1")

LAYOUTS: dict[str, BlockLayout] = {
    **{
        t: _LLAMA
        for t in (
            "llama",
            "mistral",
            "qwen2",
            "qwen3",
            "olmo",
            "phi3",
            "starcoder2",
            "helium",
            "glm",
            "smollm3",
            "ernie4_5",
            "arcee",
        )
    },
    **{t: _layout(router="mlp.gate") for t in ("mixtral", "qwen2_moe", "qwen3_moe")},
    "persimmon": _layout(final="final_layernorm"),
    "gemma": _layout(
        embed="Gemma multiplies the embedding by sqrt(d_model) in the model's forward, so the embedding "
        "module's output is not the stream's first term; read blocks.0.hook_resid_pre"
    ),
    "gemma2": _GEMMA2,
    "gemma3_text": _GEMMA2,
    "olmo2": _POST_ONLY,
    "exaone4": _POST_ONLY,
    "glm4": _layout(attn_out="post_self_attn_layernorm", mlp_out="post_mlp_layernorm"),
    "apertus": _layout(mid="feedforward_layernorm", mlp_norm="feedforward_layernorm"),
    "gpt2": _GPT2,
    "gpt_bigcode": _GPT2,
    "gptj": _GPTJ,
    "codegen": _GPTJ,
    "phi": _layout(parallel=True, mlp_norm="input_layernorm", final="final_layernorm"),
    "opt": _layout(
        mid="final_layer_norm",
        mlp_in="fc1",
        mlp_out="fc2",
        mlp_norm="final_layer_norm",
        pos_embed="embed_positions",
        final="final_layer_norm",
        attn_norm="self_attn_layer_norm",
    ),
    "bert": _layout(
        attn_out="attention.output.dense",
        mlp_in="intermediate",
        mlp_out="output.dense",
        post_norm=("attention.output.LayerNorm", "output.LayerNorm"),
        mlp_norm=None,
        embed="word_embeddings",
        pos_embed="position_embeddings",
        final="a post-norm encoder has no final norm (each block ends in its own LayerNorm)",
    ),
}


LAYOUTS["bart"] = _layout(
    mlp_in="fc1",
    mlp_out="fc2",
    post_norm=("self_attn_layer_norm", "final_layer_norm"),
    mlp_norm=None,
    pos_embed="embed_positions",
    final="BART's blocks are post-norm: there is no final norm (each block ends in its own LayerNorm)",
)


#: T5's encoder blocks (pre-norm, RMS): layer.0 self-attention, layer.1 the feed-forward;
#: its decoder blocks put cross-attention at layer.1, so their MLP sites are refused
LAYOUTS["t5"] = _layout(
    "layer.0.SelfAttention",
    "layer.1",
    "layer.1.DenseReluDense",
    mlp_norm="layer.1.layer_norm",
    attn_norm="layer.0.layer_norm",
    pos_embed="T5 adds a relative position bias to the attention scores; nothing is added to the stream",
    final="final_layer_norm",
)


def _neox(config: Any) -> BlockLayout:
    """GPT-NeoX (Pythia): parallel unless ``use_parallel_residual`` is False."""
    parallel = bool(getattr(config, "use_parallel_residual", True))
    return _layout(
        "attention",
        parallel=parallel,
        embed="embed_in",
        final="final_layer_norm",
    )


def _stablelm(config: Any) -> BlockLayout:
    """StableLM: sequential, or parallel (both from ``input_layernorm``) with ``use_parallel_residual``."""
    if getattr(config, "use_parallel_residual", False):
        return _layout(parallel=True, mlp_norm="input_layernorm")
    return _LLAMA


#: the model-level sites and where their value is (the module's output)
MODEL_PARTS = ("embed", "pos_embed", "ln_final")


def layout_of(adapter: ModelAdapter) -> Optional[BlockLayout]:
    """The :class:`BlockLayout` of ``adapter``'s model type, or None when no row names it."""
    config = adapter.config
    t = getattr(config, "model_type", None)
    if t == "gpt_neox":
        return _neox(config)
    if t == "stablelm":
        return _stablelm(config)
    if t in ("roberta", "xlm-roberta", "camembert", "electra"):
        t = "bert"
    return LAYOUTS.get(str(t))


def _refuse(adapter: ModelAdapter, kind: str, why: str) -> NotApplicable:
    t = getattr(adapter.config, "model_type", "?")
    return NotApplicable(f"{adapter.name} ({t}) has no site {kind}: {why}")


def part_of(adapter: ModelAdapter, block: torch.nn.Module, kind: str) -> tuple:
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
    try:
        return block.get_submodule(path), side
    except AttributeError:
        raise _refuse(adapter, kind, f"its block {type(block).__name__} has no {path} (another block layout)") from None


def model_part(adapter: ModelAdapter, kind: str) -> torch.nn.Module:
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
