"""Run corpus analyses in one process or on a Ray cluster, with the same accumulators.

The top floor: it runs the core's streaming capture (:mod:`probe.runs.streaming`) and the
analyses' accumulators (:mod:`probe.analyses.common.accumulate`) over a corpus, here
or in Ray actors (:mod:`probe.app.engine.ray_engine`), and merges the parts. The one
engine vocabulary is :class:`Engine` (:mod:`.kind`: ``local``, ``stream``, ``ray``); it
imports nothing heavy, the runners (:mod:`.run`) are imported on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from .kind import ENGINES, Engine

__all__ = [
    "ENGINES",
    "Engine",
    "CorpusItem",
    "run_corpus",
    "run_job",
    "engine_runner",
    "require_ray",
    "Part",
    "StreamJob",
    "StoreJob",
]

#: name -> the module that defines it (imported when the name is first read)
_LAZY = {
    "CorpusItem": ".run",
    "run_corpus": ".run",
    "run_job": ".run",
    "engine_runner": ".run",
    "require_ray": ".run",
    "StoreJob": ".jobs",
    "Part": "probe.runs.blocks",
    "StreamJob": "probe.runs.blocks",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name], __name__), name)
