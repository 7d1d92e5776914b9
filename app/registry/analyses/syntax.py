"""``probe syntax`` and the report's syntax section: the best head per dependency relation
against fixed-offset baselines (Clark et al. 2019), trees decoded from attention and the
attention-only probe."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from probe.errors import NotApplicable
from probe.app.registry import STREAMING, Analysis, Param, Result
from probe.app.registry.presentation import HeadBlock, Presentation, Streamed, TableView, VerdictHint
from probe.app.registry.results import SyntaxResult

if TYPE_CHECKING:
    from probe.app.registry import Context

#: fewest instances of a relation for it to be named on a head page: 1 in 200 dependencies,
#: within [5, 100] (the bundled sample has ~300 dependencies, EWT dev ~22,000; without a
#: floor that grows with the corpus, rare relations win by chance)
SYNTAX_MIN_COUNT = (5, 100)
#: relations never named as a head's best (punctuation attaches anywhere; ``all`` pools)
SYNTAX_EXCLUDED = ("punct", "all", "root")


def _zoo_treebank(ctx) -> str:
    """Write a zoo task's held-out set with its gold arcs as ``gold.conllu`` in the run's
    directory (tasks with ``to_conllu``); any other model needs ``--conllu``."""
    import tempfile

    from probe.models import zoo

    task = ctx.zoo_task
    mod = zoo.task_module(task) if task in zoo.TASKS else None
    if mod is None or not hasattr(mod, "to_conllu"):
        have = ", ".join(f"zoo:{t}" for t in zoo.TASKS if hasattr(zoo.task_module(t), "to_conllu"))
        raise NotApplicable(f"give --conllu (a CoNLL-U treebank); only {have} has gold trees of its own")
    directory = Path(ctx.workdir or tempfile.mkdtemp(prefix="probe-syntax-"))
    path = directory / "gold.conllu"
    path.write_text(mod.to_conllu(zoo.eval_examples(task)), encoding="utf-8")
    ctx.say(f"treebank: {ctx.model}'s held-out set with its gold trees ({path.name})")
    return str(path)


def run(ctx: Context) -> Result:
    from probe.analyses.structure.syntax_run import run_syntax
    from probe.inputs.readers import read_conllu

    p = ctx.params
    conllu = ctx.inputs.conllu or _zoo_treebank(ctx)
    sentences = read_conllu(conllu, limit=ctx.limit)
    settings = dict(
        base=p["base_relations"], tree_limit=p["tree_limit"], probe_limit=p["probe_limit"], batch_size=p["batch_size"]
    )
    # the sentences stream through the model wherever the run's engine runs it (ctx.runner)
    result = run_syntax(ctx.runner, sentences, **settings)
    meta = {"model": ctx.model_name, "conllu": str(conllu)}
    if ctx.engine.name != "local":
        meta["engine"] = ctx.engine.name
    best = result.relations.with_all().best(min_count=p["min_count"], relations=p["relations"])

    def write(d):
        from probe.app.report.syntax_figures import write_syntax_report

        return list(
            write_syntax_report(result, d, min_count=p["min_count"], relations=p["relations"], meta=meta).values()
        )

    return Result(per_head=best_relation_per_head(best, p["min_count"]), notes=_notes(result, best), writers=[write])


def _notes(result, best) -> list:
    dep = best[(best.direction == "dep_to_head") & ~best.flagged].head(15)
    lines = [
        f"{result.relations.n_sentences} sentences evaluated"
        + (
            f"; skipped: {', '.join(f'{n} {why}' for why, n in result.skipped_counts.items())}"
            if result.skipped_counts
            else ""
        )
    ]
    lines.append(f"{'relation':<12} {'head':>6} {'acc':>6} {'offset':>6} {'base':>6} {'count':>6}")
    for r in dep.itertuples():
        lines.append(
            f"{r.relation:<12} {f'L{r.layer}H{r.head}':>6} {r.accuracy:6.3f} {r.baseline_offset:>+6d} "
            f"{r.baseline_accuracy:6.3f} {r.count:>6d}"
        )
    if result.trees is not None:
        t = result.trees.set_index("source")
        top = result.trees[result.trees.source.isin(["head", "layer_mean", "all_mean"])].iloc[0]
        where = f"L{top.layer}H{top['head']}" if top.source == "head" else f"layer {top.layer}"
        lines.append(
            f"trees: best {top.source} {where} UAS {top.uas:.3f}; right-branching "
            f"{t.loc['right_branching', 'uas']:.3f}, left-branching {t.loc['left_branching', 'uas']:.3f}"
        )
    if result.probe is not None:
        lines.append(
            f"attention-only probe: test UAS {result.probe['uas_test']:.3f} "
            f"({result.probe['n_test_sentences']} test sentences)"
        )
    return lines


def accumulators(ctx: Context, corpus: Any) -> dict:
    """The report section's sums: Clark et al.'s relation counts of every treebank
    sentence (:class:`probe.analyses.structure.streaming.LayerwiseRelations`; none
    without a treebank)."""
    from probe.analyses.structure.streaming import LayerwiseRelations

    if not (corpus.sentences and all(s.heads for s in corpus.sentences)):
        return {}
    return {"relations": LayerwiseRelations()}


def section(ctx: Context) -> SyntaxResult:
    """The report's variant: relation accuracy from the counts of every sentence of the
    run (fed from the held maps, or streamed by the engine: ``ctx.accumulated``)."""
    from probe.analyses.structure.word_graph import Skipped

    acc = ctx.accumulated(ANALYSIS.name).get("relations")
    if acc is None:
        raise NotApplicable("no treebank input (give --conllu with dependency annotation)")
    return section_from(acc.result(), Skipped(list(acc.skipped)))


def section_from(accuracy: Any, skipped: Any) -> SyntaxResult:
    """The syntax section of relation counts however they were made (from the kept maps,
    or streamed on an engine: ``probe report --engine``); ``skipped``: a
    :class:`probe.analyses.structure.word_graph.Skipped`."""
    from probe.analyses.structure.syntax import NOT_APPLICABLE_CAUSAL

    acc = accuracy.with_all()
    base = acc.direction_baselines()[["relation", "direction", "baseline_offset", "baseline_accuracy"]]
    # the index sorts it by the margin; each direction against the offsets it can reach (a causal model's)
    relations = acc.to_frame().merge(base, on=["relation", "direction"], how="left")
    lo, hi = SYNTAX_MIN_COUNT
    floor = int(min(hi, max(lo, int(acc.counts.sum()) // 200)))
    best = acc.best(min_count=floor)
    if not acc.causal:  # the note says only "not applicable (causal)"
        relations, best = relations.drop(columns="note"), best.drop(columns="note")
    per_head = best_relation_per_head(best, floor)
    notes = [
        f"{len(acc.relations) - 1} relations over {acc.n_sentences} sentences; the best head of each "
        f"relation with ≥ {floor} instances against the best fixed-offset baseline (Clark et al. 2019)"
    ]
    blocked = not_applicable_causal(best)
    if blocked:
        notes.append(
            f"{NOT_APPLICABLE_CAUSAL}: a causal model's word sees only the words on its left, so each direction "
            f"counts only the instances it can attend, against the offsets on that side; {', '.join(blocked)} "
            "have none (no accuracy, not 0%)"
        )
    if len(skipped):
        notes.append(f"{len(skipped)} sentences skipped (word alignment): see tables/syntax_skipped.csv")
    tables = {"best": best, "relations": relations}
    if len(skipped):
        tables["skipped"] = skipped.to_frame()
    return SyntaxResult(tables=tables, per_head=per_head, notes=notes, summary={"min_count": floor})


def not_applicable_causal(best: Any) -> list:
    """``relation (direction)`` of each row of ``best`` a causal model cannot attend at all
    (its ``note``, :data:`probe.analyses.structure.syntax.NOT_APPLICABLE_CAUSAL`)."""
    from probe.analyses.structure.syntax import NOT_APPLICABLE_CAUSAL

    if "note" not in best.columns:
        return []
    rows = best[best["note"] == NOT_APPLICABLE_CAUSAL]
    return [f"{r.relation} ({r.direction.replace('_', ' ')})" for r in rows.itertuples(index=False)]


def best_relations(best: Any, min_count: int) -> Any:
    """Heads that are the best head for some relation (Clark et al. 2019's Table 1 view):
    for each, the relation it beats the fixed-offset baseline by most (``relation,
    direction, accuracy, baseline_accuracy, baseline_offset, count``) and every relation it
    is best for (``best_for``). ``best``: :meth:`probe.analyses.structure.syntax.RelationAccuracy.best`;
    relations with fewer than ``min_count`` instances, and :data:`SYNTAX_EXCLUDED`, are
    left out. Heads best for nothing get no row."""
    t = best[(best["count"] >= min_count) & ~best["relation"].isin(SYNTAX_EXCLUDED)].copy()
    t["margin"] = t["accuracy"] - t["baseline_accuracy"]
    t["label"] = t["relation"] + " (" + t["direction"].str.replace("_", " ") + ")"
    best_for = t.sort_values("margin", ascending=False).groupby(["layer", "head"])["label"].agg("; ".join)
    t = t.sort_values(["margin", "count"], ascending=False, kind="stable").drop_duplicates(["layer", "head"])
    t = t.sort_values(["layer", "head"])
    out = t[["layer", "head", "relation", "direction", "accuracy", "baseline_accuracy", "baseline_offset", "count"]]
    out = out.assign(best_for=[best_for[(l_, h)] for l_, h in zip(out["layer"], out["head"])])
    return out.reset_index(drop=True)


def best_relation_per_head(best: Any, min_count: int) -> Any:
    """:func:`best_relations` as the section's per-head facts (``syntax_*`` columns)."""
    return best_relations(best, min_count).rename(
        columns={
            "relation": "syntax_relation",
            "direction": "syntax_direction",
            "accuracy": "syntax_accuracy",
            "baseline_accuracy": "syntax_baseline",
            "baseline_offset": "syntax_offset",
            "count": "syntax_count",
            "best_for": "syntax_best_for",
        }
    )


#: relations a head page draws, at most (its best margins first)
PAGE_RELATIONS = 8


def _accuracy(kind: str, text: str, relation, accuracy, count, **kw):
    """A head's accuracy on a relation (its baseline in ``numbers``), as evidence."""
    from probe.app.registry.evidence import HeadEvidence

    return HeadEvidence(
        "syntax",
        kind,
        text,
        value=float(accuracy),
        count=int(count),
        count_of="instances",
        unit="accuracy",
        label=str(relation),
        **kw,
    )


def head_evidence(result: SyntaxResult) -> dict:
    """Each head's syntax evidence: the relation it is the best head for with the largest
    margin over the best fixed offset (``syntax``: label, accuracy, ``numbers["baseline"]``,
    the instances it rests on) and, for its page, its accuracy per relation (dependent →
    head) against that baseline, largest margins first (``relation``, at most
    :data:`PAGE_RELATIONS`), relations under the structure claim's minimum count last."""
    best, t = result.best, result.relations
    if best is None or t is None:
        return {}
    out: dict = {}
    for r in best_relations(best, int(result.summary.get("min_count", 1))).itertuples(index=False):
        text = (
            f"the best head for {r.best_for}; {r.relation} ({r.direction.replace('_', ' ')}): accuracy "
            f"{r.accuracy:.0%} vs {r.baseline_accuracy:.0%} for the best fixed offset, {int(r.count)} instances"
        )
        out.setdefault((int(r.layer), int(r.head)), []).append(
            _accuracy(
                "syntax",
                text,
                r.relation,
                r.accuracy,
                r.count,
                brief=f"{r.relation} {r.accuracy:.0%} vs {r.baseline_accuracy:.0%} (n={int(r.count)})",
                numbers={"baseline": float(r.baseline_accuracy), "offset": r.baseline_offset},
            )
        )
    for key, items in _per_relation(best, t).items():
        out.setdefault(key, []).extend(items)
    return out


def _per_relation(best, t) -> dict:
    """``{(layer, head): [intro, relation, …]}``: the head page's rows (see :func:`head_evidence`)."""
    from probe.analyses.claims import thresholds as T
    from probe.analyses.structure.syntax import NOT_APPLICABLE_CAUSAL
    from probe.app.registry.evidence import HeadEvidence

    floor = T.STRUCTURE_MIN_COUNT
    base = best[best["direction"] == "dep_to_head"].set_index("relation")["baseline_accuracy"]
    mine = t[
        (t["direction"] == "dep_to_head") & ~t["relation"].isin(T.STRUCTURE_EXCLUDED) & t["relation"].isin(base.index)
    ]
    blocked = sorted(set(mine[mine["note"] == NOT_APPLICABLE_CAUSAL]["relation"])) if "note" in mine.columns else []
    mine = mine[~mine["relation"].isin(blocked)]  # a causal model cannot attend them: no accuracy to draw
    mine = mine.assign(margin=mine["accuracy"].to_numpy() - base.loc[mine["relation"]].to_numpy())
    mine = mine.assign(enough=mine["count"].to_numpy() >= floor)
    intro = HeadEvidence(
        "syntax",
        "relations",
        f"Per relation (dependent → head), sorted by margin over the best fixed offset (Clark et al. 2019); "
        f"relations with fewer than {floor} instances, the claim's minimum, are greyed"
        + (
            f"; {NOT_APPLICABLE_CAUSAL} (every head lies to the right of its dependent, which a causal model "
            f"cannot attend): {', '.join(blocked)}"
            if blocked
            else ""
        )
        + ":",
        headline=False,
        floor=floor,
    )
    out = {}
    for (layer, head), rows in mine.groupby(["layer", "head"], sort=False):
        rows = rows.sort_values(["enough", "margin"], ascending=False).head(PAGE_RELATIONS)
        out[(int(layer), int(head))] = [intro] + [
            _accuracy(
                "relation",
                f"{r.relation}: accuracy {r.accuracy:.0%} vs {base[r.relation]:.0%} for the best fixed offset "
                f"({int(r.count)} instances)",
                r.relation,
                r.accuracy,
                r.count,
                headline=False,
                floor=floor,
                numbers={"baseline": float(base[r.relation]), "margin": float(r.margin)},
            )
            for r in rows.itertuples(index=False)
        ]
    return out


def _best(by: dict) -> Optional[tuple]:
    """``(relation, accuracy %, baseline %)`` of the head's best relation, or ``None``."""
    from probe.app.report.verdict import SILENT, pct

    syn = by.get("syntax", SILENT)
    rel, acc, base = syn.label or None, pct(syn.value), pct(syn.number("baseline"))
    return None if rel is None or acc is None or base is None else (rel, acc, base)


def is_syntactic(by: dict) -> bool:
    """The head's best relation beats its positional baseline by
    :data:`probe.app.report.verdict.SYNTAX_MARGIN` points at
    :data:`~probe.app.report.verdict.SYNTAX_MIN_ACCURACY` % or more (Voita et al. 2019)."""
    from probe.app.report.verdict import SYNTAX_MARGIN, SYNTAX_MIN_ACCURACY

    best = _best(by)
    return best is not None and best[1] - best[2] >= SYNTAX_MARGIN and best[1] >= SYNTAX_MIN_ACCURACY


def syntactic_text(by: dict) -> str:
    """``looks syntactic (rel, acc% vs base% baseline)`` from the head's best relation, or ``""``."""
    best = _best(by)
    return "" if best is None else f"looks syntactic ({best[0]}, {best[1]:.0f}% vs {best[2]:.0f}% baseline)"


def _what(by: dict, cls: str, sep: str) -> str:
    """The verdict's "what" when no role was found (the roles section speaks otherwise)."""
    from probe.app.report.verdict import SILENT

    if by.get("role", SILENT).label or not is_syntactic(by):
        return ""
    return syntactic_text(by)


def _block(data, layer: int, head: int) -> str:
    """The structure claim's evidence (one answer per head), then this head's relations
    sorted by margin over the best fixed offset, rows under the claim's minimum greyed."""
    from probe.app.report.evidence import items, sentence, versus_svg
    from probe.app.report.html import esc

    parts = [f"<p>{esc(ev.text)}.</p>" for ev in items(data, layer, head, "claims", "structure")]
    rows = items(data, layer, head, "syntax", "relation")
    for intro in items(data, layer, head, "syntax", "relations") if rows else ():
        parts.append(f"<p>{sentence(intro)}</p>")
        floor = int(intro.floor)
        parts.append(versus_svg([(r.label, r.value, r.number("baseline"), r.count) for r in rows], min_count=floor))
    return "".join(parts)


def _tables() -> dict:
    """The index tables: strongest margin first, greyed under the structure claim's minimum
    (:data:`probe.analyses.claims.thresholds.STRUCTURE_MIN_COUNT`), so a table never trusts a
    relation the claim calls "not enough evidence"."""
    from probe.analyses.claims.thresholds import STRUCTURE_MIN_COUNT

    shown = ("relation", "direction", "layer", "head", "accuracy", "baseline_accuracy")
    claim = {"min_count": STRUCTURE_MIN_COUNT, "min_count_source": "the structure claim's minimum"}
    # note: "not applicable (causal)" where a causal model cannot attend the relation that way (no column otherwise)
    return {
        "best": TableView("margin", False, (*shown, "baseline_offset", "margin", "count", "note"), **claim),
        "relations": TableView("margin", False, (*shown, "margin", "count", "note"), **claim),
    }


SHOWS = Presentation(
    evidence=head_evidence,
    kinds=("syntax", "relations", "relation"),
    block=HeadBlock("Syntax", _block, order=20),
    tables=_tables(),
    verdict=(VerdictHint("what", _what),),
    streamed=Streamed(whole="syntax"),
)


ANALYSIS = Analysis(
    "syntax",
    "Syntactic relations against positional baselines",
    run,
    shows=SHOWS,
    needs=("treebank", "maps"),
    help="Best head per dependency relation (Clark et al. 2019), trees from attention and the attention-only "
    "probe; writes relations.csv, best.csv, trees.csv, probe.json and a heatmap. Without --conllu, "
    "zoo:brackets uses its held-out set (written as gold.conllu).",
    params=(
        Param("min_count", int, 20, "relations with fewer instances are flagged", min=1),
        Param("relations", "names", None, "comma-separated relations for best.csv (default: all)"),
        Param("base_relations", bool, False, "pool subtypes (nmod:poss counted as nmod)"),
        Param("tree_limit", int, 300, "sentences to decode trees for (one decode per head each)", min=0),
        Param("probe_limit", int, 1000, "sentences for the attention-only probe (80/20 split by sentence)", min=0),
        Param("batch_size", int, 32, "examples per forward", min=1),
    ),
    section=section,
    accumulators=accumulators,
    produces=SyntaxResult,
    modules=("probe.analyses.structure.syntax",),
    order=10,
    engines=STREAMING,
    example="probe syntax --conllu app/report/sample/sample.conllu --out out/syntax",
)
