"""Single-head ablation sweep: the change of a per-example metric when each head is
zeroed or mean-ablated, with bootstrap confidence intervals over examples.

Michel et al. (2019, "Are Sixteen Heads Really Better than One?") ablate one head at a
time and report the metric change; mean-ablation replaces a head's output by its mean
over the corpus, here taken separately for word and special-token positions (the
"per position kind" mean), so position-specific offsets survive.

Batched: for each chunk of ``b`` examples and each layer ``l``, forwards carry the
ablation of every swept head of layer ``l`` (``k`` heads → ``k·b`` rows, row
``j·g + i`` = example ``i`` of a group of ``g`` with head ``j`` ablated, through per-row
:class:`probe.interventions.HeadEdit` s) and start from the clean run of that chunk
(:mod:`probe.analyses.necessity.restart`), so layers before the ablated one are not recomputed:

* ``site-restart`` (eval mode): at layer ``l``'s attention output projection, from the
  cached clean per-head outputs — ablating head ``h`` changes only its slice of the
  projection's input, so layer ``l``'s Q/K/V projections and softmax are skipped too;
* ``layer-restart`` (a model in training mode): at layer ``l``'s input, from the cached
  residual stream;
* ``full forward``: where restart is not supported (encoder-decoder models, T5).

Each forward carries at most ``max_tokens`` padded tokens (rows × length): the chunk's
examples are taken longest first, and with the built-in metrics, which ignore padding
(masked pooling, ``−100`` labels), each group of examples is cut to its own longest
length (right padding only). This bounds memory (one big forward allocates fresh pages
for every activation) and skips the padding of short sentences; the rows compute the
same function, so results equal :func:`sweep_heads_naive` (the reference loop: one
full forward of the whole chunk per ablated head) up to float rounding.

Shapes: ``SweepResult.ablated`` is ``[n_heads_swept, n_examples]``, ``clean`` is
``[n_examples]``.
"""

from __future__ import annotations

import logging
import warnings
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np
import pandas as pd
import torch

from probe.analyses.common.bootstrap import bootstrap_mean_ci
from probe.analyses.common.metrics import Metric, MetricBatch, as_corpus, get_metric
from probe.analyses.necessity.restart import ResidualCache, RestartFrom, supports_restart, supports_site_restart
from probe.interventions import HeadEdit, HeadIntervention, HeadOutputRecorder

log = logging.getLogger(__name__)

__all__ = [
    "SweepResult",
    "sweep_heads",
    "sweep_heads_naive",
    "sweep_values",
    "position_kind_means",
    "check_heads",
    "run_rows",
    "plan_forwards",
    "MIN_MEAN_EXAMPLES",
    "MAX_TOKENS",
    "ABLATION_MODES",
]

ABLATION_MODES = ("zero", "mean")
MIN_MEAN_EXAMPLES = 8
MAX_TOKENS = 2048
COLUMNS = ["layer", "head", "mode", "metric", "clean", "ablated", "delta", "ci_low", "ci_high"]


@dataclass(frozen=True)
class SweepResult:
    """Per-head ablation effects.

    Attributes:
        table: ``layer, head, mode, metric, clean, ablated, delta, ci_low, ci_high``
            (means over examples; ``delta = ablated − clean`` with its bootstrap CI).
        clean: ``[n_examples]`` clean metric per example.
        ablated: ``[n_heads, n_examples]`` metric per example with each head ablated.
        heads: the swept ``(layer, head)`` pairs, in the row order of ``ablated``.
        path: ``site-restart``, ``layer-restart``, ``full forward`` (batched rows) or
            ``naive loop``.
    """

    table: pd.DataFrame
    clean: np.ndarray
    ablated: np.ndarray
    heads: tuple
    path: str

    def to_frame(self) -> pd.DataFrame:
        return self.table.copy()


