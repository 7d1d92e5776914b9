"""``probe paper-figures`` and ``probe alignment``: the appendix figures of Vaswani et al.
(2017) on a real model, and cross-attention scored as word alignment (Och & Ney 2003)."""

from __future__ import annotations

from pathlib import Path

import click

from .common import device_option, model_option, out_dir_option, setup_logging, user_errors, verbose_option


@click.command("paper-figures")
@model_option
@click.option("--top", type=click.IntRange(1, 8), default=3, show_default=True,
              help="heads drawn per sentence (the best by weight on the targets)")
@device_option
@out_dir_option
@verbose_option
@user_errors
def paper_figures_cmd(model, top, device, out, verbose):
    """Heads whose attention from "its" peaks on "Law" and from "making" on "more
    difficult" (Vaswani et al. 2017, Figures 3-4), drawn in the paper's style.

    Writes, per sentence, heads_<its|making>.csv (every head ranked) and
    paper_<its|making>.png (the top heads, one colour each)."""
    setup_logging(verbose)
    from probe.analyses.paper.paper_heads import SENTENCES, paper_rankings, top_heads
    from probe.models import load_model
    from probe.app.report.paper_figures import paper_figure

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    adapter = load_model(model, device=device)
    for name, (maps, ranking) in paper_rankings(adapter).items():
        s = SENTENCES[name]
        ranking.to_csv(out / f"heads_{name}.csv", index=False)
        heads = top_heads(ranking, top)
        paper_figure(maps, s.query, heads, out / f"paper_{name}.png", targets=s.targets,
                     title=f"{adapter.name}: {s.query!r} → {' '.join(s.targets)!r} ({s.figure})")
        n_arg = int(ranking["is_argmax"].sum())
        best = ranking.iloc[0].to_dict()
        click.echo(f"{name}: {s.query!r} → {', '.join(s.targets)}: best layer {best['layer']} head {best['head']} "
                   f"weight {best['weight']:.3f} (uniform {best['uniform']:.3f}); {n_arg}/{len(ranking)} heads "
                   f"have their argmax on a target; drawn: "
                   + ", ".join(f"{layer}-{h}" for layer, h in heads))
    click.echo(f"wrote {out}/heads_*.csv and {out}/paper_*.png")


@click.command("alignment")
@click.option("--limit", type=click.IntRange(min=1), default=200, show_default=True,
              help="held-out sentence pairs scored (probe.models.zoo.eval_examples('translate'))")
@click.option("--example", type=click.IntRange(min=0), default=0, show_default=True,
              help="which pair the heatmaps show")
@out_dir_option
@verbose_option
@user_errors
def alignment_cmd(limit, example, out, verbose):
    """Alignment error rate (Och & Ney 2003) of zoo:translate's cross-attention heads and
    zoo:translate-rnn's additive attention against the gold alignments, plus heatmaps.

    Writes aer.csv (model, subset, layer, head, aer, precision, recall, gold_mass, …;
    subset 'all' or 'non-verb': the verb moved to the end left out) and
    alignment_<model>.png (word-level attention of one pair, gold links outlined)."""
    setup_logging(verbose)
    import pandas as pd

    from probe.analyses.paper.alignment import TASKS, alignment_error_rates, zoo_cross_maps
    from probe.models import zoo
    from probe.app.report.paper_figures import alignment_heatmaps

    if example >= limit:
        raise ValueError(f"--example {example} is not among the first {limit} pairs (--limit)")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    ex = zoo.eval_examples("translate", n=limit)
    verbs = set(zoo.task_module("translate").VERBS)
    gold = [e["alignment"] for e in ex]
    non_verb = [[j for j, s in enumerate(e["alignment"]) if e["words"][s] not in verbs] for e in ex]
    tables = []
    for task in TASKS:
        maps = zoo_cross_maps(task, ex)
        for subset, keep in (("all", None), ("non-verb", non_verb)):
            t = alignment_error_rates(maps, gold, keep=keep)
            t.insert(0, "subset", subset)
            t.insert(0, "model", f"zoo:{task}")
            tables.append(t)
        scores = {(r.layer, r.head): r.aer for r in tables[-2].itertuples()}
        alignment_heatmaps(maps[example], out / f"alignment_{task}.png", gold=gold[example], aer=scores,
                           title=f"zoo:{task}: {ex[example]['text']!r} (AER over {limit} pairs)")
    table = pd.concat(tables, ignore_index=True)
    table.to_csv(out / "aer.csv", index=False)
    click.echo(f"AER (Och & Ney 2003; sure links only) over {limit} held-out pairs:")
    click.echo(f"{'model':<18} {'subset':<9} {'layer':>5} {'head':>4} {'AER':>7} {'gold mass':>9}")
    for r in table.itertuples():
        click.echo(f"{r.model:<18} {r.subset:<9} {r.layer:>5} {r.head:>4} {r.aer:>7.3f} {r.gold_mass:>9.3f}")
    click.echo(f"wrote {out}/aer.csv and {out}/alignment_*.png")


COMMANDS = [paper_figures_cmd, alignment_cmd]
