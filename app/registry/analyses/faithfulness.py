"""``probe faithfulness`` and the report's faithfulness section: is attention an
explanation? Attention vs attributions (Kendall τ), head permutations (Jain & Wallace
2019) and evidence recovery where the ground truth is known."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from probe.app.registry import Analysis, Param, SkipAnalysis
from probe.app.registry.presentation import HeadBlock, Presentation, TableView, VerdictHint
from probe.app.registry.removal_stages import DECIDED, SCREENED
from probe.app.registry.results import FaithfulnessResult

from ._shared import NULL, head_count

if TYPE_CHECKING:
    from probe.analyses.common.objective import Objective
    from probe.app.registry import Context


def default_target(ctx: Context) -> str:
    """What ``--objective auto`` means here (the run's ``explain`` objective,
    :func:`probe.analyses.common.objective.resolve_objective` with ``use="explain"``):
    ``loss:-1`` (the next-token loss of the last token) for causal language models,
    ``logit`` for models with a classifier head (zoo, ``*ForSequenceClassification``),
    ``mlm`` (the masked-LM loss of the sentence's own tokens) for a masked-LM checkpoint,
    ``similarity`` (cosine similarity to the nearest neighbour, or to ``--pairs``) for
    sentence encoders and the encoder underneath any other head; :class:`SkipAnalysis`
    otherwise."""
    return _target(ctx).called


def _target(ctx: Context) -> Objective:
    """The target the section explains: the run's ``explain`` objective (resolved once,
    printed with why it was chosen); nothing to explain skips the section."""
    from probe.errors import NotApplicable

    try:
        return ctx.objective("explain")
    except NotApplicable as exc:
        raise SkipAnalysis(exc.reason) from None


def run(ctx: Context) -> FaithfulnessResult:
    """The attention-vs-attribution study of the run's target (:func:`probe.analyses.explanation.faithfulness.run_faithfulness`)."""
    return _run(ctx, _target(ctx))


def _null(name: Any) -> Any:
    """``run_faithfulness``'s ``null`` from the ``--null`` option (unset: the default null)."""
    return True if name is None else (False if name == "none" else name)


#: examples the report explains at more than :data:`._shared.SCREEN_ABOVE_HEADS` heads (unless
#: ``--explained-examples``): a compute cap. Integrated gradients to 1% completeness through
#: SmolLM2's 30 layers take 8, 16, 32 and then 64 steps on every example (the gate doubles,
#: 120 forward + backward passes of it), so the 71 the attribution claim's power rule asks
#: would cost more than the rest of the report together on a 2-core machine
EXPLAINED_AT_SCALE = 16


def _explained(p: dict, heads: int = 0) -> tuple:
    """``(N or None, rule)``: how many examples to explain and why: ``--explain-limit`` as
    given, else with ``--sized-by-power`` as many as the attribution claim's power needs
    (:func:`probe.analyses.claims.attribution.examples_needed`, capped at
    :data:`~probe.analyses.claims.thresholds.EXPLAIN_CAP`, and at :data:`EXPLAINED_AT_SCALE`
    for a model of more than :data:`._shared.SCREEN_ABOVE_HEADS` ``heads``), else every example."""
    if p.get("explain_limit") is not None:
        return p["explain_limit"], "the number fixed by --explained-examples (--explain-limit)"
    if not p.get("sized_by_power"):
        return None, ""
    from probe.analyses.claims import thresholds as T
    from probe.analyses.claims.attribution import examples_needed, sizing_rule

    from ._shared import SCREEN_ABOVE_HEADS

    needed = examples_needed()
    if heads > SCREEN_ABOVE_HEADS and needed > EXPLAINED_AT_SCALE:
        return EXPLAINED_AT_SCALE, (
            f"{EXPLAINED_AT_SCALE}: a compute cap above {SCREEN_ABOVE_HEADS} heads (the attribution claim's power "
            f"rule asks {needed}; on fewer it calls only the clearer cases; --explained-examples N sets the number)"
        )
    return min(needed, T.EXPLAIN_CAP), sizing_rule(needed)


def explained_setting(n: int, params: dict, heads: int = 0) -> str:
    """The report's settings line on the examples faithfulness explains out of ``n``, for the
    section's parameters ``params`` and a model of ``heads`` heads (before the run: a probe's
    split may leave fewer)."""
    from probe.analyses.explanation.sample import N_STRATA

    from ._shared import SCREEN_ABOVE_HEADS

    limit, rule = _explained(params, heads)
    if limit is None or n <= limit:
        return f"all {n}"
    how = (
        "fixed"
        if params.get("explain_limit") is not None
        else f"a compute cap above {SCREEN_ABOVE_HEADS} heads"
        if heads > SCREEN_ABOVE_HEADS
        else "as many as the attribution claim's power needs"
    )
    return (
        f"{limit} of {n} explained, {how}, drawn across the corpus in {min(N_STRATA, limit)} length strata "
        "(--explained-examples N fixes the number, 0 explains every example)"
    )


