"""The decoder head taxonomy in one table: every detector of :mod:`.decoder_heads`,
:mod:`.decoder_circuits` and :mod:`.retrieval_heads` on one causal language model.

:data:`TAXONOMY` names each role once, with the column that holds its score, the threshold
a head must pass, the probe it is measured on and its source. A detector the model cannot
take (no ordinal tokens for successor heads, no unembedding, too few positions for a needle)
leaves its column NaN and says why in ``notes``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pandas as pd

from probe.errors import InputError, NotApplicable

if TYPE_CHECKING:
    from probe.models.adapter import ModelAdapter

__all__ = ["TaxonomyRole", "TAXONOMY", "DecoderTaxonomy", "decoder_taxonomy"]


@dataclass(frozen=True)
class TaxonomyRole:
    """One role: ``column`` holds its score, ``flag`` the boolean ``score`` passes ``threshold``
    (``above``: greater than; else at most), measured on ``probe``, defined by ``source``."""

    role: str
    column: str
    flag: str
    threshold: float
    probe: str
    source: str
    above: bool = True


def _roles() -> tuple:
    from .decoder_circuits import COPYING_THRESHOLD, SUCCESSOR_THRESHOLD
    from .decoder_heads import CONTENT_MIN, POSITIONAL_MAX, THRESHOLDS
    from .retrieval_heads import RETRIEVAL_THRESHOLD

    rr = "repeated random tokens"
    return (
        TaxonomyRole("induction", "induction", "induction_head", THRESHOLDS["induction"], rr, "Olsson et al. 2022"),
        TaxonomyRole(
            "copying", "copying", "copying_head", COPYING_THRESHOLD, "OV circuit eigenvalues", "Olsson et al. 2022"
        ),
        TaxonomyRole(
            "previous-token",
            "previous_token",
            "previous_token_head",
            THRESHOLDS["previous_token"],
            rr,
            "TransformerLens",
        ),
        TaxonomyRole(
            "duplicate-token",
            "duplicate_token",
            "duplicate_token_head",
            THRESHOLDS["duplicate_token"],
            rr,
            "TransformerLens",
        ),
        TaxonomyRole(
            "successor",
            "successor",
            "successor_head",
            SUCCESSOR_THRESHOLD,
            "OV circuit on ordinal tokens",
            "Gould et al. 2023",
        ),
        TaxonomyRole(
            "retrieval", "retrieval", "retrieval_head", RETRIEVAL_THRESHOLD, "needle in a haystack", "Wu et al. 2024"
        ),
        TaxonomyRole("sink", "sink", "sink_head", THRESHOLDS["sink"], rr, "Gu et al. 2024"),
        TaxonomyRole(
            "positional", "content", "positional_head", POSITIONAL_MAX, "two token draws", "ours", above=False
        ),
        TaxonomyRole("content", "content", "content_head", CONTENT_MIN, "two token draws", "ours"),
    )


#: every role of the taxonomy, in the order a head's roles are named
TAXONOMY: tuple = _roles()


@dataclass(frozen=True)
class DecoderTaxonomy:
    """``table``: ``layer, head`` and every score and ``*_head`` flag of :data:`TAXONOMY`
    (NaN / False where a detector did not run); ``notes``: why one did not, and on what the
    others ran; ``sink_ratio``: Gu et al.'s Sink₁^ε of the model."""

    table: pd.DataFrame
    notes: tuple
    sink_ratio: float

    def heads(self, role: str) -> list:
        """``[(layer, head)]`` that take ``role`` (a :data:`TAXONOMY` role name)."""
        r = next(x for x in TAXONOMY if x.role == role)
        t = self.table[self.table[r.flag].astype(bool)]
        return [(int(a), int(b)) for a, b in zip(t["layer"], t["head"])]

    def roles_of(self, layer: int, head: int) -> list:
        """The roles ``(layer, head)`` takes, in :data:`TAXONOMY` order."""
        t = self.table
        row = t[(t["layer"] == layer) & (t["head"] == head)].iloc[0]
        return [r.role for r in TAXONOMY if bool(row[r.flag])]

    def to_frame(self) -> pd.DataFrame:
        return self.table


def decoder_taxonomy(adapter: ModelAdapter, n_tokens: int = 10, n_examples: int = 16, seed: int = 0) -> DecoderTaxonomy:
    """Run every detector on ``adapter`` (a causal LM); see the module docstring.

    Raises:
        NotApplicable: ``adapter`` is not a causal (decoder) model.
        InputError: the repeated random tokens do not fit its positions.
    """
    from .decoder_circuits import copying_scores, successor_scores
    from .decoder_heads import decoder_head_scores
    from .retrieval_heads import retrieval_scores

    if not adapter.causal:
        raise NotApplicable(f"{adapter.name} is not a causal language model: the decoder head taxonomy needs one")
    base = decoder_head_scores(adapter, n_tokens=n_tokens, n_examples=n_examples, seed=seed)
    table = base.table
    notes = [
        f"induction, previous-token, duplicate-token, sink and content scores on {n_examples} sequences of "
        f"<bos> + {n_tokens} random tokens repeated; Sink1^0.3 = {base.sink_ratio:.2f}"
    ]
    n_context = min(24, adapter.max_length - 6)
    for name, detect in (
        ("copying", lambda: copying_scores(adapter)),
        ("successor", lambda: successor_scores(adapter)),
        ("retrieval", lambda: retrieval_scores(adapter, n_context=n_context, n_examples=n_examples, seed=seed)),
    ):
        try:
            part = detect()
        except (NotApplicable, InputError) as exc:
            notes.append(f"{name}: not scored ({exc})")
            table = table.assign(**{name: float("nan"), name + "_head": False})
            continue
        table = table.merge(part, on=["layer", "head"])
        if name == "successor":
            notes.append(f"successor: {part.attrs['n_pairs']} ordinal pairs among {part.attrs['n_tokens']} tokens")
        if name == "retrieval":
            notes.append(
                f"retrieval: {n_examples} needle inputs, the model emitted {part.attrs['answer_recall']:.0%} of "
                "the needles' answer tokens"
            )
    return DecoderTaxonomy(table, tuple(notes), base.sink_ratio)
