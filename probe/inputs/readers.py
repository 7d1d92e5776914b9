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

import contextlib
import contextvars
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional, Union

from probe.errors import InputError

log = logging.getLogger(__name__)

# ASCII digits only: ``\d`` and ``str.isdigit`` also take '²' and '٣', which ``int`` refuses or reads
_ID = re.compile(r"^([1-9][0-9]*|[1-9][0-9]*-[1-9][0-9]*|[0-9]+\.[1-9][0-9]*)$")
_HEAD_ID = re.compile(r"^[0-9]+$")
_TEXT = re.compile(r"^#\s*text\s*=(.*)$")
#: the columns that may hold a space inside (never at either end): FORM and LEMMA (UD), and
#: MISC, whose values some treebanks write with spaces (GUM: ``XML=<hi rend:::"italic">``)
_SPACED_COLUMNS = (1, 2, 9)
_COLUMNS = ("ID", "FORM", "LEMMA", "UPOS", "XPOS", "FEATS", "HEAD", "DEPREL", "DEPS", "MISC")


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


def read_utf8(path: str | os.PathLike) -> str:
    """The text of a UTF-8 file, without a leading byte-order mark (:func:`strip_bom`).

    Raises:
        InputError: unreadable file, or not UTF-8 (with the byte offset).
    """
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read {p}: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{p} is not UTF-8 (bad byte at offset {exc.start}); convert it with iconv") from None
    return strip_bom(text, str(p))


BOM = "\ufeff"


def strip_bom(text: str, source: str = "text") -> str:
    """``text`` without a leading byte-order mark (U+FEFF), which some editors write at the
    start of UTF-8 files; its removal is logged (a warning naming ``source``). A U+FEFF
    elsewhere is a zero-width no-break space and belongs to the text."""
    if text.startswith(BOM):
        log.warning("%s starts with a byte-order mark (U+FEFF): removed", source)
        return text[1:]
    return text


def read_text_file(path: str | os.PathLike) -> list[str]:
    """Non-blank lines of a UTF-8 text file, one example per line.

    Raises:
        InputError: unreadable file, not UTF-8 (with the byte offset), or no lines.
    """
    p = Path(path)
    text = read_utf8(p)
    lines = [line.strip() for line in _lines(text) if line.strip()]
    if not lines:
        raise InputError(f"{p} is empty: give one sentence per line")
    return lines


@dataclass(frozen=True)
class InvalidSentence:
    """A treebank sentence refused by :func:`check_sentence`: where it is and why."""

    file: str
    line: int
    sent_id: str
    problem: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.problem}"


#: ``None`` = refuse invalid sentences; a list = skip them and append an :class:`InvalidSentence`
#: each. Set for one command by :func:`skipping_invalid` (the CLI's ``--skip-invalid``).
_SKIP_INVALID: contextvars.ContextVar = contextvars.ContextVar("skip_invalid", default=None)


@contextlib.contextmanager
def skipping_invalid(skip: bool = True) -> Iterator[list]:
    """Within the block, :func:`read_conllu` skips invalid sentences (unless told otherwise)
    and collects them in the yielded list."""
    collected: list = []
    token = _SKIP_INVALID.set(collected if skip else None)
    try:
        yield collected
    finally:
        _SKIP_INVALID.reset(token)


_LINE_END = re.compile(r"\r\n|\r|\n")


def _lines(text: str) -> list:
    """Lines split at any of the three line endings, ``\n``, ``\r\n`` and a lone ``\r``
    (old Mac files): the Unicode separators that ``str.splitlines`` also splits at
    (U+2028, U+0085, ``\x1c``…) belong to the text."""
    return _LINE_END.split(text)


def _blocks(text: str) -> Iterator[tuple[int, list[tuple[int, str]]]]:
    """``(first line number, [(line number, line)])`` per blank-line separated block."""
    block, first = [], 0
    for n, line in enumerate(_lines(text), 1):
        if line.strip():
            if not block:
                first = n
            block.append((n, line))
        elif block:
            yield first, block
            block = []
    if block:
        yield first, block


def check_sentence(rows: list) -> Optional[tuple]:
    """The first UD violation of one sentence as ``(line number, problem)``, else ``None``.

    ``rows`` are the block's ``(line number, line)`` pairs. Checked as the UD validator
    requires (de Marneffe et al. 2021, "Universal Dependencies"): 10 tab-separated columns;
    word IDs 1..n in order with no duplicate; multiword ranges ``a-b`` (a < b) placed just
    before word ``a`` and ending at a word; empty nodes ``k.m`` after word ``k``; a non-empty
    FORM; HEAD an integer in 0..n, never the word itself; exactly one root (HEAD 0); every
    word reaches the root (no cycle); IDs and HEAD in ASCII digits; no whitespace in a
    field but inside FORM, LEMMA and MISC; ``# text`` made of the surface forms (spaces aside).
    """
    found = _words_of(rows)
    if isinstance(found, tuple):
        return found
    heads, lines, n_words = found.heads, found.lines, found.n_words
    if not heads:
        return (rows[0][0], "sentence without words") if any(not ln.startswith("#") for _, ln in rows) else None
    if found.range_end > n_words:
        return rows[-1][0], f"multiword range ends at word {found.range_end}, beyond the last word {n_words}"
    problem = _tree_problem(heads, lines, rows[0][0])
    if problem is not None:
        return problem
    if found.text_line is not None:
        mismatch = text_mismatch(found.text_line[1], found.surface)
        if mismatch:
            return found.text_line[0], mismatch
    return None