def _settings(n: int, heads: int, params: dict) -> dict:
    """The report's settings line on the examples this section explains (:func:`explained_setting`)."""
    return {f"{ANALYSIS.name} examples": explained_setting(n, params, heads)}


def _explained_note(info: dict, rule: str) -> str:
    """The note on which examples were explained: how many of how many, how drawn, and why."""
    drawn = info.get("explained")
    if drawn:
        said = (
            f"{drawn['n']} of {drawn['of']} explained, drawn across the corpus in {drawn['strata']} length strata "
            f"(seed {drawn['seed']}) among its {drawn['eligible']} examples of ≥ {drawn['min_words']} words, the "
            f"agreement test's minimum ({drawn['tokens_min']}–{drawn['tokens_max']} tokens; the longest "
            f"{drawn['corpus_tokens_max']})"
        )
    else:
        said = f"all {info['n_examples']} examples explained"
    left = info.get("unreadable")
    if left:
        said += f"; {left['n']} of {left['of']} left out, too short for the target ({left['why']})"
    return said + (f"; {rule}" if rule else "")


def _steps_note(gate: dict) -> str:
    """The note on IG's steps per example: where they started, the median and the most."""
    counts = ", ".join(f"{n} with {k}" for k, n in sorted(gate.get("steps_counts", {}).items()))
    return (
        f"IG steps per example{' given IG' if gate.get('untried') else ''}, doubled from {gate['start_steps']} "
        "until the completeness error is within "
        f"{gate['tolerance']:.0%}: median {gate['median_steps']:g}, max {gate['max_steps']} ({counts}); "
        f"{gate['excluded']} still beyond it left out"
        + (
            f" ({gate['untried']} of them never given IG: a pilot of {gate['pilot']} spread over the lengths, "
            f"computed first, passed at none of {gate['start_steps']} to {gate['max_steps']} steps)"
            if gate.get("untried")
            else ""
        )
    )


#: the run's ``info`` the section keeps in its summary: what the report shows and what the
#: attribution claim reads from it (:func:`probe.analyses.claims.attribution.attribution_claims`:
#: the null model's bar, whether it could be computed, the examples its agreement test skipped)
SUMMARY_KEYS = (
    "target", "n_examples", "ig_completeness", "ig_gate", "probe", "pairs", "pooling", "reference_why",
    "null_agreement", "null_agreement_unavailable", "agreement_skipped_short",
)  # fmt: skip


def section_summary(info: dict, rule: str = "") -> dict:
    """The section's summary from :func:`~probe.analyses.explanation.faithfulness.run_faithfulness`'s
    ``info``: its :data:`SUMMARY_KEYS` and ``explained`` (which examples, how drawn, ``rule``)."""
    summary = {k: val for k, val in info.items() if k in SUMMARY_KEYS}
    summary["explained"] = {k: v for k, v in (info.get("explained") or {}).items() if k != "indices"}
    summary["explained"].update(n=info["n_examples"], rule=rule or "every example")
    return summary


def _embeddings(ctx: Context):
    """``(readout described, [n, d])``: the whole corpus's clean embeddings the run's decided
    pass read (:data:`probe.app.registry.removal_stages.DECIDED`; NaN rows for sentences it did
    not take), or ``None``: the similarity target embeds only the sentences they miss (on EWT
    dev, none: 8.7 s)."""
    run = ctx.stage(DECIDED, ANALYSIS)
    if run is None or run.clean is None or run.n != len(ctx.corpus.whole):
        return None
    return run.readout, run.clean


#: heads permuted on the screened path when the ablation section's screen is not at hand
PERMUTED_AT_SCALE = 32

#: explained examples the permutations run on, on the screened path: a head's verdict reads
#: the median output change over them (5 permutations each), so 16 examples give each head
#: 80 permuted forwards; on every explained example (71) the permutations alone of SmolLM2's
#: screened heads would cost more than the rest of the report
PERMUTED_EXAMPLES_AT_SCALE = 16


