"""The Ray side of :func:`probe.app.engine.run.run_job`: blocks, an actor pool, parts in order.

Ray (Moritz et al. 2018, "Ray: a distributed framework for emerging AI applications")
actors, each holding the model: :class:`BlockActor` loads it once in its constructor and
runs the job on one block per call (the block's corpus indices and items, pickled);
``ray.util.ActorPool`` hands each block to the next idle actor and returns the parts in
block order. The pool is kept for the process's Ray session and reused by every later call
with the same model, device, precision and threads, so a run whose jobs come in many small
calls (the sequential claims: a call per block of 64 sentences) starts its actors and loads
the model once, not once per call; a call with other settings replaces the pool. An actor
that dies is restarted and its block retried (``max_restarts=-1``, ``max_task_retries=-1``),
so a killed worker costs time, not results.
"""

from __future__ import annotations

import logging
import os
import pickle
from typing import Any, Callable, Optional, Sequence


from probe.runs.blocks import Part

from probe.errors import InputError

__all__ = ["BlockActor", "run_blocks", "ensure_ray", "require_ray", "RAY_HINT"]


RAY_HINT = 'the Ray engine needs the optional extra: pip install -e ".[ray]"'


def require_ray() -> Any:
    """``import ray`` or a ``ValueError`` saying how to install it."""
    try:
        import ray
    except ImportError:
        raise InputError(RAY_HINT) from None
    return ray


class BlockActor:
    """A Ray actor holding the model: runs a job on one block per call."""

    def __init__(self, model: str, device: str, dtype: Optional[str], threads: int = 1):
        import torch

        from probe.models import load_model

        torch.set_num_threads(max(1, threads))
        self.adapter = load_model(model, device=device, dtype=dtype)
        self.job_key: Optional[str] = None
        self.job: Any = None

    def run(self, job_key: str, job: bytes, payload: bytes) -> bytes:
        """One block: ``payload`` = pickled ``(corpus indices, items)``; the job (cloudpickled)
        is unpickled once per ``job_key`` (a call of :func:`run_blocks`)."""
        from ray import cloudpickle

        if job_key != self.job_key:
            self.job_key, self.job = job_key, cloudpickle.loads(job)
        ids, items = pickle.loads(payload)
        return cloudpickle.dumps(self.job.run(self.adapter, items, ids))


#: the kept actor pool: ``{"key": (Ray job id, driver node id, model, device, dtype, resources), "actors": [...]}``
_POOL: dict = {}


def _actor_pool(ray: Any, key: tuple, size: int, options: dict, args: tuple) -> list:
    """``size`` actors of the kept pool for ``key`` (made on first need; a pool of another
    key, or of an earlier Ray session, is killed and replaced)."""
    here = ray.get_runtime_context()
    session = (here.get_job_id(), here.get_node_id())  # a new local cluster reuses job ids, not node ids
    key = session + key
    if _POOL.get("key") != key:
        if _POOL.get("key", ())[:2] == session:  # other settings in this session: free their CPUs
            for actor in _POOL["actors"]:
                ray.kill(actor)
        _POOL.clear()  # (an earlier session's actors went with it)
        _POOL.update(key=key, actors=[])
    remote = ray.remote(max_restarts=-1, max_task_retries=-1)(BlockActor).options(**options)
    while len(_POOL["actors"]) < size:
        _POOL["actors"].append(remote.remote(*args))
    return _POOL["actors"][:size]


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
    ``min(workers, blocks)`` actors fit on the cluster's nodes, :func:`cpus_per_worker`: a
    call of one block runs on one actor with every CPU, as this process would) and runs
    torch with that many threads; on GPUs, ``gpus_per_worker`` GPUs and one thread. The
    actors are the kept pool's (:func:`_actor_pool`): a later call with the same settings
    finds them loaded (the sequential claims' calls, one block each, all share one actor).

    Returns:
        the parts in block order; ``on_part`` sees each as soon as every earlier block
        is done.
    """
    ray = ensure_ray(address, workers)
    import uuid

    from ray import cloudpickle
    from ray.util import ActorPool

    rows = [pickle.dumps(([int(i) for i in ids], [items[i] for i in ids])) for ids in blocks]
    gpu = str(device).startswith("cuda") or device == "auto"
    size = min(workers, len(rows))  # no more actors than blocks: an idle one would still load the model
    threads = 1 if gpu else (threads_per_worker or cpus_per_worker(_node_cpus(ray), size))
    options = {"num_gpus": gpus_per_worker} if gpu else {"num_cpus": threads}
    actors = _actor_pool(
        ray, (model, device, dtype, tuple(sorted(options.items()))), size, options, (model, device, dtype, threads)
    )
    job_key, job_ref = uuid.uuid4().hex, ray.put(cloudpickle.dumps(job))
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(rows), unit="block", desc="blocks on Ray")
    ordered: list = []
    pool = ActorPool(actors)
    for done in pool.map(lambda actor, row: actor.run.remote(job_key, job_ref, row), rows):
        part = cloudpickle.loads(done)
        ordered.append(part)
        if bar is not None:
            bar.update(1)
        if on_part is not None:
            on_part(part)
    if bar is not None:
        bar.close()
    return ordered  # ActorPool.map yields one part per block, or raises
