"""The corpus objectives of a live model: its loss, accuracy and embedding drift.

Each is an :class:`.objective.Objective` whose sweep face turns a corpus into model
inputs (:class:`MetricBatch`), runs the model, and returns **one scalar per example** (a
tensor ``[rows]``), so that one forward can carry many ablations (a batch row per ablated
head) and bootstrap intervals can be taken over examples. Where it is defined, the
gradient face gives the same scalar from ``input_ids``/``attention_mask`` alone (the
next-token loss, the embedding drift, a callable).

Built-in (by name through :func:`.objective.resolve_objective`; :func:`get_metric` is its
per-example front):

* ``loss`` — the model's own task loss per example: masked-LM cross-entropy (15% of the
  word tokens masked, seeded per example) for an encoder with an MLM head; next-token
  cross-entropy for a decoder with an LM head; teacher-forced cross-entropy of the
  targets for an encoder-decoder LM; the zoo task's loss (the zoo module's own labels)
  for ``zoo:<task>`` models on their evaluation examples.
* ``accuracy`` — zoo tasks only: percent of the scored positions (or the one label)
  predicted correctly, per example.
* ``embedding-drift`` — ``1 − cos(e_clean, e)`` between the clean and the intervened
  sentence embedding, mean-pooled over the attention mask from the base model's last
  hidden state (the pooling the bundled sentence model was trained with, Reimers &
  Gurevych 2019). Zero on the clean model.
* any callable ``fn(outputs, batch) -> Tensor[rows]`` via :class:`CallableMetric`.

Shapes: ``MetricBatch`` tensors are ``[rows, ...]``; ``score`` returns ``[rows]``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any, Callable, Optional, Sequence, TYPE_CHECKING

if TYPE_CHECKING:
    from probe.models import ModelAdapter

import numpy as np
import torch
import torch.nn.functional as F

from probe.errors import InputError, NotApplicable

from .batch import MetricBatch, f32, special_mask, token_nll
from .objective_base import Objective

log = logging.getLogger(__name__)

__all__ = [
    "token_nll",
    "MetricBatch",
    "LossMetric",
    "AccuracyMetric",
    "DriftMetric",
    "CallableMetric",
    "applicable_metrics",
    "as_corpus",
    "Chunk",
    "prepare",
]

MASK_FRACTION = 0.15


def as_corpus(corpus: Any) -> Any:
    """A :class:`probe.inputs.corpus.Corpus` from a Corpus or a sequence of strings.

    Raises:
        ValueError: on an empty corpus.
    """
    from probe.inputs.corpus import Corpus

    if isinstance(corpus, str):
        corpus = [corpus]
    if not isinstance(corpus, Corpus):
        corpus = Corpus(texts=tuple(corpus), source="texts")
    if not len(corpus):
        raise InputError("empty corpus: give at least one example")
    return corpus


def zoo_task(adapter: ModelAdapter) -> Optional[str]:
    """The zoo task of a ``zoo:`` model (None for any other model)."""
    task = (adapter.card or {}).get("task")
    return task if adapter.name.startswith("zoo:") and task else None


def zoo_has_loss(adapter: ModelAdapter) -> bool:
    """Whether the zoo task defines a loss (its module can ``encode`` labelled inputs;
    zoo:constructed, whose weights are set by hand, has no task head to score)."""
    from probe.models import zoo

    task = zoo_task(adapter)
    return bool(task) and hasattr(zoo.task_module(task), "encode")  # type: ignore[arg-type]  # a task name when bool(task)


def has_lm_head(adapter: ModelAdapter) -> bool:
    """Whether the model has an output embedding (a language-model head)."""
    getter = getattr(adapter.model, "get_output_embeddings", None)
    return getter is not None and getter() is not None


_special = special_mask
_f32 = f32


def _to(adapter, d: dict) -> dict:
    return {k: v.to(adapter.device) for k, v in d.items()}


def _token_ce(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy per row over positions whose label is not −100: ``[rows]``."""
    if logits.dim() == 2:  # sequence classification: one label per row
        return token_nll(logits, labels)
    keep = labels != -100
    ce = token_nll(logits, labels)
    return (ce * keep).sum(-1) / keep.sum(-1).clamp(min=1)


