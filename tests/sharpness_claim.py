"""A claim kind in one module, as a user would write it: importing it registers
``sharpness`` (does the head put half its weight or more on one token per row?).
tests/test_presentation.py finds it on the head pages and in summary.json's claims."""

from __future__ import annotations

from probe.analyses.claims.claim import Claim
from probe.errors import NotApplicable
from probe.analyses.claims.protocol import ClaimInputs, ClaimTest, register_claim

KIND = "sharpness"
#: the mean largest weight of a row from which the claim holds
SHARP = 0.5


def compute(inputs: ClaimInputs) -> dict:
    """``{(layer, head): Claim}``: the mean over examples and rows of each row's largest weight."""
    import torch

    if not inputs.maps:
        raise NotApplicable("no example's maps are held (an engine streamed the corpus)")
    rows = sum(m.attentions.shape[-2] for m in inputs.maps)
    peak = torch.stack([m.attentions.float().amax(-1).mean(-1) for m in inputs.maps]).mean(0)  # [layers, heads]
    out = {}
    for li, layer in enumerate(inputs.maps[0].layers):
        for h in range(peak.shape[1]):
            v = float(peak[li, h])
            status = "holds" if v >= SHARP else "does not hold"
            out[(int(layer), h)] = Claim(
                KIND,
                status,
                statement="sharp rows",
                effect=v,
                count=rows,
                null=SHARP,
                unit="mean largest weight",
                reason=f"mean largest weight {v:.2f} over {rows} rows",
            )
    return out


register_claim(
    ClaimTest(
        KIND,
        "Sharpness",
        "each row puts half its weight or more on one token",
        compute,
        summary=lambda c: f"sharp (mean largest weight {c.effect:.2f})" if c.holds else "",
    )
)
