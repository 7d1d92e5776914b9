"""The edges of the head graph: sender head -> receiver head's query/key/value input, or
sender head -> the output (Wang et al. 2022; Conmy et al. 2023).

A receiver is ``(layer, slot, channel)``: for ``q`` the slot is the query head, for
``k``/``v`` the key/value head (under grouped-query attention several query heads share
one, Ainslie et al. 2023; :func:`parse_edge` maps a named query head to its group).
Senders must sit in an earlier layer than their receiver.

Layers are head sites (:func:`probe.interventions.paths.head_sites`). In an encoder-decoder (BART, T5)
the sites are named ``e<l>`` (encoder self-attention), ``d<l>`` (decoder self-attention) and
``x<l>`` (cross-attention) and the graph follows the data flow: encoder heads feed later
encoder heads' q/k/v and every cross-attention's **keys and values** (through the encoder
output); decoder self- and cross-attention heads feed later decoder heads' q/k/v, the
cross-attention **queries** of their own and later blocks, and the output. Encoder heads
have no edge to the output: they reach it only through cross-attention heads.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from probe.errors import InputError
from probe.interventions.paths import CHANNELS, STACK_TAGS, head_sites, kv_slot, n_kv_heads

if TYPE_CHECKING:
    import pandas as pd

    from probe.models.adapter import ModelAdapter

OUTPUT = "out"


@dataclass(frozen=True, order=True)
class Edge:
    """One edge. ``channel`` is ``q``/``k``/``v`` or ``out`` (then ``receiver_layer`` and
    ``receiver_slot`` are -1). Layers are head sites; ``sender_tag``/``receiver_tag`` name
    an encoder-decoder's sites (``e0``, ``x1``; set by :func:`check_edge`) and take no part
    in comparisons."""

    sender_layer: int
    sender_head: int
    receiver_layer: int
    receiver_slot: int
    channel: str
    sender_tag: str = field(default="", compare=False)
    receiver_tag: str = field(default="", compare=False)

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
        return f"{self.receiver_tag or self.receiver_layer}.{slot}.{self.channel}"

    def name(self, grouped: bool = False) -> str:
        return f"{self.sender_tag or self.sender_layer}.{self.sender_head}->{self.receiver_name(grouped)}"


def grouped(adapter: ModelAdapter) -> bool:
    """Whether ``adapter``'s attention groups query heads over shared key/value heads (GQA/MQA)."""
    return n_kv_heads(adapter) != adapter.n_heads


def channels_between(adapter: ModelAdapter, sender: int, receiver: int) -> tuple:
    """The receiver inputs site ``sender`` can reach at site ``receiver`` (none when the
    receiver is not later; an encoder-decoder's data flow, see the module docstring)."""
    if receiver <= sender:
        return ()
    sites = head_sites(adapter)
    s, r = sites[sender][0], sites[receiver][0]
    if s is None or s == r == "encoder" or (s != "encoder" and r == "decoder"):
        return CHANNELS
    if s == "encoder":
        return ("k", "v") if r == "cross" else ()
    return ("q",) if r == "cross" else ()


def reaches_output(adapter: ModelAdapter, site: int) -> bool:
    """Whether site ``site``'s heads have an edge to the output (not an encoder's under an
    encoder-decoder)."""
    return head_sites(adapter)[site][0] != "encoder"


def all_edges(adapter: ModelAdapter) -> list[Edge]:
    """Every edge of the head graph: each head to each q/k/v slot of every later layer it
    reaches (:func:`channels_between`), and each head to the output."""
    n_sites, n_heads, n_kv = len(head_sites(adapter)), adapter.n_heads, n_kv_heads(adapter)
    out = []
    for ls in range(n_sites):
        for hs in range(n_heads):
            for lr in range(ls + 1, n_sites):
                for c in channels_between(adapter, ls, lr):
                    for r in range(n_heads if c == "q" else n_kv):
                        out.append(_tagged(adapter, Edge(ls, hs, lr, r, c)))
            if reaches_output(adapter, ls):
                out.append(_tagged(adapter, Edge(ls, hs, -1, -1, OUTPUT)))
    return out


def _tagged(adapter: ModelAdapter, edge: Edge) -> Edge:
    sites = head_sites(adapter)
    if sites[0][0] is None:
        return edge

    def tag(i):
        stack, layer = sites[i]
        return f"{STACK_TAGS[stack]}{layer}"

    return replace(
        edge, sender_tag=tag(edge.sender_layer), receiver_tag="" if edge.to_output else tag(edge.receiver_layer)
    )


_EDGE = re.compile(
    r"^\s*([edxEDX]|[lL])?(\d+)\s*[.hH,]\s*(\d+)\s*->\s*(?:(out(?:put)?)|([edxEDX]|[lL])?(\d+)\s*[.hH,]\s*(kv)?(\d+)"
    r"\s*[.:]\s*([qkvQKV]))\s*$"
)


