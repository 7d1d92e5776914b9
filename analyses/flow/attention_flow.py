"""Attention flow (Abnar & Zuidema, 2020, "Quantifying Attention Flow in Transformers").

The graph (REFERENCES.md): a layered DAG with a node ``(l, p)`` per layer ``l = 0..L``
and position ``p``; layer 0 holds the inputs. For every layer ``l ≥ 1`` there is an edge
``(l−1, j) → (l, i)`` with capacity ``Â_l[i, j]``, the residual-adjusted, head-combined
attention (``Â = 0.5·A + 0.5·I``, rows renormalised, exactly as in rollout). The flow
score of input ``j`` for output ``i`` is the maximum flow from ``(0, j)`` to ``(L, i)``;
one max-flow per (input, output) pair, because flows of different pairs share capacity.
:func:`flow_graph` builds this graph with networkx (the reference and its documentation)
and :func:`flow_reference` solves it pair by pair with ``networkx.maximum_flow_value``.
(Abnar & Zuidema's published code builds the same graph; whether it applies the residual
adjustment depends on a flag — we always do, as the paper's Section 3 does.)

The fast path (:func:`attention_flow`) gives the same numbers. By default it is the
compiled layered Dinic of :mod:`probe.analyses.flow.layered_maxflow` (float64, no edge
list, each pair stops at ``min(source out-capacity, sink in-capacity)`` when reached;
exact up to ``L·n²·1e-13``), built on first use with the system C compiler. Without a
compiler (or with ``solver="scipy"``) it is scipy's Dinic on integer capacities:

* **Integer capacities.** ``scipy.sparse.csgraph.maximum_flow`` (Dinic) needs int32
  capacities; we use ``c' = round(S·c)`` with ``S = 2**30`` (every capacity is ≤ 1, and a
  flow value is bounded by the sink's in-capacity ``Σ_j Â_L[i, j] = 1``, so nothing can
  overflow int32). *Error bound:* for any cut ``C`` with ``|C|`` edges,
  ``|cap'(C) − S·cap(C)| ≤ |C|/2``. With ``C*`` a minimum cut of the real graph and
  ``C'`` one of the rounded graph, ``F' ≤ cap'(C*) ≤ S·F + |C*|/2`` and
  ``S·F ≤ S·cap(C') ≤ F' + |C'|/2``, hence ``|F'/S − F| ≤ max(|C*|, |C'|) / (2S)``, at
  most ``m/(2S)`` with ``m = (L−2)·n² + 2n`` the edges of a pair's graph (4.3e-6 for
  n = 48, L = 6). Rounding errors are independent and of both signs, so the observed
  error is of order ``√|C| / (S·√12)``, about 1e-9; the tests check 1e-6 against networkx.
* **Pruning and batching.** For the pair ``(j, i)`` only the source's edges into layer 1
  and the sink's edges out of layer ``L−1`` matter at the ends; the middle layers are the
  same for every pair. We put ``K`` pairs that share the sink ``i`` into one CSR matrix
  as disjoint copies of the middle layers, joined by one super-source (whose edges into
  copy ``k`` carry source ``j_k``'s capacities) and one shared sink. Copies are
  independent, so a maximum flow of the union is a maximum flow of every copy, and the
  flow leaving the super-source into copy ``k`` is that pair's value. The structure
  (indices, indptr) is built once per sink and reused; one scipy call serves ``K``
  pairs, which removes scipy's per-call overhead.
* **Causal maps.** With lower-triangular maps no path leads from ``j`` to ``i < j``
  (flow 0, never computed), and nodes after ``i`` cannot reach ``(L, i)``: the graph for
  sink ``i`` is the leading ``(i+1) × (i+1)`` block only.
* **Processes.** Sinks are spread over a process pool when the work is large.
"""

from __future__ import annotations

import logging
import math
import os
import time
import warnings
from typing import TYPE_CHECKING, Sequence

from concurrent.futures import ProcessPoolExecutor

import numpy as np
import torch

from probe.analyses.flow.rollout import (
    HeadSpec,
    check_rollable,
    heads_meta,
    combine_heads,
    residual_adjust,
    validate_attention,
)
from probe.analyses.common.token_scores import TokenScores, output_positions_for
from probe.analyses.flow import layered_maxflow
from probe.errors import InputError

if TYPE_CHECKING:
    import networkx as nx

    from probe.maps import AttentionMaps

log = logging.getLogger(__name__)

