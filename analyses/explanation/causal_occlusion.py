"""Blank-out (leave-one-out occlusion) of a causal language model from its clean prefix.

Blank-out scores token ``t`` by ``f(x) − f(x with token t replaced by the baseline token)``
(Li, Monroe & Jurafsky 2016, "Understanding neural networks through representation
erasure"; captum's ``FeatureAblation``, one feature per token). Run as written, each of an
example's ``n`` occlusions is a whole forward of ``n`` tokens: ``n²`` token-forwards.

In a causal model position ``i`` sees tokens ``≤ i`` only, so occluding token ``t`` leaves
the keys and values of positions ``< t`` as they were: they are the clean forward's. Here
the clean forward runs once with its key/value cache; the occlusions of positions
``a … a+g−1`` share the cache of the prefix ``< a`` and run only positions ``a`` up to the
last position the objective reads (``objective.reads``), ``g`` of them in one batch. A token
after that position cannot change what is read: its score is 0, as is a token the baseline
leaves unchanged (special tokens, :func:`.attributions.baseline_ids`). An example of ``n``
tokens read at its end costs about ``n²/2 + n·g/2`` token-forwards instead of ``n²``; the
scores are the full forwards' (float rounding aside: ``tests/test_causal_occlusion.py``
compares them with captum's).

It applies where the model is a Hugging Face causal LM whose forward takes a
``DynamicCache`` and ``logits_to_keep``, and the objective reads logits at known
positions (:class:`probe.analyses.common.targets.LMLoss`: ``loss:<position>``);
:func:`applies` says whether, and :func:`.attributions.attribute` takes captum's path
otherwise.
"""

from __future__ import annotations

import copy
from typing import Any, Optional

import torch

__all__ = ["applies", "causal_blank_out", "GROUP"]

#: occlusions run together from one shared prefix: a larger group recomputes more positions
#: (each row starts at the group's first occluded position), a smaller one runs thinner forwards
GROUP = 8


def applies(adapter: Any, objective: Any) -> bool:
    """Whether :func:`causal_blank_out` can score ``objective`` on ``adapter``'s model: a
    decoder-only Hugging Face causal LM (``logits_to_keep`` in its forward, a key/value
    cache) and an objective that reads the logits of known positions (``loss:<position>``)."""
    from probe.analyses.common.targets import LMLoss, keeps_logits

    if adapter.arch != "decoder" or not isinstance(objective, LMLoss):
        return False
    model = adapter.model
    if not keeps_logits(model) or getattr(model, "config", None) is None:
        return False
    from transformers import DynamicCache

    # every layer a full cache that can be cut back to a prefix (no sliding window, no recurrent state)
    layers = DynamicCache(config=model.config).layers
    return all(type(layer).__name__ == "DynamicLayer" for layer in layers)


@torch.no_grad()
def causal_blank_out(
    adapter: Any,
    objective: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    baseline: torch.Tensor,
    group: int = GROUP,
) -> torch.Tensor:
    """``[batch, seq]`` blank-out scores ``f(x) − f(x with token t blanked)`` of a right-padded
    batch (``input_ids``, ``attention_mask`` ``[batch, seq]``; ``baseline`` ``[batch, seq]`` the
    token each position is blanked to, :func:`.attributions.baseline_ids`), each example from
    its clean prefix's key/value cache (module docstring), at most ``group`` occlusions a
    forward and as many as the memory budget allows at the example's length
    (:func:`probe.inputs.budget.rows_for`); 0 at padding, at positions the baseline leaves
    unchanged and after the last position the objective reads."""
    from probe.inputs.budget import rows_for

    out = torch.zeros(input_ids.shape, dtype=torch.float32)
    for r in range(input_ids.shape[0]):
        n = int(attention_mask[r].sum())
        rows = rows_for(adapter, n, cap=group, grad=False)  # a long input: fewer occlusions a forward
        scores = _one_example(adapter, objective, input_ids[r, :n], baseline[r, :n], rows)
        out[r, :n] = scores
    return out


def _one_example(adapter: Any, objective: Any, ids: torch.Tensor, base: torch.Tensor, group: int) -> torch.Tensor:
    """``[n]`` the blank-out scores of one unpadded example ``ids`` ``[n]``."""
    from probe.analyses.common.targets import KeptLogits
    from transformers import DynamicCache

    n = len(ids)
    ids1, mask1 = ids[None], torch.ones(1, n, dtype=torch.long, device=ids.device)
    aux = objective.aux(adapter, ids1, mask1)  # [1, 2]: the predicting position and the token read
    read = torch.unique(aux[:, 0])  # sorted absolute positions whose logits the objective reads
    last = int(read.max())
    model = adapter.model
    cache = DynamicCache(config=model.config)
    key = _cache_argument(model)
    clean = model(input_ids=ids1[:, : last + 1], use_cache=True, logits_to_keep=read, **{key: cache})
    value = _value(objective, KeptLogits(clean.logits, read), mask1, aux)  # [1]
    scores = torch.zeros(n, dtype=torch.float32)
    todo = [t for t in range(last + 1) if int(base[t]) != int(ids[t])]
    for k in range(0, len(todo), group):
        chunk = todo[k : k + group]
        start, g = chunk[0], len(chunk)
        rows = ids[start : last + 1].repeat(g, 1)  # [g, last+1−start]: positions start … last
        for j, t in enumerate(chunk):
            rows[j, t - start] = base[t]
        prefix = _prefix(cache, start, g, model.config)
        got = model(
            input_ids=rows,
            attention_mask=torch.ones(g, last + 1, dtype=torch.long, device=ids.device),
            position_ids=torch.arange(start, last + 1, device=ids.device).expand(g, -1),
            use_cache=True,
            logits_to_keep=read - start,
            **{key: prefix},
        )
        occluded = _value(objective, KeptLogits(got.logits, read), mask1.expand(g, -1), aux.expand(g, -1))
        scores[chunk] = (value - occluded).float().cpu()
    return scores


def _cache_argument(model: Any) -> str:
    """The name the model's forward takes its key/value cache by (``cache`` since transformers
    5.x; ``past_key_values`` before, and deprecated after)."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _prefix(cache: Any, start: int, rows: int, config: Any) -> Any:
    """A copy of the clean ``cache`` holding positions ``< start``, repeated for ``rows`` rows."""
    from transformers import DynamicCache

    if start == 0:
        return DynamicCache(config=config)
    prefix = copy.deepcopy(cache)
    prefix.crop(start - prefix.get_seq_length())  # a negative count: the tokens removed from the end
    if rows > 1:
        prefix.batch_repeat_interleave(rows)
    return prefix


def _value(objective: Any, out: Any, mask: torch.Tensor, aux: torch.Tensor) -> torch.Tensor:
    """``[b]`` the objective's scalar of ``out`` (its logits at the positions read)."""
    from probe.analyses.common.objective_base import check_scalar

    return check_scalar(objective.scalar(out, mask, aux), aux.shape[0], objective.describe())


def occlusion_cost(n: int, last: Optional[int] = None, group: int = GROUP) -> tuple:
    """``(token-forwards here, token-forwards of captum's path)`` for an example of ``n``
    tokens read up to position ``last`` (default ``n − 2``: the next-token loss of the last
    token), every position occluded: the saving :func:`causal_blank_out` makes."""
    last = n - 2 if last is None else last
    here = last + 1
    for k in range(0, last + 1, group):
        here += min(group, last + 1 - k) * (last + 1 - k)
    return here, n * n
