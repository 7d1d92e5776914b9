"""The built-in report sections: each wires one analysis module's public functions.

A section runs only when its analysis module imports and its input is present (see
:mod:`probe.app.report.sections`); otherwise the report lists it as skipped, with the reason.
Columns a section puts in ``per_head`` are shown on the head pages; the verdict
(:mod:`probe.app.report.verdict`) reads the ones it knows (``role``, ``to_special``,
``syntax_relation`` …).
"""

from __future__ import annotations

import logging

from .sections import Section, SectionResult, SkipSection, register_section

log = logging.getLogger(__name__)

#: examples used by the corpus-level rollout/flow section (representatives first)
FLOW_EXAMPLES = 3
FLOW_MAX_TOKENS = 48


#: most examples the sections that run the live model (ablation, importance) use; the
#: analyses over captured maps (roles, syntax) use the whole corpus. 128 keeps the EWT dev
#: report near its budget (bench/bench_report.py).
MODEL_EXAMPLES = 128


def model_corpus(ctx):
    """``(corpus, note)``: the first :data:`MODEL_EXAMPLES` examples for the sections that
    run the model once per head, and a note saying so when the corpus was cut."""
    n = len(ctx.corpus)
    if n <= MODEL_EXAMPLES:
        return ctx.corpus, ""
    return (ctx.corpus.subset(range(MODEL_EXAMPLES), reason="beyond the report's model-run limit"),
            f" on the first {MODEL_EXAMPLES} of {n} examples")


# ---- syntax (issue 6) ------------------------------------------------------------------
#: fewest instances of a relation for it to be named on a head page: 1 in 200 dependencies,
#: within [5, 100] (the bundled sample has ~300 dependencies, EWT dev ~22,000; without a
#: floor that grows with the corpus, rare relations win by chance)
SYNTAX_MIN_COUNT = (5, 100)
#: relations never named as a head's best (punctuation attaches anywhere; ``all`` pools)
SYNTAX_EXCLUDED = ("punct", "all", "root")