__all__ = [
    "SCALE",
    "DEFAULT_MAX_TOKENS",
    "adjusted_attention",
    "flow_graph",
    "flow_reference",
    "attention_flow",
    "estimate_seconds",
    "flow_maps",
    "solver_name",
    "SOLVERS",
]

SOLVERS = ("auto", "dinic", "scipy", "networkx")

SCALE = 2**30
DEFAULT_MAX_TOKENS = 128
# seconds per edge of a pair's graph per max-flow, one core (rough; bench/bench_flow.py)
_SECONDS_PER_EDGE = 2e-7
_SECONDS_PER_EDGE_KERNEL = 6e-9
_TARGET_EDGES_PER_CALL = 60_000
_PARALLEL_MIN_EDGES = 4_000_000


def adjusted_attention(
    attn: torch.Tensor, *, heads: HeadSpec = "mean", residual: float = 0.5, causal: bool = False
) -> np.ndarray:
    """The capacities ``Â[L, n, n]`` (float64) of the flow graph, from ``[L, H, n, n]``
    attention (or ``[L, n, n]`` with ``heads=None``), validated and residual-adjusted.

    Raises:
        ValueError: invalid maps (see :func:`probe.analyses.flow.rollout.validate_attention`).
    """
    validate_attention(attn, causal=causal)
    a = combine_heads(attn.double(), heads)
    if a.dim() != 3:
        raise InputError(
            f"flow takes one example: [layer, head, n, n] (or [layer, n, n] with heads=None); got {tuple(attn.shape)}"
        )
    return residual_adjust(a, residual).numpy()


def flow_graph(ahat: np.ndarray) -> nx.DiGraph:
    """The layered flow graph as a ``networkx.DiGraph`` (the reference definition).

    Args:
        ahat: capacities ``[L, n, n]``, ``ahat[l-1][i, j]`` for the edge
            ``(l−1, j) → (l, i)``.

    Returns:
        DiGraph with nodes ``(l, p)`` for ``l = 0..L``, ``p = 0..n−1`` and edges carrying
        a ``capacity`` attribute (edges of capacity 0 are left out).
    """
    import networkx as nx

    L, n, _ = ahat.shape
    g = nx.DiGraph()
    g.add_nodes_from((l, p) for l in range(L + 1) for p in range(n))
    for l in range(1, L + 1):
        qi, kj = np.nonzero(ahat[l - 1])
        g.add_edges_from(((l - 1, int(j)), (l, int(i)), {"capacity": float(ahat[l - 1][i, j])}) for i, j in zip(qi, kj))
    return g


def flow_reference(ahat: np.ndarray, output_positions: Sequence[int]) -> np.ndarray:
    """Flow scores by ``networkx.maximum_flow_value``, one call per (input, output) pair.

    Slow; the ground truth the fast path is tested against. Returns ``[k, n]`` float64.
    """
    import networkx as nx

    L, n, _ = ahat.shape
    g = flow_graph(ahat)
    out = np.zeros((len(output_positions), n))
    for r, i in enumerate(output_positions):
        for j in range(n):
            out[r, j] = nx.maximum_flow_value(g, (0, j), (L, int(i)))
    return out


def estimate_seconds(n: int, n_layers: int, n_outputs: int, workers: int = 1, solver: str = "scipy") -> float:
    """Rough wall time of the flow for ``n_outputs`` rows of ``n`` tokens."""
    edges = max(n_layers - 2, 0) * n * n + 2 * n
    per_edge = {"dinic": _SECONDS_PER_EDGE_KERNEL, "networkx": 100 * _SECONDS_PER_EDGE}
    return per_edge.get(solver, _SECONDS_PER_EDGE) * edges * n * n_outputs / max(workers, 1)


