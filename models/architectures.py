"""Where attention lives in each model family: adapters as data, not a class hierarchy.

Most of what the toolkit needs about attention now comes from transformers' attention
interface (:mod:`probe.tracing.attention_interface`): queries, keys, values, mask, scaling and
the per-head output. This table keeps what the interface cannot tell — where the output
projection and value projection live (for the hook path, the restart-based ablation sweep
and norm-based analyses) and the layer modules' names (restart) — for the families the
toolkit has always named. Any other model is read by :func:`discover_attention`, which
finds the attention modules generically, so every interface model opens via ``hf:``.

Each family maps a *stack* (``encoder``, ``decoder`` or ``cross``) to regular
expressions over ``model.named_modules()`` names. The first group of each pattern is the
layer index. Patterns are searched (not anchored at the start), so task heads that wrap
the base model (``bert.``, ``transformer.``, ``model.``) need no extra rows.

* ``attention``: the module whose forward returns ``(..., attention_probs)`` with the
  probabilities ``[batch, head, query, key]`` as the **last** element of its output
  tuple when the model runs with eager attention (true for every family below in
  transformers 5).
* ``head_output``: the attention output projection. Its **input** is the concatenation
  of the heads' outputs ``[batch, seq, n_heads * head_dim]`` — the per-head site used for
  ablation and patching (TransformerLens's ``hook_z``).
* ``value``: the value projection (``None`` where q/k/v are fused, as in GPT-2's
  ``c_attn``; then the value is the last third of that projection's output).
"""

from __future__ import annotations

import re
from typing import Any, Optional

import torch

from .errors import InputError, NotApplicable

# family -> {"arch": ..., stack -> {"attention": regex, "head_output": regex, "value": regex}}
ARCHITECTURES: dict[str, dict] = {
    "bert": {
        "arch": "encoder",
        "encoder": {
            "attention": r"encoder\.layer\.(\d+)\.attention\.self$",
            "head_output": r"encoder\.layer\.(\d+)\.attention\.output\.dense$",
            "value": r"encoder\.layer\.(\d+)\.attention\.self\.value$",
        },
    },
    "distilbert": {
        "arch": "encoder",
        "encoder": {
            "attention": r"transformer\.layer\.(\d+)\.attention$",
            "head_output": r"transformer\.layer\.(\d+)\.attention\.out_lin$",
            "value": r"transformer\.layer\.(\d+)\.attention\.v_lin$",
        },
    },
    "gpt2": {
        "arch": "decoder",
        "decoder": {
            "attention": r"h\.(\d+)\.attn$",
            "head_output": r"h\.(\d+)\.attn\.c_proj$",
            "value": r"h\.(\d+)\.attn\.c_attn$",  # fused q|k|v: value is the last third
        },
    },
    "llama": {
        "arch": "decoder",
        "decoder": {
            "attention": r"layers\.(\d+)\.self_attn$",
            "head_output": r"layers\.(\d+)\.self_attn\.o_proj$",
            "value": r"layers\.(\d+)\.self_attn\.v_proj$",
        },
    },
    "bart": {
        "arch": "encoder-decoder",
        "encoder": {
            "attention": r"encoder\.layers\.(\d+)\.self_attn$",
            "head_output": r"encoder\.layers\.(\d+)\.self_attn\.out_proj$",
            "value": r"encoder\.layers\.(\d+)\.self_attn\.v_proj$",
        },
        "decoder": {
            "attention": r"decoder\.layers\.(\d+)\.self_attn$",
            "head_output": r"decoder\.layers\.(\d+)\.self_attn\.out_proj$",
            "value": r"decoder\.layers\.(\d+)\.self_attn\.v_proj$",
        },
        "cross": {
            "attention": r"decoder\.layers\.(\d+)\.encoder_attn$",
            "head_output": r"decoder\.layers\.(\d+)\.encoder_attn\.out_proj$",
            "value": r"decoder\.layers\.(\d+)\.encoder_attn\.v_proj$",
        },
    },
    "t5": {
        "arch": "encoder-decoder",
        "encoder": {
            "attention": r"encoder\.block\.(\d+)\.layer\.0\.SelfAttention$",
            "head_output": r"encoder\.block\.(\d+)\.layer\.0\.SelfAttention\.o$",
            "value": r"encoder\.block\.(\d+)\.layer\.0\.SelfAttention\.v$",
        },
        "decoder": {
            "attention": r"decoder\.block\.(\d+)\.layer\.0\.SelfAttention$",
            "head_output": r"decoder\.block\.(\d+)\.layer\.0\.SelfAttention\.o$",
            "value": r"decoder\.block\.(\d+)\.layer\.0\.SelfAttention\.v$",
        },
        "cross": {
            "attention": r"decoder\.block\.(\d+)\.layer\.1\.EncDecAttention$",
            "head_output": r"decoder\.block\.(\d+)\.layer\.1\.EncDecAttention\.o$",
            "value": r"decoder\.block\.(\d+)\.layer\.1\.EncDecAttention\.v$",
        },
    },
}