@dataclass
class _Words:
    """One sentence's words as :func:`_words_of` reads them: each word's HEAD and line
    number, the end of the last multiword range, the surface forms and ``# text``."""

    heads: list[int]
    lines: list[int]
    range_end: int
    n_words: int
    surface: list[str]
    text_line: Optional[tuple[int, str]]


def _words_of(rows: list) -> Union[_Words, tuple[int, str]]:
    """The words of one sentence's ``(line number, line)`` rows, or the first violation of
    the column, ID, range, empty-node, FORM and HEAD-format rules as ``(line, problem)``."""
    heads: list[int] = []
    lines: list[int] = []
    range_end, last_range_end, n_words = 0, 0, 0
    surface: list[str] = []
    text_line: Optional[tuple[int, str]] = None  # (line, # text)
    for n, line in rows:
        if line.startswith("#"):
            m = _TEXT.match(line)
            if m:
                text_line = (n, m.group(1))
            continue
        cols = line.split("\t")
        if len(cols) != 10:
            return n, f"malformed CoNLL-U line: expected 10 tab-separated columns, found {len(cols)}"
        spaced = _spaced_field(cols)
        if spaced:
            return n, spaced
        tid = cols[0]
        if not _ID.match(tid):
            return n, f"malformed CoNLL-U ID {tid!r}"
        if "-" in tid:
            a, b = (int(x) for x in tid.split("-"))
            if not (a == n_words + 1 and b > a and a > last_range_end):
                return n, (
                    f"multiword range {tid} must start at the next word ({n_words + 1}), span at least "
                    "two words and not overlap another range"
                )
            range_end = last_range_end = b
            surface.append(cols[1])
            continue
        if "." in tid:
            k, m = tid.split(".")
            if int(k) != n_words or int(m) < 1:
                return n, f"empty node {tid} must follow word {k} (the last word so far is {n_words})"
            continue
        if int(tid) != n_words + 1:
            kind = "duplicate" if 1 <= int(tid) <= n_words else "out of order"
            return n, f"word ID {tid} is {kind}: expected {n_words + 1} (IDs run 1..n in order)"
        n_words += 1
        if n_words > range_end:  # a word inside a multiword token is not in the surface text
            surface.append(cols[1])
        if not cols[1]:
            return n, f"word {tid} has an empty FORM"
        if not _HEAD_ID.match(cols[6]):
            return n, f"HEAD of word {tid} must be a word number, found {cols[6]!r}"
        heads.append(int(cols[6]))
        lines.append(n)
    return _Words(heads, lines, range_end, n_words, surface, text_line)


def _tree_problem(heads: list[int], lines: list[int], first_line: int) -> Optional[tuple[int, str]]:
    """The first violation of the tree rules (HEAD in range and not the word itself, one
    root, every word reaching it) as ``(line, problem)``, else None; ``heads[k]`` is word
    ``k + 1``'s HEAD, on line ``lines[k]``."""
    n_words = len(heads)
    for k, h in enumerate(heads):
        if h > n_words:
            return lines[k], f"HEAD {h} of word {k + 1} is out of range: the sentence has words 1..{n_words}"
        if h == k + 1:
            return lines[k], f"word {k + 1} is its own head"
    roots = [k for k, h in enumerate(heads) if h == 0]
    if len(roots) != 1:
        where = lines[roots[1]] if roots else first_line
        return where, f"a sentence needs exactly one root (HEAD 0), found {len(roots)}"
    for k in range(n_words):
        seen, j = set(), k
        while heads[j] != 0:
            if j in seen:
                return lines[k], f"word {k + 1} is in a cycle of heads, not reaching the root"
            seen.add(j)
            j = heads[j] - 1
    return None


def _spaced_field(cols: list) -> Optional[str]:
    """The first field with whitespace UD forbids (any in ID, UPOS, XPOS, FEATS, HEAD,
    DEPREL, DEPS; at either end of any field), as a problem, else ``None``: a
    DEPREL ``'nsubj '`` would otherwise count as a relation of its own."""
    for k, value in enumerate(cols):
        if value != value.strip():
            return f"whitespace at an end of the {_COLUMNS[k]} field {value!r} (UD forbids it there)"
        if k not in _SPACED_COLUMNS and any(c.isspace() for c in value):
            return f"whitespace in the {_COLUMNS[k]} field {value!r} (UD allows it inside FORM, LEMMA and MISC only)"
    return None


