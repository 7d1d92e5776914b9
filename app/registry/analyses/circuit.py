"""``probe circuit``: edges between heads by exact path patching, EAP and EAP-IG; the
smallest circuit recovering a share of the objective; a graph of it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

from probe.app.registry import Analysis, Param, Result

from ._shared import BATCH

if TYPE_CHECKING:
    from probe.analyses.common.objective import Objective
    from probe.app.registry import Context
    from probe.inputs.corpus import Corpus

#: graphs up to this many edges are patched exactly in full by default; larger ones (MiniLM:
#: 6,552 edges, ~30 min exact on a CPU) only on the AUTO_TOP edges EAP-IG ranks highest
AUTO_ALL_EDGES = 1000
AUTO_TOP = 64


def _corrupted(ctx: Context, clean: Corpus) -> Corpus:
    from probe.inputs.corpus import Corpus, load_corpus

    p = ctx.params
    if p["corrupted"] or p["corrupted_file"]:
        return load_corpus(text=p["corrupted"] or None, file=p["corrupted_file"], limit=ctx.limit)
    task = ctx.zoo_task
    if clean.examples and task in ("induction", "relay"):
        if task == "induction":
            from probe.analyses.necessity.patching import corrupt_zoo

            ex = corrupt_zoo("induction", clean.examples)
            ctx.say("corrupted inputs: zoo:induction's first copy replaced by other tokens")
        else:
            from probe.models.zoo import relay

            ex = relay.corrupt(clean.examples)
            ctx.say("corrupted inputs: zoo:relay with every word replaced by another")
        return Corpus(texts=tuple(e["text"] for e in ex), examples=tuple(ex), source="corrupted")
    from .patching import shuffled_words

    ctx.say(
        "corrupted inputs: each example's words in a seeded random order (give --corrupted or "
        "--corrupted-file for your own)"
    )
    return shuffled_words(clean)


def _objective(ctx: Context, bad: Corpus) -> Objective:
    """The circuit's objective (the run's ``gradient`` objective, resolved once and printed):
    ``similarity`` becomes the cosine to each example's partner (the corrupted input or
    ``--partner-file``)."""
    from probe.analyses.circuits.objectives import SimilarityMetric
    from probe.analyses.common.objective import Unfitted

    obj = ctx.objective("gradient")
    if not isinstance(obj, Unfitted):
        return obj
    partners = bad
    if ctx.params["partner_file"]:
        from probe.inputs.corpus import load_corpus

        partners = load_corpus(file=ctx.params["partner_file"], limit=ctx.limit)
    return SimilarityMetric(partners)


def _pairs(ctx: Context) -> tuple:
    """``(clean, corrupted)``: the run's input paired with its corruption, fitted to the
    model (a pair with an over-long side dropped whole); an encoder-decoder's corruption
    changes the encoder input only."""
    from probe.inputs.corpus import fit_pairs

    clean = ctx.corpus.as_given
    clean, bad = fit_pairs(clean, _corrupted(ctx, clean), ctx.adapter)
    if ctx.adapter.arch == "encoder-decoder":  # corrupt the encoder's input only: one decoder target per pair
        from dataclasses import replace

        targets = clean.targets or clean.texts
        clean, bad = replace(clean, targets=targets), replace(bad, targets=targets)
        ctx.say("encoder-decoder: the corruption changes the encoder input; the decoder reads the clean targets")
    return clean, bad


def _plan(ctx: Context, checked: Optional[list]) -> tuple:
    """``(ranking, exact_top, known)``: which scores rank the circuit, how many edges are
    patched exactly (``None``: all, or the ``--edge`` list) and the known edges of a zoo
    model (``None`` when exact patching covers a subset only)."""
    from probe.analyses.circuits.edges import all_edges

    p, adapter = ctx.params, ctx.adapter
    known = None
    if ctx.zoo_task in ("relay", "induction") and checked is None:
        from probe.analyses.circuits.known import known_edges

        known = known_edges(adapter)
    n_edges = len(all_edges(adapter))
    top = p["exact_top"]
    if top is None:
        top = 0 if n_edges <= AUTO_ALL_EDGES else AUTO_TOP
    exact_top = top if 0 < top < n_edges and checked is None else None
    if exact_top is not None and known is not None:
        known = None
        ctx.say("exact path patching on a subset of the edges: no known-edge statistics")
    partial = checked is not None or exact_top is not None
    ranking = p["ranking"] if not partial or p["ranking"] != "exact" else "eap_ig"
    if exact_top is not None:
        ctx.say(
            f"{n_edges} edges: EAP and EAP-IG score all of them, exact path patching the top {exact_top} by "
            f"|EAP-IG|, the circuit is ranked by {ranking} (--exact-top 0 patches every edge exactly)"
        )
    return ranking, exact_top, known


def run(ctx: Context) -> Result:
    """Score every edge between heads, find the smallest faithful circuit, draw it."""
    from probe.analyses.circuits.edges import parse_edge
    from probe.analyses.circuits.study import study_circuit

    p, adapter = ctx.params, ctx.adapter
    checked = [parse_edge(adapter, t) for t in p["edge"] if t] or None  # bad edges refused before any run
    clean, bad = _pairs(ctx)
    objective = _objective(ctx, bad)
    ranking, exact_top, known = _plan(ctx, checked)
    st = study_circuit(
        adapter,
        clean,
        bad,
        objective,
        share=p["share"],
        ranking=ranking,
        steps=p["steps"],
        batch_size=p["batch_size"],
        known=known,
        exact_edges=checked,
        exact_top=exact_top,
    )
    tables: dict = {"edges": st.scores}
    notes = list(st.notes)
    notes.append(
        f"{len(clean)} pairs; rank agreement with exact path patching over {st.agreement['n_edges']} "
        f"edges: EAP {st.agreement['eap']:.2f}, EAP-IG {st.agreement['eap_ig']:.2f} (Spearman)"
    )
    summary = {
        "model": adapter.name,
        "pairs": len(clean),
        "metric": objective.name,
        "gap": st.gap,
        "agreement": st.agreement,
        "ranking": ranking,
        "share": p["share"],
    }
    circuit_rows = _edge_circuit(st, ranking, p["share"], tables, notes, summary)
    _head_circuit(adapter, st, ranking, p["share"], tables, notes, summary)
    _known(st, tables, notes, summary)
    writer = _figures(adapter.name, st, ranking, circuit_rows, p["top"], p["share"])
    return Result(tables=tables, notes=notes, summary=summary, summary_name="circuit", writers=[writer])


def _edge_circuit(st: Any, ranking: str, share: float, tables: dict, notes: list, summary: dict) -> Any:
    """The edge circuit's curve, note and summary (pre-LayerNorm decoders); its rows, or ``None``."""
    if st.curve is None:
        return None
    tables["curve"] = st.curve.curve
    names = [e.name() for e in st.curve.circuit]
    summary.update(circuit=names, reached=st.curve.reached, empty=st.curve.empty, full=st.curve.full)
    notes.append(
        f"circuit by {ranking}: {len(names)} edges reach faithfulness "
        f"{st.curve.curve['faithfulness'].max():.2f} (target {share}): {', '.join(names[:8])}"
        + (" ..." if len(names) > 8 else "")
    )
    return st.scores[st.scores["edge"].isin(names)].assign(effect=lambda d: d[ranking])


