"""Run corpus analyses in one process or on a Ray cluster, with the same accumulators.

The top floor: it runs the core's streaming capture (:mod:`probe.runs.streaming`) and the
analyses' accumulators (:mod:`probe.analyses.common.accumulate`) over a corpus, here
or in Ray actors (:mod:`probe.app.engine.ray_engine`), and merges the parts.
"""

from probe.runs.blocks import Part, StreamJob

from .jobs import StoreJob
from .run import CLI_ENGINES, ENGINES, CorpusItem, engine_runner, engine_settings, require_ray, run_corpus, run_job

__all__ = [
    "ENGINES",
    "CLI_ENGINES",
    "engine_settings",
    "CorpusItem",
    "run_corpus",
    "run_job",
    "engine_runner",
    "require_ray",
    "Part",
    "StreamJob",
    "StoreJob",
]
