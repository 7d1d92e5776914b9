"""Integrated gradients that are right before they are compared: the completeness gate.

IG's attributions sum to ``f(x) − f(x')`` (completeness, Sundararajan et al. 2017, their
Proposition 1); the Riemann/Gauss–Legendre approximation misses it by captum's
convergence delta. :func:`gate_ig` re-attributes every example whose relative error
``|delta| / |f(x) − f(x')|`` exceeds :data:`TOLERANCE` with twice the steps, then twice
again, up to :data:`MAX_STEPS_FACTOR` × the steps asked for; an example still beyond it
is excluded from every comparison with IG and counted (:class:`IGGate`), never used.

Steps stop rising where the integral is not converging towards the tolerance. Gauss–Legendre
quadrature of an analytic integrand converges exponentially in the steps, ``e(n) ≈ A·exp(−c·n)``,
so a doubling that took the error from ``e`` to ``e′`` (ratio ``r = e′/e``) promises at best
``e′·r²`` at the next doubling, ``e′·r^6`` at the one after (``e′·r^(2^(k+1) − 2)`` after ``k``
more). Where even that would not reach :data:`TOLERANCE` by the cap (or the error did not fall,
``r ≥ 1``), more doublings are not expected to help: the example's steps are raised no further,
it is excluded as above with its last error and steps kept, and counted
(``stopped_not_converging``). SmolLM2's last-token loss along the path from the ``<|im_end|>``
baseline jumps by nats within 1/20 of it: four sentences' errors at 16, 64 and 256 steps were
(23, 9.5, 0.95), (7.1, 0.67, 3.7), (14, 1.65, 2.8), (3.5, 7.1, 6.9), and the gate raised all
16 explained examples to 8× their steps (≈ 700 s) and passed none. Slower early convergence is not stopped: on the bundled
sample (minilm, similarity target, from 8 steps) two examples went 0.063 → 0.040 → 0.0016 and
0.021 → 0.013 → 0.00006 at 8, 16, 32 steps; a rule stopping where a doubling does not halve
the error would have excluded both, this one passes them as before.

Near the tolerance the rate of one doubling says little (the error of a few nodes is not
monotone): an example within :data:`NEAR` × the tolerance always gets its next doubling, up
to the cap. On ``zoo:agreement`` (``notebooks/05``, from 8 steps) one example's error was 0.013
at 16 steps, barely below its error at 8, and 0.0006 at 32: the rate alone would have stopped it.

Where no example passes at the steps asked for, the gate first raises only a **pilot**: the
:data:`PILOT` examples closest to the tolerance there. Where none of them passes either, IG is
given up — the others keep their first IG, are excluded and counted (``untried``), and the
reference falls back (:mod:`.reference`) as it would have had every example failed; where one
passes, the others are raised as above. On SmolLM2 (16 explained examples from 8 steps, none
passing) the full ladder raised all 16 to 16 steps and 9 of them to 32, where every one stopped
(not converging), for no passing example: 544 example-steps of forward and backward beyond the
first 128; the pilot raised 4 to 16 (64), all four stopped, and the report's faithfulness
section took 175.8 s of CPU against 276.9 s, with the same reference, null bar and 270
verdicts (``bench/bench_faithfulness_smollm2.py --pilot 0`` beside the default, one thread
each). A run whose examples pass at the first steps (MiniLM on EWT dev: 4 of 71 at 8) never
takes the pilot; the bundled sample (none of 24 at 8) takes it, a pilot example passes, and
every example is raised as before (the same steps and facts).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from probe.models.adapter import ModelAdapter
    from .attributions import Attributions

__all__ = ["TOLERANCE", "MAX_STEPS_FACTOR", "NEAR", "PILOT", "IGGate", "gate_ig", "hopeful", "relative_errors"]

#: largest relative completeness error an example may have to enter a verdict
TOLERANCE = 0.01
#: the most steps tried, as a multiple of the steps asked for
MAX_STEPS_FACTOR = 8
#: an example whose error is within this multiple of :data:`TOLERANCE` is never stopped early
NEAR = 10
#: where no example passes at the first steps, the examples raised first (the closest to the
#: tolerance); none of them passing, the others are not raised
PILOT = 4


@dataclass(frozen=True)
class IGGate:
    """What the gate did. ``passed``: indices of examples within :data:`TOLERANCE`;
    ``excluded``: the others; ``steps``: per example, the steps its IG was computed with;
    ``errors``: per example, the final relative error; ``start``: the steps every example
    was first computed with; ``stopped``: indices of the examples whose steps stopped rising
    before the cap, not converging towards the tolerance (:func:`hopeful`; a subset of
    ``excluded``); ``pilot``: the examples raised first where none passed at ``start``
    (empty where the gate raised every example at once); ``untried``: the others, left at
    ``start`` because no pilot example passed (a subset of ``excluded``)."""

    passed: tuple
    excluded: tuple
    steps: tuple
    errors: tuple
    start: int = 0
    stopped: tuple = ()
    pilot: tuple = ()
    untried: tuple = ()

    def to_dict(self) -> dict:
        err = np.asarray(self.errors, dtype=np.float64)
        used = err[list(self.passed)] if self.passed else np.array([np.nan])
        return {
            "tolerance": TOLERANCE,
            "n": len(self.errors),
            "excluded": len(self.excluded),
            "excluded_share": len(self.excluded) / max(1, len(self.errors)),
            "start_steps": self.start,
            "max_steps": int(max(self.steps)) if self.steps else 0,
            "median_steps": float(np.median(self.steps)) if self.steps else 0.0,
            "steps_counts": {int(k): int(v) for k, v in zip(*np.unique(self.steps, return_counts=True))},
            "max_relative_error_used": float(np.nanmax(used)) if self.passed else None,
            "stopped_not_converging": len(self.stopped),
            "pilot": len(self.pilot),
            "untried": len(self.untried),
            "stop_rule": "steps raised no further where the error, converging exponentially at the rate one "
            "doubling showed, would not reach the tolerance by the cap",
        }


def hopeful(before: float, after: float, left: int) -> bool:
    """Whether an example whose relative error a doubling of the steps took from ``before`` to
    ``after`` can reach :data:`TOLERANCE` with the steps multiplied by at most ``left`` (a power
    of 2) more, converging exponentially at the rate it showed (``after · r^(2^(k+1) − 2)``,
    ``r = after / before``, ``k = log2(left)`` doublings): true once within :data:`NEAR` × the
    tolerance, or at the cap (``left`` 1: nothing left to decide)."""
    if after <= NEAR * TOLERANCE or left <= 1:
        return True
    r = after / before if before > 0 else float("inf")
    if not r < 1:
        return False
    k = int(left).bit_length() - 1
    return after * r ** (2 ** (k + 1) - 2) <= TOLERANCE


def relative_errors(attrs: Attributions) -> np.ndarray:
    """``[n]`` ``|delta| / |f(x) − f(x')|`` per example of :class:`.attributions.Attributions`."""
    return np.array(attrs.completeness()["relative_error"], dtype=np.float64)  # a writable copy


def _raise(adapter, target, encodings, todo_from, examples, err, steps, stopped, n_steps, kw) -> None:
    """Raise the steps of the examples ``todo_from`` (indices) beyond :data:`TOLERANCE`, doubling
    up to :data:`MAX_STEPS_FACTOR` × ``n_steps`` and no further for one :func:`hopeful` stops;
    ``examples``, ``err``, ``steps`` and ``stopped`` are updated in place."""
    from .attributions import attribute

    s = n_steps
    while s < MAX_STEPS_FACTOR * n_steps:
        todo = [i for i in todo_from if not err[i] <= TOLERANCE and i not in stopped]
        if not todo:
            break
        s *= 2
        again = attribute(adapter, target, [encodings[i] for i in todo], methods=("ig",), n_steps=s, **kw)
        for i, ex in zip(todo, again.examples):
            scores = dict(examples[i].scores, ig=ex.scores["ig"])
            examples[i] = replace(examples[i], scores=scores, ig_delta=ex.ig_delta, baseline_value=ex.baseline_value)
            steps[i] = s
            gap = ex.value - ex.baseline_value
            before, err[i] = err[i], abs(ex.ig_delta) / max(abs(gap), 1e-12)
            if not hopeful(before, err[i], MAX_STEPS_FACTOR * n_steps // s):
                stopped.add(i)


def gate_ig(adapter: ModelAdapter, target: Any, encodings: Any, attrs: Any, n_steps: int, **kw: Any) -> tuple:
    """``(attrs, IGGate)``: ``attrs`` with the IG of every example beyond
    :data:`TOLERANCE` recomputed with more steps (doubling, up to
    :data:`MAX_STEPS_FACTOR` × ``n_steps``, and no further for an example :func:`hopeful`
    says cannot reach it; where none passes at ``n_steps``, the :data:`PILOT` closest first and
    the others only if one of them passes); ``kw`` go to :func:`.attributions.attribute`."""
    examples = list(attrs.examples)
    err = relative_errors(attrs)
    steps = [n_steps] * len(examples)
    stopped: set = set()
    pilot: list = []
    if len(examples) > PILOT and not (err <= TOLERANCE).any():
        pilot = sorted(np.argsort(err, kind="stable")[:PILOT].tolist())  # NaN errors sort last
        _raise(adapter, target, encodings, pilot, examples, err, steps, stopped, n_steps, kw)
    rest = sorted(set(range(len(examples))) - set(pilot))
    given_up = bool(pilot) and not (err[pilot] <= TOLERANCE).any()
    if not given_up:
        _raise(adapter, target, encodings, rest, examples, err, steps, stopped, n_steps, kw)
    untried = rest if given_up else []
    passed = tuple(i for i, e in enumerate(err) if e <= TOLERANCE)
    excluded = tuple(i for i in range(len(err)) if i not in set(passed))
    out = replace(attrs, examples=tuple(examples), settings=dict(attrs.settings, ig_steps_per_example=steps))
    errors = tuple(float(e) for e in err)
    gate = IGGate(
        passed, excluded, tuple(steps), errors, start=n_steps, stopped=tuple(sorted(stopped)), pilot=tuple(pilot),
        untried=tuple(untried),
    )  # fmt: skip
    return out, gate
