"""Shared timing helper for the bench/ scripts (imported as ``timing`` when a script
runs as ``python bench/<script>.py``)."""

from __future__ import annotations

import os
import statistics
import subprocess
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


def peak_rss(cmd: list, env: dict | None = None) -> tuple:
    """(peak RSS MiB of the child, seconds) of one CLI run (``os.wait4`` gives the child's
    own high-water mark); ``env`` adds to this process's environment."""
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=dict(os.environ, **(env or {})))
    _, status, usage = os.wait4(p.pid, 0)
    err = p.stderr.read().decode()
    if status != 0:
        raise SystemExit(f"{' '.join(map(str, cmd))} failed:\n{err[-2000:]}")
    return usage.ru_maxrss / 1024, time.perf_counter() - t