def _run_syntax(ctx) -> SectionResult:
    from probe.analyses.structure.syntax import relation_accuracy
    from probe.analyses.structure.word_graph import Skipped, word_graphs

    skipped = Skipped([])
    acc = relation_accuracy(word_graphs(ctx.maps, ctx.corpus.sentences, skipped=skipped)).with_all()
    relations = acc.to_frame()
    lo, hi = SYNTAX_MIN_COUNT
    floor = int(min(hi, max(lo, int(acc.counts.sum()) // 200)))
    best = acc.best(min_count=floor)
    per_head = best_relation_per_head(best, floor)
    notes = [f"{len(acc.relations) - 1} relations over {acc.n_sentences} sentences; the best head of each "
             f"relation with ≥ {floor} instances against the best fixed-offset baseline (Clark et al. 2019)"]
    if len(skipped):
        notes.append(f"{len(skipped)} sentences skipped (word alignment): see tables/syntax_skipped.csv")
    tables = {"best": best, "relations": relations}
    if len(skipped):
        tables["skipped"] = skipped.to_frame()
    return SectionResult(tables=tables, per_head=per_head, notes=notes)


def best_relation_per_head(best, min_count: int):
    """Heads that are the best head for some relation (Clark et al. 2019's Table 1 view):
    for each, the relation it beats the fixed-offset baseline by most, and every relation
    it is best for. ``best``: :meth:`probe.analyses.structure.syntax.RelationAccuracy.best`; relations
    with fewer than ``min_count`` instances, and :data:`SYNTAX_EXCLUDED`, are left out.
    Heads best for nothing get no row."""
    t = best[(best["count"] >= min_count) & ~best["relation"].isin(SYNTAX_EXCLUDED)].copy()
    t["margin"] = t["accuracy"] - t["baseline_accuracy"]
    t["label"] = t["relation"] + " (" + t["direction"].str.replace("_", " ") + ")"
    best_for = t.sort_values("margin", ascending=False).groupby(["layer", "head"])["label"].agg("; ".join)
    t = t.sort_values(["margin", "count"], ascending=False, kind="stable").drop_duplicates(["layer", "head"])
    t = t.sort_values(["layer", "head"])
    out = t[["layer", "head", "relation", "direction", "accuracy", "baseline_accuracy", "baseline_offset",
             "count"]].rename(columns={"relation": "syntax_relation", "direction": "syntax_direction",
                                       "accuracy": "syntax_accuracy", "baseline_accuracy": "syntax_baseline",
                                       "baseline_offset": "syntax_offset", "count": "syntax_count"})
    out["syntax_best_for"] = [best_for[(l_, h)] for l_, h in zip(out["layer"], out["head"])]
    return out.reset_index(drop=True)


# ---- ablation (issue 7) ----------------------------------------------------------------
def _run_ablation(ctx) -> SectionResult:
    from probe.analyses.necessity.ablation import sweep_heads

    metric = _metric(ctx)
    corpus, cut = model_corpus(ctx)
    res = sweep_heads(ctx.adapter, corpus, metric=metric, mode="zero")
    t = res.table
    per_head = t[["layer", "head", "metric", "mode", "clean", "ablated", "delta", "ci_low", "ci_high"]].rename(
        columns={c: f"ablation_{c}" for c in ("metric", "mode", "clean", "ablated", "delta", "ci_low", "ci_high")})
    biggest = float(t["delta"].abs().max()) or 1.0
    per_head = per_head.assign(ablation_relative=(t["delta"].abs() / biggest).to_numpy())
    sig = int(((t["ci_low"] > 0) | (t["ci_high"] < 0)).sum())
    out = SectionResult(tables={"ablation": t}, per_head=per_head,
                         notes=[f"zero-ablation of each head alone{cut}, metric {metric} ({res.path}); "
                                f"{sig} of {len(t)} heads change it with a 95% CI excluding 0"],
                         summary={"metric": metric, "path": res.path, "significant_heads": sig})
    out.sweep = res  # per-example scores, reused by the claims section
    return out


# ---- importance (issue 7) --------------------------------------------------------------
def _metric(ctx) -> str:
    from probe.analyses.common.metrics import applicable_metrics

    metrics = applicable_metrics(ctx.adapter, ctx.corpus)
    return "loss" if "loss" in metrics else metrics[0]


def _run_importance(ctx) -> SectionResult:
    from probe.analyses.necessity.importance import head_importance

    corpus, cut = model_corpus(ctx)
    res = head_importance(ctx.adapter, corpus, metric=_metric(ctx))
    t = res.to_frame()
    per_head = t[["layer", "head", "importance", "rank"]].rename(columns={"rank": "importance_rank"})
    per_head = per_head.assign(importance_of=len(t), importance_method=res.method)
    return SectionResult(tables={"importance": t}, per_head=per_head,
                         notes=[f"head importance by {res.method} over head gates{cut}, metric {res.metric}, "
                                "normalised per layer (Michel et al. 2019)"])


# ---- faithfulness (issue 8) ------------------------------------------------------------
#: settings of the report's faithfulness run (smaller than ``probe faithfulness``')
FAITH = dict(methods=("ig",), attention_methods=("attention",), n_steps=8, n_permutations=1,
             max_examples=16)


def faithfulness_target(ctx) -> str:
    """``logit`` for models with a classifier head (zoo), ``probe:subject-number`` for the
    sentence model on a treebank; :class:`SkipSection` otherwise."""
    if str(ctx.adapter.name).startswith("zoo:") or ctx.corpus.examples:
        return "logit"
    if ctx.corpus.sentences:
        return "probe:subject-number"
    raise SkipSection("no target to explain: the sentence model needs a treebank (--conllu) for its probe")


def _check_target(ctx, spec: str) -> None:
    """Skip (and say why in the settings) when a probe target is no better than chance
    (:func:`probe.analyses.claims.attribution.target_validity`), before the slow part."""
    from probe.analyses.claims.attribution import target_validity
    from probe.analyses.explanation.faithfulness import resolve_target

    valid, words = target_validity(resolve_target(ctx.adapter, spec, ctx.corpus)[3])
    ctx.settings["faithfulness target"] = words if valid else f"not tested: target no better than chance: {words}"
    if not valid:
        raise SkipSection(f"not tested: target no better than chance ({words})")


def _run_faithfulness(ctx) -> SectionResult:
    from probe.analyses.explanation.faithfulness import run_faithfulness

    spec = faithfulness_target(ctx)
    if spec.startswith("probe:"):
        _check_target(ctx, spec)
    try:
        rep = run_faithfulness(ctx.adapter, ctx.corpus, spec, **FAITH)
    except ValueError as exc:
        ctx.settings["faithfulness target"] = f"not tested: {exc}"
        raise
    v = rep.verdict
    ref = v.attrs.get("reference", "ig")
    per_head = v.rename(columns={c: f"faith_{c}" for c in v.columns if c not in ("layer", "head")})
    notes = [f"attention vs {ref} attributions (Kendall τ) and head permutations (Jain & Wallace 2019) "
             f"on {rep.info.get('n_examples')} examples, target {rep.info.get('target')}"]
    probe = rep.info.get("probe") or {}
    if probe and probe.get("test_accuracy", 1.0) <= probe.get("majority_baseline", 0.0):
        notes.append(f"the {probe.get('property')} probe is no better than the majority class on held-out "
                     f"sentences ({probe['test_accuracy']:.2f} vs {probe['majority_baseline']:.2f}, "
                     f"{probe.get('n_test')} sentences): its explanations say little; give a larger treebank")
    return SectionResult(tables={"verdict": v, "agreement": rep.agreement.summary}, per_head=per_head,
                         notes=notes,
                         summary={k: v for k, v in rep.info.items() if k in ("target", "n_examples", "ig_completeness",
                                                                                 "probe")})


# ---- roles (issue 4) -------------------------------------------------------------------
ROLE_FACTS = ("role", "confidence", "decided_by", "also", "to_cls", "to_sep", "to_special", "to_punct",
              "prev", "self", "next", "positional_share", "positional_offset", "entropy_ratio",
              "max_attention", "argmax_rare")


def _run_roles(ctx) -> SectionResult:
    from probe.analyses.patterns.roles import head_roles, role_counts

    syntax = ctx.results.get("syntax")
    best = syntax.tables.get("best") if syntax else None
    if best is not None:  # the pooled "all" and punct are not evidence of a syntactic head
        best = best[~best["relation"].isin(SYNTAX_EXCLUDED)]
    roles = head_roles(ctx.maps, syntax=best)
    cols = [c for c in ROLE_FACTS if c in roles.columns]
    counts = role_counts(roles)
    notes = ["heads per role: " + ", ".join(f"{r} {n}" for r, n in zip(counts["role"], counts["heads"]))]
    if len(ctx.maps) < 100:
        notes.append(f"roles estimated from {len(ctx.maps)} examples (fewer than 100: unstable)")
    return SectionResult(tables={"roles": roles, "role_counts": counts},
                         per_head=roles[["layer", "head"] + cols], notes=notes,
                         summary={"role_counts": dict(zip(counts["role"], counts["heads"].astype(int)))})


# ---- rollout and flow (issue 5): corpus level, not per head ----------------------------
def _run_rollout(ctx) -> SectionResult:
    import pandas as pd

    from probe.analyses.flow.attention_flow import flow_maps
    from probe.analyses.flow.rollout import rollout_maps

    picks = [i for i in ctx.representatives if ctx.maps[i].n_tokens <= FLOW_MAX_TOKENS][:FLOW_EXAMPLES]
    if not picks:
        raise SkipSection(f"no example of at most {FLOW_MAX_TOKENS} tokens for flow")
    rows = []
    for i in picks:
        m = ctx.maps[i]
        for scores in (rollout_maps(m), flow_maps(m)):
            df = scores.to_frame()
            df.insert(0, "example", i)
            rows.append(df)
    table = pd.concat(rows, ignore_index=True)
    top = (table.sort_values("score", ascending=False).groupby(["example", "method"]).head(5)
           .sort_values(["example", "method", "score"], ascending=[True, True, False]))
    return SectionResult(tables={"scores": table, "top": top},
                         notes=[f"rollout and flow from position 0 on examples {picks} (Abnar & Zuidema 2020)"])


register_section(Section("syntax", "Syntactic relations against positional baselines", _run_syntax,
                         modules=("probe.analyses.structure.syntax",), needs=("treebank",)))
register_section(Section("ablation", "Ablation: does the model need the head?", _run_ablation,
                         modules=("probe.analyses.necessity.ablation", "probe.analyses.common.metrics"), needs=("model",)))
register_section(Section("importance", "Importance (head gates)", _run_importance,
                         modules=("probe.analyses.necessity.importance", "probe.analyses.common.metrics"), needs=("model",)))
register_section(Section("faithfulness", "Faithfulness: attention vs attributions", _run_faithfulness,
                         modules=("probe.analyses.explanation.faithfulness",), needs=("model",)))
register_section(Section("roles", "Head roles", _run_roles, modules=("probe.analyses.patterns.roles",)))
register_section(Section("rollout", "Rollout and flow", _run_rollout,
                         modules=("probe.analyses.flow.rollout", "probe.analyses.flow.attention_flow")))


# ---- claims (issue 14): per-head claims with their statistics ------------------------------
def _run_claims(ctx) -> SectionResult:
    """Every head's claims (:mod:`probe.analyses.claims`); reads the importance and
    faithfulness results when those sections ran. The :class:`HeadClaims` object is kept
    on the result as ``.claims`` for the verdicts and pages."""
    from probe.analyses.claims.heads import head_claims
    from probe.analyses.claims.thresholds import thresholds_in_force

    imp = ctx.results.get("importance")
    faith = ctx.results.get("faithfulness")
    corpus, cut = model_corpus(ctx) if ctx.adapter is not None else (ctx.corpus, "")
    abl = ctx.results.get("ablation")
    hc = head_claims(ctx.adapter, corpus, ctx.maps, importance=imp.tables.get("importance") if imp else None,
                     ablation=getattr(abl, "sweep", None), metric=abl.summary.get("metric") if abl else None,
                     faithfulness=faith.tables.get("verdict") if faith else None,
                     faithfulness_info=faith.summary if faith else None,
                     faithfulness_reason=ctx.settings.get("faithfulness target",
                                                          "the faithfulness section did not run"))
    counts = hc.counts()
    ctx.settings["claim thresholds"] = ", ".join(
        f"{k}={v['value']}" for k, v in thresholds_in_force().items() if not isinstance(v["value"], (dict, str)))
    notes = [n + cut for n in hc.notes]
    notes.append("heads per claim: " + "; ".join(
        f"{kind}: " + ", ".join(f"{st} {int(n)}" for st, n in row.items() if n) for kind, row in counts.iterrows()))
    result = SectionResult(tables={"claims": hc.to_frame(), "counts": counts.reset_index(), **hc.tables},
                           notes=notes, summary={"counts": {k: {s: int(n) for s, n in row.items()}
                                                            for k, row in counts.iterrows()}})
    result.claims = hc
    return result


register_section(Section("claims", "Claims per head (pattern, structure, necessity, redundancy, weights, "
                         "attribution)", _run_claims, modules=("probe.analyses.claims.heads",)))
