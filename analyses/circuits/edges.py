"""The edges of the head graph: sender head -> receiver head's query/key/value input, or
sender head -> the output (Wang et al. 2022; Conmy et al. 2023).

A receiver is ``(layer, slot, channel)``: for ``q`` the slot is the query head, for
``k``/``v`` the key/value head (under grouped-query attention several query heads share
one, Ainslie et al. 2023; :func:`parse_edge` maps a named query head to its group).
Senders must sit in an earlier layer than their receiver.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from probe.paths import CHANNELS, kv_slot, n_kv_heads

OUTPUT = "out"


@dataclass(frozen=True, order=True)
class Edge:
    """One edge. ``channel`` is ``q``/``k``/``v`` or ``out`` (then ``receiver_layer`` and
    ``receiver_slot`` are -1)."""

    sender_layer: int
    sender_head: int
    receiver_layer: int
    receiver_slot: int
    channel: str

    @property
    def sender(self) -> tuple:
        return (self.sender_layer, self.sender_head)

    @property
    def to_output(self) -> bool:
        return self.channel == OUTPUT

    def receiver_name(self, grouped: bool = False) -> str:
        if self.to_output:
            return OUTPUT
        slot = f"kv{self.receiver_slot}" if grouped and self.channel != "q" else str(self.receiver_slot)
        return f"{self.receiver_layer}.{slot}.{self.channel}"

    def name(self, grouped: bool = False) -> str:
        return f"{self.sender_layer}.{self.sender_head}->{self.receiver_name(grouped)}"


def grouped(adapter) -> bool:
    return n_kv_heads(adapter) != adapter.n_heads


def all_edges(adapter) -> list:
    """Every edge of the head graph: each head to each q/k/v slot of every later layer,
    and each head to the output."""
    n_layers, n_heads, n_kv = adapter.n_layers, adapter.n_heads, n_kv_heads(adapter)
    out = []
    for ls in range(n_layers):
        for hs in range(n_heads):
            for lr in range(ls + 1, n_layers):
                for c in CHANNELS:
                    for r in range(n_heads if c == "q" else n_kv):
                        out.append(Edge(ls, hs, lr, r, c))
            out.append(Edge(ls, hs, -1, -1, OUTPUT))
    return out


_EDGE = re.compile(
    r"^\s*[lL]?(\d+)\s*[.hH,]\s*(\d+)\s*->\s*(?:(out(?:put)?)|[lL]?(\d+)\s*[.hH,]\s*(kv)?(\d+)"
    r"\s*[.:]\s*([qkvQKV]))\s*$"
)


def check_edge(adapter, edge: Edge) -> Edge:
    """Return ``edge`` if it exists in ``adapter``'s graph.

    Raises:
        ValueError: a head that does not exist, a receiver in the sender's layer or an
            earlier one, an unknown channel (each naming the edge and the valid range).
    """
    n_layers, n_heads, n_kv = adapter.n_layers, adapter.n_heads, n_kv_heads(adapter)
    name = edge.name(grouped(adapter))
    if not (0 <= edge.sender_layer < n_layers and 0 <= edge.sender_head < n_heads):
        raise ValueError(
            f"edge {name}: sender head {edge.sender_layer}.{edge.sender_head} does not exist "
            f"({adapter.name} has layers 0..{n_layers - 1}, heads 0..{n_heads - 1})"
        )
    if edge.to_output:
        return edge
    if edge.channel not in CHANNELS:
        raise ValueError(f"edge {name}: unknown receiver input {edge.channel!r}; use q, k, v or out")
    slots = n_heads if edge.channel == "q" else n_kv
    if not (0 <= edge.receiver_layer < n_layers and 0 <= edge.receiver_slot < slots):
        raise ValueError(
            f"edge {name}: receiver {edge.receiver_layer}.{edge.receiver_slot}.{edge.channel} does "
            f"not exist ({adapter.name} has layers 0..{n_layers - 1}, {edge.channel} slots "
            f"0..{slots - 1})"
        )
    if edge.receiver_layer <= edge.sender_layer:
        raise ValueError(
            f"edge {name}: the receiver (layer {edge.receiver_layer}) must be in a later layer than "
            f"the sender (layer {edge.sender_layer}); a head reads only earlier layers' outputs"
        )
    return edge


def parse_edge(adapter, text: str) -> Edge:
    """An edge from ``"L.H->L.H.c"`` (``c`` in q/k/v; ``L.kvG.k`` names a key/value group
    directly) or ``"L.H->out"``. A named query head's k/v input is its own group's.

    Raises:
        ValueError: unparseable text, or an edge :func:`check_edge` refuses.
    """
    m = _EDGE.match(text)
    if not m:
        raise ValueError(f"cannot read edge {text!r}: write sender->receiver as 0.1->1.2.k or 0.1->out")
    ls, hs = int(m.group(1)), int(m.group(2))
    if m.group(3):
        return check_edge(adapter, Edge(ls, hs, -1, -1, OUTPUT))
    lr, is_group, slot, c = int(m.group(4)), bool(m.group(5)), int(m.group(6)), m.group(7).lower()
    if c != "q" and not is_group:
        if not 0 <= slot < adapter.n_heads:
            raise ValueError(
                f"edge {text!r}: receiver head {lr}.{slot} does not exist ({adapter.name} has heads "
                f"0..{adapter.n_heads - 1})"
            )
        slot = kv_slot(adapter, slot)
    return check_edge(adapter, Edge(ls, hs, lr, slot, c))


def edges_frame_columns() -> list:
    return ["edge", "sender_layer", "sender_head", "receiver_layer", "receiver_slot", "channel"]


def edge_row(edge: Edge, grouped_kv: bool = False) -> dict:
    return {
        "edge": edge.name(grouped_kv),
        "sender_layer": edge.sender_layer,
        "sender_head": edge.sender_head,
        "receiver_layer": edge.receiver_layer,
        "receiver_slot": edge.receiver_slot,
        "channel": edge.channel,
    }


def receivers_of(edges) -> list:
    """The distinct receivers ``(layer, slot, channel)`` (``out`` as ``(-1, -1, 'out')``), sorted."""
    return sorted({(e.receiver_layer, e.receiver_slot, e.channel) for e in edges})


def sender_index(layer: int, head: int, n_heads: int) -> int:
    return layer * n_heads + head


def edge_from_row(row) -> Edge:
    return Edge(
        int(row["sender_layer"]),
        int(row["sender_head"]),
        int(row["receiver_layer"]),
        int(row["receiver_slot"]),
        str(row["channel"]),
    )


def optional_edges(adapter, texts: list | None) -> list | None:
    return None if not texts else [parse_edge(adapter, t) for t in texts]