def text_mismatch(given: str, forms: list) -> Optional[str]:
    """Where ``# text`` and the surface forms disagree once spaces are set aside (UD's
    validator requires them to agree), as a problem, else ``None``. A ``# text`` holding
    words the token lines lack would make the model read tokens that belong to no word."""
    text = "".join(given.split())
    joined = "".join("".join(forms).split())
    if text == joined:
        return None
    k = next((i for i, (a, b) in enumerate(zip(text, joined)) if a != b), min(len(text), len(joined)))
    if k >= len(joined):
        return f"# text goes on after the last word: {text[k : k + 20]!r} is in no token line"
    if k >= len(text):
        return f"# text ends before the words do: {joined[k : k + 20]!r} is in no # text"
    return f"# text and the words differ at {text[k : k + 20]!r} (the words have {joined[k : k + 20]!r})"


def read_conllu(
    path: str | os.PathLike, limit: Optional[int] = None, skip_invalid: Optional[bool] = None
) -> list[Sentence]:
    """Read a CoNLL-U treebank into :class:`Sentence` s, each checked by :func:`check_sentence`
    (the sentences of :func:`read_treebank`).
    """
    return read_treebank(path, limit, skip_invalid)[0]


def read_treebank(
    path: str | os.PathLike, limit: Optional[int] = None, skip_invalid: Optional[bool] = None
) -> tuple[list, list]:
    """``(sentences, invalid)``: the valid :class:`Sentence` s of a CoNLL-U file and the
    :class:`InvalidSentence` s skipped (empty unless ``skip_invalid``).

    Args:
        path: the ``.conllu`` file.
        limit: keep only the first ``limit`` valid sentences (the file is read up to there).
        skip_invalid: skip invalid sentences instead of refusing the file; each is logged and
            added to the list of the enclosing :func:`skipping_invalid` block. ``None``
            (default): as that block says, else ``False``.

    Raises:
        InputError: unreadable or non-UTF-8 file, an invalid sentence (``file:line: problem``)
            unless skipped, or a treebank with no (valid) sentence.
    """
    import conllu

    p = Path(path)
    text = read_utf8(p)
    collected = _SKIP_INVALID.get()
    if skip_invalid is None:
        skip_invalid = collected is not None
    out, invalid = [], []
    for first, rows in _blocks(text):
        if limit is not None and len(out) >= limit:
            break
        problem = check_sentence(rows)
        if problem is None and not any(not ln.startswith("#") for _, ln in rows):
            continue  # comments only
        if problem is None:
            try:
                tl = conllu.parse("\n".join(ln for _, ln in rows) + "\n\n")[0]
                out.append(_sentence(tl, first))
                continue
            except (conllu.exceptions.ParseException, ValueError, IndexError, KeyError) as exc:
                problem = (first, f"malformed CoNLL-U: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
        bad = InvalidSentence(str(p), problem[0], _sent_id(rows), problem[1])
        if not skip_invalid:
            raise InputError(
                f"{bad}; fix the treebank, or pass --skip-invalid to skip such sentences "
                "(they are counted in skipped.csv)"
            )
        invalid.append(bad)
    if invalid:
        log.warning(
            "%s: %d invalid sentence(s) skipped, the first at line %d: %s",
            p,
            len(invalid),
            invalid[0].line,
            invalid[0].problem,
        )
        if collected is not None:
            collected.extend(invalid)
    if not out:
        raise InputError(
            f"{p} holds no sentence" + (f" that is valid ({len(invalid)} invalid skipped)" if invalid else "")
        )
    return out, invalid


def _sent_id(rows: list[tuple[int, str]]) -> str:
    for _, line in rows:
        if line.startswith("# sent_id") and "=" in line:
            return line.split("=", 1)[1].strip()
    return ""


_SKIPPED_HEADER = ["index", "sent_id", "line", "reason"]


def write_skipped_csv(invalid: list, path: str | os.PathLike) -> Path:
    """List skipped sentences as ``index, sent_id, line, reason`` rows (the columns of the
    syntax report's skipped.csv; ``index`` is empty: the sentence was never read). Rows are
    appended when ``path`` already holds such a table; returns the path written."""
    import csv

    path = Path(path)
    header = ",".join(_SKIPPED_HEADER)
    append = path.is_file() and path.read_text(encoding="utf-8").split("\n", 1)[0].strip() == header
    if path.exists() and not append:
        path = path.with_name(path.stem + "-invalid.csv")
    with open(path, "a" if append else "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        if not append:
            w.writerow(_SKIPPED_HEADER)
        for bad in invalid:
            w.writerow(["", bad.sent_id, bad.line, f"invalid CoNLL-U ({bad.file}): {bad.problem}"])
    return path


def _sentence(tl: Any, line: int) -> Sentence:
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
    return Sentence(
        text=given,
        words=tuple(words),
        spans=tuple(spans),
        heads=tuple(heads),
        deprels=tuple(deprels),
        upos=tuple(upos),
        misc=tuple(misc),
        feats=tuple(feats),
        sent_id=tl.metadata.get("sent_id", ""),
        line=line,
        meta={k: v for k, v in tl.metadata.items() if k not in ("text",)},
    )


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
