"""A templated task read from a JSON-lines file: one example per line, its text and the
answer whose logit is read (minus ``against``'s when given), e.g. an indirect-object
identification prompt (Wang et al. 2022)::

    {"text": "When Mary and John went to the store, John gave a drink to", "answer": " Mary", "against": " John"}

Every line is checked at the boundary; the first bad one is refused in one line that names
the file, the line and what to do.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from probe.errors import InputError

from .answers import target_of

if TYPE_CHECKING:
    from probe.models.adapter import ModelAdapter

__all__ = ["read_task", "KEYS"]

#: the keys of one example: ``text`` and ``answer`` required, ``against`` optional
KEYS = ("text", "answer", "against")


def _example(line: str, where: str) -> dict:
    """One line as ``{text, answer, against}`` (strings; ``against`` may be None)."""
    try:
        ex = json.loads(line)
    except json.JSONDecodeError as exc:
        raise InputError(
            f'{where}: not JSON ({exc.msg}); give one object per line: {{"text": …, "answer": …}}'
        ) from None
    if not isinstance(ex, dict):
        raise InputError(f'{where}: a JSON {type(ex).__name__}, not an object; give {{"text": …, "answer": …}}')
    unknown = sorted(set(ex) - set(KEYS))
    if unknown:
        raise InputError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; the keys are {', '.join(KEYS)}")
    for key in ("text", "answer"):
        if not isinstance(ex.get(key), str) or not ex[key]:
            raise InputError(f"{where}: {key!r} is missing or not a non-empty string; every line needs text and answer")
    if ex.get("against") is not None and not isinstance(ex["against"], str):
        raise InputError(f"{where}: 'against' is a {type(ex['against']).__name__}; give a string or leave it out")
    return ex


def read_task(adapter: ModelAdapter, path: str) -> list:
    """``[(text, Target), …]``: each line of ``path`` (blank lines skipped), its answer and
    against checked as ``--answer``/``--against`` are (:func:`.answers.target_of`).

    Raises:
        InputError: an unreadable file, no example, or the first bad line (named).
    """
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the task file {path}: {getattr(exc, 'strerror', None) or exc}") from None
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path} line {n}"
        ex = _example(line, where)
        try:
            adapter.encode(ex["text"])  # a text longer than the model's positions is refused here, by line
            out.append((ex["text"], target_of(adapter, ex["answer"], ex.get("against"))))
        except InputError as exc:
            raise InputError(f"{where}: {exc}") from None
    if not out:
        raise InputError(f"the task file {path} has no example: one JSON object per line, with text and answer")
    return out
