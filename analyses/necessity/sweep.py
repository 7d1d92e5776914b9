"""One batched sweep of head removals: the clean run, restart, row replication, trimming.

Every "remove these heads and run the model again" analysis is a declaration over
:func:`sweep_batch`: *units* (one head, or a group removed together) and, per unit, the
replacement of each of its heads' output ``z`` (None: zero; a tensor: mean, resample,
uniform-weight or null values, a patch from another run). The sweep owns how the forwards
run, so the single-head ablation (:mod:`probe.analyses.necessity.ablation`, Michel et al.
2019) and the claims' removals in five modes (:mod:`probe.analyses.claims.removal`, Wang et
al. 2022 for mean-ablation) share it:

* **one clean forward** per batch reads, through one :class:`probe.tracing.trace_context.Trace`, the head
  outputs ``z`` and values ``v`` the replacements are made from and the residual stream
  entering each layer;
* **row replication**: a forward carries ``k`` units × ``b`` examples (row ``j·b + i`` is
  example ``i`` with unit ``j`` removed, per-row :class:`probe.tracing.edits.Zero` / :class:`~probe.tracing.edits.Patch` edits);
* **restart** (:class:`probe.tracing.restart.RestartFrom`): units are grouped by their first
  layer, and their forwards start there from the cached clean stream, so layers before it
  are not recomputed; a group of one layer's heads in eval mode starts at that layer's
  output projection from the clean per-head outputs (``site-restart``: its Q/K/V and softmax
  are skipped too); ``layer-restart`` otherwise; full forwards where the family has no
  restart (encoder-decoder models);
* **trimming and a token budget**: each forward carries at most ``max_tokens`` padded
  tokens (rows × length), the examples taken longest first, each group cut to its own
  longest length when the readout ignores padding (right padding only), and a batch's
  examples split into the runs that pad least for what a forward costs
  (:func:`plan_forwards`: a block of 32 random EWT sentences in batches of 8 pads 33% of
  its tokens, which the sequential test's removals computed); a causal model's next-token
  loss stops each row at its last labelled position (:func:`trim_lengths`).

Rows compute the same function as one full forward per unit (the naive loop,
:func:`probe.analyses.necessity.ablation.sweep_heads_naive`), up to float rounding.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import torch

from probe.analyses.common.metrics import MetricBatch
from probe.interventions.heads import HeadIntervention
from probe.models.sites import Site, supports_restart, supports_site_restart
from probe.tracing.restart import RestartFrom
from probe.tracing.edits import Edit, Patch, Zero
from probe.tracing.trace_context import Trace

__all__ = [
    "MAX_TOKENS",
    "CleanRun",
    "clean_run",
    "sweep_batch",
    "plan_forwards",
    "cheapest_runs",
    "trimmable",
    "trim_lengths",
    "cut",
    "take",
    "restart_path",
]

#: most padded tokens (rows × length) per forward: bounds memory
MAX_TOKENS = 2048

#: what one more forward costs, in padded tokens: SmolLM2-135M on 2 cores runs a forward of
#: 1 × 20 tokens in 107 ms and of 64 × 20 in 2.13 s (1.6 ms a token, ~75 ms a forward), so a
#: run of examples is split where its shorter ones would pad more than ~64 tokens per forward
FORWARD_TOKENS = 64


def restart_path(adapter, stack: Optional[str], restart: bool = True) -> str:
    """How the sweep's forwards run: ``site-restart`` / ``layer-restart`` / ``full forward``."""
    if not (restart and supports_restart(adapter, stack)):
        return "full forward"
    return "site-restart" if supports_site_restart(adapter, stack) else "layer-restart"


@dataclass
class CleanRun:
    """The clean forward of one batch and what the sweep reads from it (detached).

    Attributes:
        output: the model's output (what ``forward`` returned).
        z: layer -> ``[b, seq, heads, head_dim]`` head outputs (the layers asked for).
        v: layer -> ``[b, seq, heads, head_dim]`` values (when asked for; kv heads repeated).
        resid: layer -> ``[b, seq, d_model]`` the stream entering the layer (restart).
        proj_in: layer -> ``[b, seq, heads·head_dim]`` the output projection's input (site restart).
    """

    output: Any
    z: dict
    v: dict
    resid: dict
    proj_in: dict


