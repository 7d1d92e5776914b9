"""Coreference mentions from CorefUD ``Entity=`` annotations (GUM's MISC column).

CorefUD writes mention brackets into MISC: ``Entity=(12-person-new-...-coref`` opens a
mention of entity 12 at this word, ``12)`` closes it, ``(12-...)`` is a one-word mention;
several brackets are concatenated (``Entity=(3-abstract-...)(7-place-...``, ``7)3)``). The
first field of an opening bracket is the entity id, the second its type (GUM's header
``# global.Entity = GRP-etype-infstat-...``).

The *head* of a mention is its syntactic head: the first word of the span whose gold head
lies outside the span (for the usual connected spans, the one such word).

:func:`read_number` reads the ``Number`` feature of every word, which
:class:`probe.inputs.readers.Sentence` does not keep (used by the number-agreement baseline).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

from probe.errors import InputError

if TYPE_CHECKING:
    import io
    import os

    from probe.inputs.readers import Sentence

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Mention:
    """A mention: words ``start..end`` (inclusive, 0-based in its sentence), its head
    word, entity id and entity type."""

    start: int
    end: int
    head: int
    entity: str
    etype: str = ""


def parse_entity_field(value: str, position: int, open_stack: list, where: str = "") -> list:
    """Parse one word's ``Entity=`` value.

    Args:
        value: the value after ``Entity=``.
        position: the word's index in its sentence.
        open_stack: mentions still open, as ``[entity, etype, start]`` lists; updated in place.
        where: ``file:line`` for messages.

    Returns:
        ``(entity, etype, start, end)`` of the mentions closed at this word.

    Raises:
        ValueError: an unbalanced bracket (a closing bracket without an open mention).
    """
    closed, i, n = [], 0, len(value)
    while i < n:
        if value[i] == "(":
            j = i + 1
            while j < n and value[j] not in "()":
                j += 1
            fields = value[i + 1 : j].split("-")
            entity, etype = fields[0], fields[1] if len(fields) > 1 else ""
            if j < n and value[j] == ")":
                closed.append((entity, etype, position, position))
                j += 1
            else:
                open_stack.append([entity, etype, position])
            i = j
        elif value[i] == ")":
            i += 1  # stray bracket
        else:
            j = value.find(")", i)
            if j < 0:
                raise InputError(
                    f"{where}: malformed Entity annotation {value!r}: {value[i:]!r} is not closed with ')'"
                )
            entity = value[i:j]
            for k in range(len(open_stack) - 1, -1, -1):
                if open_stack[k][0] == entity:
                    e, t, start = open_stack.pop(k)
                    closed.append((e, t, start, position))
                    break
            else:
                raise InputError(f"{where}: Entity annotation closes mention {entity!r} that was never opened")
            i = j + 1
    return closed


def mention_head(heads: Sequence[int], start: int, end: int) -> int:
    """Syntactic head of the span ``start..end``: the first word whose (1-based) gold head
    lies outside the span; ``start`` when none does."""
    for w in range(start, end + 1):
        h = heads[w] - 1
        if not start <= h <= end:
            return w
    return start


def sentence_mentions(sentence: Sentence) -> list[Mention]:
    """The mentions of one sentence, sorted by start then end.

    Mentions still open at the end of the sentence (none in CorefUD, whose mentions stay
    inside a sentence) are dropped with a warning.

    Raises:
        ValueError: unbalanced brackets (with ``sent_id`` and line).
    """
    where = f"sentence {sentence.sent_id or '?'} (line {sentence.line})"
    stack, out = [], []
    for w, misc in enumerate(sentence.misc):
        value = (misc or {}).get("Entity")
        if not value:
            continue
        for entity, etype, start, end in parse_entity_field(value, w, stack, where):
            out.append(Mention(start, end, mention_head(sentence.heads, start, end), entity, etype))
    if stack:
        log.warning("%s: %d mention(s) not closed inside the sentence ignored", where, len(stack))
    return sorted(out, key=lambda m: (m.start, m.end))


def read_number(path: str | os.PathLike, limit: Optional[int] = None) -> list[tuple]:
    """The ``Number`` feature (``Sing``/``Plur``/``""``) of every syntactic word of every
    sentence of a CoNLL-U file, parallel to :func:`probe.inputs.readers.read_conllu` (multiword
    token lines and empty nodes skipped).

    Raises:
        ValueError: unreadable file.
    """
    import conllu

    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {path}: {exc}") from None
    out = []
    for tl in conllu.parse_incr(_lines(text)):
        if limit is not None and len(out) >= limit:
            break
        out.append(tuple((tok["feats"] or {}).get("Number", "") for tok in tl if isinstance(tok["id"], int)))
    return out


def _lines(text: str) -> io.StringIO:
    import io

    return io.StringIO(text)
