"""The one engine vocabulary: :class:`Engine`, its name validated once, when it is made.

* ``local``: one process; the run holds every example's attention maps whole (captured
  once) and the analyses read them.
* ``stream``: one process; the corpus streams through the model in blocks, its maps
  layer by layer into accumulators (peak memory: one layer of one batch); a run holds a
  kept sample's maps at most.
* ``ray``: the same blocks as ``stream`` in a pool of Ray actors (``pip install -e ".[ray]"``).

Each name means that everywhere: the CLI's ``--engine``, an analysis' ``engines``,
:func:`probe.app.registry.open_run` and :func:`probe.app.engine.run.run_job`. A command
whose analysis always streams its corpus (``roles``, ``syntax``, ``coref``, ``ablate``)
runs ``local`` as ``stream`` (one process either way); every command that takes
``--engine`` accepts ``auto`` (its own default) and the three names.
This module imports nothing heavy (the CLI's ``--help`` reads it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from probe.errors import InputError

__all__ = ["ENGINES", "ENGINE_HELP", "Engine"]

#: every engine name, in the order ``--help`` and errors list them
ENGINES = ("local", "stream", "ray")

#: one line per engine (and the report's ``auto``) for ``--help``
ENGINE_HELP = {
    "auto": "local while every example's maps fit in a quarter of --memory-budget, else stream",
    "local": "one process, every example's maps held",
    "stream": "one process, layer by layer (peak memory: one layer)",
    "ray": 'a pool of Ray actors (pip install -e ".[ray]")',
}


@dataclass(frozen=True)
class Engine:
    """Where a run's work over its corpus runs, with its settings.

    Attributes:
        name: ``local``, ``stream`` or ``ray`` (:data:`ENGINES`).
        address: an existing Ray cluster (``auto``, ``ray://host:10001``), or ``None`` for
            a local one (``ray`` only).
        workers: Ray actors, each holding the model (``ray`` only).
        device: where the model runs in each worker.

    Raises:
        InputError: an unknown name (listing the known ones) or fewer than one worker.
    """

    name: str = "local"
    address: Optional[str] = None
    workers: int = 2
    device: str = "cpu"

    def __post_init__(self) -> None:
        if self.name not in ENGINES:
            raise InputError(f"unknown engine {self.name!r}; use one of {', '.join(ENGINES)}")
        if int(self.workers) < 1:
            raise InputError(f"workers must be at least 1, got {self.workers}")

    @property
    def holds_every_map(self) -> bool:
        """Whether the run holds every example's maps (``local``), not a kept sample."""
        return self.name == "local"

    @property
    def in_process(self) -> bool:
        """Whether the work runs in this process (``local``, ``stream``), not on Ray actors."""
        return self.name != "ray"

    def job_settings(self) -> dict:
        """Keyword arguments of :func:`probe.app.engine.run.run_job` for this engine.

        Raises:
            InputError: ``ray`` without Ray installed (says how to install it).
        """
        if self.name == "ray":
            from .ray_engine import require_ray

            require_ray()
            return {"engine": "ray", "address": self.address, "workers": self.workers, "device": self.device}
        return {"engine": self.name, "device": self.device}