def check_heads(adapter, heads: Optional[Sequence], stack: Optional[str] = None) -> list:
    """``heads`` (``None``: all) as a list of int pairs; ``ValueError`` naming the valid
    range for a head that does not exist."""
    n_layers = adapter.n_layers_of(stack)
    if heads is None:
        return [(l, h) for l in range(n_layers) for h in range(adapter.n_heads)]
    out = []
    for pair in heads:
        try:
            layer, head = (int(x) for x in pair)
        except (TypeError, ValueError):
            raise ValueError(f"a head is a (layer, head) pair of integers, got {pair!r}") from None
        adapter.check_head(layer, head, stack)
        out.append((layer, head))
    if not out:
        raise ValueError("no heads to ablate")
    return out


def _check_mode(mode: str) -> None:
    if mode not in ABLATION_MODES:
        raise ValueError(f"unknown ablation mode {mode!r}; use one of {', '.join(ABLATION_MODES)}")


@torch.no_grad()
def position_kind_means(
    adapter, corpus, metric: Metric, batch_size: int = 16, stack: Optional[str] = None
) -> torch.Tensor:
    """Mean output of every head over the corpus, per position kind.

    Returns:
        ``[2, n_layers, n_heads, head_dim]``: index 0 over word-token positions, 1 over
        special-token positions (a kind absent from the corpus gets the other's mean).

    Warns:
        UserWarning when the corpus has fewer than :data:`MIN_MEAN_EXAMPLES` examples.
    """
    if len(corpus) < MIN_MEAN_EXAMPLES:
        warnings.warn(
            f"mean-ablation averages head outputs over only {len(corpus)} example(s); "
            f"the mean is noisy — give at least {MIN_MEAN_EXAMPLES} examples or use --mode zero",
            UserWarning,
            stacklevel=3,
        )
    n_layers = adapter.n_layers_of(stack)
    sums = torch.zeros(2, n_layers, adapter.n_heads, adapter.head_dim, dtype=torch.float64)
    counts = torch.zeros(2, dtype=torch.float64)
    with HeadOutputRecorder(adapter, stack=stack) as rec:
        for _, batch in metric.batches(adapter, corpus, batch_size):
            metric.forward(adapter, batch)
            valid = batch.inputs["attention_mask"].bool().cpu()
            kind = batch.special.cpu()
            for k, sel in enumerate((valid & ~kind, valid & kind)):
                counts[k] += float(sel.sum())
                for layer in range(n_layers):
                    sums[k, layer] += rec.outputs[layer].cpu().double()[sel].sum(0)
    means = sums / counts.clamp(min=1)[:, None, None, None]
    total = sums.sum(0) / counts.sum().clamp(min=1)
    for k in (0, 1):
        if counts[k] == 0:
            means[k] = total
    return means.float()


def _row_values(means: torch.Tensor, layer: int, batch: MetricBatch) -> torch.Tensor:
    """``[b, seq, head, head_dim]``: each position's per-kind mean for ``layer``."""
    m = means[:, layer].to(batch.inputs["input_ids"].device)  # [2, head, dh]
    return m[batch.special.long()]  # type: ignore[union-attr]  # per-kind means come with batches that carry their special mask


def _edits(layer: int, heads: Sequence[int], b: int, values: Optional[torch.Tensor]) -> list:
    """One edit per head; head ``j`` of ``heads`` acts on rows ``j·b … j·b + b − 1``."""
    out = []
    for j, h in enumerate(heads):
        rows = tuple(range(j * b, (j + 1) * b))
        if values is None:
            out.append(HeadEdit(layer, h, "zero", rows=rows))
        else:
            out.append(HeadEdit(layer, h, "patch", value=values[:, :, h], rows=rows))
    return out


def _repeat_ref(reference: Optional[torch.Tensor], k: int):
    return None if reference is None else reference.repeat(k, *([1] * (reference.dim() - 1)))