def _token_acc(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    pred = logits.argmax(-1)
    if logits.dim() == 2:
        return 100.0 * (pred == labels).float()
    keep = labels != -100
    return 100.0 * ((pred == labels) & keep).sum(-1).float() / keep.sum(-1).clamp(min=1)


def _zoo_batch(adapter, corpus, indices) -> MetricBatch:
    from probe.models import zoo

    if not corpus.examples:
        raise InputError(
            f"{adapter.name}'s loss/accuracy need the zoo task's examples with their ground "
            "truth: run without --text/--file/--conllu to use its evaluation set"
        )
    mod = zoo.task_module(zoo_task(adapter))  # type: ignore[arg-type]  # zoo adapters only (the caller checked)
    enc = mod.encode(adapter.tokenizer, [corpus.examples[i] for i in indices])
    if isinstance(enc, dict):  # a seq2seq task (translate): the teacher-forced batch, labels inside
        enc = dict(enc)
        labels = enc.pop("labels")
        inputs = _to(adapter, enc)
    else:  # (encoding, labels)
        enc, labels = enc
        inputs = _to(adapter, {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]})
    return MetricBatch(
        inputs=inputs,
        aux={"labels": labels.to(adapter.device)},
        special=_special(adapter, inputs["input_ids"], inputs["attention_mask"]),
    )


def _mlm_mask(n_tokens: int, special: torch.Tensor, seed: int) -> torch.Tensor:
    """Bool ``[n_tokens]``: 15% of the non-special positions (at least one), seeded."""
    words = np.flatnonzero(~special[:n_tokens].cpu().numpy())
    if words.size == 0:
        return torch.zeros(n_tokens, dtype=torch.bool)
    k = max(1, int(round(MASK_FRACTION * words.size)))
    pick = np.random.default_rng(seed).choice(words, size=k, replace=False)
    out = torch.zeros(n_tokens, dtype=torch.bool)
    out[torch.as_tensor(pick)] = True
    return out


