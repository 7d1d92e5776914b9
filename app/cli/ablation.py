"""``probe ablate``, ``probe prune``, ``probe patch``: causal tests of attention heads.

Each writes CSV (and a JSON summary) into ``--out`` beside its heatmap/curve.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from .common import (device_option, engine_option, engine_settings, input_options, limit_option, model_option,
                     out_dir_option, parse_head_group, parse_int_list, setup_logging, user_errors, verbose_option)

metric_option = click.option("--metric", default="loss", show_default=True,
                             help="loss | accuracy (zoo) | embedding-drift")
batch_option = click.option("--batch-size", type=click.IntRange(min=1), default=8, show_default=True)
group_option = click.option("--group", "groups", multiple=True,
                            help="also intervene on these heads together, e.g. 1.0,1.1,1.2 (repeatable); "
                            "rows in groups.csv")


def _write_groups(out: Path, results) -> str:
    """Write ``groups.csv`` (one row per group) and return a one-line summary."""
    import pandas as pd

    if not results:
        return ""
    rows = [r.summary() for r in results]
    pd.DataFrame(rows).to_csv(out / "groups.csv", index=False)
    return "; groups: " + ", ".join(f"{r['heads']} {r['effect']:+.4g}" for r in rows)


def _load(model, text, file_, conllu, limit, device):
    from probe.models import load_model
    from probe.inputs import fit_to_model, load_corpus

    corpus = load_corpus(text=text, file=file_, conllu=conllu, limit=limit, model=model)
    adapter = load_model(model, device=device)
    return adapter, fit_to_model(corpus, adapter)


def _layers(adapter, layers):
    keep = parse_int_list(layers, "--layers")
    if keep is None:
        return None
    return [(l, h) for l in keep for h in range(adapter.n_heads)]


def _summary(out: Path, name: str, data: dict) -> None:
    (out / name).write_text(json.dumps(data, indent=2, default=str) + "\n")


@click.command("ablate")
@model_option
@input_options
@limit_option
@metric_option
@click.option("--mode", type=click.Choice(["zero", "mean"]), default="zero", show_default=True)
@click.option("--layers", default=None, help="only heads of these layers, e.g. 0,3 or 0-2")
@click.option("--n-boot", type=click.IntRange(min=10), default=1000, show_default=True)
@group_option
@batch_option
@device_option
@engine_option
@out_dir_option
@verbose_option
@user_errors
def ablate_cmd(model, text, file_, conllu, limit, metric, mode, layers, n_boot, groups, batch_size, device, engine,
               address, workers, out, verbose):
    """Ablate each head alone; write ablation.csv (delta with bootstrap CI) and a heatmap.
    With --group, also ablate each group of heads together (groups.csv): redundant heads
    show no effect alone and a large one together."""
    setup_logging(verbose)
    from probe.analyses.necessity.ablation import sweep_heads
    from probe.analyses.necessity.head_groups import ablate_group
    from probe.app.report.ablation_figures import head_heatmap

    groups = [parse_head_group(g) for g in groups]
    run = engine_settings(engine, address, workers, device)
    if run:
        from probe.app.engine import analyses
        from probe.inputs import load_corpus

        if groups:
            raise ValueError("--group runs with --engine local")
        corpus = load_corpus(text=text, file=file_, conllu=conllu, limit=limit, model=model)
        res = analyses.ablate(model, corpus, metric, mode, layers=parse_int_list(layers, "--layers"),
                              batch_size=batch_size, n_boot=n_boot, **run)
        name, group_results = model, []
    else:
        adapter, corpus = _load(model, text, file_, conllu, limit, device)
        group_results = [ablate_group(adapter, corpus, g, metric, mode, batch_size=batch_size, n_boot=n_boot)
                         for g in groups]
        res = sweep_heads(adapter, corpus, metric, mode, _layers(adapter, layers), batch_size=batch_size,
                          n_boot=n_boot, progress=len(corpus) > 1)
        name = adapter.name
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    res.table.to_csv(out / "ablation.csv", index=False)
    head_heatmap(res.table, "delta", out / "ablation.png",
                 f"{name}: Δ {res.table['metric'].iloc[0]} ({mode}-ablation, {len(corpus)} examples)")
    top = res.table.reindex(res.table["delta"].abs().sort_values(ascending=False).index).head(5)
    _summary(out, "ablation.json", {"model": name, "examples": len(corpus), "metric": metric, "mode": mode,
                                    "path": res.path, "clean": float(res.clean.mean()),
                                    "top": top[["layer", "head", "delta"]].to_dict("records")})
    click.echo(f"wrote {out / 'ablation.csv'} ({len(res.table)} heads, {len(corpus)} examples, {res.path}); "
               "largest: " + ", ".join(f"{r.layer}:{r.head} Δ={r.delta:+.4g}" for r in top.itertuples())
               + _write_groups(out, group_results))


@click.command("prune")
@model_option
@input_options
@limit_option
@metric_option
@click.option("--method", type=click.Choice(["auto", "gradient", "ig"]), default="auto", show_default=True,
              help="importance: Michel et al.'s |dL/dξ| or integrated gradients (auto: ig for embedding-drift)")
@click.option("--step", "step_fraction", type=click.FloatRange(0, 1, min_open=True), default=0.1, show_default=True,
              help="fraction of heads pruned per step")
@click.option("--threshold", type=float, default=0.05, show_default=True,
              help="report how many heads go before the metric worsens by more than this")
@click.option("--ig-steps", type=click.IntRange(min=2), default=16, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@batch_option
@device_option
@out_dir_option
@verbose_option
@user_errors
def prune_cmd(model, text, file_, conllu, limit, metric, method, step_fraction, threshold, ig_steps, seed,
              batch_size, device, out, verbose):
    """Head importance and the pruning curve (by importance vs random order)."""
    setup_logging(verbose)
    from probe.analyses.necessity.importance import head_importance
    from probe.analyses.necessity.pruning import pruning_curve
    from probe.app.report.ablation_figures import head_heatmap, pruning_plot

    adapter, corpus = _load(model, text, file_, conllu, limit, device)
    imp = head_importance(adapter, corpus, metric, method, batch_size=batch_size, n_steps=ig_steps)
    res = pruning_curve(adapter, corpus, metric, method=method, step_fraction=step_fraction, seed=seed,
                        batch_size=batch_size, n_steps=ig_steps, progress=True)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    imp.to_frame().to_csv(out / "importance.csv", index=False)
    res.table.to_csv(out / "pruning.csv", index=False)
    head_heatmap(imp.to_frame(), "importance", out / "importance.png",
                 f"{adapter.name}: importance ({imp.method}, {imp.metric})", center=None, cmap="viridis")
    pruning_plot(res.table, out / "pruning.png", threshold=threshold)
    n_imp, n_rand = res.prunable(threshold, "importance"), res.prunable(threshold, "random")
    _summary(out, "pruning.json", {"model": adapter.name, "examples": len(corpus), "metric": imp.metric,
                                   "method": imp.method, "ig_convergence_delta": imp.delta,
                                   "threshold": threshold, "heads": adapter.n_layers * adapter.n_heads,
                                   "prunable_by_importance": n_imp, "prunable_random": n_rand})
    click.echo(f"wrote importance.csv and pruning.csv in {out}; {n_imp} of {adapter.n_layers * adapter.n_heads} "
               f"heads pruned by importance ({n_rand} in random order) before Δ {imp.metric} passes {threshold:g}")


@click.command("patch")
@model_option
@input_options
@limit_option
@metric_option
@click.option("--corrupted", multiple=True, help="corrupted partner of each --text (repeatable, in order)")
@click.option("--corrupted-file", type=click.Path(dir_okay=False), default=None,
              help="one corrupted input per line, paired with the lines of --file")
@click.option("--n-boot", type=click.IntRange(min=10), default=1000, show_default=True)
@group_option
@batch_option
@device_option
@out_dir_option
@verbose_option
@user_errors
def patch_cmd(model, text, file_, conllu, limit, metric, corrupted, corrupted_file, n_boot, groups, batch_size,
              device, out, verbose):
    """Patch each head's clean output into the corrupted run; write patching.csv
    (restored fraction with bootstrap CI) and a heatmap. With zoo:induction and no
    input, the evaluation set is paired with copies whose first half is replaced."""
    setup_logging(verbose)
    from probe.analyses.necessity.head_groups import patch_group
    from probe.analyses.necessity.patching import corrupt_zoo, patch_heads
    from probe.inputs import Corpus, load_corpus
    from probe.app.report.ablation_figures import head_heatmap

    groups = [parse_head_group(g) for g in groups]
    adapter, clean = _load(model, text, file_, conllu, limit, device)
    if corrupted or corrupted_file:
        bad = load_corpus(text=corrupted or None, file=corrupted_file, limit=limit)
    elif clean.examples:
        ex = corrupt_zoo(adapter.card.get("task", ""), clean.examples)
        bad = Corpus(texts=tuple(e["text"] for e in ex), examples=tuple(ex), source="corrupted")
    else:
        raise ValueError("no corrupted inputs: give --corrupted (with --text) or --corrupted-file")
    res = patch_heads(adapter, clean, bad, metric, batch_size=batch_size, n_boot=n_boot, progress=len(clean) > 1)
    group_results = [patch_group(adapter, clean, bad, g, metric, batch_size=batch_size, n_boot=n_boot) for g in groups]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    res.table.to_csv(out / "patching.csv", index=False)
    head_heatmap(res.table, "restored", out / "patching.png", f"{adapter.name}: restored fraction ({metric})")
    best = res.table.sort_values("restored", ascending=False).head(3)
    _summary(out, "patching.json", {"model": adapter.name, "pairs": len(clean), "metric": metric, "path": res.path,
                                    "clean": float(res.clean.mean()), "corrupted": float(res.corrupted.mean()),
                                    "top": best[["layer", "head", "restored"]].to_dict("records")})
    click.echo(f"wrote {out / 'patching.csv'} ({len(clean)} pairs); most restoring: "
               + ", ".join(f"{r.layer}:{r.head} {r.restored:.2f}" for r in best.itertuples())
               + _write_groups(out, group_results))


COMMANDS = [ablate_cmd, prune_cmd, patch_cmd]
