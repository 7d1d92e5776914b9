"""``probe complexity``: Table 1 of Vaswani et al. (2017) measured on real layers —
FLOPs, time, memory, sequential operations and path lengths of each layer type."""

from __future__ import annotations

from typing import TYPE_CHECKING

import json

from probe.errors import InputError
from probe.app.registry import Analysis, Param, Result

if TYPE_CHECKING:
    from probe.app.registry import Context

DEFAULT_N = "16,32,...,1024"
DEFAULT_D = "16,32,...,512"
KINDS_HELP = (
    "comma-separated layer types (default all): self_attention, restricted_attention, rnn, gru, lstm, "
    "conv, dilated_conv, separable_conv"
)


def parse_sizes(spec: str, name: str) -> list:
    """'16,32,...,1024' → [16, 32, 64, …, 1024]; '8,100' → [8, 100].

    ``...`` continues the geometric progression set by the two values before it (or
    doubles after a single value) up to the value after it.

    Raises:
        ValueError: naming ``name``, for a non-integer or non-positive size or a ``...``
            without a value on each side.
    """
    parts = [p.strip() for p in str(spec).split(",") if p.strip()]
    if not parts:
        raise InputError(f"{name}: give at least one size")
    out: list = []
    pending = False
    for part in parts:
        if part in ("...", "…"):
            if not out or pending:
                raise InputError(f"{name}: '...' needs a size before it in {spec!r}")
            pending = True
            continue
        try:
            value = int(part)
        except ValueError:
            raise InputError(f"{name}: {part!r} is not an integer size") from None
        if value < 1:
            raise InputError(f"{name}: sizes must be positive integers; got {value}")
        if pending:
            ratio = out[-1] // out[-2] if len(out) >= 2 and out[-2] and out[-1] % out[-2] == 0 else 2
            ratio = max(ratio, 2)
            nxt = out[-1] * ratio
            while nxt < value:
                out.append(nxt)
                nxt *= ratio
            pending = False
        out.append(value)
    if pending:
        raise InputError(f"{name}: '...' needs a size after it in {spec!r}")
    return sorted(set(out))


def run(ctx: Context) -> Result:
    from probe.analyses.paper.complexity import analyze_complexity
    from probe.analyses.paper.complexity_layers import LAYER_KINDS

    p = ctx.params
    kinds = tuple(p["kinds"]) if p["kinds"] else LAYER_KINDS
    ns, ds = parse_sizes(p["n"], "--n"), parse_sizes(p["d"], "--d")
    report = analyze_complexity(
        ns,
        ds,
        kinds,
        k=p["k"],
        r=p["r"],
        repeats=p["repeats"],
        threads=p["threads"],
        max_bytes=int(p["max_memory"] * 2**30),
        graph_max_n=p["graph_max_n"],
        progress=ctx.progress,
    )
    notes = [
        f"{row.layer:<21} {row.complexity_paper:<16} {row.complexity_measured}"
        for row in report.summary.itertuples(index=False)
    ]
    if len(report.crossover):
        notes.append("self-attention costs more FLOPs than recurrence from n = (per d):")
        notes.append(report.crossover.pivot(index="d", columns="recurrent", values="crossover_n").to_string())

    def write(d):
        from probe.analyses.paper.complexity import to_markdown
        from probe.app.report.complexity_figures import complexity_plot

        (d / "settings.json").write_text(json.dumps(report.settings, indent=2))
        sections = [
            ("Table 1 of Vaswani et al. (2017), measured", report.summary),
            ("Fitted exponents (FLOPs; time for information)", report.exponents),
            ("Maximum path length (graph; * = closed form, past --graph-max-n)", report.paths),
            ("Crossover: smallest n where self-attention costs more FLOPs", report.crossover),
        ]
        (d / "summary.md").write_text("".join(f"## {t}\n\n{to_markdown(f)}\n" for t, f in sections))
        return [d / "settings.json", d / "summary.md", complexity_plot(report.grid, d / "complexity.png")]

    return Result(tables=dict(report.tables()), notes=notes, writers=[write])


ANALYSIS = Analysis(
    "complexity",
    "Table 1 of Vaswani et al. (2017) measured: FLOPs, exponents, path lengths, crossover",
    run,
    help="FLOPs, time, memory, sequential ops and path lengths of each layer type (Vaswani et al. 2017, "
    "Table 1), measured on real layers; no model or input needed.",
    params=(
        Param("n", str, DEFAULT_N, "sequence lengths: a,b,c or a,b,...,z (geometric)"),
        Param("d", str, DEFAULT_D, "model widths: a,b,c or a,b,...,z (geometric)"),
        Param("kinds", "names", None, KINDS_HELP, aliases=("--layers",)),
        Param("k", int, 3, "convolution kernel width"),
        Param("r", int, 16, "restricted attention window (keys)"),
        Param("repeats", int, 3, "timed forwards per point (fastest kept)", min=1),
        Param("threads", int, 1, "torch threads while timing", min=1),
        Param(
            "max_memory",
            float,
            4.0,
            "refuse grids whose largest layer needs more than this many GiB",
            min=0.0,
            min_open=True,
        ),
        Param(
            "graph_max_n", int, 256, "largest n whose path length is computed on the graph (closed form above)", min=1
        ),
    ),
    order=70,
    example="probe complexity --n 16,32,...,256 --d 16,32 --repeats 1 --out out/complexity",
)
