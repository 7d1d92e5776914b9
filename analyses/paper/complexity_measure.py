"""Measure one layer's cost: FLOPs per term, sequential operations, peak memory, wall time.

Measurements for :mod:`probe.analyses.paper.complexity` (Vaswani et al. 2017, Table 1):

* FLOPs: :class:`torch.utils.flop_counter.FlopCounterMode` (2 FLOPs per
  multiply–accumulate of matrix products and convolutions; element-wise work is not
  counted), split into the layer's cost terms by the sub-modules listed in its
  ``TERMS`` (see :mod:`probe.analyses.paper.complexity_layers`).
* Sequential operations: the length of the longest chain of *dependent* tensor
  operations from the layer's input to its output, counted by a dispatch mode that
  gives every tensor a depth (1 + the largest depth among the inputs of the operation
  that produced it; views and tensor creation are free). Operations on the same chain
  level could run in parallel, so this is the paper's "minimum number of sequential
  operations", up to a constant per step.
* Peak memory: the largest total size of tensor storages alive at once during the
  forward (allocations seen by a dispatch mode, freed when their tensor is collected),
  plus the layer's parameters and its input.
* Wall time: the fastest of ``repeats`` forwards under :func:`torch.no_grad` (the
  minimum is the estimate least disturbed by other processes), after the instrumented
  run has warmed up, with torch limited to ``threads`` threads for the duration.
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass
from typing import Dict, Tuple, cast

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.weak import WeakTensorKeyDictionary


_OP_KIND: Dict[object, Tuple[bool, bool]] = {}


def _op_kind(func) -> Tuple[bool, bool]:
    """``(aliases, writes)``: every output aliases an input; some output is written in place."""
    kind = _OP_KIND.get(func)
    if kind is None:
        returns = func._schema.returns
        aliases = bool(returns) and all(r.alias_info is not None for r in returns)
        writes = any(r.alias_info is not None and r.alias_info.is_write for r in returns)
        kind = _OP_KIND[func] = (aliases, writes)
    return kind


def _tensors(value):
    """The tensors in ``obj`` (nested lists, tuples and dicts)."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)


class TraceMode(TorchDispatchMode):
    """Dispatch mode that tracks dependent-operation depth and peak live storage bytes.

    Depth (the longest chain of dependent tensor operations): ``depth_of(t)`` is 0 for
    tensors created outside the mode (inputs, parameters) and for freshly created
    constants; an operation's outputs get 1 + the largest depth among its tensor
    inputs; views keep their base's depth; an in-place operation raises the depth of
    the tensor it writes.

    Memory: every output that does not alias an input is a new storage; its bytes
    count as live until the output tensor is garbage collected. ``peak`` is the
    largest live total seen.
    """

    def __init__(self):
        super().__init__()
        self._depth = WeakTensorKeyDictionary()
        self.live = 0
        self.peak = 0

    def depth_of(self, t: torch.Tensor) -> int:
        """The dependent-operation depth of ``t`` (any shape); 0 for a tensor made outside the mode."""
        return self._depth.get(t, 0)

    def _free(self, nbytes: int) -> None:
        self.live -= nbytes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        depths = [self._depth.get(t, 0) for t in _tensors((args, kwargs))]
        alias, writes = _op_kind(func)
        depth = max(depths, default=0) + (1 if depths and (writes or not alias) else 0)
        for t in _tensors(out):
            self._depth[t] = depth
            if not alias:
                nbytes = t.untyped_storage().nbytes()
                self.live += nbytes
                weakref.finalize(t, self._free, nbytes)
        self.peak = max(self.peak, self.live)
        return out


@dataclass(frozen=True)
class LayerCost:
    """One layer measured at one size.

    Attributes:
        flops: total FLOPs counted (2 per multiply–accumulate).
        term_flops: FLOPs per cost term of the layer (labels of its ``TERMS``).
        sequential_ops: longest chain of dependent operations, input to output.
        peak_bytes: peak live tensor bytes during the forward, with parameters and input.
        time_s: fastest wall time of one forward, seconds.
    """

    flops: int
    term_flops: Dict[str, int]
    sequential_ops: int
    peak_bytes: int
    time_s: float


def count_flops(layer: torch.nn.Module, x: torch.Tensor) -> Dict[str, int]:
    """FLOPs of ``layer(x)`` per cost term of ``layer.TERMS`` (plus ``"total"``).

    A term with sub-modules gets their FLOPs; the term with an empty tuple gets the
    rest. Input ``x: [n, d]``.
    """
    from torch.utils.flop_counter import FlopCounterMode

    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        layer(x)
    return _split_terms(layer, counter.get_flop_counts(), counter.get_total_flops())


def _split_terms(layer, counts, total) -> Dict[str, int]:
    root = type(layer).__name__
    per_module = {name: sum(ops.values()) for name, ops in counts.items()}
    terms: Dict[str, int] = {}
    rest = None
    for term, modules in layer.TERMS.items():
        if modules:
            terms[term] = int(sum(per_module.get(f"{root}.{m}", 0) for m in modules))
        else:
            rest = term
    if rest is not None:
        terms[rest] = int(total - sum(terms.values()))
    terms["total"] = int(total)
    return terms


def measure_layer(layer: torch.nn.Module, n: int, *, repeats: int = 3, threads: int = 1, seed: int = 0) -> LayerCost:
    """Measure ``layer`` on a random ``[n, d]`` input (``d = layer.d``).

    One instrumented run counts FLOPs per term, the sequential operations and the peak
    memory; then ``repeats`` plain runs are timed (fastest kept). Torch is limited to
    ``threads`` threads while measuring and restored afterwards.

    Raises:
        ValueError: ``n``, ``repeats`` or ``threads`` is not a positive integer.
    """
    from torch.utils.flop_counter import FlopCounterMode

    from probe.analyses.paper.complexity_layers import check_positive_int

    n = check_positive_int("n", n)
    repeats = check_positive_int("repeats", repeats)
    threads = check_positive_int("threads", threads)
    d = cast(int, layer.d)  # every layer of complexity_layers has its width as .d
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=gen)
    fixed = sum(p.numel() * p.element_size() for p in layer.parameters())
    fixed += x.numel() * x.element_size()
    old_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        trace = TraceMode()
        with torch.no_grad(), FlopCounterMode(display=False) as counter, trace:
            y = layer(x)
            seq = trace.depth_of(y)
        del y
        terms = _split_terms(layer, counter.get_flop_counts(), counter.get_total_flops())
        times = []
        with torch.no_grad():
            for _ in range(repeats):
                start = time.perf_counter()
                layer(x)
                times.append(time.perf_counter() - start)
    finally:
        torch.set_num_threads(old_threads)
    total = terms.pop("total")
    return LayerCost(
        flops=total,
        term_flops=terms,
        sequential_ops=int(seq),
        peak_bytes=int(fixed + trace.peak),
        time_s=float(min(times)),
    )
