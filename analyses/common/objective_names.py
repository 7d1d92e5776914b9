"""The names of objectives and what each use knows: data only, imported by the CLI's
``--help`` (no torch). The resolver is :func:`.objective.resolve_objective`."""

from __future__ import annotations

__all__ = ["USES", "NAMES", "TARGET_FORMS", "FORMS", "MEASURED", "known_for", "objective_help", "objective_line"]

#: what an objective is resolved for (the candidates ``auto`` chooses among differ):
#: ``corpus`` the claims' necessity (the similarity structure allowed), ``per-example`` a
#: score per example (ablation, importance, patching), ``gradient`` a per-example score
#: with a gradient at the clean input (circuits), ``explain`` a per-input target (faithfulness)
USES = ("corpus", "per-example", "gradient", "explain")

#: the corpus objectives by name (``loss`` is the model's own loss, whichever kind it is)
NAMES = ("loss", "next-token-loss", "accuracy", "prediction-kl", "embedding-drift", "similarity-structure")
#: the per-input forms (:mod:`.targets`)
TARGET_FORMS = ("logit", "logit:<class>", "loss:<position>", "mlm")
#: the names each use knows, in the order an error lists them
FORMS = {
    "corpus": NAMES,
    "per-example": ("loss", "accuracy", "prediction-kl", "embedding-drift", "next-token-loss", *TARGET_FORMS),
    "gradient": ("loss", "accuracy", "embedding-drift", "similarity", *TARGET_FORMS),
    "explain": (*TARGET_FORMS, "similarity", "probe:<property>"),
}
#: how a use measures the run's objective, in the line a run prints ("measured per example as …")
MEASURED = {
    "corpus": "over the corpus",
    "per-example": "per example",
    "gradient": "by gradient",
    "explain": "per input",
}


def known_for(spec: str, use: str) -> bool:
    """Whether ``spec`` is a name or form (such as ``logit:3``) that ``use`` knows
    (:data:`FORMS`), by its shape alone: nothing is parsed or resolved (``auto`` is no
    name: :func:`.objective.resolve_objective` alone decides what it means)."""
    kind, _, arg = (spec or "").strip().partition(":")
    forms = {form.partition("<")[0] for form in FORMS[use]}
    return (f"{kind}:" if arg else kind) in forms or (kind == "probe" and "probe:" in forms)


def objective_help(uses: tuple) -> str:
    """The ``--objective`` help of a command or the report measuring by ``uses``."""
    names: list = []
    for use in uses:
        names.extend(n for n in FORMS[use] if n not in names)
    return (
        "what the model is measured by: auto (chosen per model and printed) | "
        + " | ".join(names)
        + "; one that does not fit the model is refused before any forward, naming those that do"
    )


def objective_line(names: dict, readers: dict, fell: list, spec: object) -> str:
    """The one line a run with several uses prints: the run's objective named once, as the
    pages and summary.json name it (the first use of :data:`USES` resolved: the claims'
    corpus objective where they run), with the sections measured by it, then how the other
    uses measure it where their name differs (``measured per example as embedding-drift
    (ablation, importance)``).

    Args:
        names: use -> the name its objective is called by (``Objective.called``), or
            ``None`` where the use found none (its sections skip).
        readers: use -> the sections that read it.
        fell: the uses that did not know the named ``spec`` and took ``auto``.
    """
    order = [u for u in USES if u in names] + [u for u in names if u not in USES]
    who = {u: ", ".join(readers.get(u, [u])) for u in order}
    found = [u for u in order if names[u] is not None]
    main = names[found[0]] if found else None
    same = [who[u] for u in found if names[u] == main]
    said = f"objective: {main} ({', '.join(same)})" if main else "objective: none"
    others = [f"{MEASURED.get(u, u)} as {names[u]} ({who[u]})" for u in found if names[u] != main]
    if others:
        said += ", measured " + " and ".join(others)
    skipped = [who[u] for u in order if names[u] is None]
    if skipped:
        said += f"; none for {', '.join(skipped)} (skipped)"
    if fell:
        said += f"; --objective {spec} is not one {', '.join(fell)} knows, so auto there"
    return f"{said}; why each: the index's settings; choose with --objective"
