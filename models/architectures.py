"""Where attention lives in each model family: adapters as data, not a class hierarchy.

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
    """The family whose module table fits a transformers ``config.model_type``.

    Raises:
        ValueError: for a model type with no table, naming the supported ones.
    """
    try:
        return FAMILY_OF_MODEL_TYPE[model_type]
    except KeyError:
        known = ", ".join(sorted(FAMILY_OF_MODEL_TYPE))
        raise ValueError(
            f"model type {model_type!r} has no adapter table; supported model types: {known}"
        ) from None


#: families whose layer (block) modules take the residual stream as their first argument,
#: return it as their output and share no state across layers, so a forward may restart at
#: any layer from a cached input (probe.analyses.necessity.restart). Not T5 (its relative
#: position bias is computed in layer 0 and passed on) nor BART (encoder-decoder).
RESTARTABLE_FAMILIES = frozenset({"bert", "distilbert", "gpt2", "llama"})
