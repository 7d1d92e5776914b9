"""Refuse a bad command line before the slow part: the checks every command runs on its
options before torch or transformers is imported and before any model is loaded.

A refused model name, an unreadable input file or a non-empty ``--out`` answers in the time
``probe --help`` takes, not after seconds of imports (``tests/test_preflight.py`` holds each
class of refusal to that: torch is not imported when it is refused). What needs the model
(a head or layer out of its range) is checked when the model is there, before any forward.
"""

from __future__ import annotations

from typing import Iterable, Optional

from probe.errors import InputError


def check_readable(path: str) -> None:
    """Refuse a path that cannot be read as an input file, as the corpus reader would.

    Raises:
        InputError: ``cannot read <path>: <reason>``.
    """
    try:
        with open(path, "rb") as fh:
            fh.read(1)
    except IsADirectoryError:
        raise InputError(f"cannot read {path}: it is a directory; give a file") from None
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror}") from None


def preflight(model: Optional[str] = None, paths: Iterable[Optional[str]] = ()) -> None:
    """Check the model spec (:func:`probe.models.model_names.check_spec`) and each input
    path given, importing neither torch nor transformers.

    Raises:
        InputError: the first problem, in one line.
    """
    for path in paths:
        if path:
            check_readable(path)
    if model is not None:
        from probe.models.model_names import check_spec

        check_spec(model)
