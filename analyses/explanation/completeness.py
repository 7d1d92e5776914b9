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

Where more than :data:`PILOT` examples are explained, :func:`gated_attributions` attributes a
**pilot** first: the :data:`PILOT` examples spread over the lengths (:func:`pilot_of`), raised
where none passes at the steps asked for. Where one passes, the others are attributed and
raised as above, to the same steps and verdicts as attributing every example first. Where
none passes, IG is given up before the others are attributed: they get no IG, are excluded
and counted (``untried``), and the reference falls back (:mod:`.reference`) as it would had
every example failed. On SmolLM2 (16 explained examples from 8 steps, none passing) the
full ladder raised all 16 to 16 steps and 9 of them to 32, where every one stopped (not
converging), for no passing example: 544 example-steps of forward and backward beyond the
first 128. A pilot of the 4 closest to the tolerance, chosen after all 16 were attributed
at 8 steps (2026-12-06), raised 4 to 16 (64) with the same reference, null bar and 270
verdicts (``bench/bench_faithfulness_smollm2.py --pilot 0`` beside it); attributing the
pilot first (2026-12-07) also leaves out the other 12 examples' 96 example-steps at 8 steps,
which no comparison read. A run whose examples pass at the first steps (MiniLM on EWT dev:
4 of 71 at 8) or whose pilot passes once raised (the bundled sample) attributes every
example and raises it as before (the same steps and facts).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence, TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from probe.models.adapter import ModelAdapter
    from .attributions import Attributions

__all__ = [
    "TOLERANCE",
    "MAX_STEPS_FACTOR",
    "NEAR",
    "PILOT",
    "IGGate",
    "gate_ig",
    "gated_attributions",
    "hopeful",
    "pilot_of",
    "relative_errors",
]

#: largest relative completeness error an example may have to enter a verdict
TOLERANCE = 0.01
#: the most steps tried, as a multiple of the steps asked for
MAX_STEPS_FACTOR = 8
#: an example whose error is within this multiple of :data:`TOLERANCE` is never stopped early
NEAR = 10
#: the examples attributed first, spread over the lengths (:func:`gated_attributions`); none of
#: them passing by the cap, the others are given no IG
PILOT = 4


