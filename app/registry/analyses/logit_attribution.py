"""``probe logit-attribution``: which heads write the answer (direct logit attribution with
the final norm folded, Elhage et al. 2021), the logit lens (nostalgebraist 2020) and, per
head, the tokens its OV circuit promotes (:mod:`probe.analyses.writes`). Causal LMs only."""

from __future__ import annotations

from typing import TYPE_CHECKING

from probe.app.registry import Analysis, Param, Result
from probe.app.registry.presentation import HeadBlock, Presentation, TableView

if TYPE_CHECKING:
    from probe.app.registry import Context

NAME = "logit-attribution"


def _texts(ctx: Context) -> list:
    """The input texts as given (an over-long one is refused, not dropped)."""
    from probe.errors import InputError

    texts = list(ctx.corpus.as_given.texts)
    if not texts:
        raise InputError("give the text to read the logit at: --text 'The capital of France is'")
    return texts


def _one(ctx: Context, text: str, target, p: dict) -> tuple:
    from probe.analyses.writes.dla import attribute, source_parts
    from probe.analyses.writes.logit_lens import logit_lens
    from probe.analyses.writes.stream import decompose

    stream = decompose(ctx.adapter, text, sources=True)
    att = attribute(ctx.adapter, stream, target, p["position"])
    lens = logit_lens(ctx.adapter, text, type(target)(att.answer, target.against), att.position, k=p["top_k"])
    return att, source_parts(ctx.adapter, stream, att), lens, stream


def _promoted(ctx: Context, heads, sources, ids, k: int) -> tuple:
    """``(promoted, copied)`` for each listed head: ``layer, head, source, source_token, rank,
    token, token_str, logit``, the tokens its OV circuit raises most given the source token
    it takes most of its attribution from (first text), and ``layer, head, rank, token,
    token_str, self_logit, self_rank``, the tokens it copies most (the circuit's diagonal)."""
    import pandas as pd

    from probe.analyses.writes.token_circuits import ov_copied_tokens, ov_top_tokens

    promoted, copied = [], []
    first = sources[sources["example"] == 0]
    for r in heads.itertuples():
        mine = first[(first["layer"] == r.layer) & (first["head"] == r.head)]
        src = int(ids[int(mine.loc[mine["dla"].abs().idxmax(), "source"])])
        promoted.append(
            ov_top_tokens(ctx.adapter, int(r.layer), int(r.head), [src], k).assign(layer=r.layer, head=r.head)
        )
        copied.append(ov_copied_tokens(ctx.adapter, int(r.layer), int(r.head), k).assign(layer=r.layer, head=r.head))
    p = pd.concat(promoted, ignore_index=True)
    c = pd.concat(copied, ignore_index=True)
    c["rank"] = c.groupby(["layer", "head"]).cumcount()
    cols = ["layer", "head", "source", "source_token", "rank", "token", "token_str", "logit"]
    return p[cols], c[["layer", "head", "rank", "token", "token_str", "self_logit", "self_rank"]]


def _writes(ctx: Context, heads, stream, att, k: int):
    """``layer, head, rank, token, token_str, dla``: the tokens each listed head's output
    raises most at the read position of the first text (its DLA to every token)."""
    import pandas as pd

    from probe.analyses.writes.dla import component_writes

    labels = stream.labels
    out = []
    for r in heads.itertuples():
        index = int(
            labels.index[(labels["component"] == "head") & (labels["layer"] == r.layer) & (labels["head"] == r.head)][0]
        )
        out.append(component_writes(ctx.adapter, stream, index, att.position, k).assign(layer=r.layer, head=r.head))
    t = pd.concat(out, ignore_index=True)
    return t[["layer", "head", "rank", "token", "token_str", "dla"]]


def _examples(ctx: Context, p: dict) -> list:
    """``[(text, Target), …]``: each input text with ``--answer``/``--against``, or each
    line of ``--task`` (its own answer and against).

    Raises:
        InputError: ``--task`` with ``--text``/``--file``/``--conllu`` or with ``--answer``/``--against``;
            a bad task line (:func:`probe.analyses.writes.task.read_task`).
    """
    from probe.analyses.writes.answers import target_of
    from probe.analyses.writes.task import read_task
    from probe.errors import InputError

    if p["task"] is None:
        target = target_of(ctx.adapter, p["answer"], p["against"])
        return [(text, target) for text in _texts(ctx)]
    if ctx.inputs.text or ctx.inputs.file or ctx.inputs.conllu:
        raise InputError("--task names its own texts: leave out --text, --file and --conllu")
    if p["answer"] is not None or p["against"] is not None:
        raise InputError("--task gives each example's answer and against: leave out --answer and --against")
    return read_task(ctx.adapter, p["task"])


