"""``probe claims`` and the report's claims section: every head's claims (pattern,
structure, necessity, redundancy, weights, attribution), each with its effect, interval,
count, null and named threshold (:mod:`probe.analyses.claims`).

In the report the section reads, by type, the results of the sections that ran before it
(``consumes``): the ablation section's removals (the same single-head sweep on the same
objective: its mode is not run again), the importance table and the faithfulness verdict;
a claim whose evidence did not run is *not tested*, with the reason
(``ctx.why_no_result(FaithfulnessResult)``). It reads the run's shared removals, the
decided pass and the screened necessity (:mod:`probe.app.registry.removal_stages`): it
joins them (its weights test rides on the decided pass, its null model's bar on the screen)
and takes them instead of running them again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from probe.app.registry import Analysis, Param
from probe.app.registry.presentation import HeadBlock, Presentation, Streamed, TableView
from probe.app.registry.removal_stages import DECIDED, SCREENED
from probe.app.registry.results import AblationResult, ClaimsResult, FaithfulnessResult, ImportanceResult

from ._shared import CAUSAL, NULL, model_corpus, model_run_setting, run_causal_path

if TYPE_CHECKING:
    from probe.app.registry import Context


def _shared_removals(ctx: Any, ablation: Any) -> Any:
    """The removals the claims take instead of running them again: the run's decided pass
    or screened necessity where it made one, else the ablation section's own sweep."""
    if _adapter(ctx) is None:
        return None
    made = ctx.stage(DECIDED, ANALYSIS)
    made = made if made is not None else ctx.stage(SCREENED, ANALYSIS)
    if made is not None:
        return made
    return ablation.removals if ablation else None


def _adapter(ctx):
    """The live model, or ``None`` (a report built from maps, or an RNN zoo model)."""
    return getattr(ctx, "adapter", None)


def run(ctx: Context) -> ClaimsResult:
    from probe.analyses.claims.heads import head_claims
    from probe.analyses.claims.thresholds import thresholds_in_force

    adapter = _adapter(ctx)
    imp, faith = ctx.result_of(ImportanceResult), ctx.result_of(FaithfulnessResult)
    ablation = ctx.result_of(AblationResult)
    # the model runs on the whole corpus's first examples, also when only a kept sample's maps are held
    corpus, cut = model_corpus(ctx, ctx.corpus.whole) if adapter is not None else (ctx.corpus.kept, "")
    # the run's objective, resolved once (printed); without a live model the causal claims are not tested
    objective = ctx.objective("corpus") if adapter is not None else None
    why = ctx.objective_why("corpus") if adapter is not None else ""
    hc = head_claims(
        adapter,
        corpus,
        ctx.maps,
        evidence=ctx.accumulated(ANALYSIS.name),  # pattern and structure sums over the run's (or engine's) corpus
        importance=imp.table if imp else None,
        objective=objective,
        faithfulness=faith.verdict if faith else None,
        faithfulness_info=faith.summary if faith else None,
        faithfulness_reason=ctx.why_no_result(FaithfulnessResult),
        seed=ctx.params.get("seed", 0),
        null=ctx.params.get("null"),
        progress=ctx.progress,
        ablation=_shared_removals(ctx, ablation),  # removals already run are not run again
        objective_why=why,
        runner=ctx.runner,  # the removals' batches wherever the run's engine runs them
        causal=(run_causal_path(ctx, len(ctx.corpus.whole)) if adapter is not None else "exhaustive"),
        screen_corpus=ctx.corpus.whole,  # the sequential and screened paths: every example
    )
    counts = hc.counts()
    causal = hc.objective.get("causal")
    if causal and causal.get("path") == "sequential":
        cut = ""  # every removal read the whole corpus in blocks (the note below says how many per head)
    notes = [n + cut for n in hc.notes]
    if causal:  # on every example, not the cut
        notes.append(causal["note"])
    notes.append(
        "heads per claim: "
        + "; ".join(
            f"{kind}: " + ", ".join(f"{st} {int(n)}" for st, n in row.items() if n) for kind, row in counts.iterrows()
        )
    )
    notes.append(
        "thresholds: "
        + ", ".join(
            f"{k}={v['value']}" for k, v in thresholds_in_force().items() if not isinstance(v["value"], (dict, str))
        )
    )
    summary = {
        "counts": {k: {s: int(n) for s, n in row.items()} for k, row in counts.iterrows()},
        "objective": {k: v for k, v in hc.objective.items() if k != "causal"},
        "causal": (
            {k: v for k, v in hc.objective["causal"].items() if k != "note"}
            if "causal" in hc.objective
            else {"path": "exhaustive", "examples": len(corpus)}
        ),
    }
    return ClaimsResult(
        tables={"claims": hc.to_frame(), "counts": counts.reset_index(), **hc.tables},
        notes=notes,
        summary=summary,
        summary_name="claims",
        data={"claims": hc},
    )


