"""Cross-attention as word alignment, scored by alignment error rate (Och & Ney 2003).

Attention as soft alignment is the reading of Bahdanau et al. (2014/2015, additive
attention) that Vaswani et al. (2017) carry over to encoder–decoder cross-attention. A
head's *predicted* alignment links every target word to the source word it attends to
most; the gold alignment holds *sure* links only, so with P = S the alignment error rate
of Och & Ney (2003, "A Systematic Comparison of Various Statistical Alignment Models") is

    AER = 1 − (|A∩S| + |A∩P|) / (|A| + |S|) = 1 − 2·|A∩S| / (|A| + |S|),

counted over the whole corpus (links summed over sentences, then one ratio).

Row convention (see :func:`probe.runs.capture.capture`): query row ``j`` of a teacher-forced
cross-attention map is the decoder step whose *input* is target token ``j − 1`` (the
start token first) and which *produces* target token ``j``. ``AttentionMaps.word_level``
groups query rows by their input word; here rows are grouped by the word they produce
(:func:`produced_words`), which is what an alignment of target word ``j`` needs.
"""

from __future__ import annotations

from typing import Any, TYPE_CHECKING, Iterable, Optional, Sequence

import pandas as pd
import torch

from probe.errors import InputError, NotApplicable

if TYPE_CHECKING:
    from probe.maps import AttentionMaps

TASKS = ("translate", "translate-rnn")


def produced_words(maps: AttentionMaps) -> list[int | None]:
    """For each query row of a cross-attention map, the target word it produces.

    Row ``j`` produces the token that is the decoder input of row ``j + 1``, so its
    word is ``query_word_ids[j + 1]``. The last row produces the token after the last
    input: the end-of-sequence token (``None``) when every target word already appears
    among the inputs, else the last target word.

    Args:
        maps: :class:`probe.maps.AttentionMaps` with ``kind == "cross"``.

    Returns:
        list of length ``n_query``: a target word index or ``None`` (start/end tokens).

    Raises:
        NotApplicable: not a cross-attention map.
        InputError: no target words are known.
    """
    if maps.kind != "cross":
        raise NotApplicable(
            f"alignment needs cross-attention maps (kind='cross'), got kind={maps.kind!r}; "
            "capture with stack='cross' and targets=[...]"
        )
    if not maps.query_words or maps.query_word_ids is None or maps.query_special_mask is None:
        raise InputError("the map has no target words (query_words is empty); capture with targets=[...]")
    n_words = len(maps.query_words)
    wids = list(maps.query_word_ids)
    special = maps.query_special_mask.tolist()
    out = []
    for j in range(len(wids)):
        if j + 1 < len(wids):
            out.append(None if special[j + 1] else wids[j + 1])
        else:
            seen = {w for w, s in zip(wids[1:], special[1:]) if w is not None and not s}
            out.append(n_words - 1 if (n_words - 1) not in seen else None)
    return out


def cross_word_attention(maps: AttentionMaps, special_column: bool = False) -> torch.Tensor:
    """Word-level cross-attention with rows indexed by the target word they produce.

    Columns: attention *to* a source word is the sum over its tokens' columns; rows:
    attention *from* a target word is the mean over the rows that produce its tokens
    (Clark et al. 2019's word-level convention). Special tokens (``</s>``, the start
    token) are dropped on both sides, so rows need not sum to 1.

    Args:
        maps: cross-attention :class:`probe.maps.AttentionMaps`, ``attentions``
            ``[layer, head, n_query_tokens, n_source_tokens]``.
        special_column: append one column holding the attention on the source's
            special tokens (``</s>``), so that rows sum to 1 again (for figures).

    Returns:
        float tensor ``[layer, head, n_target_words, n_source_words]`` (``+ 1``
        column with ``special_column``); a target word with no producing row
        (truncated target) gets a row of zeros.

    Raises:
        ValueError: not cross-attention, or no source/target words.
    """
    produced = produced_words(maps)
    n_src = len(maps.words)
    if n_src == 0:
        raise InputError("the map has no source words (words is empty)")
    a = maps.attentions.float()
    _, _, n_q, n_k = a.shape
    to_word = torch.zeros(n_k, n_src + int(special_column))
    for k, (w, s) in enumerate(zip(maps.word_ids, maps.special_mask.tolist())):
        if w is not None and not s and w < n_src:
            to_word[k, w] = 1.0
        elif s and special_column:
            to_word[k, n_src] = 1.0
    from_word = torch.zeros(n_q, len(maps.query_words or ()))  # produced_words refused maps without them
    for j, w in enumerate(produced):
        if w is not None:
            from_word[j, w] = 1.0
    counts = from_word.sum(0).clamp(min=1)
    return (from_word.T @ (a @ to_word)) / counts[:, None]


