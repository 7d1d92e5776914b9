"""Agreement between attention-based scores and attributions (Jain & Wallace, 2019).

Per example, for every attention score (each layer and head, layer means, rollout, flow)
and every attribution (IG, saliency, input × gradient, blank-out): Kendall's τ and
Spearman's ρ between their word-level importance vectors, with their p-values. Summary
per (attention score, attribution): mean and median τ and ρ over examples and the share
of examples where the correlation is significant (two-sided p < ``alpha``).

Importance is the magnitude ``|score|`` of each word's score averaged over its pieces
(summed, attention and attributions would both rank a word by the number of pieces it was
split into and agree on any model, a random one included; ``pieces="sum"`` keeps the sum;
attention is
non-negative; an attribution's sign says which way a word pushes, its magnitude how
much), as Jain & Wallace rank by gradient magnitude and leave-one-out difference.
Special tokens are left out (they belong to no word).
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from typing import Optional, Sequence, TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

    from probe.analyses.explanation.attributions import Attributions

import numpy as np

from probe.analyses.common.word_scores import ScoreSet
from .rank_tests import rank_tests
from probe.errors import InputError, NotApplicable

log = logging.getLogger(__name__)

__all__ = ["Agreement", "agreement", "attribution_scoresets", "MIN_WORDS"]

#: With 4 words the exact two-sided Kendall test cannot go below p = 2/24 ≈ 0.083, so a
#: significance test at 0.05 needs at least 5 words.
MIN_WORDS = 5
KEY_COLUMNS = ["method", "layer", "head", "attribution"]


@dataclass(frozen=True)
class Agreement:
    """Kendall τ / Spearman ρ between attention scores and attributions.

    Attributes:
        per_example: ``example, method, layer, head, attribution, n_words, tau, tau_p,
            rho, rho_p``.
        summary: per ``method, layer, head, attribution``: ``n_examples, tau_mean,
            tau_median, rho_mean, rho_median, tau_significant, rho_significant`` (shares
            of examples with p < alpha).
        skipped: examples left out for having fewer than ``min_words`` words.
    """

    per_example: pd.DataFrame
    summary: pd.DataFrame
    alpha: float
    skipped: int = 0

    def to_frame(self) -> pd.DataFrame:
        """The :attr:`summary`."""
        return self.summary


def attribution_scoresets(attributions: Attributions, methods: Optional[Sequence[str]] = None) -> list[ScoreSet]:
    """:class:`probe.analyses.explanation.attributions.Attributions` as one :class:`ScoreSet` per example,
    keys ``(method, -1, -1)``; only ``methods`` where given (default: every method computed)."""
    out = []
    for ex in attributions.examples:
        names = [m for m in ex.scores if methods is None or m in methods]
        keys = tuple((m, -1, -1) for m in names)
        out.append(
            ScoreSet(
                index=ex.index,
                keys=keys,
                scores=np.stack([ex.scores[m] for m in names]),
                word_ids=ex.word_ids,
                words=ex.words,
            )
        )
    return out


def agreement(
    attention: Sequence[ScoreSet],
    attributions: Sequence[ScoreSet],
    *,
    alpha: float = 0.05,
    min_words: int = MIN_WORDS,
    pieces: str = "mean",
    progress: bool = False,
) -> Agreement:
    """Rank correlations between every attention score and every attribution.

    Args:
        attention: per example, the attention-based :class:`ScoreSet`
            (:func:`probe.analyses.explanation.attention_scores.attention_scores`).
        attributions: per example, the attribution :class:`ScoreSet`
            (:func:`attribution_scoresets`), same examples in the same order.
        alpha: significance level (two-sided).
        min_words: examples with fewer words are left out (counted in ``skipped``).
        pieces: ``mean`` (default) or ``sum``: how a word's pieces make its score.

    Returns:
        :class:`Agreement`.

    Raises:
        ValueError: lists of different lengths or examples that disagree, ``alpha``
            outside (0, 1), or too few words in every example for a significance test.
    """
    import pandas as pd

    if len(attention) != len(attributions):
        raise ValueError(f"{len(attention)} attention score sets for {len(attributions)} attribution sets")
    if not 0 < alpha < 1:
        raise InputError(f"alpha must lie in (0, 1), got {alpha}")
    if pieces not in ("mean", "sum"):
        raise InputError(f"pieces must be 'mean' or 'sum', got {pieces!r}")
    if min_words < 3:
        raise InputError("min_words must be ≥ 3: a rank correlation of fewer words is meaningless")
    rows, skipped = [], 0
    it = zip(attention, attributions)
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(it, total=len(attention), unit="ex", desc="agreement")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy warns on ties / constant input
        for a, b in it:
            if a.word_ids != b.word_ids:
                raise ValueError(f"example {a.index}: attention and attributions come from different tokenizations")
            avg = pieces == "mean"
            wa, wb = np.abs(a.word_scores(mean=avg)), np.abs(b.word_scores(mean=avg))
            n_words = wa.shape[1]
            if n_words < min_words:
                skipped += 1
                continue
            got = rank_tests(wa, wb)  # every attention row against every attribution at once
            for i, ka in enumerate(a.keys):
                for j, kb in enumerate(b.keys):
                    rows.append(
                        (a.index, *ka, kb[0], n_words, *(float(v[i, j]) for v in got))
                    )  # fmt: skip
    if not rows:
        raise NotApplicable(
            f"too few examples for a significance test: none of the {len(attention)} examples has "
            f"at least {min_words} words (an exact two-sided Kendall test cannot reach p < 0.05 with "
            "fewer); give longer sentences or more of them"
        )
    if skipped:
        log.warning("%d examples with fewer than %d words left out of the agreement test", skipped, min_words)
    per = pd.DataFrame(
        rows, columns=["example", *KEY_COLUMNS[:3], "attribution", "n_words", "tau", "tau_p", "rho", "rho_p"]
    )
    per["tau_sig"] = per["tau_p"] < alpha
    per["rho_sig"] = per["rho_p"] < alpha
    g = per.groupby(KEY_COLUMNS, sort=False)
    summary = g.agg(
        n_examples=("tau", "size"),
        tau_mean=("tau", "mean"),
        tau_median=("tau", "median"),
        rho_mean=("rho", "mean"),
        rho_median=("rho", "median"),
        tau_significant=("tau_sig", "mean"),
        rho_significant=("rho_sig", "mean"),
    ).reset_index()
    per = per.drop(columns=["tau_sig", "rho_sig"])
    return Agreement(per_example=per, summary=summary, alpha=alpha, skipped=skipped)