# model_type values of transformers configs that share a family's module layout
FAMILY_OF_MODEL_TYPE = {
    "bert": "bert",
    "roberta": "bert",
    "xlm-roberta": "bert",
    "camembert": "bert",
    "electra": "bert",
    "distilbert": "distilbert",
    "gpt2": "gpt2",
    "llama": "llama",
    "mistral": "llama",
    "qwen2": "llama",
    "bart": "bart",
    "mbart": "bart",
    "marian": "bart",
    "t5": "t5",
}

STACKS = ("encoder", "decoder", "cross")


def family_for(model_type: str) -> str:
    """The family whose module table fits a transformers ``config.model_type``; other
    model types are their own family, read by :func:`discover_attention`."""
    return FAMILY_OF_MODEL_TYPE.get(model_type, model_type)


class UnsupportedModel(NotApplicable):
    """A model the toolkit cannot instrument (the analysis does not apply to it); the message
    is one line naming the model type and what is missing (no attention modules, no weights exposed, a layout other than
    ``[batch, head, query, key]``, inputs other than text on a text-only path)."""


# ---- generic discovery ---------------------------------------------------------------
# names of output projections (compared lower-case): ModernBERT's ``Wo``, Funnel's ``post_proj``
PROJECTION_NAMES = (
    "o_proj",
    "out_proj",
    "dense",
    "c_proj",
    "o",
    "out_lin",
    "wo",
    "out",
    "post_proj",
    "output_proj",
    "proj_out",
    "o_dense",
    "attn_out",
    "output",
)
VALUE_NAMES = ("v_proj", "value", "v", "v_lin", "v_head", "value_proj")
CROSS_NAMES = ("encoder_attn", "encdecattention", "crossattention", "cross_attn")
# children that compute queries, keys or values (never the output projection)
_QKV_PARTS = ("q", "k", "v", "query", "key", "value", "qkv", "c_attn", "in_proj", "kv")


def _is_projection(module: torch.nn.Module) -> bool:
    return isinstance(module, torch.nn.Linear) or type(module).__name__ == "Conv1D"


def _is_qkv_name(name: str) -> bool:
    low = name.lower()
    parts = [p for p in re.split(r"[_\W]+", low) if p]
    return low in _QKV_PARTS or any(p in _QKV_PARTS or p.startswith(("wq", "wk", "wv")) for p in parts)


def _wrapped_projection(module: torch.nn.Module) -> Any:
    """``(name, wrapper, linear)`` where a child named like an output projection is not a
    Linear but a module around one (Inkling 2's ``o_proj``: a sigmoid gate of the layer input
    times the heads' outputs, then ``linear``), else None. Its one Linear child not named
    like a gate is the projection; the structural fallback would otherwise take another
    Linear of the module (Inkling 2's ``sink_proj``, whose input is the layer input)."""
    children = {child.lower(): sub for child, sub in module.named_children()}
    for child in PROJECTION_NAMES:
        sub = children.get(child)
        if sub is None or _is_projection(sub):
            continue
        inner = [(n, m) for n, m in sub.named_children() if _is_projection(m) and "gate" not in n.lower()]
        if len(inner) == 1:
            return child, sub, inner[0][1]
    return None


def _structural_projection(module: torch.nn.Module) -> Any:
    """The one Linear child of an attention module that is not a query/key/value projection
    (by structure: the module's other Linear children all compute q, k or v), else None."""
    rest = [sub for child, sub in module.named_children() if _is_projection(sub) and not _is_qkv_name(child)]
    return rest[0] if len(rest) == 1 else None


