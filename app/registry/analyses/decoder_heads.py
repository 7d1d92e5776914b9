"""``probe decoder-heads`` and the report's decoder section: the decoder head taxonomy
(induction and copying, previous- and duplicate-token, successor, retrieval, sink,
positional versus content), each score on its own probe input as its paper defines it
(:mod:`probe.analyses.patterns.decoder_taxonomy`), the settings written in the notes and in
``summary.json``'s ``settings``. Skipped, with the reason, on a model
that is not a causal language model."""

from __future__ import annotations

from typing import Any, TYPE_CHECKING

from probe.app.registry import Analysis, Param, Result
from probe.errors import NotApplicable
from probe.app.registry.presentation import GridTag, HeadBlock, Presentation, TableView, VerdictHint

if TYPE_CHECKING:
    from probe.models.adapter import ModelAdapter
    from probe.app.registry import Context

NAME = "decoder-heads"
#: short names of the taxonomy's roles in a grid cell
ABBREV = {
    "induction": "ind",
    "copying": "copy",
    "previous-token": "prev",
    "duplicate-token": "dup",
    "successor": "succ",
    "retrieval": "retr",
    "sink": "sink",
    "positional": "pos",
    "content": "cont",
}


def taxonomy_result(
    adapter: ModelAdapter, n_tokens: int | None = None, n_examples: int | None = None, seed: int = 0, **settings: Any
) -> Result:
    """The taxonomy of ``adapter`` as a :class:`Result` (tables ``taxonomy``; notes: each
    detector's settings, then the heads of each role; summary: the heads of each role,
    Sink₁^ε and ``settings``); ``probe roles`` adds the same table for a decoder.
    ``settings``: ``sink_length``, ``calibrate`` (:func:`decoder_taxonomy`)."""
    from probe.analyses.patterns.decoder_heads import PROBE_EXAMPLES, REPEAT_TOKENS
    from probe.analyses.patterns.decoder_taxonomy import TAXONOMY, decoder_taxonomy

    n_examples = PROBE_EXAMPLES if n_examples is None else n_examples
    tax = decoder_taxonomy(adapter, n_tokens=n_tokens, n_examples=n_examples, seed=seed, **settings)
    if n_tokens is None:  # the default, cut to the model's positions as decoder_taxonomy does
        n_tokens = min(REPEAT_TOKENS, max(2, (adapter.max_length - 1) // 2))
    named = {r.role: [f"L{a}H{b}" for a, b in tax.heads(r.role)] for r in TAXONOMY}
    notes = list(tax.notes) + [f"{role}: {', '.join(h) if h else 'none'}" for role, h in named.items()]
    scores = ["layer", "head"] + list(dict.fromkeys(r.column for r in TAXONOMY))
    return Result(
        tables={"taxonomy": tax.table},
        per_head=tax.table[scores],
        notes=notes,
        summary={
            "heads": named,
            "sink_ratio": tax.sink_ratio,
            "null_shares": tax.null_shares,
            "n_examples": n_examples,
            "n_tokens": n_tokens,
            "settings": [
                n.removeprefix("settings: ") for n in tax.notes if n.startswith(("settings:", "calibration:"))
            ],
        },
    )


def run(ctx: Context) -> Result:
    """The taxonomy of the run's model at the papers' settings; the repeated sequence is
    shortened to fit a model with fewer positions than it needs (said in one line), and
    refused below 2 tokens a copy."""
    p = ctx.params
    n_tokens, fits = p["n_tokens"], (ctx.adapter.max_length - 1) // 2
    if fits < 2:
        raise NotApplicable(
            f"{ctx.adapter.name} has {ctx.adapter.max_length} positions: too few for the decoder probes"
        )
    if fits < n_tokens:
        ctx.say(
            f"decoder probes: {fits} random tokens per copy ({ctx.adapter.name} has {ctx.adapter.max_length} positions)"
        )
        n_tokens = fits
    return taxonomy_result(
        ctx.adapter, n_tokens, p["probe_inputs"], p["seed"], sink_length=p["sink_length"], calibrate=not p["no_null"]
    )


def head_evidence(result: Result) -> dict:
    """Each head's roles in the taxonomy (``taxonomy``: ``label`` the roles, ``numbers``
    every score) with, per score, the threshold and the probe it was measured on."""
    from probe.analyses.patterns.decoder_taxonomy import TAXONOMY
    from probe.app.registry.evidence import HeadEvidence, finite

    t = result.tables.get("taxonomy")
    if t is None or not len(t):
        return {}
    n = result.summary.get("n_examples")
    shares = result.summary.get("null_shares") or {}
    out = {}
    for rec in t.to_dict("records"):
        roles = [r.role for r in TAXONOMY if bool(rec.get(r.flag))]
        null = {
            f"null_share:{r.role}": shares[r.flag.removesuffix("_head")]
            for r in TAXONOMY
            if bool(rec.get(r.flag)) and r.flag.removesuffix("_head") in shares
        }
        words = [
            f"positional (offset {int(rec['positional_offset'])})" if r == "positional" else r for r in roles
        ]  # Voita et al.'s positional head points at one relative offset: say which
        said = ", ".join(words) if roles else "none of the taxonomy's roles"
        numbers = {r.column: rec[r.column] for r in TAXONOMY if finite(rec.get(r.column))}
        if finite(rec.get("positional_offset")):
            numbers["positional_offset"] = rec["positional_offset"]
        text = (
            f"Decoder probes: {said} (each score against its threshold on its own probe input: "
            "repeated random tokens, the OV circuit, needle-in-a-haystack decoding)."
        )
        out[(int(rec["layer"]), int(rec["head"]))] = [
            HeadEvidence(
                NAME,
                "taxonomy",
                text,
                count=int(n) if isinstance(n, int) else None,
                count_of="probe inputs",
                label=", ".join(roles),
                brief=said,
                strong=(said,),
                numbers={**numbers, **null},
            )
        ]
    return out


#: a role that at least this share of a re-initialised model's heads pass is not painted as one
NULL_SHARE_MAX = 0.5


def _tag(evidence: list) -> str:
    """The head's taxonomy roles in short; in parentheses a role that half or more of a
    re-initialised model's heads pass too (a content-score rule once named every head of a random
    GPT-2 "positional")."""
    ev = next((e for e in evidence if e.kind == "taxonomy"), None)
    if ev is None or not ev.label:
        return ""
    said = []
    for role in ev.label.split(", "):
        share = ev.number(f"null_share:{role}")
        short = ABBREV.get(role, role)
        said.append(f"({short})" if share is not None and share >= NULL_SHARE_MAX else short)
    return " ".join(said)


def _block(data, layer: int, head: int) -> str:
    """The sentence, then a table: each score, its threshold, its probe and source."""
    from probe.analyses.patterns.decoder_taxonomy import TAXONOMY
    from probe.app.report.evidence import items, sentence
    from probe.app.report.html import esc
    from probe.app.report.style import number

    found = items(data, layer, head, NAME, "taxonomy")
    if not found:
        return ""
    ev = found[0]
    rows = []
    for r in TAXONOMY:
        v = ev.number(r.column)
        role = r.role if r.column == r.role.replace("-", "_") else f"{r.role} ({r.column} score)"
        if v is None:
            rows.append(f"<tr><td>{esc(role)}</td><td>not scored</td><td></td><td>{esc(r.probe)}</td><td></td></tr>")
            continue
        passes, rule = r.passes(v), r.rule
        rows.append(
            f"<tr><td>{esc(role)}</td><td>{'<b>' if passes else ''}{number(v, digits=2)}{'</b>' if passes else ''}"
            f"</td><td>{esc(rule)}</td><td>{esc(r.probe)}</td><td>{esc(r.source)}</td></tr>"
        )
    head_row = "<tr><th>role</th><th>score</th><th>named when</th><th>probe</th><th>source</th></tr>"
    return f'<p>{sentence(ev)}</p><table class="data">{head_row}{"".join(rows)}</table>'


def _remark(by: dict, cls: str, sep: str) -> str:
    ev = by.get("taxonomy")
    return f"decoder probes: {ev.label}" if ev is not None and ev.label else ""


SHOWS = Presentation(
    evidence=head_evidence,
    kinds=("taxonomy",),
    block=HeadBlock("Decoder probes", _block, order=15),
    tables={"taxonomy": TableView("induction", False)},
    verdict=(VerdictHint("remark", _remark),),
    tag=GridTag(
        _tag,
        "decoder probes (second line): ind induction, copy copying (OV), prev previous-token, dup duplicate-token, "
        "succ successor, retr retrieval, sink attention sink, pos positional, cont content; in parentheses: a role "
        "half or more of a re-initialised model's heads pass too",
    ),
)

ANALYSIS = Analysis(
    NAME,
    "Decoder head taxonomy: induction, copying, successor, retrieval, sink, positional vs content",
    run,
    shows=SHOWS,
    needs=("model",),
    help="Score every head of a causal LM on the decoder probes as their papers define them (Olsson et al. 2022 "
    "induction and copying, previous/duplicate-token, Gould et al. 2023 successor heads, Wu et al. 2024 retrieval "
    "heads, Gu et al. 2024 sinks, positional vs content) at the papers' settings, written beside the scores with "
    "TransformerLens's detect_head scores (*_tl) and the share of a re-initialised model's heads that pass; a "
    "detector whose task the model cannot do says so with its accuracy; writes taxonomy.csv. Refused for non-causal "
    "models.",
    params=(
        Param(
            "n_tokens", int, 50, "random tokens per copy of the repeated sequence (TransformerLens's demos: 50)", min=2
        ),
        Param("sink_length", int, 64, "tokens per sequence of the sink probe (Gu et al. 2024: 64)", min=2),
        Param("probe_inputs", int, 16, "probe inputs per detector (repeated sequences, needles)", min=1),
        Param(
            "no_null",
            bool,
            False,
            "skip the calibration: the probes on the re-initialised model, the share of its heads that pass each role",
        ),
        Param("seed", int, 0, "seed of the random probe inputs", min=0),
    ),
    section=True,
    modules=("probe.analyses.patterns.decoder_taxonomy",),
    order=46,
    model="zoo:induction",
    example="probe decoder-heads --model zoo:induction --out out/decoder",
)
