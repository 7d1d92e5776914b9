"""Exact maximum flows on the layered attention-flow graph, in a small C kernel.

The graph of Abnar & Zuidema (2020) (see :mod:`probe.analyses.flow.attention_flow`) is a
dense layered DAG: nodes ``(l, p)``, edges ``(l, p) → (l+1, q)`` with capacity
``Â_{l+1}[q, p]``. ``_layered_dinic.c`` runs Dinic's algorithm (Dinic, 1970) on it
directly from the ``[L, n, n]`` capacities, without building an edge list:

* the blocking flow tries each node's forward arcs in descending capacity (one
  ``argsort`` shared by every pair), so wide edges carry the flow first;
* the breadth-first search keeps, per layer, the nodes not yet found and looks only at
  those, so a layer costs what its unfound nodes cost once most are found;
* a pair stops as soon as its flow reaches ``min(source out-capacity, sink
  in-capacity)``: no cut is smaller, so no proof of optimality is needed (on long
  inputs most input tokens are limited by their own out-capacity);
* float64 capacities, no integer scaling; a residual counts while it exceeds
  ``EPS = 1e-13``, so the value is exact up to ``|C|·EPS`` for the final cut ``C``
  (below ``L·n²·1e-13``, 1.6e-7 at n = 512, L = 6) plus float rounding.

The kernel is compiled on first use with the system C compiler (``cc``, or ``$CC``)
into ``$XDG_CACHE_HOME/probe`` (``~/.cache/probe``); without a compiler
:func:`available` is False and callers use the scipy path. Pairs are spread over threads
(``ctypes`` releases the GIL), each with its own workspace.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from probe.errors import NotApplicable

log = logging.getLogger(__name__)

EPS = 1e-13
_SOURCE = Path(__file__).with_name("_layered_dinic.c")
_LIB = None
_FAILED: str | None = None


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "probe"


def _load():
    """The compiled kernel (compiling it once per source version), or None."""
    global _LIB, _FAILED
    if _LIB is not None or _FAILED is not None:
        return _LIB
    if os.environ.get("PROBE_FLOW_SOLVER", "").lower() == "scipy":
        _FAILED = "PROBE_FLOW_SOLVER=scipy"
        return None
    src = _SOURCE.read_bytes()
    so = _cache_dir() / f"layered_dinic-{hashlib.sha256(src).hexdigest()[:16]}.so"
    try:
        if not so.exists():
            so.parent.mkdir(parents=True, exist_ok=True)
            cc = os.environ.get("CC", "cc")
            with tempfile.TemporaryDirectory(dir=so.parent) as tmp:
                tmp_so = Path(tmp) / so.name
                subprocess.run(
                    [cc, "-O3", "-shared", "-fPIC", "-o", str(tmp_so), str(_SOURCE)],
                    check=True,
                    capture_output=True,
                    timeout=120,
                )
                os.replace(tmp_so, so)  # atomic: concurrent processes never see half a file
        lib = ctypes.CDLL(str(so))
    except (OSError, subprocess.SubprocessError) as exc:
        _FAILED = f"could not build the flow kernel ({exc}); using scipy's max-flow"
        log.warning(_FAILED)
        return None
    f64, i32 = (np.ctypeslib.ndpointer(t, flags="C_CONTIGUOUS") for t in (np.float64, np.int32))
    u8 = np.ctypeslib.ndpointer(np.uint8, flags="C_CONTIGUOUS")
    lib.layered_max_flows.restype = ctypes.c_int
    lib.layered_max_flows.argtypes = [
        ctypes.c_int,
        ctypes.c_int,
        f64,
        i32,
        ctypes.c_int,
        i32,
        i32,
        ctypes.c_double,
        f64,
        f64,
        f64,
        i32,
        u8,
        i32,
        i32,
        i32,
        i32,
        i32,
        i32,
    ]
    _LIB = lib
    return lib


def available() -> bool:
    """True when the compiled kernel can be used (built now if needed)."""
    return _load() is not None


def max_flows(ahat: np.ndarray, sources: np.ndarray, sinks: np.ndarray, workers: int = 1) -> np.ndarray:
    """Max flow from ``(0, sources[k])`` to ``(L, sinks[k])`` for every ``k``.

    Args:
        ahat: capacities ``[L, n, n]`` float64, ``ahat[l-1][q, p]`` on ``(l−1, p) → (l, q)``.
        sources, sinks: positions, same length ``K``.
        workers: threads.

    Returns:
        ``[K]`` float64 flow values.

    Raises:
        RuntimeError: the kernel is not available (check :func:`available` first).
    """
    lib = _load()
    if lib is None:
        raise RuntimeError(_FAILED or "flow kernel unavailable")
    L, n, _ = ahat.shape
    cap_t = np.ascontiguousarray(ahat.transpose(0, 2, 1), dtype=np.float64)
    order = np.argsort(-cap_t, axis=2).astype(np.int32)
    sources = np.ascontiguousarray(sources, dtype=np.int32)
    sinks = np.ascontiguousarray(sinks, dtype=np.int32)
    out = np.zeros(len(sources))
    # one chunk (and one workspace) per thread; pairs interleaved so that chunks cost alike
    n_chunks = max(1, min(workers, len(sources)))
    chunks = [np.arange(k, len(sources), n_chunks) for k in range(n_chunks)]

    def run(idx: np.ndarray) -> None:
        m, nodes = L * n * n, (L + 1) * n
        ws = [np.zeros(m), np.zeros(m), np.zeros(m, np.int32), np.zeros(m, np.uint8)]
        ws += [np.zeros(nodes, np.int32) for _ in range(6)]
        res = np.zeros(len(idx))
        rc = lib.layered_max_flows(L, n, cap_t, order, len(idx), sources[idx], sinks[idx], EPS, res, *ws)
        if rc != 0:
            raise NotApplicable(f"the flow kernel handles at most 63 layers, got {L}")
        out[idx] = res

    if workers > 1 and len(chunks) > 1:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(run, chunks))
    else:
        for c in chunks:
            run(c)
    return out
