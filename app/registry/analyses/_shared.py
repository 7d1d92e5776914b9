"""Parameters and helpers shared by several built-in analyses."""

from __future__ import annotations

from typing import Optional

from probe.app.registry import Param

#: most examples the report's model-running sections use (the analyses over captured maps
#: use the whole corpus); 128 keeps the EWT dev report near its budget (bench/bench_report.py)
MODEL_EXAMPLES = 128

BATCH = Param("batch_size", int, 8, "examples per forward", min=1)
N_BOOT = Param("n_boot", int, 1000, "bootstrap resamples for the confidence intervals", min=10)
GROUPS = Param(
    "group",
    "heads",
    None,
    "also intervene on these heads together, e.g. L1H0,L1H1 (repeatable); rows in groups.csv",
    multiple=True,
)

#: the null model claims are calibrated on (:mod:`probe.analyses.claims.null_model`); the
#: claims' and faithfulness' (its agreement bar) share it, also as a report override
NULL = Param(
    "null",
    str,
    None,
    "the null model claims are calibrated on: reinit (the model re-initialised), permute (its "
    "attention weights permuted across heads and layers) or none (the floor alone); default: the "
    "toolkit's (docs/claims-statistics.md)",
    choices=("reinit", "permute", "none"),
)


#: the causal claims' path (:mod:`probe.analyses.claims.decided`, :mod:`probe.analyses.claims.screened`),
#: also as a report override
CAUSAL = Param(
    "causal",
    str,
    "auto",
    "the causal claims' path: sequential (necessity, weights and redundancy on every example, each head or "
    "group decided in random blocks and stopped when decided; importance in random blocks until precise), "
    "exhaustive (every head removed on every model-run example), "
    "screened (necessity: every example screened in one forward + backward per batch, the heads that could "
    "matter removed exactly); auto: screened above 144 heads (SmolLM2's 270), else sequential where the "
    "model-run limit would cut the corpus, else exhaustive (docs/screening.md)",
    choices=("auto", "sequential", "exhaustive", "screened"),
)


#: above this many heads ``--causal auto`` takes the screened path: the exhaustive and
#: sequential paths remove every head exactly (at least one block each), so their cost grows
#: with the head count; the screen costs one forward + backward per batch whatever the count
#: (144: BERT-base's, the largest the sequential path was measured on; SmolLM2 has 270)
SCREEN_ABOVE_HEADS = 144


def head_count(adapter) -> int:
    """The heads of ``adapter``'s default stack (layers × heads); 0 without a live model."""
    if adapter is None or not hasattr(adapter, "n_heads"):
        return 0
    return int(adapter.n_layers) * int(adapter.n_heads)


def causal_path(chosen, n: int, cap, heads: int = 0) -> str:
    """The causal path ``chosen``; ``auto`` (or ``None``): screened for more than
    :data:`SCREEN_ABOVE_HEADS` ``heads`` (every head screened at once, only those that could
    matter removed exactly), else sequential where the model-run limit ``cap`` would cut the
    ``n`` examples (the exhaustive path would see only the first ``cap``), else exhaustive
    (it sees them all)."""
    if chosen in ("sequential", "exhaustive", "screened"):  # chosen by name; otherwise the default
        return str(chosen)
    if heads > SCREEN_ABOVE_HEADS:
        return "screened"
    return "sequential" if cap and n > cap else "exhaustive"


def run_causal_path(ctx, n: int) -> str:
    """The run's causal path (:func:`causal_path`) for ``n`` examples: its ``--causal``, its
    model-run cap and its model's head count."""
    p = ctx.params
    return causal_path(p.get("causal"), n, p.get("max_model_examples"), head_count(getattr(ctx, "adapter", None)))


def screened_setting(causal: Optional[str], n: int, heads: int) -> str:
    """The report's setting line for the screened path: why it was taken (``--causal
    screened`` by name, or the default's head-count rule) and what it costs."""
    why = (
        "--causal screened"
        if causal == "screened"
        else f"--causal auto with {heads} heads (more than {SCREEN_ABOVE_HEADS})"
    )
    return (
        f"screened ({why}): ablation and the necessity claims screen every head on all {n} examples at once "
        "(attribution patching, one forward + backward per batch) and remove exactly only the heads that "
        "could matter plus a random audit (its miss rate stated); weights claims on the heads the screen confirmed "
        "(docs/screening.md)"
    )


def _names(names: list) -> str:
    return ", ".join(names[:-1]) + (f" and {names[-1]}" if len(names) > 1 else "".join(names))


