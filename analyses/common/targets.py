"""Targets: the objectives defined on one input, which attributions and counterfactuals explain.

A target is an :class:`.objective.Objective` (an :class:`.objective.InputObjective`) whose
gradient face turns one model forward into one number per example (``[batch]``) and, for
counterfactual comparisons, into a probability distribution per example
(``[batch, k]``); its sweep face (ablation, patching) is derived from that. Kinds:

* :class:`ClassLogit` — a class logit of a sequence classifier (zoo classifiers); by
  default the class the model predicts on the clean input, fixed per example.
* :class:`LMLoss` — the language-model loss ``−log p(token)`` at a position (causal
  LM: the token at ``p`` predicted from position ``p−1``; masked LM: the token at ``p``).
* :class:`ProbeLogit` — the logit of a linear probe on a sentence model's pooled
  embedding (mean pooling for the bundled model), a differentiable function of the model
  (see :mod:`probe.analyses.structure.ud_probe` for fitting one on UD annotation).

Per-example choices (the predicted class, a position counted from the end) are resolved
once on the clean batch by :meth:`.objective.InputObjective.aux` into a long tensor ``[batch, k]``. It is
passed to the forward as an *additional forward argument*, so captum expands it together
with the inputs when it batches integration steps or ablations.

:func:`.objective.scalar_function` wraps a target into ``f(input_ids, attention_mask, aux)
-> [batch]`` for captum, refusing outputs that are not one scalar per example.
:func:`parse_target` is :func:`.objective.resolve_objective` with ``use="explain"``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, TYPE_CHECKING

if TYPE_CHECKING:
    from probe.models import ModelAdapter

import torch

from probe.errors import InputError, NotApplicable

from .batch import check_scalar, token_nll
from .objective_base import InputObjective, scalar_function

__all__ = [
    "ClassLogit",
    "LMLoss",
    "ProbeLogit",
    "OwnTokensLoss",
    "CallableTarget",
    "scalar_function",
    "check_scalar",
    "hidden_states",
]


@dataclass(frozen=True)
class KeptLogits:
    """A model output cut to the positions read: ``logits`` ``[batch, k, vocab]`` at the
    sorted sequence ``positions`` ``[k]`` (:meth:`LMLoss.gradient_output`)."""

    logits: torch.Tensor
    positions: torch.Tensor


def keeps_logits(model: Any) -> bool:
    """Whether ``model``'s forward takes ``logits_to_keep`` (Hugging Face causal LMs since 4.50)."""
    import inspect

    return "logits_to_keep" in inspect.signature(model.forward).parameters


def _lengths(attention_mask: torch.Tensor) -> torch.Tensor:
    return attention_mask.long().sum(-1)


def _logits(out) -> torch.Tensor:
    logits = getattr(out, "logits", None)
    if logits is None:
        raise NotApplicable(
            "this target needs a model with a task head that returns logits (a zoo classifier "
            "or a language model); for the bundled sentence model use a probe target"
        )
    return logits


