"""``probe complexity``: Table 1 of Vaswani et al. (2017) measured on real layers."""

from __future__ import annotations

import json
from pathlib import Path

import click

from .common import out_dir_option, setup_logging, user_errors, verbose_option

DEFAULT_N = "16,32,...,1024"
DEFAULT_D = "16,32,...,512"


def parse_sizes(spec: str, name: str) -> list:
    """'16,32,...,1024' → [16, 32, 64, …, 1024]; '8,100' → [8, 100].

    ``...`` continues the geometric progression set by the two values before it (or
    doubles after a single value) up to the value after it.

    Raises:
        click.BadParameter: naming ``name``, for a non-integer or non-positive size or
            a ``...`` without a value on each side.
    """
    parts = [p.strip() for p in str(spec).split(",") if p.strip()]
    if not parts:
        raise click.BadParameter("give at least one size", param_hint=name)
    out: list = []
    pending = False
    for part in parts:
        if part in ("...", "…"):
            if not out or pending:
                raise click.BadParameter(f"'...' needs a size before it in {spec!r}", param_hint=name)
            pending = True
            continue
        try:
            value = int(part)
        except ValueError:
            raise click.BadParameter(f"{part!r} is not an integer size", param_hint=name) from None
        if value < 1:
            raise click.BadParameter(f"sizes must be positive integers; got {value}", param_hint=name)
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
        raise click.BadParameter(f"'...' needs a size after it in {spec!r}", param_hint=name)
    return sorted(set(out))


@click.command("complexity")
@click.option("--n", "n_spec", default=DEFAULT_N, show_default=True,
              help="sequence lengths: a,b,c or a,b,...,z (geometric)")
@click.option("--d", "d_spec", default=DEFAULT_D, show_default=True,
              help="model widths: a,b,c or a,b,...,z (geometric)")
@click.option("--layers", default=None,
              help="comma-separated layer types (default all): self_attention, restricted_attention, "
                   "rnn, gru, lstm, conv, dilated_conv, separable_conv")
@click.option("--k", type=int, default=3, show_default=True, help="convolution kernel width")
@click.option("--r", type=int, default=16, show_default=True, help="restricted attention window (keys)")
@click.option("--repeats", type=click.IntRange(min=1), default=3, show_default=True,
              help="timed forwards per point (fastest kept)")
@click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True,
              help="torch threads while timing")
@click.option("--max-memory", type=click.FloatRange(min=0, min_open=True), default=4.0, show_default=True,
              help="refuse grids whose largest layer needs more than this many GiB")
@click.option("--graph-max-n", type=click.IntRange(min=1), default=256, show_default=True,
              help="largest n whose path length is computed on the graph (closed form above)")
@out_dir_option
@verbose_option
@user_errors
def complexity_cmd(n_spec, d_spec, layers, k, r, repeats, threads, max_memory, graph_max_n, out, verbose):
    """FLOPs, time, memory, sequential ops and path lengths of each layer type (Table 1)."""
    setup_logging(verbose)
    from probe.analyses.paper.complexity import analyze_complexity
    from probe.analyses.paper.complexity_layers import LAYER_KINDS

    kinds = LAYER_KINDS if not layers else tuple(s.strip() for s in layers.split(",") if s.strip())
    report = analyze_complexity(
        parse_sizes(n_spec, "--n"), parse_sizes(d_spec, "--d"), kinds, k=k, r=r,
        repeats=repeats, threads=threads, max_bytes=int(max_memory * 2**30),
        graph_max_n=graph_max_n, progress=True,
    )
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    _write(report, out_dir)
    for row in report.summary.itertuples(index=False):
        click.echo(f"{row.layer:<21} {row.complexity_paper:<16} {row.complexity_measured}")
    if len(report.crossover):
        click.echo("self-attention costs more FLOPs than recurrence from n = (per d):")
        table = report.crossover.pivot(index="d", columns="recurrent", values="crossover_n")
        click.echo(table.to_string())
    click.echo(f"tables, summary.md and complexity.png in {out_dir}")


def _write(report, out_dir: Path) -> None:
    from probe.analyses.paper.complexity import to_markdown

    for name, frame in report.tables().items():
        frame.to_csv(out_dir / f"{name}.csv", index=False)
    (out_dir / "settings.json").write_text(json.dumps(report.settings, indent=2))
    sections = [
        ("Table 1 of Vaswani et al. (2017), measured", report.summary),
        ("Fitted exponents (FLOPs; time for information)", report.exponents),
        ("Maximum path length (graph; * = closed form, past --graph-max-n)", report.paths),
        ("Crossover: smallest n where self-attention costs more FLOPs", report.crossover),
    ]
    text = "".join(f"## {title}\n\n{to_markdown(frame)}\n" for title, frame in sections)
    (out_dir / "summary.md").write_text(text)
    _plot(report.grid, out_dir / "complexity.png")


def _plot(grid, path: Path) -> None:
    """Log–log FLOPs, wall time and peak memory against n, one column per chosen d."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    ds = sorted(grid["d"].unique())
    ds = sorted({ds[0], ds[len(ds) // 2], ds[-1]})
    metrics = [("flops", "FLOPs"), ("time_s", "wall time (s)"), ("peak_bytes", "peak memory (bytes)")]
    fig, axes = plt.subplots(len(metrics), len(ds), figsize=(4.2 * len(ds), 9), squeeze=False)
    for col, d in enumerate(ds):
        part = grid[grid["d"] == d]
        for row, (metric, label) in enumerate(metrics):
            ax = axes[row][col]
            for kind, sub in part.groupby("layer", sort=False):
                ax.plot(sub["n"], sub[metric], marker="o", ms=3, label=kind)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("n")
            ax.set_ylabel(label)
            if row == 0:
                ax.set_title(f"d = {d}")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


COMMANDS = [complexity_cmd]
