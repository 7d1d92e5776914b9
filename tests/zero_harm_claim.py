"""A causal claim kind in one module, as a user would write it: importing it registers
``zero-harm`` (does zero-ablating the head alone harm the run's objective past its floor?).
It reads everything from the protocol's inputs: the live model, the corpus, the run's
objective, the runner the removals run on, the null model and the thresholds in force.
tests/test_claim_protocol.py finds it among the heads' claims and in the report."""

from __future__ import annotations

from probe.analyses.claims.claim import Claim
from probe.analyses.claims.protocol import ClaimInputs, ClaimTest, register_claim
from probe.errors import NotApplicable

KIND = "zero-harm"
#: what each compute saw, for the test to check (the inputs' objective, runner, null, thresholds)
SEEN: list = []


def compute(inputs: ClaimInputs) -> dict:
    """``{(layer, head): Claim}``: each head zero-ablated alone on ``inputs.corpus`` (its removals
    on ``inputs.runner``); it holds where the mean harm on ``inputs.objective`` exceeds the
    objective's floor and the null model's same removal."""
    from probe.analyses.claims.removal import removal_sweep

    if inputs.adapter is None or inputs.objective is None:
        raise NotApplicable("no live model")
    SEEN.append(inputs)
    sweep = removal_sweep(
        inputs.adapter, inputs.corpus, inputs.objective, units=inputs.heads, modes=("zero",), runner=inputs.runner
    )
    null = None
    if inputs.null is not None:
        null = removal_sweep(inputs.null, inputs.corpus, inputs.objective, units=inputs.heads, modes=("zero",))
    out = {}
    for i, key in enumerate(inputs.heads):
        harm = float(sweep.harm["zero"][i].mean())
        bar = max(inputs.floor, float(null.harm["zero"][i].mean()) if null is not None else 0.0)
        status = "holds" if harm > bar else "does not hold"
        out[key] = Claim(KIND, status, statement="zero-ablation harms it", effect=harm, null=bar, count=sweep.n,
                         unit=sweep.units_text, threshold=f"fdr {inputs.thresholds['fdr']['value']}",
                         reason=f"mean harm {harm:.3g} against the bar {bar:.3g}")  # fmt: skip
    return out


register_claim(ClaimTest(KIND, "Zero-ablation harm", "zero-ablating it alone harms the objective", compute))
