"""The claims block of a head page: each claim's evidence sentence (unit, interval, count,
test and floor), rendered from the head's evidence objects (the claims section's
:class:`probe.app.registry.evidence.HeadEvidence`, each made from
:func:`probe.analyses.claims.evidence.claim_evidence`)."""

from __future__ import annotations

from .html import esc

STATUS_CLASS = {"holds": "ran", "does not hold": "muted", "not tested": "skipped", "not enough evidence": "skipped"}
TITLES = {
    "pattern": "Pattern",
    "structure": "Structure",
    "necessity": "Necessity",
    "redundancy": "Redundancy",
    "weights": "Do the weights matter",
    "attribution": "Agreement with attributions",
}


def claims_block(data, layer: int, head: int) -> str:
    """HTML list of the head's claims, from their evidence objects ('' when the claims
    section did not run)."""
    found = [ev for ev in data.evidence.get((layer, head), ()) if ev.section == "claims"]
    if not found:
        return ""
    items = [
        f'<li><b>{esc(TITLES.get(ev.kind, ev.kind))}</b> — <span class="{STATUS_CLASS[ev.status]}">'
        f"{esc(ev.status)}</span>: {esc(ev.text)}</li>"
        for ev in found
    ]
    return f'<h2>Claims</h2><ul class="claims">{"".join(items)}</ul>'


def head_claims_html(data, layer: int, head: int) -> str:
    """The top of a head's page (:func:`probe.app.report.pages.head_html`): its one-line
    verdict, then its claims."""
    return f'<p class="verdict">{esc(data.verdicts[(layer, head)])}</p>' + claims_block(data, layer, head)
