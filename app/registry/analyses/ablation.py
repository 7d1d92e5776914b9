"""``probe ablate`` and the report's ablation section: does the model need each head?"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

from probe.errors import InputError
from probe.app.registry import STREAMING, Analysis, Param
from probe.app.registry.presentation import HeadBlock, HeadMark, Presentation, Streamed, TableView, VerdictHint
from probe.app.registry.removal_stages import DECIDED, SCREENED
from probe.app.registry.results import AblationResult

from ._shared import (
    model_run_setting,
    BATCH,
    CAUSAL,
    GROUPS,
    N_BOOT,
    group_note,
    group_table,
    head_name,
    model_corpus,
    top_heads,
)

if TYPE_CHECKING:
    import pandas as pd

    from probe.analyses.common.objective import Objective
    from probe.analyses.necessity.ablation import SweepResult
    from probe.app.registry import Context
    from probe.inputs.corpus import Corpus


def run(ctx: Context) -> AblationResult:
    """Ablate each head alone (and each ``--group`` together) on the run's per-example
    objective; where the run made the causal claims' shared removals (the stages this
    section reads: the decided pass, the screened necessity) the table is read from them,
    else from the claims' removal sweep when it determines the same values."""
    from probe.analyses.necessity.head_groups import ablate_group

    p = ctx.params
    corpus, cut = model_corpus(ctx, ctx.corpus.whole)  # the whole corpus's first examples, not a kept sample's
    objective = ctx.objective("per-example")
    groups = [
        ablate_group(ctx.adapter, corpus, g, objective, p["mode"], batch_size=p["batch_size"], n_boot=p["n_boot"])
        for g in p["group"]
        if g
    ]
    decided = ctx.stage(DECIDED, ANALYSIS) if _every_head_mean(p) else None
    screened = ctx.stage(SCREENED, ANALYSIS) if decided is None and _every_head_mean(p) else None
    if decided is not None:  # every example, each head until its necessity is decided (the claims read it too)
        corpus, cut, removals = ctx.corpus.whole, "", decided
        res = _decided_sweep(decided.runs[0], objective, p["n_boot"])
    elif screened is not None:  # every head screened at once, the ones that could matter removed exactly
        corpus, cut, removals = ctx.corpus.whole, "", screened
        res = _screened_sweep(screened)
    else:
        removals = _removals(ctx, corpus, objective)  # the claims reuse them
        res = _sweep(ctx, corpus, objective, removals)
    t = res.table
    top, sig, gt = top_heads(t, "delta"), int(((t["ci_low"] > 0) | (t["ci_high"] < 0)).sum()), group_table(groups)
    return AblationResult(
        tables={"ablation": t} if gt is None else {"ablation": t, "groups": gt},
        per_head=_per_head(t),
        notes=_notes(res, corpus, cut, objective.called, p["mode"], top, sig, gt)
        + _not_sequential(p, decided)
        + _riders(decided)
        + ([screened.note()] if screened is not None else []),
        summary=_summary(ctx.adapter.name, res, corpus, objective.called, p["mode"], top, sig),
        summary_name="ablation",
        writers=[
            _figure(t, f"{ctx.adapter.name}: Δ {objective.called} ({p['mode']}-ablation, {len(corpus)} examples)")
        ],
        data={"sweep": res, "removals": removals},
    )


def _every_head_mean(p: dict) -> bool:
    """Whether this section's removals can be the causal claims' shared ones
    (:mod:`probe.app.registry.removal_stages`): mean-ablation of every head alone, no groups."""
    return p["mode"] == "mean" and p["layers"] is None and not any(p["group"])