def predicted_alignment(word_attention: torch.Tensor) -> torch.Tensor:
    """The argmax source word of every target word: ``[..., n_target] → long``.

    Args:
        word_attention: ``[layer, head, n_target_words, n_source_words]`` from
            :func:`cross_word_attention` (any leading dimensions).
    """
    return word_attention.argmax(-1)


def gold_links(alignment: Sequence, n_target: int, n_source: int) -> set:
    """Sure links ``{(target word, source word)}`` from a gold alignment.

    ``alignment`` is either one source index per target word (``alignment[j]`` is the
    source word of target word ``j``, the zoo's format) or a sequence of
    ``(target, source)`` pairs (several or none per target word).

    Raises:
        ValueError: an index outside the sentence, or a per-word list of the wrong length.
    """
    items = list(alignment)
    if items and all(isinstance(x, (tuple, list)) for x in items):
        links = {(int(t), int(s)) for t, s in items}
    else:
        if len(items) != n_target:
            raise InputError(
                f"gold alignment has {len(items)} entries for {n_target} target words; "
                "give one source index per target word or (target, source) pairs"
            )
        links = {(j, int(s)) for j, s in enumerate(items)}
    bad = [(t, s) for t, s in links if not (0 <= t < n_target and 0 <= s < n_source)]
    if bad:
        raise InputError(
            f"gold links {sorted(bad)[:5]} fall outside {n_target} target × {n_source} "
            "source words: does the alignment belong to this sentence pair?"
        )
    return links


def aer(predicted: Iterable, sure: Iterable, possible: Optional[Iterable] = None) -> float:
    """Alignment error rate of Och & Ney (2003) for link sets.

    ``AER = 1 − (|A∩S| + |A∩P|) / (|A| + |S|)`` with A = ``predicted``, S = ``sure``,
    P = ``possible`` ∪ S (P = S when not given, so AER = 1 − 2|A∩S|/(|A|+|S|)).
    0 is perfect, 1 shares no link. Raises ``ValueError`` when both sets are empty.
    """
    a, s = set(predicted), set(sure)
    p = s | set(possible or ())
    if not a and not s:
        raise InputError("AER is undefined when both the predicted and the gold alignment are empty")
    return 1.0 - (len(a & s) + len(a & p)) / (len(a) + len(s))


