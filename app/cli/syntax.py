"""``probe syntax`` and ``probe coref``: dependency and coreference heads over a treebank."""

from __future__ import annotations

import click

from .common import (device_option, engine_option, engine_settings, limit_option, model_option, out_dir_option,
                     setup_logging, user_errors, verbose_option)


@click.command("syntax")
@model_option
@click.option("--conllu", default=None, type=click.Path(dir_okay=False),
              help="CoNLL-U treebank (default for zoo:brackets: its held-out set, written to OUT/gold.conllu)")
@limit_option
@click.option("--min-count", type=click.IntRange(min=1), default=20, show_default=True,
              help="relations with fewer instances are flagged")
@click.option("--relations", default=None, help="comma-separated relations for best.csv (default: all)")
@click.option("--base-relations", is_flag=True, help="pool subtypes (nmod:poss counted as nmod)")
@click.option("--tree-limit", type=click.IntRange(min=0), default=300, show_default=True,
              help="sentences to decode trees for (one decode per head each)")
@click.option("--probe-limit", type=click.IntRange(min=0), default=1000, show_default=True,
              help="sentences for the attention-only probe (80/20 split by sentence)")
@click.option("--batch-size", type=click.IntRange(min=1), default=32, show_default=True)
@device_option
@engine_option
@out_dir_option
@verbose_option
@user_errors
def syntax_cmd(model, conllu, limit, min_count, relations, base_relations, tree_limit, probe_limit,
               batch_size, device, engine, address, workers, out, verbose):
    """Best head per dependency relation (Clark et al. 2019), trees from attention and the
    attention-only probe; writes relations.csv, best.csv, trees.csv, probe.json and a heatmap."""
    setup_logging(verbose)
    from probe.analyses.structure.syntax_run import run_syntax
    from probe.models import load_model
    from probe.corpus import read_conllu
    from probe.app.report.syntax_figures import write_syntax_report

    conllu = conllu or _zoo_treebank(model, out)
    sentences = read_conllu(conllu, limit=limit)
    run = engine_settings(engine, address, workers, device)
    rels = [r.strip() for r in relations.split(",") if r.strip()] if relations else None
    settings = dict(base=base_relations, tree_limit=tree_limit, probe_limit=probe_limit, batch_size=batch_size)
    if run:
        from probe.app.engine import analyses

        result = analyses.syntax(model, sentences, **settings, **run)
    else:
        adapter = load_model(model, device=device)
        result = run_syntax(adapter, sentences, **settings, progress=len(sentences) > 1)
    paths = write_syntax_report(result, out, min_count=min_count, relations=rels,
                                meta={"model": model, "conllu": str(conllu), "engine": engine})
    _echo_summary(result, min_count, rels)
    click.echo("wrote " + ", ".join(str(p) for p in paths.values()))


def _zoo_treebank(model: str, out: str) -> str:
    """Write a zoo task's held-out set with its gold arcs as ``out/gold.conllu`` (tasks
    with ``to_conllu``); any other model needs ``--conllu``."""
    from pathlib import Path

    from probe.models import zoo

    task = model[len("zoo:"):] if model.startswith("zoo:") else None
    mod = zoo.task_module(task) if task in zoo.TASKS else None
    if mod is None or not hasattr(mod, "to_conllu"):
        have = ", ".join(f"zoo:{t}" for t in zoo.TASKS if hasattr(zoo.task_module(t), "to_conllu"))
        raise click.UsageError(f"give --conllu (a CoNLL-U treebank); only {have} has gold trees of its own")
    path = Path(out) / "gold.conllu"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(mod.to_conllu(zoo.eval_examples(task)), encoding="utf-8")
    return str(path)


def _echo_summary(result, min_count, rels):
    best = result.relations.with_all().best(min_count=min_count, relations=rels)
    dep = best[(best.direction == "dep_to_head") & ~best.flagged].head(15)
    click.echo(f"{result.relations.n_sentences} sentences evaluated"
               + (f"; skipped: {', '.join(f'{n} {why}' for why, n in result.skipped_counts.items())}"
                  if result.skipped_counts else ""))
    click.echo(f"{'relation':<12} {'head':>6} {'acc':>6} {'offset':>6} {'base':>6} {'count':>6}")
    for r in dep.itertuples():
        click.echo(f"{r.relation:<12} {f'{r.layer}-{r.head}':>6} {r.accuracy:6.3f} {r.baseline_offset:>+6d} "
                   f"{r.baseline_accuracy:6.3f} {r.count:>6d}")
    if result.trees is not None:
        t = result.trees.set_index("source")
        top = result.trees[result.trees.source.isin(["head", "layer_mean", "all_mean"])].iloc[0]
        click.echo(f"trees: best {top.source} {top.layer}-{top['head']} UAS {top.uas:.3f}; right-branching "
                   f"{t.loc['right_branching', 'uas']:.3f}, left-branching {t.loc['left_branching', 'uas']:.3f}")
    if result.probe is not None:
        click.echo(f"attention-only probe: test UAS {result.probe['uas_test']:.3f} "
                   f"({result.probe['n_test_sentences']} test sentences)")


@click.command("coref")
@model_option
@click.option("--conllu", required=True, type=click.Path(dir_okay=False),
              help="CorefUD treebank with Entity= in MISC (e.g. GUM)")
@limit_option
@click.option("--context", type=click.IntRange(min=0), default=2, show_default=True,
              help="preceding sentences of the same document in each window")
@click.option("--batch-size", type=click.IntRange(min=1), default=16, show_default=True)
@device_option
@engine_option
@out_dir_option
@verbose_option
@user_errors
def coref_cmd(model, conllu, limit, context, batch_size, device, engine, address, workers, out, verbose):
    """Best head at picking a pronoun's antecedent, beside the nearest-mention and
    number-agreeing baselines; writes coref.csv and coref_best.csv."""
    setup_logging(verbose)
    from probe.analyses.structure.coref_mentions import read_number
    from probe.analyses.structure.syntax_run import run_coref
    from probe.models import load_model
    from probe.corpus import read_conllu
    from probe.app.report.syntax_figures import write_coref_report

    sentences = read_conllu(conllu, limit=limit)
    numbers = read_number(conllu, limit=limit)
    run = engine_settings(engine, address, workers, device)
    if run:
        from probe.app.engine import analyses

        result = analyses.coref(model, sentences, numbers, context=context, batch_size=batch_size, **run)
    else:
        result = run_coref(load_model(model, device=device), sentences, numbers, context=context,
                           batch_size=batch_size, progress=len(sentences) > 1)
    paths = write_coref_report(result, out, meta={"model": model, "conllu": str(conllu), "context": context})
    for r in result.accuracy.best().itertuples():
        click.echo(f"{r.setting:<17} head {r.layer}-{r.head} {r.accuracy:.3f}  nearest {r.nearest_mention:.3f}  "
                   f"nearest agreeing {r.nearest_agreeing:.3f}  ({r.count} pronouns)")
    click.echo("wrote " + ", ".join(str(p) for p in paths.values()))


COMMANDS = [syntax_cmd, coref_cmd]
