"""The claims block of a head page: each claim's evidence sentence (unit, interval, count,
test and floor) under its kind's title (:mod:`probe.analyses.claims.protocol`), rendered from the head's evidence objects (the claims section's
:class:`probe.app.registry.evidence.HeadEvidence`, each made from
:func:`probe.analyses.claims.evidence.claim_evidence`)."""

from __future__ import annotations

from typing import Any

from .claim_table import STATUS_CLASS
from .html import esc


def _title(kind: str) -> str:
    """A claim kind's heading (its registered :class:`probe.analyses.claims.protocol.ClaimTest`'s)."""
    from probe.analyses.claims.protocol import claim_kinds, claim_test

    return claim_test(kind).title if kind in claim_kinds() else kind


def claims_block(data: Any, layer: int, head: int) -> str:
    """The head's claims: the table a page opens with (:func:`.claim_table.claims_table`:
    each claim's status, a plain sentence and its effect drawn against the floor and the
    null) over the list of their evidence sentences (tests, p-values, nulls), folded in a
    ``<details>`` one click away; from the evidence objects of the sections whose evidence
    is claims (``Analysis.shows.claims``; '' when none ran)."""
    from .claim_table import claims_table
    from probe.app.registry import registered

    claim_sections = {a.name for a in registered() if a.shows.claims}
    found = [ev for ev in data.evidence.get((layer, head), ()) if ev.section in claim_sections]
    if not found:
        return ""
    items = [
        f'<li><b>{esc(_title(ev.kind))}</b> — <span class="{STATUS_CLASS[ev.status]}">'
        f"{esc(ev.status)}</span>: {esc(ev.text)}{baselines_table(ev)}</li>"
        for ev in found
    ]
    by_head = data.claims.claims if data.claims is not None else {}
    table = claims_table(by_head.get((layer, head), {}))
    listed = f'<ul class="claims">{"".join(items)}</ul>'
    if not table:
        return f"<h2>Claims</h2>{listed}"
    return (
        f'<h2>Claims</h2>{table}<details class="cstats"><summary>Statistics: each claim\'s test, p-values, '
        f"null model and floor</summary>{listed}</details>"
    )


def baselines_table(ev: Any) -> str:
    """The harm of a causal claim under each removal baseline, side by side
    (:mod:`probe.analyses.claims.baselines`; '' for a claim confirmed under none)."""
    from probe.analyses.claims.baselines import BASELINE_WORDS
    from probe.analyses.claims.evidence import fmt

    modes = [k.split(":", 1)[1] for k in ev.numbers if k.startswith("baseline:")]
    if not modes:
        return ""
    head = "".join(f"<th>{esc(BASELINE_WORDS.get(m, m))}</th>" for m in modes)
    harm = "".join(f"<td>{esc(fmt(ev.numbers.get(f'baseline:{m}'), True))}</td>" for m in modes)
    held = "".join(f"<td>{'holds' if ev.numbers.get(f'baseline_holds:{m}') else 'does not hold'}</td>" for m in modes)
    return (
        f'<table class="baselines"><tr><th>baseline</th>{head}</tr><tr><td>harm</td>{harm}</tr>'
        f"<tr><td>claim</td>{held}</tr></table>"
    )


def head_claims_html(data: Any, layer: int, head: int) -> str:
    """The top of a head's page (:func:`probe.app.report.pages.head_html`): its one-line
    verdict, then its claims."""
    return f'<p class="verdict">{esc(data.verdicts[(layer, head)])}</p>' + claims_block(data, layer, head)
