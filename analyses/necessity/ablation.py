"""Single-head ablation sweep: the change of a per-example metric when each head is
zeroed or mean-ablated, with bootstrap confidence intervals over examples.

Michel et al. (2019, "Are Sixteen Heads Really Better than One?") ablate one head at a
time and report the metric change; mean-ablation replaces a head's output by its mean
over the corpus, here taken separately per position kind (content, each special token,
a decoder's first position: :mod:`probe.analyses.necessity.position_kinds`), so
position-specific offsets survive.

Batched by the one sweep (:mod:`probe.analyses.necessity.sweep`): for each chunk of ``b``
examples and each layer ``l``, forwards carry the ablation of every swept head of layer
``l`` (``k`` heads → ``k·b`` rows, row ``j·g + i`` = example ``i`` of a group of ``g`` with
head ``j`` ablated, through per-row :class:`probe.tracing.edits.Zero` / :class:`~probe.tracing.edits.Patch` edits) and start from
the clean run of that chunk (:mod:`probe.tracing.restart`), so layers before the ablated one are
not recomputed:

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
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import pandas as pd
import torch

from probe.analyses.common.bootstrap import bootstrap_mean_ci
from probe.analyses.common.metrics import MetricBatch, as_corpus
from probe.analyses.common.objective import Objective, given_objective
from probe.analyses.necessity.sweep import (
    MAX_TOKENS,
    CleanRun,
    clean_run,
    cut,
    plan_forwards,
    restart_path,
    sweep_batch,
    trim_lengths,
)
from probe.errors import InputError
from probe.interventions.heads import HeadIntervention, HeadOutputRecorder
from probe.tracing.edits import Edit, Patch, Zero

from probe.analyses.necessity.position_kinds import KindMeans, position_kinds

log = logging.getLogger(__name__)

__all__ = [
    "SweepResult",
    "sweep_heads",
    "sweep_heads_naive",
    "sweep_values",
    "position_kind_means",
    "kind_means",
    "warn_few_mean_examples",
    "KindMeans",
    "check_heads",
    "run_rows",
    "plan_forwards",
    "check_mode",
    "row_values",
    "scorer",
    "sweep_result",
    "MIN_MEAN_EXAMPLES",
    "MEAN_SAMPLE",
    "MAX_TOKENS",
    "ABLATION_MODES",
]

ABLATION_MODES = ("zero", "mean")
MIN_MEAN_EXAMPLES = 8
#: the most examples the head means are averaged over: a larger corpus gives a seeded random
#: sample of this many (MiniLM on EWT dev: every head's mean-ablation harm within 0.00011 of
#: the whole corpus's means, 2.1% relative at most, for a quarter of the forwards; docs/screening.md)
MEAN_SAMPLE = 512
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
            raise InputError(f"a head is a (layer, head) pair of integers, got {pair!r}") from None
        adapter.check_head(layer, head, stack)
        out.append((layer, head))
    if not out:
        raise InputError("no heads to ablate")
    return out


def check_mode(mode: str) -> None:
    """``ValueError`` naming the modes for one not in :data:`ABLATION_MODES`."""
    if mode not in ABLATION_MODES:
        raise InputError(f"unknown ablation mode {mode!r}; use one of {', '.join(ABLATION_MODES)}")


@torch.no_grad()
def position_kind_means(
    adapter,
    corpus,
    objective: Objective,
    batch_size: int = 16,
    stack: Optional[str] = None,
    sample: Optional[int] = MEAN_SAMPLE,
    seed: int = 0,
    layers: Optional[Sequence[int]] = None,
) -> KindMeans:
    """Mean output of every head over the corpus, per position kind.

    The value mean-ablation puts in a head's place (Wang et al. 2022): what the head writes
    on average at a position of that kind (:mod:`probe.analyses.necessity.position_kinds`:
    content, each special token apart, a decoder's first position), averaged over every
    example, or over a seeded random ``sample`` of them where the corpus has more
    (:data:`MEAN_SAMPLE`; ``None``: every example).

    ``layers``: only these layers' heads (each forward ends after the last of them: SmolLM2's
    one necessary head in layer 1 took 5.9 s of the report for all 30 layers' means); the
    others' values are NaN, so a removal that reads them shows it.

    Returns:
        a :class:`KindMeans`: ``values`` ``[n_kinds, n_layers, n_heads, head_dim]`` (a
        kind absent from the corpus gets the one mean over all positions, ``overall``).

    Warns:
        UserWarning when the corpus has fewer than :data:`MIN_MEAN_EXAMPLES` examples.
    """
    warn_few_mean_examples(len(corpus), stacklevel=4)
    if sample is not None and len(corpus) > sample:
        keep = np.sort(np.random.default_rng(seed).choice(len(corpus), sample, replace=False))
        corpus = corpus.subset(keep.tolist(), reason="not in the head means' sample")
    kinds = position_kinds(adapter)
    n_layers = adapter.n_layers_of(stack)
    sums = torch.zeros(kinds.n, n_layers, adapter.n_heads, adapter.head_dim, dtype=torch.float64)
    counts = torch.zeros(kinds.n, dtype=torch.float64)
    wanted = range(n_layers) if layers is None else sorted({int(x) for x in layers})
    for _, batch in objective.batches(adapter, corpus, batch_size, by_length=True):
        # each forward ends after the last layer asked: the means need no later layer, final norm, head or loss
        with HeadOutputRecorder(adapter, layers=wanted, stack=stack, stop=True) as rec:
            objective.forward(adapter, batch)
        valid = batch.inputs["attention_mask"].bool().cpu()
        kind = kinds.index(batch).cpu()
        for k in range(kinds.n):
            sel = valid & (kind == k)
            counts[k] += float(sel.sum())
            for layer in wanted:
                sums[k, layer] += rec.outputs[layer].cpu().double()[sel].sum(0)
    if layers is not None:  # the layers not asked for: NaN, never a silent zero mean
        sums[:, sorted(set(range(n_layers)) - set(wanted))] = float("nan")
    return kind_means(sums, counts, kinds)


def warn_few_mean_examples(n: int, stacklevel: int = 3) -> None:
    """The ``UserWarning`` that head means over fewer than :data:`MIN_MEAN_EXAMPLES` examples are noisy."""
    if n < MIN_MEAN_EXAMPLES:
        warnings.warn(
            f"mean-ablation averages head outputs over only {n} example(s); "
            f"the mean is noisy — give at least {MIN_MEAN_EXAMPLES} examples or use --mode zero",
            UserWarning,
            stacklevel=stacklevel,
        )


def kind_means(sums: torch.Tensor, counts: torch.Tensor, kinds) -> KindMeans:
    """The :class:`KindMeans` of per-kind sums of head outputs ``sums`` ``[n_kinds, n_layers,
    n_heads, head_dim]`` (float64) over ``counts`` ``[n_kinds]`` positions (a kind with none
    gets the one mean over all positions)."""
    means = sums / counts.clamp(min=1)[:, None, None, None]
    total = sums.sum(0) / counts.sum().clamp(min=1)
    means[counts == 0] = total
    return KindMeans(means.float(), total.float(), kinds, tuple(int(c) for c in counts))


def row_values(means: KindMeans, layer: int, batch: MetricBatch) -> torch.Tensor:
    """``[b, seq, head, head_dim]``: each position's per-kind mean for ``layer``."""
    return means.at(layer, batch).to(batch.inputs["input_ids"].device)


def run_rows(
    adapter,
    objective: Objective,
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
    site), at ``layer``'s output projection (:func:`probe.analyses.necessity.sweep.sweep_batch`).

    Returns:
        ``[len(heads), b]`` metric values.
    """
    path = "full forward" if residual is None else "layer-restart" if context is None else "site-restart"
    clean = CleanRun(
        None, {}, {}, {} if residual is None else {layer: residual}, {} if context is None else {layer: context}
    )
    units = [((int(layer), int(h)),) for h in heads]
    tokens = batch.rows * int(batch.inputs["input_ids"].shape[1]) * max(1, len(units))
    return sweep_batch(
        adapter,
        objective.forward,
        scorer(objective, reference),
        batch,
        clean,
        units,
        lambda j, l: values,
        stack=stack,
        path=path,
        max_tokens=tokens,
    )


def scorer(objective: Objective, reference):
    """The sweep's ``read`` (:func:`probe.analyses.necessity.sweep.sweep_batch`): metric
    scores of ``k`` copies of rows ``rows``, against those rows' clean ``reference``."""

    def read(out, big, rows, k):
        ref = None if reference is None else cut(reference, rows)
        return objective.score(out, big, None if ref is None else ref.repeat(k, *([1] * (ref.dim() - 1))))

    return read


def _sweep_chunk(
    adapter, objective: Objective, batch: MetricBatch, layers: dict, means, stack, path: str, max_tokens: int
):
    """Clean and ablated scores of one chunk: ``[b]`` and ``{layer: [k, b]}``, ``k`` =
    the heads swept in that layer, in the order of ``layers[layer]``."""
    run = clean_run(adapter, objective.forward, batch, [], stack=stack, path=path)
    ref = objective.reference(run.output, batch)
    clean = objective.score(run.output, batch, ref)
    units = [((layer, h),) for layer, heads in layers.items() for h in heads]
    values = {layer: row_values(means, layer, batch) for layer in layers} if means is not None else {}
    scores = sweep_batch(
        adapter,
        objective.forward,
        scorer(objective, ref),
        batch,
        run,
        units,
        lambda j, layer: values.get(layer),
        stack=stack,
        path=path,
        trim=trim_lengths(adapter, objective, batch),
        max_tokens=max_tokens,
    ).to(clean.dtype)
    ablated, start = {}, 0
    for layer, heads in layers.items():
        ablated[layer] = scores[start : start + len(heads)]
        start += len(heads)
    return clean, ablated


def setup_sweep(adapter, corpus, objective, mode, heads, stack, batch_size):
    """``(corpus, objective, heads, means)`` of a sweep, checked: the corpus as a
    :class:`probe.inputs.corpus.Corpus`, the resolved objective, the checked heads and, for
    mean-ablation, :func:`position_kind_means` (else ``None``)."""
    corpus = as_corpus(corpus)
    objective = given_objective(objective, adapter, corpus)
    check_mode(mode)
    heads = check_heads(adapter, heads, stack)
    means = position_kind_means(adapter, corpus, objective, batch_size, stack) if mode == "mean" else None
    return corpus, objective, heads, means


def sweep_result(heads, clean, ablated, mode, metric_name: str, path, n_boot, confidence, seed) -> SweepResult:
    """The :class:`SweepResult` of per-example ``clean`` ``[n]`` and ``ablated`` ``[n_heads, n]``."""
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
    objective: Objective,
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
    """Ablate each head alone and measure ``objective`` on every example (batched).

    Args:
        corpus: a :class:`probe.inputs.corpus.Corpus` or a list of texts.
        objective: the run's resolved :class:`probe.analyses.common.objective.Objective`
            (``loss``, ``accuracy``, ``embedding-drift`` …; a callable ``fn(outputs, batch) ->
            Tensor[rows]`` wrapped in :class:`probe.analyses.common.metrics.CallableMetric`).
        mode: ``zero`` or ``mean`` (per-position-kind corpus mean).
        heads: ``(layer, head)`` pairs (default: all ``L·H``).
        batch_size: examples per chunk (one clean forward each).
        restart: restart each forward at the ablated layer where supported.
        max_tokens: padded tokens (rows × length) per ablation forward; bounds memory.

    Raises:
        TypeError: ``objective`` is a name, not an Objective (resolve it first).
        ValueError: unknown mode, an objective that does not apply (naming those that
            do), a head out of range (naming the valid range), an empty corpus,
            ``max_tokens < 1``.
    """
    if max_tokens < 1:
        raise InputError(f"max_tokens must be ≥ 1, got {max_tokens}")
    corpus, objective, heads, means = setup_sweep(adapter, corpus, objective, mode, heads, stack, batch_size)
    clean, ablated, path = sweep_values(
        adapter,
        corpus,
        objective,
        heads,
        means,
        batch_size=batch_size,
        restart=restart,
        max_tokens=max_tokens,
        stack=stack,
        progress=progress,
    )
    return sweep_result(heads, clean, ablated, mode, objective.name, path, n_boot, confidence, seed)


@torch.no_grad()
def sweep_values(
    adapter,
    corpus,
    objective: Objective,
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

    path = restart_path(adapter, stack, restart)
    if restart and path == "full forward":
        log.info("layer restart not supported for %s; batched full forwards", adapter.family)
    by_layer: dict[int, list] = {}
    for j, (layer, head) in enumerate(heads):
        by_layer.setdefault(layer, []).append((j, head))
    layers = {layer: [h for _, h in items] for layer, items in by_layer.items()}
    n = len(corpus)
    clean = np.zeros(n)
    ablated = np.zeros((len(heads), n))
    chunks = objective.batches(adapter, corpus, batch_size, by_length=True)
    for idx, batch in tqdm(chunks, total=-(-n // batch_size), disable=not progress, desc="sweep"):
        c, by = _sweep_chunk(adapter, objective, batch, layers, means, stack, path, max_tokens)
        clean[idx] = c.double().cpu().numpy()
        for layer, items in by_layer.items():
            ablated[np.ix_([j for j, _ in items], idx)] = by[layer].double().cpu().numpy()
    return clean, ablated, path


@torch.no_grad()
def sweep_heads_naive(
    adapter,
    corpus,
    objective: Objective,
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

    corpus, objective, heads, means = setup_sweep(adapter, corpus, objective, mode, heads, stack, batch_size)
    n = len(corpus)
    clean = np.zeros(n)
    ablated = np.zeros((len(heads), n))
    for idx, batch in tqdm(
        objective.batches(adapter, corpus, batch_size),
        total=-(-n // batch_size),
        disable=not progress,
        desc="naive sweep",
    ):
        out = objective.forward(adapter, batch)
        ref = objective.reference(out, batch)
        clean[idx] = objective.score(out, batch, ref).double().cpu().numpy()
        for j, (layer, head) in enumerate(heads):
            edit: Edit
            if means is None:
                edit = Zero(head=head)
            else:
                edit = Patch(value=row_values(means, layer, batch)[:, :, head], head=head)
            with HeadIntervention(adapter, {layer: edit}, stack=stack):
                out = objective.forward(adapter, batch)
            ablated[j, idx] = objective.score(out, batch, ref).double().cpu().numpy()
    return sweep_result(heads, clean, ablated, mode, objective.name, "naive loop", n_boot, confidence, seed)