def _permuted_heads(ctx: Context) -> tuple:
    """``(heads to permute or None for all, [its note], examples to permute on or None for all)``:
    the ``heads`` parameter when given; on the
    screened path (more than :data:`._shared.SCREEN_ABOVE_HEADS` heads: one permuted forward
    per head and example batch would make the cost grow with the head count) the heads the
    ablation section's screen removed exactly (those that could matter, and its random audit),
    else :data:`PERMUTED_AT_SCALE` heads drawn at random (seeded), each on
    :data:`PERMUTED_EXAMPLES_AT_SCALE` of the explained examples; the others' verdicts are
    read from the agreement alone."""
    import numpy as np

    from ._shared import causal_path

    p = ctx.params
    if p["heads"] is not None or p["permutations"] < 1:
        return p["heads"], [], None
    m = head_count(ctx.adapter)
    over = ctx.report.overrides if ctx.report is not None else {}
    if causal_path(over.get("causal"), len(ctx.corpus.whole), None, m) != "screened":
        return None, [], None
    screened = ctx.stage(SCREENED, ANALYSIS)
    table = getattr(screened, "table", None)
    if table is not None and "role" in table:
        exact = table[table["role"] != "screened out"]
        heads = [(int(r.layer), int(r.head)) for r in exact.itertuples(index=False)]
        why = "the heads the ablation section's screen removed exactly (those that could matter, and its audit)"
    else:
        pick = np.random.default_rng(int(p.get("seed", 0))).choice(m, min(m, PERMUTED_AT_SCALE), replace=False)
        heads = [divmod(int(i), int(ctx.adapter.n_heads)) for i in sorted(pick)]
        why = f"{len(heads)} heads drawn at random (seed {p.get('seed', 0)})"
    return (
        heads,
        [
            f"attention permuted in {len(heads)} of {m} heads only, each on {PERMUTED_EXAMPLES_AT_SCALE} of the "
            f"explained examples drawn at random: {why}; at more than 144 heads a permuted forward per head and "
            "example would make the section's cost grow with the head count (the others' verdicts read the "
            "agreement alone)"
        ],
        PERMUTED_EXAMPLES_AT_SCALE,
    )


def _permutations(p: dict, heads: Any, examples: Optional[int] = None) -> dict:
    """The permutation test's settings: permutations per example and head, the heads, the
    examples it runs on (``None``: every explained one), whether to run it."""
    return {
        "n_permutations": max(p["permutations"], 1),
        "heads": heads,
        "permute": p["permutations"] > 0,
        "permute_examples": examples,
    }


def _run(ctx: Context, target: Objective) -> FaithfulnessResult:
    from probe.analyses.explanation.faithfulness import run_faithfulness, verdict_rule

    p = ctx.params
    (limit, rule), (permuted, said, on) = _explained(p, head_count(ctx.adapter)), _permuted_heads(ctx)
    rep = run_faithfulness(
        ctx.adapter,
        ctx.corpus.whole,
        target,
        methods=list(p["methods"]),
        attention_methods=list(p["attention_methods"]),
        n_steps=p["steps"],
        internal_batch_size=p["internal_batch_size"],
        **_permutations(p, permuted, on),
        max_examples=limit,
        seed=p["seed"],
        progress=ctx.progress and len(ctx.corpus.whole) > 1,
        pairs=p.get("pairs"),
        null=_null(p.get("null")),
        embeddings=_embeddings(ctx),
    )
    v = rep.verdict
    counts = v["verdict"].value_counts().to_dict()
    notes = [
        f"{rep.info['n_examples']} examples, target {target.called}: "
        + ", ".join(f"{n} head{'s' if n != 1 else ''} “{verdict}”" for verdict, n in counts.items()),
        verdict_rule(v),
        _explained_note(rep.info, rule),
        *said,
    ]
    if rep.info.get("ig_gate"):
        notes.append(_steps_note(rep.info["ig_gate"]))
    if rep.info.get("reference_why"):  # IG not trusted (or not computed): what the verdict compares with
        notes.append(rep.info["reference_why"])
    probe = rep.info.get("probe") or {}
    if probe:
        notes.append(
            f"probe {probe['property']}: held-out accuracy {probe['test_accuracy']:.3f} "
            f"(majority {probe['majority_baseline']:.3f}, {probe['n_test']} sentences)"
        )
        if probe.get("test_accuracy", 1.0) <= probe.get("majority_baseline", 0.0):
            notes.append(
                f"the {probe.get('property')} probe is no better than the majority class on held-out "
                f"sentences: its explanations say little; give a larger treebank"
            )
    per_head = v.rename(columns={c: f"faith_{c}" for c in v.columns if c not in ("layer", "head")})
    summary = section_summary(rep.info, rule)
    if rep.info.get("pairs"):
        notes.append(f"similarity target: {rep.info['pairs']} ({rep.info.get('pooling')})")
    comp = rep.info.get("ig_completeness")
    if comp:
        notes.append(
            f"IG completeness (sum of attributions vs f(x) − f(baseline)): median relative error "
            f"{comp['median_relative_error']:.3g}, max {comp['max_relative_error']:.3g}, "
            f"{comp['share_within_1pct']:.0%} of examples within 1%"
        )
    return FaithfulnessResult(
        tables={"verdict": v, "agreement": rep.agreement.summary},
        per_head=per_head,
        notes=notes,
        summary=summary,
        writers=[lambda d: rep.write(d)],
        data={"target": target.called},
    )


