"""Errors by kind: bad input, an analysis that does not apply, and everything else (a bug).

* :class:`InputError` — raised by the validators at the boundary (option values, files,
  texts, head and layer numbers): the command line prints its message as one ``Error:``
  line and exits 1. It subclasses ``ValueError`` so that code written against the old
  contract (``except ValueError`` around a validator, ``pytest.raises(ValueError)``) keeps
  working; new code catches ``InputError`` only.
* :class:`NotApplicable` — "this analysis (or claim) does not apply to this input", with
  its ``reason``: the only source of a report section's *skipped* and of a claim's *not
  tested*. It too subclasses ``ValueError`` (analyses raised ``ValueError`` for it before);
  the report and the claims catch ``NotApplicable`` by name, and the architecture test
  allows no handler that turns a plain ``ValueError`` into a status.
* anything else is a bug: the report marks the section *failed* with the exception's type,
  the command line exits 3 and says to rerun with ``--verbose``.

:func:`is_input_error` is the command line's one classification. A plain ``ValueError``
raised by the toolkit's own code (its innermost frame in one of the toolkit's folders) is
still taken as bad input: the toolkit's validators raise ``ValueError`` with a message
written for the user, and are being moved to :class:`InputError`; a ``ValueError`` raised
inside numpy, pandas, torch or any other library is a bug.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["InputError", "NotApplicable", "is_input_error", "raised_by_toolkit"]

#: the toolkit's folders (the floors): models/, probe/, analyses/, app/
_ROOTS = tuple(str(Path(__file__).resolve().parents[1] / floor) for floor in ("models", "probe", "analyses", "app"))
#: errors of the file system a user's path names: bad input, not bugs
_FILE_ERRORS = (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError)


class InputError(ValueError):
    """Bad input, found by a validator at the boundary; the message says what to do."""


class NotApplicable(ValueError):
    """This analysis or claim does not apply to this input; ``reason`` says why."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def raised_by_toolkit(exc: BaseException) -> bool:
    """True when the innermost frame of ``exc``'s traceback is in the toolkit's own code."""
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    return str(Path(tb.tb_frame.f_code.co_filename).resolve()).startswith(_ROOTS)


def is_input_error(exc: BaseException) -> bool:
    """Whether the command line reports ``exc`` as bad input (exit 1) rather than a bug (exit 3)."""
    import json

    if isinstance(exc, (InputError, NotApplicable, UnicodeError, json.JSONDecodeError) + _FILE_ERRORS):
        return True  # a user's file that is not text / not JSON is bad input too
    return isinstance(exc, ValueError) and raised_by_toolkit(exc)
