"""Where attention lives in each model family: adapters as data, not a class hierarchy.

Most of what the toolkit needs about attention now comes from transformers' attention
interface (:mod:`probe.attention_interface`): queries, keys, values, mask, scaling and
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
from typing import Optional

import torch

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


# ---- generic discovery ---------------------------------------------------------------
PROJECTION_NAMES = ("o_proj", "out_proj", "dense", "c_proj", "o", "out_lin", "wo", "out")
VALUE_NAMES = ("v_proj", "value", "v", "v_lin")
CROSS_NAMES = ("encoder_attn", "encdecattention", "crossattention", "cross_attn")


def _is_projection(module) -> bool:
    return isinstance(module, torch.nn.Linear) or type(module).__name__ == "Conv1D"


def _first_index(name: str) -> Optional[int]:
    m = re.search(r"\.(\d+)(\.|$)", name)
    return int(m.group(1)) if m else None


def _stack_of(name: str, module, encoder_decoder: bool) -> str:
    low = name.lower()
    if getattr(module, "is_cross_attention", False) or any(c in low for c in CROSS_NAMES):
        return "cross"
    if encoder_decoder:
        return "decoder" if "decoder" in low else "encoder"
    return "main"


def _projection_of(name: str, module, modules: dict):
    """The attention output projection: a child named like one, else (BERT-style, where the
    projection sits in a sibling ``output`` block) the nearest such Linear under the parent."""
    for child in PROJECTION_NAMES:
        sub = getattr(module, child, None)
        if sub is not None and _is_projection(sub):
            return sub
    parent = name.rsplit(".", 1)[0] if "." in name else ""
    for other, sub in modules.items():
        if (other.startswith(parent + ".") and not other.startswith(name + ".")
                and other.rsplit(".", 1)[-1] in PROJECTION_NAMES and _is_projection(sub)
                and other.count(".") <= name.count(".") + 1):
            return sub
    return None


def _value_of(module):
    for child in VALUE_NAMES:
        sub = getattr(module, child, None)
        if sub is not None and _is_projection(sub):
            return sub
    return None


def _causal_model_type(model) -> bool:
    """True for model types transformers offers only as causal LMs (not as masked LMs)."""
    from transformers.models.auto.modeling_auto import (MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
                                                        MODEL_FOR_MASKED_LM_MAPPING_NAMES)

    t = getattr(model.config, "model_type", "")
    return t in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and t not in MODEL_FOR_MASKED_LM_MAPPING_NAMES


def discover_attention(model) -> dict:
    """Find the attention modules of any transformers model by their shape, not their names.

    An attention module is the innermost module whose class name ends in ``Attention``
    (``BertSelfAttention`` inside ``BertAttention``, ``T5Attention`` inside
    ``T5LayerSelfAttention``) and that has an output projection (:data:`PROJECTION_NAMES`,
    as its child or in a sibling block). Its layer is ``module.layer_idx`` or the first
    index in its name. Encoder-decoder models split into ``encoder``/``decoder``/``cross``
    by name; otherwise the stack is ``decoder`` when the modules are causal
    (``module.is_causal`` or a causal-LM class), else ``encoder``.

    Returns:
        ``{"arch": ..., stack: {"attention": [...], "head_output": [...], "value": [...]}}``
        with module lists in layer order (``value`` entries may be None: fused q|k|v).

    Raises:
        ValueError: when no attention module with an output projection is found.
    """
    modules = dict(model.named_modules())
    found = [(n, m) for n, m in modules.items() if type(m).__name__.endswith("Attention")]
    inner = [(n, m) for n, m in found
             if not any(o.startswith(n + ".") for o, _ in found)]
    enc_dec = bool(getattr(model.config, "is_encoder_decoder", False))
    stacks: dict = {}
    for name, module in inner:
        proj = _projection_of(name, module, modules)
        if proj is None:
            continue
        layer = getattr(module, "layer_idx", None)
        layer = _first_index(name) if not isinstance(layer, int) else layer
        stack = _stack_of(name, module, enc_dec)
        stacks.setdefault(stack, {})[layer if layer is not None else len(stacks.get(stack, {}))] = (
            module, proj, _value_of(module))
    if not stacks:
        raise ValueError(f"no attention modules found in {type(model).__name__}: the toolkit looks for "
                         "modules named *Attention with an o_proj/out_proj/dense-like output projection")
    if "main" in stacks:
        first = stacks["main"][min(stacks["main"])][0]
        causal = getattr(first, "is_causal", None)
        if causal is None:
            causal = _causal_model_type(model)
        stacks[("decoder" if causal else "encoder")] = stacks.pop("main")
    table = {"arch": "encoder-decoder" if enc_dec else next(iter(s for s in stacks if s != "cross"))}
    for stack, by_layer in stacks.items():
        order = [by_layer[i] for i in sorted(by_layer)]
        table[stack] = {"attention": [a for a, _, _ in order], "head_output": [p for _, p, _ in order],
                        "value": [v for _, _, v in order]}
    return table


# ---- what is supported, and by which path ----------------------------------------------
# model types with a coverage test: tests/test_coverage.py builds a tiny random model of each
# from its config and checks capture against eager output_attentions and head ablation
TESTED_MODEL_TYPES = ("bert", "roberta", "distilbert", "electra", "gpt2", "gpt_neox", "gptj", "opt", "bloom",
                      "falcon", "llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma", "gemma2",
                      "gemma3_text", "phi3", "olmo", "bart", "t5", "marian")


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
    if cls_name is None:
        raise ValueError(f"transformers has no model for model type {model_type!r}")
    import transformers

    cls = getattr(transformers, cls_name)  # type: ignore[call-overload]  # a base model type maps to one class name, a str
    module = importlib.import_module(cls.__module__)
    uses = "ALL_ATTENTION_FUNCTIONS" in vars(module) and cls._can_set_attn_implementation()
    return "interface" if uses else "hooks"


def supported_architectures() -> list[dict]:
    """One dict per tested model type: ``model_type``, ``family`` (a table family, or the
    model type itself when its modules are discovered by shape) and ``path``."""
    return [{"model_type": t, "family": family_for(t),
             "modules": "table" if family_for(t) in ARCHITECTURES else "discovered",
             "path": attention_path_of_type(t)} for t in TESTED_MODEL_TYPES]


#: families whose layer (block) modules take the residual stream as their first argument,
#: return it as their output and share no state across layers, so a forward may restart at
#: any layer from a cached input (probe.analyses.necessity.restart). Not T5 (its relative
#: position bias is computed in layer 0 and passed on) nor BART (encoder-decoder).
RESTARTABLE_FAMILIES = frozenset({"bert", "distilbert", "gpt2", "llama"})