def _stack_of(name: str, module: torch.nn.Module, encoder_decoder: bool) -> str:
    low = name.lower()
    if getattr(module, "is_cross_attention", False) or any(c in low for c in CROSS_NAMES):
        return "cross"
    if encoder_decoder:
        return "decoder" if "decoder" in low else "encoder"
    return "main"


def _projection_of(name: str, module: torch.nn.Module, modules: dict) -> Any:
    """The attention output projection: a child named like one, else (BERT-style, where the
    projection sits in a sibling ``output`` block) the nearest such Linear under the parent."""
    children = {child.lower(): sub for child, sub in module.named_children()}
    for child in PROJECTION_NAMES:
        sub = children.get(child)
        if sub is not None and _is_projection(sub):
            return sub
    wrapped = _wrapped_projection(module)
    if wrapped is not None:  # a projection module around a Linear (Inkling 2's gated o_proj)
        return wrapped[2]
    sub = _structural_projection(module)
    if sub is not None:
        return sub
    parent = name.rsplit(".", 1)[0] if "." in name else ""
    for other, sub in modules.items():
        if (
            other.startswith(parent + ".")
            and not other.startswith(name + ".")
            and other.rsplit(".", 1)[-1] in PROJECTION_NAMES
            and _is_projection(sub)
            and other.count(".") <= name.count(".") + 1
        ):
            return sub
    return None


def _value_of(module: torch.nn.Module) -> Any:
    children = {child.lower(): sub for child, sub in module.named_children()}
    for child in VALUE_NAMES:
        sub = children.get(child)
        if sub is not None and _is_projection(sub):
            return sub
    return None


