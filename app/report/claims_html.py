"""The claims block of a head page: each claim's evidence sentence (unit, interval, count,
test and floor), rendered from the per-head evidence objects (:mod:`probe.analyses.claims.evidence`)."""

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


def claim_sentence(kind: str, c) -> str:
    """One claim in words: its evidence's text (:func:`probe.analyses.claims.evidence.claim_evidence`),
    the same text report.md and summary.json carry."""
    from probe.analyses.claims.evidence import claim_evidence

    return claim_evidence(kind, c).text


def claims_block(data, layer: int, head: int) -> str:
    """HTML list of the head's claims ('' when the claims section did not run)."""
    claims = getattr(data, "claims", None)
    if claims is None or (layer, head) not in claims.claims:
        return ""
    items = []
    for kind, c in claims.claims[(layer, head)].items():
        items.append(
            f'<li><b>{esc(TITLES.get(kind, kind))}</b> — <span class="{STATUS_CLASS[c.status]}">'
            f"{esc(c.status)}</span>: {esc(claim_sentence(kind, c))}</li>"
        )
    return f'<h2>Claims</h2><ul class="claims">{"".join(items)}</ul>'


def head_claims_html(data, layer: int, head: int) -> str:
    """The top of a head's page (:func:`probe.app.report.pages.head_html`): its one-line
    verdict, then its claims."""
    return f'<p class="verdict">{esc(data.verdicts[(layer, head)])}</p>' + claims_block(data, layer, head)