def run_rows(
    adapter,
    metric: Metric,
    batch: MetricBatch,
    reference,
    layer: int,
    heads: Sequence[int],
    values: Optional[torch.Tensor] = None,
    residual: Optional[torch.Tensor] = None,
    stack: Optional[str] = None,
    context: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """One forward of ``len(heads)·b`` rows, head ``heads[j]`` of ``layer`` replaced on
    the ``j``-th copy of the batch (zeroed, or set to ``values[:, :, head]`` with
    ``values`` ``[b, seq, n_heads, head_dim]``). With ``residual`` ``[b, seq, dim]``
    (the stream entering ``layer``), the forward restarts at ``layer``; with also
    ``context`` ``[b, seq, n_heads·head_dim]`` (``layer``'s clean per-head output
    site), at ``layer``'s output projection.

    Returns:
        ``[len(heads), b]`` metric values.
    """
    k, b = len(heads), batch.rows
    big = batch.repeat(k)
    with ExitStack() as stack_ctx:
        stack_ctx.enter_context(HeadIntervention(adapter, _edits(layer, heads, b, values), stack=stack))
        if residual is not None:
            ctx = None if context is None else _repeat_ref(context, k)
            stack_ctx.enter_context(RestartFrom(adapter, layer, _repeat_ref(residual, k), stack=stack, context=ctx))
        out = metric.forward(adapter, big)
    return metric.score(out, big, _repeat_ref(reference, k)).reshape(k, b)


def _trimmable(adapter, metric: Metric, batch: MetricBatch) -> bool:
    """Can rows be cut to a shorter length? A metric that ignores padding, a
    right-padded batch of ``[rows, seq]`` inputs, aux tensors ``[rows]`` or ``[rows, seq]``."""
    if not metric.ignores_padding or adapter.arch == "encoder-decoder":
        return False
    mask = batch.inputs["attention_mask"]
    seq = mask.shape[1]
    right_padded = bool((mask[:, 1:] <= mask[:, :-1]).all())  # each row: ones, then zeros
    shapes_ok = all(t.dim() == 2 and t.shape[1] == seq for t in batch.inputs.values()) and all(
        t.dim() == 1 or (t.dim() == 2 and t.shape[1] == seq) for t in batch.aux.values()
    )
    return right_padded and shapes_ok


def plan_forwards(lengths: Sequence[int], k: int, max_tokens: int = MAX_TOKENS) -> list:
    """Split one layer's ``k·b`` rows (``k`` heads × ``b`` examples) into forwards.

    Examples are taken longest first; a forward carries a group of examples, all ``k``
    heads (or, when one example's ``k`` rows exceed the budget, a slice of the heads),
    and at most ``max_tokens`` = rows × the group's longest length tokens (at least one row).

    Returns:
        ``[(examples, heads)]``: example indices (a list) and a ``slice`` of the heads.
    """
    order = sorted(range(len(lengths)), key=lambda i: -int(lengths[i]))
    plan, i = [], 0
    while i < len(order):
        longest = max(1, int(lengths[order[i]]))
        g = max_tokens // (k * longest)
        if g >= 1:
            plan.append((order[i : i + g], slice(0, k)))
            i += g
            continue
        per = max(1, max_tokens // longest)
        plan.extend(([order[i]], slice(s, min(k, s + per))) for s in range(0, k, per))
        i += 1
    return plan


def _cut(t: torch.Tensor, rows: torch.Tensor, length: Optional[int] = None) -> torch.Tensor:
    """Rows ``rows`` of ``t`` ``[rows, ...]``; with ``length``, positions ``:length`` of a
    ``[rows, seq, ...]`` tensor."""
    t = t.index_select(0, rows.to(t.device))
    return t if length is None or t.dim() < 2 else t[:, :length]


def _take(batch: MetricBatch, rows: torch.Tensor, length: Optional[int]) -> MetricBatch:
    """Rows ``rows`` of ``batch`` (cut to ``length`` positions when given)."""
    return MetricBatch(
        inputs={n: _cut(t, rows, length) for n, t in batch.inputs.items()},
        aux={n: _cut(t, rows, length) for n, t in batch.aux.items()},
        special=None if batch.special is None else _cut(batch.special, rows, length),
    )


def _sweep_chunk(
    adapter, metric: Metric, batch: MetricBatch, layers: dict, means, stack, restart: bool, max_tokens: int
):
    """Clean and ablated scores of one chunk: ``[b]`` and ``{layer: [k, b]}``, ``k`` =
    the heads swept in that layer, in the order of ``layers[layer]``."""
    site = restart and supports_site_restart(adapter, stack)
    with ExitStack() as ctx:
        cache: Any = (
            ctx.enter_context(ResidualCache(adapter, stack, contexts=site)) if restart else None
        )  # None unless restarting
        out = metric.forward(adapter, batch)
    ref = metric.reference(out, batch)
    clean = metric.score(out, batch, ref)
    trim = _trimmable(adapter, metric, batch)
    lengths = batch.lengths.tolist() if trim else [batch.inputs["input_ids"].shape[1]] * batch.rows
    ablated = {}
    for layer, heads in layers.items():
        scores = torch.empty(len(heads), batch.rows, dtype=clean.dtype, device=clean.device)
        for examples, part in plan_forwards(lengths, len(heads), max_tokens):
            rows = torch.as_tensor(examples)
            length = max(lengths[i] for i in examples) if trim else None
            sub = _take(batch, rows, length)
            values = None if means is None else _row_values(means, layer, sub)
            residual = _cut(cache.inputs[layer], rows, length) if restart else None
            context = _cut(cache.contexts[layer], rows, length) if site else None
            sub_ref = None if ref is None else _cut(ref, rows)
            s = run_rows(adapter, metric, sub, sub_ref, layer, heads[part], values, residual, stack, context)
            scores[part, rows.to(scores.device)] = s.to(scores.dtype)
        ablated[layer] = scores
    return clean, ablated


def _setup(adapter, corpus, metric, mode, heads, stack, batch_size):
    corpus = as_corpus(corpus)
    metric = get_metric(metric, adapter, corpus)
    _check_mode(mode)
    heads = check_heads(adapter, heads, stack)
    means = position_kind_means(adapter, corpus, metric, batch_size, stack) if mode == "mean" else None
    return corpus, metric, heads, means


def _result(heads, clean, ablated, mode, metric_name: str, path, n_boot, confidence, seed) -> SweepResult:
    delta = ablated - clean[None, :]
    low, high = bootstrap_mean_ci(delta, n_boot=n_boot, confidence=confidence, seed=seed)
    table = pd.DataFrame(
        {
            "layer": [l for l, _ in heads],
            "head": [h for _, h in heads],
            "mode": mode,
            "metric": metric_name,
            "clean": float(clean.mean()),
            "ablated": ablated.mean(1),
            "delta": delta.mean(1),
            "ci_low": low,
            "ci_high": high,
        },
        columns=COLUMNS,
    )
    return SweepResult(table=table, clean=clean, ablated=ablated, heads=tuple(heads), path=path)


@torch.no_grad()
def sweep_heads(
    adapter,
    corpus,
    metric="loss",
    mode: str = "zero",
    heads: Optional[Sequence] = None,
    *,
    batch_size: int = 8,
    restart: bool = True,
    max_tokens: int = MAX_TOKENS,
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    stack: Optional[str] = None,
    progress: bool = False,
) -> SweepResult:
    """Ablate each head alone and measure ``metric`` on every example (batched).

    Args:
        corpus: a :class:`probe.inputs.Corpus` or a list of texts.
        metric: ``loss`` | ``accuracy`` | ``embedding-drift`` | a :class:`Metric` |
            a callable ``fn(outputs, batch) -> Tensor[rows]``.
        mode: ``zero`` or ``mean`` (per-position-kind corpus mean).
        heads: ``(layer, head)`` pairs (default: all ``L·H``).
        batch_size: examples per chunk (one clean forward each).
        restart: restart each forward at the ablated layer where supported.
        max_tokens: padded tokens (rows × length) per ablation forward; bounds memory.

    Raises:
        ValueError: unknown mode or metric, a metric that does not apply (naming those
            that do), a head out of range (naming the valid range), an empty corpus,
            ``max_tokens < 1``.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be ≥ 1, got {max_tokens}")
    corpus, metric, heads, means = _setup(adapter, corpus, metric, mode, heads, stack, batch_size)
    clean, ablated, path = sweep_values(
        adapter,
        corpus,
        metric,
        heads,
        means,
        batch_size=batch_size,
        restart=restart,
        max_tokens=max_tokens,
        stack=stack,
        progress=progress,
    )
    return _result(heads, clean, ablated, mode, metric.name, path, n_boot, confidence, seed)


@torch.no_grad()
def sweep_values(
    adapter,
    corpus,
    metric: Metric,
    heads: Sequence,
    means: Optional[torch.Tensor],
    *,
    batch_size: int = 8,
    restart: bool = True,
    max_tokens: int = MAX_TOKENS,
    stack: Optional[str] = None,
    progress: bool = False,
) -> tuple:
    """The per-example values behind :func:`sweep_heads` (checked arguments).

    Returns:
        ``(clean [n_examples], ablated [n_heads, n_examples], path)``; each example's
        values depend on that example only, so a corpus split in parts gives the same
        values part by part (:class:`probe.analyses.necessity.ablation_sums.AblationSums`).
    """
    from tqdm.auto import tqdm

    use_restart = restart and supports_restart(adapter, stack)
    if not use_restart:
        path = "full forward"
    else:
        path = "site-restart" if supports_site_restart(adapter, stack) else "layer-restart"
    if restart and not use_restart:
        log.info("layer restart not supported for %s; batched full forwards", adapter.family)
    by_layer: dict[int, list] = {}
    for j, (layer, head) in enumerate(heads):
        by_layer.setdefault(layer, []).append((j, head))
    layers = {layer: [h for _, h in items] for layer, items in by_layer.items()}
    n = len(corpus)
    clean = np.zeros(n)
    ablated = np.zeros((len(heads), n))
    chunks = metric.batches(adapter, corpus, batch_size)
    for idx, batch in tqdm(chunks, total=-(-n // batch_size), disable=not progress, desc="sweep"):
        c, by = _sweep_chunk(adapter, metric, batch, layers, means, stack, use_restart, max_tokens)
        clean[idx] = c.double().cpu().numpy()
        for layer, items in by_layer.items():
            ablated[np.ix_([j for j, _ in items], idx)] = by[layer].double().cpu().numpy()
    return clean, ablated, path


@torch.no_grad()
def sweep_heads_naive(
    adapter,
    corpus,
    metric="loss",
    mode: str = "zero",
    heads: Optional[Sequence] = None,
    *,
    batch_size: int = 8,
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    stack: Optional[str] = None,
    progress: bool = False,
) -> SweepResult:
    """The reference loop for :func:`sweep_heads`: one full forward of each chunk per
    ablated head (same arguments, same result up to float error)."""
    from tqdm.auto import tqdm

    corpus, metric, heads, means = _setup(adapter, corpus, metric, mode, heads, stack, batch_size)
    n = len(corpus)
    clean = np.zeros(n)
    ablated = np.zeros((len(heads), n))
    for idx, batch in tqdm(
        metric.batches(adapter, corpus, batch_size), total=-(-n // batch_size), disable=not progress, desc="naive sweep"
    ):
        out = metric.forward(adapter, batch)
        ref = metric.reference(out, batch)
        clean[idx] = metric.score(out, batch, ref).double().cpu().numpy()
        for j, (layer, head) in enumerate(heads):
            if means is None:
                edit = HeadEdit(layer, head, "zero")
            else:
                edit = HeadEdit(layer, head, "patch", value=_row_values(means, layer, batch)[:, :, head])
            with HeadIntervention(adapter, [edit], stack=stack):
                out = metric.forward(adapter, batch)
            ablated[j, idx] = metric.score(out, batch, ref).double().cpu().numpy()
    return _result(heads, clean, ablated, mode, metric.name, "naive loop", n_boot, confidence, seed)
