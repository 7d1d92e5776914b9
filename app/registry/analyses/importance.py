"""``probe prune`` and the report's importance section: head importance over head
gates (Michel et al. 2019) and the pruning curve."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from probe.app.registry import Analysis, Param, Result
from probe.app.registry.presentation import HeadBlock, HeadMark, Presentation, TableView, VerdictHint

from probe.app.registry.removal_stages import SCREENED
from probe.app.registry.results import ImportanceResult

from ._shared import BATCH, CAUSAL, model_corpus, model_run_setting, run_causal_path

if TYPE_CHECKING:
    from probe.app.registry import Context

METHOD = Param(
    "method",
    str,
    "auto",
    "importance: Michel et al.'s |dL/dξ| or integrated gradients (auto: ig for embedding-drift)",
    choices=("auto", "gradient", "ig"),
)
IG_STEPS = Param(
    "ig_steps",
    int,
    16,
    "integrated-gradient steps at most (importance: the fewest of 4, 8, 16, … up to this whose completeness "
    "error stays under 1%)",
    min=2,
)


def run_importance(ctx: Context) -> ImportanceResult:
    from probe.analyses.necessity.importance import COMPLETENESS_TOLERANCE

    whole = ctx.corpus.whole
    corpus, cut = model_corpus(ctx, whole)
    kw = dict(
        objective=ctx.objective("per-example"),
        method=ctx.params["method"],
        batch_size=ctx.params["batch_size"],
        n_steps=ctx.params["ig_steps"],
        tolerance=COMPLETENESS_TOLERANCE,  # the fewest steps under 1% completeness error, up to ig_steps
    )
    res, n, cut, blocks = _measured(ctx, whole, corpus, cut, kw)
    t = res.to_frame()
    per_head = t[["layer", "head", "importance", "rank"]].rename(columns={"rank": "importance_rank"})
    per_head = per_head.assign(importance_of=len(t), importance_method=res.method)

    def figure(d):
        from probe.app.report.ablation_figures import head_heatmap

        return [
            head_heatmap(
                t,
                "importance",
                d / "importance.png",
                f"{ctx.adapter.name}: importance ({res.method}, {res.metric})",
                center=None,
                cmap="viridis",
            )
        ]

    return ImportanceResult(
        tables={"importance": t},
        per_head=per_head,
        writers=[figure],
        notes=[
            f"head importance by {res.method} over head gates{cut}, metric {res.metric}, "
            "normalised per layer (Michel et al. 2019)"
            + (
                f"; integrated gradients with the fewest steps of 4, 8, 16, … up to {ctx.params['ig_steps']} "
                f"whose completeness error stays under {res.tolerance:.0%} per chunk of examples "
                f"(steps used: {min(res.steps)}–{max(res.steps)}, median {sorted(res.steps)[len(res.steps) // 2]})"
                if res.steps and res.tolerance is not None
                else ""
            )
        ],
        summary={
            "metric": res.metric,
            "method": res.method,
            "ig_convergence_delta": res.delta,
            "ig_steps": list(res.steps),
            "ig_tolerance": res.tolerance,
            "examples": n,
            "blocks": None
            if blocks is None
            else {
                "blocks": blocks.blocks,
                "precision": blocks.precision,
                "widest": blocks.widest,
                "median": blocks.median,
                "reached": blocks.reached,
                "of": len(whole),
            },
        },
        summary_name="importance",
    )


def _measured(ctx: Context, whole, corpus, cut: str, kw: dict) -> tuple:
    """``(importance, examples measured, the note's words on them, blocks or None)``: read from
    the ablation section's screen where it differentiated the same objective at every gate
    (:func:`_screened_gates`), on random blocks of the whole corpus where the model-run limit
    would cut it on the sequential path, else on ``corpus``."""
    from probe.analyses.necessity.importance import head_importance
    from probe.analyses.necessity.importance_blocks import BLOCK, importance_in_blocks

    path = run_causal_path(ctx, len(whole))
    screened = _screened_gates(ctx, corpus, kw["objective"]) if path == "screened" else None
    if screened is not None:
        read = (
            ", each example's ∂L/∂ξ read from the ablation section's screen, whose backward computes it at every "
            "head (Σ g·z), not from a forward and backward of this section's own"
        )
        return screened, len(corpus), cut + read, None
    if not (cut and path == "sequential"):
        return (
            head_importance(ctx.adapter, corpus, progress=ctx.progress and len(corpus) > 1, **kw),
            len(corpus),
            cut,
            None,
        )
    blocks = importance_in_blocks(ctx.adapter, whole, seed=ctx.params.get("seed", 0), **kw)  # random blocks of it all
    n = len(blocks.examples)
    cut = f" on {n} of {len(whole)} examples in random blocks of about {BLOCK}, " + (
        f"drawn until every head's normalised importance was within ±{blocks.precision:g} (95%; widest "
        f"±{blocks.widest:.3f}, median ±{blocks.median:.3f}; Chow & Robbins 1965)"
        if blocks.reached
        else f"every block (widest 95% half-width ±{blocks.widest:.3f}, asked ±{blocks.precision:g})"
    )
    return blocks.result, n, cut, blocks


def _screened_gates(ctx: Context, corpus, objective) -> Optional[Any]:
    """Michel et al.'s gradient importance on ``corpus`` read from the run's screened necessity
    (:data:`probe.app.registry.removal_stages.SCREENED`; its screen's
    :attr:`~probe.analyses.necessity.screen.HeadScreen.gate_gradient`, the same ``∂L/∂ξ`` per
    example and head that :func:`~probe.analyses.necessity.importance.gradient_importance`
    computes), or ``None`` where the section computes its own: another method, an objective
    with a clean reference or a readout other than its score, another objective than the
    screen's, no such screen, or ``corpus`` not the first examples of the screened corpus."""
    from probe.analyses.common.objective_base import Objective
    from probe.analyses.necessity.importance import importance_from_gate_gradients

    if ctx.params["method"] not in ("auto", "gradient") or objective.stationary_at_clean:
        return None
    if type(objective).reference is not Objective.reference or type(objective).readout is not Objective.readout:
        return None
    gates = getattr(getattr(ctx.stage(SCREENED, IMPORTANCE), "screen", None), "gate_gradient", None)
    whole = ctx.corpus.whole
    if gates is None or len(gates) != len(whole):
        return None
    if ctx.objective("corpus").called != objective.called or tuple(corpus.texts) != tuple(whole.texts[: len(corpus)]):
        return None
    return importance_from_gate_gradients(gates[: len(corpus)], objective)


def head_evidence(result: ImportanceResult) -> dict:
    """Each head's importance over head gates, normalised per layer, with its rank among
    all heads (``numbers``: ``rank``, ``of``) and the examples it was measured on."""
    from probe.app.registry.evidence import HeadEvidence, finite
    from probe.app.report.style import number

    t = result.table
    if t is None or not len(t):
        return {}
    method, n = str(result.summary.get("method", "")), result.summary.get("examples")
    out = {}
    for r in t.itertuples(index=False):
        if not finite(r.importance):
            continue
        shown = number(r.importance, digits=2)
        rank = int(r.rank) if finite(r.rank) else None
        text = f"Importance by {method} over head gates (Michel et al. 2019), normalised per layer: {shown}" + (
            f", rank {rank} of {len(t)}." if rank is not None else "."
        )
        out[(int(r.layer), int(r.head))] = [
            HeadEvidence(
                "importance",
                "importance",
                text,
                value=float(r.importance),
                count=n,
                count_of="examples",
                unit="importance",
                brief=shown + ("" if rank is None else f", rank {rank}/{len(t)}"),
                strong=(shown,),
                numbers={"method": method, "rank": rank, "of": len(t)},
            )
        ]
    return out


def _mark(evidence: list, n_heads_total: int) -> Optional[tuple]:
    """``(symbol, why)`` from the head's importance rank: ★ top 10%, ● top 30%, · the
    others; ``None`` without a rank."""
    ev = next((e for e in evidence if (e.section, e.kind) == ("importance", "importance")), None)
    rank = ev.number("rank") if ev is not None else None
    if rank is None:
        return None
    r = rank / max(n_heads_total, 1)
    return ("★" if r <= 0.1 else "●" if r <= 0.3 else "·"), f"importance rank {int(rank)} of {n_heads_total}"


def _rank(by: dict, cls: str, sep: str) -> str:
    """The verdict's part: the head's importance rank (of all heads)."""
    from probe.app.report.verdict import SILENT

    imp = by.get("importance", SILENT)
    rank, of = imp.number("rank"), imp.number("of")
    if rank is None:
        return ""
    return f"importance rank {rank:.0f}" + (f"/{of:.0f}" if of is not None else "")


def _block(data, layer: int, head: int) -> str:
    from probe.app.report.evidence import paragraphs

    return paragraphs("importance", "importance")(data, layer, head)


SHOWS = Presentation(
    evidence=head_evidence,
    kinds=("importance",),
    block=HeadBlock("Importance", _block, order=40),
    tables={"importance": TableView("rank", True, ("layer", "head", "importance", "rank", "method"))},
    verdict=(VerdictHint("effect", _rank),),
    mark=HeadMark(_mark, order=10),
)


def run_prune(ctx: Context) -> Result:
    from probe.analyses.necessity.pruning import pruning_curve

    p = ctx.params
    imp = run_importance(ctx)
    name = imp.summary["metric"]
    corpus, _ = model_corpus(ctx, ctx.corpus.whole)
    res = pruning_curve(
        ctx.adapter,
        corpus,
        ctx.objective("per-example"),
        method=p["method"],
        step_fraction=p["step"],
        seed=p["seed"],
        batch_size=p["batch_size"],
        n_steps=p["ig_steps"],
        progress=ctx.progress,
    )
    table = res.table.copy()
    if "pruned" in table.columns:  # heads written the one way: "0:1 0:2" -> "L0H1 L0H2"
        from probe.app.registry.notation import head_name, parse_head

        table["pruned"] = [
            " ".join(head_name(*parse_head(h)) for h in str(v).split()) if isinstance(v, str) else v
            for v in table["pruned"]
        ]
    n_heads = ctx.adapter.n_layers * ctx.adapter.n_heads
    n_imp, n_rand = res.prunable(p["threshold"], "importance"), res.prunable(p["threshold"], "random")

    def figure(d):
        from probe.app.report.ablation_figures import pruning_plot

        return [pruning_plot(table, d / "pruning.png", threshold=p["threshold"])]

    summary = {
        "model": ctx.adapter.name,
        "examples": len(corpus),
        **imp.summary,
        "threshold": p["threshold"],
        "heads": n_heads,
        "prunable_by_importance": n_imp,
        "prunable_random": n_rand,
    }
    return Result(
        tables={**imp.tables, "pruning": table},
        per_head=imp.per_head,
        summary=summary,
        summary_name="pruning",
        writers=imp.writers + [figure],
        notes=[
            f"{n_imp} of {n_heads} heads pruned by importance ({n_rand} in random order) before "
            f"Δ {name} passes {p['threshold']:g}"
        ],
    )


IMPORTANCE = Analysis(
    "importance",
    "Head importance over head gates (Michel et al. 2019)",
    run_importance,
    shows=SHOWS,
    needs=("model", "corpus", "gradients"),
    help="Head importance |dL/dξ| over head gates (Michel et al. 2019), normalised per layer; writes "
    "importance.csv and a heatmap.",
    params=(METHOD, IG_STEPS, BATCH, CAUSAL),
    objective="per-example",
    section=True,
    produces=ImportanceResult,
    report_params={"max_model_examples": 128, "batch_size": 16, "ig_steps": 32},
    settings=model_run_setting,  # the model-run examples line of the report's settings
    modules=("probe.analyses.necessity.importance",),
    reads=(SCREENED(starts=False),),  # where the ablation section screened every head: its gate gradients
    order=31,
    example="probe importance --model zoo:induction --limit 16 --out out/importance",
)

PRUNE = Analysis(
    "prune",
    "Head importance and the pruning curve (by importance vs random order)",
    run_prune,
    needs=("model", "corpus", "gradients"),
    objective="per-example",
    params=(
        METHOD,
        Param("step", float, 0.1, "fraction of heads pruned per step", min=0.0, max=1.0, min_open=True),
        Param(
            "threshold", float, 0.05, "report how many heads go before the metric worsens by more than this", min=0.0
        ),
        IG_STEPS,
        Param("seed", int, 0, "random seed of the random order"),
        BATCH,
    ),
    order=32,
    example="probe prune --model zoo:induction --limit 16 --out out/prune",
)

ANALYSES = (IMPORTANCE, PRUNE)
