"""What a command runs on: a :class:`Corpus` from text, a file, a treebank or a zoo task.

Every command that takes a model and an input uses :func:`load_corpus`; given a zoo
model and no input, the zoo task's own generated evaluation set is used.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Optional, Sequence

from probe.errors import InputError

from probe.inputs.readers import Sentence, read_text_file, read_treebank

if TYPE_CHECKING:
    from probe.models.adapter import ModelAdapter

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Corpus:
    """Texts with optional treebank words and targets, all parallel.

    Attributes:
        texts: one string per example.
        word_spans: per example, ``(start, end)`` character spans of its words, or
            ``None`` (then words are split from the text).
        sentences: the treebank sentences (CoNLL-U input), else ``()``.
        targets: target texts for encoder-decoder models, else ``None``.
        source: a short description (``"text"``, a path, ``"zoo:<task> eval set"``).
        examples: zoo examples with their ground truth, else ``()``.
        skipped: ``{reason: count}`` of examples left out.
        unknown: per example, how many of its tokens are the tokenizer's unknown token
            (``[UNK]``: characters the vocabulary lacks, such as emoji, or a word beyond the
            tokenizer's word-length limit), once :func:`fit_to_model` counted them; else ``()``.
    """

    texts: tuple
    word_spans: Optional[tuple] = None
    sentences: tuple = ()
    targets: Optional[tuple] = None
    source: str = ""
    examples: tuple = ()
    skipped: dict = field(default_factory=dict)
    unknown: tuple = ()

    def __len__(self) -> int:
        return len(self.texts)

    def subset(self, keep: Sequence[int], reason: str = "") -> "Corpus":
        """The examples at indices ``keep``; the others are counted under ``reason``."""
        keep = list(keep)
        pick = lambda xs: tuple(xs[i] for i in keep) if xs else xs  # noqa: E731
        skipped = dict(self.skipped)
        if reason and len(keep) < len(self.texts):
            skipped[reason] = skipped.get(reason, 0) + len(self.texts) - len(keep)
        return Corpus(
            texts=pick(self.texts),
            word_spans=pick(self.word_spans) if self.word_spans else None,
            sentences=pick(self.sentences),
            targets=pick(self.targets) if self.targets else None,
            source=self.source,
            examples=pick(self.examples),
            skipped=skipped,
            unknown=pick(self.unknown),
        )


def from_sentences(sentences: Sequence[Sentence], source: str = "") -> Corpus:
    """A corpus of treebank sentences: their texts, word spans and the sentences themselves."""
    return Corpus(
        texts=tuple(s.text for s in sentences),
        word_spans=tuple(s.spans for s in sentences),
        sentences=tuple(sentences),
        source=source,
    )


def load_corpus(
    text: Optional[Sequence[str]] = None,
    file: Optional[str] = None,
    conllu: Optional[str] = None,
    limit: Optional[int] = None,
    model: Optional[str] = None,
    skip_invalid: Optional[bool] = None,
) -> Corpus:
    """Build the corpus a command runs on from exactly one input source.

    With no input and a ``zoo:<task>`` model, the task's generated evaluation set.
    ``skip_invalid`` skips invalid treebank sentences (counted in ``skipped``) instead of
    refusing the file; ``None`` follows :func:`probe.inputs.readers.skipping_invalid`.

    Raises:
        ValueError: several inputs or none, empty input, unreadable or malformed files,
            a non-positive limit.
    """
    given = [x for x in (text, file, conllu) if x]
    if len(given) > 1:
        raise InputError("give one input: --text, --file or --conllu, not several")
    if limit is not None and limit < 1:
        raise InputError(f"--limit must be a positive number of examples, got {limit}")
    if text:
        texts = [t for t in text if t and t.strip()]
        if not texts:
            raise InputError("empty input text: give at least one non-blank sentence")
        corpus = Corpus(texts=tuple(texts[:limit] if limit else texts), source="text")
    elif file:
        lines = read_text_file(file)
        corpus = Corpus(texts=tuple(lines[:limit] if limit else lines), source=str(file))
    elif conllu:
        sentences, invalid = read_treebank(conllu, limit=limit, skip_invalid=skip_invalid)
        corpus = from_sentences(sentences, source=str(conllu))
        if invalid:
            corpus = Corpus(
                texts=corpus.texts,
                word_spans=corpus.word_spans,
                sentences=corpus.sentences,
                source=corpus.source,
                skipped={"invalid CoNLL-U": len(invalid)},
            )
    elif model and model.startswith("zoo:"):
        from probe.models import zoo

        examples = zoo.eval_examples(model.split(":", 1)[1])
        if limit:
            examples = examples[:limit]
        targets = tuple(e["target_text"] for e in examples) if examples and "target_text" in examples[0] else None
        corpus = Corpus(
            texts=tuple(e["text"] for e in examples),
            targets=targets,
            source=f"{model} evaluation set",
            examples=tuple(examples),
        )
    else:
        raise InputError(
            "no input: give --text, --file or --conllu (a zoo model uses its own evaluation set when given none)"
        )
    return corpus


def fit_to_model(corpus: Corpus, adapter: ModelAdapter, allow_empty: bool = False) -> Corpus:
    """Drop examples longer than the model's limit, counting them in ``skipped``.

    Uses one batched tokenizer call (no model forward).

    Raises:
        ValueError: every example is too long (naming the limit), unless ``allow_empty``.
    """
    if not len(corpus):
        return corpus
    enc = adapter.tokenizer(list(corpus.texts), add_special_tokens=True, return_offsets_mapping=True)
    counts, notes = unknown_tokens(corpus.texts, enc["input_ids"], enc["offset_mapping"], adapter.tokenizer)
    if corpus.word_spans:
        notes += spanning_notes(corpus, enc, adapter.tokenizer)
    for line in notes:
        log.warning("%s", line)
    corpus = dataclasses.replace(corpus, unknown=tuple(counts))
    keep = [i for i, ids in enumerate(enc["input_ids"]) if len(ids) <= adapter.max_length]
    if len(keep) < len(corpus):
        log.warning("%d examples longer than %d tokens skipped", len(corpus) - len(keep), adapter.max_length)
    if not keep and not allow_empty:
        raise InputError(_all_too_long(len(corpus), adapter))
    return corpus.subset(keep, reason=f"longer than {adapter.max_length} tokens")


def fit_pairs(clean: Corpus, corrupted: Corpus, adapter: ModelAdapter) -> tuple[Corpus, Corpus]:
    """Drop the pairs (clean[i], corrupted[i]) in which either text is longer than the
    model's limit, counting them in ``skipped`` of both; the pairing is kept.

    Raises:
        ValueError: the two corpora differ in length, or every pair has a text too long.
    """
    if len(clean) != len(corrupted):
        raise InputError(
            f"{len(clean)} clean and {len(corrupted)} corrupted inputs: give one corrupted input "
            "per clean one, in the same order"
        )
    limit = adapter.max_length
    keep = [
        i
        for i, (a, b) in enumerate(zip(token_lengths(clean.texts, adapter), token_lengths(corrupted.texts, adapter)))
        if a <= limit and b <= limit
    ]
    if not keep:
        raise InputError(_all_too_long(len(clean), adapter, "pair(s) hold a text"))
    if len(keep) < len(clean):
        log.warning("%d pairs with a text longer than %d tokens skipped", len(clean) - len(keep), limit)
    reason = f"pair with a text longer than {limit} tokens"
    return clean.subset(keep, reason=reason), corrupted.subset(keep, reason=reason)


def spanning_notes(corpus: Corpus, enc: Any, tokenizer: Any) -> list:
    """A line for people when some tokens span two treebank words (two words written without
    a space, one subword piece across their border): how many, in how many examples, the
    first one, and the rule that assigns it (:func:`probe.models.alignment.spanning_tokens`)."""
    from probe.models.alignment import spanning_tokens

    special = set(special_token_ids(tokenizer))
    word_spans = corpus.word_spans or ()
    found = []
    for k, (ids, offsets) in enumerate(zip(enc["input_ids"], enc["offset_mapping"])):
        spans = word_spans[k]
        hits = spanning_tokens(offsets, [t in special for t in ids], spans)
        found.extend((k, j) for j in hits)
    if not found:
        return []
    k, j = found[0]
    s, e = enc["offset_mapping"][k][j]
    words = [corpus.texts[k][a:b] for a, b in word_spans[k] if a < e and s < b]
    n_ex = len({k for k, _ in found})
    return [
        f"{len(found)} token(s) in {n_ex} of {len(corpus)} examples span two words written without a space "
        f"(e.g. example {k}: {corpus.texts[k][s:e]!r} over {' + '.join(map(repr, words))}): each is given the "
        "word it overlaps most (the first on ties); a word left without a token of its own shares it "
        "(absorbed_words in the store)"
    ]


#: a word longer than this many characters is named in the notes when it becomes ``[UNK]``
LONG_WORD = 100


def unknown_tokens(
    texts: Sequence[str], ids: Sequence[Sequence[int]], offsets: Sequence[Sequence[tuple]], tokenizer: Any
) -> tuple[list, list]:
    """``(counts, notes)``: per text, how many tokens are the tokenizer's unknown token
    (``tokenizer.unk_token_id``; none when it has none), and lines for people: how many
    examples hold such tokens, the first ones with the characters each stands for, and every
    word longer than :data:`LONG_WORD` characters that became one unknown token (WordPiece
    gives ``[UNK]`` to any word past its ``max_input_chars_per_word``)."""
    unk = getattr(tokenizer, "unk_token_id", None)
    name = getattr(tokenizer, "unk_token", None) or "[UNK]"
    counts, spans = [], []
    for k, row in enumerate(ids):
        hits = [j for j, t in enumerate(row) if unk is not None and t == unk]
        counts.append(len(hits))
        spans.extend((k, tuple(offsets[k][j])) for j in hits)
    notes = []
    if spans:
        hit = [k for k, n in enumerate(counts) if n]
        shown = ", ".join(f"example {k}: {_shown(texts[k][a:b])}" for k, (a, b) in spans[:3])
        notes.append(
            f"{len(hit)} of {len(texts)} examples hold {name} tokens ({sum(counts)} in all; characters "
            f"the vocabulary lacks, e.g. {shown}): their attention is to a placeholder"
        )
        for k, (a, b) in spans:
            if b - a > LONG_WORD:
                notes.append(f"example {k}: a word of {b - a:,} characters became one {name} token")
    return counts, notes


def _shown(piece: str) -> str:
    return repr(piece) if len(piece) <= 20 else f"{piece[:8]!r}… ({len(piece):,} characters)"


def special_token_ids(tokenizer: Any) -> list:
    """Ids of the tokenizer's special tokens that mark structure ([CLS], [SEP], padding…),
    without the unknown token: an ``[UNK]`` stands for input text (an emoji, a rare
    character) and is counted, not hidden, as a special token would be."""
    unk = getattr(tokenizer, "unk_token_id", None)
    return sorted({i for i in (getattr(tokenizer, "all_special_ids", None) or []) if i != unk})


def token_lengths(texts: Iterable[str], adapter: ModelAdapter) -> list:
    """Each text's token count with the model's tokenizer, special tokens included (one
    batched tokenizer call, no model forward)."""
    return [len(ids) for ids in adapter.tokenizer(list(texts), add_special_tokens=True)["input_ids"]]


def _all_too_long(n: int, adapter: ModelAdapter, what: str = "input(s) are") -> str:
    return (
        f"all {n} {what} longer than {adapter.name}'s limit of {adapter.max_length} tokens: "
        "shorten or split them (one sentence per line)"
    )
