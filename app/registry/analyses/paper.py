"""``probe paper-figures`` and ``probe alignment``: the appendix figures of Vaswani et al.
(2017) on a real model, and cross-attention scored as word alignment (Och & Ney 2003)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from probe.errors import InputError
from probe.app.registry import Analysis, Param, Result

if TYPE_CHECKING:
    from probe.app.registry import Context


def run_figures(ctx: Context) -> Result:
    from probe.analyses.paper.paper_heads import SENTENCES, paper_rankings, top_heads

    adapter = ctx.adapter
    rankings = paper_rankings(adapter)
    tables, notes, drawn = {}, [], {}
    for name, (_maps, ranking) in rankings.items():
        s = SENTENCES[name]
        tables[f"heads_{name}"] = ranking
        drawn[name] = top_heads(ranking, ctx.params["top"])
        best = ranking.iloc[0].to_dict()
        notes.append(
            f"{name}: {s.query!r} → {', '.join(s.targets)}: best L{best['layer']}H{best['head']} "
            f"weight {best['weight']:.3f} (uniform {best['uniform']:.3f}); "
            f"{int(ranking['is_argmax'].sum())}/{len(ranking)} heads have their argmax on a target; drawn: "
            + ", ".join(f"L{layer}H{h}" for layer, h in drawn[name])
        )

    def figures(d):
        from probe.app.report.paper_figures import paper_figure

        out = []
        for name, (maps, _) in rankings.items():
            s = SENTENCES[name]
            out.append(
                paper_figure(
                    maps,
                    s.query,
                    drawn[name],
                    d / f"paper_{name}.png",
                    targets=s.targets,
                    title=f"{adapter.name}: {s.query!r} → {' '.join(s.targets)!r} ({s.figure})",
                )
            )
        return out

    return Result(tables=tables, notes=notes, writers=[figures])


FIGURES = Analysis(
    "paper-figures",
    "The appendix attention figures of Vaswani et al. (2017) on a real model",
    run_figures,
    needs=("model",),
    help='Heads whose attention from "its" peaks on "Law" and from "making" on "more difficult" (Vaswani '
    "et al. 2017, Figures 3-4), drawn in the paper's style. Writes, per sentence, heads_<its|making>.csv "
    "(every head ranked) and paper_<its|making>.png (the top heads, one colour each).",
    params=(Param("top", int, 3, "heads drawn per sentence (the best by weight on the targets), 1-8", min=1),),
    order=80,
    example="probe paper-figures --out out/paper",
)


def run_alignment(ctx: Context) -> Result:
    import pandas as pd

    from probe.analyses.paper.alignment import TASKS, alignment_error_rates, zoo_cross_maps
    from probe.models import zoo

    limit, example = ctx.params["limit"], ctx.params["example"]
    if example >= limit:
        raise InputError(f"--example {example} is not among the first {limit} pairs (--limit)")
    ex = zoo.eval_examples("translate", n=limit)
    verbs = set(zoo.task_module("translate").VERBS)
    gold = [e["alignment"] for e in ex]
    non_verb = [[j for j, s in enumerate(e["alignment"]) if e["words"][s] not in verbs] for e in ex]
    tables, maps_of, scores_of = [], {}, {}
    for task in TASKS:
        maps = zoo_cross_maps(task, ex)
        for subset, keep in (("all", None), ("non-verb", non_verb)):
            t = alignment_error_rates(maps, gold, keep=keep)
            t.insert(0, "subset", subset)
            t.insert(0, "model", f"zoo:{task}")
            tables.append(t)
        maps_of[task] = maps[example]
        scores_of[task] = {(r.layer, r.head): r.aer for r in tables[-2].itertuples()}
    table = pd.concat(tables, ignore_index=True)
    notes = [
        f"AER (Och & Ney 2003; sure links only) over {limit} held-out pairs:",
        f"{'model':<18} {'subset':<9} {'head':>6} {'AER':>7} {'gold mass':>9}",
    ]
    notes += [
        f"{r.model:<18} {r.subset:<9} {f'L{r.layer}H{r.head}':>6} {r.aer:>7.3f} {r.gold_mass:>9.3f}"
        for r in table.itertuples()
    ]

    def figures(d):
        from probe.app.report.paper_figures import alignment_heatmaps

        return [
            alignment_heatmaps(
                maps_of[task],
                d / f"alignment_{task}.png",
                gold=gold[example],
                aer=scores_of[task],
                title=f"zoo:{task}: {ex[example]['text']!r} (AER over {limit} pairs)",
            )
            for task in TASKS
        ]

    return Result(tables={"aer": table}, notes=notes, writers=[figures])


ALIGNMENT = Analysis(
    "alignment",
    "Alignment error rate of the zoo translators' cross-attention (Och & Ney 2003)",
    run_alignment,
    help="Alignment error rate (Och & Ney 2003) of zoo:translate's cross-attention heads and zoo:translate-rnn's "
    "additive attention against the gold alignments, plus heatmaps. Writes aer.csv (model, subset, layer, "
    "head, aer, precision, recall, gold_mass, …; subset 'all' or 'non-verb') and alignment_<model>.png.",
    params=(
        Param("limit", int, 200, "held-out sentence pairs scored (probe.models.zoo.eval_examples('translate'))", min=1),
        Param("example", int, 0, "which pair the heatmaps show", min=0),
    ),
    order=81,
    example="probe alignment --limit 50 --out out/alignment",
)

ANALYSES = (FIGURES, ALIGNMENT)