def attention_flow(
    attn: torch.Tensor,
    *,
    heads: HeadSpec = "mean",
    residual: float = 0.5,
    output_positions: Sequence[int] | None = None,
    causal: bool = False,
    reference: bool = False,
    workers: int | None = None,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    solver: str = "auto",
) -> torch.Tensor:
    """Attention flow scores of one example.

    Args:
        attn: ``[L, H, n, n]`` attention of one example (``[L, n, n]`` with ``heads=None``).
        heads: head combination (see :func:`probe.analyses.flow.rollout.combine_heads`).
        residual: identity weight of the residual adjustment (0.5 in the paper).
        output_positions: output rows; ``None`` = all ``n`` (the full matrix).
        causal: the maps are causal (checked lower-triangular); flow from a later input
            is 0 and only the leading block is solved.
        reference: compute with networkx (slow); the same as ``solver="networkx"``.
        workers: threads (compiled kernel) or processes (scipy) for the fast path;
            ``None`` = ``os.cpu_count()`` (scipy: only when the work is large).
        max_tokens: above this length a warning with the estimated time is issued
            before the computation starts.
        solver: ``auto`` (the compiled layered Dinic when a C compiler is there, else
            scipy), ``dinic``, ``scipy`` or ``networkx``.

    Returns:
        float64 tensor ``[k, n]``: ``out[r, j]`` = max flow from input ``j`` to output
        ``output_positions[r]`` (dinic: within ``L·n²·1e-13``; scipy: within
        ``m/(2·2**30)``; see the module docstring).

    Raises:
        ValueError: invalid maps, output positions out of range, ``workers < 1``,
            unknown solver.
    """
    ahat = adjusted_attention(attn, heads=heads, residual=residual, causal=causal)
    L, n, _ = ahat.shape
    pos = output_positions_for(n, output_positions, all_positions=output_positions is None)
    if workers is not None and workers < 1:
        raise InputError(f"workers must be at least 1, got {workers}")
    n_workers = workers or os.cpu_count() or 1
    name = "networkx" if reference else solver_name(solver)
    if n > max_tokens:
        est = estimate_seconds(n, L, len(pos), 1 if name == "networkx" else n_workers, solver=name)
        warnings.warn(
            f"attention flow over {n} tokens (> max_tokens={max_tokens}): {n * len(pos)} "
            f"max-flows on graphs of ~{max(L - 2, 0) * n * n + 2 * n} edges; estimated "
            f"{est:.0f} s. Choose fewer output positions or raise max_tokens to silence this.",
            RuntimeWarning,
            stacklevel=2,
        )
    t0 = time.perf_counter()
    if name == "networkx":
        out = flow_reference(ahat, pos)
    else:
        out = _fast_flow(ahat, pos, causal=causal, workers=workers, solver=name)
    log.debug("flow of %d rows × %d tokens in %.3f s", len(pos), n, time.perf_counter() - t0)
    return torch.from_numpy(out)


def flow_maps(
    maps: AttentionMaps,
    *,
    heads: HeadSpec = "mean",
    residual: float = 0.5,
    output_positions: Sequence[int] | None = None,
    all_positions: bool = False,
    reference: bool = False,
    workers: int | None = None,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    solver: str = "auto",
) -> TokenScores:
    """Attention flow of one :class:`probe.maps.AttentionMaps` as :class:`TokenScores`.

    Default output position: [CLS] (0) for self-attention, the last token for causal
    attention; ``all_positions`` gives the full matrix.

    Raises:
        ValueError: cross-attention, non-consecutive layers, bad positions or maps.
    """
    check_rollable(maps)
    pos = output_positions_for(maps.n_tokens, output_positions, kind=maps.kind, all_positions=all_positions)
    scores = attention_flow(
        maps.attentions,
        heads=heads,
        residual=residual,
        output_positions=pos,
        causal=maps.kind == "causal",
        reference=reference,
        workers=workers,
        max_tokens=max_tokens,
        solver=solver,
    )
    name = "networkx" if reference else solver_name(solver)
    described = {
        "networkx": "networkx",
        "dinic": "layered Dinic (C), float64, eps 1e-13",
        "scipy": f"scipy-dinic, scale 2**{int(math.log2(SCALE))}",
    }
    meta = {"residual": residual, "heads": heads_meta(heads), "layers": list(maps.layers), "solver": described[name]}
    return TokenScores(maps.tokens, pos, scores, "flow", meta)


# ---- fast path ------------------------------------------------------------------------


def solver_name(solver: str = "auto") -> str:
    """The solver :func:`attention_flow` uses for ``solver`` (``auto`` resolved)."""
    if solver not in SOLVERS:
        raise InputError(f"unknown flow solver {solver!r}; choose one of {', '.join(SOLVERS)}")
    if solver == "auto":
        return "dinic" if layered_maxflow.available() else "scipy"
    return solver


def _kernel_flow(ahat: np.ndarray, pos: Sequence[int], *, causal: bool, workers: int | None) -> np.ndarray:
    """All pairs through the compiled layered Dinic (:mod:`.layered_maxflow`)."""
    L, n, _ = ahat.shape
    rows, cols = np.meshgrid(np.arange(len(pos)), np.arange(n), indexing="ij")
    sinks = np.asarray(pos)[rows]
    keep = cols <= sinks if causal else np.ones_like(cols, dtype=bool)  # causal: no flow from later inputs
    out = np.zeros((len(pos), n))
    n_workers = workers if workers is not None else (os.cpu_count() or 1)
    out[keep] = layered_maxflow.max_flows(ahat, cols[keep], sinks[keep], workers=max(1, n_workers))
    return out


