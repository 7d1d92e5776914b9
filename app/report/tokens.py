"""Readable tokens for every view, table and figure: tokenizer pieces as a person reads them.

Tokenizers store pieces in their own alphabets. GPT-2-style byte-level BPE (Radford et al.
2019) maps every byte to a printable character, so ``" A"`` is stored as ``ĠA`` and a
Japanese character as two or three pieces like ``ãģ``; SentencePiece (Kudo & Richardson
2018) marks a word start with ``▁``; WordPiece (BERT) marks a continuation with ``##``,
which already reads well and is kept. :func:`display_tokens` turns one example's pieces
into text: the bytes decoded, a leading space shown as ``␣`` (so ``ĠA`` → ``␣A``,
``▁the`` → ``␣the``), newlines and tabs as ``↵`` and ``⇥``, special tokens as they are.
A character split over pieces shows whole in the piece holding its first byte, and a
piece holding only its rest shows ``…``.

:func:`positioned` adds the token's position where the same text occurs more than once in
the example (``the(3)``), so a ranking can tell the three ``the`` apart.

Pure functions: the raw pieces stay in the maps (and in every CSV); only what is shown
changes.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Iterable, Optional, Sequence

SPACE = "␣"
_CONTROL = {"\n": "↵", "\t": "⇥", "\r": "↵"}


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """The inverse of GPT-2's ``bytes_to_unicode``: piece character → byte."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars = printable[:]
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(printable, chars)}


def _is_byte_level(pieces: Sequence[str]) -> bool:
    """True when every piece is spelled in the byte-level alphabet, some piece uses a
    character outside ASCII from it (``Ġ``, ``Ċ``, ``ã``…), and the bytes form valid UTF-8
    together. A WordPiece example with ``São`` fails the last test (``ã`` alone is not
    UTF-8), an ASCII-only one decodes to itself either way."""
    dec = _byte_decoder()
    text = "".join(pieces)
    if not text or any(ch not in dec for ch in text) or all(ord(ch) < 128 for ch in text):
        return False
    try:
        bytes(dec[ch] for ch in text).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _show_spaces(text: str) -> str:
    for raw, shown in _CONTROL.items():
        text = text.replace(raw, shown)
    if text.startswith(" ") and len(text) > 1:
        text = SPACE + text[1:]
    elif text == " ":
        text = SPACE
    return text


def _decode_pieces(pieces: Sequence[str]) -> list[str]:
    """Each piece's text in a byte-level example whose bytes are valid UTF-8 together. A
    character split over pieces is shown whole in the piece holding its first byte; a piece
    holding only the rest of one shows ``…``."""
    dec = _byte_decoder()
    raw = [bytes(dec[ch] for ch in p) for p in pieces]
    text = b"".join(raw).decode("utf-8")
    owner, b = [], 0  # owner[k]: the piece holding character k's first byte
    ends = []
    for r in raw:
        b += len(r)
        ends.append(b)
    piece, pos = 0, 0
    for ch in text:
        while piece < len(ends) - 1 and pos >= ends[piece]:
            piece += 1
        owner.append(piece)
        pos += len(ch.encode("utf-8"))
    out = ["" for _ in pieces]
    for ch, k in zip(text, owner):
        out[k] += ch
    return [_show_spaces(s) if s else ("…" if r else "") for s, r in zip(out, raw)]


def display_tokens(tokens: Iterable[object], special: Optional[Sequence[bool]] = None) -> list[str]:
    """One example's tokens as text to show, same length and order as ``tokens``.

    Args:
        tokens: the tokenizer's pieces (``AttentionMaps.tokens``).
        special: per token, True for special tokens, left unchanged (default: spelled like
            one: ``[CLS]``, ``<s>``, ``<|endoftext|>``).
    """
    from .style import is_special_token

    pieces = [str(t) for t in tokens]
    special = list(special) if special is not None else [is_special_token(p) for p in pieces]
    words = [p for p, s in zip(pieces, special) if not s]
    if _is_byte_level(words):
        decoded = iter(_decode_pieces(words))
        return [p if s else next(decoded) for p, s in zip(pieces, special)]
    out = []
    for p, s in zip(pieces, special):
        if s:
            out.append(p)
        elif p.startswith("▁"):  # SentencePiece word start
            out.append(_show_spaces(" " + p[1:]) if len(p) > 1 else SPACE)
        else:
            out.append(_show_spaces(p))
    return out


def positioned(shown: Sequence[str]) -> list[str]:
    """``shown`` with ``(position)`` after each text that occurs more than once: the key a
    reader needs where an example repeats a word (``the(0)``, ``the(3)``). Leading-space
    markers do not make two tokens different (``the`` and ``␣the`` count as one text)."""
    keys = [s.lstrip(SPACE).lower() for s in shown]
    counts: dict[str, int] = {}
    for k in keys:
        counts[k] = counts.get(k, 0) + 1
    return [f"{s}({i})" if counts[k] > 1 else s for i, (s, k) in enumerate(zip(shown, keys))]


def maps_display_tokens(maps: Any, query: bool = False) -> list[str]:
    """:func:`display_tokens` of an ``AttentionMaps``' key tokens (``query=True``: its query
    tokens, for cross-attention)."""
    if query and maps.query_tokens is not None:
        tokens, mask = maps.query_tokens, maps.query_special_mask
    else:
        tokens, mask = maps.tokens, maps.special_mask
    special = [bool(x) for x in mask.tolist()] if mask is not None else None
    return display_tokens(tokens, special)
