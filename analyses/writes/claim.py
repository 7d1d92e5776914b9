"""The claim "this head writes the answer", calibrated on a null model, with its causal check.

Per example (a text), a head's effect is its direct logit attribution (:mod:`.dla`) to the
model's own next token, averaged over the text's positions (or, for a task, to each
example's answer at its last position). As the other claims of :mod:`probe.analyses.claims`:
the same is measured on the **null model** (the model re-initialised,
:func:`probe.analyses.claims.null_model.null_adapter`) on the same examples; per example, the
``1 − q`` quantile over the null's heads (:func:`~probe.analyses.claims.null_model.null_quantile`)
is what a head of a model that learned nothing reaches; a head's effects are tested against it,
paired, one-sided (Wilcoxon 1945), and the Benjamini–Hochberg (1995) procedure at ``q`` runs
across the heads. A head *holds* when it is rejected and its mean effect is positive.

DLA is the direct effect only. Beside it, the **causal check**: each held head (and the
largest writers, up to ``check``) is mean-ablated (its ``hook_z`` set to its mean over the
examples' positions) and the drop of the same logits measured. A head that writes a lot
directly but whose removal costs less than half of that is marked *compensated*: later
components make up for it (Wang et al. 2022, "Interpretability in the Wild"; McGrath et al.
2023, "The Hydra Effect").
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Sequence

import numpy as np
import pandas as pd
import torch

from probe.analyses.claims import thresholds as T

from .answers import Target
from .dla import attribute_positions, direction
from .stream import decompose

if TYPE_CHECKING:
    from probe.models.adapter import ModelAdapter

log = logging.getLogger(__name__)

__all__ = [
    "WritesClaims",
    "head_effects",
    "read_directions",
    "stream_head_dla",
    "text_head_dla",
    "texts_head_dla",
    "writes_answer_claims",
    "COMPENSATED",
]

#: a held head is "compensated" when mean-ablating it lowers the logits by less than this share of its DLA
COMPENSATED = 0.5


@dataclass(frozen=True)
class WritesClaims:
    """``table``: ``layer, head, effect, ci_low, ci_high, null_quantile, p_value, holds,
    ablation_drop, compensated`` (the last two NaN/None where not checked); ``n_examples``;
    ``null_source``: how the null model was made; ``target``: what logits were read."""

    table: pd.DataFrame
    n_examples: int
    null_source: str
    target: str

    def to_frame(self) -> pd.DataFrame:
        return self.table

    def held(self) -> list:
        t = self.table[self.table["holds"]]
        return [(int(a), int(b)) for a, b in zip(t["layer"], t["head"])]


def read_directions(adapter: ModelAdapter, stream, answer: Optional[Target] = None) -> tuple:
    """``(u [seq, d], b [seq], positions)``: the read direction at each position read: each
    position's next token, or ``answer`` at the last position alone."""
    n, d = len(stream.ids), stream.parts.shape[-1]
    u, b = torch.zeros(n, d, dtype=torch.float64), torch.zeros(n, dtype=torch.float64)
    if answer is not None:
        u[-1], b[-1] = direction(adapter, int(answer.answer or 0), answer.against)
        return u, b, [n - 1]
    for p in range(n - 1):
        u[p], b[p] = direction(adapter, int(stream.ids[p + 1]))
    return u, b, list(range(n - 1))


def head_effects(adapter: ModelAdapter, texts: Sequence[str], answers: Optional[Sequence[Target]] = None) -> tuple:
    """``(effects [layer * head, n], heads_index)``: each head's mean DLA per text (module
    docstring); ``answers``: one :class:`Target` per text (a task), else next tokens.

    Raises:
        InputError: a text of one token with no answer (no next token to read).
    """
    from probe.errors import InputError

    by_text: dict = {}
    index = None
    for i, one in texts_head_dla(adapter, texts, answers):
        if one is None:
            raise InputError(f"text {i} is one token: there is no next token to read; give longer texts")
        dla, stream, heads, _ = one
        by_text[i] = dla.numpy()
        index = stream.labels[heads.numpy()][["layer", "head"]].reset_index(drop=True)
    cols = [by_text[i] for i in range(len(texts))]
    return np.stack(cols, axis=1), index


def stream_head_dla(adapter: ModelAdapter, stream, answer: Optional[Target] = None) -> Optional[tuple]:
    """``(dla [heads], stream, heads [components] bool, positions)``: each head's DLA to the
    directions :func:`read_directions` reads in one text's decomposed ``stream``, averaged
    over those positions; ``None`` for a text of one token without an answer (no next token
    to read)."""
    u, b, positions = read_directions(adapter, stream, answer)
    if not positions:
        return None
    parts, _, _ = attribute_positions(stream, u, b)
    heads = torch.from_numpy((stream.labels["component"] == "head").to_numpy().copy())
    return parts[heads][:, positions].mean(1), stream, heads, positions


def text_head_dla(adapter: ModelAdapter, text: str, answer: Optional[Target] = None) -> Optional[tuple]:
    """:func:`stream_head_dla` of one text (one forward)."""
    return stream_head_dla(adapter, decompose(adapter, text), answer)


def texts_head_dla(adapter: ModelAdapter, texts: Sequence[str], answers: Optional[Sequence[Target]] = None):
    """``(index, stream_head_dla of text index)`` for every text, from batched forwards
    (:func:`.stream.decompose_texts`: longest first, not in the order of ``texts``);
    ``answers``: one :class:`Target` per text, else next tokens. Shared by the claim
    (:func:`head_effects`) and the report's corpus section (:mod:`.corpus`)."""
    from .stream import decompose_texts

    for i, stream in decompose_texts(adapter, texts):
        yield i, stream_head_dla(adapter, stream, None if answers is None else answers[i])


