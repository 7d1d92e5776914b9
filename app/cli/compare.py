"""``probe compare A B [C …]``: heads across checkpoints of one architecture on one corpus
(a thin layer over :func:`probe.analyses.compare.run.compare_checkpoints`)."""

from __future__ import annotations

from typing import Any, Optional

import click

from .common import (
    configure_progress,
    device_option,
    force_option,
    input_options,
    limit_option,
    quiet_option,
    setup_logging,
    user_errors,
    verbose_option,
)
from .numbers import integer

#: what ``--out`` receives
WRITTEN = (
    "changes.csv (every measure per head and pair: a, b, change, ci_low, ci_high, p, significant, flagged), "
    "heads.csv (one row per pair and head, largest changes first), scores.csv (each measure per checkpoint), "
    "checkpoints.csv, icl.csv (causal LMs), phase.csv (3+ checkpoints of a causal LM), attribution.csv "
    "(--attribute), compare.json, compare.html and, for 3+ checkpoints, dynamics.png / phase.png"
)


@click.command("compare")
@click.argument("checkpoints", nargs=-1, required=True)
@input_options
@limit_option
@click.option("--out", "-o", required=True, type=click.Path(), help="output directory")
@click.option("--no-necessity", is_flag=True, help="skip the per-head ablation (the slowest measure)")
@click.option("--attribute", is_flag=True, help="patch each head from A into B and measure the objective")
@click.option(
    "--objective",
    default="auto",
    show_default=True,
    help="what necessity and attribution measure (auto: chosen per checkpoint and printed) | loss | accuracy "
    "(zoo) | prediction-kl | embedding-drift | next-token-loss | logit | logit:<class> | loss:<position> | mlm",
)
@click.option("--fdr", type=float, default=0.05, show_default=True, help="false discovery rate across heads")
@click.option("--n-boot", type=integer(min=10), default=1000, show_default=True, help="bootstrap resamples")
@click.option("--batch-size", type=integer(min=1), default=8, show_default=True)
@device_option
@force_option
@quiet_option
@verbose_option
@user_errors
def compare_cmd(
    checkpoints: tuple,
    text: tuple,
    file_: Optional[str],
    conllu: Optional[str],
    limit: Optional[int],
    out: str,
    no_necessity: bool,
    attribute: bool,
    objective: str,
    fdr: float,
    n_boot: int,
    batch_size: int,
    device: str,
    force: bool,
    quiet: bool,
    verbose: bool,
) -> None:
    """Compare checkpoints head by head: per head, the change of every role score and
    detector, of the pattern (Jensen–Shannon divergence on the same inputs) and of
    necessity, with bootstrap intervals paired by example and FDR across heads.

    CHECKPOINTS: model specs (minilm, hf:<path>, zoo:<task>), zoo model directories, or a
    training run's directory (`probe train zoo:<task> --checkpoint-every N`: all its
    checkpoints, by step; the scores are drawn against the step). A zoo checkpoint with
    no input runs on its task's evaluation set. Writes"""
    setup_logging(verbose)
    configure_progress()
    from probe.errors import InputError

    if not 0 < fdr < 1:
        raise InputError(f"--fdr must be in (0, 1), got {fdr}")
    from probe.app.registry.outdir import OutDir
    from probe.analyses.compare.run import compare_checkpoints
    from probe.inputs.corpus import load_corpus
    from probe.models.checkpoints import resolve_checkpoints

    target = OutDir(out, force)  # refused before any model is loaded when not empty
    resolved = resolve_checkpoints(checkpoints)
    if len(resolved) < 2:
        raise InputError(f"compare needs two or more checkpoints; {' '.join(checkpoints)} names {len(resolved)}")
    first = resolved[0]
    model = f"zoo:{first.task}" if first.task else (first.spec or "")
    corpus = load_corpus(text=text, file=file_, conllu=conllu, limit=limit, model=model)
    result = compare_checkpoints(
        resolved,
        corpus,
        device=device,
        necessity=not no_necessity,
        attribute=attribute,
        objective=objective,
        q=fdr,
        n_boot=n_boot,
        batch_size=batch_size,
    )
    from probe.app.report.compare_outputs import write_comparison

    with target as tmp:
        write_comparison(result, tmp)
    for w in result.warnings:
        click.echo(w, err=True)
    if not quiet:
        for line in result_lines(result):
            click.echo(line)
        click.echo(f"-> {out}")


def result_lines(result: Any) -> list:
    """What the command prints: per pair the flagged heads and the largest pattern changes."""
    lines = []
    for (a, b), g in result.heads.groupby(["from", "to"], sort=False):
        flagged = g[g["flagged"]]
        names = ", ".join(f"L{r.layer}H{r.head} ({r.flagged_measures})" for r in flagged.head(8).itertuples())
        more = f" and {len(flagged) - 8} more" if len(flagged) > 8 else ""
        lines.append(f"{a} -> {b}: {len(flagged)} of {len(g)} heads flagged" + (f": {names}{more}" if names else ""))
        top = ", ".join(
            f"L{r.layer}H{r.head} {r.jsd:.3f}" for r in g.sort_values("jsd", ascending=False).head(5).itertuples()
        )
        lines.append(f"  largest pattern change (JSD, bits): {top}")
    if result.phase is not None:
        for r in result.phase.itertuples():
            lines.append(
                f"phase change: {r.series} moves most from step {r.from_step} to {r.to_step} ({r.change:+.3f})"
            )
    return lines


compare_cmd.help = (compare_cmd.help or "") + WRITTEN + "."
COMMANDS = [compare_cmd]
