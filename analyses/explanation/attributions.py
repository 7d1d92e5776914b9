"""Token attributions of a target with captum: IG, saliency, input × gradient, blank-out.

For each example and method, one signed score per token of the input, from captum
(Kokhlikyan et al., 2020):

* ``ig`` — integrated gradients (Sundararajan et al., 2017) on the token-embedding
  layer (``LayerIntegratedGradients``), summed over the embedding dimension. The
  baseline replaces every word token by ``[PAD]`` (or ``[MASK]``) and keeps special
  tokens. Completeness: the scores sum to ``f(x) − f(baseline)``; captum's convergence
  delta (their difference) is kept per example.
* ``saliency`` — the L2 norm of the gradient of the target w.r.t. each token embedding
  (Simonyan et al., 2014; the per-token gradient magnitude Jain & Wallace 2019 compare
  attention with).
* ``input_x_gradient`` — ``Σ_d e_d · ∂f/∂e_d`` per token (Shrikumar et al., 2017).
* ``blank_out`` — occlusion of one token at a time (captum ``FeatureAblation``, one
  feature per token): ``f(x) − f(x with token t blanked to the baseline token)``; the
  leave-one-out importance of Jain & Wallace (2019) and Abnar & Zuidema's (2020)
  blank-out.

Examples are sorted by length and batched, so padding stays short; every model forward
carries at most ``internal_batch_size`` rows (IG integration steps and ablations are
chunked by captum), which bounds memory.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional, Sequence

import numpy as np
import torch

from probe.analyses.common.objective import Objective, scalar_function
from probe.analyses.common.word_scores import n_words_of, to_words
from probe.errors import InputError
from probe.inputs import budget

if TYPE_CHECKING:
    import pandas as pd

    from probe.models.adapter import ModelAdapter

log = logging.getLogger(__name__)

__all__ = ["METHODS", "PADDING", "ExampleAttribution", "Attributions", "attribute", "baseline_ids", "unattributed"]

METHODS = ("ig", "saliency", "input_x_gradient", "blank_out")
#: the most padding a group of examples attributed together may carry, as a share of its
#: tokens (:data:`probe.inputs.budget.PADDING`; a module name, so a bench can lift the bound)
PADDING = budget.PADDING


@dataclass(frozen=True)
class ExampleAttribution:
    """Attributions of one example.

    Attributes:
        index: position of the example in the input list.
        tokens, word_ids, special_mask, words: the encoding (``n`` tokens).
        scores: ``{method: float64 array [n]}`` signed token scores.
        value: the target on the input, ``f(x)``.
        baseline_value: the target on the IG baseline, ``f(x')`` (NaN without IG).
        ig_delta: captum's convergence delta ``Σ IG − (f(x) − f(x'))`` (NaN without IG).
    """

    index: int
    tokens: tuple
    word_ids: tuple
    special_mask: tuple
    words: tuple
    scores: dict
    value: float
    baseline_value: float = float("nan")
    ig_delta: float = float("nan")

    @property
    def n_words(self) -> int:
        return n_words_of(self.word_ids, self.words)

    def word_scores(self, method: str) -> np.ndarray:
        """Signed word scores ``[n_words]``: token scores summed over each word."""
        if method not in self.scores:
            raise InputError(f"no {method!r} attributions; computed: {', '.join(self.scores)}")
        return to_words(self.scores[method], self.word_ids, self.n_words)


@dataclass(frozen=True)
class Attributions:
    """Attributions of a corpus: one :class:`ExampleAttribution` per example."""

    examples: tuple
    methods: tuple
    target: str
    settings: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.examples)

    def to_frame(self) -> pd.DataFrame:
        """Tidy table: ``example, method, position, token, word_id, special, score``."""
        import pandas as pd

        rows = []
        for ex in self.examples:
            for m, s in ex.scores.items():
                for t, (tok, w, sp) in enumerate(zip(ex.tokens, ex.word_ids, ex.special_mask)):
                    rows.append((ex.index, m, t, tok, -1 if w is None else w, bool(sp), float(s[t])))
        return pd.DataFrame(rows, columns=["example", "method", "position", "token", "word_id", "special", "score"])

    def completeness(self) -> pd.DataFrame:
        """Per example: ``value, baseline_value, ig_sum, ig_delta, relative_error``
        (``|delta| / |f(x) − f(x')|``), the IG completeness check, and ``steps``, the
        integration steps its IG took (``settings["ig_steps_per_example"]`` once
        :func:`.completeness.gate_ig` raised them, else ``settings["n_steps"]``)."""
        import pandas as pd

        steps = self.settings.get("ig_steps_per_example") or [self.settings.get("n_steps")] * len(self.examples)
        rows = []
        for ex, n_steps in zip(self.examples, steps):
            if "ig" not in ex.scores:
                raise InputError("completeness needs the 'ig' attributions")
            gap = ex.value - ex.baseline_value
            rows.append(
                {
                    "example": ex.index,
                    "value": ex.value,
                    "baseline_value": ex.baseline_value,
                    "ig_sum": float(ex.scores["ig"].sum()),
                    "ig_delta": ex.ig_delta,
                    "relative_error": abs(ex.ig_delta) / max(abs(gap), 1e-12),
                    "steps": n_steps,
                }
            )
        return pd.DataFrame(rows)


def baseline_ids(
    adapter: ModelAdapter,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    special_mask: torch.Tensor,
    token: str = "pad",
) -> torch.Tensor:
    """The reference input: word tokens replaced by ``[PAD]`` (``token="pad"``) or
    ``[MASK]`` (``"mask"``); special tokens and padding unchanged. ``[batch, seq]``.

    Raises:
        ValueError: unknown ``token``, or a tokenizer without a mask token for ``"mask"``.
    """
    tid: Optional[int]
    if token == "pad":
        tid = adapter.pad_token_id
    elif token == "mask":
        tid = getattr(adapter.tokenizer, "mask_token_id", None)
        if tid is None:
            raise InputError(f"{adapter.name} has no mask token; use the pad baseline")
    else:
        raise InputError(f"baseline must be 'pad' or 'mask', got {token!r}")
    word = attention_mask.bool() & ~special_mask
    return torch.where(word, torch.full_like(input_ids, int(tid)), input_ids)


@torch.no_grad()
def _blank_out(adapter, objective, f, ids, base, args: tuple, per_eval: int) -> torch.Tensor:
    """``[batch, seq]`` blank-out scores of a batch: a causal LM's from its clean prefix's cache
    (:mod:`.causal_occlusion`, the same scores in about a third of the time on SmolLM2), else
    captum's ``FeatureAblation`` of ``f`` with one feature per token, ``per_eval`` occlusions a forward."""
    from captum.attr import FeatureAblation

    from .causal_occlusion import applies, causal_blank_out

    if applies(adapter, objective):
        return causal_blank_out(adapter, objective, ids, args[0], base)
    feature_mask = torch.arange(ids.shape[1], device=ids.device).expand_as(ids)
    return (
        FeatureAblation(f)
        .attribute(
            ids,
            baselines=base,
            additional_forward_args=args,
            feature_mask=feature_mask,
            perturbations_per_eval=per_eval,
        )
        .detach()
    )


def _special_batch(encodings: Sequence[Any], n: int, device: torch.device | str) -> torch.Tensor:
    m = torch.ones(len(encodings), n, dtype=torch.bool)
    for i, e in enumerate(encodings):
        m[i, : len(e)] = e.special_mask
    return m.to(device)


def unattributed(adapter: ModelAdapter, objective: Objective, encodings: Sequence) -> Attributions:
    """:class:`Attributions` of ``encodings`` with no method's scores: each example's tokens and
    its value ``f(x)`` (one forward without gradients per example), as
    :func:`.completeness.gated_attributions` keeps the examples it gave no IG."""
    f = scalar_function(adapter, objective)
    out = []
    for i, e in enumerate(encodings):
        inputs = adapter.batch([e])
        ids, mask = inputs["input_ids"], inputs["attention_mask"]
        with torch.no_grad():
            value = float(f(ids, mask, objective.aux(adapter, ids, mask)).float()[0])
        special = tuple(bool(x) for x in e.special_mask)
        out.append(
            ExampleAttribution(
                index=i,
                tokens=e.tokens,
                word_ids=e.word_ids,
                special_mask=special,
                words=e.words,
                scores={},
                value=value,
            )  # fmt: skip
        )
    return Attributions(examples=tuple(out), methods=(), target=objective.describe(), settings={})


def attribute(
    adapter: ModelAdapter,
    objective: Objective,
    encodings: Sequence,
    *,
    methods: Sequence[str] = METHODS,
    n_steps: int = 50,
    internal_batch_size: int = 64,
    batch_size: Optional[int] = None,
    baseline: str = "pad",
    progress: bool = False,
) -> Attributions:
    """Attribute ``objective`` to the tokens of each encoding with captum.

    Args:
        adapter: a :class:`models.ModelAdapter` (encoder or decoder model).
        objective: what to explain (:mod:`probe.analyses.common.targets`).
        encodings: :class:`models.adapter.Encoding` s (``adapter.encode(...)``).
        methods: any of :data:`METHODS`.
        n_steps: IG integration steps (Gauss–Legendre).
        internal_batch_size: most rows in one model forward (IG steps × examples,
            ablations × examples); bounds memory.
        batch_size: examples attributed together (default ``min(16, internal_batch_size)``).
        baseline: ``pad`` or ``mask``: the token that replaces word tokens in the IG
            baseline and in blank-out.
        progress: tqdm progress bar over batches.

    Returns:
        :class:`Attributions`, examples in input order; scores ``[n_tokens]`` each.

    Raises:
        ValueError: unknown method, no encodings, ``batch_size > internal_batch_size``,
            ``n_steps < 1``, a target that is not one scalar per example.
    """
    methods = tuple(methods)
    bad = [m for m in methods if m not in METHODS]
    if bad or not methods:
        raise InputError(f"unknown attribution method(s) {bad or methods}; choose from {', '.join(METHODS)}")
    encodings = list(encodings)
    if not encodings:
        raise InputError("no examples to attribute")
    if n_steps < 1:
        raise InputError(f"n_steps must be ≥ 1, got {n_steps}")
    if internal_batch_size < 1:
        raise InputError(f"internal_batch_size must be ≥ 1, got {internal_batch_size}")
    batch_size = batch_size or min(16, internal_batch_size)
    if batch_size > internal_batch_size:
        raise InputError(
            f"batch_size {batch_size} exceeds internal_batch_size {internal_batch_size}: "
            "one forward would hold more rows than the memory bound allows"
        )
    from captum.attr import LayerGradientXActivation, LayerIntegratedGradients

    f = scalar_function(adapter, objective)
    emb = adapter.embeddings()
    from probe.inputs.budget import length_groups, rows_for

    # groups of similar length, each as many examples as fit one forward under the memory
    # budget (probe.inputs.budget): a long input gets few rows per forward; padding at most
    # PADDING of a group's tokens (each example's scores are its own, whatever its group)
    groups = length_groups([len(e) for e in encodings], adapter, batch_size, grad=True, waste=PADDING)[::-1]
    out: list = [None] * len(encodings)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(encodings), unit="ex", desc="attributions")
    try:
        for idx in groups:
            idx = sorted(idx, key=lambda i: len(encodings[i]))
            encs = [encodings[i] for i in idx]
            rows = rows_for(adapter, max(len(e) for e in encs), internal_batch_size, grad=True)
            inputs = adapter.batch(encs)
            ids, mask = inputs["input_ids"], inputs["attention_mask"]
            aux = objective.aux(adapter, ids, mask)
            special = _special_batch(encs, ids.shape[1], ids.device)
            base = baseline_ids(adapter, ids, mask, special, baseline)
            args = (mask, aux)
            scores: dict = {}
            with torch.no_grad():
                value, base_value = f(ids, mask, aux).float(), f(base, mask, aux).float()
            delta = torch.full((len(idx),), float("nan"))
            if "ig" in methods:
                lig = LayerIntegratedGradients(f, emb)
                attr, delta = lig.attribute(
                    ids,
                    baselines=base,
                    additional_forward_args=args,
                    n_steps=n_steps,
                    internal_batch_size=max(rows, len(idx)),
                    return_convergence_delta=True,
                )
                scores["ig"] = attr.sum(-1).detach()
            if "saliency" in methods or "input_x_gradient" in methods:
                grad = (
                    LayerGradientXActivation(f, emb, multiply_by_inputs=False)
                    .attribute(ids, additional_forward_args=args)
                    .detach()
                )
                if "saliency" in methods:
                    scores["saliency"] = grad.norm(dim=-1)
                if "input_x_gradient" in methods:
                    with torch.no_grad():
                        scores["input_x_gradient"] = (emb(ids) * grad).sum(-1)
            if "blank_out" in methods:
                scores["blank_out"] = _blank_out(adapter, objective, f, ids, base, args, max(1, rows // len(idx)))
            for r, (i, e) in enumerate(zip(idx, encs)):
                n = len(e)
                out[i] = ExampleAttribution(
                    index=i,
                    tokens=e.tokens,
                    word_ids=e.word_ids,
                    special_mask=tuple(bool(x) for x in e.special_mask),
                    words=e.words,
                    scores={m: scores[m][r, :n].double().cpu().numpy() for m in methods},
                    value=float(value[r]),
                    baseline_value=float(base_value[r]) if "ig" in methods else float("nan"),
                    ig_delta=float(delta[r]),
                )
            if bar is not None:
                bar.update(len(idx))
    finally:
        if bar is not None:
            bar.close()
    return Attributions(
        examples=tuple(out),
        methods=methods,
        target=objective.describe(),
        settings={
            "n_steps": n_steps,
            "internal_batch_size": internal_batch_size,
            "batch_size": batch_size,
            "baseline": baseline,
        },
    )
