"""Input corpora: plain text files and CoNLL-U treebanks.

:func:`read_conllu` reads a treebank with the ``conllu`` library into
:class:`Sentence` s whose words carry character spans in the sentence text, so that
UD's own tokenization maps onto any model's subword tokens through character offsets
(:meth:`models.ModelAdapter.encode` with ``word_spans``).

* Multiword tokens (``1-2  don't``) give the surface text; their syntactic words get
  spans inside the surface form (located by their FORM when it matches, else an even
  split of the surface span).
* Empty nodes (``8.1``) are skipped: they have no surface form.
* The text is ``# text`` when every surface form can be found in it in order;
  otherwise it is rebuilt from FORM and ``SpaceAfter=No``.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

_ID = re.compile(r"^(\d+|\d+-\d+|\d+\.\d+)$")


@dataclass(frozen=True)
class Sentence:
    """One treebank sentence; word lists are parallel, indexed from 0.

    ``heads`` are UD heads (1-based word numbers, 0 = root); ``feats`` holds each
    word's morphological features as a dict (``{"Number": "Plur"}``); ``misc`` each
    word's MISC field as a dict (GUM's ``Entity=`` coreference annotation lives there).
    """

    text: str
    words: tuple
    spans: tuple
    heads: tuple
    deprels: tuple
    upos: tuple
    misc: tuple
    sent_id: str = ""
    feats: tuple = ()
    line: int = 0
    meta: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.words)


def read_utf8(path) -> str:
    """The text of a UTF-8 file.

    Raises:
        ValueError: unreadable file, or not UTF-8 (with the byte offset).
    """
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read {p}: {exc.strerror}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{p} is not UTF-8 (bad byte at offset {exc.start}); convert it with iconv") from None


def read_text_file(path) -> list[str]:
    """Non-blank lines of a UTF-8 text file, one example per line.

    Raises:
        ValueError: unreadable file, not UTF-8 (with the byte offset), or no lines.
    """
    p = Path(path)
    text = read_utf8(p)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        raise ValueError(f"{p} is empty: give one sentence per line")
    return lines


def _validate(text: str, path: str) -> None:
    """Check the CoNLL-U shape line by line; raise ``ValueError`` with ``file:line``."""
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        cols = line.split("\t")
        if len(cols) != 10:
            raise ValueError(f"{path}:{n}: malformed CoNLL-U line: expected 10 tab-separated "
                             f"columns, found {len(cols)}")
        if not _ID.match(cols[0]):
            raise ValueError(f"{path}:{n}: malformed CoNLL-U ID {cols[0]!r}")
        if "-" not in cols[0] and "." not in cols[0] and not cols[6].isdigit():
            raise ValueError(f"{path}:{n}: HEAD must be a word number, found {cols[6]!r}")


def read_conllu(path, limit: Optional[int] = None) -> list[Sentence]:
    """Read a CoNLL-U treebank into :class:`Sentence` s.

    Args:
        path: the ``.conllu`` file.
        limit: keep only the first ``limit`` sentences.

    Raises:
        ValueError: unreadable or non-UTF-8 file, malformed line (``file:line``), or a
            treebank with no sentence.
    """
    import conllu

    p = Path(path)
    text = read_utf8(p)
    _validate(text, str(p))
    start_lines = _sentence_start_lines(text)
    out = []
    try:
        for k, tl in enumerate(conllu.parse_incr(io.StringIO(text))):
            if limit is not None and len(out) >= limit:
                break
            out.append(_sentence(tl, start_lines[k] if k < len(start_lines) else 0))
    except conllu.exceptions.ParseException as exc:
        raise ValueError(f"{p}: malformed CoNLL-U: {exc}") from None
    if not out:
        raise ValueError(f"{p} holds no sentence")
    return out


def _sentence_start_lines(text: str) -> list[int]:
    starts, in_block = [], False
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            if not in_block:
                starts.append(n)
                in_block = True
        else:
            in_block = False
    return starts


def _sentence(tl, line: int) -> Sentence:
    surface = []  # (form, space_after, [word indices])
    words, heads, deprels, upos, misc, feats = [], [], [], [], [], []
    pending_range = None
    for tok in tl:
        tid = tok["id"]
        if isinstance(tid, tuple) and tid[1] == ".":
            continue  # empty node
        m = tok["misc"] or {}
        if isinstance(tid, tuple) and tid[1] == "-":
            pending_range = (tid[0], tid[2])
            surface.append([tok["form"], m.get("SpaceAfter") != "No", []])
            continue
        idx = len(words)
        words.append(tok["form"])
        heads.append(int(tok["head"]) if tok["head"] is not None else 0)
        deprels.append(tok["deprel"] or "_")
        upos.append(tok["upos"] or "_")
        misc.append(dict(m))
        feats.append(dict(tok["feats"] or {}))
        if pending_range and pending_range[0] <= tid <= pending_range[1]:
            surface[-1][2].append(idx)
            if tid == pending_range[1]:
                pending_range = None
        else:
            surface.append([tok["form"], m.get("SpaceAfter") != "No", [idx]])
    given = tl.metadata.get("text")
    surf_spans = _locate(given, [s[0] for s in surface]) if given else None
    if surf_spans is None:
        parts, surf_spans, pos = [], [], 0
        for form, space, _ in surface:
            surf_spans.append((pos, pos + len(form)))
            parts.append(form + (" " if space else ""))
            pos += len(form) + (1 if space else 0)
        given = "".join(parts).rstrip()
    spans = [None] * len(words)
    for (form, _, idxs), (s, e) in zip(surface, surf_spans):
        if len(idxs) == 1:
            spans[idxs[0]] = (s, e)
        else:
            spans_in = _split_surface(form, [words[i] for i in idxs], s)
            for i, sp in zip(idxs, spans_in):
                spans[i] = sp
    return Sentence(text=given, words=tuple(words), spans=tuple(spans), heads=tuple(heads),
                    deprels=tuple(deprels), upos=tuple(upos), misc=tuple(misc), feats=tuple(feats),
                    sent_id=tl.metadata.get("sent_id", ""), line=line,
                    meta={k: v for k, v in tl.metadata.items() if k not in ("text",)})


def _locate(text: str, forms: list) -> Optional[list]:
    """Spans of ``forms`` found in order in ``text``; ``None`` if one is missing."""
    spans, pos = [], 0
    for f in forms:
        i = text.find(f, pos)
        if i < 0 or text[pos:i].strip():
            return None
        spans.append((i, i + len(f)))
        pos = i + len(f)
    return spans


def _split_surface(form: str, parts: list, offset: int) -> list:
    """Spans of a multiword token's words inside its surface form."""
    found = _locate(form.lower(), [p.lower() for p in parts])
    if found is not None and found[-1][1] <= len(form):
        return [(offset + s, offset + e) for s, e in found]
    n = len(parts)
    cuts = [round(k * len(form) / n) for k in range(n + 1)]
    return [(offset + cuts[k], offset + max(cuts[k + 1], cuts[k] + 1)) for k in range(n)]