def _causal_model_type(model: Any) -> bool:
    """True for model types transformers offers only as causal LMs (not as masked LMs)."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    t = getattr(model.config, "model_type", "")
    return t in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and t not in MODEL_FOR_MASKED_LM_MAPPING_NAMES


def discover_attention(model: Any, causal: Optional[bool] = None) -> dict:
    """Find the attention modules of any transformers model by their shape, not their names.

    An attention module is the innermost module whose class name ends in ``Attention``
    (``BertSelfAttention`` inside ``BertAttention``, ``T5Attention`` inside
    ``T5LayerSelfAttention``) and that has an output projection: a Linear child named like
    one (:data:`PROJECTION_NAMES`, any case: ModernBERT's ``Wo``, Funnel's ``post_proj``),
    else its only Linear child that computes no query/key/value, else one in a sibling
    block (BERT's ``output.dense``). Layers are ordered by ``module.layer_idx`` where every
    module has a distinct one, else by their place in the module tree (Funnel's
    ``blocks.0.0``, ``blocks.1.0``, ``decoder.layers.0``); models that call one module for
    several layers (ALBERT) are re-ordered by call by :class:`models.ModelAdapter`.
    Encoder-decoder models split into ``encoder``/``decoder``/``cross`` by name; otherwise
    the stack is ``decoder`` when ``causal`` (what the adapter measured on the model's
    behaviour), else, when ``causal`` is None, when the modules say so (``is_causal``) or
    the type is offered only as a causal LM.

    Returns:
        ``{"arch": ..., stack: {"attention": [...], "head_output": [...], "value": [...],
        "mixed_by": [...]}}`` with lists in layer order (``value`` entries may be None: fused
        q|k|v; ``mixed_by``: see :func:`_head_mixer`).

    Raises:
        UnsupportedModel: when no attention module with an output projection is found.
    """
    modules = dict(model.named_modules())
    # torch's own MultiheadAttention (SigLIP's pooling head, projectors) averages its weights
    # over heads and is no layer of the stack
    found = [
        (n, m)
        for n, m in modules.items()
        if type(m).__name__.endswith("Attention") and not isinstance(m, torch.nn.MultiheadAttention)
    ]
    inner = [(n, m) for n, m in found if not any(o.startswith(n + ".") for o, _ in found)]
    enc_dec = bool(getattr(model.config, "is_encoder_decoder", False))
    stacks: dict = {}
    names: dict = {}
    for name, module in inner:
        proj = _projection_of(name, module, modules)
        if proj is None:
            continue
        stack = _stack_of(name, module, enc_dec)
        stacks.setdefault(stack, []).append((module, proj, _value_of(module), _head_mixer(module)))
        names.setdefault(stack, []).append(name)
    if not stacks:
        t = getattr(model.config, "model_type", "?")
        raise UnsupportedModel(
            f"model type {t!r} ({type(model).__name__}): no attention modules found (the "
            "toolkit instruments modules named *Attention with a Linear output projection)"
        )
    _refuse_boolean_masks(model, [e[0] for entries in stacks.values() for e in entries])
    if "main" in stacks:
        _refuse_separate_stacks(model, names["main"], [e[0] for e in stacks["main"]])
    if "main" in stacks:
        if causal is None:
            causal = getattr(stacks["main"][0][0], "is_causal", None)
            if causal is None:
                causal = _causal_model_type(model)
        stacks[("decoder" if causal else "encoder")] = stacks.pop("main")
    table = {"arch": "encoder-decoder" if enc_dec else next(iter(s for s in stacks if s != "cross"))}
    for stack, entries in stacks.items():
        idx = [getattr(e[0], "layer_idx", None) for e in entries]
        if all(isinstance(i, int) for i in idx) and len(set(idx)) == len(idx):
            entries = [e for _, e in sorted(zip(idx, entries), key=lambda p: int(p[0] or 0))]
        table[stack] = {
            site: [e[k] for e in entries] for k, site in enumerate(("attention", "head_output", "value", "mixed_by"))
        }
    return table


def _refuse_separate_stacks(model: Any, names: list, modules: list) -> None:
    """Refuse a model that is no encoder-decoder (no cross-attention, one ``attentions``
    output) but holds an ``encoder`` and a ``decoder`` sub-model, each a transformer counting
    its layers from 0: Pocket TTS's and Mimi's codecs run an encoder transformer, then a
    decoder transformer, and report the encoder's attentions only. Read as one stack, they
    would be one map per layer of both.

    Raises:
        UnsupportedModel: naming both layer lists and saying to open one of them alone.
    """
    parts: dict = {}
    for name, module in zip(names, modules):
        idx = getattr(module, "layer_idx", None)
        top = name.split(".", 1)[0]
        if top in ("encoder", "decoder") and isinstance(idx, int) and not isinstance(idx, bool):
            root = name.split(".")
            root = ".".join(root[: max(i for i, p in enumerate(root) if p.isdigit())])
            parts.setdefault(top, {}).setdefault(root, []).append(idx)
    if len(parts) < 2:
        return
    seen = [i for roots in parts.values() for idx in roots.values() for i in idx]
    if len(seen) == len(set(seen)):
        return  # one stack split over both (its layers numbered once)
    t = getattr(model.config, "model_type", "?")
    lists = " and ".join(
        f"its {top}'s ({root}, {len(idx)} layers)" for top, roots in parts.items() for root, idx in roots.items()
    )
    raise UnsupportedModel(
        f"model type {t!r} ({type(model).__name__}): two attention stacks, {lists}, each numbering its "
        "layers from 0, in a model that is not an encoder-decoder (its output reports one of them): not "
        "one [layer, head, query, key] map; open one of them on its own (model.encoder or model.decoder)"
    )


#: attention classes that apply the mask they are given as a boolean (``attention_mask.logical_not()``
#: before adding position scores) although eager attention, the path whose weights the toolkit
#: reads, hands them the additive mask (0 where a key is allowed): every allowed key is masked
#: (rows of NaN) and the disallowed ones are attended (past padding, or beyond the chunked
#: context) — the eager weights are not the model's (transformers 5.24, ``modeling_nemotron_asr_streaming.py``)
BOOLEAN_MASK_ATTENTION = ("NemotronAsrStreamingEncoderAttention",)


def _refuse_boolean_masks(model: Any, modules: list) -> None:
    """Raise :class:`UnsupportedModel` when an attention module is one of
    :data:`BOOLEAN_MASK_ATTENTION`: its eager weights, the ones the toolkit captures, are not
    those of the model's own (sdpa) forward."""
    bad = sorted({type(m).__name__ for m in modules} & set(BOOLEAN_MASK_ATTENTION))
    if bad:
        t = getattr(model.config, "model_type", "?")
        raise UnsupportedModel(
            f"model type {t!r}: {bad[0]} reads its mask as boolean (logical_not) but eager attention, whose "
            "weights the toolkit captures, passes an additive one: allowed keys masked (NaN), others attended"
        )


#: names of norms that act on all heads' outputs before the output projection (a norm after
#: it, such as Funnel's ``layer_norm`` on the residual sum, is not one of them)
HEAD_MIXING_NORMS = ("sub_norm", "groupnorm", "group_norm")


def _head_mixer(module: torch.nn.Module) -> Optional[str]:
    """The name of a norm inside an attention module that is not a query/key norm: it acts on
    the heads' outputs together between the attention and the output projection (BitNet's
    ``attn_sub_norm``, differential attention's ``groupnorm``), so the projection's input is
    no per-head site. None for most models (``q_norm``/``k_norm`` act on queries and keys)."""
    for child, sub in module.named_children():
        if "norm" in type(sub).__name__.lower() and any(k in child.lower() for k in HEAD_MIXING_NORMS):
            return child
    wrapped = _wrapped_projection(module)
    if wrapped is not None and any(_is_projection(m) and "gate" in n.lower() for n, m in wrapped[1].named_children()):
        return f"{wrapped[0]}: {type(wrapped[1]).__name__} gates the heads' outputs by the layer input"
    return None


# ---- what is supported, and by which path ----------------------------------------------
# model types with a coverage test: tests/test_coverage.py builds a tiny random model of each
# from its config and checks capture against eager output_attentions and head ablation
TESTED_MODEL_TYPES = (
    "bert",
    "roberta",
    "distilbert",
    "electra",
    "gpt2",
    "gpt_neox",
    "gptj",
    "opt",
    "bloom",
    "falcon",
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen3",
    "gemma",
    "gemma2",
    "gemma3_text",
    "phi3",
    "olmo",
    "bart",
    "t5",
    "marian",
    # tests/test_architectures_wide.py (and every AutoModel type: docs/coverage.md)
    "albert",
    "clip_text_model",
    "deberta-v2",
    "mpnet",
    "big_bird",
    "modernbert",
    "funnel",
    "vit",
    "clip_vision_model",
    "whisper",
)


def attention_path_of_type(model_type: str) -> str:
    """``interface`` when transformers' modeling file for ``model_type`` dispatches attention
    through ``ALL_ATTENTION_FUNCTIONS`` (capture and interventions run inside the attention
    function), else ``hooks`` (forward hooks on the attention modules, eager switch).

    Raises:
        ValueError: a model type transformers does not know.
    """
    import importlib

    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    cls_name = MODEL_MAPPING_NAMES.get(model_type)
    if isinstance(cls_name, (tuple, list)):  # Funnel: (FunnelModel, FunnelBaseModel)
        cls_name = cls_name[0]
    if cls_name is None:
        raise InputError(f"transformers has no model for model type {model_type!r}")
    import transformers

    cls = getattr(transformers, cls_name)  # type: ignore[call-overload]  # a base model type maps to one class name, a str
    module = importlib.import_module(cls.__module__)
    uses = "ALL_ATTENTION_FUNCTIONS" in vars(module) and cls._can_set_attn_implementation()
    return "interface" if uses else "hooks"


def supported_architectures() -> list[dict]:
    """One dict per tested model type: ``model_type``, ``family`` (a table family, or the
    model type itself when its modules are discovered by shape) and ``path``."""
    return [
        {
            "model_type": t,
            "family": family_for(t),
            "modules": "table" if family_for(t) in ARCHITECTURES else "discovered",
            "path": attention_path_of_type(t),
        }
        for t in TESTED_MODEL_TYPES
    ]


#: families whose layer (block) modules take the residual stream as their first argument,
#: return it as their output and share no state across layers, so a forward may restart at
#: any layer from a cached input (probe.tracing.restart). Not T5 (its relative
#: position bias is computed in layer 0 and passed on) nor BART (encoder-decoder).
RESTARTABLE_FAMILIES = frozenset({"bert", "distilbert", "gpt2", "llama"})