def clean_run(
    adapter,
    forward: Callable[[Any, MetricBatch], Any],
    batch: MetricBatch,
    layers: Sequence[int],
    *,
    stack: Optional[str] = None,
    path: str = "full forward",
    values: bool = False,
    stop: bool = False,
) -> CleanRun:
    """``forward(adapter, batch)`` once, reading ``z`` (and ``v``) of ``layers`` and, for a
    restart ``path``, the residual stream (and output-projection inputs) of every layer;
    with ``stop`` (a caller that knows the clean output), only up to the last of ``layers``
    (:class:`probe.tracing.trace_context.Trace`'s ``stop_before``: ``output`` is ``None``
    where it stopped)."""
    stack = stack or adapter.default_stack
    n = adapter.n_layers_of(stack)
    read: list = [Site("z", layer, stack) for layer in layers]
    if values:
        read += [Site("v", layer, stack) for layer in layers]
    if path != "full forward":
        read += [Site("resid_pre", layer, stack) for layer in range(n)]
    if path == "site-restart":
        read += [Site("proj_in", layer, stack) for layer in range(n)]
    until = max(layers) + 1 if stop and layers and path != "full forward" else n  # restart: layers of their own
    out = None
    with Trace(adapter, read=read, stack=stack, path="hooks", stop_before=until if until < n else None) as tr:
        out = forward(adapter, batch)
    c = tr.cache

    def of(kind: str, wanted) -> dict:
        return {layer: c[kind, layer, stack] for layer in wanted if (kind, layer, stack) in c}

    return CleanRun(
        output=out,
        z=of("z", layers),
        v=of("v", layers) if values else {},
        resid=of("resid_pre", range(n)) if path != "full forward" else {},
        proj_in=of("proj_in", range(n)) if path == "site-restart" else {},
    )


def trimmable(adapter, readout: Any, batch: MetricBatch) -> bool:
    """Can rows be cut to a shorter length? A readout that ignores padding
    (``readout.ignores_padding``), a right-padded batch of ``[rows, seq]`` inputs, aux
    tensors ``[rows]`` or ``[rows, seq]``."""
    if not getattr(readout, "ignores_padding", False) or adapter.arch == "encoder-decoder":
        return False
    mask = batch.inputs["attention_mask"]
    seq = mask.shape[1]
    right_padded = bool((mask[:, 1:] <= mask[:, :-1]).all())  # each row: ones, then zeros
    shapes_ok = all(t.dim() == 2 and t.shape[1] == seq for t in batch.inputs.values()) and all(
        t.dim() == 1 or (t.dim() == 2 and t.shape[1] == seq) for t in batch.aux.values()
    )
    return right_padded and shapes_ok


def trim_lengths(adapter, readout: Any, batch: MetricBatch) -> Any:
    """Per row of ``batch``, how many leading positions a forward must compute for ``readout``
    (a list), or ``False`` where rows cannot be cut (:func:`trimmable`): each row's length;
    in a causal model, for a readout that reads only the positions ``batch.aux["labels"]``
    labels (``readout.reads_labelled``: the next-token loss), up to its last labelled
    position. A causal position is seen only by those after it, and a sentence's last token
    has no next token to predict, so its column is never read: the removals of SmolLM2's
    report computed one token in 22 for nothing."""
    if not trimmable(adapter, readout, batch):
        return False
    lengths = batch.lengths.tolist()
    labels, ids = batch.aux.get("labels"), batch.inputs["input_ids"]
    if adapter.arch != "decoder" or not getattr(readout, "reads_labelled", False) or labels is None:
        return lengths
    if labels.shape != ids.shape:
        return lengths
    seq = torch.arange(1, ids.shape[1] + 1, device=labels.device)
    last = torch.where(labels != -100, seq, torch.zeros_like(seq)).amax(1)  # 1 + the last labelled position, 0: none
    return [max(1, min(int(n), int(r))) for n, r in zip(lengths, last.tolist())]


