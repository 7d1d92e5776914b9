"""Shared timing helper for the bench/ scripts (imported as ``timing`` when a script
runs as ``python bench/<script>.py``)."""

from __future__ import annotations

import statistics
import time
import tracemalloc


def timed(fn, repeats: int):
    """Median wall time of ``repeats`` untraced calls, then the peak traced memory (MiB)
    of one more call under tracemalloc (tracing slows Python code, so it is kept out of
    the timings); returns (median seconds, peak MiB, result of the last timed call)."""
    times, out = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return statistics.median(times), peak / 2**20, out
