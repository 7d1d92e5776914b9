"""What the necessity claims that hold are checked against (issue 58): the modes shown beside a
necessary head (zero- and resample-ablation, one mean, a same-norm random perturbation), the
other mean-ablation baselines the claim must survive, and the removal table of a sweep.

Wang et al. 2022 (mean-ablation as the removal of a head); the baselines are those of
:mod:`.baselines`. Shared by the exhaustive path (:mod:`.heads`) and the screened one
(:mod:`.screened_claims`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

__all__ = ["BESIDE_MODES", "beside_necessary", "confirm_baselines", "measured_beside", "removal_table"]

#: the modes beside a necessary head's claim (context, never a test), run for those heads alone
BESIDE_MODES = ("zero", "one-mean", "resample", "random")


def confirm_baselines(necessity: dict, sweeps: tuple, tests: int) -> dict:
    """The held necessity claims confirmed under the other baselines
    (:func:`.baselines.confirm_sweep`), their harms read from whichever of ``sweeps`` (the
    deciding sweep, the sweep beside the held heads; ``None`` skipped) measured them."""
    from types import SimpleNamespace

    from .baselines import BASELINES, confirm_sweep

    held = [k for k, c in necessity.items() if c.holds]
    got = [s for s in sweeps if s is not None]
    if not held or not got:
        return necessity
    harm = {}
    for mode in BASELINES[1:]:
        rows = []
        for k in held:
            src = next((s for s in got if mode in s.harm and (k,) in s.units), None)
            if src is None:
                break
            rows.append(src.harm[mode][src.row((k,))])
        if len(rows) == len(held):
            harm[mode] = np.stack(rows)
    view = SimpleNamespace(objective=got[0].objective, units=tuple((k,) for k in held), harm=harm)
    return confirm_sweep(necessity, view, tests)


def measured_beside(ablation) -> tuple:
    """The modes beside necessity that ``ablation`` (a sweep of every head) already has."""
    return tuple(m for m in BESIDE_MODES if ablation is not None and m in ablation.harm)


def beside_necessary(adapter, corpus, objective, necessity: dict, sweep, seed: int, runner, known=None):
    """The modes that stand beside a necessary head's claim (:data:`BESIDE_MODES`: zero- and
    resample-ablation, the same-norm random perturbation; :func:`.necessity.beside_modes`),
    run for the heads whose necessity holds only and added to their claims' extras; the
    sweep (``None`` when no head is necessary). A mode ``sweep`` already has (the ablation
    section's) is taken from it. On EWT dev's first 128 sentences each mode of all 72 heads
    cost 22 s of the report, for numbers a head that is not necessary does not show.
    ``known``: ``corpus``'s clean readouts already read (:func:`.removal.removal_sweep`'s)."""
    from .necessity import beside_modes
    from .removal import removal_sweep

    held = [k for k, c in necessity.items() if c.holds]
    modes = tuple(m for m in BESIDE_MODES if m not in sweep.harm)
    if not held or not modes:
        return None
    got = removal_sweep(adapter, corpus, objective, units=held, modes=modes, seed=seed, runner=runner, known=known)
    beside_modes(necessity, got)
    return got


def removal_table(sweep: Any) -> pd.DataFrame:
    """Tidy: ``layer, head, mode, objective, harm, ci_low, ci_high, count`` (+ secondary measures)."""
    from .statistics import mean_ci

    rows = []
    for i, unit in enumerate(sweep.units):
        ((layer, head),) = unit
        for mode, harm in sweep.harm.items():
            eff, lo, hi = mean_ci(harm[i], seed=i)
            row = {
                "layer": layer,
                "head": head,
                "mode": mode,
                "objective": sweep.objective,
                "harm": eff,
                "ci_low": lo,
                "ci_high": hi,
                "count": int(harm.shape[1]),
            }
            for name, vals in (sweep.measures.get(mode) or {}).items():
                row[name] = float(vals[i].mean())
            for name, vals in (sweep.corpus.get(mode) or {}).items():
                row[name] = float(vals[i])
            rows.append(row)
    return pd.DataFrame(rows)
