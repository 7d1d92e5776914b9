"""Two checkpoints' measurements compared head by head: the tidy change table, the per-head
summary (largest changes first) and whether the two hold the same weights."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from probe.errors import InputError

from .changes import head_changes
from .divergence import pattern_divergence
from .floors import JSD_FLOOR

if TYPE_CHECKING:
    from .measure import Measurements

__all__ = ["compare_pair", "head_summary", "same_weights_warning", "check_same_shape"]


def check_same_shape(a: Measurements, b: Measurements) -> None:
    """Refuse two :class:`.measure.Measurements` whose heads cannot be paired (one line)."""
    if tuple(a.layers) != tuple(b.layers) or a.n_heads != b.n_heads or len(a.maps) != len(b.maps):
        raise InputError(
            f"{a.label} has {len(a.layers)} layers × {a.n_heads} heads on {len(a.maps)} examples, "
            f"{b.label} {len(b.layers)} × {b.n_heads} on {len(b.maps)}: compare checkpoints of one architecture "
            "on the same inputs"
        )


def compare_pair(
    a: Measurements, b: Measurements, *, q: float = 0.05, n_boot: int = 1000, confidence: float = 0.95, seed: int = 0
) -> pd.DataFrame:
    """Every measure's change per head from checkpoint ``a`` to ``b`` (two
    :class:`.measure.Measurements` of the same corpus), plus the pattern divergence
    (``jsd``): :data:`.changes.CHANGE_COLUMNS` with ``from``/``to`` columns first.

    Raises:
        InputError: different shapes, inputs or measures.
    """
    check_same_shape(a, b)
    shared = sorted(set(a.values) & set(b.values))
    jsd = pattern_divergence(a.maps, b.maps)  # [E, L, H]
    floors = {**{k: a.floors[k] for k in shared}, "jsd": JSD_FLOOR}
    table = head_changes(
        {k: a.values[k] for k in shared},
        {k: b.values[k] for k in shared},
        a.n_heads,
        floors,
        divergences={"jsd": jsd.reshape(jsd.shape[0], -1)},
        layers=a.layers,
        q=q,
        n_boot=n_boot,
        confidence=confidence,
        seed=seed,
    )
    table.insert(0, "to", b.label)
    table.insert(0, "from", a.label)
    return table


#: measures of the model around a head rather than of the head itself: a head whose own
#: weights did not move can become necessary when another head breaks (backup heads take
#: over, Wang et al. 2022; the "hydra effect", McGrath et al. 2023), so these are reported
#: beside the head's flag (``necessity_flagged``) and do not raise it
CONTEXT_MEASURES = ("necessity",)


def head_summary(changes: pd.DataFrame) -> pd.DataFrame:
    """One row per (pair, head): ``jsd`` (the pattern's divergence), ``flagged`` (a
    measure of the head itself flagged: its pattern, role scores or detectors),
    ``n_flagged``, ``flagged_measures``, the ``largest`` change relative to its floor
    (``largest_measure``, ``largest_change``), and ``necessity_change`` with
    ``necessity_flagged`` when necessity was measured (:data:`CONTEXT_MEASURES`); sorted
    by ``flagged``, then ``jsd``, largest first."""
    rows = []
    for (a, b, layer, head), g in changes.groupby(["from", "to", "layer", "head"], sort=False):
        own = g[~g["measure"].isin(CONTEXT_MEASURES)]
        rel = (own["change"].abs() / own["floor"].where(own["floor"] > 0, np.nan)).fillna(0.0)
        top = own.loc[rel.idxmax()] if len(own) else None
        jsd = g.loc[g["measure"] == "jsd", "change"]
        nec = g.loc[g["measure"] == "necessity"]
        rows.append(
            {
                "from": a,
                "to": b,
                "layer": int(layer),
                "head": int(head),
                "jsd": float(jsd.iloc[0]) if len(jsd) else np.nan,
                "flagged": bool(own["flagged"].any()),
                "n_flagged": int(own["flagged"].sum()),
                "flagged_measures": ",".join(own.loc[own["flagged"], "measure"]),
                "largest_measure": top["measure"] if top is not None else "",
                "largest_change": float(top["change"]) if top is not None else np.nan,
                "necessity_change": float(nec["change"].iloc[0]) if len(nec) else np.nan,
                "necessity_flagged": bool(nec["flagged"].iloc[0]) if len(nec) else False,
            }
        )
    out = pd.DataFrame(rows)
    return out.sort_values(["flagged", "jsd"], ascending=[False, False], kind="stable").reset_index(drop=True)


def same_weights_warning(
    a_label: str, b_label: str, a_fp: str, b_fp: str, a_tok: str = "", b_tok: str = ""
) -> str | None:
    """The warning line when two checkpoints' weights fingerprints are equal, else ``None``;
    with the tokenizers' fingerprints, it says whether the tokenizer changed (then every
    difference is the tokenization's)."""
    if not a_fp or a_fp != b_fp:
        return None
    if a_tok and b_tok and a_tok != b_tok:
        return (
            f"warning: {a_label} and {b_label} hold identical weights ({a_fp[:19]}…) but different tokenizers "
            f"({a_tok[:16]} ≠ {b_tok[:16]}): only the tokenizer changed, so every difference below is the "
            "tokenization's"
        )
    return (
        f"warning: {a_label} and {b_label} hold identical weights ({a_fp[:19]}…) and tokenizers: nothing can "
        "have changed between them; check that each names the checkpoint you meant"
    )
