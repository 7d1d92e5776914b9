"""``probe report``: the per-head report (HTML, Markdown, JSON) of a model on a corpus."""

from __future__ import annotations

import click

from .common import (device_option, input_options, limit_option, model_option, setup_logging, user_errors,
                     verbose_option)


@click.command("report")
@model_option
@input_options
@limit_option
@click.option("--out", "-o", required=True, type=click.Path(file_okay=False), help="report directory")
@click.option("--force", is_flag=True, help="replace --out when it exists")
@click.option("--sections", default=None,
              help="comma-separated sections to run (default: all that apply), e.g. roles,syntax")
@click.option("--batch-size", type=click.IntRange(min=1), default=16, show_default=True)
@device_option
@verbose_option
@user_errors
def report_cmd(model, text, file_, conllu, limit, out, force, sections, batch_size, device, verbose):
    """Write the per-head report to OUT: index.html (layer × head grid), a page per
    head, summary.json and report.md. With no input: the bundled sample sentences."""
    setup_logging(verbose)
    from probe.app.report.build import build_report

    names = [s.strip() for s in sections.split(",") if s.strip()] if sections else None
    data = build_report(out, model=model, text=list(text) or None, file=file_, conllu=conllu, limit=limit,
                        force=force, sections=names, device=device, batch_size=batch_size,
                        progress=verbose)
    for o in data.outcomes:
        click.echo(f"  {o.name:<12} {o.status}" + (f": {o.reason}" if o.reason else ""))
    click.echo(f"wrote {data.path}/index.html ({len(data.ctx.maps)} examples, {data.seconds:.0f}s)")


COMMANDS = [report_cmd]