class ClassLogit(InputObjective):
    """The logit of a class of a sequence classifier, read at [CLS] (position 0).

    Args:
        label: the class index; ``None``: each example's predicted class on the clean
            input (fixed while attributing).

    Raises (at use):
        NotApplicable: a model without ``[batch, n_classes]`` logits.
        ValueError: a class out of range.
    """

    units = "logit"
    higher_is_better = True

    def __init__(self, label: Optional[int] = None):
        self.label = label
        self.name = "logit:predicted" if label is None else f"logit:{label}"

    def _check(self, logits):
        if logits.dim() != 2:  # the target does not apply to this model (a report section: skipped)
            raise NotApplicable(
                f"class-logit target needs logits [batch, n_classes], the model gives shape "
                f"{tuple(logits.shape)} (per position); use an LM-loss target (loss:<position>)"
            )
        if self.label is not None and not 0 <= self.label < logits.shape[-1]:
            raise InputError(f"class {self.label} out of range: the model has classes 0..{logits.shape[-1] - 1}")

    def aux(self, adapter: ModelAdapter, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Any:
        with torch.no_grad():
            logits = _logits(self.output(adapter, input_ids, attention_mask))
        self._check(logits)
        if self.label is None:
            return logits.argmax(-1, keepdim=True)
        return torch.full((input_ids.shape[0], 1), int(self.label), dtype=torch.long, device=input_ids.device)

    def scalar(self, out: Any, attention_mask: torch.Tensor, aux: Any) -> torch.Tensor:
        logits = _logits(out)
        self._check(logits)
        return logits.gather(1, aux[:, :1]).squeeze(1)

    def distribution(self, out: Any, attention_mask: torch.Tensor, aux: Any) -> torch.Tensor:
        return torch.softmax(_logits(out).float(), -1)


class LMLoss(InputObjective):
    """``−log p(token at position)`` of a language model (Jain & Wallace's per-position
    output, for decoders).

    Causal LM: the token at ``position`` predicted from the logits at ``position − 1``
    (valid positions ``1..n−1``). Masked LM: the logits at ``position`` (``0..n−1``)
    scoring ``token_id`` (default: the input token there).

    Args:
        position: token position; negative counts from the end of each example.
        token_id: the token whose loss is taken (masked LM only; default the input token).
    """

    units = "nats of the token's cross-entropy"

    def __init__(self, position: int, token_id: Optional[int] = None):
        self.position = int(position)
        self.token_id = token_id
        self.name = f"loss:{position}"

    def _resolve(self, n: int, causal: bool) -> int:
        lo = 1 if causal else 0
        p = self.position + n if self.position < 0 else self.position
        if not lo <= p < n:
            if n > lo:
                why = f"valid positions are {lo}..{n - 1} (or {lo - n}..-1 from the end)" + (
                    " — a causal LM predicts position p from p−1, so position 0 has no loss" if causal else ""
                )
            elif causal:
                why = "it has no position with a loss (one token: nothing before it to predict it from)"
            else:
                why = "it has no token"
            raise InputError(
                f"target position {self.position} is out of range for an example of {n} token{'s' * (n != 1)}: {why}"
            )
        return p

    def aux(self, adapter: ModelAdapter, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Any:
        causal = adapter.arch == "decoder"
        rows = []
        for i, n in enumerate(_lengths(attention_mask).tolist()):
            p = self._resolve(n, causal)
            tok = int(input_ids[i, p]) if self.token_id is None else int(self.token_id)
            rows.append((p - 1 if causal else p, tok))
        return torch.tensor(rows, dtype=torch.long, device=input_ids.device)

    def gradient_output(
        self, adapter: ModelAdapter, input_ids: torch.Tensor, attention_mask: torch.Tensor, aux: Any
    ) -> Any:
        """A causal LM's output with the logits of the predicting positions ``aux[:, 0]`` only
        (:class:`KeptLogits`): the head projects those few positions onto the vocabulary (49,152
        wide on SmolLM2), not every one (Hugging Face's ``logits_to_keep``); the same values.
        :meth:`output` for a model whose forward takes no ``logits_to_keep``."""
        if adapter.arch != "decoder" or not keeps_logits(adapter.model):
            return self.output(adapter, input_ids, attention_mask)
        kept = torch.unique(aux[:, 0])  # sorted
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "logits_to_keep": kept}
        return KeptLogits(_logits(self.run_model(adapter, inputs)), kept)

    def _rows(self, out, aux):
        """The logits ``[batch, vocab]`` at each example's predicting position."""
        logits = _logits(out)
        if logits.dim() != 3:
            raise InputError(
                f"LM-loss target needs per-position logits [batch, seq, vocab]; the model gives "
                f"{tuple(logits.shape)}; use a class-logit target (logit:<class>)"
            )
        col = (
            aux[:, 0] if not isinstance(out, KeptLogits) else torch.searchsorted(out.positions, aux[:, 0].contiguous())
        )
        return logits[torch.arange(logits.shape[0], device=logits.device), col]

    def _logprobs(self, out, aux):
        return torch.log_softmax(self._rows(out, aux).float(), -1)

    def scalar(self, out: Any, attention_mask: torch.Tensor, aux: Any) -> torch.Tensor:
        return token_nll(self._rows(out, aux), aux[:, 1])  # the metrics' LM loss, at one position

    def distribution(self, out: Any, attention_mask: torch.Tensor, aux: Any) -> torch.Tensor:
        return self._logprobs(out, aux).exp()

    def reads(self, n_tokens: int, adapter: Optional[ModelAdapter] = None) -> tuple:
        causal = adapter is not None and adapter.arch == "decoder"
        p = self._resolve(n_tokens, causal)
        return (p - 1 if causal else p,)


class ProbeLogit(InputObjective):
    """The logit ``w·pool(h) + b`` of a linear probe on a sentence model's embedding.

    ``pool`` is mean pooling over the non-padding tokens of the last hidden state,
    L2-normalised when ``normalize`` (the bundled model's sentence embedding, as its card
    says). The probe is a ``torch.nn.Linear(d, 1)``, usually built from a fitted
    scikit-learn ``LogisticRegression`` (see :func:`probe.analyses.structure.ud_probe.fit_probe`).

    Args:
        linear: ``torch.nn.Linear`` with one output.
        normalize: L2-normalise the pooled embedding before the probe.
        label_names: names of class 0 and class 1 (for reports).
    """

    units = "probe logit"
    higher_is_better = True

    def __init__(
        self,
        linear: torch.nn.Linear,
        normalize: bool = True,
        label_names: Sequence[str] = ("0", "1"),
        name: str = "probe",
    ):
        if not isinstance(linear, torch.nn.Linear) or linear.out_features != 1:
            raise InputError("a probe target needs a torch.nn.Linear with exactly one output")
        self.linear = linear
        self.normalize = normalize
        self.label_names = tuple(label_names)
        self.name = name

    def embed(self, out: Any, attention_mask: torch.Tensor) -> torch.Tensor:
        h = hidden_states(out)
        m = attention_mask.to(h.dtype).unsqueeze(-1)
        pooled = (h * m).sum(1) / m.sum(1).clamp(min=1)
        if self.normalize:
            pooled = torch.nn.functional.normalize(pooled, dim=-1)
        return pooled

    def output(self, adapter: ModelAdapter, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Any:
        """The encoder underneath a task head (``base_model``): its last hidden state."""
        if adapter.arch != "encoder":
            raise NotApplicable("a probe target pools an encoder's hidden states; this model is a " + adapter.arch)
        base = getattr(adapter.model, "base_model", adapter.model)
        return base(input_ids=input_ids, attention_mask=attention_mask)

    def scalar(self, out: Any, attention_mask: torch.Tensor, aux: Any) -> torch.Tensor:
        pooled = self.embed(out, attention_mask)
        lin = self.linear.to(pooled.device)
        return lin(pooled.to(lin.weight.dtype))[:, 0]

    def distribution(self, out: Any, attention_mask: torch.Tensor, aux: Any) -> torch.Tensor:
        p = torch.sigmoid(self.scalar(out, attention_mask, aux).float())
        return torch.stack([1 - p, p], -1)

    def reads(self, n_tokens: int, adapter: Optional[ModelAdapter] = None) -> tuple:
        return tuple(range(n_tokens))  # mean pooling reads every position


def hidden_states(out: Any) -> torch.Tensor:
    """The last hidden state ``[batch, seq, d]`` of a model output.

    Raises:
        NotApplicable: an output that holds none (a task head's logits only), naming its type.
    """
    h = getattr(out, "last_hidden_state", None)
    if h is None and getattr(out, "hidden_states", None) is not None:
        h = out.hidden_states[-1]
    if h is None and isinstance(out, (tuple, list)) and out and torch.is_tensor(out[0]):
        h = out[0]
    if h is None and torch.is_tensor(out):
        h = out
    if not torch.is_tensor(h) or h.dim() != 3:
        got = type(out).__name__ if not torch.is_tensor(h) else f"shape {tuple(h.shape)}"
        raise NotApplicable(
            f"this target needs hidden states [batch, seq, d], but the model's output is {got}; "
            "run it on the encoder underneath the head (model.base_model)"
        )
    return h


class OwnTokensLoss(InputObjective):
    """Masked-LM loss of a sentence's own tokens: the mean over its word tokens of
    ``−log p(token_i)`` read from the MLM head's logits at position ``i`` (the input
    unmasked, so one forward gives every position; Devlin et al. 2019's MLM objective
    without the corruption). Spec ``mlm``; an MLM checkpoint's default target.

    ``aux`` is ``[batch, seq]``: the token ids to score, ``−100`` at special and padding
    positions.
    """

    name = "mlm"
    units = "nats of cross-entropy per word token"

    def aux(self, adapter: ModelAdapter, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Any:
        special = torch.tensor(
            sorted(set(getattr(adapter.tokenizer, "all_special_ids", []) or [])),
            dtype=input_ids.dtype,
            device=input_ids.device,
        )
        keep = attention_mask.bool() & ~torch.isin(input_ids, special)
        return torch.where(keep, input_ids, torch.full_like(input_ids, -100))

    def _logits(self, out) -> torch.Tensor:
        logits = _logits(out)
        if logits.dim() != 3:
            raise InputError(
                f"the mlm target needs per-position logits [batch, seq, vocab] (a masked-LM head); "
                f"the model gives {tuple(logits.shape)}"
            )
        return logits

    def scalar(self, out: Any, attention_mask: torch.Tensor, aux: Any) -> torch.Tensor:
        keep = aux != -100
        nll = token_nll(self._logits(out), aux)
        return (nll * keep).sum(-1) / keep.sum(-1).clamp(min=1)

    def distribution(self, out: Any, attention_mask: torch.Tensor, aux: Any) -> torch.Tensor:
        """The vocabulary distribution averaged over the scored positions ``[batch, vocab]``."""
        keep = (aux != -100).unsqueeze(-1).float()
        p = torch.softmax(self._logits(out).float(), -1)
        return (p * keep).sum(1) / keep.sum(1).clamp(min=1)

    def reads(self, n_tokens: int, adapter: Optional[ModelAdapter] = None) -> tuple:
        return tuple(range(n_tokens))


class CallableTarget(InputObjective):
    """A user function ``fn(model_output, attention_mask) -> [batch]``; its distribution is
    a Bernoulli of ``sigmoid(scalar)``. Shapes are checked by :func:`scalar_function`."""

    def __init__(self, fn: Callable, positions: Optional[Sequence[int]] = None, name: str = "custom"):
        self.fn = fn
        self.positions = positions
        self.name = name

    def scalar(self, out: Any, attention_mask: torch.Tensor, aux: Any) -> torch.Tensor:
        return self.fn(out, attention_mask)

    def distribution(self, out: Any, attention_mask: torch.Tensor, aux: Any) -> torch.Tensor:
        p = torch.sigmoid(
            check_scalar(self.scalar(out, attention_mask, aux), attention_mask.shape[0], self.name).float()
        )
        return torch.stack([1 - p, p], -1)

    def reads(self, n_tokens: int, adapter: Optional[ModelAdapter] = None) -> tuple:
        return tuple(self.positions) if self.positions is not None else (0,)


class PairSimilarity(InputObjective):
    """The cosine similarity of a sentence to its paired sentence, under the model's pooling.

    ``cos(pool(model(x)), e_pair)`` with ``e_pair`` the clean embedding of the pair's other
    side, held fixed, so attributions of ``x``'s tokens explain the similarity (a Siamese
    encoder explained one side at a time; cf. Moeller et al. 2023). ``aux`` holds each
    example's row in ``partners``, found from its token ids.

    Args:
        pooling: a :class:`probe.analyses.common.pooling.Pooling`.
        partners: ``[n, d]`` clean embeddings of the other sides.
        keys: token ids of each explained sentence (tuple) -> its row in ``partners``.
        pair_words: per row, the other side's text (for reports).
    """

    def __init__(
        self, pooling: Any, partners: torch.Tensor, keys: dict, pair_words: Sequence[str] = (), name: str = "similarity"
    ):
        self.pooling = pooling
        self.partners = partners
        self.keys = dict(keys)
        self.pair_words = tuple(pair_words)
        self.name = name

    units = "cosine similarity to the partner"
    higher_is_better = True

    def output(self, adapter: ModelAdapter, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Any:
        if adapter.arch != "encoder":
            raise NotApplicable("a similarity target pools an encoder's states; this model is a " + adapter.arch)
        base = getattr(adapter.model, "base_model", adapter.model)
        return base(input_ids=input_ids, attention_mask=attention_mask)

    def aux(self, adapter: ModelAdapter, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Any:
        rows = []
        for ids, n in zip(input_ids.tolist(), _lengths(attention_mask).tolist()):
            key = tuple(ids[:n])
            if key not in self.keys:
                raise InputError("a similarity target explains only the sentences it was built for")
            rows.append(self.keys[key])
        return torch.tensor(rows, dtype=torch.long, device=input_ids.device)[:, None]

    def scalar(self, out: Any, attention_mask: torch.Tensor, aux: Any) -> torch.Tensor:
        e = self.pooling.pool(out.last_hidden_state, attention_mask)
        other = self.partners.to(e.device, e.dtype)[aux[:, 0]]
        return torch.nn.functional.cosine_similarity(e, other, dim=-1)

    def distribution(self, out: Any, attention_mask: torch.Tensor, aux: Any) -> torch.Tensor:
        s = (self.scalar(out, attention_mask, aux).float() + 1) / 2
        return torch.stack([s, 1 - s], -1).clamp(0, 1)

    def reads(self, n_tokens: int, adapter: Optional[ModelAdapter] = None) -> tuple:
        return self.pooling.reads(n_tokens)