def run_in_report(ctx: Context) -> FaithfulnessResult:
    """The report's variant: a probe target is first checked against chance
    (:func:`probe.analyses.claims.attribution.target_validity`) and the section is skipped,
    with the numbers, when it is no better (before the slow attributions)."""
    from probe.analyses.common.objective import Unfitted

    target = _target(ctx)
    if isinstance(target, Unfitted) and target.kind == "probe":
        from probe.analyses.claims.attribution import target_validity
        from probe.analyses.explanation.faithfulness import fit_objective

        info = fit_objective(ctx.adapter, target, ctx.corpus.whole, seed=ctx.params["seed"])[3]
        valid, words = target_validity(info)
        if not valid:
            raise SkipAnalysis(f"not tested: target no better than chance ({words})")
    return _run(ctx, target)


def _called(method: str) -> str:
    """An attribution method as the head pages name it: ``IG``, ``blank-out (leave-one-out occlusion)`` …"""
    from probe.analyses.explanation.reference import WORDS

    return "IG" if method == "ig" else WORDS.get(method, method)


def head_evidence(result: FaithfulnessResult) -> dict:
    """Each explained head's agreement with the attributions (Kendall τ per attribution,
    the share of examples where it is significant), the effect of permuting its weights
    (Jain & Wallace 2019) and the verdict, over the examples explained (``count``)."""
    from probe.app.registry.evidence import HeadEvidence, finite
    from probe.app.report.style import number

    v = result.verdict
    if v is None or not len(v):
        return {}
    n = result.n_examples
    refs = [c[len("tau_") :] for c in v.columns if c.startswith("tau_") and not c.endswith("_significant")]
    out = {}
    for rec in v.to_dict("records"):
        verdict = rec.get("verdict")
        if not verdict or verdict != verdict:
            continue
        parts, strong, numbers = [], [], {}
        for ref in refs:
            tau, share = rec.get(f"tau_{ref}"), rec.get(f"tau_{ref}_significant")
            shown = number(tau if finite(tau) else None, digits=2, signed=True)
            strong.append(shown)
            numbers.update({f"tau {ref}": tau, f"significant share {ref}": share})
            parts.append(
                f"Kendall τ between its attention and the {_called(ref)} attributions: {shown} (mean over "
                f"{n or '?'} sentences"
                + (
                    f"; significant at p < 0.05 in {number(share, percent=True, digits=2)} of them"
                    if finite(share)
                    else ""
                )
                + ")."
            )
        tvd = rec.get("tvd_median")
        if finite(tvd):
            numbers["tvd median"] = tvd
            parts.append(
                f"Permuting its attention moves the output distribution by a median total variation of "
                f"{number(tvd, digits=2)} (Jain & Wallace 2019)."
            )
        parts.append(f"Verdict: {verdict}.")
        tau0: Any = rec.get(f"tau_{refs[0]}") if refs else None
        out[(int(rec["layer"]), int(rec["head"]))] = [
            HeadEvidence(
                "faithfulness",
                "faithfulness",
                " ".join(parts),
                value=float(tau0) if finite(tau0) else float("nan"),
                count=n,
                count_of="sentences",
                unit=f"Kendall τ with {refs[0]}" if refs else "",
                label=str(verdict),
                brief=str(verdict) + (f" (τ {float(tau0):+.2f})" if finite(tau0) else ""),
                strong=(*strong, str(verdict)),
                numbers={"reference": refs[0] if refs else "", **numbers},
            )
        ]
    return out