def _screened_sweep(got: Any) -> SweepResult:
    """The section's table from a :class:`probe.analyses.claims.screened.ScreenedNecessity`:
    each head's Δ objective, exact (its mean harm and interval over the examples its
    decision took) for the heads removed exactly, else the screen's estimate with ±1.96
    standard errors over every example (``source`` says which); ``ablated`` ``[heads, n]``
    holds the screen's per-example estimates."""
    import numpy as np
    import pandas as pd

    from probe.analyses.necessity.ablation import COLUMNS, SweepResult

    scr, name = got.screen, got.info["objective"]
    n = int(got.info["examples_screened"])
    per_example = scr.estimate["mean"].reshape(n, -1).T  # [L·H, n], the screen's head order
    index = {tuple(h): i for i, h in enumerate(scr.heads)}
    rows, ablated, keys = [], [], []
    for r in got.table.itertuples(index=False):
        key = (int(r.layer), int(r.head))
        keys.append(key)
        ablated.append(per_example[index[key]])
        c = got.claims[key]
        exact = r.role != "screened out" and c.effect is not None and np.isfinite(c.effect)
        d = float(c.effect) if exact else float(r.screened)
        half = 1.96 * float(r.stderr)  # the screen's interval, for a head not removed exactly
        low, high = (float(c.ci_low), float(c.ci_high)) if exact else (d - half, d + half)
        rows.append(
            {"layer": key[0], "head": key[1], "mode": "mean", "metric": name, "clean": 0.0, "ablated": d,
             "delta": d, "ci_low": low, "ci_high": high, "examples": int(r.examples) if exact else n,
             "source": "exact removal" if exact else "screened (attribution patching)"}
        )  # fmt: skip
    table = pd.DataFrame(rows, columns=[*COLUMNS, "examples", "source"])
    path = "screened (every head by attribution patching; those that could matter removed exactly)"
    return SweepResult(table=table, clean=np.zeros(n), ablated=np.stack(ablated), heads=tuple(keys), path=path)


def _riders(decided: Any) -> list:
    """The note that says which of the claims' tests ran in this section's pass (its time
    includes them; the claims section does not run them again)."""
    weights = decided.of("uniform") if decided is not None else None
    if weights is None:
        return []
    return [
        f"the claims' weights test (uniform attention weights; {int(weights.result.n_used.sum())} head × example "
        "removals) ran in this section's pass on the same blocks, each block's clean forward once for both"
    ]


def _not_sequential(p: dict, decided: Any) -> list:
    """The note that says why ``--causal sequential`` was not taken here (it is not silently dropped)."""
    if decided is not None or p.get("causal") != "sequential":
        return []
    return [
        "--causal sequential decides heads only for mean-ablation of every head (no --layers, no --group) "
        "where the metric is the embedding drift of a sentence encoder's similarity structure; this ran "
        "the exhaustive sweep"
    ]


def _decided_sweep(decided: Any, objective: Objective, n_boot: int) -> SweepResult:
    """The section's table from a :class:`probe.analyses.claims.decided.DecidedRun`: each
    head's Δ ``objective`` (its drift from the clean embedding) over the examples its decision
    took, with the bootstrap interval over those examples and their count (``examples``)."""
    import numpy as np
    import pandas as pd

    from probe.analyses.common.bootstrap import bootstrap_mean_ci
    from probe.analyses.necessity.ablation import COLUMNS, SweepResult

    values, name = decided.measured[objective], objective.called
    rows = []
    for i, (layer, head) in enumerate(decided.heads):
        v = values[i][~np.isnan(values[i])]
        low, high = bootstrap_mean_ci(v, n_boot=n_boot, seed=i) if len(v) > 1 else (float("nan"), float("nan"))
        rows.append(
            {"layer": layer, "head": head, "mode": "mean", "metric": name, "clean": 0.0, "ablated": float(v.mean()),
             "delta": float(v.mean()), "ci_low": float(low), "ci_high": float(high), "examples": len(v)}
        )  # fmt: skip
    table = pd.DataFrame(rows, columns=[*COLUMNS, "examples"])
    path = "sequential (each head on random blocks until its necessity is decided)"
    return SweepResult(table=table, clean=np.zeros(decided.n), ablated=values, heads=decided.heads, path=path)


