"""Run a job over a corpus in this process or on a Ray cluster: :func:`run_job`, :func:`run_corpus`.

``engine="local"`` or ``"stream"`` (:mod:`.kind`): this process, the whole corpus as one
block (the streaming path; what a run holds is the run's business, not the job's).
``engine="ray"``: the corpus is cut into blocks (``block_size`` items each, the items
themselves travel with the block); a pool of ``workers`` Ray actors, each loading the
model once (``num_gpus=1`` per actor when the model runs on CUDA, else its share of the
CPUs: all of a node for one worker) and kept for later calls with the same settings
(:mod:`.ray_engine`), runs the job on one block per call and returns a :class:`Part`; the
driver hands the parts to ``on_part`` in input order and merges them. Ray restarts an
actor that died and retries its block, and a block's part depends on the block alone, so
a run that lost a worker gives the same result.

Ray is an optional extra: ``pip install -e ".[ray]"``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional, Sequence, Union

from probe.errors import InputError

from probe.runs.blocks import CorpusItem, Part, stream_into

from .kind import ENGINES
from .ray_engine import require_ray, run_blocks

if TYPE_CHECKING:
    from probe.models import ModelAdapter
    from probe.runs.blocks import Runner

log = logging.getLogger(__name__)

__all__ = [
    "ENGINES",
    "CorpusItem",
    "Part",
    "run_job",
    "run_corpus",
    "engine_runner",
    "require_ray",
]


def _check(engine: str, workers: int, block_size: Optional[int]) -> None:
    if engine not in ENGINES:
        raise InputError(f"unknown engine {engine!r}; use one of {', '.join(ENGINES)}")
    if workers < 1 or (block_size is not None and block_size < 1):
        raise InputError(f"workers and block_size must be ≥ 1, got {workers}, {block_size}")


#: bounds of the automatic block size (items per actor call)
AUTO_BLOCK = (16, 512)


def auto_block_size(n_items: int, workers: int) -> int:
    """Items per block when none is given: about four blocks per worker (load balance, and
    a retried block redoes little), within :data:`AUTO_BLOCK`. Each block costs a call,
    its own length sort and a partial last batch: blocks of 100 EWT sentences ran ~7%
    slower than one block of 600 in one process."""
    lo, hi = AUTO_BLOCK
    return int(min(hi, max(lo, -(-n_items // (4 * workers)))))


def run_job(
    model: Union[str, ModelAdapter],
    items: Sequence[Any],
    job: Any,
    *,
    engine: str = "stream",
    address: Optional[str] = None,
    workers: int = 1,
    block_size: Optional[int] = None,
    device: str = "cpu",
    dtype: Optional[str] = None,
    on_part: Optional[Callable[[Part], None]] = None,
    skip: Iterable[int] = (),
    gpus_per_worker: int = 1,
    threads_per_worker: Optional[int] = None,
    progress: bool = False,
) -> list[Part]:
    """Run ``job`` over ``items`` and return its parts in input order.

    Args:
        model: a model spec (``minilm``, ``hf:<path>``, ``zoo:<task>``); for the local
            engine also a loaded :class:`probe.models.ModelAdapter`.
        items: strings or objects with ``.text`` (and ``.spans``), picklable.
        job: a :mod:`probe.app.engine.jobs` job (``run(adapter, items, indices)``).
        engine: ``stream`` (or ``local``: both this process) or ``ray`` (:mod:`.kind`); address: an existing cluster (``ray://…`` or
            ``auto``), default a local one with ``workers`` CPUs.
        workers: actors in the pool; block_size: items per block (one actor call); default
            the job's own ``block_size`` (a store's shard) or :func:`auto_block_size`.
        device: where each worker runs the model: ``cpu`` (``threads_per_worker`` CPUs per actor),
            ``cuda`` (``gpus_per_worker`` GPUs per actor, default 1) or ``auto``
            (an ``hf:`` model placed over the actor's ``gpus_per_worker`` GPUs).
        threads_per_worker: CPUs (torch threads) per CPU actor; default as many as let
            every actor fit (:func:`probe.app.engine.ray_engine.cpus_per_worker`).
        on_part: called with each part, in input order, as soon as all earlier parts
            are done (e.g. to append a store's index).
        skip: corpus indices not to run (already done: a resumed store).

    Raises:
        ValueError: unknown engine, bad sizes, Ray not installed, nothing to run.
    """
    _check(engine, workers, block_size)
    skipped = set(int(i) for i in skip)
    todo = [i for i in range(len(items)) if i not in skipped]
    if not todo:
        return []
    if engine != "ray":
        from probe.models import ModelAdapter, load_model

        adapter = model if isinstance(model, ModelAdapter) else load_model(model, device=device, dtype=dtype)
        part = job.run(adapter, [items[i] for i in todo], todo)
        if on_part is not None:
            on_part(part)
        return [part]
    if not isinstance(model, str):
        raise InputError(
            "the Ray engine loads the model in each worker: give its spec (e.g. 'minilm', "
            "'hf:/path'), not a loaded adapter"
        )
    size = block_size or getattr(job, "block_size", None) or auto_block_size(len(todo), workers)
    blocks = [todo[s : s + size] for s in range(0, len(todo), size)]
    return run_blocks(
        model,
        items,
        blocks,
        job,
        address=address,
        workers=workers,
        device=device,
        dtype=dtype,
        on_part=on_part,
        gpus_per_worker=gpus_per_worker,
        threads_per_worker=threads_per_worker,
        progress=progress,
    )


def engine_runner(model: Union[str, ModelAdapter], **run: Any) -> Runner:
    """A runner of :mod:`probe.runs.blocks` (``runner(job, items) -> [Part]``) on an engine:
    :func:`run_job` of ``model`` (a spec each Ray actor loads, or in this process a loaded
    adapter) with the engine settings ``run`` (:meth:`probe.app.engine.kind.Engine.job_settings`)."""

    def runner(job: Any, items: Sequence[Any]) -> list[Part]:
        return run_job(model, list(items), job, **run)

    return runner


def run_corpus(
    model: Union[str, ModelAdapter],
    corpus: Sequence[Any],
    accumulators: Sequence[Any],
    *,
    engine: str = "stream",
    address: Optional[str] = None,
    workers: int = 1,
    batch_size: int = 16,
    block_size: Optional[int] = None,
    device: str = "cpu",
    dtype: Optional[str] = None,
    last_rows: Optional[int] = None,
    threads_per_worker: Optional[int] = None,
    progress: bool = False,
) -> tuple[list[Any], list[tuple[int, int]]]:
    """Stream ``corpus`` through the model into ``accumulators`` (capture + accumulate).

    Returns:
        ``(accumulators, long)``: the merged accumulators (same order as given; call
        ``.result()``) and ``[(index, n_tokens)]`` of the items left out for being
        longer than the model's limit.
    """
    runner = engine_runner(
        model,
        engine=engine,
        address=address,
        workers=workers,
        block_size=block_size,
        device=device,
        dtype=dtype,
        threads_per_worker=threads_per_worker,
        progress=progress,
    )
    streamed = stream_into(runner, corpus, accumulators, batch_size=batch_size, last_rows=last_rows)
    return streamed.accumulators, streamed.long
