"""The layer types compared in Vaswani et al. (2017), "Attention Is All You Need", §4 / Table 1.

Each layer maps one sequence ``x: [n, d]`` (float32, no batch dimension) to ``[n, d]``
and is *causal* (position ``i`` reads only positions ``j <= i``), so that every layer
type is compared under the same constraint as the paper's unidirectional recurrence.
The implementations are written so that torch's FLOP counter
(:class:`torch.utils.flop_counter.FlopCounterMode`) sees every multiply–accumulate that
the paper's complexity column refers to; it counts matrix products and convolutions at
2 FLOPs per multiply–accumulate and ignores element-wise work (softmax, gates, masks).

What one layer counts (``g`` = gates: 1 RNN, 3 GRU, 4 LSTM):

============================  =================================  ==========================
layer                         FLOPs counted                      paper (Table 1)
============================  =================================  ==========================
``self_attention``            8·n·d² (Q,K,V,O) + 4·n²·d (QKᵀ,AV)  O(n²·d)
``restricted_attention``      8·n·d² + 4·r·n·d (banded keys)      O(r·n·d)
``rnn`` / ``gru`` / ``lstm``  4·g·n·d² (input + hidden matmuls)   O(n·d²)
``conv`` / ``dilated_conv``   2·k·n·d²                            O(k·n·d²)
``separable_conv``            2·k·n·d (depthwise) + 2·n·d²        O(k·n·d + n·d²)
============================  =================================  ==========================

Every layer class lists its cost *terms* in ``TERMS``: a term label mapped to the
sub-modules whose FLOPs make up that term (an empty tuple: the FLOPs of the layer's own
``forward`` outside any sub-module). :mod:`probe.analyses.paper.complexity` uses them to find the
regime of sizes in which each term dominates.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from typing import Dict, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from probe.errors import InputError

#: every layer type, in the order of the paper's Table 1 (plus the variants)
LAYER_KINDS = (
    "self_attention",
    "restricted_attention",
    "rnn",
    "gru",
    "lstm",
    "conv",
    "dilated_conv",
    "separable_conv",
)
RECURRENT_KINDS = ("rnn", "gru", "lstm")
_GATES = {"rnn": 1, "gru": 3, "lstm": 4}

#: (exponent of n, exponent of d) of each term, keyed by the term label used in TERMS
TERM_EXPONENTS: Dict[str, Tuple[int, int]] = {
    "n²·d": (2, 1),
    "r·n·d": (1, 1),
    "n·d² (projections)": (1, 2),
    "n·d²": (1, 2),
    "k·n·d²": (1, 2),
    "k·n·d": (1, 1),
}
#: terms the paper's Table 1 leaves out (the Q, K, V, O projections of attention)
EXTRA_TERMS = ("n·d² (projections)",)


def check_positive_int(name: str, value: object, minimum: int = 1) -> int:
    """Return ``value`` as int, or raise :class:`InputError` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InputError(f"{name} must be an integer >= {minimum}; got {value!r}")
    if value < minimum:
        raise InputError(f"{name} must be an integer >= {minimum}; got {value}")
    return int(value)


