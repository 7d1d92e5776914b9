"""Maximum path length through a stack of layers, as a shortest-path problem (networkx).

Vaswani et al. (2017), Table 1, last column: the maximum length of the paths that
signals travel between any input and any output position. Here every layer is causal
(output ``i`` reads inputs ``j <= i``, as the paper's recurrence does), so the pairs
that must be connected are all ``(input j, output i)`` with ``j <= i``.

Connectivity graphs (a directed edge means "one hop"):

* feed-forward layers that are the same at every depth (self-attention, restricted
  attention, convolutions): nodes ``("in", j)`` and ``("out", i)``; ``("in", j) →
  ("out", i)`` and ``("out", j) → ("out", i)`` whenever one layer lets output ``i``
  read position ``j``. A path ``("in", j) ⇝ ("out", i)`` of ``L`` hops is a stack of
  ``L`` layers, and since every position reads itself the shortest such path is the
  minimum depth at which output ``i`` depends on input ``j``.
* dilated convolutions (dilation ``k**l`` at layer ``l = 0, 1, …``) differ per layer:
  nodes ``(l, p)`` for ``l = 0 … depth``, edges ``(l-1, j) → (l, i)``; the depth grows
  one layer at a time until every pair is connected.
* recurrence: one layer unrolled in time, ``(0, j) → (1, j)`` (input to hidden state)
  and ``(1, i-1) → (1, i)`` (state to next state): each time step is one hop.

The maximum path length is the maximum over pairs ``j <= i`` of the shortest path
from input ``j`` to output position ``i`` (at whatever depth it is first reached). For
our constructions it equals the closed forms in :func:`closed_form_path_length`:

=========================  ======================================  ===========
layer                      closed form (n >= 2)                    paper
=========================  ======================================  ===========
self-attention             1                                       O(1)
restricted attention (r)   ⌈(n-1)/(r-1)⌉  (r keys: i-r+1 … i)      O(n/r)
recurrence                 n  (1 hop in + n-1 steps)               O(n)
convolution (k)            ⌈(n-1)/(k-1)⌉                           O(n/k)
separable convolution (k)  ⌈(n-1)/(k-1)⌉                           O(n/k)
dilated convolution (k)    ⌈log_k n⌉: smallest L with k**L >= n    O(log_k n)
=========================  ======================================  ===========

(For the dilated stack, L layers with taps ``i - t·k**l``, ``t = 0 … k-1``, reach
exactly the offsets ``0 … k**L - 1``, one path each, written in base ``k``.) For
``n = 1`` every form is 1: one layer maps the input to the output.
"""

from __future__ import annotations

from typing import Iterable, List, Optional

import networkx as nx
import pandas as pd

from probe.analyses.paper.complexity_layers import LAYER_KINDS, RECURRENT_KINDS, check_positive_int
from probe.errors import InputError

#: the paper's O(·) column for each layer type
PAPER_PATH = {
    "self_attention": "O(1)",
    "restricted_attention": "O(n/r)",
    "rnn": "O(n)",
    "gru": "O(n)",
    "lstm": "O(n)",
    "conv": "O(n/k) contiguous",
    "dilated_conv": "O(log_k(n)) dilated",
    "separable_conv": "O(n/k) contiguous",
}
CLOSED_FORM_TEXT = {
    "self_attention": "1",
    "restricted_attention": "⌈(n−1)/(r−1)⌉",
    "rnn": "n",
    "gru": "n",
    "lstm": "n",
    "conv": "⌈(n−1)/(k−1)⌉",
    "dilated_conv": "⌈log_k n⌉",
    "separable_conv": "⌈(n−1)/(k−1)⌉",
}


def _taps(kind: str, n: int, k: int, r: int, layer: int) -> range:
    """Offsets ``j - i`` that output ``i`` of layer ``layer`` reads (all <= 0)."""
    if kind == "self_attention":
        return range(-(n - 1), 1)
    if kind == "restricted_attention":
        return range(-(r - 1), 1)
    if kind in ("conv", "separable_conv"):
        return range(-(k - 1), 1)
    if kind == "dilated_conv":
        return range(-(k - 1) * k**layer, 1, k**layer)
    raise InputError(f"unknown layer type {kind!r}; choose from {', '.join(LAYER_KINDS)}")


def connectivity_graph(kind: str, n: int, *, k: int = 3, r: int = 16, depth: int = 1) -> nx.DiGraph:
    """The connectivity graph of ``kind`` over ``n`` positions (see the module docstring).

    ``depth`` is used only for ``dilated_conv`` (number of layers stacked); the other
    graphs describe a stack of any depth. Input nodes are ``("in", j)`` or ``(0, j)``.

    Raises:
        ValueError: unknown ``kind``; ``n``/``depth`` < 1, ``k``/``r`` < 2 or not integers.
    """
    n = check_positive_int("n", n)
    k = check_positive_int("k", k, 2)
    r = check_positive_int("r", r, 2)
    depth = check_positive_int("depth", depth)
    g = nx.DiGraph()
    if kind in RECURRENT_KINDS:
        g.add_edges_from(((0, j), (1, j)) for j in range(n))
        g.add_edges_from(((1, i - 1), (1, i)) for i in range(1, n))
        return g
    if kind == "dilated_conv":
        g.add_nodes_from((0, j) for j in range(n))
        for layer in range(1, depth + 1):
            taps = _taps(kind, n, k, r, layer - 1)
            g.add_edges_from(((layer - 1, i + o), (layer, i)) for i in range(n) for o in taps if i + o >= 0)
        return g
    taps = _taps(kind, n, k, r, 0)
    for src in ("in", "out"):
        g.add_edges_from(((src, i + o), ("out", i)) for i in range(n) for o in taps if i + o >= 0)
    return g


