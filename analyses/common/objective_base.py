"""The one objective class: "a scalar per example from a forward" (its two faces).

An :class:`Objective` is what a causal test or an attribution measures the model by. It
has two faces on one object (captum's ``forward_func`` and TransformerLens' metric
callables are the models):

* **the sweep face** (ablation, necessity, patching, pruning, the claims' removal
  sweeps): :meth:`~Objective.batches` turns a corpus into :class:`MetricBatch` es
  (``[rows, seq]``), :meth:`~Objective.forward` runs the model (under whatever
  intervention the caller holds), :meth:`~Objective.score` gives one scalar per row
  ``[rows]``, :meth:`~Objective.readout` what a run keeps per example ``[rows, ...]``
  (a score, or an embedding for corpus-level objectives), and :meth:`~Objective.harm`
  compares a perturbed run's readouts with the clean run's as ``[n]`` in ``units``,
  positive = worse (sign-corrected by ``higher_is_better``).
* **the gradient face** (attributions, importance, faithfulness, circuits):
  :meth:`~Objective.output` runs the model on ``input_ids``/``attention_mask``
  ``[batch, seq]``, :meth:`~Objective.aux` fixes per-example choices on the clean input
  (``[batch, k]``, passed to captum as an additional forward argument so it is expanded
  with the inputs), :meth:`~Objective.scalar` gives one differentiable scalar per row
  ``[batch]``, :meth:`~Objective.distribution` probabilities ``[batch, k]`` for
  counterfactuals, :meth:`~Objective.reads` the query positions it reads.

The built-in objectives derive from these classes (:mod:`.metrics`, :mod:`.targets`,
:mod:`.similarity`); :mod:`.objective` parses their names and resolves ``auto`` (and
re-exports these classes, the public face).
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Optional, Sequence, TYPE_CHECKING

if TYPE_CHECKING:
    from probe.models import ModelAdapter

import numpy as np
import torch

from probe.errors import NotApplicable

from .batch import MetricBatch, batch_indices, by_one_length, check_scalar, special_mask

__all__ = ["Objective", "InputObjective", "Unfitted", "MetricBatch", "check_scalar", "scalar_function"]


class Objective:
    """A scalar per example from a model forward: the one concept (module docstring).

    Attributes (class level, overridden by subclasses):
        name: what it is called (``loss``, ``logit:3`` …); ``describe()`` adds its settings.
        units: what a harm of 1 means.
        higher_is_better: the sense of the raw score (harms are sign-corrected: positive = worse).
        differentiable: the gradient face gives a useful gradient.
        stationary_at_clean: at an extremum on the clean model (its gradient there is zero).
        ignores_padding: scores do not change when trailing padding is cut (sweeps may trim rows).
        corpus_level: harms need every example's readout at once (no per-run :meth:`score`).

    The defaults implement the sweep face on a plain tokenization (subclasses implement
    :meth:`score`) and refuse the gradient face (subclasses implement :meth:`scalar`).
    """

    name = "objective"
    #: the name it was resolved from (``auto`` resolved: ``loss``, ``logit`` …), set by
    #: :func:`.objective.resolve_objective`; empty for an object built by hand
    spec = ""
    units = "objective change"
    higher_is_better = False
    differentiable = True
    stationary_at_clean = False
    ignores_padding = False
    corpus_level = False

    def check(self, adapter: ModelAdapter, corpus: Any = None) -> None:
        """Raise :class:`NotApplicable` when the objective does not fit this model/corpus."""

    def run_model(self, adapter: ModelAdapter, inputs: dict) -> Any:
        """``adapter.model(**inputs)`` (no KV cache for decoders; grad mode is the caller's)."""
        kwargs = dict(inputs)
        if adapter.arch == "decoder":
            kwargs["use_cache"] = False
        return adapter.model(**kwargs)

    def describe(self) -> str:
        return self.name

    @property
    def called(self) -> str:
        """What tables and notes call it: the name it was resolved from, else :attr:`name`."""
        return self.spec or self.name

    def __repr__(self) -> str:
        return f"<objective {self.name}>"

    # ---- the sweep face: a corpus in, one score / readout per example out ----
    def batches(
        self, adapter: ModelAdapter, corpus: Any, batch_size: int = 16, *, by_length: bool = False
    ) -> Iterator[tuple]:
        """Yield ``(indices, MetricBatch)`` over the corpus.

        Args:
            by_length: batch examples of similar length together (longest first, by
                characters; ties in corpus order) instead of in corpus order. A batch is
                padded to its longest example, so on a corpus of mixed lengths this cuts
                the padded tokens every forward carries (the first 128 sentences of EWT
                dev: 5,736 → 3,592 at batch size 8). Callers place each batch's results
                by its ``indices``.

        A model that runs one length per batch (``adapter.batching``: its padding leaks)
        gets each batch split into groups of one token length.
        """
        batches = by_one_length(
            adapter, batch_indices(corpus.texts, batch_size, by_length), corpus.texts, corpus.word_spans
        )
        for idx in batches:
            yield idx, self.make_batch(adapter, corpus, idx)

    def make_batch(self, adapter: ModelAdapter, corpus: Any, indices: Sequence[int]) -> MetricBatch:
        """Tokenize ``corpus`` examples ``indices`` into one padded batch."""
        spans = corpus.word_spans
        encs = [adapter.encode(corpus.texts[i], spans[i] if spans else None) for i in indices]
        inputs = adapter.batch(encs)
        if adapter.arch == "encoder-decoder":
            targets = corpus.targets or corpus.texts
            inputs.update(adapter.decoder_inputs([adapter.encode(targets[i], target=True) for i in indices]))
        return MetricBatch(inputs=inputs, special=special_mask(adapter, inputs["input_ids"], inputs["attention_mask"]))

    def forward(self, adapter: ModelAdapter, batch: MetricBatch) -> Any:
        """Run the model on ``batch`` (grad mode is the caller's)."""
        return self.run_model(adapter, batch.inputs)

    def reference(self, outputs: Any, batch: MetricBatch) -> Optional[torch.Tensor]:
        """What the clean run must hand to :meth:`score` of intervened runs (rows first)."""
        return None

    def score(self, outputs: Any, batch: MetricBatch, reference: Optional[torch.Tensor] = None) -> torch.Tensor:
        """One scalar per row ``[rows]`` of a run on ``batch``."""
        raise NotImplementedError

    def readout(self, outputs: Any, batch: MetricBatch) -> torch.Tensor:
        """What a run keeps per example, ``[rows, ...]`` (default: the score)."""
        return self.score(outputs, batch, None)

    def harm(self, clean: Any, perturbed: Any) -> np.ndarray:
        """``[n]``: how much worse ``perturbed`` readouts are than ``clean`` (positive = worse)."""
        d = np.asarray(perturbed, np.float64) - np.asarray(clean, np.float64)
        return -d if self.higher_is_better else d

    def measures(self, clean: Any, perturbed: Any) -> dict:
        """Secondary per-example measures ``name -> [n]`` (none by default)."""
        return {}

    def corpus_measures(self, clean: Any, perturbed: Any) -> dict:
        """Corpus-level measures ``name -> float`` (none by default)."""
        return {}

    # ---- the gradient face: one differentiable scalar per input row ----
    def output(self, adapter: ModelAdapter, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Any:
        """The model output :meth:`scalar` reads, from ``[batch, seq]`` inputs."""
        if adapter.arch == "encoder-decoder":
            raise NotApplicable(
                "faithfulness targets (per-input objectives) support encoder or decoder models, not encoder-decoder"
            )
        return self.run_model(adapter, {"input_ids": input_ids, "attention_mask": attention_mask})

    def gradient_output(
        self, adapter: ModelAdapter, input_ids: torch.Tensor, attention_mask: torch.Tensor, aux: torch.Tensor
    ) -> Any:
        """The output :meth:`scalar` and :meth:`distribution` read in an attribution
        (:func:`scalar_function`) or a permuted forward
        (:func:`probe.analyses.explanation.counterfactual.permutation_effects`): :meth:`output`;
        an objective that reads a few positions may compute only those."""
        return self.output(adapter, input_ids, attention_mask)

    def aux(self, adapter: ModelAdapter, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Per-example choices ``[batch, k]``, resolved on the clean inputs."""
        return torch.zeros(input_ids.shape[0], 1, dtype=torch.long, device=input_ids.device)

    def scalar(self, out: Any, attention_mask: torch.Tensor, aux: torch.Tensor) -> torch.Tensor:
        """One scalar per row ``[batch]`` of :meth:`output` (differentiable)."""
        raise NotApplicable(
            f"objective {self.name!r} has no per-input scalar to attribute; use a target such as "
            "logit, loss:<position> or mlm"
        )

    def distribution(self, out: Any, attention_mask: torch.Tensor, aux: torch.Tensor) -> torch.Tensor:
        """Probabilities ``[batch, k]`` whose change a counterfactual measures."""
        raise NotApplicable(f"objective {self.name!r} has no distribution for a counterfactual")

    def reads(self, n_tokens: int, adapter: Optional[ModelAdapter] = None) -> tuple:
        """Query positions (of an example of ``n_tokens`` tokens) the scalar reads."""
        return (0,)


class InputObjective(Objective):
    """An objective defined on one input at a time (:mod:`.targets`): subclasses implement
    the gradient face (:meth:`scalar`, :meth:`aux`, :meth:`distribution`, :meth:`reads`);
    the sweep face is derived from it (the batch's ``aux["target"]`` is :meth:`aux` on the
    clean inputs, :meth:`score` is :meth:`scalar`)."""

    name = "target"
    units = "change of the target scalar"

    def make_batch(self, adapter: ModelAdapter, corpus: Any, indices: Sequence[int]) -> MetricBatch:
        base = super().make_batch(adapter, corpus, indices)
        ids, mask = base.inputs["input_ids"], base.inputs["attention_mask"]
        return MetricBatch(inputs=base.inputs, aux={"target": self.aux(adapter, ids, mask)}, special=base.special)

    def forward(self, adapter: ModelAdapter, batch: MetricBatch) -> Any:
        return self.output(adapter, batch.inputs["input_ids"], batch.inputs["attention_mask"])

    def score(self, outputs: Any, batch: MetricBatch, reference: Any = None) -> torch.Tensor:
        mask = batch.inputs["attention_mask"]
        return check_scalar(self.scalar(outputs, mask, batch.aux["target"]), batch.rows, self.describe())

    def scalar(self, out: Any, attention_mask: torch.Tensor, aux: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class Unfitted(Objective):
    """An objective named by the user whose parameters come from the data: ``similarity``
    (the partner sentences' clean embeddings) and ``probe:<property>`` (a probe fitted on a
    treebank). The analysis that holds the data fits it; ``kind`` and ``arg`` are the parsed
    name."""

    def __init__(self, spec: str):
        self.spec = self.name = spec
        self.kind, _, self.arg = spec.partition(":")

    def _unfitted(self, *args, **kwargs):
        raise NotApplicable(f"objective {self.spec!r} is fitted on the data first (its partners, its treebank)")

    forward = output = gradient_output = aux = score = scalar = _unfitted


def scalar_function(adapter: ModelAdapter, objective: Objective) -> Callable:
    """``f(input_ids, attention_mask, aux) -> [batch]``: the forward captum attributes.

    Raises:
        InputError: the objective does not give one scalar per example (naming its shape).
    """

    def f(input_ids, attention_mask, aux):
        out = objective.gradient_output(adapter, input_ids, attention_mask, aux)
        return check_scalar(objective.scalar(out, attention_mask, aux), input_ids.shape[0], objective.describe())

    return f