class SelfAttention(nn.Module):
    """Single-head causal scaled dot-product self-attention with output projection.

    ``softmax(QKᵀ/√d + causal mask)·V`` then ``W_O`` (Vaswani et al. 2017, eq. 1). The
    full ``[n, n]`` score matrix is computed (masking does not save FLOPs), so the
    count is 8·n·d² + 4·n²·d. Input ``[n, d]``, output ``[n, d]``.
    """

    TERMS = {"n²·d": (), "n·d² (projections)": ("q_proj", "k_proj", "v_proj", "o_proj")}
    SEQUENTIAL_PAPER = "O(1)"

    def __init__(self, d: int):
        super().__init__()
        self.d = d
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(d, d, bias=False) for _ in range(4))
        self.scale = 1.0 / math.sqrt(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[n, d]`` → ``[n, d]`` (see the class docstring)."""
        n = x.shape[0]
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        scores = (q @ k.T) * self.scale
        future = torch.ones(n, n, dtype=torch.bool, device=x.device).triu_(1)
        probs = scores.masked_fill(future, float("-inf")).softmax(-1)
        return self.o_proj(probs @ v)


class RestrictedSelfAttention(nn.Module):
    """Causal self-attention restricted to a window of the ``r`` most recent positions.

    Query ``i`` reads keys ``i-r+1 … i`` (the paper's "neighborhood of size r", §4). The
    keys and values are padded with ``r-1`` rows and unfolded into ``[n, r, d]`` windows,
    so the cost is really 8·n·d² + 4·r·n·d — linear in ``n`` — not masked full
    attention. Input ``[n, d]``, output ``[n, d]``.
    """

    TERMS = {"r·n·d": (), "n·d² (projections)": ("q_proj", "k_proj", "v_proj", "o_proj")}
    SEQUENTIAL_PAPER = "O(1)"

    def __init__(self, d: int, r: int):
        super().__init__()
        self.d = d
        self.r = check_positive_int("r", r, 2)
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(d, d, bias=False) for _ in range(4))
        self.scale = 1.0 / math.sqrt(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[n, d]`` → ``[n, d]`` (see the class docstring)."""
        n, r = x.shape[0], self.r
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        # [n + r - 1, d] -> windows [n, d, r] (a view) -> [n, r, d]
        k_win = F.pad(k, (0, 0, r - 1, 0)).unfold(0, r, 1).transpose(1, 2)
        v_win = F.pad(v, (0, 0, r - 1, 0)).unfold(0, r, 1).transpose(1, 2)
        scores = torch.bmm(k_win, q.unsqueeze(2)).squeeze(2) * self.scale  # [n, r]
        # slot s of row i holds position i - r + 1 + s: padding when that is < 0
        slot = torch.arange(r, device=x.device)
        pad = slot.unsqueeze(0) < (r - 1 - torch.arange(n, device=x.device)).unsqueeze(1)
        probs = scores.masked_fill(pad, float("-inf")).softmax(-1)
        mixed = torch.bmm(probs.unsqueeze(1), v_win).squeeze(1)  # [n, d]
        return self.o_proj(mixed)


class Recurrent(nn.Module):
    """A unidirectional RNN (tanh), GRU or LSTM layer run as an explicit loop over time.

    The input projections of all steps are one matrix product (as cuDNN does); the
    hidden-state product ``h_{t-1}·W_hhᵀ`` is one small product per step, so the
    counter sees 2·g·n·d² + 2·g·n·d² = 4·g·n·d² FLOPs (``g`` = 1, 3, 4 gates) and the
    dependency chain through ``h`` has length proportional to ``n``. Gate equations
    follow :class:`torch.nn.GRUCell` / :class:`torch.nn.LSTMCell` (hidden biases
    omitted). Input ``[n, d]``, output ``[n, d]`` (the hidden states).
    """

    TERMS = {"n·d²": ()}
    SEQUENTIAL_PAPER = "O(n)"

    def __init__(self, d: int, cell: str):
        super().__init__()
        if cell not in _GATES:
            raise InputError(f"cell must be one of {sorted(_GATES)}; got {cell!r}")
        self.d, self.cell, g = d, cell, _GATES[cell]
        self.w_ih = nn.Parameter(torch.randn(g * d, d) / math.sqrt(d))
        self.w_hh = nn.Parameter(torch.randn(g * d, d) / math.sqrt(d))
        self.bias = nn.Parameter(torch.zeros(g * d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[n, d]`` → ``[n, d]`` (see the class docstring)."""
        n, d = x.shape
        xw = torch.addmm(self.bias, x, self.w_ih.T)  # [n, g·d], all steps at once
        w_hh_t = self.w_hh.T
        h = x.new_zeros(1, d)
        c = x.new_zeros(1, d)
        out = []
        for t in range(n):
            hw = h @ w_hh_t  # [1, g·d]
            xt = xw[t : t + 1]
            if self.cell == "rnn":
                h = torch.tanh(xt + hw)
            elif self.cell == "gru":
                xr, xz, xn = xt.chunk(3, 1)
                hr, hz, hn = hw.chunk(3, 1)
                reset, update = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
                cand = torch.tanh(xn + reset * hn)
                h = (1 - update) * cand + update * h
            else:
                i, f, g, o = (xt + hw).chunk(4, 1)
                c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
                h = torch.sigmoid(o) * torch.tanh(c)
            out.append(h)
        return torch.cat(out, 0)


class CausalConv(nn.Module):
    """Causal 1-D convolution, kernel ``k``, dilation ``dilation``, ``d`` → ``d`` channels.

    Left-padded by ``(k-1)·dilation`` so output ``i`` reads inputs
    ``i, i-dilation, …, i-(k-1)·dilation``: 2·k·n·d² FLOPs whatever the dilation.
    Input ``[n, d]``, output ``[n, d]``.
    """

    TERMS = {"k·n·d²": ()}
    SEQUENTIAL_PAPER = "O(1)"

    def __init__(self, d: int, k: int, dilation: int = 1):
        super().__init__()
        self.d = d
        self.k = check_positive_int("k", k, 2)
        self.dilation = check_positive_int("dilation", dilation, 1)
        self.conv = nn.Conv1d(d, d, self.k, dilation=self.dilation, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[n, d]`` → ``[n, d]`` (see the class docstring)."""
        z = F.pad(x.T.unsqueeze(0), ((self.k - 1) * self.dilation, 0))
        return self.conv(z).squeeze(0).T


class SeparableConv(nn.Module):
    """Causal depthwise-separable convolution (Chollet 2017), kernel ``k``.

    A depthwise convolution (one length-``k`` filter per channel, 2·k·n·d FLOPs) then a
    pointwise ``d × d`` convolution (2·n·d² FLOPs). Input ``[n, d]``, output ``[n, d]``.
    """

    TERMS = {"k·n·d": ("depthwise",), "n·d²": ("pointwise",)}
    SEQUENTIAL_PAPER = "O(1)"

    def __init__(self, d: int, k: int):
        super().__init__()
        self.d = d
        self.k = check_positive_int("k", k, 2)
        self.depthwise = nn.Conv1d(d, d, self.k, groups=d, bias=False)
        self.pointwise = nn.Conv1d(d, d, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[n, d]`` → ``[n, d]`` (see the class docstring)."""
        z = F.pad(x.T.unsqueeze(0), (self.k - 1, 0))
        return self.pointwise(self.depthwise(z)).squeeze(0).T


def validate_sizes(name: str, values: Iterable[int]) -> Tuple[int, ...]:
    """Sorted, de-duplicated positive integer sizes, or :class:`InputError` naming ``name``."""
    try:
        values = list(values)
    except TypeError:
        raise InputError(f"{name} must be a list of positive integers; got {values!r}") from None
    if not values:
        raise InputError(f"{name} needs at least one size")
    return tuple(sorted({check_positive_int(name, v) for v in values}))


def make_layer(kind: str, d: int, *, k: int = 3, r: int = 16) -> nn.Module:
    """Build one layer of type ``kind`` with model width ``d`` (float32, CPU, eval mode).

    ``dilated_conv`` is built with dilation ``k`` (the second layer of a stack whose
    dilations are 1, k, k², …); its FLOPs do not depend on the dilation.

    Raises:
        ValueError: unknown ``kind``, or ``d``, ``k``, ``r`` not integers in range
            (``d >= 1``, ``k >= 2``, ``r >= 2``).
    """
    d = check_positive_int("d", d)
    k = check_positive_int("k", k, 2)
    r = check_positive_int("r", r, 2)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        layer: torch.nn.Module
        if kind == "self_attention":
            layer = SelfAttention(d)
        elif kind == "restricted_attention":
            layer = RestrictedSelfAttention(d, r)
        elif kind in RECURRENT_KINDS:
            layer = Recurrent(d, kind)
        elif kind == "conv":
            layer = CausalConv(d, k)
        elif kind == "dilated_conv":
            layer = CausalConv(d, k, dilation=k)
        elif kind == "separable_conv":
            layer = SeparableConv(d, k)
        else:
            raise InputError(f"unknown layer type {kind!r}; choose from {', '.join(LAYER_KINDS)}")
    return layer.eval()


def estimate_peak_bytes(kind: str, n: int, d: int, *, k: int = 3, r: int = 16) -> int:
    """Upper estimate of the float32 bytes one forward of ``kind`` holds at once.

    Parameters, input and the activations alive at the widest point of the forward
    (for self-attention the ``[n, n]`` scores, probabilities and mask dominate; for
    restricted attention the ``[n, r, d]`` windows). Used to refuse grid points that
    would not fit in memory before running them.

    Raises:
        ValueError: unknown ``kind``.
    """
    f = 4
    if kind == "self_attention":
        return f * (4 * d * d + 6 * n * d + 3 * n * n)
    if kind == "restricted_attention":
        return f * (4 * d * d + 6 * n * d + 2 * (n + r) * d + 2 * n * r * d + 3 * n * r)
    if kind in RECURRENT_KINDS:
        g = _GATES[kind]
        return f * (2 * g * d * d + g * d + 2 * n * g * d + 3 * n * d)
    if kind in ("conv", "dilated_conv"):
        dil = k if kind == "dilated_conv" else 1
        return f * (k * d * d + 3 * (n + (k - 1) * dil) * d + n * k * d)
    if kind == "separable_conv":
        return f * (k * d + d * d + 4 * (n + k) * d + n * k * d)
    raise InputError(f"unknown layer type {kind!r}; choose from {', '.join(LAYER_KINDS)}")


# the old private name, for code written against it
_check_positive_int = check_positive_int
