"""Core commands: ``probe models``, ``probe capture``, ``probe heatmap``."""

from __future__ import annotations

from probe.errors import InputError

import json
from pathlib import Path
from typing import Any, Optional

import click

from .numbers import integer

from .common import (
    configure_progress,
    device_option,
    dtype_option,
    engine_option,
    force_option,
    input_options,
    limit_option,
    model_option,
    parse_head,
    parse_int_list,
    quiet_option,
    setup_logging,
    user_errors,
    verbose_option,
)


@click.command("models")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@click.option(
    "--architectures",
    is_flag=True,
    help="also the tested architectures and the path capture takes for "
    "each (attention interface or hooks); imports transformers, so it takes seconds",
)
@user_errors
def models_cmd(as_json: bool, architectures: bool) -> None:
    """List the models the toolkit can open (name, source, layers, heads), from their
    config files and cards (no weights, no torch: well under a second)."""
    from probe.models.catalog import list_models

    rows = list_models()
    archs: list = []
    if architectures:
        from probe.models.architectures import supported_architectures

        archs = supported_architectures()
    if as_json:
        rows = rows + [{"name": f"hf:<{a['model_type']}>", "kind": "architecture", **a} for a in archs]
        click.echo(json.dumps(rows, indent=2, default=str))
        return
    click.echo(f"{'name':<22} {'layers':>6} {'heads':>5}  source")
    for r in rows:
        extra = ""
        card = r.get("card") or {}
        if "accuracy" in card:
            extra = f"  (held-out accuracy {card['accuracy']:.4g})"
        click.echo(f"{r['name']:<22} {str(r.get('layers')):>6} {str(r.get('heads')):>5}  {r.get('source', '')}{extra}")
    click.echo("also: hf:<model id or local path> (local files or the Hugging Face cache; no download)")
    if archs:
        click.echo("tested architectures (path): " + ", ".join(f"{a['model_type']} ({a['path']})" for a in archs))
    else:
        click.echo("tested architectures and the path capture takes: probe models --architectures")


@click.command("capture")
@model_option
@input_options
@limit_option
@click.option("--layers", default=None, help="layers to capture, e.g. 0,3,5 or 0-2 (default all)")
@click.option("--batch-size", type=integer(min=1), default=16, show_default=True)
@click.option("--store-dtype", type=click.Choice(["float32", "float16"]), default="float32", show_default=True)
@click.option(
    "--stack",
    type=click.Choice(["encoder", "decoder", "cross"]),
    default=None,
    help="attention stack of encoder-decoder models (default: encoder)",
)
@device_option
@dtype_option
@click.option(
    "--truncate",
    is_flag=True,
    help="cut texts beyond the model's limit instead of refusing (--text) or skipping (--file/--conllu) them",
)
@click.option(
    "--out",
    "-o",
    required=True,
    type=click.Path(),
    help="store directory (a partial store of the same run resumes; any other non-empty directory needs --force)",
)
@engine_option()
@force_option
@quiet_option
@verbose_option
@user_errors
def capture_cmd(
    model: str,
    text: tuple,
    file_: Optional[str],
    conllu: Optional[str],
    limit: Optional[int],
    layers: Optional[str],
    batch_size: int,
    store_dtype: str,
    stack: Optional[str],
    device: str,
    dtype: Optional[str],
    truncate: bool,
    out: str,
    engine: str,
    address: Optional[str],
    workers: int,
    force: bool,
    quiet: bool,
    verbose: bool,
) -> None:
    """Capture attention maps of a corpus into a store directory (resumable: the store is
    written in place, shard by shard, so a killed run continues where it stopped; with
    --engine stream or ray, the engine's job writes the shards and the driver the index, in
    input order)."""
    setup_logging(verbose)
    configure_progress()
    from .preflight import preflight

    preflight(model, (file_, conllu))  # before the imports below
    store_dir = _store_dir(out, force)
    from probe.app.engine.kind import Engine
    from probe.inputs.corpus import load_corpus
    from probe.models import load_model

    corpus = load_corpus(text=text, file=file_, conllu=conllu, limit=limit, model=model)
    run = Engine(engine, address=address, workers=workers, device=device)
    if not run.holds_every_map and (stack or truncate):
        raise InputError("--stack and --truncate run with --engine local")
    lay = parse_int_list(layers, "--layers")
    streamed = not run.holds_every_map
    adapter = load_model(model, device="cpu" if streamed else device, dtype=None if streamed else dtype)
    if streamed:  # the driver only tokenizes and writes the index; the engine's job (stream: here) captures
        store = _capture_on_engine(model, adapter, corpus, store_dir, run, lay, batch_size, store_dtype, dtype)
    else:
        from probe.runs.pipeline import capture_corpus

        store = capture_corpus(
            adapter,
            corpus,
            store_dir,
            layers=lay,
            batch_size=batch_size,
            dtype=store_dtype,
            stack=stack,
            progress=not quiet and len(corpus) > 1,
            on_long="truncate" if truncate else ("error" if text else "skip"),
        )
    skipped = store.manifest.get("skipped") or {}
    msg = f"{len(store)} examples in {store_dir} ({adapter.name}, {adapter.n_layers} layers × {adapter.n_heads} heads)"
    if skipped:
        msg += "; skipped: " + ", ".join(f"{n} {why}" for why, n in skipped.items())
    click.echo(msg)