def _fast_flow(
    ahat: np.ndarray, pos: Sequence[int], *, causal: bool, workers: int | None, solver: str = "auto"
) -> np.ndarray:
    L, n, _ = ahat.shape
    if L == 1:  # the graph is the bipartite map itself
        return ahat[0][list(pos)].copy()
    if solver_name(solver) == "dinic":
        return _kernel_flow(ahat, pos, causal=causal, workers=workers)
    return _scipy_flow(ahat, pos, causal=causal, workers=workers)


def _scipy_flow(ahat: np.ndarray, pos: Sequence[int], *, causal: bool, workers: int | None) -> np.ndarray:
    """The integer-scaled scipy path (see the module docstring), one Dinic call per batch."""
    L, n, _ = ahat.shape
    out = np.zeros((len(pos), n))
    cap = np.rint(ahat * SCALE).astype(np.int32)
    tasks = []
    for r, i in enumerate(pos):
        m = i + 1 if causal else n
        tasks.append((r, i, m))
    work = sum(((L - 2) * m * m + 2 * m) * m for _, _, m in tasks)
    n_proc = workers if workers is not None else (os.cpu_count() or 1)
    n_proc = min(n_proc, len(tasks)) if work >= _PARALLEL_MIN_EDGES or workers else 1
    if n_proc > 1:
        with ProcessPoolExecutor(max_workers=n_proc) as pool:
            futures = [(r, m, pool.submit(_sink_flows, cap[:, :m, :m], i)) for r, i, m in tasks]
            for r, m, fut in futures:
                out[r, :m] = fut.result()
    else:
        for r, i, m in tasks:
            out[r, :m] = _sink_flows(cap[:, :m, :m], i)
    return out


def _sink_flows(cap: np.ndarray, sink: int) -> np.ndarray:
    """Max flows from every input ``(0, j)`` to ``(L, sink)`` on int capacities ``[L, m, m]``.

    Returns ``[m]`` float64 flows divided by ``SCALE``.
    """
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import maximum_flow

    L, m, _ = cap.shape
    n_mid = (L - 2) * m * m  # edges between layers 1..L-1 of one copy
    edges_copy = n_mid + m
    nodes_copy = (L - 1) * m
    K = max(1, min(m, _TARGET_EDGES_PER_CALL // max(edges_copy, 1)))
    # one copy: rows are layer-1..L-1 nodes; layer l (1..L-2) node p -> layer l+1 node q
    local_idx = np.concatenate(
        [np.tile(l * m + np.arange(m, dtype=np.int32), m) for l in range(1, L - 1)] + [np.zeros(m, dtype=np.int32)]
    )
    copy_data = np.concatenate([cap[l].T.ravel() for l in range(1, L - 1)] + [cap[L - 1][sink]])
    row_counts = np.concatenate([np.full((L - 2) * m, m, dtype=np.int64), np.ones(m, dtype=np.int64)])
    is_sink_edge = np.zeros(edges_copy, dtype=bool)
    is_sink_edge[n_mid:] = True
    flows = np.zeros(m)
    for start in range(0, m, K):
        js = np.arange(start, min(start + K, m))
        k = len(js)
        s_node, t_node = k * nodes_copy, k * nodes_copy + 1
        offs = (np.arange(k, dtype=np.int64) * nodes_copy)[:, None]
        idx = np.where(is_sink_edge[None, :], t_node, local_idx[None, :] + offs)
        src_idx = (offs + np.arange(m)[None, :]).ravel()
        indices = np.concatenate([idx.ravel(), src_idx]).astype(np.int32)
        data = np.concatenate([np.tile(copy_data, k), cap[0][:, js].T.ravel()]).astype(np.int32)
        counts = np.concatenate([np.tile(row_counts, k), [k * m, 0]])
        indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
        g = csr_matrix((data, indices, indptr), shape=(t_node + 1, t_node + 1))
        g.has_sorted_indices = True
        res = maximum_flow(g, s_node, t_node)
        f = res.flow
        a, b = f.indptr[s_node], f.indptr[s_node + 1]
        copy_of = f.indices[a:b] // nodes_copy
        flows[js] = np.bincount(copy_of, weights=np.asarray(f.data[a:b], dtype=np.float64), minlength=k)[:k]
    return flows / SCALE
