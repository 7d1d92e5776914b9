"""``probe rollout`` / ``probe flow`` (one example, chosen output positions) and the
report's rollout section (rollout and flow on the representative examples): how much
each input token feeds an output position (Abnar & Zuidema 2020; norm-based, Kobayashi
et al. 2020, and gradient-weighted, Chefer et al. 2021, variants).

The commands write ``<method>.json`` (``tokens``, ``output_positions``, ``scores``),
``<method>.csv`` (tidy) and ``<method>.png``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from probe.errors import InputError, NotApplicable
from probe.app.registry import Analysis, Param, Result, SkipAnalysis
from probe.app.registry.presentation import Presentation, TableView
from probe.app.registry.results import RolloutResult

if TYPE_CHECKING:
    from probe.app.registry import Context

#: examples and longest input of the report's rollout/flow section (one output row of exact
#: flow on 128 tokens takes tens of milliseconds with the compiled solver; longer examples
#: are left out and the section's notes say which)
FLOW_EXAMPLES = 3
FLOW_MAX_TOKENS = 128

SOURCE = (
    Param("store", str, None, "a store written by `probe capture` (instead of an input)"),
    Param("example", int, 0, "which example of the input or the store", min=0),
)
POSITIONS = (
    Param("head_indices", str, "mean", "head combination in every layer: 'mean' or head indices like 0,3,5"),
    Param("residual", float, 0.5, "identity weight of the residual adjustment", min=0.0, max=1.0),
    Param(
        "output_position",
        int,
        None,
        "output position(s) to explain (repeatable; negative counts from the "
        "end). Default: [CLS] for encoders, the last token for decoders",
        multiple=True,
        short="-p",
    ),
    Param("all_positions", bool, False, "score every output position (the full matrix)"),
)


def _combine(value):
    from probe.app.registry.notation import parse_int_list

    return "mean" if str(value).strip() == "mean" else parse_int_list(value, "--head-indices")


def _text(ctx) -> str:
    texts = ctx.corpus.kept.texts
    i = ctx.params["example"]
    if i >= len(texts):
        raise InputError(f"--example {i}: the input has {len(texts)} examples (0..{len(texts) - 1})")
    return texts[i]


def _maps(ctx):
    """The AttentionMaps of one example: from --store, or captured from the input."""
    if ctx.params["store"]:
        if ctx.has_input:
            raise InputError("give an input (--text/--file/--conllu) or --store, not both")
        store = ctx.read_store(ctx.params["store"])
        i = ctx.params["example"]
        if i >= len(store):
            raise InputError(f"--example {i}: the store has {len(store)} examples (0..{len(store) - 1})")
        return store[i]
    from probe.runs.capture import capture

    return capture(ctx.adapter, [_text(ctx)])[0]


def _result(scores, title) -> Result:
    def write(d):
        from probe.app.report.score_figures import token_scores_heatmap

        stem = d / scores.method
        scores.to_json(stem.with_suffix(".json"), indent=1)
        return [stem.with_suffix(".json"), token_scores_heatmap(scores, stem.with_suffix(".png"), title=title)]

    from probe.app.report.score_figures import split_top
    from probe.app.report.tokens import display_tokens, positioned

    shown = display_tokens(scores.tokens)
    keyed = positioned(shown)  # `the(3)`: the position where the same word occurs more than once
    lines = []  # the top words per output position; itself, special tokens and punctuation apart
    for r, p in enumerate(scores.output_positions[:3]):
        words, trivial = split_top(shown, scores.scores[r], p, k=5)
        apart = ", ".join(f"{keyed[j]} {s:.3f}" for j, _, s in trivial[:4]) + (" …" if len(trivial) > 4 else "")
        lines.append(f"  {p} {shown[p]}: " + ", ".join(f"{keyed[j]} {s:.3f}" for j, _, s in words))
        lines.append(f"      (apart: itself, special tokens, punctuation: {apart})")
    if len(scores.output_positions) > 3:
        lines.append(f"  … {len(scores.output_positions) - 3} more rows")
    return Result(tables={scores.method: scores.to_frame()}, notes=lines, writers=[write])


def run_rollout(ctx: Context) -> Result:
    p = ctx.params
    pos = list(p["output_position"]) or None
    if p["weights"] == "attention":
        from probe.analyses.flow.rollout import rollout_maps

        scores = rollout_maps(
            _maps(ctx),
            heads=_combine(p["head_indices"]),
            residual=p["residual"],
            output_positions=pos,
            all_positions=p["all_positions"],
        )
        return _result(scores, f"{scores.method} (attention)")
    if p["store"]:
        raise InputError(f"--weights {p['weights']} needs a live model: give an input instead of --store")
    if str(p["head_indices"]).strip() != "mean":
        raise InputError(f"--weights {p['weights']} uses the head mean; drop --head-indices")
    text = _text(ctx)
    if p["weights"] == "norm":
        from probe.analyses.flow.norm_attention import norm_rollout_maps
        from probe.runs.values import capture_values

        scores = norm_rollout_maps(
            capture_values(ctx.adapter, text),
            residual=p["residual"],
            output_positions=pos,
            all_positions=p["all_positions"],
        )
    else:
        from probe.analyses.flow.grad_attention import grad_rollout_maps
        from probe.runs.grads import attention_gradients

        scores = grad_rollout_maps(
            attention_gradients(ctx.adapter, text, position=pos[0] if pos else None),
            output_positions=pos,
            all_positions=p["all_positions"],
        )
    return _result(scores, f"{scores.method} ({p['weights']})")


def run_flow(ctx: Context) -> Result:
    from probe.analyses.flow.attention_flow import flow_maps

    p = ctx.params
    # a long input warns (stderr) with the estimated time before the solver starts
    scores = flow_maps(
        _maps(ctx),
        heads=_combine(p["head_indices"]),
        residual=p["residual"],
        output_positions=list(p["output_position"]) or None,
        all_positions=p["all_positions"],
        reference=p["reference"],
        workers=p["workers"],
        max_tokens=p["max_tokens"],
    )
    return _result(scores, "attention flow" + (" (networkx)" if p["reference"] else ""))


def section(ctx: Context) -> RolloutResult:
    """Rollout and flow into position 0 (the last token of a causal model) on the report's
    representative examples."""
    import pandas as pd

    from probe.analyses.flow.attention_flow import flow_maps
    from probe.analyses.flow.rollout import rollout_maps

    fits = [i for i in ctx.report.representatives if ctx.maps[i].n_tokens <= FLOW_MAX_TOKENS]
    too_long = [i for i in ctx.report.representatives if ctx.maps[i].n_tokens > FLOW_MAX_TOKENS]
    picks = fits[:FLOW_EXAMPLES]
    if not picks:
        raise SkipAnalysis(
            f"no example of at most {FLOW_MAX_TOKENS} tokens for flow "
            f"({len(too_long)} representative examples are longer)"
        )
    rows = []
    for i in picks:
        m = ctx.maps[i]
        for scores in (rollout_maps(m), flow_maps(m)):
            df = scores.to_frame()
            df.insert(0, "example", i)
            rows.append(df)
    table = pd.concat(rows, ignore_index=True)
    top = (
        table.sort_values("score", ascending=False)
        .groupby(["example", "method"])
        .head(5)
        .sort_values(["example", "method", "score"], ascending=[True, True, False])
    )
    into = "the last token (causal: nothing flows from later tokens)" if ctx.adapter.causal else "position 0"
    notes = [f"rollout and flow into {into} on examples {picks} (Abnar & Zuidema 2020)"]
    if too_long:
        notes.append(
            f"left out {len(too_long)} representative example(s) over {FLOW_MAX_TOKENS} tokens "
            f"({', '.join(str(i) for i in too_long[:5])}{' …' if len(too_long) > 5 else ''})"
        )
    return RolloutResult(tables={"scores": table, "top": top}, notes=notes)


ROLLOUT = Analysis(
    "rollout",
    "Rollout and flow: how much each input token feeds an output position",
    run_rollout,
    shows=Presentation(tables={"scores": TableView("score")}),
    needs=("corpus", "maps"),
    help="Attention rollout (Abnar & Zuidema 2020): input-token scores for chosen output positions of one "
    "example (--example of the input, or of --store).",
    params=SOURCE
    + POSITIONS
    + (
        Param(
            "weights",
            str,
            "attention",
            "roll out raw attention, norm-based weights ‖αf(x)‖ (Kobayashi 2020) "
            "or gradient-weighted attention (Chefer 2021); norm and grad need a live model",
            choices=("attention", "norm", "grad"),
        ),
    ),
    section=section,
    produces=RolloutResult,
    modules=("probe.analyses.flow.rollout", "probe.analyses.flow.attention_flow"),
    order=50,
    example="probe rollout --text 'The keys to the cabinet are on the table.' --out out/rollout",
)

FLOW = Analysis(
    "flow",
    "Attention flow (max-flow on the layered attention graph) for chosen output positions",
    run_flow,
    needs=("model", "corpus"),
    params=SOURCE
    + POSITIONS
    + (
        Param("reference", bool, False, "compute with networkx, one max-flow per pair (slow; the reference)"),
        Param("workers", int, None, "processes for the fast solver (default: all cores when the work is large)", min=1),
        Param("max_tokens", int, 128, "warn with the estimated time above this many tokens", min=1),
    ),
    order=51,
    example="probe flow --text 'The keys to the cabinet are on the table.' --out out/flow",
)


def run_correlation(ctx: Context) -> Result:
    from probe.analyses.flow.blankout import blank_out_importance, correlation_table, importance_correlations
    from probe.runs.capture import capture
    from probe.models.zoo import eval_examples

    task = ctx.zoo_task
    if not ctx.is_zoo or task is None:
        raise NotApplicable("flow-correlation needs a zoo sequence classifier, e.g. --model zoo:agreement")
    examples = eval_examples(task, n=ctx.params["limit"] or 1000)
    maps = capture(ctx.adapter, [e["text"] for e in examples], batch_size=64)
    from tqdm.auto import tqdm

    imps = [
        blank_out_importance(ctx.adapter, e["text"], e.get("label"))[0]
        for e in tqdm(examples, desc="blank-out", disable=not ctx.progress)
    ]
    per_example = importance_correlations([m.attentions for m in maps], imps, [m.special_mask for m in maps])
    table = correlation_table(per_example)
    notes = []
    for pos in ("all", "words"):
        t = table[table.positions == pos]
        notes.append(f"positions: {pos} (Spearman ρ with blank-out, mean ± std over {len(examples)} examples)")
        for method in ("raw", "rollout", "flow"):
            r = t[t.method == method]
            notes.append(
                f"  {method:<8}"
                + "  ".join(f"L{int(x.layer)} {x['mean']:+.2f} ± {x['std']:.2f}" for _, x in r.iterrows())
            )

    def write_json(d):
        (d / "flow_correlation.json").write_text(table.to_json(orient="records", indent=1))
        return [d / "flow_correlation.json"]

    return Result(
        tables={"flow_correlation": table, "flow_correlation_examples": per_example}, notes=notes, writers=[write_json]
    )


CORRELATION = Analysis(
    "flow-correlation",
    "Raw attention, rollout and flow vs blank-out importance (Abnar & Zuidema 2020, Table 1)",
    run_correlation,
    needs=("model", "zoo"),
    model="zoo:agreement",
    help="Spearman ρ of raw attention, rollout and flow with blank-out importance, per layer (Abnar & Zuidema "
    "2020, Table 1), for a zoo sequence classifier on its held-out set (--limit examples, default 1000).",
    params=(
        Param("limit", int, None, "held-out examples of the zoo task (default 1000)", min=3, aliases=("--examples",)),
    ),
    order=52,
    example="probe flow-correlation --limit 50 --out out/flowcorr",
)

ANALYSES = (ROLLOUT, FLOW, CORRELATION)
