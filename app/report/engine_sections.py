"""The report's sections on an engine (``probe report --engine stream|ray``).

With an engine the report no longer holds every example's maps. One streamed pass over
the whole corpus (:func:`probe.app.engine.analyses.report_statistics`, in this process
or Ray's actors) feeds the accumulators of the corpus statistics, and only a bounded
*kept sample* (the first ``kept_examples`` examples) is captured whole, for the pages'
figures and for the sections that need whole maps or gradients:

==============  =====================================================================
syntax          relation counts of every sentence (``LayerwiseRelations``), as local
roles           head features of every example (``LayerwiseHeadFeatures``, token and
                word level) and the punctuation share, fitted as local
ablation        the single-head sweep on the model-run examples, read from the claims'
                removal sweep when that gives its metric (below), else ``AblateJob``
                (per-example values per block, one bootstrap here)
claims          the pattern and structure evidence of every example (the accumulators
                the claims declare, ``Analysis.accumulators``); the removal sweeps on
                the whole corpus's model-run examples, their batches in the engine's
                workers (``RemovalJob``: the plan and the harms here)
others          importance, faithfulness, rollout, …: locally, on the kept sample
==============  =====================================================================

The numbers of the distributed sections equal the local engine's (tests/test_report_engine.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: sections whose statistics the engine computes over the whole corpus
DISTRIBUTED = ("syntax", "roles", "ablation", "claims")
#: examples captured whole when none is given: the model-run cap, so the sections that
#: run locally on the kept sample see the examples they would see without an engine
KEPT_EXAMPLES = 128


@dataclass
class EngineRun:
    """What a report on an engine knows besides its kept sample.

    Attributes:
        name: ``stream`` or ``ray`` (the ``--engine`` choice).
        run: :func:`probe.app.engine.run_job` settings (``engine``, ``workers``, …).
        model: what each worker loads (a spec; for ``stream`` the loaded adapter).
        corpus: the whole fitted corpus (the kept sample is ``ctx.corpus``).
        stats: :func:`probe.app.engine.analyses.report_statistics` of ``corpus``
            (filled before the sections run).
    """

    name: str
    run: dict
    model: Any
    corpus: Any
    stats: dict = field(default_factory=dict)
    seconds: dict = field(default_factory=dict)

    def statement(self, kept: int, sections) -> dict:
        """The settings entries stated on the index page and in summary.json."""
        n = len(self.corpus)
        whole = [s for s in sections if s in ("syntax", "roles")]
        if "claims" in sections:
            whole.append("the claims' pattern and structure evidence")
        local = [s for s in sections if s not in DISTRIBUTED]
        where = f"{self.run.get('workers')} Ray workers" if self.name == "ray" else "one process, streamed"
        parts = [f"{', '.join(whole)} on all {n} examples"] if whole else []
        if "ablation" in sections:
            parts.append("ablation on its model-run examples")
        if "claims" in sections:
            parts.append("the claims' removal sweeps on the model-run examples, their batches on the engine")
        return {
            "engine": f"{self.name} ({where}): " + ("; ".join(parts) or "no section distributed"),
            "kept sample": f"the first {kept} of {n} examples, captured whole (--kept-examples): the pages' "
            "figures" + (f" and {', '.join(local)}, run on it alone" if local else ""),
        }


def engine_section(name: str):
    """The engine's variant of section ``name``, or ``None`` (runs locally)."""
    return {"syntax": syntax_section, "roles": roles_section}.get(name)


def syntax_section(ctx):
    """The syntax section from the relation counts streamed over every sentence."""
    from probe.analyses.structure.word_graph import Skipped
    from probe.app.registry.analyses.syntax import section_from

    stats = ctx.on_engine.stats
    if stats.get("relations") is None:
        from probe.errors import NotApplicable

        raise NotApplicable("no treebank input (give --conllu with dependency annotation)")
    return section_from(stats["relations"], Skipped(list(stats["skipped"])))


def roles_section(ctx):
    """The roles section from head features streamed over every example (the syntax
    section's best heads as evidence when it ran), as :func:`probe.analyses.patterns.roles.head_roles`
    fits them from whole maps."""
    from probe.analyses.patterns.roles import RoleClassifier
    from probe.app.registry.analyses.roles import section_from, syntax_evidence

    stats = ctx.on_engine.stats
    clf = RoleClassifier()
    clf.punct_chance_ = stats["punct_chance"]
    clf.fit_tables({"token": stats["token"], "word": stats["word"]}, stats["n_examples"], syntax=syntax_evidence(ctx))
    return section_from(ctx, clf.roles_, stats["n_examples"])