#: texts per batched forward of the causal check (right-padded: each text's own positions are read)
BATCH = 16


def _batches(adapter: ModelAdapter, texts: Sequence[str]):
    """``(first index, batch)`` of right-padded batches of ``BATCH`` texts (a causal LM's
    positions before the padding are those of the text alone; one text a batch for a model
    whose layers leak padding into real positions)."""
    from probe.models.batching import ONE_LENGTH

    size = 1 if adapter.batching == ONE_LENGTH else BATCH  # a model that leaks padding: one text a forward
    for start in range(0, len(texts), size):
        yield start, adapter.inputs_of(list(texts[start : start + size]))


def _mean_z(adapter: ModelAdapter, texts: Sequence[str]) -> dict:
    """``{layer: [head, head_dim]}``: each head's ``hook_z`` averaged over every real position."""
    from probe.tracing.trace import trace

    sums: dict = {}
    count = 0
    for _, batch in _batches(adapter, texts):
        cache = trace(adapter, batch, read="z")
        mask = batch["attention_mask"].double()[..., None, None]  # [b, seq, 1, 1]
        for layer in range(adapter.n_layers_of()):
            z = cache[f"blocks.{layer}.attn.hook_z"].double() * mask  # [b, seq, head, dh]
            sums[layer] = sums.get(layer, 0) + z.sum((0, 1))
        count += int(batch["attention_mask"].sum())
    return {layer: s / count for layer, s in sums.items()}


def _read(logits: torch.Tensor, ids: torch.Tensor, answers, i: int) -> torch.Tensor:
    """The logits the claim reads: each next token's, or text ``i``'s answer (− against) at the end."""
    if answers is None:
        return logits[torch.arange(len(ids) - 1), ids[1:]]
    a = answers[i]
    return logits[-1, a.answer] - (0 if a.against is None else logits[-1, a.against])


def _reads(adapter: ModelAdapter, texts, answers, edit: Optional[dict] = None) -> list:
    """The read logits of each text (:func:`_read`), under ``edit`` when given; batched."""
    from probe.tracing.trace import trace

    out = []
    for start, batch in _batches(adapter, texts):
        logits = trace(adapter, batch, edit=edit).output.logits
        for j, mask in enumerate(batch["attention_mask"]):
            n = int(mask.sum())
            out.append(_read(logits[j, :n].double(), batch["input_ids"][j, :n], answers, start + j))
    return out


def _ablation_drop(adapter: ModelAdapter, texts, answers, layer: int, head: int, mean_z: dict, clean: list) -> float:
    """Mean over texts of the drop of the read logits (``clean``: :func:`_reads` unedited) when ``head``'s z is its mean."""
    from probe.tracing.edits import Mean

    edit = {f"blocks.{layer}.attn.hook_z": Mean(value=mean_z[layer][head].float(), head=head)}
    hurt = _reads(adapter, texts, answers, edit)
    return float(np.mean([float((c - h).mean()) for c, h in zip(clean, hurt)]))


def writes_answer_claims(
    adapter: ModelAdapter,
    texts: Sequence[str],
    answers: Optional[Sequence[Target]] = None,
    *,
    null: Optional[ModelAdapter] = None,
    seed: int = 0,
    q: float = T.FDR,
    n_boot: int = T.N_BOOT,
    check: int = 5,
) -> WritesClaims:
    """The calibrated claim per head (module docstring) on ``texts``.

    Raises:
        InputError: fewer than 2 texts (no paired test), or as :func:`head_effects`.
        NotApplicable: as :func:`.stream.decompose`.
    """
    from probe.analyses.claims.null_model import null_adapter, null_quantile, null_source
    from probe.analyses.claims.statistics import benjamini_hochberg, mean_ci, paired_greater
    from probe.errors import InputError

    if len(texts) < 2:
        raise InputError(f"the claim tests heads over examples: give at least 2 texts, got {len(texts)}")
    effects, index = head_effects(adapter, texts, answers)
    log.info("writes claim: %s's DLA read on %d texts; now the null model's", adapter.name, len(texts))
    null_model = null if null is not None else null_adapter(adapter, seed)
    null_effects, _ = head_effects(null_model, texts, answers)
    bar = null_quantile(null_effects, q)  # [n]
    p = np.array([paired_greater(e, bar) for e in effects])
    rejected = benjamini_hochberg(p, q)
    cis = [mean_ci(e, n_boot=n_boot, seed=seed) for e in effects]
    t = index.assign(
        effect=effects.mean(1),
        ci_low=[c[1] for c in cis],
        ci_high=[c[2] for c in cis],
        null_quantile=float(bar.mean()),
        p_value=p,
        holds=rejected & (effects.mean(1) > 0),
    )
    t = _causal(adapter, texts, answers, t, check)
    target = "the model's own next tokens" if answers is None else "each example's answer"
    return WritesClaims(t, len(texts), null_source("reinit", seed) if null is None else null.name, target)


def _causal(adapter: ModelAdapter, texts, answers, t: pd.DataFrame, check: int) -> pd.DataFrame:
    chosen = set(t.index[t["holds"]]) | set(t["effect"].nlargest(check).index)
    t = t.assign(ablation_drop=np.nan, compensated=None)
    if not chosen:
        return t
    mean_z = _mean_z(adapter, texts)
    clean = _reads(adapter, texts, answers)
    log.info("writes claim: mean-ablating %d heads", len(chosen))
    for i in sorted(chosen):
        drop = _ablation_drop(adapter, texts, answers, int(t.at[i, "layer"]), int(t.at[i, "head"]), mean_z, clean)
        t.at[i, "ablation_drop"] = drop
        t.at[i, "compensated"] = bool(t.at[i, "effect"] > 0 and drop < COMPENSATED * t.at[i, "effect"])
    return t
