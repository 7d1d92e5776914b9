"""The causal claims' shared removals as named stages of a run (:mod:`.stages`).

Where the run's causal path (``--causal``, :func:`.analyses._shared.causal_path`) removes
every head on the whole corpus, the ablation section's table and the causal claims read the
same removals; each is a stage both declare in their registration, computed once per run
before the first of them runs:

* :data:`DECIDED` — the **decided pass** (the sequential path): every head mean-ablated on
  random blocks of every example until its necessity is decided against the objective's
  floor, with the per-example objective (the embedding drift of a mean-pooled similarity
  structure) measured on the same removals (part ``necessity``), and every head given
  uniform attention weights on the same blocks until its weights claim is decided (part
  ``weights``; not for an encoder-decoder), each block's clean forward once for both
  (:func:`probe.analyses.claims.decided.decided_pass`). Value: a
  :class:`probe.analyses.claims.decided.DecidedPass`. The null model's removals (the bars of
  the claims) stay the claims' own: where the null's bar is the floor the claims take these
  runs, elsewhere they decide again against their bar.
* :data:`SCREENED` — the **screened necessity** (the screened path): every head screened on
  every example at once by attribution patching, the heads whose screened harm could reach
  the floor and a random audit removed exactly (part ``necessity``), against the null
  model's bar where a reader asks for it (part ``null``)
  (:func:`probe.analyses.claims.screened.screened_necessity`). Value: a
  :class:`probe.analyses.claims.screened.ScreenedNecessity`.

Inputs, for both: the run's model, whole corpus, runner and progress; its ``corpus``
objective (and, for the decided pass, its ``per-example`` one); from the readers' asks the
causal path (``causal``, ``max_model_examples``), ``batch_size``, ``null`` and ``seed``.
A stage starts only where a reader that starts it asks (the ablation section, for
mean-ablation of every head); the claims join it.
"""

from __future__ import annotations

from typing import Any, Optional

from probe.errors import InputError, NotApplicable

from .stages import Ask, Stage

__all__ = ["DECIDED", "SCREENED"]


def _starter(asks: list) -> Ask:
    return next(a for a in asks if a.starts)


def _path(ctx: Any, params: dict) -> str:
    """The run's causal path for the whole corpus with ``params``' ``--causal`` and cap."""
    from .analyses._shared import causal_path, head_count

    n, cap = len(ctx.corpus.whole), params.get("max_model_examples")
    return causal_path(params.get("causal"), n, cap, head_count(getattr(ctx, "adapter", None)))


def _objective(ctx: Any, use: str) -> Any:
    """The run's objective for ``use``, or ``None`` where it does not resolve (the reader's
    own sweep then refuses it, or runs without the stage)."""
    try:
        return ctx.objective(use)
    except (InputError, NotApplicable):
        return None


def _decided(ctx: Any, asks: list) -> Optional[Any]:
    """The decided pass (module docstring), or ``None`` off the sequential path or where the
    per-example objective is not the embedding drift the corpus objective's removals give."""
    from probe.analyses.claims.decided import Decide, DecidedPass, decided_pass
    from probe.analyses.claims.removal import derives
    from probe.analyses.common.similarity import drift
    from probe.analyses.necessity.ablation import check_heads

    start = _starter(asks)
    if _path(ctx, start.params) != "sequential":
        return None
    objective, per_example = _objective(ctx, "corpus"), _objective(ctx, "per-example")
    if objective is None or per_example is None or per_example.called != "embedding-drift":
        return None
    if not derives(objective, per_example):
        return None
    parts = {p for a in asks for p in a.parts}
    heads = check_heads(ctx.adapter, None)
    families = [Decide(heads, "mean", measures={per_example: drift})]  # keyed by the objective it measures
    if "weights" in parts and ctx.adapter.arch != "encoder-decoder":
        families.append(Decide(heads, "uniform"))  # on the same blocks' clean forwards
    runs = decided_pass(
        ctx.adapter, ctx.corpus.whole, objective, families, runner=ctx.runner, batch_size=start.params["batch_size"]
    )
    return DecidedPass(tuple(runs))


def _screened(ctx: Any, asks: list) -> Optional[Any]:
    """The screened necessity (module docstring), or ``None`` off the screened path or for a
    corpus-level objective (a similarity structure's harms are not per example)."""
    from probe.analyses.claims.null_model import null_model_for
    from probe.analyses.claims.screened import screened_necessity
    from probe.analyses.claims.screened_claims import REPORT_SCREEN
    from probe.analyses.necessity.ablation import check_heads

    start = _starter(asks)
    if _path(ctx, start.params) != "screened":
        return None
    objective = _objective(ctx, "corpus")
    if objective is None or getattr(objective, "corpus_level", False):
        return None
    nulls = [a for a in asks if "null" in a.parts]
    seed = int(nulls[0].params.get("seed", 0) or 0) if nulls else 0
    null = null_model_for(ctx.adapter, nulls[0].params.get("null"), seed) if nulls else None
    return screened_necessity(
        ctx.adapter, ctx.corpus.whole, objective, check_heads(ctx.adapter, None), null_adapter=null, seed=seed,
        runner=ctx.runner, batch_size=start.params["batch_size"], progress=ctx.progress, **REPORT_SCREEN,
    )  # fmt: skip


#: the decided pass of the sequential path (module docstring)
DECIDED = Stage(
    "decided",
    "every head mean-ablated (and given uniform weights) on random blocks of every example until decided",
    _decided,
    parts=("necessity", "weights"),
)

#: the screened necessity of the screened path (module docstring)
SCREENED = Stage(
    "screened",
    "every head screened on every example at once, those that could matter removed exactly",
    _screened,
    parts=("necessity", "null"),
)