def _sweep(ctx: Context, corpus: Corpus, objective: Objective, removals: Any) -> SweepResult:
    """Each head's ablation: from the claims' removal sweep when it gives this objective's
    values, else the sweep's forwards wherever the run's engine runs them (``ctx.runner``)."""
    from probe.analyses.claims.removal import single_head_values
    from probe.analyses.necessity.ablation_job import sweep_heads_in_blocks

    from ._shared import heads_of_layers

    p = ctx.params
    values = single_head_values(removals, objective, p["mode"]) if removals is not None else None
    if removals is not None and values is not None:
        from probe.analyses.necessity.ablation import sweep_result
        from probe.analyses.necessity.sweep import restart_path

        heads = [u[0] for u in removals.units]
        path = restart_path(ctx.adapter, None)
        return sweep_result(heads, values[0], values[1], p["mode"], objective.called, path, p["n_boot"], 0.95, 0)
    return sweep_heads_in_blocks(
        ctx.runner,
        ctx.adapter,
        corpus,
        objective,
        p["mode"],
        heads_of_layers(ctx.adapter, p["layers"]),
        batch_size=p["batch_size"],
        n_boot=p["n_boot"],
    )


def _per_head(t: pd.DataFrame) -> pd.DataFrame:
    """The head pages' columns: ``ablation_<column>`` and each head's share of the largest |Δ|."""
    per_head = t[["layer", "head", "metric", "mode", "clean", "ablated", "delta", "ci_low", "ci_high"]].rename(
        columns={c: f"ablation_{c}" for c in ("metric", "mode", "clean", "ablated", "delta", "ci_low", "ci_high")}
    )
    biggest = float(t["delta"].abs().max()) or 1.0
    return per_head.assign(ablation_relative=(t["delta"].abs() / biggest).to_numpy())


def _figure(t: pd.DataFrame, title: str) -> Callable[[Path], list]:
    def figure(d: Path) -> list:
        from probe.app.report.ablation_figures import head_heatmap

        return [head_heatmap(t, "delta", d / "ablation.png", title)]

    return figure


def _notes(
    res: SweepResult, corpus: Corpus, cut: str, name: str, mode: str, top: pd.DataFrame, sig: int, gt: Any
) -> list:
    t = res.table
    per_head = (
        f" (examples per head {int(t['examples'].min())}–{int(t['examples'].max())}, "
        f"median {float(t['examples'].median()):g})"
        if "examples" in t
        else ""
    )
    notes = [
        f"{mode}-ablation of each head alone{cut}, objective {name} ({res.path}): {len(t)} heads, "
        f"{len(corpus)} examples{per_head}; {sig} "
        + (
            "change it with a 95% CI excluding 0"
            if bool((t["ci_low"] < 0).any())
            else "have a 95% CI above 0 (no interval reaches below 0)"
        )
        + " (any change at all, however small: whether the model needs a head is the necessity claim, "
        "judged against the objective's practical floor)"
        + "; largest: "
        + ", ".join(f"{head_name(r.layer, r.head)} Δ={r.delta:+.4g}" for r in top.itertuples())
    ]
    if len(corpus) < 2:
        notes.append(
            "1 example: no confidence interval (ci_low/ci_high are empty), so no head is called "
            "significant; give at least 2 examples"
        )
    if gt is not None:
        notes.append(group_note(gt))
    return notes


def _summary(model: str, res: SweepResult, corpus: Corpus, name: str, mode: str, top: pd.DataFrame, sig: int) -> dict:
    return {
        "model": model,
        "examples": len(corpus),
        "metric": name,
        "mode": mode,
        "path": res.path,
        "clean": float(res.clean.mean()),
        "significant_heads": sig,
        "top": top[["layer", "head", "delta"]].to_dict("records"),
    }


