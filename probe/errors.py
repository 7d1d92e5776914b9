"""Error kinds of the toolkit."""

from __future__ import annotations


class InputError(ValueError):
    """Bad input found by a validator at the boundary (a file, an option, a model folder).

    Raised only by validators; the CLI prints its message as one ``Error:`` line and exits
    with status 1. A ``ValueError`` so that callers catching ``ValueError`` keep working.
    """
