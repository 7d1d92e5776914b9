""" "Why self-attention", measured: Table 1 of Vaswani et al. (2017) from real layers.

For every layer type of :mod:`probe.analyses.paper.complexity_layers` and every ``(n, d)`` of a grid
(``n`` sequence length, ``d`` model width) one layer is measured with
:func:`probe.analyses.paper.complexity_measure.measure_layer`: FLOPs (torch's FLOP counter, split
into the layer's cost terms), the longest chain of dependent operations, peak memory
and wall time. From these:

* :func:`fit_exponents` — the exponents of ``n`` (at fixed ``d``) and of ``d`` (at
  fixed ``n``) by log–log least squares, for each cost term *in the regime where that
  term dominates* (its measured share of the layer's FLOPs is at least ``dominance``).
  Self-attention, for instance, costs 8·n·d² + 4·n²·d FLOPs, so its n² only shows once
  n ≫ d; the table says which sizes were used.
* :func:`probe.analyses.paper.complexity_crossover.crossover_table` — for each ``d``, the smallest ``n`` at which self-attention
  needs more FLOPs than a recurrent layer (the paper's "n < d" remark, §4).
* :func:`probe.analyses.paper.complexity_paths.path_length_table` — maximum path lengths.
* :func:`summary_table` — all of it beside the paper's Table 1.

:func:`analyze_complexity` runs everything and returns a :class:`ComplexityReport`.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Sequence, Tuple

import numpy as np
import pandas as pd

from probe.analyses.paper.complexity_layers import (
    EXTRA_TERMS,
    LAYER_KINDS,
    RECURRENT_KINDS,
    TERM_EXPONENTS,
    check_positive_int,
    estimate_peak_bytes,
    make_layer,
    validate_sizes,
)
from probe.errors import InputError

log = logging.getLogger(__name__)

DEFAULT_N = (16, 32, 64, 128, 256, 512, 1024)
DEFAULT_D = (16, 32, 64, 128, 256, 512)
DEFAULT_MAX_BYTES = 4 * 2**30

#: the paper's Table 1 (plus the separable convolution of §4), keyed by layer type
PAPER_COMPLEXITY = {
    "self_attention": "O(n²·d)",
    "restricted_attention": "O(r·n·d)",
    "rnn": "O(n·d²)",
    "gru": "O(n·d²)",
    "lstm": "O(n·d²)",
    "conv": "O(k·n·d²)",
    "dilated_conv": "O(k·n·d²)",
    "separable_conv": "O(k·n·d + n·d²)",
}


def check_memory(
    n_values: Sequence[int],
    d_values: Sequence[int],
    kinds: Iterable[str] = LAYER_KINDS,
    *,
    k: int = 3,
    r: int = 16,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> int:
    """Refuse a grid whose largest point would not fit in ``max_bytes``.

    Every estimate (:func:`probe.analyses.paper.complexity_layers.estimate_peak_bytes`) grows with
    ``n`` and ``d``, so the largest point decides. Returns the largest estimate.

    Raises:
        ValueError: naming the layer, the grid point and the estimate, when the
            estimate exceeds ``max_bytes``.
    """
    n, d = max(n_values), max(d_values)
    worst, worst_kind = 0, None
    for kind in kinds:
        need = estimate_peak_bytes(kind, n, d, k=k, r=r)
        if need > worst:
            worst, worst_kind = need, kind
    if worst > max_bytes:
        raise InputError(
            f"grid point n={n}, d={d} needs about {worst / 2**30:.2f} GiB for one "
            f"{worst_kind} layer, above the memory limit of {max_bytes / 2**30:.2f} GiB; "
            "use smaller n/d values or raise the limit (max_bytes, --max-memory)"
        )
    return worst


def measure_grid(
    n_values: Sequence[int] = DEFAULT_N,
    d_values: Sequence[int] = DEFAULT_D,
    kinds: Sequence[str] = LAYER_KINDS,
    *,
    k: int = 3,
    r: int = 16,
    repeats: int = 3,
    threads: int = 1,
    max_bytes: int = DEFAULT_MAX_BYTES,
    progress: bool = False,
) -> Tuple[pd.DataFrame, pd.DataFrame]:
    """Measure every layer type at every ``(n, d)`` of the grid.

    Returns:
        ``(grid, terms)``: ``grid`` has one row per ``(layer, n, d)`` with columns
        ``layer, n, d, k, r, flops, sequential_ops, peak_bytes, time_s``; ``terms`` has
        one row per ``(layer, n, d, term)`` with ``flops`` and ``share`` (of the
        layer's FLOPs) and ``in_paper`` (False for attention's projections).

    Raises:
        ValueError: non-positive or non-integer sizes (naming ``n``, ``d``, ``k``,
            ``r``), unknown layer types, or a grid over ``max_bytes`` (with the estimate).
    """
    from probe.analyses.paper.complexity_measure import measure_layer

    n_values, d_values = validate_sizes("n", n_values), validate_sizes("d", d_values)
    kinds = _validate_kinds(kinds)
    k, r = check_positive_int("k", k, 2), check_positive_int("r", r, 2)
    check_memory(n_values, d_values, kinds, k=k, r=r, max_bytes=max_bytes)
    points = [(kind, d, n) for kind in kinds for d in d_values for n in n_values]
    if progress:
        from tqdm.auto import tqdm

        points = tqdm(points, desc="complexity grid", unit="layer")
    rows, term_rows = [], []
    layer: Any = None
    built = None
    for kind, d, n in points:
        if built != (kind, d):
            layer, built = make_layer(kind, d, k=k, r=r), (kind, d)
        cost = measure_layer(layer, n, repeats=repeats, threads=threads)
        rows.append(
            dict(
                layer=kind,
                n=n,
                d=d,
                k=k,
                r=r,
                flops=cost.flops,
                sequential_ops=cost.sequential_ops,
                peak_bytes=cost.peak_bytes,
                time_s=cost.time_s,
            )
        )
        for term, flops in cost.term_flops.items():
            term_rows.append(
                dict(
                    layer=kind,
                    n=n,
                    d=d,
                    term=term,
                    flops=flops,
                    share=flops / cost.flops if cost.flops else float("nan"),
                    in_paper=term not in EXTRA_TERMS,
                )
            )
        log.debug("%s n=%d d=%d: %d FLOPs, %.4fs", kind, n, d, cost.flops, cost.time_s)
    return pd.DataFrame(rows), pd.DataFrame(term_rows)


def _validate_kinds(kinds: Iterable[str]) -> Tuple[str, ...]:
    kinds = tuple(kinds)
    if not kinds:
        raise InputError("choose at least one layer type")
    for kind in kinds:
        if kind not in LAYER_KINDS:
            raise InputError(f"unknown layer type {kind!r}; choose from {', '.join(LAYER_KINDS)}")
    return kinds


def _within_slope(x: np.ndarray, y: np.ndarray, groups: np.ndarray) -> float:
    """Least-squares slope of y on x with one intercept per group (NaN if x never varies)."""
    num = den = 0.0
    for g in np.unique(groups):
        sel = groups == g
        if sel.sum() < 2:
            continue
        xs, ys = x[sel] - x[sel].mean(), y[sel] - y[sel].mean()
        num += float((xs * ys).sum())
        den += float((xs * xs).sum())
    return num / den if den > 0 else float("nan")


def fit_exponents(
    grid: pd.DataFrame,
    terms: pd.DataFrame,
    *,
    dominance: float = 0.9,
    tolerance: float = 0.15,
) -> pd.DataFrame:
    """Log–log least-squares exponents of ``n`` and ``d``, per term, where it dominates.

    For each layer and cost term, the regime is the grid points where the term's
    measured share of the layer's FLOPs is at least ``dominance``. The exponent of
    ``n`` is the slope of log FLOPs (and of log time) on log n with one intercept per
    ``d`` (so "at fixed d"), over the ``d`` values with two or more ``n`` in the regime;
    likewise for ``d`` at fixed ``n``. A term that never dominates on the grid gets
    NaN. Sequential operations are fitted against ``n`` over the whole grid.

    Returns:
        DataFrame with columns ``layer, term, in_paper, variable, paper_exponent,
        fitted_flops, fitted_time, points, n_range, d_range, regime, within_tolerance``
        (``within_tolerance`` is ``|fitted_flops - paper_exponent| <= tolerance``, NA
        without a fit).

    Raises:
        ValueError: ``dominance`` not in (0.5, 1] or ``tolerance`` negative.
    """
    if not 0.5 < dominance <= 1:
        raise InputError(f"dominance must be in (0.5, 1]; got {dominance}")
    if tolerance < 0:
        raise InputError(f"tolerance must be >= 0; got {tolerance}")
    merged = terms.merge(grid[["layer", "n", "d", "flops", "time_s"]], on=["layer", "n", "d"], suffixes=("_term", ""))
    rows: List[dict] = []
    for (kind, term), part in merged.groupby(["layer", "term"], sort=False):
        regime = part[part["share"] >= dominance]
        for var, other, paper in (("n", "d", TERM_EXPONENTS[term][0]), ("d", "n", TERM_EXPONENTS[term][1])):
            x = np.log(regime[var].to_numpy(float))
            fitted = {
                m: _within_slope(x, np.log(regime[m].to_numpy(float)), regime[other].to_numpy())
                for m in ("flops", "time_s")
            }
            rows.append(
                _fit_row(
                    kind,
                    term,
                    term not in EXTRA_TERMS,
                    var,
                    paper,
                    fitted,
                    regime,
                    f"{term} ≥ {dominance:.0%} of FLOPs",
                    tolerance,
                )
            )
    for kind, part in grid.groupby("layer", sort=False):
        x = np.log(part["n"].to_numpy(float))
        seq = _within_slope(x, np.log(part["sequential_ops"].to_numpy(float)), part["d"].to_numpy())
        paper = 1 if kind in RECURRENT_KINDS else 0
        rows.append(
            _fit_row(
                kind,
                "sequential operations",
                True,
                "n",
                paper,
                {"flops": seq, "time_s": float("nan")},
                part,
                "all sizes",
                tolerance,
            )
        )
    out = pd.DataFrame(rows)
    out["within_tolerance"] = out["within_tolerance"].astype("boolean")
    return out


def _fit_row(kind, term, in_paper, var, paper, fitted, regime, text, tolerance) -> dict:
    fit = fitted["flops"]

    def span(col):
        return f"{regime[col].min()}–{regime[col].max()}" if len(regime) else ""

    return dict(
        layer=kind,
        term=term,
        in_paper=in_paper,
        variable=var,
        paper_exponent=paper,
        fitted_flops=fit,
        fitted_time=fitted["time_s"],
        points=int(len(regime)),
        n_range=span("n"),
        d_range=span("d"),
        regime=text,
        within_tolerance=None if math.isnan(fit) else bool(abs(fit - paper) <= tolerance),
    )


def _exponent_text(exps: pd.DataFrame, kind: str) -> str:
    parts = []
    for term, part in exps[(exps.layer == kind) & exps.in_paper & (exps.term != "sequential operations")].groupby(
        "term", sort=False
    ):
        fit = dict(zip(part.variable, part.fitted_flops))
        if math.isnan(fit["n"]):
            parts.append(f"{term}: does not dominate on this grid")
            continue
        regime = part.iloc[0]
        d_part = "d not varied" if math.isnan(fit["d"]) else f"d^{fit['d']:.2f}"
        parts.append(f"{term}: n^{fit['n']:.2f}·{d_part} (n {regime.n_range}, d {regime.d_range})")
    return "; ".join(parts)


def summary_table(grid: pd.DataFrame, exponents: pd.DataFrame, paths: pd.DataFrame) -> pd.DataFrame:
    """One row per layer type: the paper's Table 1 columns beside the measured ones.

    Columns ``layer, complexity_paper, complexity_measured, sequential_paper,
    sequential_measured, path_paper, path_closed_form, path_measured`` (text).
    ``complexity_measured`` gives the fitted FLOP exponents of each paper term in the
    regime where it dominates; ``sequential_measured`` the range of the longest
    dependent-operation chain and its fitted exponent of ``n``; ``path_measured`` the
    graph (or, past the graph limit, closed-form) path length at each ``n``.
    """
    rows = []
    for kind in grid["layer"].unique():
        part = grid[grid.layer == kind]
        seq_fit = exponents[(exponents.layer == kind) & (exponents.term == "sequential operations")]
        seq_exp = float(seq_fit.fitted_flops.iloc[0]) if len(seq_fit) else float("nan")
        p = paths[paths.layer == kind].sort_values("n")
        measured = [
            f"{int(v if not pd.isna(v) else c)}" + ("" if not pd.isna(v) else "*")
            for v, c in zip(p.path_length_graph, p.path_length_closed_form)
        ]
        rows.append(
            dict(
                layer=kind,
                complexity_paper=PAPER_COMPLEXITY[kind],
                complexity_measured=_exponent_text(exponents, kind),
                sequential_paper="O(n)" if kind in RECURRENT_KINDS else "O(1)",
                sequential_measured=(f"{part.sequential_ops.min()}–{part.sequential_ops.max()} ops, ∝ n^{seq_exp:.2f}"),
                path_paper=p.paper.iloc[0] if len(p) else "",
                path_closed_form=p.closed_form.iloc[0] if len(p) else "",
                path_measured=", ".join(f"{n}: {m}" for n, m in zip(p.n, measured)),
            )
        )
    return pd.DataFrame(rows)


def to_markdown(frame: pd.DataFrame, floatfmt: str = ".3g") -> str:
    """A GitHub-flavoured Markdown table of ``frame`` (no extra dependency)."""

    def cell(v):
        if isinstance(v, float):
            return "" if math.isnan(v) else format(v, floatfmt)
        return "" if v is None or v is pd.NA else str(v)

    lines = ["| " + " | ".join(map(str, frame.columns)) + " |", "| " + " | ".join("---" for _ in frame.columns) + " |"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True, eq=False)
class ComplexityReport:
    """Everything :func:`analyze_complexity` measured (all tidy DataFrames).

    Attributes:
        grid: one row per (layer, n, d): FLOPs, sequential ops, peak bytes, time.
        terms: FLOPs and share per (layer, n, d, cost term).
        exponents: fitted exponents per (layer, term, variable) (:func:`fit_exponents`).
        paths: path lengths per (layer, n) (:func:`~probe.analyses.paper.complexity_paths.path_length_table`).
        crossover: per (d, recurrent cell) (:func:`~probe.analyses.paper.complexity_crossover.crossover_table`).
        summary: the Table 1 comparison (:func:`summary_table`).
        settings: the arguments used (JSON-able).
    """

    grid: pd.DataFrame
    terms: pd.DataFrame
    exponents: pd.DataFrame
    paths: pd.DataFrame
    crossover: pd.DataFrame
    summary: pd.DataFrame
    settings: dict = field(default_factory=dict)

    def to_frame(self) -> pd.DataFrame:
        """The Table 1 comparison (``summary``)."""
        return self.summary

    def tables(self) -> Dict[str, pd.DataFrame]:
        """Every table by name: grid, terms, exponents, paths, crossover, summary."""
        return {name: getattr(self, name) for name in ("grid", "terms", "exponents", "paths", "crossover", "summary")}


def analyze_complexity(
    n_values: Sequence[int] = DEFAULT_N,
    d_values: Sequence[int] = DEFAULT_D,
    kinds: Sequence[str] = LAYER_KINDS,
    *,
    k: int = 3,
    r: int = 16,
    repeats: int = 3,
    threads: int = 1,
    max_bytes: int = DEFAULT_MAX_BYTES,
    dominance: float = 0.9,
    tolerance: float = 0.15,
    graph_max_n: int = 256,
    progress: bool = False,
) -> ComplexityReport:
    """Measure the grid, fit exponents, compute path lengths and the crossover.

    See :func:`measure_grid` (``repeats``, ``threads``, ``max_bytes``),
    :func:`fit_exponents` (``dominance``, ``tolerance``),
    :func:`probe.analyses.paper.complexity_paths.path_length_table` (``graph_max_n``) and
    :func:`probe.analyses.paper.complexity_crossover.crossover_table` (needs ``self_attention``
    and at least one recurrent layer in ``kinds``; empty otherwise). Vaswani et al.
    (2017), Table 1 and §4.

    Raises:
        ValueError: bad sizes (naming the parameter), fewer than two sizes of ``n`` (no
            exponent can be fitted), unknown layer types, a grid
            that would not fit in ``max_bytes`` (with the estimate), or bad fit settings.
    """
    from probe.analyses.paper.complexity_crossover import crossover_table
    from probe.analyses.paper.complexity_paths import path_length_table

    n_values, d_values = validate_sizes("n", n_values), validate_sizes("d", d_values)
    if len(set(n_values)) < 2:
        raise InputError(
            f"n needs at least two different sizes (got {sorted(set(n_values))}): exponents are "
            "fitted from how the cost changes with n; e.g. --n 16,32,...,256"
        )
    kinds = _validate_kinds(kinds)
    graph_max_n = check_positive_int("graph_max_n", graph_max_n)
    if not 0.5 < dominance <= 1:
        raise InputError(f"dominance must be in (0.5, 1]; got {dominance}")
    if tolerance < 0:
        raise InputError(f"tolerance must be >= 0; got {tolerance}")
    grid, terms = measure_grid(
        n_values, d_values, kinds, k=k, r=r, repeats=repeats, threads=threads, max_bytes=max_bytes, progress=progress
    )
    exponents = fit_exponents(grid, terms, dominance=dominance, tolerance=tolerance)
    paths = path_length_table(n_values, kinds, k=k, r=r, graph_max_n=graph_max_n)
    cells = [c for c in kinds if c in RECURRENT_KINDS]
    if "self_attention" in kinds and cells:
        crossover = crossover_table(d_values, cells, grid=grid)
    else:
        crossover = pd.DataFrame(columns=["d", "recurrent", "crossover_n"])
    settings = dict(
        n=list(n_values),
        d=list(d_values),
        layers=list(kinds),
        k=k,
        r=r,
        repeats=repeats,
        threads=threads,
        max_bytes=max_bytes,
        dominance=dominance,
        tolerance=tolerance,
        graph_max_n=graph_max_n,
    )
    return ComplexityReport(grid, terms, exponents, paths, crossover, summary_table(grid, exponents, paths), settings)