def accumulators(ctx: Context, corpus: Any) -> dict:
    """The pattern and structure claims' sums over examples (an engine streams them); the
    token features and punctuation share the roles section already summed over the same
    held maps are taken as they are (:func:`summed_by_roles`), not summed again."""
    from probe.analyses.claims.heads import evidence_accumulators

    return evidence_accumulators(corpus, summed_by_roles(ctx))


def summed_by_roles(ctx: Context) -> Optional[tuple]:
    """``(token features kept per example, punctuation share)`` of the roles section's
    accumulators where it has filled them already (:meth:`Context.accumulated` over the held
    maps, the examples the pattern claims read), else ``None``. An engine declares every
    section's accumulators before its one pass, so there each sums its own."""
    got = ctx.report.streamed.get("roles")
    token, punct = (got.get("token"), got.get("punct")) if got else (None, None)
    whole = getattr(token, "whole", None)
    if whole is None or whole.examples is None or punct is None:  # not filled, or not kept per example
        return None
    return token, punct


def head_evidence(result: ClaimsResult) -> dict:
    """Each head's claims as evidence: each claim's own
    :func:`probe.analyses.claims.evidence.claim_evidence` (its sentence, effect, interval,
    the count it used, status, test and floor), kind by kind; ``numbers`` adds the
    objective it was measured on, its p-value and its detectable effect."""
    from probe.analyses.claims.evidence import claim_evidence
    from probe.app.registry.evidence import HeadEvidence

    hc = result.claims
    if hc is None:
        return {}
    out = {}
    for key, by_kind in hc.claims.items():
        items = []
        for kind, c in by_kind.items():
            ev = claim_evidence(kind, c)
            items.append(
                HeadEvidence(
                    ANALYSIS.name,
                    kind,
                    ev.text,
                    value=ev.value,
                    interval=(ev.ci_low, ev.ci_high),
                    count=ev.count,
                    unit=ev.units,
                    label=c.statement,
                    headline=False,  # report.md has the claims' own table
                    numbers={
                        **ev.numbers,
                        "objective": c.extra.get("objective", ""),
                        "p": ev.p,
                        "detectable": ev.detectable,
                    },
                    status=ev.status,
                    test=ev.test,
                    floor=ev.floor,
                )
            )
        out[key] = items
    return out


def _block(data, layer: int, head: int) -> str:
    """The necessity claim first when no ablation section ran (where it is shown otherwise)."""
    from ._shared import necessity_block
    from .ablation import ANALYSIS as ABLATION

    return "" if ABLATION.name in data.statuses else necessity_block(data, layer, head)


def _structure_table() -> TableView:
    from probe.analyses.claims.thresholds import STRUCTURE_MIN_COUNT

    columns = ("layer", "head", "relation", "direction", "accuracy", "baseline", "margin")
    return TableView(
        "margin",
        False,
        (*columns, "ci_low", "ci_high", "p", "significant", "count"),
        min_count=STRUCTURE_MIN_COUNT,
        min_count_source="the structure claim's minimum",
    )


SHOWS = Presentation(
    evidence=head_evidence,
    # its evidence kinds are the registered claim kinds (probe.analyses.claims.protocol.claim_kinds)
    block=HeadBlock("Does the model need it?", _block, order=0),
    tables={"structure": _structure_table()},
    streamed=Streamed(
        whole="the claims' pattern and structure evidence",
        part="the claims' removal sweeps on the model-run examples, their batches on the engine",
    ),
    claims=lambda result: result.claims,  # the HeadClaims, which the verdicts are read from
)


ANALYSIS = Analysis(
    "claims",
    "Claims per head (pattern, structure, necessity, redundancy, weights, attribution)",
    run,
    shows=SHOWS,
    needs=("corpus", "maps"),  # without a live model the causal claims are "not tested" (with the reason)
    accumulators=accumulators,
    help="Every head's claims with their statistics: effect, 95% interval, count, null and the named "
    "threshold; a claim that cannot be tested says why. Writes claims.csv, counts.csv and the evidence "
    "tables. Alone it has no ablation, importance or faithfulness run to reuse (the report has): the "
    "attribution claim is then not tested.",
    params=(
        Param("seed", int, 0, "random seed of the nulls"),
        NULL,
        CAUSAL,
    ),
    objective="corpus",
    section=True,
    produces=ClaimsResult,
    consumes=(AblationResult, ImportanceResult, FaithfulnessResult),
    # the run's shared removals: joined (the weights test on the decided pass' blocks, the null
    # model's bar on the screen), never started here
    reads=(DECIDED("necessity", "weights", starts=False), SCREENED("necessity", "null", starts=False)),
    settings=model_run_setting,  # the model-run examples line of the report's settings
    report_params={"max_model_examples": 128},  # the ablation section's cut: its sweep is reused
    modules=("probe.analyses.claims.heads",),
    order=90,
    example="probe claims --model zoo:prev-token --limit 16 --out out/claims",
)
