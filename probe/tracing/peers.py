"""Where TransformerLens 4's ``TransformerBridge`` caches the tensor each of probe's sites holds.

probe names its sites as TransformerLens's ``HookedTransformer`` did. TransformerLens 4
removed ``HookedTransformer``; its ``TransformerBridge`` wraps the Hugging Face model (the
same weights, the same forward) and keeps most names, but three of probe's sites sit under
another name or shape there (checked on GPT-2 and Llama with grouped-query attention by
``tests/test_transformer_lens.py``, to 1e-5 in float32):

* ``attn.hook_q`` / ``attn.hook_k`` and ``attn.hook_rot_q`` / ``attn.hook_rot_k`` have the
  same names and tensors (before and after rotary; models without rotary have no
  ``hook_rot_*`` in either);
* ``attn.hook_v``: probe repeats grouped-query values per query head; the bridge keeps one per
  key/value head (as probe's ``hook_k`` does);
* ``hook_mlp_in``: the bridge's ``mlp.hook_in``;
* ``ln_final.hook_normalized``: probe's is the final norm's output (its weight and bias
  applied); the bridge's ``hook_normalized`` is before them, its ``ln_final.hook_out`` after.

Also: probe's ``hook_pos_embed`` is ``[1, pos, d_model]`` (the same for every example), the
bridge's ``[batch, pos, d_model]``; ``attn.hook_result`` is in the bridge's cache only after
``bridge.set_use_attn_result(True)``; ``attn.hook_proj_in`` (the output projection's input,
heads concatenated) is the bridge's ``attn.o.hook_in`` flattened over its last two axes.

No import of TransformerLens here: the functions map names and tensors.
"""

from __future__ import annotations

from collections.abc import Container

import torch

from probe.models.sites import parse_site

__all__ = ["transformer_lens_name", "as_probe_site"]

# probe's kind -> the bridge's name inside a block (``blocks.{l}.``) where it differs
_BLOCK_NAMES = {"mlp_in": "mlp.hook_in", "proj_in": "attn.o.hook_in"}


def transformer_lens_name(site: str, bridge_names: Container[str]) -> str:
    """The key of TransformerLens 4's bridge cache that holds probe's ``site``
    (``bridge_names``: the names the bridge caches, e.g. a ``run_with_cache`` cache's keys;
    kept for callers, every mapping is by name now).

    Raises:
        InputError: ``site`` is not a site name probe knows.
    """
    s = parse_site(site)
    if s.kind == "ln_final":
        return "ln_final.hook_out"
    if s.layer < 0:
        return site
    if s.kind in _BLOCK_NAMES:
        return f"blocks.{s.layer}.{_BLOCK_NAMES[s.kind]}"
    return site


def as_probe_site(site: str, value: torch.Tensor, n_heads: int) -> torch.Tensor:
    """The bridge's tensor for ``site`` in probe's shape: grouped-query values repeated per
    query head (``n_heads`` query heads), the output projection's input with heads
    concatenated; every other site unchanged (``hook_pos_embed`` compares by broadcasting)."""
    kind = parse_site(site).kind
    if kind == "v" and value.shape[-2] != n_heads:
        return value.repeat_interleave(n_heads // value.shape[-2], dim=-2)
    if kind == "proj_in" and value.dim() == 4:
        return value.flatten(-2)
    return value
