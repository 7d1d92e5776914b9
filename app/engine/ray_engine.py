"""The Ray side of :func:`probe.app.engine.run.run_job`: blocks, an actor pool, parts in order.

Ray Data (Moritz et al. 2018, "Ray: a distributed framework for emerging AI
applications"; Ray Data's streaming executor) holds one row per block of the corpus
(the block's corpus indices and items, pickled); ``map_batches`` with an
``ActorPoolStrategy`` of ``workers`` actors (no more than there are blocks: an idle actor
would still load the model) calls :class:`BlockWorker` on one block at a time. Each
actor loads the model once in its constructor. Ray Data's defaults for actor pools
restart a dead actor and retry its block (``max_restarts=-1``, ``max_task_retries=-1``),
so a killed worker costs time, not results.
"""

from __future__ import annotations

import logging
import os
import pickle
from typing import Any, Callable, Optional, Sequence

import numpy as np

from probe.runs.blocks import Part

from probe.errors import InputError

log = logging.getLogger(__name__)

__all__ = ["BlockWorker", "run_blocks", "ensure_ray", "require_ray", "RAY_HINT"]


RAY_HINT = 'the Ray engine needs the optional extra: pip install -e ".[ray]"'


def require_ray() -> Any:
    """``import ray`` or a ``ValueError`` saying how to install it."""
    try:
        import ray
        import ray.data
    except ImportError:
        raise InputError(RAY_HINT) from None
    return ray


class BlockWorker:
    """A Ray Data callable class: holds the model, runs the job on one block per call."""

    def __init__(self, model: str, device: str, dtype: Optional[str], job: bytes, threads: int = 1):
        import torch
        from ray import cloudpickle

        from probe.models import load_model

        torch.set_num_threads(max(1, threads))
        self.adapter = load_model(model, device=device, dtype=dtype)
        self.job = cloudpickle.loads(job)

    def __call__(self, batch: dict) -> dict:
        from ray import cloudpickle

        blocks, parts = [], []
        for b, payload in zip(batch["block"], batch["payload"]):
            ids, items = pickle.loads(payload)
            part = self.job.run(self.adapter, items, ids)
            blocks.append(int(b))
            parts.append(cloudpickle.dumps(part))
        return {"block": np.asarray(blocks, dtype=np.int64), "part": np.asarray(parts, dtype=object)}


def ensure_ray(address: Optional[str], workers: int) -> Any:
    """Connect to ``address`` or start a local cluster (once per process) with this
    machine's CPUs, at least ``workers``."""
    ray = require_ray()
    if not ray.is_initialized():
        kwargs = dict(
            include_dashboard=False, log_to_driver=False, ignore_reinit_error=True, logging_level=logging.WARNING
        )
        if address:
            ray.init(address=address, **kwargs)
        else:
            ray.init(num_cpus=max(workers, os.cpu_count() or 1), **kwargs)
    return ray


def cpus_per_worker(node_cpus: Sequence[float], workers: int) -> int:
    """The most CPUs each of ``workers`` actors can take so that all of them fit on nodes
    with ``node_cpus`` CPUs each (1 when even that does not fit: Ray queues the rest).

    Each actor runs torch with that many threads, so one worker on an 8-core machine uses
    8 cores rather than 1.
    """
    best = 1
    for c in range(1, int(max(node_cpus, default=1)) + 1):
        if sum(int(n // c) for n in node_cpus) >= workers:
            best = c
    return best


def _node_cpus(ray) -> list:
    return [float(n.get("Resources", {}).get("CPU", 0)) for n in ray.nodes() if n.get("Alive")]


def run_blocks(
    model: str,
    items: Sequence,
    blocks: Sequence[Sequence[int]],
    job: Any,
    *,
    address: Optional[str],
    workers: int,
    device: str,
    dtype: Optional[str],
    on_part: Optional[Callable[[Part], None]],
    gpus_per_worker: int = 1,
    threads_per_worker: Optional[int] = None,
    progress: bool = False,
) -> list:
    """Run ``job`` on every block (lists of corpus indices) with a pool of actors.

    On CPUs each actor asks for ``threads_per_worker`` CPUs (default: as many as let all
    ``min(workers, blocks)`` actors fit on the cluster's nodes, :func:`cpus_per_worker`)
    and runs torch with that many threads; on GPUs, ``gpus_per_worker`` GPUs and one
    thread.

    Returns:
        the parts in block order; ``on_part`` sees each as soon as every earlier block
        is done.
    """
    ray = ensure_ray(address, workers)
    import ray.data  # noqa: F811 (the submodule of the module ensure_ray imported)
    from ray import cloudpickle

    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = bool(progress)
    rows = [
        {"block": b, "payload": pickle.dumps(([int(i) for i in ids], [items[i] for i in ids]))}
        for b, ids in enumerate(blocks)
    ]
    gpu = str(device).startswith("cuda") or device == "auto"
    size = min(workers, len(rows))
    threads = 1 if gpu else (threads_per_worker or cpus_per_worker(_node_cpus(ray), size))
    resources = {"num_gpus": gpus_per_worker} if gpu else {"num_cpus": threads}
    ds = ray.data.from_items(rows, override_num_blocks=len(rows))
    ds = ds.map_batches(
        BlockWorker,
        batch_size=1,
        batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(size=size),
        fn_constructor_kwargs=dict(
            model=model, device=device, dtype=dtype, job=cloudpickle.dumps(job), threads=threads
        ),
        **resources,
    )
    done: dict = {}
    ordered: list = []
    for row in ds.iter_rows():
        done[int(row["block"])] = cloudpickle.loads(row["part"])
        while len(ordered) in done:  # hand parts on in input order
            part = done.pop(len(ordered))
            ordered.append(part)
            if on_part is not None:
                on_part(part)
    if len(ordered) != len(blocks):
        raise RuntimeError(f"the Ray run returned {len(ordered)} of {len(blocks)} blocks")
    return ordered
