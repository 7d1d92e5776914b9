"""Trace generation: every site of every generated step, edits applied at each step.

nnsight's ``model.generate`` tracing and TransformerLens's ``generate`` with hooks, over
the sites of :mod:`probe.models.sites`: the model's own ``generate`` (greedy unless told
otherwise, with its key/value cache) runs inside one :class:`probe.tracing.trace_context.Trace`, so each
forward of the generation is read and edited. ``cache.calls(name)`` holds one value per
forward: the prompt's first, then one per new token, each with a query axis of 1
(``hook_pattern`` ``[batch, head, 1, key]``, ``hook_q`` ``[batch, 1, head, d]``) and keys
over everything so far (the cache). ``tests/test_trace_decoders.py`` checks that these
equal one forward over the whole generated sequence, and that with no edit the tokens are
the model's own ``generate``'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Optional, Sequence, Union

import torch

from probe.tracing.cache import Cache
from probe.errors import InputError
from probe.tracing.edits import whole_number
from probe.inputs.padding import padded_inputs
from probe.tracing.trace_context import Trace

if TYPE_CHECKING:
    from probe.models.adapter import ModelAdapter

__all__ = ["trace_generate"]


def trace_generate(
    adapter: ModelAdapter,
    inputs: Any,
    max_new_tokens: int,
    read: Union[Iterable, Mapping, str, Callable] = (),
    edit: Optional[Mapping] = None,
    *,
    rows: Optional[Sequence[int]] = None,
    path: str = "auto",
    **generate_kwargs: Any,
) -> Cache:
    """Generate up to ``max_new_tokens`` tokens after each text of ``inputs`` (texts, left
    padded, or a batch dict) with ``edit`` applied at every step; ``cache.output`` is what
    ``generate`` returned (the token ids ``[batch, prompt + new]`` unless
    ``return_dict_in_generate``), ``cache.calls(name)`` each step's value of ``read``.

    Raises:
        InputError: the prompt plus ``max_new_tokens`` exceeds the model's position limit
            (before any forward), ``max_new_tokens`` < 1, a model without ``generate``.
    """
    max_new_tokens = whole_number(max_new_tokens, "max_new_tokens", minimum=1)
    model = adapter.model
    if (
        not callable(getattr(model, "generate", None))
        or getattr(model, "get_output_embeddings", lambda: None)() is None
    ):
        raise InputError(f"{adapter.name} has no language-model head to generate with: load it as a causal LM")
    batch = dict(inputs) if isinstance(inputs, Mapping) else padded_inputs(adapter, inputs, side="left")
    batch.pop("position_ids", None)  # generate derives them from the mask, step by step
    n_prompt = int(batch["input_ids"].shape[1])
    limit = adapter.max_length
    if n_prompt + int(max_new_tokens) > limit:
        raise InputError(
            f"{n_prompt} prompt tokens + {max_new_tokens} new ones exceed {adapter.name}'s "
            f"{limit} positions: ask for at most {max(limit - n_prompt, 0)} new tokens"
        )
    options = dict(do_sample=False, num_beams=1, pad_token_id=adapter.pad_token_id)
    options.update(generate_kwargs)
    with Trace(adapter, read, edit, rows=rows, path=path) as tr, torch.no_grad():
        out = model.generate(**batch, max_new_tokens=int(max_new_tokens), **options)
    tr.cache.output, tr.cache.inputs = out, batch
    return tr.cache