def _head_circuit(adapter: Any, st: Any, ranking: str, share: float, tables: dict, notes: list, summary: dict) -> None:
    """The head circuit's curve, heads, note and summary (post-LayerNorm encoders, encoder-decoders)."""
    if st.head_curve is None:
        return
    from probe.interventions.paths import site_name

    hc = st.head_curve
    tables["head_curve"] = hc.curve
    tables["heads"] = hc.nodes
    # heads as L5H11 (one stack) or x1H3 (an encoder-decoder's cross-attention layer 1)
    names_of = {l: site_name(adapter, l) for l, _ in hc.ranking}
    heads = [(f"L{l}" if names_of[l].isdigit() else names_of[l]) + f"H{h}" for l, h in hc.circuit]
    summary.update(head_circuit=heads, reached=hc.reached, empty=hc.empty, full=hc.full)
    notes.append(
        f"head circuit by {ranking}: {len(heads)} of {len(hc.ranking)} heads reach faithfulness "
        f"{hc.curve['faithfulness'].iloc[len(heads)]:.2f} (target {share}): {', '.join(heads[:12])}"
        + (" ..." if len(heads) > 12 else "")
    )


def _known(st: Any, tables: dict, notes: list, summary: dict) -> None:
    """The statistics against a zoo model's known edges, when there are any."""
    if not st.known:
        return
    import pandas as pd

    tables["known"] = pd.DataFrame([dict(ranking=k, **v) for k, v in st.known.items()])
    summary["known"] = st.known
    notes.append(
        "against the known edges: "
        + "; ".join(
            f"{k} AUC {v['auc']:.2f} precision {v['precision']:.2f} recall {v['recall']:.2f}"
            for k, v in st.known.items()
        )
    )


