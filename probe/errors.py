"""Errors by kind: bad input, an analysis that does not apply, and everything else (a bug).

* :class:`InputError` — raised by the validators at the boundary (option values, files,
  texts, head and layer numbers): the command line prints its message as one ``Error:``
  line and exits 1. It subclasses ``ValueError`` so that code written against the old
  contract (``except ValueError`` around a validator, ``pytest.raises(ValueError)``) keeps
  working; new code catches ``InputError`` only.
* :class:`NotApplicable` — "this analysis (or claim) does not apply to this input", with
  its ``reason``: the only source of a report section's *skipped* and of a claim's *not
  tested*. It is its own exception (not a ``ValueError``): the report, the claims and the
  command line catch ``NotApplicable`` by name, and the architecture test allows no handler
  that turns a plain ``ValueError`` into a status.
* anything else is a bug: the report marks the section *failed* with the exception's type,
  the command line exits 3 and says to rerun with ``--verbose``.

:func:`is_input_error` is the command line's one classification, by type only: a plain
``ValueError`` is a bug wherever it was raised (numpy, pandas, torch or the toolkit's own
code); the toolkit's validators raise :class:`InputError`, and its refusals of a model or
input an analysis does not fit raise :class:`NotApplicable`. The two classes are defined
on the lowest floor (:mod:`probe.models.errors`), so that the models' validators raise
them too.
"""

from __future__ import annotations

from probe.models.errors import InputError, NotApplicable

__all__ = ["InputError", "NotApplicable", "is_input_error"]

#: errors of the file system a user's path names: bad input, not bugs
_FILE_ERRORS = (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError)


def is_input_error(exc: BaseException) -> bool:
    """Whether the command line reports ``exc`` as bad input (exit 1) rather than a bug (exit 3)."""
    import json

    # a user's file that is not text / not JSON is bad input too; a plain ValueError is a
    # bug wherever it was raised (numpy's, pandas' and the toolkit's own alike)
    return isinstance(exc, (InputError, NotApplicable, UnicodeError, json.JSONDecodeError) + _FILE_ERRORS)
