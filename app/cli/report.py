"""``probe report``: the per-head report (HTML, Markdown, JSON) of a model on a corpus;
its sections are the registered analyses that declare ``section``."""

from __future__ import annotations

from typing import Any, Optional

import click

from .numbers import integer
from .preflight import preflight

from .common import (
    configure_progress,
    device_option,
    engine_option,
    force_option,
    input_options,
    limit_option,
    model_option,
    quiet_option,
    setup_logging,
    user_errors,
    verbose_option,
)


def _sections_help() -> str:
    from probe.app.registry import registered

    names = ", ".join(a.name for a in registered() if a.section)
    return f"comma-separated sections to run (default: all that apply): {names}"


@click.command("report")
@model_option
@input_options
@limit_option
@click.option("--sections", default=None, help=_sections_help())
@click.option("--batch-size", type=integer(min=1), default=16, show_default=True)
@device_option
@click.option(
    "--memory-budget",
    default="2G",
    show_default=True,
    help="memory the run may use (e.g. 4G, 1500M): forwards with gradients are sized from the input "
    "length to fit; refused at once, with the smallest that works, when one row of the longest "
    "input does not fit",
)
@click.option(
    "--objective",
    default="auto",
    show_default=True,
    help="what the model is measured by, resolved once per use when the run opens: the metric of "
    "ablation and importance, the claims' necessity, faithfulness' target. auto (chosen per model and "
    "use, printed) | loss (masked-LM loss on the sentence's own tokens for an MLM, next-token loss for a "
    "causal LM, a zoo task's loss) | next-token-loss | accuracy (zoo) | similarity-structure (sentence "
    "encoders) | embedding-drift | logit | logit:<class> | loss:<position> | mlm | similarity | "
    "probe:subject-number | probe:tense; a use that does not know the name takes auto there (said in one "
    "line); one that does not fit the model is refused before any forward, naming those that do",
)
@click.option(
    "--max-model-examples",
    type=click.IntRange(min=0),
    default=None,
    help="examples the model-running sections (ablation, importance, claims) use; 0: every example "
    "(default: the first 128, stated in the report)",
)
@click.option(
    "--explained-examples",
    type=click.IntRange(min=0),
    default=None,
    help="examples faithfulness explains, drawn across the corpus stratified by length; 0: every example "
    "(default: as many as the attribution claim's power needs, stated in the report)",
)
@click.option(
    "--window",
    type=int,
    default=None,
    help="split inputs longer than N tokens into overlapping windows of N tokens, each analysed as "
    "an example (statistics average over windows)",
)
@click.option("--stride", type=int, default=None, help="tokens between window starts (default: half a window)")
@click.option("--truncate", is_flag=True, help="cut inputs longer than the model's limit to it")
@click.option(
    "--resume/--no-resume",
    default=True,
    show_default=True,
    help="keep each finished section beside OUT (.OUT.partial/) and resume a killed or failed run of "
    "the same command from them; --no-resume discards them and starts afresh",
)
@engine_option(("auto", "local", "stream", "ray"), default="auto")
@click.option(
    "--kept-examples",
    type=integer(min=1),
    default=None,
    help="with --engine stream|ray: examples captured whole for the pages and the sections that need "
    "whole maps or gradients (default 128, stated in the report); the corpus statistics use every example",
)
@click.option(
    "--null",
    type=click.Choice(["reinit", "permute", "none"]),
    default=None,
    help="the null model the claims (and faithfulness' agreement bar) are calibrated on: reinit (the model "
    "re-initialised), permute (its attention weights permuted across heads and layers), none (the floor "
    "alone); default: the toolkit's (docs/claims-statistics.md)",
)
@click.option(
    "--causal",
    type=click.Choice(["auto", "sequential", "exhaustive", "screened"]),
    default=None,
    help="the causal claims' path: auto (default: sequential where the model-run limit would cut the "
    "corpus, else exhaustive), "
    "sequential (necessity, weights and redundancy on every example, each head or group decided in random "
    "blocks and stopped when decided; the ablation section's removals the same; importance in random blocks "
    "until precise), exhaustive (every head removed on the model-run examples), screened (necessity: every "
    "example screened in one forward + backward per batch, the heads that could matter removed exactly; "
    "docs/screening.md)",
)
@click.option("--out", "-o", required=True, type=click.Path(), help="report directory (must be empty unless --force)")
@force_option
@quiet_option
@verbose_option
@user_errors
def report_cmd(
    *,
    text: tuple,
    file_: Optional[str],
    sections: Optional[str],
    memory_budget: str,
    window: Optional[int],
    stride: Optional[int],
    truncate: bool,
    quiet: bool,
    verbose: bool,
    **options: Any,
) -> None:
    """Write the per-head report to OUT: index.html (layer × head grid), a page per
    head, summary.json and report.md. With no input: the bundled sample sentences.
    Prints one line per section as it starts."""
    setup_logging(verbose)
    configure_progress()
    from probe.app.registry.outdir import check_out

    check_out(options["out"], options.get("force", False))  # a non-empty --out: refused before any import
    preflight(options.get("model"), (file_, options.get("conllu")))
    from probe.app.report.build import build_report
    from probe.inputs.budget import parse_size
    from probe.inputs.long_inputs import check_window

    budget = parse_size(memory_budget)  # bad values: one Error line before the model loads
    check_window(window, stride, truncate)
    names = [s.strip() for s in sections.split(",") if s.strip()] if sections is not None else None
    if names is not None and not names:  # ',' or '' is no section, not "every section"
        raise click.BadParameter(
            f"{sections!r} names no section; give sections like ablation,roles (or leave --sections out: "
            "all that apply)",
            param_hint="--sections",
        )
    progress = None if quiet else (lambda i, n, name: click.echo(f"[{i + 1}/{n}] {name} …", err=True))
    data = build_report(
        text=list(text) or None,
        file=file_,
        sections=names,
        progress=progress or False,
        memory_budget=budget,
        window=window,
        stride=stride,
        truncate=truncate,
        **options,  # the other options under build_report's names (model, out, objective, engine …)
    )
    _say_done(data, quiet)


def _say_done(data: Any, quiet: bool) -> None:
    """Each section's outcome (unless ``quiet``) and the line naming what was written."""
    if not quiet:
        for o in data.outcomes:
            click.echo(f"  {o.name:<12} {o.status}" + (f": {o.reason}" if o.reason else ""))
    kept = "" if data.ctx.report.on_engine is None else f", {len(data.ctx.report.on_engine.corpus)} in the statistics"
    took = data.built_in.split(" (")[0] if data.built_in else f"{data.seconds:.0f} s"
    click.echo(
        f"wrote {data.path}/index.html ({len(data.ctx.maps)} examples{kept}; built in {took}, as the index says)"
    )


COMMANDS = [report_cmd]
