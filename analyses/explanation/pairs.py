"""Sentence pairs for similarity targets: read a pairs file (validated), or pair each
sentence with its nearest neighbour in the corpus, and build the
:class:`probe.analyses.common.targets.PairSimilarity` target.

A pairs file has one pair per line, the two sentences separated by a tab; blank lines and
lines starting with ``#`` are skipped. A line with a missing side, an empty sentence or a
sentence longer than the model takes is refused with ``file:line`` (``ValueError``),
before any model forward.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence

import numpy as np
import torch

from probe.errors import InputError

if TYPE_CHECKING:
    import os

    from probe.analyses.common.pooling import Pooling
    from probe.models.adapter import ModelAdapter


__all__ = ["read_pairs", "similarity_target", "nearest_neighbours"]


def read_pairs(path: str | os.PathLike, adapter: ModelAdapter | None = None) -> list[tuple[str, str]]:
    """``[(left, right)]`` from a tab-separated pairs file.

    Raises:
        ValueError: an unreadable file, no pairs, or ``file:line`` with what is wrong.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read pairs file {p}: {exc}") from None
    limit = getattr(adapter, "max_length", None) if adapter is not None else None
    pairs = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) != 2:
            raise InputError(f"{p}:{i}: a pair is two sentences separated by one tab; found {len(parts)} field(s)")
        left, right = (s.strip() for s in parts)
        for side, s in (("first", left), ("second", right)):
            if not s:
                raise InputError(f"{p}:{i}: the {side} sentence is empty")
            if limit is not None and adapter is not None:
                n = len(adapter.tokenizer(s)["input_ids"])
                if n > limit:
                    raise InputError(f"{p}:{i}: the {side} sentence has {n} tokens, more than the model's {limit}")
        pairs.append((left, right))
    if not pairs:
        raise InputError(f"{p}: no sentence pairs (one pair per line, separated by a tab)")
    return pairs


@torch.no_grad()
def embed(
    adapter: ModelAdapter,
    texts: Sequence[str],
    pooling: Pooling,
    batch_size: int = 32,
    known: Optional[np.ndarray] = None,
) -> torch.Tensor:
    """``[n, d]`` pooled embeddings of ``texts`` (float32, on CPU), in the order given.

    Texts are batched with others of similar length (longest first), so a batch is not
    padded to one long text; each row is its text's embedding whatever its batch.
    ``known``: ``[n, d]`` embeddings already computed with this pooling (NaN rows where
    not): only the others run the model."""
    from probe.analyses.common.batch import by_one_length

    base = getattr(adapter.model, "base_model", adapter.model)
    todo: Sequence[int] = range(len(texts))
    out: Optional[torch.Tensor] = None
    if known is not None and len(known) == len(texts) and np.ndim(known) == 2:
        have = ~np.isnan(known).any(1)
        out = torch.as_tensor(np.nan_to_num(known), dtype=torch.float32).clone()
        todo = np.flatnonzero(~have).tolist()
    order = sorted(todo, key=lambda i: -len(texts[i]))
    chunks = [order[s : s + batch_size] for s in range(0, len(order), batch_size)]
    for idx in by_one_length(adapter, chunks, texts, truncate=True):
        inputs = adapter.batch(adapter.encode_batch([texts[i] for i in idx], truncate=True))
        h = base(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"]).last_hidden_state
        pooled = pooling.pool(h.float(), inputs["attention_mask"]).cpu()
        if out is None:
            out = torch.empty((len(texts), pooled.shape[-1]), dtype=pooled.dtype)
        out[idx] = pooled
    if out is None:
        raise InputError("no texts to embed: give at least one sentence")
    return out


def nearest_neighbours(e: torch.Tensor) -> np.ndarray:
    """``[n]`` index of each row's nearest other row by cosine."""
    x = torch.nn.functional.normalize(e.double(), dim=-1)
    c = x @ x.T
    c.fill_diagonal_(-2.0)
    return c.argmax(1).numpy()


def similarity_target(
    adapter: ModelAdapter, corpus: Any, pairs_file: Optional[str] = None, known: Optional[Any] = None
) -> tuple:
    """``(target, corpus to explain, info)``: similarity to the nearest neighbour in the
    corpus (default) or to the pair's other side (``pairs_file``). ``known``: ``(readout
    described, [n, d] embeddings with NaN rows)`` of the corpus from an earlier run of the
    model (the report's ablation section): used where the pooling is this target's."""
    from probe.analyses.common.pooling import model_pooling
    from probe.analyses.common.targets import PairSimilarity
    from probe.inputs.corpus import Corpus

    pooling = model_pooling(adapter)
    if pairs_file:
        pairs = read_pairs(pairs_file, adapter)
        corpus = Corpus(texts=tuple(a for a, _ in pairs), source=str(pairs_file))
        others = [b for _, b in pairs]
        partners = embed(adapter, others, pooling)
        how = f"each first sentence of {pairs_file} against its second"
    else:
        if len(corpus) < 2:
            raise InputError(
                "a similarity target pairs each sentence with its nearest neighbour: give at least "
                "2 sentences (or run probe faithfulness with --pairs FILE, a file of sentence pairs)"
            )
        rows = known[1] if known is not None and pooling.describe() in str(known[0]) else None
        e = embed(adapter, list(corpus.texts), pooling, known=rows)
        nn = nearest_neighbours(e)
        partners, others = e[nn], [corpus.texts[j] for j in nn]
        how = "each sentence against its nearest neighbour in the corpus"
    keys: dict = {}
    spans = corpus.word_spans
    for i, enc in enumerate(adapter.encode_batch(list(corpus.texts), list(spans) if spans else None)):
        keys.setdefault(tuple(enc.input_ids.tolist()), i)
    target = PairSimilarity(pooling, partners, keys, pair_words=others)
    info = {"target": "similarity", "pairs": how, "pooling": pooling.describe()}
    return target, corpus, info
