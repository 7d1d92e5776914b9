"""Per-example metrics of a live model, for ablation, importance, pruning and patching.

A :class:`Metric` turns a corpus into model inputs (:class:`MetricBatch`), runs the
model, and returns **one scalar per example** (a tensor ``[rows]``), so that one
forward can carry many ablations (a batch row per ablated head) and bootstrap
intervals can be taken over examples.

Built-in metrics (:func:`get_metric`):

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

Shapes: ``MetricBatch`` tensors are ``[rows, ...]``; ``Metric.score`` returns ``[rows]``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator, Optional, Sequence, Union

import numpy as np
import torch
import torch.nn.functional as F

from probe.errors import InputError, NotApplicable

log = logging.getLogger(__name__)

__all__ = [
    "ModelScalar",
    "token_nll",
    "MetricBatch",
    "Metric",
    "LossMetric",
    "AccuracyMetric",
    "DriftMetric",
    "CallableMetric",
    "METRICS",
    "get_metric",
    "applicable_metrics",
    "default_metric",
    "as_corpus",
    "Chunk",
    "prepare",
]

MASK_FRACTION = 0.15


@dataclass(frozen=True)
class MetricBatch:
    """Model inputs and what a metric needs to score them, all with batch rows first.

    Attributes:
        inputs: keyword arguments of the model forward (``input_ids``, ``attention_mask``,
            optionally decoder inputs), ``[rows, seq]``.
        aux: tensors the metric scores against (``labels`` …), ``[rows, ...]``.
        special: bool ``[rows, seq]``: special-token positions (for per-kind means).
    """

    inputs: dict
    aux: dict = field(default_factory=dict)
    special: Optional[torch.Tensor] = None

    @property
    def rows(self) -> int:
        return int(self.inputs["input_ids"].shape[0])

    @property
    def lengths(self) -> torch.Tensor:
        return self.inputs["attention_mask"].sum(-1)

    def repeat(self, k: int) -> "MetricBatch":
        """The batch stacked ``k`` times: row ``j·rows + i`` is a copy of row ``i``."""
        rep = lambda t: t.repeat(k, *([1] * (t.dim() - 1)))  # noqa: E731
        return MetricBatch(
            inputs={n: rep(t) for n, t in self.inputs.items()},
            aux={n: rep(t) for n, t in self.aux.items()},
            special=None if self.special is None else rep(self.special),
        )


def as_corpus(corpus):
    """A :class:`probe.inputs.Corpus` from a Corpus or a sequence of strings.

    Raises:
        ValueError: on an empty corpus.
    """
    from probe.inputs import Corpus

    if isinstance(corpus, str):
        corpus = [corpus]
    if not isinstance(corpus, Corpus):
        corpus = Corpus(texts=tuple(corpus), source="texts")
    if not len(corpus):
        raise InputError("empty corpus: give at least one example")
    return corpus


def zoo_task(adapter) -> Optional[str]:
    """The zoo task of a ``zoo:`` model (None for any other model)."""
    task = (adapter.card or {}).get("task")
    return task if adapter.name.startswith("zoo:") and task else None


def zoo_has_loss(adapter) -> bool:
    """Whether the zoo task defines a loss (its module can ``encode`` labelled inputs;
    zoo:constructed, whose weights are set by hand, has no task head to score)."""
    from probe.models import zoo

    task = zoo_task(adapter)
    return bool(task) and hasattr(zoo.task_module(task), "encode")  # type: ignore[arg-type]  # a task name when bool(task)


def has_lm_head(adapter) -> bool:
    """Whether the model has an output embedding (a language-model head)."""
    getter = getattr(adapter.model, "get_output_embeddings", None)
    return getter is not None and getter() is not None


class ModelScalar:
    """The one base of :class:`Metric` (ablation, importance, pruning, patching) and
    :class:`probe.analyses.common.targets.Target` (attributions, counterfactuals): one
    scalar per example read from one model forward.

    Subclasses set ``name`` and ``differentiable``; :meth:`run_model` is the forward both
    hierarchies use (no KV cache for decoders: each forward is a whole sequence).
    """

    name = "scalar"
    differentiable = True

    def run_model(self, adapter, inputs: dict):
        """``adapter.model(**inputs)`` (grad mode is the caller's)."""
        kwargs = dict(inputs)
        if adapter.arch == "decoder":
            kwargs["use_cache"] = False
        return adapter.model(**kwargs)

    def describe(self) -> str:
        return self.name


def token_nll(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The one language-model loss: ``−log softmax(logits)[label]`` per position.

    ``logits`` ``[..., vocab]`` and ``labels`` ``[...]`` (long; ``−100`` positions give an
    arbitrary value the caller masks out) -> ``[...]`` in float32 (half precision is
    upcast). Used by :class:`LossMetric` (masked-LM, next-token, teacher-forced and zoo
    task losses) and by :class:`probe.analyses.common.targets.LMLoss`.
    """
    logits = _f32(logits)
    flat = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1).clamp(min=0), reduction="none")
    return flat.reshape(labels.shape)


class Metric(ModelScalar):
    """A scalar per example from a live model.

    Subclasses set ``name``, ``higher_is_better``, ``differentiable``,
    ``stationary_at_clean`` (the metric is at an extremum on the clean model, so its
    gradient there is zero) and ``ignores_padding`` (scores do not change when trailing
    padding positions are cut off, so sweeps may shorten rows) and implement :meth:`score`; they may override
    :meth:`check`, :meth:`make_batch`, :meth:`forward` and :meth:`reference`.
    """

    name = "metric"
    units = "metric change"
    higher_is_better = False
    stationary_at_clean = False
    ignores_padding = False
    corpus_level = False  # harms need every example's readout at once (similarity structure)

    def check(self, adapter, corpus=None) -> None:
        """Raise ``ValueError`` when the metric does not apply to this model/corpus."""

    def make_batch(self, adapter, corpus, indices: Sequence[int]) -> MetricBatch:
        """Tokenize ``corpus`` examples ``indices`` into one padded batch."""
        spans = corpus.word_spans
        encs = [adapter.encode(corpus.texts[i], spans[i] if spans else None) for i in indices]
        inputs = adapter.batch(encs)
        if adapter.arch == "encoder-decoder":
            targets = corpus.targets or corpus.texts
            inputs.update(adapter.decoder_inputs([adapter.encode(targets[i], target=True) for i in indices]))
        return MetricBatch(inputs=inputs, special=_special(adapter, inputs["input_ids"], inputs["attention_mask"]))

    def forward(self, adapter, batch: MetricBatch):
        """Run the model on ``batch`` (grad mode is the caller's)."""
        return self.run_model(adapter, batch.inputs)

    def reference(self, outputs, batch: MetricBatch) -> Optional[torch.Tensor]:
        """What the clean run must hand to :meth:`score` of intervened runs (rows first)."""
        return None

    def score(self, outputs, batch: MetricBatch, reference: Optional[torch.Tensor] = None) -> torch.Tensor:
        raise NotImplementedError

    # ---- the objective protocol (:class:`probe.analyses.common.objective.Objective`) ----
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
        n = len(corpus)
        order = list(range(n))
        if by_length:
            texts = corpus.texts
            order.sort(key=lambda i: -len(texts[i]))
        for start in range(0, n, batch_size):
            idx = order[start : start + batch_size]
            yield idx, self.make_batch(adapter, corpus, idx)

    def __repr__(self) -> str:
        return f"<metric {self.name}>"


def _special(adapter, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    from probe.inputs import special_token_ids  # [UNK] is input text, not a special token

    special_ids = torch.tensor(special_token_ids(adapter.tokenizer), dtype=ids.dtype, device=ids.device)
    return torch.isin(ids, special_ids) & mask.bool()


def _to(adapter, d: dict) -> dict:
    return {k: v.to(adapter.device) for k, v in d.items()}


def _f32(x: torch.Tensor) -> torch.Tensor:
    """Half-precision tensors up to float32; float32/float64 kept."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


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


class LossMetric(Metric):
    """The model's own task loss per example (see the module docstring).

    Raises (from :meth:`check`):
        ValueError: a model without an LM or task head, naming the metrics that apply.
    """

    name = "loss"
    units = "nats of cross-entropy per scored token"
    ignores_padding = True  # masked / −100 positions do not count

    def __init__(self, seed: int = 0):
        self.seed = int(seed)

    def check(self, adapter, corpus=None) -> None:
        if zoo_task(adapter):
            if corpus is not None and not corpus.examples:
                raise NotApplicable(
                    f"metric 'loss' on {adapter.name} needs the zoo evaluation examples "
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
                f"metric 'loss' needs a model with a language-model or task head, but "
                f"{adapter.name} ({type(adapter.model).__name__}) is a headless "
                f"{adapter.arch}; metrics that apply: {ok}"
            )

    def make_batch(self, adapter, corpus, indices) -> MetricBatch:
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
            labels = torch.full_like(ids, -100)
            nxt = mask[:, 1:]
            labels[:, :-1] = torch.where(nxt, ids[:, 1:], torch.full_like(ids[:, 1:], -100))
            return replace(base, aux={"labels": labels})
        # encoder-decoder: the target tokens under teacher forcing
        targets = corpus.targets or corpus.texts
        encs = [adapter.encode(targets[i], target=True) for i in indices]
        labels = torch.full_like(base.inputs["decoder_input_ids"], -100)
        for r, e in enumerate(encs):
            labels[r, : len(e)] = e.input_ids.to(labels.device)
        return replace(base, aux={"labels": labels})

    def score(self, outputs, batch, reference=None) -> torch.Tensor:
        return _token_ce(outputs.logits, batch.aux["labels"])


class AccuracyMetric(LossMetric):
    """Percent of the zoo task's scored positions predicted correctly, per example.

    Raises (from :meth:`check`): ValueError for a model that is not a zoo model.
    """

    name = "accuracy"
    units = "percentage points of accuracy"
    higher_is_better = True
    differentiable = False

    def check(self, adapter, corpus=None) -> None:
        if not zoo_task(adapter):
            ok = ", ".join(applicable_metrics(adapter, corpus))
            raise NotApplicable(
                f"metric 'accuracy' needs a zoo:<task> model with ground truth; for "
                f"{adapter.name} the metrics that apply: {ok}"
            )
        super().check(adapter, corpus)

    def score(self, outputs, batch, reference=None) -> torch.Tensor:
        return _token_acc(outputs.logits, batch.aux["labels"])


class DriftMetric(Metric):
    """``1 − cos`` between clean and intervened mean-pooled sentence embeddings.

    The embedding is the attention-mask-weighted mean of the base model's last hidden
    state ``[rows, dim]`` (the encoder's, for encoder-decoder models).
    """

    name = "embedding-drift"
    units = "1 − cos of the sentence embedding"
    stationary_at_clean = True
    ignores_padding = True  # mask-weighted pooling

    def forward(self, adapter, batch):
        kwargs = dict(batch.inputs)
        if adapter.arch == "decoder":
            kwargs["use_cache"] = False
        base = getattr(adapter.model, "base_model", adapter.model)
        return base(**kwargs)

    @staticmethod
    def embed(outputs, batch) -> torch.Tensor:
        if getattr(outputs, "encoder_last_hidden_state", None) is not None:
            h = outputs.encoder_last_hidden_state
        else:
            h = outputs.last_hidden_state
        m = batch.inputs["attention_mask"].to(h.dtype).unsqueeze(-1)
        return (h * m).sum(1) / m.sum(1).clamp(min=1)

    def reference(self, outputs, batch):
        return self.embed(outputs, batch).detach()

    def readout(self, outputs, batch) -> torch.Tensor:
        return _f32(self.embed(outputs, batch))

    def harm(self, clean, perturbed) -> np.ndarray:
        a, b = np.asarray(clean, np.float64), np.asarray(perturbed, np.float64)
        den = np.clip(np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1), 1e-12, None)
        return 1.0 - (a * b).sum(-1) / den

    def score(self, outputs, batch, reference=None) -> torch.Tensor:
        if reference is None:
            raise InputError("embedding-drift needs the clean run's embeddings as reference")
        e = self.embed(outputs, batch)
        # cos in float64: 1 − cos of a small drift loses its digits in float32 (a drift of
        # 0.004 carries a relative error of ~1e-5 there)
        return 1.0 - F.cosine_similarity(e.double(), reference.double(), dim=-1)


class CallableMetric(Metric):
    """Wrap ``fn(outputs, batch) -> Tensor[rows]`` (``outputs``: the model's output on
    ``batch.inputs``) as a metric named ``name``."""

    def __init__(self, fn: Callable, name: Optional[str] = None, higher_is_better: bool = False):
        if not callable(fn):
            raise InputError(f"a metric must be a name ({', '.join(METRICS)}) or a callable, got {fn!r}")
        self.fn = fn
        self.name: str = name or str(getattr(fn, "__name__", "custom"))
        self.higher_is_better = higher_is_better

    def score(self, outputs, batch, reference=None) -> torch.Tensor:
        s = self.fn(outputs, batch)
        if not isinstance(s, torch.Tensor) or s.shape != (batch.rows,):
            raise InputError(
                f"metric {self.name!r} must return a tensor [rows] = [{batch.rows}], got {getattr(s, 'shape', type(s))}"
            )
        return s


METRICS: dict[str, Callable[[], Metric]] = {
    "loss": LossMetric,
    "accuracy": AccuracyMetric,
    "embedding-drift": DriftMetric,
}


def applicable_metrics(adapter, corpus=None) -> list[str]:
    """Names of the built-in metrics that apply to ``adapter`` (and ``corpus``)."""
    zoo = zoo_task(adapter)
    has_examples = corpus is None or bool(corpus.examples)
    task_loss = bool(zoo) and has_examples and zoo_has_loss(adapter)
    out = []
    if task_loss or (not zoo and has_lm_head(adapter)):
        out.append("loss")
    if task_loss:
        out.append("accuracy")
    out.append("embedding-drift")
    return out


def default_metric(adapter, corpus=None) -> tuple:
    """``(name, why)``: the metric a command uses when none is given.

    ``loss`` where it applies (a zoo model on its evaluation set: the task's own loss; a
    model with a language-model head: its LM loss), else ``embedding-drift`` (sentence
    encoders such as the bundled minilm, which have no head to compute a loss with)."""
    metrics = applicable_metrics(adapter, corpus)
    if "loss" in metrics:
        if zoo_task(adapter):
            why = "the zoo task's loss"
        elif adapter.arch == "encoder":
            why = (
                f"the masked-LM loss of the sentence's own tokens ({MASK_FRACTION:.0%} masked) from "
                f"{type(adapter.model).__name__}'s head"
            )
        elif adapter.arch == "decoder":
            why = f"the next-token loss from {type(adapter.model).__name__}'s head"
        else:
            why = "the teacher-forced loss of the targets"
        return "loss", why
    return "embedding-drift", "the model has no language-model or task head (a sentence encoder)"


def get_metric(metric: Union[str, Metric, Callable], adapter=None, corpus=None) -> Metric:
    """A :class:`Metric` from a name, a Metric or a callable; checked against ``adapter``.

    Raises:
        ValueError: unknown name (listing the known ones), or a metric that does not
            apply to the model (naming those that do).
    """
    if isinstance(metric, Metric):
        m = metric
    elif isinstance(metric, str):
        if metric not in METRICS:
            raise InputError(
                f"unknown metric {metric!r}; known: {', '.join(METRICS)} (or a callable in the Python API)"
            )
        m = METRICS[metric]()
    else:
        m = CallableMetric(metric)
    if adapter is not None:
        m.check(adapter, corpus)
    return m


@dataclass(frozen=True)
class Chunk:
    """One batch of examples with its clean-run reference and clean scores ``[rows]``."""

    indices: tuple
    batch: MetricBatch
    reference: Optional[torch.Tensor]
    clean: torch.Tensor


@torch.no_grad()
def prepare(adapter, corpus, metric: Metric, batch_size: int = 16, progress: bool = False) -> list:
    """Tokenize the corpus and run the clean model once: a list of :class:`Chunk`."""
    from tqdm.auto import tqdm

    chunks = []
    it = metric.batches(adapter, corpus, batch_size)
    for idx, batch in tqdm(it, total=-(-len(corpus) // batch_size), disable=not progress, desc="clean"):
        out = metric.forward(adapter, batch)
        ref = metric.reference(out, batch)
        chunks.append(Chunk(tuple(idx), batch, ref, metric.score(out, batch, ref).detach()))
    return chunks