def check_edge(adapter: ModelAdapter, edge: Edge) -> Edge:
    """Return ``edge`` (with its sites named, for an encoder-decoder) if it exists in
    ``adapter``'s graph.

    Raises:
        ValueError: a head that does not exist, a receiver in the sender's layer or an
            earlier one, an unknown channel, an encoder-decoder edge against the data flow
            (each naming the edge and the valid range).
    """
    n_layers, n_heads, n_kv = len(head_sites(adapter)), adapter.n_heads, n_kv_heads(adapter)
    name = edge.name(grouped(adapter))
    if not (0 <= edge.sender_layer < n_layers and 0 <= edge.sender_head < n_heads):
        raise InputError(
            f"edge {name}: sender head {edge.sender_layer}.{edge.sender_head} does not exist "
            f"({adapter.name} has layers 0..{n_layers - 1}, heads 0..{n_heads - 1})"
        )
    if edge.to_output:
        if not reaches_output(adapter, edge.sender_layer):
            raise InputError(
                f"edge {name}: an encoder head reaches the output only through cross-attention heads; "
                "name its edge into a cross-attention's keys or values (e.g. e0.1->x0.2.k)"
            )
        return _tagged(adapter, edge)
    if edge.channel not in CHANNELS:
        raise InputError(f"edge {name}: unknown receiver input {edge.channel!r}; use q, k, v or out")
    slots = n_heads if edge.channel == "q" else n_kv
    if not (0 <= edge.receiver_layer < n_layers and 0 <= edge.receiver_slot < slots):
        raise InputError(
            f"edge {name}: receiver {edge.receiver_layer}.{edge.receiver_slot}.{edge.channel} does "
            f"not exist ({adapter.name} has layers 0..{n_layers - 1}, {edge.channel} slots "
            f"0..{slots - 1})"
        )
    if edge.receiver_layer <= edge.sender_layer:
        raise InputError(
            f"edge {name}: the receiver (layer {edge.receiver_layer}) must be in a later layer than "
            f"the sender (layer {edge.sender_layer}); a head reads only earlier layers' outputs"
        )
    edge = _tagged(adapter, edge)
    allowed = channels_between(adapter, edge.sender_layer, edge.receiver_layer)
    if edge.channel not in allowed:
        raise InputError(
            f"edge {edge.name(grouped(adapter))}: {edge.sender_tag} does not feed {edge.receiver_tag}'s "
            f"{edge.channel} input ({'only ' + '/'.join(allowed) if allowed else 'no input of it'}): encoder heads "
            "feed encoder heads and cross-attention keys/values; decoder heads feed decoder heads and "
            "cross-attention queries"
        )
    return edge


def _layer_of(adapter: ModelAdapter, tag: str | None, layer: int, text: str) -> int:
    """The head site of ``layer`` in the stack ``tag`` names (``e``/``d``/``x``)."""
    sites = head_sites(adapter)
    tag = (tag or "").lower()
    if sites[0][0] is None:
        if tag in ("e", "d", "x"):
            raise InputError(f"edge {text!r}: {adapter.name} has one attention stack; write layers as numbers")
        return layer
    if tag not in ("e", "d", "x"):
        raise InputError(
            f"edge {text!r}: {adapter.name} is an encoder-decoder; name each layer's stack, e.g. e0.1->x1.2.k "
            "(e encoder, d decoder self-attention, x cross-attention)"
        )
    stack = {v: k for k, v in STACK_TAGS.items()}[tag]
    n = adapter.n_layers_of(stack)
    if not 0 <= layer < n:
        raise InputError(
            f"edge {text!r}: {stack} layer {layer} does not exist ({adapter.name} has {tag}0..{tag}{n - 1})"
        )
    return sites.index((stack, layer))


def parse_edge(adapter: ModelAdapter, text: str) -> Edge:
    """An edge from ``"L.H->L.H.c"`` (``c`` in q/k/v; ``L.kvG.k`` names a key/value group
    directly) or ``"L.H->out"``; for an encoder-decoder each layer carries its stack's
    letter (``e0.1->x1.2.k``, ``d1.0->out``). A named query head's k/v input is its own group's.

    Raises:
        ValueError: unparseable text, or an edge :func:`check_edge` refuses.
    """
    m = _EDGE.match(text)
    if not m:
        raise InputError(f"cannot read edge {text!r}: write sender->receiver as 0.1->1.2.k or 0.1->out")
    ls, hs = _layer_of(adapter, m.group(1), int(m.group(2)), text), int(m.group(3))
    if m.group(4):
        return check_edge(adapter, Edge(ls, hs, -1, -1, OUTPUT))
    lr = _layer_of(adapter, m.group(5), int(m.group(6)), text)
    is_group, slot, c = bool(m.group(7)), int(m.group(8)), m.group(9).lower()
    if c != "q" and not is_group:
        if not 0 <= slot < adapter.n_heads:
            raise InputError(
                f"edge {text!r}: receiver head {m.group(6)}.{slot} does not exist ({adapter.name} has heads "
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


def receivers_of(edges: Iterable[Edge]) -> list[tuple[int, int, str]]:
    """The distinct receivers ``(layer, slot, channel)`` (``out`` as ``(-1, -1, 'out')``), sorted."""
    return sorted({(e.receiver_layer, e.receiver_slot, e.channel) for e in edges})


def sender_index(layer: int, head: int, n_heads: int) -> int:
    return layer * n_heads + head


def edge_from_row(row: pd.Series | Mapping[str, Any]) -> Edge:
    """The :class:`Edge` of one row of an edge table (the columns of :func:`edge_row`)."""
    return Edge(
        int(row["sender_layer"]),
        int(row["sender_head"]),
        int(row["receiver_layer"]),
        int(row["receiver_slot"]),
        str(row["channel"]),
    )


def optional_edges(adapter: ModelAdapter, texts: Sequence[str] | None) -> list[Edge] | None:
    """The edges parsed from ``texts`` (:func:`parse_edge`), or None when none are given."""
    return None if not texts else [parse_edge(adapter, t) for t in texts]
