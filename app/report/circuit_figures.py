"""The circuit graph (heads as nodes, networkx layout) and the recovery curve, as PNGs."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

CHANNEL_COLOURS = {"q": "#1f77b4", "k": "#d62728", "v": "#2ca02c", "out": "#555555"}


def circuit_graph(edges: pd.DataFrame, path: Path, title: str, score: str = "effect") -> Path:
    """Draw ``edges`` (rows with ``sender_layer, sender_head, receiver_layer, receiver_slot,
    channel`` and ``score``) as a layered graph: node ``L.H`` per head, ``out``; edge colour
    by receiver input (q/k/v/out), width by ``|score|``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import networkx as nx

    g = nx.MultiDiGraph()
    top = edges[score].abs().max() or 1.0
    for r in edges.itertuples():
        s = f"{r.sender_layer}.{r.sender_head}"
        t = "out" if r.channel == "out" else f"{r.receiver_layer}.{r.receiver_slot}"
        if hasattr(r, "edge"):  # the edge's own names (an encoder-decoder's e0.1 -> x1.2)
            s, _, rest = str(r.edge).partition("->")
            t = "out" if r.channel == "out" else rest.rsplit(".", 1)[0]
        g.add_node(s, layer=int(r.sender_layer))
        g.add_node(t, layer=10**6 if t == "out" else int(r.receiver_layer))
        g.add_edge(s, t, channel=r.channel, width=0.5 + 4 * abs(getattr(r, score)) / top)
    pos = nx.multipartite_layout(g, subset_key="layer", align="horizontal")
    pos = {n: (x, -y) for n, (x, y) in pos.items()}
    fig, ax = plt.subplots(figsize=(7, 5))
    nx.draw_networkx_nodes(g, pos, ax=ax, node_color="#f0f0f0", edgecolors="#333333", node_size=700)
    nx.draw_networkx_labels(g, pos, ax=ax, font_size=8)
    for u, v, d in g.edges(data=True):
        nx.draw_networkx_edges(
            g,
            pos,
            edgelist=[(u, v)],
            ax=ax,
            width=d["width"],
            edge_color=CHANNEL_COLOURS.get(d["channel"], "#999999"),
            arrows=True,
            connectionstyle="arc3,rad=0.1",
            node_size=700,
        )
    for c, col in CHANNEL_COLOURS.items():
        ax.plot([], [], color=col, label=c)
    ax.legend(title="receiver input", loc="upper left", fontsize=8)
    ax.set_title(title, fontsize=10)
    ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)


def recovery_figure(curve: pd.DataFrame, path: Path, title: str, share: float) -> Path:
    """Faithfulness vs number of kept edges (or heads: a ``n_heads`` column), with the target share."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    unit = "heads" if "n_heads" in curve else "edges"
    ax.plot(curve[f"n_{unit}"], curve["faithfulness"], marker=".")
    ax.axhline(share, color="#999999", linestyle="--", linewidth=1)
    ax.set_xlabel(f"{unit} kept (by |score|)")
    ax.set_ylabel("recovered share (faithfulness)")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)
