"""The report on an engine (``probe report --engine stream|ray``).

With an engine the report no longer holds every example's maps. The sections declare the
sums they read over the corpus (``Analysis.accumulators``); one streamed pass over the
whole corpus (:func:`probe.runs.blocks.stream_into` on the run's runner, in this process or
Ray's actors) fills them, and only a bounded *kept sample* (the first ``kept_examples``
examples) is captured whole, for the pages' figures and the sections that need whole
maps or gradients. A section runs the same code on every engine (a local run feeds the
same accumulators its held maps):

What each section streams is its own declaration (``Analysis.shows.streamed``):

==============  =====================================================================
syntax          relation counts of every sentence (``LayerwiseRelations``)
roles           head features of every example (``LayerwiseHeadFeatures``, token and
                word level) and the punctuation share (``PunctuationShare``)
claims          the pattern and structure evidence of every example (``PatternFeatures``,
                ``StructureCounts``); the removal sweeps on the whole corpus's model-run
                examples, their batches in the engine's workers (``RemovalJob``: the plan
                and the harms here)
ablation        the single-head sweep on the model-run examples, read from the claims'
                removal sweep when that gives its metric, else ``AblateJob`` on the run's runner
                (per-example values per block, one bootstrap here)
others          importance, faithfulness: on the whole corpus's model-run or explained
                examples, in this process; rollout: on the kept sample's representatives
==============  =====================================================================

The numbers equal the local engine's (tests/test_report_engine.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

#: examples captured whole when none is given: the model-run cap, so the sections that
#: run locally on the kept sample see the examples they would see without an engine
KEPT_EXAMPLES = 128


@dataclass
class EngineRun:
    """What a report on an engine knows besides its kept sample.

    Attributes:
        name: ``stream`` or ``ray`` (the ``--engine`` choice).
        run: :func:`probe.app.engine.run_job` settings (``engine``, ``workers``, …).
        corpus: the whole fitted corpus (the kept sample is ``ctx.corpus.kept``).
        stats: the sections' declared accumulators filled over ``corpus`` before the
            sections run (``filled``: ``{analysis: {key: accumulator}}``), the items left
            out for their length (``long``) and the pass's wall time (``seconds``).
    """

    name: str
    run: dict
    corpus: Any
    stats: dict = field(default_factory=dict)
    seconds: dict = field(default_factory=dict)

    def statement(self, kept: int, sections: Sequence[Any]) -> dict:
        """The settings entries stated on the index page and in summary.json, from what
        each of ``sections`` (:class:`probe.app.registry.Analysis`) declares an engine
        computes of it (``shows.streamed``: over the whole corpus, and other parts)."""
        n = len(self.corpus)
        streamed = [s.shows.streamed for s in sections if s.shows.streamed is not None]
        whole = [st.whole for st in streamed if st.whole]
        local = [s.name for s in sections if s.shows.streamed is None]
        where = f"{self.run.get('workers')} Ray workers" if self.name == "ray" else "one process, streamed"
        parts = [f"{', '.join(whole)} on all {n} examples"] if whole else []
        parts += [st.part for st in streamed if st.part]
        return {
            "engine": f"{self.name} ({where}): " + ("; ".join(parts) or "no section distributed"),
            "kept sample": f"the first {kept} of {n} examples, captured whole (--kept-examples): the pages' "
            "figures" + (f" and {', '.join(local)}, run on it alone" if local else ""),
        }