def _summary_row(ctx: Context, text: str, att, lens) -> dict:
    top1 = lens.becomes_top1()
    return {
        "text": text,
        "answer": ctx.adapter.tokenizer.decode([att.answer]),
        "against": None if att.against is None else ctx.adapter.tokenizer.decode([att.against]),
        "position": att.position,
        "logit": att.logit,
        "sum_of_parts": float(att.table["dla"].sum()),
        "rest": att.rest,
        "constant": att.constant,
        "parts_plus_rest": att.total,
        "top1_from": None if top1 is None else {"layer": top1[0], "stage": top1[1]},
    }


def _head_means(per_head, p: dict):
    """``layer, head, dla, ci_low, ci_high, count``: each head's mean over the examples with
    its 95% percentile bootstrap interval (:func:`probe.analyses.claims.statistics.mean_ci`)."""
    from probe.analyses.claims.statistics import mean_ci

    rows = []
    for (layer, head), g in per_head.groupby(["layer", "head"], sort=True):
        m, lo, hi = mean_ci(g["dla"].to_numpy(), n_boot=p["n_boot"], seed=0)
        rows.append((layer, head, m, lo, hi, len(g)))
    import pandas as pd

    return pd.DataFrame(rows, columns=["layer", "head", "dla", "ci_low", "ci_high", "count"])


def run(ctx: Context) -> Result:
    """DLA, per-source parts and the logit lens of each example; the heads' OV tokens."""
    import pandas as pd

    p = ctx.params
    examples = _examples(ctx, p)
    heads, sources, others, lenses, summary, firsts = [], [], [], [], [], []
    for i, (text, target) in enumerate(examples):
        att, src, lens, stream = _one(ctx, text, target, p)
        firsts += [] if firsts else [(stream, att)]  # the first text's stream: what its heads write
        t = att.table.assign(example=i)
        heads.append(t[t["component"] == "head"][["example", "layer", "head", "dla"]])
        others.append(t[t["component"] != "head"][["example", "component", "layer", "dla"]])
        sources.append(src.assign(example=i))
        lenses.append(lens.table.assign(example=i))
        summary.append(_summary_row(ctx, text, att, lens))
    per_head = pd.concat(heads, ignore_index=True)
    mean = _head_means(per_head, p)
    best = mean.reindex(mean["dla"].abs().sort_values(ascending=False).index).head(p["top_heads"])
    positions = pd.concat(sources, ignore_index=True)
    promoted, copied = _promoted(ctx, best, positions, firsts[0][0].ids.tolist(), p["top_k"])
    tables = {
        "heads": per_head,
        "head_means": mean,
        "positions": positions,
        "components": pd.concat(others, ignore_index=True),
        "logit_lens": pd.concat(lenses, ignore_index=True),
        "writes": _writes(ctx, best, firsts[0][0], firsts[0][1], p["top_k"]),
        "promoted": promoted,
        "copied": copied,
    }
    targets = {t for _, t in examples}
    said = examples[0][1].describe(ctx.adapter) if len(targets) == 1 else "each example's answer"
    return Result(
        tables=tables,
        per_head=mean.rename(columns={"dla": "logit_attribution"}),
        notes=_notes(ctx, summary, best),
        summary={"model": ctx.adapter.name, "target": said, "examples": summary},
        summary_name="logit_attribution",
        writers=[lambda d: _figures(ctx, mean, tables["logit_lens"], summary, d)],
    )


#: examples whose line (and logit lens figure) is written out; the rest are in the tables
SHOWN = 5


def _notes(ctx: Context, summary: list, best) -> list:
    from probe.app.registry.notation import head_name

    notes = []
    for s in summary[:SHOWN]:
        top1 = s["top1_from"]
        notes.append(
            f"{s['text']!r} → {s['answer']!r}{'' if s['against'] is None else ' − ' + repr(s['against'])}: logit "
            f"{s['logit']:.2f} = heads, MLPs and embeddings {s['sum_of_parts']:.2f} + rest {s['rest']:.2g} + biases "
            f"{s['constant']:.2g} ({s['parts_plus_rest']:.4f}); logit lens top-1 from "
            + ("never" if top1 is None else f"layer {top1['layer']} {top1['stage']}")
        )
    n = len(summary)
    if n > 1:
        logits = [s["logit"] for s in summary]
        notes.append(
            (f"… {n - SHOWN} more examples in logit_attribution.json; " if n > SHOWN else "")
            + f"{n} examples: mean logit {sum(logits) / n:.3f}, above 0 in {sum(v > 0 for v in logits)} of {n}"
        )
    ci = (lambda r: f" [{r.ci_low:+.2f}, {r.ci_high:+.2f}]") if n > 1 else (lambda r: "")
    notes.append(
        "largest direct writers"
        + (f" (mean over {n} examples, 95% bootstrap interval)" if n > 1 else "")
        + ": "
        + ", ".join(f"{head_name(r.layer, r.head)} {r.dla:+.2f}{ci(r)}" for r in best.itertuples())
    )
    notes.append(
        "direct effect only (a head may write the answer and be compensated when removed: McGrath et al. 2023)"
    )
    return notes


