"""Where self-attention starts to cost more FLOPs than recurrence (Vaswani et al. 2017, §4).

The paper: "self-attention layers are faster than recurrent layers when the sequence
length n is smaller than the representation dimensionality d". :func:`crossover_table`
finds, from measured FLOP counts, the smallest ``n`` at which one causal self-attention
layer (:mod:`probe.analyses.paper.complexity_layers`) costs more than one RNN, GRU or LSTM layer.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Dict, Optional, Sequence, Tuple

import pandas as pd

from probe.analyses.paper.complexity_layers import RECURRENT_KINDS, make_layer, validate_sizes
from probe.errors import InputError


def _poly_from_counts(counts: Dict[int, int]) -> Tuple[Fraction, Fraction, Fraction]:
    """Exact ``(c, a, b)`` with ``count(n) = c + a·n + b·n²`` through n = 1, 2, 3."""
    f1, f2, f3 = (Fraction(counts[n]) for n in (1, 2, 3))
    b = (f3 - 2 * f2 + f1) / 2
    a = f2 - f1 - 3 * b
    return f1 - a - b, a, b


def _flops(kind: str, n: int, d: int) -> int:
    import torch

    from probe.analyses.paper.complexity_measure import count_flops

    return count_flops(make_layer(kind, d), torch.zeros(n, d))["total"]


def crossover_table(
    d_values: Sequence[int],
    cells: Sequence[str] = RECURRENT_KINDS,
    *,
    grid: Optional[pd.DataFrame] = None,
    verify: bool = False,
) -> pd.DataFrame:
    """For each ``d`` and recurrent cell, the smallest ``n`` where self-attention costs more.

    FLOP counts of both layers are measured at ``n = 1, 2, 3, 4``; they are exact
    polynomials in ``n`` (self-attention 8·d²·n + 4·d·n², a ``g``-gate recurrence
    4·g·d²·n), so the quadratic through ``n = 1, 2, 3`` (checked at ``n = 4``, and at
    every grid point of ``grid`` when given) gives the crossover exactly. With
    ``verify`` it is also confirmed by counting both layers at ``n* - 1`` and ``n*``
    (a recurrent layer of ``n*`` steps: slow for large ``d``). Self-attention exceeds a
    ``g``-gate recurrence exactly when 4·d·n² > (4g - 8)·d²·n, i.e. ``n > (g - 2)·d``:
    the paper's "n < d" (§4) compares n²·d with n·d² and drops the four attention
    projections (8·n·d²), which a GRU's three gates happen to balance (crossover
    d + 1), an LSTM's four gates do not (2d + 1) and a tanh RNN's one gate cannot
    (self-attention always costs more).

    With ``grid`` (from :func:`probe.analyses.paper.complexity.measure_grid`), also the smallest
    grid ``n`` at which the measured FLOPs and the measured wall time of
    self-attention exceed the cell's.

    Returns:
        DataFrame ``d, recurrent, crossover_n, crossover_over_d, paper_n,
        crossover_n_grid, crossover_n_time_grid, flops_self_attention, flops_recurrent``.

    Raises:
        ValueError: bad sizes or cells; RuntimeError if the counts are not the
            polynomials expected or the verification fails.
    """
    d_values = validate_sizes("d", d_values)
    for cell in cells:
        if cell not in RECURRENT_KINDS:
            raise InputError(f"cells must be among {', '.join(RECURRENT_KINDS)}; got {cell!r}")
    rows = []
    for d in d_values:
        sa_counts = {n: _flops("self_attention", n, d) for n in (1, 2, 3, 4)}
        sa = _poly_from_counts(sa_counts)
        _check_poly("self_attention", sa, sa_counts, grid, d)
        for cell in cells:
            rec_counts = {n: _flops(cell, n, d) for n in (1, 2, 3, 4)}
            rec = _poly_from_counts(rec_counts)
            _check_poly(cell, rec, rec_counts, grid, d)
            n_star = _first_exceeding(sa, rec)
            if verify:
                _verify_crossover(cell, d, n_star)
            rows.append(
                dict(
                    d=d,
                    recurrent=cell,
                    crossover_n=n_star,
                    crossover_over_d=n_star / d,
                    paper_n=d,
                    crossover_n_grid=_grid_crossover(grid, d, cell, "flops"),
                    crossover_n_time_grid=_grid_crossover(grid, d, cell, "time_s"),
                    flops_self_attention=_poly_text(sa, d),
                    flops_recurrent=_poly_text(rec, d),
                )
            )
    out = pd.DataFrame(rows)
    for col in ("crossover_n_grid", "crossover_n_time_grid"):
        out[col] = out[col].astype("Int64")
    return out


def _check_poly(kind, poly, counts, grid, d) -> None:
    """Raise RuntimeError unless the polynomial reproduces every measured count."""
    c, a, b = poly
    measured = dict(counts)
    if grid is not None:
        part = grid[(grid.layer == kind) & (grid.d == d)]
        measured.update(zip(part["n"].astype(int), part["flops"].astype(int)))
    for n, count in measured.items():
        if c + a * n + b * n * n != count:
            raise RuntimeError(
                f"{kind}, d={d}: the FLOP count at n={n} ({count}) is off the quadratic through n=1,2,3 ({counts})"
            )


def _first_exceeding(sa, rec) -> int:
    """Smallest integer n >= 1 with sa(n) > rec(n) for it and every larger n."""
    c, a, b = (s - t for s, t in zip(sa, rec))
    value = lambda n: c + a * n + b * n * n  # noqa: E731
    if b < 0 or (b == 0 and a <= 0):
        raise RuntimeError("self-attention never costs more than the recurrence")
    if b == 0:
        roots = [-c / a]
    else:
        disc = a * a - 4 * b * c
        roots = [] if disc < 0 else [(-a + math.sqrt(disc)) / (2 * b)]
    n = max(1, math.floor(max(roots, default=0)) - 2)
    while value(n) <= 0:
        n += 1
    return n


def _verify_crossover(cell: str, d: int, n_star: int) -> None:
    if _flops("self_attention", n_star, d) <= _flops(cell, n_star, d):
        raise RuntimeError(f"d={d}: self-attention does not exceed {cell} at n={n_star}")
    if n_star > 1 and _flops("self_attention", n_star - 1, d) > _flops(cell, n_star - 1, d):
        raise RuntimeError(f"d={d}: self-attention already exceeds {cell} at n={n_star - 1}")


def _grid_crossover(grid, d, cell, column):
    if grid is None:
        return None
    sa = grid[(grid.layer == "self_attention") & (grid.d == d)].set_index("n")[column]
    rec = grid[(grid.layer == cell) & (grid.d == d)].set_index("n")[column]
    common = sa.index.intersection(rec.index).sort_values()
    above = [n for n in common if sa[n] > rec[n]]
    return int(above[0]) if above else None


def _poly_text(poly, d) -> str:
    _, a, b = poly
    parts = []
    if b:
        parts.append(f"{float(b / d):g}·d·n²")
    if a:
        parts.append(f"{float(a / (d * d)):g}·d²·n")
    return " + ".join(parts) or "0"