def plan_forwards(
    lengths: Sequence[int], k: int, max_tokens: int = MAX_TOKENS, per_forward: int = FORWARD_TOKENS
) -> list:
    """Split ``k·b`` rows (``k`` units × ``b`` examples) into forwards.

    Examples are taken longest first; a forward carries a run of them, all ``k`` units (or,
    when one example's ``k`` rows exceed the budget, a slice of the units), and at most
    ``max_tokens`` = rows × the run's longest length tokens (at least one row). The runs are
    the cheapest split of the length-sorted examples (dynamic programming over where runs
    end): a forward costs its padded tokens plus ``per_forward`` (:data:`FORWARD_TOKENS`), so
    a run ends where its shorter examples would pad more than another forward costs. Where
    every length is the same (a batch that is not trimmed) that is the fewest forwards,
    each as full as the budget allows.

    Returns:
        ``[(examples, units)]``: example indices (a list) and a ``slice`` of the units.
    """
    order = sorted(range(len(lengths)), key=lambda i: -int(lengths[i]))
    size = [max(1, int(lengths[i])) for i in order]

    def cost(i: int, j: int) -> Optional[int]:  # the run order[i:j], its longest size[i]
        rows = (j - i) * k
        if rows * size[i] > max_tokens and j - i > 1:
            return None  # longer runs only grow
        forwards = 1 if rows * size[i] <= max_tokens else -(-k // max(1, max_tokens // size[i]))
        return rows * size[i] + forwards * per_forward

    plan: list = []
    for i, j in cheapest_runs(len(order), cost):
        if (j - i) * k * size[i] <= max_tokens:
            plan.append((order[i:j], slice(0, k)))
            continue
        per = max(1, max_tokens // size[i])  # one example whose k rows exceed the budget
        plan.extend(([order[i]], slice(s, min(k, s + per))) for s in range(0, k, per))
    return plan


def cheapest_runs(n: int, cost: Callable[[int, int], Optional[int]]) -> list:
    """``[(start, stop)]``: the split of ``0 … n−1`` into contiguous runs whose summed
    ``cost(start, stop)`` is least (dynamic programming over where runs end). ``cost`` is
    ``None`` for a run that cannot be, and then for every longer run ending at ``stop``; a
    run of one always can. Ties keep the shortest last run."""
    best: list = [(0, 0)] + [None] * n  # best[stop]: (cost, start of the last run) of the first stop
    for stop in range(1, n + 1):
        for start in range(stop - 1, -1, -1):
            c = cost(start, stop)
            if c is None:
                break
            if best[stop] is None or best[start][0] + c < best[stop][0]:
                best[stop] = (best[start][0] + c, start)
    runs, stop = [], n
    while stop:
        start = best[stop][1]
        runs.append((start, stop))
        stop = start
    return runs[::-1]


def cut(t: torch.Tensor, rows: torch.Tensor, length: Optional[int] = None) -> torch.Tensor:
    """Rows ``rows`` of ``t`` ``[rows, ...]``; with ``length``, positions ``:length`` of a
    ``[rows, seq, ...]`` tensor."""
    t = t.index_select(0, rows.to(t.device))
    return t if length is None or t.dim() < 2 else t[:, :length]


def take(batch: MetricBatch, rows: torch.Tensor, length: Optional[int]) -> MetricBatch:
    """Rows ``rows`` of ``batch`` (cut to ``length`` positions when given)."""
    return MetricBatch(
        inputs={n: cut(t, rows, length) for n, t in batch.inputs.items()},
        aux={n: cut(t, rows, length) for n, t in batch.aux.items()},
        special=None if batch.special is None else cut(batch.special, rows, length),
    )


def _repeat(t: torch.Tensor, k: int) -> torch.Tensor:
    return t.repeat(k, *([1] * (t.dim() - 1)))


def sweep_batch(
    adapter,
    forward: Callable[[Any, MetricBatch], Any],
    read: Callable[[Any, MetricBatch, torch.Tensor, int], torch.Tensor],
    batch: MetricBatch,
    clean: CleanRun,
    units: Sequence[tuple],
    replacement: Callable[[int, int], Optional[torch.Tensor]],
    *,
    stack: Optional[str] = None,
    path: str = "full forward",
    trim: Any = False,
    max_tokens: int = MAX_TOKENS,
) -> torch.Tensor:
    """The readouts of ``batch`` with each unit removed.

    Args:
        forward: ``forward(adapter, batch) -> outputs`` (the objective's or metric's).
        read: ``read(outputs, big_batch, rows, k) -> [k·len(rows), ...]``: per-row readouts
            of a forward of ``k`` copies of examples ``rows`` (row ``j·len(rows) + i``).
        clean: :func:`clean_run` of this batch with this ``path``.
        units: tuples of ``(layer, head)``.
        replacement: ``replacement(j, layer) -> [b, seq, heads, head_dim]`` (the whole
            batch, every head; the unit's heads are taken from it) or None (zero).
        path: :func:`restart_path`; ``trim``: :func:`trimmable`, or per row the positions its
            readout needs (:func:`trim_lengths`; rows cut to them).

    Returns:
        ``[len(units), b, ...]`` readouts, in unit order.
    """
    b = batch.rows
    if isinstance(trim, bool):
        lengths = batch.lengths.tolist() if trim else [batch.inputs["input_ids"].shape[1]] * b
    else:  # the positions each row's readout needs (:func:`trim_lengths`)
        lengths, trim = [int(n) for n in trim], True
    restart = path != "full forward"
    groups: dict = {}  # first layer of the unit -> unit indices: a forward restarts there
    for j, unit in enumerate(units):
        groups.setdefault(min(layer for layer, _ in unit) if restart else -1, []).append(j)
    out: Optional[torch.Tensor] = None
    for first, members in sorted(groups.items()):
        one_layer = all(layer == first for j in members for layer, _ in units[j])
        site = path == "site-restart" and one_layer
        values = {j: {layer: replacement(j, layer) for layer in {l for l, _ in units[j]}} for j in members}
        for examples, part in plan_forwards(lengths, len(members), max_tokens):
            rows = torch.as_tensor(examples)
            length = max(lengths[i] for i in examples) if trim else None
            sub = take(batch, rows, length)
            chosen = members[part]
            k, n = len(chosen), len(examples)
            edits: dict[int, list[Edit]] = {}
            for slot, j in enumerate(chosen):
                rows_of_unit = tuple(range(slot * n, (slot + 1) * n))
                for layer, h in units[j]:
                    v = values[j][layer]
                    edits.setdefault(layer, []).append(
                        Zero(head=h, rows=rows_of_unit)
                        if v is None
                        else Patch(value=cut(v, rows, length)[:, :, h], head=h, rows=rows_of_unit)
                    )
            big = sub.repeat(k)
            with ExitStack() as st:
                st.enter_context(HeadIntervention(adapter, edits, stack=stack))
                if restart:
                    hidden = _repeat(cut(clean.resid[first], rows, length), k)
                    context = _repeat(cut(clean.proj_in[first], rows, length), k) if site else None
                    st.enter_context(RestartFrom(adapter, first, hidden, stack=stack, context=context))
                outputs = forward(adapter, big)
            r = read(outputs, big, rows, k)
            r = r.reshape(k, n, *r.shape[1:])
            if out is None:
                out = torch.empty((len(units), b) + tuple(r.shape[2:]), dtype=r.dtype, device=r.device)
            out[torch.as_tensor(chosen)[:, None], rows.to(out.device)[None, :]] = r.to(out.dtype)
    assert out is not None
    return out