def _screened_examples(running: list, n: int, cap: int) -> list:
    """What the screened path runs the model on, for the model-running sections ``running``
    over ``n`` examples with the model-run limit ``cap``: the necessity screen (the sections
    that read the :data:`~probe.app.registry.removal_stages.SCREENED` stage's necessity) takes
    every example, its exact removals random blocks of them until each head is decided; the
    rest takes the first ``cap`` (a section that starts the screen reads nothing else)."""

    def screened(a, starts: Optional[bool] = None) -> bool:  # the stage by name: removal_stages imports this module
        return any(
            r.stage.name == "screened" and "necessity" in r.parts and (starts is None or r.starts == starts)
            for r in a.reads
        )

    whole = [a.name for a in running if screened(a)]
    rest = [a.name for a in running if not screened(a, starts=True)]
    said = []
    if whole:
        said.append(
            f"all {n} for the necessity of {_names(whole)}: every head screened on each example, those that could "
            "matter removed exactly in random blocks until decided"
        )
    if rest:
        others = " (the necessity aside)" if set(whole) & set(rest) else ""
        said.append(
            f"the first {cap} of {n} for {_names(rest)}{others} (--max-model-examples 0 runs them on every example)"
        )
    return said


def model_run_setting(n: int, heads: int, params: dict) -> dict:
    """The report's settings on the model-running sections (the registered ones whose
    ``report_params`` cap ``max_model_examples``; ``params``: a declaring section's, the
    report's options in): how many of the ``n`` examples they run the model on; on the
    sequential path (:func:`causal_path`) those that take ``--causal`` read every example in
    random blocks instead; on the screened path (``auto`` above :data:`SCREEN_ABOVE_HEADS`
    ``heads``) why, and what it costs. Declared by each of them (``Analysis.settings``)."""
    from probe.app.registry import registered

    running = [a for a in registered() if a.section and "max_model_examples" in a.report_params]
    capped = [a.name for a in running]
    # the sections that take the causal path (they declare --causal) read every example in blocks on it
    in_blocks = [a.name for a in running if any(p.name == "causal" for p in a.params)]
    cap, causal = params.get("max_model_examples"), params.get("causal")
    path = causal_path(causal, n, cap, heads)
    if cap is None or n <= cap:
        out = {"model-run examples": f"all {n} ({', '.join(capped)})"}
    elif path == "screened":
        said = _screened_examples(running, n, cap)
        out = {"model-run examples": "; ".join(said)}
    else:
        blocks = in_blocks if path == "sequential" else []
        first = [a for a in capped if a not in blocks]
        said = []
        if blocks:
            said.append(
                f"all {n} for {_names(blocks)}, in random blocks: each head and redundancy group until its claim "
                f"is decided, importance until every head is within ±0.1 (--causal exhaustive: the first {cap})"
            )
        if first:
            said.append(
                f"the first {cap} of {n} for {_names(first)} (--max-model-examples 0 runs them on every example)"
            )
        out = {"model-run examples": "; ".join(said)}
    if path == "screened":
        out["causal path"] = screened_setting(causal, n, heads)
    return out


def head_name(layer, head) -> str:
    return f"L{int(layer)}H{int(head)}"


def model_corpus(ctx, corpus):
    """``(corpus, note)``: at most ``ctx.params['max_model_examples']`` (the report's cap)
    examples of ``corpus`` (the run's ``ctx.corpus.whole``) for analyses that run the model
    once per head."""
    cap = ctx.params.get("max_model_examples")
    n = len(corpus)
    if not cap or n <= cap:
        return corpus, ""
    return (
        corpus.subset(range(cap), reason="beyond the report's model-run limit"),
        f" on the first {cap} of {n} examples",
    )


def heads_of_layers(adapter, layers):
    if layers is None:
        return None
    return [(layer, h) for layer in layers for h in range(adapter.n_heads)]


def group_table(results):
    """One row per head group (heads written ``L1H0+L1H1``), or ``None``."""
    import pandas as pd

    if not results:
        return None
    rows = []
    for r in results:
        row = r.summary()
        row["heads"] = "+".join(head_name(layer, h) for layer, h in r.heads)
        rows.append(row)
    return pd.DataFrame(rows)


def group_note(table) -> str:
    if table is None:
        return ""
    return "groups: " + ", ".join(f"{h} {e:+.4g}" for h, e in zip(table["heads"], table["effect"]))


def top_heads(table, column: str, k: int = 5, by_abs: bool = True):
    order = table[column].abs() if by_abs else table[column]
    return table.reindex(order.sort_values(ascending=False).index).head(k)


def necessity_block(data, layer: int, head: int) -> str:
    """The necessity claim's evidence with every head's effect as a strip (the ablation
    section's block shows it when the claims ran, the claims' own block when no ablation did)."""
    from probe.app.report.evidence import every_head, one, strip_svg
    from probe.app.report.html import esc

    ev = one(data, layer, head, "claims", "necessity")
    if ev is None:
        return ""
    text = f"<p>{esc(ev.text)}.</p>"
    if ev.status not in ("holds", "does not hold", "depends on the baseline"):
        return text
    return text + strip_svg(
        every_head(data, "claims", "necessity"),
        ev.value,
        ev.ci,
        xlabel=f"{ev.numbers.get('objective', '')} harm of mean-ablation: every head (grey), this head (blue, with CI)",
    )
