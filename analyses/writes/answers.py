"""What a logit is read for: one answer token (or a difference of two), checked at the boundary."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from probe.errors import InputError

if TYPE_CHECKING:
    from probe.models.adapter import ModelAdapter

__all__ = ["Target", "answer_token", "target_of"]


@dataclass(frozen=True)
class Target:
    """The logit read: ``answer`` (token id), minus ``against``'s logit when given;
    ``None`` answer: the model's own top prediction at the position."""

    answer: Optional[int] = None
    against: Optional[int] = None

    def describe(self, adapter: ModelAdapter) -> str:
        if self.answer is None:
            return "the model's top prediction"
        said = repr(adapter.tokenizer.decode([self.answer]))
        return said if self.against is None else f"{said} − {adapter.tokenizer.decode([self.against])!r}"


def answer_token(adapter: ModelAdapter, answer: str, what: str = "answer") -> int:
    """The one token id ``answer`` is in ``adapter``'s vocabulary (no special tokens added).

    Raises:
        InputError: empty, several tokens (naming them: give the first alone to score it),
            the tokenizer's unknown token, or an id past the unembedding's rows.
    """
    tok = adapter.tokenizer
    if not answer:
        raise InputError(f"the {what} is empty: give the token whose logit to read, e.g. --{what} ' Paris'")
    ids = tok.encode(answer, add_special_tokens=False)
    pieces = [tok.decode([i]) for i in ids]
    if not ids:
        raise InputError(f"the {what} {answer!r} gives no token: give one token of the model's vocabulary")
    unk = getattr(tok, "unk_token_id", None)
    if unk is not None and unk in ids:
        raise InputError(
            f"the {what} {answer!r} is outside {adapter.name}'s vocabulary (the tokenizer gives "
            f"{tok.unk_token!r}): give a token the model can predict"
        )
    if len(ids) > 1:
        raise InputError(
            f"the {what} {answer!r} is {len(ids)} tokens ({', '.join(map(repr, pieces))}): a logit is read for one "
            f"token; give one, e.g. --{what} {pieces[0]!r} (the first, which the model predicts first)"
        )
    vocab = _vocab_rows(adapter)
    if vocab is not None and ids[0] >= vocab:
        raise InputError(f"the {what} {answer!r} is token {ids[0]}, past the unembedding's {vocab} rows")
    return int(ids[0])


def _vocab_rows(adapter: ModelAdapter) -> Optional[int]:
    head = adapter.model.get_output_embeddings() if hasattr(adapter.model, "get_output_embeddings") else None
    w = getattr(head, "weight", None)
    return None if w is None else int(w.shape[0])


def target_of(adapter: ModelAdapter, answer: Optional[str], against: Optional[str] = None) -> Target:
    """The :class:`Target` of ``--answer`` / ``--against`` (``answer`` None: the top prediction).

    Raises:
        InputError: as :func:`answer_token`; ``against`` without ``answer``; the two the same token.
    """
    if answer is None:
        if against is not None:
            raise InputError("--against needs --answer: the difference is answer − against")
        return Target()
    a = answer_token(adapter, answer)
    if against is None:
        return Target(a)
    b = answer_token(adapter, against, "against")
    if a == b:
        raise InputError(
            f"--against {against!r} is the same token as --answer {answer!r}: their logit difference is 0 "
            "everywhere; give another token (the one the answer competes with)"
        )
    return Target(a, b)
