"""A store is read only by the model that made it (issue 59, row 5).

A store's manifest names the model that captured it and fingerprints its weights
(:func:`probe.runs.pipeline.store_manifest`); an analysis given a store and a model must
not report one model's maps under another's name. :func:`refuse_other_model` compares
them in one line; the readers call it when a model is given, and read the store under its
own model when none is.
"""

from __future__ import annotations

import os
from typing import Callable, Optional

from probe.errors import InputError


def refuse_other_model(
    path: str | os.PathLike, manifest: dict, name: str, fingerprint: Optional[Callable[[], str]] = None
) -> None:
    """Refuse to read the store at ``path`` (manifest ``manifest``) as model ``name``'s maps
    unless the store's model has that name or, when ``fingerprint`` is given (called only
    when the names differ: it may load the model), the same weights fingerprint.

    Raises:
        InputError: naming the store, both models and what to give instead.
    """
    stored = manifest.get("model")
    if stored == name:
        return
    weights = manifest.get("weights")
    if fingerprint is not None and isinstance(weights, str) and fingerprint() == weights:
        return  # the same weights under another name (hf:<a copy of minilm's folder>)
    raise InputError(
        f"{path} holds the maps of {stored!r}, not of {name!r} (its manifest names the model and fingerprints its "
        f"weights): read it with --model {stored}, or leave --model out to read a store with its own model"
    )
