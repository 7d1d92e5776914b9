"""Which attribution the faithfulness verdict compares attention with, and why.

Integrated gradients (Sundararajan et al. 2017) are the reference wherever they can be
trusted: on the examples that pass the completeness gate (:mod:`.completeness`). Where IG
passes on no example (a path along which the target is jagged: SmolLM2's last-token loss
from the ``<|im_end|>`` baseline jumps by nats within 1/20 of the path), or was not
computed, the reference falls back to the first of :data:`FALLBACK` computed — blank-out
first: leave-one-out occlusion, the importance Jain & Wallace (2019) compare attention
with and Abnar & Zuidema's (2020) blank-out, exact by construction (one forward per
token; no integral to approximate, so nothing to miss) — and blank-out is computed for
the purpose when no fallback was asked. IG then enters no comparison (its columns are
left out of the agreement, the evidence recovery and the null model's bar), and the run
says why in one line (``info["reference_why"]``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Optional, Sequence

from .completeness import TOLERANCE

if TYPE_CHECKING:
    from .attributions import Attributions
    from .completeness import IGGate

__all__ = ["FALLBACK", "WORDS", "choose_reference", "with_method"]

#: the references tried, in order, where integrated gradients cannot be used
FALLBACK = ("blank_out", "input_x_gradient", "saliency")

#: each attribution method in words
WORDS = {
    "ig": "integrated gradients",
    "blank_out": "blank-out (leave-one-out occlusion)",
    "input_x_gradient": "input × gradient",
    "saliency": "saliency",
}


def choose_reference(methods: Sequence[str], gate: Optional[IGGate]) -> tuple:
    """``(reference method, why)``: ``("ig", "")`` when IG was computed and ``gate`` passed
    at least one example; else the first of :data:`FALLBACK` in ``methods`` (``blank_out``
    when none is: the caller computes it, :func:`with_method`) and the one line saying why."""
    if "ig" in methods and gate is not None and gate.passed:
        return "ig", ""
    if "ig" in methods and gate is not None:
        g = gate.to_dict()
        notes = []
        if g.get("untried"):  # the pilot failed: the others were never given IG
            why = (
                f"integrated gradients missed {TOLERANCE:.0%} completeness on a pilot of {g['pilot']} of the "
                f"{g['n']} examples, spread over their lengths, at up to {g['max_steps']} steps"
            )
            notes.append(f"the other {g['untried']} not given IG")
        else:
            why = f"integrated gradients missed {TOLERANCE:.0%} completeness on all {g['n']} examples "
            why += f"at up to {g['max_steps']} steps"
        if g.get("stopped_not_converging"):
            notes.append(f"{g['stopped_not_converging']} stopped early, not converging towards it")
        why += f" ({'; '.join(notes)})" if notes else ""
    else:
        why = "integrated gradients were not computed"
    ref = next((m for m in FALLBACK if m in methods), FALLBACK[0])
    why += f": the reference is {WORDS[ref]}"
    if ref not in methods:
        why += ", computed for it"
    return ref, why


def with_method(
    adapter: Any, objective: Any, encodings: Sequence, attrs: Attributions, method: str, **kw: Any
) -> Attributions:
    """``attrs`` with ``method``'s scores added to every example (computed by
    :func:`.attributions.attribute` with ``kw``); ``attrs`` itself when it has them."""
    if method in attrs.methods:
        return attrs
    from .attributions import attribute

    more = attribute(adapter, objective, encodings, methods=(method,), **kw)
    examples = tuple(
        replace(ex, scores={**ex.scores, method: new.scores[method]}) for ex, new in zip(attrs.examples, more.examples)
    )
    return replace(attrs, examples=examples, methods=(*attrs.methods, method))
