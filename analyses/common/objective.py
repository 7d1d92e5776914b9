"""One objective: "a scalar per example from a forward", with the one place ``auto`` is resolved.

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

Objectives defined on one input (a class logit, a token's loss, a probe's logit:
:mod:`.targets`) derive their sweep face from their gradient face (:class:`InputObjective`);
corpus objectives (the model's loss, the embedding drift: :mod:`.metrics`; the similarity
structure: :mod:`.similarity`) implement the sweep face and the gradient face where it is
defined (a face that does not apply raises :class:`probe.errors.NotApplicable`).

:func:`resolve_objective` is the one place an objective's name is parsed and ``auto`` is
resolved, from the model's kind and the use (:data:`USES`), into an object with the
reason (printed by the caller). An objective that does not fit the model is refused,
naming those that do, before any forward.
"""

from __future__ import annotations

from typing import Callable, Iterator, Optional, Sequence

import numpy as np
import torch

from probe.errors import InputError, NotApplicable

from .batch import MetricBatch, check_scalar, special_mask

__all__ = [
    "Objective",
    "InputObjective",
    "Unfitted",
    "MetricBatch",
    "check_scalar",
    "scalar_function",
    "USES",
    "NAMES",
    "FORMS",
    "resolve_objective",
    "check_objective",
    "applicable_objectives",
    "head_kind",
    "floor_of",
]


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
    units = "objective change"
    higher_is_better = False
    differentiable = True
    stationary_at_clean = False
    ignores_padding = False
    corpus_level = False

    def check(self, adapter, corpus=None) -> None:
        """Raise :class:`NotApplicable` when the objective does not fit this model/corpus."""

    def run_model(self, adapter, inputs: dict):
        """``adapter.model(**inputs)`` (no KV cache for decoders; grad mode is the caller's)."""
        kwargs = dict(inputs)
        if adapter.arch == "decoder":
            kwargs["use_cache"] = False
        return adapter.model(**kwargs)

    def describe(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"<objective {self.name}>"

    # ---- the sweep face: a corpus in, one score / readout per example out ----
    def batches(self, adapter, corpus, batch_size: int = 16, *, by_length: bool = False) -> Iterator[tuple]:
        """Yield ``(indices, MetricBatch)`` over the corpus.

        Args:
            by_length: batch examples of similar length together (longest first, by
                characters; ties in corpus order) instead of in corpus order. A batch is
                padded to its longest example, so on a corpus of mixed lengths this cuts
                the padded tokens every forward carries (the first 128 sentences of EWT
                dev: 5,736 → 3,592 at batch size 8). Callers place each batch's results
                by its ``indices``.
        """
        if batch_size < 1:
            raise InputError(f"batch_size must be ≥ 1, got {batch_size}")
        order = list(range(len(corpus)))
        if by_length:
            texts = corpus.texts
            order.sort(key=lambda i: -len(texts[i]))
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            yield idx, self.make_batch(adapter, corpus, idx)

    def make_batch(self, adapter, corpus, indices: Sequence[int]) -> MetricBatch:
        """Tokenize ``corpus`` examples ``indices`` into one padded batch."""
        spans = corpus.word_spans
        encs = [adapter.encode(corpus.texts[i], spans[i] if spans else None) for i in indices]
        inputs = adapter.batch(encs)
        if adapter.arch == "encoder-decoder":
            targets = corpus.targets or corpus.texts
            inputs.update(adapter.decoder_inputs([adapter.encode(targets[i], target=True) for i in indices]))
        return MetricBatch(inputs=inputs, special=special_mask(adapter, inputs["input_ids"], inputs["attention_mask"]))

    def forward(self, adapter, batch: MetricBatch):
        """Run the model on ``batch`` (grad mode is the caller's)."""
        return self.run_model(adapter, batch.inputs)

    def reference(self, outputs, batch: MetricBatch) -> Optional[torch.Tensor]:
        """What the clean run must hand to :meth:`score` of intervened runs (rows first)."""
        return None

    def score(self, outputs, batch: MetricBatch, reference: Optional[torch.Tensor] = None) -> torch.Tensor:
        """One scalar per row ``[rows]`` of a run on ``batch``."""
        raise NotImplementedError

    def readout(self, outputs, batch: MetricBatch) -> torch.Tensor:
        """What a run keeps per example, ``[rows, ...]`` (default: the score)."""
        return self.score(outputs, batch, None)

    def harm(self, clean, perturbed) -> np.ndarray:
        """``[n]``: how much worse ``perturbed`` readouts are than ``clean`` (positive = worse)."""
        d = np.asarray(perturbed, np.float64) - np.asarray(clean, np.float64)
        return -d if self.higher_is_better else d

    def measures(self, clean, perturbed) -> dict:
        """Secondary per-example measures ``name -> [n]`` (none by default)."""
        return {}

    def corpus_measures(self, clean, perturbed) -> dict:
        """Corpus-level measures ``name -> float`` (none by default)."""
        return {}

    # ---- the gradient face: one differentiable scalar per input row ----
    def output(self, adapter, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        """The model output :meth:`scalar` reads, from ``[batch, seq]`` inputs."""
        if adapter.arch == "encoder-decoder":
            raise NotApplicable(
                "faithfulness targets (per-input objectives) support encoder or decoder models, not encoder-decoder"
            )
        return self.run_model(adapter, {"input_ids": input_ids, "attention_mask": attention_mask})

    def aux(self, adapter, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Per-example choices ``[batch, k]``, resolved on the clean inputs."""
        return torch.zeros(input_ids.shape[0], 1, dtype=torch.long, device=input_ids.device)

    def scalar(self, out, attention_mask: torch.Tensor, aux: torch.Tensor) -> torch.Tensor:
        """One scalar per row ``[batch]`` of :meth:`output` (differentiable)."""
        raise NotApplicable(
            f"objective {self.name!r} has no per-input scalar to attribute; use a target such as "
            "logit, loss:<position> or mlm"
        )

    def distribution(self, out, attention_mask: torch.Tensor, aux: torch.Tensor) -> torch.Tensor:
        """Probabilities ``[batch, k]`` whose change a counterfactual measures."""
        raise NotApplicable(f"objective {self.name!r} has no distribution for a counterfactual")

    def reads(self, n_tokens: int, adapter=None) -> tuple:
        """Query positions (of an example of ``n_tokens`` tokens) the scalar reads."""
        return (0,)


class InputObjective(Objective):
    """An objective defined on one input at a time (:mod:`.targets`): subclasses implement
    the gradient face (:meth:`scalar`, :meth:`aux`, :meth:`distribution`, :meth:`reads`);
    the sweep face is derived from it (the batch's ``aux["target"]`` is :meth:`aux` on the
    clean inputs, :meth:`score` is :meth:`scalar`)."""

    name = "target"
    units = "change of the target scalar"

    def make_batch(self, adapter, corpus, indices: Sequence[int]) -> MetricBatch:
        base = super().make_batch(adapter, corpus, indices)
        ids, mask = base.inputs["input_ids"], base.inputs["attention_mask"]
        return MetricBatch(inputs=base.inputs, aux={"target": self.aux(adapter, ids, mask)}, special=base.special)

    def forward(self, adapter, batch: MetricBatch):
        return self.output(adapter, batch.inputs["input_ids"], batch.inputs["attention_mask"])

    def score(self, outputs, batch: MetricBatch, reference=None) -> torch.Tensor:
        mask = batch.inputs["attention_mask"]
        return check_scalar(self.scalar(outputs, mask, batch.aux["target"]), batch.rows, self.describe())

    def scalar(self, out, attention_mask: torch.Tensor, aux: torch.Tensor) -> torch.Tensor:
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

    forward = output = aux = score = scalar = _unfitted


def scalar_function(adapter, objective: Objective) -> Callable:
    """``f(input_ids, attention_mask, aux) -> [batch]``: the forward captum attributes.

    Raises:
        InputError: the objective does not give one scalar per example (naming its shape).
    """

    def f(input_ids, attention_mask, aux):
        out = objective.output(adapter, input_ids, attention_mask)
        return check_scalar(objective.scalar(out, attention_mask, aux), input_ids.shape[0], objective.describe())

    return f


# ---- names and ``auto``: parsed and resolved here only ----

#: what an objective is resolved for (the candidates ``auto`` chooses among differ):
#: ``corpus`` the claims' necessity (the similarity structure allowed), ``per-example`` a
#: score per example (ablation, importance, patching), ``gradient`` a per-example score
#: with a gradient at the clean input (circuits), ``explain`` a per-input target (faithfulness)
USES = ("corpus", "per-example", "gradient", "explain")

#: the corpus objectives by name (``loss`` is the model's own loss, whichever kind it is)
NAMES = ("loss", "next-token-loss", "accuracy", "embedding-drift", "similarity-structure")
#: the per-input forms (:mod:`.targets`)
TARGET_FORMS = ("logit", "logit:<class>", "loss:<position>", "mlm")
#: the names each use knows, in the order an error lists them
FORMS = {
    "corpus": NAMES,
    "per-example": ("loss", "accuracy", "embedding-drift", "next-token-loss", *TARGET_FORMS),
    "gradient": ("loss", "accuracy", "embedding-drift", "similarity", *TARGET_FORMS),
    "explain": (*TARGET_FORMS, "similarity", "probe:<property>"),
}
_NOUN = {"corpus": "objective", "per-example": "metric", "gradient": "metric", "explain": "target"}


def head_kind(adapter) -> str:
    """``mlm``, ``sequence-classification``, ``token-classification`` or ``""`` (no head
    or another one), from the loaded class (``config.architectures`` chose it)."""
    name = type(adapter.model).__name__
    if name.endswith("ForMaskedLM") or (adapter.arch == "encoder" and name.endswith("ForPreTraining")):
        return "mlm"
    if name.endswith("ForSequenceClassification"):
        return "sequence-classification"
    if name.endswith("ForTokenClassification"):
        return "token-classification"
    return ""


def _parse(spec: str, use: str, probe: Optional[Objective]) -> Objective:
    """The one parser of an objective's name (``use`` decides which names are known)."""
    from . import metrics, similarity, targets

    kind, _, arg = spec.partition(":")
    named = {
        "loss": metrics.LossMetric,
        "next-token-loss": similarity.NextTokenLoss,
        "accuracy": metrics.AccuracyMetric,
        "embedding-drift": metrics.DriftMetric,
        "similarity-structure": similarity.SimilarityStructure,
    }
    allowed = {form.partition("<")[0] for form in FORMS[use]}  # "loss:<position>" -> "loss:"
    key = f"{kind}:" if arg else kind
    if key in allowed or (kind == "probe" and "probe:" in allowed):
        try:
            if spec in named:
                return named[spec]()
            if kind == "logit":
                return targets.ClassLogit(None if arg in ("", "predicted") else int(arg))
            if key == "loss:":
                return targets.LMLoss(int(arg))
            if spec == "mlm":
                return targets.OwnTokensLoss()
        except ValueError:
            raise InputError(f"{_NOUN[use]} {spec!r}: expected an integer after '{kind}:'") from None
        if kind == "probe" and probe is not None:
            return probe
        if kind in ("similarity", "probe"):
            return Unfitted(spec)
    note = " (or a callable in the Python API)" if use == "per-example" else ""
    raise InputError(f"unknown {_NOUN[use]} {spec!r}; known: {', '.join(FORMS[use])}, auto{note}")


def _auto(adapter, corpus, use: str) -> tuple:
    """``(name, why)``: the objective ``auto`` means for ``adapter`` (and ``corpus``) in ``use``."""
    from .metrics import MASK_FRACTION, has_lm_head, zoo_has_loss, zoo_task
    from .similarity import MIN_SENTENCES

    model = type(adapter.model).__name__
    if use == "explain":
        head = head_kind(adapter)
        if adapter.causal:
            return "loss:-1", f"chosen for {adapter.name}, a {model}: the next-token loss of the last token"
        if (
            adapter.name.startswith("zoo:")
            or (corpus is not None and corpus.examples)
            or head == "sequence-classification"
        ):
            return "logit", f"chosen for {adapter.name}, a {model}: its predicted class's logit"
        if head == "mlm":
            return "mlm", f"chosen for {adapter.name}, a {model}: the masked-LM loss of the sentence's own tokens"
        if adapter.arch == "encoder":  # a sentence encoder: the similarity of sentence pairs, its own output
            return "similarity", f"chosen for {adapter.name}, a {model}: the similarity of sentence pairs"
        if corpus is not None and corpus.sentences:
            return "probe:subject-number", f"chosen for {adapter.name}, a {model}: a probe on the treebank"
        raise NotApplicable(
            "no target to explain: the sentence model needs a treebank (--conllu) for its probe, or give --target"
        )
    zoo = zoo_task(adapter)
    if zoo and zoo_has_loss(adapter) and (corpus is None or corpus.examples):
        return "loss", f"the zoo task's loss ({zoo})"
    if not zoo and has_lm_head(adapter):
        kind = {
            "decoder": f"the next-token loss from {model}'s head",
            "encoder": f"the masked-LM loss of the sentence's own tokens ({MASK_FRACTION:.0%} masked) from {model}'s head",
        }
        return "loss", kind.get(adapter.arch, "the teacher-forced loss of the targets")
    if use == "gradient":
        return "similarity", "no task or LM head: the similarity to a partner sentence"
    if use == "corpus" and adapter.arch == "encoder" and not zoo and (corpus is None or len(corpus) >= MIN_SENTENCES):
        return "similarity-structure", "a sentence encoder: the similarity structure of the corpus"
    return "embedding-drift", "the model has no language-model or task head to score a loss with"


def resolve_objective(spec="auto", adapter=None, corpus=None, *, use: str = "corpus", probe=None) -> tuple:
    """``(objective, why)`` from a name, ``auto`` or an :class:`Objective` (or, for the
    per-example uses, a callable ``fn(outputs, batch) -> [rows]``); checked against
    ``adapter`` and ``corpus`` before any forward. The one place ``auto`` is resolved.

    Args:
        spec: ``auto`` (or ``None``/``""``), a name known for ``use`` or an object.
        use: one of :data:`USES` (which names are known and what ``auto`` chooses).
        probe: the fitted probe objective a bare ``probe`` names (``explain``).

    Raises:
        InputError: an unknown name (listing the known ones), a bad argument.
        NotApplicable: an objective that does not fit the model (naming those that do), or
            ``auto`` with nothing to explain.
    """
    if use not in USES:
        raise InputError(f"unknown use {use!r}; known: {', '.join(USES)}")
    if isinstance(spec, Objective):
        if adapter is not None:
            spec.check(adapter, corpus)
        return spec, "given"
    if spec is not None and not isinstance(spec, str):
        from .metrics import CallableMetric

        obj: Objective = CallableMetric(spec)
        if adapter is not None:
            obj.check(adapter, corpus)
        return obj, "given"
    spec, why = (spec or "auto").strip(), "named"
    if spec == "auto":
        if adapter is None:
            raise InputError("'auto' chooses an objective for a model: give the model")
        spec, why = _auto(adapter, corpus, use)
    obj = _parse(spec, use, probe)
    obj.spec = spec  # type: ignore[attr-defined]  # the name it was resolved from (printed)
    if adapter is not None:
        obj.check(adapter, corpus)
    pooling = getattr(obj, "pooling", None)
    if use == "corpus" and pooling is not None and hasattr(pooling, "describe"):
        why = f"{why}; {pooling.describe()}"
    return obj, why


def check_objective(spec, adapter, corpus=None) -> None:
    """Refuse, before any forward, an objective the user named that does not fit ``adapter``
    (and ``corpus``): the command-line boundary's check.

    Raises:
        InputError: an unknown name (listing the known ones) or one that does not fit, naming
            the objectives that do (one line, exit 1).
    """
    try:
        resolve_objective(spec, adapter, corpus)
    except NotApplicable as exc:  # inside a section it skips; named by the user it is a bad input
        raise InputError(f"--objective {spec}: {exc.reason}") from None


def applicable_objectives(adapter, corpus=None) -> list:
    """Names of the corpus objectives that fit ``adapter`` (and ``corpus``)."""
    from .metrics import applicable_metrics, has_lm_head, zoo_task
    from .similarity import MIN_SENTENCES

    out = list(applicable_metrics(adapter, corpus))
    if adapter.arch == "decoder" and has_lm_head(adapter) and not zoo_task(adapter):
        out.insert(0, "next-token-loss")
    if adapter.arch == "encoder" and (corpus is None or len(corpus) >= MIN_SENTENCES):
        out.insert(len(out) - 1, "similarity-structure")
    return out


def floor_of(objective) -> tuple:
    """``(floor, source)``: the practical floor of ``objective`` in its units."""
    from probe.analyses.claims import thresholds as T

    return T.min_effect(objective.name), T.floor_source(objective.name)