def _inputs_and_outputs(kind: str, g: nx.DiGraph, n: int):
    if kind == "dilated_conv" or kind in RECURRENT_KINDS:
        return [(0, j) for j in range(n)], lambda node: node[0] >= 1, lambda node: node[1]
    return [("in", j) for j in range(n)], lambda node: node[0] == "out", lambda node: node[1]


def _max_shortest_path(kind: str, g: nx.DiGraph, n: int) -> Optional[int]:
    """Max over pairs j <= i of the shortest path input j ⇝ output i; None if one is missing."""
    sources, is_output, position = _inputs_and_outputs(kind, g, n)
    worst = 0
    for j, src in enumerate(sources):
        best = {}
        for node, dist in nx.single_source_shortest_path_length(g, src).items():
            if is_output(node):
                p = position(node)
                best[p] = min(dist, best.get(p, dist))
        if any(i not in best for i in range(j, n)):
            return None
        worst = max(worst, max(best[i] for i in range(j, n)))
    return worst


def max_path_length(kind: str, n: int, *, k: int = 3, r: int = 16) -> int:
    """Maximum over input ``j <= i`` output pairs of the shortest path length, in hops.

    Built on :func:`connectivity_graph` with :func:`networkx.single_source_shortest_path_length`
    from every input (one BFS per input). For ``dilated_conv`` the stack is deepened one
    layer at a time until every pair is connected.

    Raises:
        ValueError: bad ``kind``, ``n``, ``k`` or ``r`` (see :func:`connectivity_graph`).
        RuntimeError: no stack of up to ``n`` layers connects every pair (cannot happen
            for the layers defined here).
    """
    n = check_positive_int("n", n)
    depths = range(1, n + 1) if kind == "dilated_conv" else [1]
    for depth in depths:
        g = connectivity_graph(kind, n, k=k, r=r, depth=depth)
        found = _max_shortest_path(kind, g, n)
        if found is not None:
            return found
    raise RuntimeError(f"{kind}: no stack of up to {n} layers connects every input to every output")


def closed_form_path_length(kind: str, n: int, *, k: int = 3, r: int = 16) -> int:
    """The closed form for our causal constructions (table in the module docstring).

    Raises:
        ValueError: bad ``kind``, ``n``, ``k`` or ``r``.
    """
    n = check_positive_int("n", n)
    k = check_positive_int("k", k, 2)
    r = check_positive_int("r", r, 2)
    if kind == "self_attention" or n == 1:
        if kind not in LAYER_KINDS:
            raise InputError(f"unknown layer type {kind!r}; choose from {', '.join(LAYER_KINDS)}")
        return 1
    if kind in RECURRENT_KINDS:
        return n
    if kind == "restricted_attention":
        return -(-(n - 1) // (r - 1))
    if kind in ("conv", "separable_conv"):
        return -(-(n - 1) // (k - 1))
    if kind == "dilated_conv":
        layers, reach = 1, k
        while reach < n:  # integer ⌈log_k n⌉, no floating-point rounding
            layers, reach = layers + 1, reach * k
        return layers
    raise InputError(f"unknown layer type {kind!r}; choose from {', '.join(LAYER_KINDS)}")


def path_length_table(
    n_values: Iterable[int],
    kinds: Iterable[str] = LAYER_KINDS,
    *,
    k: int = 3,
    r: int = 16,
    graph_max_n: int = 256,
) -> pd.DataFrame:
    """Path lengths from the graphs and from the closed forms, one row per (layer, n).

    The graph computation runs one breadth-first search per input, at least ``n²``
    steps (``n³`` for the dense self-attention graph), so it is done only for
    ``n <= graph_max_n``; above that ``path_length_graph`` is missing and only the
    closed form is given.

    Returns:
        DataFrame with columns ``layer, n, k, r, path_length_graph, path_length_closed_form,
        closed_form, paper`` (``path_length_graph`` nullable Int64).

    Raises:
        ValueError: bad ``kind``, ``n``, ``k`` or ``r``.
    """
    graph_max_n = check_positive_int("graph_max_n", graph_max_n)
    rows: List[dict] = []
    for kind in kinds:
        for n in n_values:
            closed = closed_form_path_length(kind, n, k=k, r=r)
            graph = None
            if n <= graph_max_n:
                graph = max_path_length(kind, n, k=k, r=r)
            rows.append(
                {
                    "layer": kind,
                    "n": int(n),
                    "k": k,
                    "r": r,
                    "path_length_graph": graph,
                    "path_length_closed_form": closed,
                    "closed_form": CLOSED_FORM_TEXT[kind],
                    "paper": PAPER_PATH[kind],
                }
            )
    frame = pd.DataFrame(rows)
    frame["path_length_graph"] = frame["path_length_graph"].astype("Int64")
    return frame
