"""The names of objectives and what each use knows: data only, imported by the CLI's
``--help`` (no torch). The resolver is :func:`.objective.resolve_objective`."""

from __future__ import annotations

__all__ = ["USES", "NAMES", "TARGET_FORMS", "FORMS", "NOUNS", "known_for", "objective_help"]

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
#: what each use calls its objective (in errors and in the line a run prints)
NOUNS = {"corpus": "objective", "per-example": "metric", "gradient": "metric", "explain": "target"}


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
