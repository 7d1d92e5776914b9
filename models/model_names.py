"""A model named the way a user names it: what :func:`probe.models.registry.load_model` does
with a spec that is neither a registered name nor ``<prefix>:<rest>``.

* a local directory (``./my-model``, ``~/models/x``) loads as ``hf:<directory>``;
* a local ``.gguf`` file loads as ``gguf:<file>``;
* a hub id (``org/name`` or ``name``) already in the local Hugging Face cache loads as
  ``hf:<id>`` (never downloaded);
* anything else is refused in one line with the closest known names (:mod:`difflib`):
  ``unknown model 'smollm'; did you mean smollm2?``.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Iterable, Optional

from .errors import InputError

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


def in_hub_cache(repo_id: str) -> bool:
    """Whether the local Hugging Face cache holds ``repo_id``'s ``config.json`` (no network)."""
    if not _HUB_ID.match(repo_id):
        return False
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False
    try:
        found = try_to_load_from_cache(repo_id, "config.json")
    except Exception:  # huggingface_hub's validators reject odd ids: not in the cache
        return False
    return isinstance(found, str)


def bare_spec(spec: str) -> Optional[str]:
    """The prefixed spec a bare ``spec`` stands for (``hf:…``, ``gguf:…``), or ``None``."""
    path = Path(spec).expanduser()
    if path.is_dir():
        return f"hf:{spec}"
    if path.is_file() and path.suffix.lower() == ".gguf":
        return f"gguf:{spec}"
    if ":" not in spec and in_hub_cache(spec):
        return f"hf:{spec}"
    return None


def unknown_model(spec: str, named: Iterable[str], prefixes: Iterable[str]) -> InputError:
    """The one-line refusal of ``spec``, with the closest known names (``did you mean …``) and
    every kind of spec the toolkit takes."""
    from .catalog import zoo_rows

    named, prefixes = sorted(named), sorted(prefixes)
    candidates = [*named, *(row["name"] for row in zoo_rows())]
    head, sep, rest = spec.partition(":")
    by_lower = {c.lower(): c for c in candidates}  # 'MiniLM' is minilm
    close = [by_lower[c] for c in difflib.get_close_matches(spec.lower(), list(by_lower), n=3, cutoff=0.6)]
    if sep and rest:  # a mistyped prefix: 'hff:x' → 'hf:x'
        close += [f"{p}:{rest}" for p in difflib.get_close_matches(head.lower(), prefixes, n=2, cutoff=0.5)]
    known = ", ".join([*named, *(f"{p}:<…>" for p in prefixes), "a model directory", "a cached hub id"])
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    where = ""
    if "/" in spec and not sep:
        where = " (not a local directory, and not in the Hugging Face cache: the toolkit never downloads)"
    return InputError(f"unknown model {spec!r}{where}{hint} (known: {known})")