def _weights(by: dict, cls: str, sep: str) -> str:
    """The verdict's remark: whether the head's weights agree with the attributions (its
    verdict and τ), or that permuting them alone changes nothing."""
    from probe.app.report.verdict import SILENT, num

    ev = by.get("faithfulness", SILENT)
    v = ev.label
    if not v:
        return ""
    tau, ref = num(ev.value), ev.numbers.get("reference") or ""
    if v == "weights irrelevant":  # permuting one head alone changed nothing: not "meaningless"
        return "permuting its weights alone changes nothing"
    return f"weights {v} with {ref or 'attributions'}" + (f" (τ {tau:+.2f})" if tau is not None else "")


#: the claims that decide what the faithfulness block's "relevant" and "agrees" would say:
#: whether where the head looks matters, and whether its attention agrees with the attributions
VERDICT_CLAIMS = ("weights", "attribution")


def _block(data, layer: int, head: int) -> str:
    """The head's faithfulness evidence; where the claims ran, its verdict is theirs (each of
    :data:`VERDICT_CLAIMS` with its status), never the permutation test's own word beside
    them ("relevant" beside "Do the weights matter — does not hold")."""
    from dataclasses import replace

    from probe.analyses.claims.protocol import claim_test
    from probe.app.report.evidence import items, one, sentence
    from probe.app.report.html import esc

    claims = [(k, one(data, layer, head, "claims", k)) for k in VERDICT_CLAIMS]
    claims = [(k, c) for k, c in claims if c is not None]
    out = []
    for ev in items(data, layer, head, "faithfulness", "faithfulness"):
        if claims:
            said = f" Verdict: {ev.label}."
            ev = replace(ev, text=ev.text.replace(said, ""), strong=tuple(x for x in ev.strong if x != ev.label))
        out.append(f"<p>{sentence(ev)}</p>")
    if claims and out:
        words = "; ".join(f"{claim_test(k).title} — {c.status}" for k, c in claims)
        out.append(f'<p class="verdict-claims">Verdict (the claims above): {esc(words)}.</p>')
    return "".join(out)


SHOWS = Presentation(
    evidence=head_evidence,
    kinds=("faithfulness",),
    block=HeadBlock("Is its attention an explanation?", _block, order=50),
    tables={"verdict": TableView("|tau_ig|"), "agreement": TableView("|tau_mean|")},
    verdict=(VerdictHint("remark", _weights),),
)


ANALYSIS = Analysis(
    "faithfulness",
    "Faithfulness: attention vs attributions",
    run,
    shows=SHOWS,
    needs=("model", "corpus", "gradients"),
    help="Is attention an explanation? Writes agreement.csv, permutation.csv, ground_truth.csv (when the "
    "evidence is known) and verdict.csv to --out. The default target: loss:-1 (next-token loss) for a causal LM, "
    "logit for a zoo classifier, probe:subject-number on a treebank.",
    objective="explain",
    # the run's shared removals, read where made: the decided pass' clean embeddings, the screen's heads
    reads=(DECIDED(starts=False), SCREENED(starts=False)),
    settings=_settings,
    params=(
        Param(
            "pairs",
            str,
            None,
            "similarity target: a file of sentence pairs, one per line, tab-separated "
            "(default: each sentence with its nearest neighbour)",
        ),
        Param("methods", "names", ("ig", "saliency", "input_x_gradient", "blank_out"), "attribution methods"),
        Param(
            "attention_methods",
            "names",
            ("attention", "rollout", "flow"),
            "attention scores: attention,rollout,flow,norm-rollout",
        ),
        Param("steps", int, 50, "IG steps", min=1),
        Param("internal_batch_size", int, 64, "most rows per forward (bounds memory)", min=1),
        Param("permutations", int, 5, "attention permutations per example and head (0: skip)", min=0),
        Param("heads", "heads", None, "heads to permute, e.g. L0H1,L5H3 (default all)"),
        Param(
            "explain_limit",
            int,
            None,
            "explain N examples drawn across the corpus, stratified by length (after a probe's train/test split)",
            min=1,
            aliases=("--max-examples",),
        ),
        Param(
            "sized_by_power",
            bool,
            False,
            "explain as many examples as the attribution claim's power needs (thresholds agreement_margin, "
            "explain_cap), drawn across the corpus, stratified by length; --explain-limit overrides it",
        ),
        Param("seed", int, 0, "random seed"),
        NULL,
    ),
    section=run_in_report,
    produces=FaithfulnessResult,
    modules=("probe.analyses.explanation.faithfulness",),
    report_params={
        "methods": ("ig",),
        "attention_methods": ("attention", "rollout", "flow"),
        "steps": 8,
        "permutations": 1,
        "explain_limit": None,
        "sized_by_power": True,
    },
    order=40,
    example="probe faithfulness --model zoo:agreement --limit 8 --steps 8 --permutations 2 --out out/faith",
)
