"""The report's "writes" section: what each head of a causal LM writes on the corpus — its
direct logit attribution to the corpus's own next tokens (mean and bootstrap interval per
head, the final norm folded; Elhage et al. 2021) and the tokens its output raises most there
(:mod:`probe.analyses.writes.corpus`); for the largest writers, the tokens their OV circuit
copies most (:func:`probe.analyses.writes.token_circuits.ov_copied_tokens`). The kept
examples up to the report's model-run cap (``--max-model-examples``: the first 128), in
batched forwards of near lengths. Skipped, with the reason, for a model without an
unembedding or that is not a causal LM (``probe logit-attribution`` is the command for one text and answer)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from probe.app.registry import Analysis, Param, Result
from probe.app.registry.presentation import HeadBlock, Presentation, TableView

from ._shared import MODEL_EXAMPLES

if TYPE_CHECKING:
    from probe.app.registry import Context

NAME = "writes"


def _copied(ctx: Context, table, n_heads: int, k: int):
    """``layer, head, rank, token, token_str, self_logit, self_rank`` of the ``n_heads``
    largest positive writers' OV circuits (their diagonal: the tokens they copy most)."""
    import pandas as pd

    from probe.analyses.writes.token_circuits import ov_copied_tokens

    out = []
    for r in table.nlargest(n_heads, "dla").itertuples():
        c = ov_copied_tokens(ctx.adapter, int(r.layer), int(r.head), k)
        out.append(c.assign(layer=int(r.layer), head=int(r.head), rank=range(len(c))))
    cols = ["layer", "head", "rank", "token", "token_str", "self_logit", "self_rank"]
    return pd.concat(out, ignore_index=True)[cols] if out else pd.DataFrame(columns=cols)


def run(ctx: Context) -> Result:
    """Each head's mean DLA to the next tokens of the run's corpus, with its interval, the
    tokens it promotes there and, for the top writers, the tokens its OV circuit copies."""
    from probe.analyses.writes.corpus import corpus_writes
    from probe.analyses.writes.stream import check_causal
    from probe.app.registry.notation import head_name

    from ._shared import model_corpus

    p = ctx.params
    check_causal(ctx.adapter)  # an encoder's reason first (its stream is not read at the next token)
    corpus, cut = model_corpus(ctx, ctx.corpus.kept)  # traced in batches: the report's model-run cap
    w = corpus_writes(ctx.adapter, list(corpus.texts), p["top_k"], p["n_boot"], p["seed"])
    copied = _copied(ctx, w.table, p["ov_heads"], p["top_k"])
    best = w.table.reindex(w.table["dla"].abs().sort_values(ascending=False).index).head(5)
    notes = [
        f"direct logit attribution to the next token, {w.n_positions} positions of {w.n_texts} texts{cut}"
        + (f" ({w.skipped} of one token left out)" if w.skipped else "")
        + "; mean per text, 95% bootstrap interval over texts; the final norm folded; direct effect only",
        "largest direct writers: "
        + ", ".join(
            f"{head_name(r.layer, r.head)} {r.dla:+.3f} [{r.ci_low:+.3f}, {r.ci_high:+.3f}]" for r in best.itertuples()
        ),
    ]
    return Result(
        tables={"heads": w.table, "promoted": w.promoted, "copied": copied},
        per_head=w.table[["layer", "head", "dla", "ci_low", "ci_high"]],
        notes=notes,
        summary={"n_texts": w.n_texts, "n_positions": w.n_positions, "skipped": w.skipped},
    )


def _tokens(t, layer: int, head: int, value: str) -> tuple:
    mine = t[(t["layer"] == layer) & (t["head"] == head)].sort_values("rank")
    return tuple((str(s), float(v)) for s, v in zip(mine["token_str"], mine[value]))


def head_evidence(result: Result) -> dict:
    """Per head: its mean DLA to the next token with its interval, the tokens it promotes
    (``parts``: token, DLA) and, for the top writers, the tokens its OV circuit copies."""
    from probe.app.registry.evidence import HeadEvidence

    t, promoted = result.tables.get("heads"), result.tables.get("promoted")
    if t is None or not len(t):
        return {}
    copied = result.tables.get("copied")
    out = {}
    for r in t.itertuples():
        key = (int(r.layer), int(r.head))
        tokens = _tokens(promoted, *key, "dla")
        ov = () if copied is None else _tokens(copied, *key, "self_logit")
        said = ", ".join(repr(s) for s, _ in tokens)
        text = (
            f"Writes {r.dla:+.3f} [{r.ci_low:+.3f}, {r.ci_high:+.3f}] directly to the logit of the next token, "
            f"mean over {r.count} texts (direct logit attribution, final norm folded); its output raises {said} most."
            + (f" Its OV circuit copies {', '.join(repr(s) for s, _ in ov)} most." if ov else "")
        )
        out[key] = [
            HeadEvidence(
                NAME,
                "writes",
                text,
                value=float(r.dla),
                interval=(float(r.ci_low), float(r.ci_high)),
                count=int(r.count),
                count_of="texts",
                unit="logit",
                brief=f"DLA {r.dla:+.3f}; raises {said}",
                parts=tokens,
                numbers={"dla": float(r.dla), **{f"ov:{s}": v for s, v in ov}},
            )
        ]
    return out


def _block(data, layer: int, head: int) -> str:
    """The sentence, this head's DLA among every head's, and the tokens it promotes."""
    from probe.app.report.evidence import every_head, items, sentence, strip_svg
    from probe.app.report.html import esc, fmt

    found = items(data, layer, head, NAME, "writes")
    if not found:
        return ""
    ev = found[0]
    strip = strip_svg(every_head(data, NAME, "writes"), ev.value, ev.ci, xlabel="mean DLA to the next token (logit)")
    rows = "".join(f"<tr><td>{esc(repr(s))}</td><td>{esc(fmt(v, 3))}</td></tr>" for s, v in ev.parts)
    table = f'<table class="data"><tr><th>token its output raises</th><th>DLA</th></tr>{rows}</table>'
    return f"<p>{sentence(ev)}</p>{strip}{table}"


SHOWS = Presentation(
    evidence=head_evidence,
    kinds=("writes",),
    block=HeadBlock("What it writes", _block, order=17),
    tables={"heads": TableView("|dla|", False, colour="dla")},
)

ANALYSIS = Analysis(
    NAME,
    "What each head writes: direct logit attribution to the next token",
    run,
    shows=SHOWS,
    needs=("model", "corpus"),
    help="Each head's direct logit attribution to the corpus's own next tokens (mean per text, 95% bootstrap "
    "interval; the final norm folded, Elhage et al. 2021), the tokens its output raises most on the corpus, and the "
    "tokens the top writers' OV circuits copy. Causal LMs only.",
    params=(
        Param("top_k", int, 5, "tokens listed per head", min=1),
        Param("ov_heads", int, 5, "largest writers whose OV circuits are read", min=0),
        Param("n_boot", int, 1000, "bootstrap resamples of the interval", min=100),
        Param("seed", int, 0, "bootstrap seed", min=0),
    ),
    command=False,
    section=True,
    report_params={"max_model_examples": MODEL_EXAMPLES},
    modules=("probe.analyses.writes.corpus",),
    order=48,
    model="zoo:induction",
)