def _figures(ctx: Context, mean, lens, summary: list, d) -> list:
    from probe.app.report.ablation_figures import head_heatmap
    from probe.app.report.writes_figures import logit_lens_figure

    pairs = {(s["answer"], s["against"]) for s in summary}
    a, b = summary[0]["answer"], summary[0]["against"]
    target = (repr(a) + ("" if b is None else f" − {b!r}")) if len(pairs) == 1 else "each example's answer"
    paths = [
        head_heatmap(
            mean, "dla", d / "logit_attribution.png", f"{ctx.adapter.name}: direct logit attribution to {target}"
        )
    ]
    for i, s in enumerate(summary[:SHOWN]):
        paths.append(
            logit_lens_figure(lens[lens["example"] == i], d / f"logit_lens_{i}.png", f"{s['text']!r} → {s['answer']!r}")
        )
    return paths


def _block(data, layer: int, head: int) -> str:
    from probe.app.report.evidence import items, sentence

    found = items(data, layer, head, NAME, "logit_attribution")
    return f"<p>{sentence(found[0])}</p>" if found else ""


def head_evidence(result: Result) -> dict:
    """Each head's mean direct logit attribution over the texts."""
    from probe.app.registry.evidence import HeadEvidence

    t = result.per_head
    if t is None or not len(t):
        return {}
    target = result.summary.get("target", "the answer")
    n = len(result.summary.get("examples", []))
    return {
        (int(r.layer), int(r.head)): [
            HeadEvidence(
                NAME,
                "logit_attribution",
                f"Writes {r.logit_attribution:+.3f} directly to the logit of {target} (direct logit attribution, final "
                "norm folded; direct effect only).",
                value=float(r.logit_attribution),
                count=n,
                count_of="texts",
                numbers={"logit_attribution": float(r.logit_attribution)},
            )
        ]
        for r in t.itertuples()
    }


SHOWS = Presentation(
    evidence=head_evidence,
    kinds=("logit_attribution",),
    block=HeadBlock("Direct logit attribution", _block, order=16),
    tables={"heads": TableView("dla", False)},
)

ANALYSIS = Analysis(
    NAME,
    "Direct logit attribution: which heads write the answer; the logit lens",
    run,
    shows=SHOWS,
    needs=("model", "corpus"),
    help="For each text: each head's, MLP's and embedding's direct contribution to the answer's logit (or answer − "
    "against), the final norm folded as TransformerLens folds it (Elhage et al. 2021), the parts summing to the logit; "
    "each head's part per source position; the logit lens per layer (nostalgebraist 2020); the tokens the top heads' "
    "OV circuits promote from the source token they read most, and copy. Writes heads.csv, positions.csv, components.csv, logit_lens.csv, writes.csv (the tokens each top head's output raises most), promoted.csv, copied.csv and figures.",
    params=(
        Param("answer", str, None, "the token whose logit to read (default: the model's top prediction)"),
        Param("against", str, None, "a second token: read the logit difference answer − against"),
        Param("position", int, -1, "the position whose next-token logit is read (-1: the last)"),
        Param("top_k", int, 5, "tokens listed per layer of the logit lens and per head's OV circuit", min=1),
        Param("top_heads", int, 5, "heads whose OV circuits are listed", min=1),
        Param(
            "task",
            str,
            None,
            'a JSON-lines file, one example a line: {"text": …, "answer": …, "against": …} (against optional); '
            "instead of --text/--answer: each head's mean over the examples with its bootstrap interval",
        ),
        Param("n_boot", int, 1000, "bootstrap resamples of each head's interval over the examples", min=100),
    ),
    section=False,
    modules=("probe.analyses.writes.dla",),
    order=47,
    model="zoo:induction",
    example="probe logit-attribution --model zoo:induction --text 't3 t4 t5 t3 t4' --answer ' t5' --out out/dla",
)