@dataclass(frozen=True)
class IGGate:
    """What the gate did. ``passed``: indices of examples within :data:`TOLERANCE`;
    ``excluded``: the others; ``steps``: per example, the steps its IG was computed with;
    ``errors``: per example, the final relative error; ``start``: the steps every example
    was first computed with; ``stopped``: indices of the examples whose steps stopped rising
    before the cap, not converging towards the tolerance (:func:`hopeful`; a subset of
    ``excluded``); ``pilot``: the examples attributed first (:func:`gated_attributions`;
    empty where every example was attributed at once); ``untried``: the others, given no IG
    because no pilot example passed (steps 0, error NaN; a subset of ``excluded``)."""

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
        steps = [s for s in self.steps if s > 0]  # the examples IG was computed on
        return {
            "tolerance": TOLERANCE,
            "n": len(self.errors),
            "excluded": len(self.excluded),
            "excluded_share": len(self.excluded) / max(1, len(self.errors)),
            "start_steps": self.start,
            "max_steps": int(max(steps)) if steps else 0,
            "median_steps": float(np.median(steps)) if steps else 0.0,
            "steps_counts": {int(k): int(v) for k, v in zip(*np.unique(steps, return_counts=True))},
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
    """``(attrs, IGGate)``: ``attrs`` (every example attributed at ``n_steps``) with the IG of
    every example beyond :data:`TOLERANCE` recomputed with more steps (doubling, up to
    :data:`MAX_STEPS_FACTOR` × ``n_steps``, and no further for an example :func:`hopeful`
    says cannot reach it); ``kw`` go to :func:`.attributions.attribute`. Attributing with a
    pilot first: :func:`gated_attributions`."""
    examples = list(attrs.examples)
    err = relative_errors(attrs)
    steps = [n_steps] * len(examples)
    stopped: set = set()
    _raise(adapter, target, encodings, range(len(examples)), examples, err, steps, stopped, n_steps, kw)
    out = replace(attrs, examples=tuple(examples), settings=dict(attrs.settings, ig_steps_per_example=steps))
    return out, _gate(err, steps, stopped, n_steps)


def _gate(err: np.ndarray, steps: list, stopped: set, n_steps: int, pilot: tuple = (), untried: tuple = ()) -> IGGate:
    """The :class:`IGGate` of final errors ``err`` and ``steps`` per example."""
    passed = tuple(i for i, e in enumerate(err) if e <= TOLERANCE)
    excluded = tuple(i for i, e in enumerate(err) if not e <= TOLERANCE)
    errors = tuple(float(e) for e in err)
    return IGGate(
        passed, excluded, tuple(steps), errors, start=n_steps, stopped=tuple(sorted(stopped)), pilot=pilot,
        untried=untried,
    )  # fmt: skip


def pilot_of(lengths: Sequence[int], k: int = PILOT) -> list:
    """The ``k`` examples (indices, sorted) spread over ``lengths``: the middle one of each of
    ``k`` equal shares of the examples in length order (all of them where ``k ≥ len(lengths)``)."""
    order = np.argsort(np.asarray(lengths), kind="stable")
    n = len(order)
    if k >= n:
        return list(range(n))
    return sorted(int(order[(2 * j + 1) * n // (2 * k)]) for j in range(k))


def gated_attributions(
    adapter: ModelAdapter, target: Any, encodings: Any, methods: Sequence[str], n_steps: int, **kw: Any
) -> tuple:
    """``(attrs, IGGate or None)``: ``methods`` attributed on every encoding, IG gated as
    :func:`gate_ig` gates it, with its pilot attributed before the others (``kw`` go to
    :func:`.attributions.attribute`).

    Where more than :data:`PILOT` examples are explained, the :data:`PILOT` spread over the
    lengths (:func:`pilot_of`) are attributed first, and raised where none passes at
    ``n_steps``. Where one passes (at ``n_steps`` or raised), the others are attributed and
    every example beyond the tolerance is raised as :func:`gate_ig` raises it: the same steps
    and verdicts as attributing every example first. Where none passes, IG is given up
    before the others are attributed: they get no IG (NaN scores; their other methods as
    asked, or only their values, :func:`.attributions.unattributed`), are excluded and counted
    (``untried``, steps 0), and the reference falls back (:mod:`.reference`). On SmolLM2 (16 explained examples,
    none within 1% at 8 or 16 steps) the others' 8-step IG was 12 × 8 example-steps of
    forward and backward that no comparison read."""
    from .attributions import attribute, unattributed

    methods = tuple(methods)
    if "ig" not in methods:
        return attribute(adapter, target, encodings, methods=methods, n_steps=n_steps, **kw), None
    encodings = list(encodings)
    n = len(encodings)
    quiet = {k: v for k, v in kw.items() if k != "progress"}  # the steps raised: no progress bar
    if n <= PILOT or PILOT < 1:  # every example attributed, then raised
        attrs = attribute(adapter, target, encodings, methods=methods, n_steps=n_steps, **kw)
        return gate_ig(adapter, target, encodings, attrs, n_steps, **quiet)
    pilot = pilot_of([len(e) for e in encodings], PILOT)
    rest = sorted(set(range(n)) - set(pilot))
    first = attribute(adapter, target, [encodings[i] for i in pilot], methods=methods, n_steps=n_steps, **quiet)
    examples: list = [None] * n
    err = np.full(n, np.nan)
    steps = [0] * n
    for j, i in enumerate(pilot):
        examples[i] = replace(first.examples[j], index=i)
        steps[i] = n_steps
    err[pilot] = relative_errors(first)
    stopped: set = set()
    raised = not (err[pilot] <= TOLERANCE).any()
    if raised:
        _raise(adapter, target, encodings, pilot, examples, err, steps, stopped, n_steps, quiet)
    given_up = not (err[pilot] <= TOLERANCE).any()
    encs = [encodings[i] for i in rest]
    if given_up:  # the others without IG: the other methods as asked, or only their values
        plain = tuple(m for m in methods if m != "ig")
        others = (
            attribute(adapter, target, encs, methods=plain, n_steps=n_steps, **kw)
            if plain
            else unattributed(adapter, target, encs)
        )
        for j, ex in enumerate(others.examples):
            no_ig = np.full(len(ex.tokens), np.nan)
            examples[rest[j]] = replace(ex, index=rest[j], scores={**ex.scores, "ig": no_ig}, baseline_value=np.nan)
    else:  # attributed and raised as gate_ig does (the pilot, raised already, is not raised again)
        others = attribute(adapter, target, encs, methods=methods, n_steps=n_steps, **kw)
        err[rest] = relative_errors(others)
        for j, i in enumerate(rest):
            examples[i] = replace(others.examples[j], index=i)
            steps[i] = n_steps
        _raise(adapter, target, encodings, rest if raised else range(n), examples, err, steps, stopped, n_steps, quiet)
    attrs = replace(first, examples=tuple(examples), settings=dict(first.settings, ig_steps_per_example=steps))
    gate = _gate(err, steps, stopped, n_steps, pilot=tuple(pilot), untried=tuple(rest) if given_up else ())
    return attrs, gate
