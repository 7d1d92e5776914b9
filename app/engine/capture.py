"""``probe capture --engine``: capture a corpus into a store, a block per worker.

The analyses do not live here: each takes a runner (:mod:`probe.runs.blocks`) and the run's
context gives it the engine's (``ctx.runner``: this process, or Ray's actors).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence, Union

from probe.runs.blocks import corpus_items

from .jobs import StoreJob

if TYPE_CHECKING:
    from probe.inputs.corpus import Corpus
    from probe.store.directory import Store
from .run import run_job

__all__ = ["capture"]


def capture(
    model: str,
    corpus: Corpus,
    out: Union[str, Path],
    *,
    manifest: dict,
    store_dtype: str = "float32",
    batch_size: int = 16,
    layers: Optional[Sequence[int]] = None,
    **run: Any,
) -> Store:
    """Capture ``corpus`` into the store ``out``: each worker writes the shard of its
    block, the driver appends the index in input order as blocks finish. Resumable
    after a worker or the driver was killed: examples in the index are not redone.

    Args:
        corpus: the whole :class:`probe.inputs.corpus.Corpus` (items beyond the model's limit
            are left out by the workers, keeping corpus indices as example ids).
        manifest: the store manifest, :func:`probe.runs.pipeline.store_manifest`.
    """
    from probe.store.directory import Store, StoreWriter

    with StoreWriter(out, manifest, dtype=store_dtype) as writer:  # the driver holds the store's lock
        job = StoreJob(str(out), dtype=store_dtype, batch_size=batch_size, layers=layers)
        run_job(
            model,
            corpus_items(corpus),
            job,
            on_part=lambda part: writer.append_index(part.value),
            skip=writer.done,
            **run,
        )
    return Store(out)
