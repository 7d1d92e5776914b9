"""What every report section reads: :class:`ReportContext`, and the choice of
representative sentences."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from probe.errors import InputError

#: the two sentences of the attention figures in Vaswani et al. (2017), appendix
PAPER_SENTENCES = (
    "It is in this spirit that a majority of American governments have passed new laws since 2009 "
    "making the registration or voting process more difficult.",
    "The Law will never be perfect, but its application should be just - this is what we are missing, in my opinion.",
)

#: longest example (tokens) drawn as a heatmap or line view
MAX_FIGURE_TOKENS = 40


@dataclass
class ReportContext:
    """The inputs of one report.

    Attributes:
        adapter: the live :class:`models.ModelAdapter` (``None`` when built from maps).
        corpus: the :class:`probe.inputs.Corpus` that was captured.
        maps: one :class:`probe.maps.AttentionMaps` per example, in corpus order.
        settings: JSON-able settings shown in the report (model spec, limit, …).
        results: section name -> :class:`probe.app.registry.Result`, filled
            as sections run (later sections may read earlier ones).
        skipped: section name -> the reason it was skipped.
        representatives: example indices shown on every page (paper sentences first).
    """

    adapter: Optional[object]
    corpus: Any
    maps: list
    settings: dict = field(default_factory=dict)
    results: dict = field(default_factory=dict)
    #: section name -> why it was skipped (later sections may report the reason)
    skipped: dict = field(default_factory=dict)
    representatives: list = field(default_factory=list)
    #: the running section's parameters (its defaults with its ``report_params``)
    params: dict = field(default_factory=dict)
    quiet: bool = True
    workdir: Optional[object] = None
    #: parameters the user set on ``probe report`` (``metric``, ``target``,
    #: ``max_model_examples``), applied to every section that declares them
    overrides: dict = field(default_factory=dict)
    #: print the choices made for the user (:meth:`say`) as they are made
    echo: bool = False
    #: ``probe report --engine stream|ray``: the whole corpus and its streamed statistics
    #: (:class:`probe.app.report.engine_sections.EngineRun`); ``maps``/``corpus`` are then
    #: the kept sample. ``None``: every example's maps are held (``--engine local``).
    on_engine: Optional[Any] = None

    @property
    def engine(self) -> str:
        return self.on_engine.name if self.on_engine is not None else "local"

    @property
    def engine_run(self) -> Optional[dict]:
        """:func:`probe.app.engine.run_job` settings when the report runs on an engine
        (analyses with an engine path, e.g. the ablation sweep, take it), else ``None``."""
        return self.on_engine.run if self.on_engine is not None else None

    @property
    def model(self):
        """What the engine's workers load (a spec; the adapter itself for ``stream``)."""
        return self.on_engine.model if self.on_engine is not None else getattr(self.adapter, "name", None)

    @property
    def engine_cut(self) -> str:
        """What the model-run cap left out of the whole corpus, for the notes (as locally)."""
        cap = self.params.get("max_model_examples")
        n = len(self.on_engine.corpus) if self.on_engine is not None else len(self.corpus)
        return f" on the first {cap} of {n} examples" if cap and n > cap else ""

    @property
    def input_corpus(self):
        """The examples an engine-run analysis (the ablation sweep) runs on: the whole
        corpus cut at the running section's model-run cap, as locally."""
        from .engine_sections import model_run_corpus

        if self.on_engine is None:
            return self.corpus
        return model_run_corpus(self, self.params.get("max_model_examples"))

    def say(self, line: str) -> None:
        """A line for people (a choice made for the user, e.g. the objective): logged, kept
        under ``settings["choices"]`` (index page, summary.json) and, when ``echo``,
        printed to stderr."""
        import logging
        import sys

        logging.getLogger(__name__).info("%s", line)
        choices = self.settings.setdefault("choices", [])
        if line not in choices:
            choices.append(line)
            if self.echo:
                print(f"  {line}", file=sys.stderr, flush=True)

    @property
    def progress(self) -> bool:
        return not self.quiet

    def __post_init__(self):
        if not self.maps:
            raise InputError("nothing to report: no example was captured")
        if not self.representatives:
            self.representatives = representative_examples(self.maps)

    @property
    def layers(self) -> tuple:
        return tuple(self.maps[0].layers)

    @property
    def n_heads(self) -> int:
        return self.maps[0].n_heads


def representative_examples(maps, k: int = 2, max_tokens: int = MAX_FIGURE_TOKENS) -> list:
    """Up to ``k`` example indices: the paper's sentences when present, then the first
    examples of at most ``max_tokens`` tokens (falling back to the shortest)."""
    norm = lambda s: " ".join(str(s).split())  # noqa: E731
    paper = {norm(s): r for r, s in enumerate(PAPER_SENTENCES)}
    found = sorted((paper[norm(m.text)], i) for i, m in enumerate(maps) if norm(m.text) in paper)
    out = [i for _, i in found][:k]
    for i, m in enumerate(maps):
        if len(out) >= k:
            break
        if i not in out and m.n_tokens <= max_tokens:
            out.append(i)
    if not out:
        out = [min(range(len(maps)), key=lambda i: maps[i].n_tokens)]
    return out


def sharpest_examples(maps, max_tokens: int = MAX_FIGURE_TOKENS, pool: int = 6) -> torch.Tensor:
    """Per (layer index, head), the example where the head's mean row maximum is
    largest: ``[layer, head]`` of example indices. Candidates: the first ``pool``
    examples of at most ``max_tokens`` tokens (else any), so that few distinct examples
    need drawing."""
    cand = ([i for i, m in enumerate(maps) if m.n_tokens <= max_tokens] or list(range(len(maps))))[:pool]
    sharp = torch.stack([maps[i].attentions.float().max(-1).values.mean(-1) for i in cand])  # [E, L, H]
    return torch.tensor(cand)[sharp.argmax(0)]