class LossMetric(Objective):
    """The model's own task loss per example (see the module docstring).

    Raises (from :meth:`check`):
        ValueError: a model without an LM or task head, naming the metrics that apply.
    """

    name = "loss"
    units = "nats of cross-entropy per scored token"
    ignores_padding = True  # masked / −100 positions do not count
    reads_labelled = True  # only the positions its labels label (a causal forward may stop after the last)

    def __init__(self, seed: int = 0):
        self.seed = int(seed)

    def check(self, adapter: ModelAdapter, corpus: Any = None) -> None:
        if zoo_task(adapter):
            if corpus is not None and not corpus.examples:
                raise NotApplicable(
                    f"objective 'loss' on {adapter.name} needs the zoo evaluation examples "
                    "(run without --text/--file/--conllu); metrics that apply to other "
                    "inputs: embedding-drift"
                )
            if not zoo_has_loss(adapter):
                raise NotApplicable(
                    f"{adapter.name} has no task loss (its weights are set by hand); "
                    "metrics that apply: embedding-drift"
                )
            return
        if not has_lm_head(adapter):
            ok = ", ".join(applicable_metrics(adapter, corpus))
            raise NotApplicable(
                f"objective 'loss' needs a model with a language-model or task head, but "
                f"{adapter.name} ({type(adapter.model).__name__}) is a headless "
                f"{adapter.arch}; metrics that apply: {ok}"
            )

    def make_batch(self, adapter: ModelAdapter, corpus: Any, indices: Sequence[int]) -> MetricBatch:
        if zoo_task(adapter):
            return _zoo_batch(adapter, corpus, indices)
        base = super().make_batch(adapter, corpus, indices)
        ids = base.inputs["input_ids"]
        mask = base.inputs["attention_mask"].bool()
        if adapter.arch == "encoder":
            mask_id = getattr(adapter.tokenizer, "mask_token_id", None)
            if mask_id is None:
                raise NotApplicable(f"{adapter.name}'s tokenizer has no mask token for the masked-LM loss")
            labels = torch.full_like(ids, -100)
            new_ids = ids.clone()
            for r, i in enumerate(indices):
                m = _mlm_mask(int(mask[r].sum()), base.special[r], self.seed * 1_000_003 + i)  # type: ignore[index]  # encoder batches carry their special mask
                pos = torch.nonzero(m).flatten().to(ids.device)
                labels[r, pos] = ids[r, pos]
                new_ids[r, pos] = mask_id
            inputs = dict(base.inputs, input_ids=new_ids)
            return MetricBatch(inputs=inputs, aux={"labels": labels}, special=base.special)
        if adapter.arch == "decoder":
            return replace(base, aux={"labels": _next_token_labels(ids, mask)})
        # encoder-decoder: the target tokens under teacher forcing
        targets = corpus.targets or corpus.texts
        encs = [adapter.encode(targets[i], target=True) for i in indices]
        labels = torch.full_like(base.inputs["decoder_input_ids"], -100)
        for r, e in enumerate(encs):
            labels[r, : len(e)] = e.input_ids.to(labels.device)
        return replace(base, aux={"labels": labels})

    def score(self, outputs: Any, batch: MetricBatch, reference: Any = None) -> torch.Tensor:
        return _token_ce(outputs.logits, batch.aux["labels"])

    # the gradient face: defined where the labels follow from the input ids alone
    def aux(self, adapter: ModelAdapter, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """The next-token labels ``[batch, seq]`` (``−100`` where none) of a causal LM.

        Raises:
            NotApplicable: a zoo task (its labels come from its examples), a masked LM (its
                loss corrupts the input: use the ``mlm`` objective), an encoder-decoder.
        """
        if zoo_task(adapter) or adapter.arch != "decoder":
            raise NotApplicable(
                f"the per-input loss of {adapter.name} needs labels beyond the input ids; attribute "
                "loss:<position>, mlm or logit instead"
            )
        return _next_token_labels(input_ids, attention_mask.bool())

    def scalar(self, out: Any, attention_mask: torch.Tensor, aux: Any) -> torch.Tensor:
        return _token_ce(out.logits, aux)


def _next_token_labels(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[rows, seq]``: the token at ``p + 1`` as the label of position ``p`` (−100 past the end)."""
    labels = torch.full_like(ids, -100)
    labels[:, :-1] = torch.where(mask[:, 1:], ids[:, 1:], torch.full_like(ids[:, 1:], -100))
    return labels


class AccuracyMetric(LossMetric):
    """Percent of the zoo task's scored positions predicted correctly, per example.

    Raises (from :meth:`check`): ValueError for a model that is not a zoo model.
    """

    name = "accuracy"
    units = "percentage points of accuracy"
    higher_is_better = True
    differentiable = False

    def check(self, adapter: ModelAdapter, corpus: Any = None) -> None:
        if not zoo_task(adapter):
            ok = ", ".join(applicable_metrics(adapter, corpus))
            raise NotApplicable(
                f"objective 'accuracy' needs a zoo:<task> model with ground truth; for "
                f"{adapter.name} the metrics that apply: {ok}"
            )
        super().check(adapter, corpus)

    def score(self, outputs: Any, batch: MetricBatch, reference: Any = None) -> torch.Tensor:
        return _token_acc(outputs.logits, batch.aux["labels"])

    def aux(self, adapter: ModelAdapter, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        raise NotApplicable("accuracy is not differentiable: it has no per-input scalar to attribute")


class DriftMetric(Objective):
    """``1 − cos`` between clean and intervened mean-pooled sentence embeddings.

    The embedding is the attention-mask-weighted mean of the base model's last hidden
    state ``[rows, dim]`` (the encoder's, for encoder-decoder models).
    """

    name = "embedding-drift"
    units = "1 − cos of the sentence embedding"
    stationary_at_clean = True
    ignores_padding = True  # mask-weighted pooling

    def forward(self, adapter: ModelAdapter, batch: MetricBatch) -> Any:
        kwargs = dict(batch.inputs)
        if adapter.arch == "decoder":
            kwargs["use_cache"] = False
        base = getattr(adapter.model, "base_model", adapter.model)
        return base(**kwargs)

    @staticmethod
    def embed(outputs: Any, batch: MetricBatch) -> torch.Tensor:
        if getattr(outputs, "encoder_last_hidden_state", None) is not None:
            h = outputs.encoder_last_hidden_state
        else:
            h = outputs.last_hidden_state
        m = batch.inputs["attention_mask"].to(h.dtype).unsqueeze(-1)
        return (h * m).sum(1) / m.sum(1).clamp(min=1)

    def reference(self, outputs: Any, batch: MetricBatch) -> Any:
        return self.embed(outputs, batch).detach()

    def readout(self, outputs: Any, batch: MetricBatch) -> torch.Tensor:
        return _f32(self.embed(outputs, batch))

    def harm(self, clean: Any, perturbed: Any) -> np.ndarray:
        a, b = np.asarray(clean, np.float64), np.asarray(perturbed, np.float64)
        den = np.clip(np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1), 1e-12, None)
        return 1.0 - (a * b).sum(-1) / den

    def score(self, outputs: Any, batch: MetricBatch, reference: Any = None) -> torch.Tensor:
        if reference is None:
            raise InputError("embedding-drift needs the clean run's embeddings as reference")
        e = self.embed(outputs, batch)
        # cos in float64: 1 − cos of a small drift loses its digits in float32 (a drift of
        # 0.004 carries a relative error of ~1e-5 there)
        return 1.0 - F.cosine_similarity(e.double(), reference.double(), dim=-1)

    # the gradient face: the clean embedding ``[batch, d]`` as aux, the drift from it as scalar
    def output(self, adapter: ModelAdapter, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Any:
        return self.forward(adapter, MetricBatch(inputs={"input_ids": input_ids, "attention_mask": attention_mask}))

    def aux(self, adapter: ModelAdapter, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return self.reference(self.output(adapter, input_ids, attention_mask), _mask_batch(attention_mask))

    def scalar(self, out: Any, attention_mask: torch.Tensor, aux: Any) -> torch.Tensor:
        return self.score(out, _mask_batch(attention_mask), aux)


class PredictionKL(Objective):
    """``KL(p_clean ‖ p_perturbed)`` of a sequence classifier's predicted class distribution
    (nats per example): the task head the model was built for, judged on its own output
    (the KL readout of Michel et al. 2019's head-importance work; no labels needed).

    Sweep face: readout ``[rows, classes]`` log-probabilities; harm ``[n]`` the KL from the
    clean to the perturbed distribution (≥ 0). Gradient face: the KL from the clean
    distribution (aux ``[batch, classes]``), 0 with zero gradient at the clean input.
    """

    name = "prediction-kl"
    units = "nats of KL divergence of the predicted class distribution"
    stationary_at_clean = True
    ignores_padding = True  # the classifier reads masked positions only

    def check(self, adapter: ModelAdapter, corpus: Any = None) -> None:
        name = type(adapter.model).__name__
        if not name.endswith("ForSequenceClassification"):
            from probe.errors import NotApplicable

            raise NotApplicable(f"prediction-kl needs a sequence classifier; {adapter.name} is a {name}")

    @staticmethod
    def log_probs(outputs: Any) -> torch.Tensor:
        return torch.log_softmax(outputs.logits.double(), dim=-1)

    def reference(self, outputs: Any, batch: Optional[MetricBatch]) -> Any:
        return self.log_probs(outputs).detach()

    def readout(self, outputs: Any, batch: MetricBatch) -> torch.Tensor:
        return self.log_probs(outputs)

    def harm(self, clean: Any, perturbed: Any) -> np.ndarray:
        a, b = np.asarray(clean, np.float64), np.asarray(perturbed, np.float64)
        return (np.exp(a) * (a - b)).sum(-1)

    def score(self, outputs: Any, batch: Optional[MetricBatch], reference: Any = None) -> torch.Tensor:
        if reference is None:
            raise InputError("prediction-kl needs the clean run's distribution as reference")
        lp = self.log_probs(outputs)
        return (reference.exp() * (reference - lp)).sum(-1)

    def output(self, adapter: ModelAdapter, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Any:
        return self.run_model(adapter, {"input_ids": input_ids, "attention_mask": attention_mask})

    def aux(self, adapter: ModelAdapter, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return self.reference(self.output(adapter, input_ids, attention_mask), None)

    def scalar(self, out: Any, attention_mask: torch.Tensor, aux: Any) -> torch.Tensor:
        return self.score(out, None, aux)


def _mask_batch(attention_mask: torch.Tensor, input_ids: Optional[torch.Tensor] = None) -> MetricBatch:
    """A :class:`MetricBatch` of ``[batch, seq]`` inputs (ids default to the mask's shape)."""
    ids = attention_mask.long() if input_ids is None else input_ids
    return MetricBatch(inputs={"input_ids": ids, "attention_mask": attention_mask})


class CallableMetric(Objective):
    """Wrap ``fn(outputs, batch) -> Tensor[rows]`` (``outputs``: the model's output on
    ``batch.inputs``) as an objective named ``name`` (both faces: the gradient face hands
    ``fn`` a batch of the input ids, as aux, and the attention mask)."""

    def __init__(self, fn: Callable, name: Optional[str] = None, higher_is_better: bool = False):
        if not callable(fn):
            raise InputError(f"a metric must be a name (loss, accuracy, embedding-drift …) or a callable, got {fn!r}")
        self.fn = fn
        self.name: str = name or str(getattr(fn, "__name__", "custom"))
        self.higher_is_better = higher_is_better

    def score(self, outputs: Any, batch: MetricBatch, reference: Any = None) -> torch.Tensor:
        s = self.fn(outputs, batch)
        if not isinstance(s, torch.Tensor) or s.shape != (batch.rows,):
            raise InputError(
                f"objective {self.name!r} must return a tensor [rows] = [{batch.rows}], got {getattr(s, 'shape', type(s))}"
            )
        return s

    def aux(self, adapter: ModelAdapter, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return input_ids

    def scalar(self, out: Any, attention_mask: torch.Tensor, aux: Any) -> torch.Tensor:
        return self.score(out, _mask_batch(attention_mask, aux))


def applicable_metrics(adapter: ModelAdapter, corpus: Any = None) -> list[str]:
    """Names of the built-in per-example metrics that apply to ``adapter`` (and ``corpus``)."""
    zoo = zoo_task(adapter)
    has_examples = corpus is None or bool(corpus.examples)
    task_loss = bool(zoo) and has_examples and zoo_has_loss(adapter)
    out = []
    if task_loss or (not zoo and has_lm_head(adapter)):
        out.append("loss")
    if task_loss:
        out.append("accuracy")
    if type(adapter.model).__name__.endswith("ForSequenceClassification"):
        out.insert(0, "prediction-kl")
    out.append("embedding-drift")
    return out


@dataclass(frozen=True)
class Chunk:
    """One batch of examples with its clean-run reference and clean scores ``[rows]``
    (``None`` where no clean forward ran: an objective without a reference, for importance)."""

    indices: tuple
    batch: MetricBatch
    reference: Optional[torch.Tensor]
    clean: Optional[torch.Tensor]


@torch.no_grad()
def prepare(
    adapter: ModelAdapter, corpus: Any, objective: Objective, batch_size: int = 16, progress: bool = False
) -> list:
    """Tokenize the corpus and run the clean model once: a list of :class:`Chunk`."""
    from tqdm.auto import tqdm

    chunks = []
    it = objective.batches(adapter, corpus, batch_size)
    for idx, batch in tqdm(it, total=-(-len(corpus) // batch_size), disable=not progress, desc="clean"):
        out = objective.forward(adapter, batch)
        ref = objective.reference(out, batch)
        chunks.append(Chunk(tuple(idx), batch, ref, objective.score(out, batch, ref).detach()))
    return chunks