def alignment_error_rates(maps_list: Sequence, alignments: Sequence, keep: Optional[Sequence] = None) -> pd.DataFrame:
    """Corpus-level AER of every (layer, head) of cross-attention against gold alignments.

    Each head predicts one link per target word (its argmax source word, see
    :func:`cross_word_attention`); counts are summed over sentences (Och & Ney 2003).

    Args:
        maps_list: cross-attention :class:`probe.maps.AttentionMaps`, one per pair.
        alignments: per pair, the gold alignment (see :func:`gold_links`), sure links.
        keep: optional, per pair, the target word indices to score (e.g. all but the
            verb); links of other target words are left out of A and S.

    Returns:
        DataFrame with one row per (layer, head): ``layer, head, aer, precision,
        recall, gold_mass`` (mean attention on the gold source words of a target
        word), ``n_pred``, ``n_gold``, ``n_correct``; sorted by layer, head.

    Raises:
        ValueError: lists of different lengths, empty input, maps with different
            layers/heads, or gold links outside a sentence.
    """
    maps_list = list(maps_list)
    alignments = list(alignments)
    if not maps_list:
        raise InputError("no sentence pairs given")
    if len(maps_list) != len(alignments):
        raise InputError(f"{len(maps_list)} maps but {len(alignments)} gold alignments")
    if keep is not None and len(keep) != len(maps_list):
        raise InputError(f"keep has {len(keep)} entries for {len(maps_list)} pairs")
    shape = tuple(maps_list[0].attentions.shape[:2])
    layers = maps_list[0].layers
    n_pred = torch.zeros(shape)
    n_correct = torch.zeros(shape)
    mass = torch.zeros(shape)
    n_gold = 0
    for i, (m, gold) in enumerate(zip(maps_list, alignments)):
        if tuple(m.attentions.shape[:2]) != shape:
            raise InputError(f"pair {i} has {tuple(m.attentions.shape[:2])} layers × heads, pair 0 has {shape}")
        w = cross_word_attention(m)  # [L, H, T, S]
        n_t, n_s = w.shape[-2:]
        links = gold_links(gold, n_t, n_s)
        scored = set(range(n_t)) if keep is None else {int(t) for t in keep[i]}
        links = {(t, s) for t, s in links if t in scored}
        rows = sorted(scored)
        gold_mat = torch.zeros(n_t, n_s)
        for t, s in links:
            gold_mat[t, s] = 1.0
        pred = predicted_alignment(w)  # [L, H, T]
        hit = gold_mat[torch.arange(n_t), pred]  # [L, H, T]: 1 where the argmax is a sure link
        n_pred += len(rows)
        n_correct += hit[..., rows].sum(-1)
        mass += (w * gold_mat).sum(-1)[..., rows].sum(-1)
        n_gold += len(links)
    recs = []
    for li, layer in enumerate(layers):
        for h in range(shape[1]):
            a_, c = float(n_pred[li, h]), float(n_correct[li, h])
            recs.append(
                dict(
                    layer=layer,
                    head=h,
                    aer=1.0 - 2.0 * c / (a_ + n_gold) if a_ + n_gold else float("nan"),
                    precision=c / a_ if a_ else float("nan"),
                    recall=c / n_gold if n_gold else float("nan"),
                    gold_mass=float(mass[li, h]) / a_ if a_ else float("nan"),
                    n_pred=int(a_),
                    n_gold=n_gold,
                    n_correct=int(c),
                )
            )
    return pd.DataFrame.from_records(recs)


def best_head(table: pd.DataFrame) -> pd.Series:
    """The row of :func:`alignment_error_rates` with the lowest AER (first on ties)."""
    if table.empty:
        raise InputError("empty AER table")
    return table.loc[table["aer"].idxmin()]


def zoo_cross_maps(task: str, examples: Sequence[dict], batch_size: int = 32) -> list:
    """Teacher-forced cross-attention maps of a zoo translation model on ``examples``.

    ``translate``: the BART model's cross-attention, ``[layer, head, n_target + 1,
    n_source + 1]`` via :func:`probe.runs.capture.capture`; ``translate-rnn``: the GRU
    model's additive attention (Bahdanau et al. 2015) as one layer, one head
    (:func:`rnn_attention_maps`). ``examples`` are dicts with
    ``text`` and ``target_text`` (``models.zoo.eval_examples(task)``).

    Raises:
        ValueError: an unknown task (not one of ``TASKS``) or an empty example list.
    """
    name = task[4:] if task.startswith("zoo:") else task
    if name not in TASKS:
        raise NotApplicable(f"alignment is scored on the zoo translation models {TASKS}, got {task!r}")
    examples = list(examples)
    if not examples:
        raise InputError("no examples given")
    if name == "translate":
        from probe.models import load_model
        from probe.runs.capture import capture

        adapter = load_model("zoo:translate")
        return capture(
            adapter,
            [e["text"] for e in examples],
            stack="cross",
            targets=[e["target_text"] for e in examples],
            batch_size=batch_size,
        )
    from probe.models import zoo

    zm = zoo.load_zoo("translate-rnn")
    return [rnn_attention_maps(zm.model, zm.tokenizer, e["text"], e["target_text"]) for e in examples]


def rnn_attention_maps(model: Any, tokenizer: Any, source: str, target: str) -> AttentionMaps:
    """The zoo GRU translator's additive attention (Bahdanau et al. 2015) on one pair, as
    :class:`probe.maps.AttentionMaps` ``kind="cross"``, ``[1, 1, n_target + 1, n_source]``
    (fields from :func:`probe.models.zoo.translate_rnn.attention_fields`)."""
    from probe.maps import AttentionMaps
    from probe.models import zoo

    return AttentionMaps(**zoo.task_module("translate-rnn").attention_fields(model, tokenizer, source, target))