def _store_dir(out: str, force: bool) -> Path:
    """``out`` resolved (a link followed) and proved writable before any compute: a store
    (or one whose first capture is still running: its lock comes before the manifest)
    resumes; with ``force`` any other directory is replaced by a fresh store."""
    import shutil

    from probe.app.registry.outdir import check_out

    resumable = any((Path(out) / name).exists() for name in ("manifest.json", ".lock")) and not force
    checked = check_out(out, force=force or resumable)
    if not resumable and force and checked.is_dir():
        shutil.rmtree(checked)
    return checked


def _capture_on_engine(
    model: str,
    adapter: Any,
    corpus: Any,
    out: Path,
    engine: Any,
    layers: Optional[list],
    batch_size: int,
    store_dtype: str,
    dtype: Optional[str],
) -> Any:
    """The store written by the engine's job (:func:`probe.app.engine.capture.capture`):
    the manifest says the workers' dtype and device."""
    from probe.app.engine.capture import capture as capture_on_engine
    from probe.inputs.corpus import fit_to_model
    from probe.runs.pipeline import store_manifest

    device = engine.device
    manifest = store_manifest(  # the workers run the forward: their dtype and device
        adapter,
        corpus,
        fit_to_model(corpus, adapter),
        layers,
        options={"batch_size": batch_size, "truncate": False},
        forward_dtype=dtype or ("bfloat16" if str(device).startswith("cuda") and model.startswith("hf:") else None),
        device=str(device).split(":")[0],
    )
    return capture_on_engine(
        model,
        corpus,
        out,
        manifest=manifest,
        store_dtype=store_dtype,
        batch_size=batch_size,
        layers=layers,
        dtype=dtype,
        **engine.job_settings(),
    )


@click.command("heatmap")
@click.option("--store", "store_dir", required=True, type=click.Path(file_okay=False))
@click.option("--example", type=integer(), default=0, show_default=True)
@click.option("--head", "head_spec", required=True, help="the head: L2H8 (or 2.8, 2:8, 2-8; or an index with --layer)")
@click.option("--layer", type=integer(), default=None, help="the layer, when --head is a bare index")
@click.option("--format", "fmt", type=click.Choice(["png", "svg", "pdf"]), default="png", show_default=True)
@click.option(
    "--out",
    "-o",
    required=True,
    type=click.Path(),
    help="output directory (must be empty unless --force): L<l>H<h>_ex<i>.<format> and the matrix as .csv",
)
@force_option
@quiet_option
@user_errors
def heatmap_cmd(
    store_dir: str, example: int, head_spec: str, layer: Optional[int], fmt: str, out: str, force: bool, quiet: bool
) -> None:
    """Draw one head's attention on one stored example, with token labels."""
    from probe.app.registry.outdir import OutDir

    if layer is not None and head_spec.strip().isascii() and head_spec.strip().isdigit():
        layer, head = layer, int(head_spec)
    else:
        named, head = parse_head(head_spec)
        if layer is not None and layer != named:  # --layer would be ignored silently
            raise click.BadParameter(
                f"--layer {layer} contradicts --head {head_spec} (layer {named}): give the head as "
                f"L{named}H{head} alone, or --layer with a bare head index",
                param_hint="--layer",
            )
        layer = named
    target = OutDir(out, force)
    from probe.app.report.figures import attention_heatmap
    from probe.store.directory import Store

    maps = Store(store_dir)[example]
    stem = f"L{layer}H{head}_ex{example}"
    with target as tmp:
        attention_heatmap(maps, layer, head, tmp / f"{stem}.{fmt}")
        import pandas as pd

        pd.DataFrame(
            maps.head(layer, head).float().numpy(),
            index=list(maps.query_tokens or maps.tokens),
            columns=list(maps.tokens),
        ).to_csv(tmp / f"{stem}.csv")
    click.echo(f"wrote {target.out}/{stem}.{fmt} and {stem}.csv")


COMMANDS = [models_cmd, capture_cmd, heatmap_cmd]