def _removals(ctx: Context, corpus: Corpus, per_example: Objective) -> Any:
    """Every head removed alone in this section's mode on the objective the claims
    measure (:func:`probe.analyses.claims.removal.removal_sweep`, the run's ``corpus``
    objective), when that sweep determines ``per_example``
    (:func:`probe.analyses.claims.removal.derives`: the same objective, or the embedding
    drift of a mean-pooled similarity structure): the claims then reuse it instead of
    running the same forwards again. ``None`` otherwise (the section runs
    :func:`probe.analyses.necessity.ablation.sweep_heads`)."""
    from probe.analyses.claims.removal import derives, removal_sweep
    from probe.errors import NotApplicable

    p = ctx.params
    if p["mode"] not in ("zero", "mean") or p["layers"] is not None:
        return None
    try:
        objective = ctx.objective("corpus")
    except (InputError, NotApplicable):  # not one of the claims' objectives, or it does not fit here
        return None
    if not derives(objective, per_example):
        return None
    return removal_sweep(
        ctx.adapter,
        corpus,
        objective,
        modes=(p["mode"],),
        progress=ctx.progress and len(corpus) > 1,
        runner=ctx.runner,
    )


def head_evidence(result: AblationResult) -> dict:
    """Each head's ablation effect (:class:`probe.app.registry.evidence.HeadEvidence`):
    Δ metric with its 95% bootstrap interval over the examples the sweep ran on (its
    ``count``: the sweep's own examples, not the corpus), its rank among every head's
    ``|Δ|`` and its share of the largest (``numbers``: ``rank``, ``of``, ``relative``)."""
    from probe.app.registry.evidence import HeadEvidence, finite
    from probe.app.report.style import number

    t = result.table
    if t is None or not len(t):
        return {}
    n = result.n_examples if result.n_examples is not None else result.summary.get("examples")
    over = f"{n} examples" if n is not None else "the examples swept"
    sizes = t["delta"].abs().to_numpy()
    biggest = float(t["delta"].abs().max()) or 1.0
    out = {}
    for r in t.itertuples(index=False):
        if not finite(r.delta):
            continue
        screened = str(getattr(r, "source", "")).startswith("screened")
        if "examples" in t:  # the sequential and screened paths: each head's own examples
            n = int(r.examples)
            over = f"{n} examples (the random ones its necessity's decision took)"
        d, interval = float(r.delta), (float(r.ci_low), float(r.ci_high))
        ci = interval if finite(interval[0]) and finite(interval[1]) else None
        shown, rank = number(d, ci, signed=True), int((sizes > abs(d)).sum()) + 1
        text = (
            f"Attribution patching (Nanda 2023; Kramár et al. 2024) estimates that {r.mode}-ablation of this head "
            f"changes the {r.metric} by {shown} (±1.96 standard errors over {n} examples); the screen ruled it "
            "out, so it was not removed exactly."
            if screened
            else f"{str(r.mode).capitalize()}-ablation of this head (Michel et al. 2019) changes the {r.metric} by "
            f"{shown} (95% bootstrap CI over {over})."
        ) + f" It ranks {rank} of {len(t)} heads by the size of the effect."
        out[(int(r.layer), int(r.head))] = [
            HeadEvidence(
                "ablation",
                "ablation",
                text,
                value=d,
                interval=interval,
                count=None if n is None else int(n),
                count_of="examples",
                unit=str(r.metric),
                brief=shown + ("" if n is None else f" (n={n})"),
                strong=(shown,),
                numbers={"mode": str(r.mode), "rank": rank, "of": len(t), "relative": abs(d) / biggest},
            )
        ]
    return out


def _mark(evidence: list, n_heads_total: int) -> Optional[tuple]:
    """``(symbol, why)``: ● when the head's ablation interval excludes 0, · when it does
    not; ``None`` without an ablation interval."""
    ev = next((e for e in evidence if (e.section, e.kind) == ("ablation", "ablation")), None)
    ci = ev.ci if ev is not None else None
    if ci is None:
        return None
    return ("●", "ablation effect's CI excludes 0") if (ci[0] > 0 or ci[1] < 0) else ("·", "ablation: no effect")


