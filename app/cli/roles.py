"""``probe roles``: name what each head does, with the evidence, over a corpus.

Writes ``--out`` (roles.csv: ``layer, head, role, confidence, decided_by, also``, every
feature, ``mds_x, mds_y, cluster``) and beside it ``<stem>.layers.csv`` (per-layer share
of attention to [CLS], [SEP], punctuation), ``<stem>.counts.csv`` (heads per role),
``<stem>.distances.csv`` (head × head JS divergence), ``<stem>.json`` (settings and
counts), and the figures ``<stem>.png`` (layer × head grid) and ``<stem>.mds.png``.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from .common import (device_option, engine_option, engine_settings, input_options, limit_option, model_option,
                     setup_logging, user_errors, verbose_option)


def _source(model, text, file_, conllu, limit, store_dir, device, batch_size):
    """A Store (existing, or captured into --store) or a stream of freshly captured maps."""
    given = bool(text or file_ or conllu)
    if store_dir and not given and (Path(store_dir) / "manifest.json").exists():
        from probe.store import Store

        return Store(store_dir), f"store {store_dir}"
    if store_dir and not given and not model.startswith("zoo:"):
        raise ValueError(f"{store_dir} is not a store (no manifest.json): give an input "
                         "(--text, --file or --conllu) to capture into it")
    from probe.models import load_model
    from probe.inputs import fit_to_model, load_corpus

    corpus = load_corpus(text=text, file=file_, conllu=conllu, limit=limit, model=model)
    adapter = load_model(model, device=device)
    if store_dir:
        from probe.pipeline import capture_corpus

        store = capture_corpus(adapter, corpus, store_dir, batch_size=batch_size, progress=len(corpus) > 1)
        return store, f"{adapter.name} on {corpus.source} (store {store_dir})"
    from probe.capture import iter_capture

    fitted = fit_to_model(corpus, adapter)
    stream = iter_capture(adapter, fitted.texts, word_spans=fitted.word_spans, batch_size=batch_size,
                          progress=len(fitted) > 1, total=len(fitted))
    return stream, f"{adapter.name} on {corpus.source}"


def _thresholds(items) -> dict:
    """NAME=VALUE pairs → keyword arguments, checked before any model is loaded."""
    from probe.analyses.patterns.roles import RoleThresholds

    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            out[name.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep:
            raise click.BadParameter(f"expected NAME=VALUE, got {item!r}", param_hint="--threshold")
    try:
        RoleThresholds(**out)
    except TypeError:
        known = ", ".join(RoleThresholds.__dataclass_fields__)
        raise click.BadParameter(f"unknown threshold in {list(out)}; known: {known}",
                                 param_hint="--threshold") from None
    return out


def _evidence(path, name):
    if not path:
        return None
    import pandas as pd

    try:
        return pd.read_csv(path)
    except (OSError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read the {name} table {path}: {exc}") from None


@click.command("roles")
@model_option
@input_options
@limit_option
@click.option("--store", "store_dir", type=click.Path(file_okay=False), default=None,
              help="read this store (from `probe capture`); with an input, capture into it (resumable)")
@click.option("--out", "-o", required=True, type=click.Path(dir_okay=False), help="roles CSV path")
@click.option("--level", type=click.Choice(["token", "word"]), default="token", show_default=True,
              help="features that decide the roles (both levels are written)")
@click.option("--syntax", "syntax_csv", type=click.Path(dir_okay=False, exists=True), default=None,
              help="best.csv of the syntax analysis: labels 'syntactic (<rel>)' heads")
@click.option("--coreference", "coref_csv", type=click.Path(dir_okay=False, exists=True), default=None,
              help="table of the same shape for coreference")
@click.option("--clusters", type=click.IntRange(min=0), default=8, show_default=True,
              help="agglomerative clusters of heads (0: no clustering)")
@click.option("--cluster-examples", type=click.IntRange(min=1), default=100, show_default=True,
              help="examples used for the head × head JS divergences")
@click.option("--min-examples", type=click.IntRange(min=1), default=100, show_default=True,
              help="warn below this many examples")
@click.option("--threshold", "thresholds", multiple=True, metavar="NAME=VALUE",
              help="override a rule threshold, e.g. positional=0.8 (see probe.analyses.patterns.roles.RoleThresholds)")
@click.option("--batch-size", type=click.IntRange(min=1), default=16, show_default=True)
@click.option("--no-figure", is_flag=True, help="write the tables only")
@device_option
@engine_option
@verbose_option
@user_errors
def roles_cmd(model, text, file_, conllu, limit, store_dir, out, level, syntax_csv, coref_csv, clusters,
              cluster_examples, min_examples, thresholds, batch_size, no_figure, device, engine, address, workers,
              verbose):
    """Classify every head (previous-token, special-token, broad, induction, …) with its evidence."""
    setup_logging(verbose)
    from probe.analyses.patterns.roles import roles_report

    overrides = _thresholds(thresholds)
    run = engine_settings(engine, address, workers, device)
    evidence = dict(coreference=_evidence(coref_csv, "coreference"), n_clusters=clusters or None,
                    cluster_examples=cluster_examples, level=level, min_examples=min_examples)
    if run and not store_dir:
        from probe.app.engine import analyses
        from probe.inputs import load_corpus

        corpus = load_corpus(text=text, file=file_, conllu=conllu, limit=limit, model=model)
        report = analyses.roles(model, corpus, syntax_table=_evidence(syntax_csv, "syntax"), batch_size=batch_size,
                                thresholds=overrides, **evidence, **run)
        described = f"{model} on {corpus.source} (--engine {engine})"
    else:
        source, described = _source(model, text, file_, conllu, limit, store_dir, device, batch_size)
        report = roles_report(source, syntax=_evidence(syntax_csv, "syntax"), progress=verbose, **evidence,
                              **overrides)
    files = _write(report, Path(out), described, no_figure)
    counts = ", ".join(f"{r.role} {r.heads}" for r in report.counts.itertuples(index=False))
    click.echo(f"{len(report.roles)} heads from {report.n_examples} examples ({described}): {counts}")
    if report.n_examples < min_examples:
        click.echo(f"warning: only {report.n_examples} examples (< {min_examples}); the roles are unstable",
                   err=True)
    click.echo("wrote " + ", ".join(str(f) for f in files))


def _write(report, out: Path, described: str, no_figure: bool) -> list:
    out.parent.mkdir(parents=True, exist_ok=True)
    stem = out.with_suffix("")
    files = [out, Path(f"{stem}.layers.csv"), Path(f"{stem}.counts.csv"), Path(f"{stem}.json")]
    report.roles.to_csv(out, index=False)
    report.layers.to_csv(files[1], index=False)
    report.counts.to_csv(files[2], index=False)
    summary = {"source": described, "n_examples": report.n_examples,
               "counts": dict(zip(report.counts.role, map(int, report.counts.heads)))}
    if report.clusters is not None:
        dist = Path(f"{stem}.distances.csv")
        report.clusters.distances_frame().to_csv(dist)
        files.append(dist)
        summary["cluster_examples"] = report.clusters.divergence.n_examples
    files[3].write_text(json.dumps(summary, indent=2))
    if not no_figure:
        from probe.app.report.roles_figures import head_map_figure, role_grid_figure

        files.append(role_grid_figure(report.roles, f"{stem}.png", title=f"head roles: {described}"))
        if report.clusters is not None:
            files.append(head_map_figure(report.roles, f"{stem}.mds.png"))
    return files


COMMANDS = [roles_cmd]
