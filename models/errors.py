"""The error kinds every floor raises: :class:`InputError` and :class:`NotApplicable`.

They live on the lowest floor so that the models' own validators (a model spec, a device,
a head number) can raise them; :mod:`probe.errors` is where the rest of the toolkit and
its users import them from, and says what each kind means.
"""

from __future__ import annotations

__all__ = ["InputError", "NotApplicable"]


class InputError(ValueError):
    """Bad input, found by a validator at the boundary; the message says what to do."""


class NotApplicable(Exception):
    """This analysis or claim does not apply to this input; ``reason`` says why. Its own
    kind, not a ``ValueError``: only a handler that names it turns it into *skipped*."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