def _effect(by: dict, cls: str, sep: str) -> str:
    """The verdict's effect: what ablating the head does (its Δ, interval and share of the
    largest head's effect, :data:`probe.app.report.verdict.MATTERS_FRACTION`)."""
    from probe.app.report.verdict import MATTERS_FRACTION, SILENT, num

    ev = by.get("ablation", SILENT)
    d = num(ev.value)
    if d is None:
        return ""
    name, ci = ev.unit or "effect", ev.ci
    if ci is not None and ci[0] <= 0.0 <= ci[1]:
        return f"ablating it changes nothing ({name} {d:+.3g}, CI [{ci[0]:+.3g}, {ci[1]:+.3g}])"
    rel = ev.number("relative")
    if rel is not None and rel < MATTERS_FRACTION:
        return f"ablating it changes little ({name} {d:+.3g}, {rel:.0%} of the largest head effect)"
    return f"matters ({name} {d:+.3g})"


def _block(data, layer: int, head: int) -> str:
    """The head's ablation effect among every head's (a strip); the necessity claim's
    evidence instead when the claims ran (:func:`._shared.necessity_block`)."""
    from probe.app.report.evidence import every_head, one, sentence, strip_svg

    from ._shared import necessity_block

    if one(data, layer, head, "claims", "necessity") is not None:
        return necessity_block(data, layer, head)
    ev = one(data, layer, head, "ablation", "ablation")
    if ev is None:
        return ""
    xlabel = f"Δ {ev.unit}: every head (grey), this head (blue, with CI)"
    return f"<p>{sentence(ev)}</p>" + strip_svg(
        every_head(data, "ablation", "ablation"), ev.value, ev.ci, xlabel=xlabel
    )


SHOWS = Presentation(
    evidence=head_evidence,
    kinds=("ablation",),
    block=HeadBlock("Does the model need it?", _block, order=30),
    tables={"ablation": TableView("|delta|", False, ("layer", "head", "metric", "delta", "ci_low", "ci_high"))},
    verdict=(VerdictHint("effect", _effect),),
    mark=HeadMark(_mark, order=20),
    streamed=Streamed(part="ablation on its model-run examples"),
)


ANALYSIS = Analysis(
    "ablation",
    "Ablation: does the model need the head?",
    run,
    shows=SHOWS,
    needs=("model", "corpus"),
    command="ablate",
    help="Ablate each head alone; write ablation.csv (delta with bootstrap CI) and a heatmap. With --group, "
    "also ablate each group of heads together (groups.csv): redundant heads show no effect alone and a "
    "large one together.",
    objective="per-example",
    # the causal claims' shared removals, started here for mean-ablation of every head
    reads=(DECIDED("necessity", when=_every_head_mean), SCREENED("necessity", when=_every_head_mean)),
    settings=model_run_setting,  # the model-run examples line of the report's settings
    params=(
        Param("mode", str, "zero", "zero or mean ablation", choices=("zero", "mean")),
        Param("layers", "ints", None, "only heads of these layers, e.g. 0,3 or 0-2"),
        N_BOOT,
        GROUPS,
        BATCH,
        CAUSAL,
    ),
    section=True,
    produces=AblationResult,
    # the report ablates in the necessity claims' own mode (mean): the pages show the removal the
    # claims test, and the claims reuse it (zero-ablation stands beside a necessary head's claim)
    report_params={"max_model_examples": 128, "mode": "mean"},
    modules=("probe.analyses.necessity.ablation",),
    order=30,
    engines=STREAMING,
    example="probe ablate --model zoo:prev-token --objective accuracy --limit 40 --group L0H0,L0H1 --out out/ablate",
)