def _figures(model: str, st: Any, ranking: str, circuit_rows: Any, top_n: int, share: float) -> Callable[[Path], list]:
    """The writer of circuit.png and the recovery curves."""

    def figures(d: Path) -> list:
        from probe.app.report.circuit_figures import circuit_graph, recovery_figure

        top = (
            circuit_rows
            if circuit_rows is not None and len(circuit_rows)
            else st.scores.assign(effect=st.scores[ranking])
            .reindex(st.scores[ranking].abs().sort_values(ascending=False).index)
            .head(top_n)
        )
        out = [circuit_graph(top, d / "circuit.png", f"{model}: circuit ({ranking})")]
        if st.curve is not None:
            out.append(recovery_figure(st.curve.curve, d / "curve.png", f"{model}: recovered share", share))
        if st.head_curve is not None:
            out.append(
                recovery_figure(st.head_curve.curve, d / "head_curve.png", f"{model}: recovered share (heads)", share)
            )
        return out

    return figures


ANALYSIS = Analysis(
    "circuit",
    "Circuits between heads: exact path patching, EAP, EAP-IG and the smallest faithful circuit",
    run,
    needs=("model", "corpus"),
    help="Score every sender->receiver (q/k/v) edge between heads and every head->output edge by exact path "
    "patching (heads frozen, LayerNorm recomputed), edge attribution patching and EAP-IG (graphs over "
    f"{AUTO_ALL_EDGES} edges: exact only on the top {AUTO_TOP} by EAP-IG unless --exact-top); write edges.csv, "
    "curve.csv (recovered share vs edges kept, pre-LayerNorm decoders) or head_curve.csv and heads.csv "
    "(recovered share vs heads kept: post-LayerNorm encoders, encoder-decoders), known.csv (zoo:relay, "
    "zoo:induction: ROC AUC, precision, recall against the known edges), circuit.png and curve.png / "
    "head_curve.png. Encoder-decoders: name layers e0 (encoder), d0 (decoder), x0 (cross-attention).",
    objective="gradient",
    params=(
        Param("corrupted", str, None, "corrupted partner of each --text (repeatable, in order)", multiple=True),
        Param("corrupted_file", str, None, "one corrupted input per line, paired with the lines of --file"),
        Param(
            "partner_file",
            str,
            None,
            "similarity metric: the partner sentence of each example (default: its corrupted input)",
        ),
        Param(
            "edge", str, None, "patch only these edges exactly, e.g. 0.3->1.2.k or 1.0->out (repeatable)", multiple=True
        ),
        Param(
            "ranking", str, "exact", "which scores order the edges for the circuit", choices=("exact", "eap", "eap_ig")
        ),
        Param("share", float, 0.9, "faithfulness the circuit must reach", min=0.01),
        Param("steps", int, 5, "EAP-IG integration steps", min=1),
        Param("top", int, 12, "edges drawn when there is no edge circuit", min=1),
        Param(
            "exact_top",
            int,
            None,
            f"patch exactly only the N edges EAP-IG ranks highest (0: every edge; default: every edge up to "
            f"{AUTO_ALL_EDGES} edges, else {AUTO_TOP})",
            min=0,
        ),
        BATCH,
    ),
    order=34,
    section=False,
    report_default=False,
    example="probe circuit --model zoo:relay --limit 16 --out out/circuit",
)
