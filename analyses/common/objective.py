"""One objective: "a scalar per example from a forward", with the one place ``auto`` is resolved.

The classes live in :mod:`.objective_base` (the built-ins in :mod:`.metrics`,
:mod:`.targets`, :mod:`.similarity`); this module is their public face and the resolver.

An :class:`Objective` (:mod:`.objective_base`: its sweep face and its gradient face, the
shapes of each) is what a causal test or an attribution measures the model by.

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

from typing import Any, Callable, Optional, TYPE_CHECKING, Union

if TYPE_CHECKING:
    from probe.models import ModelAdapter

from probe.errors import InputError, NotApplicable

from . import metrics, similarity, targets
from .batch import MetricBatch, check_scalar
from .objective_base import InputObjective, Objective, Unfitted, scalar_function
from .objective_names import FORMS, NAMES, USES, known_for
from .similarity import applicable_objectives

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
    "given_objective",
    "known_for",
    "applicable_objectives",
    "head_kind",
    "floor_of",
    "get_metric",
    "default_metric",
    "parse_target",
]


# ---- names and ``auto``: parsed and resolved here only ----


def head_kind(adapter: ModelAdapter) -> str:
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
    kind, _, arg = spec.partition(":")
    named = {
        "loss": metrics.LossMetric,
        "next-token-loss": similarity.NextTokenLoss,
        "accuracy": metrics.AccuracyMetric,
        "prediction-kl": metrics.PredictionKL,
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
            raise InputError(f"objective {spec!r}: expected an integer after '{kind}:'") from None
        if kind == "probe" and probe is not None:
            return probe
        if kind in ("similarity", "probe"):
            return Unfitted(spec)
    note = " (or a callable in the Python API)" if use == "per-example" else ""
    raise InputError(
        f"unknown objective {spec!r}; {_did_you_mean(spec, use)}known: {', '.join(FORMS[use])}, auto{note}"
    )


def _did_you_mean(spec: str, use: str) -> str:
    """``"did you mean 'accuracy'? "`` for a name close to one ``use`` knows, else ``""``."""
    import difflib

    names = [form.partition(":<")[0] for form in FORMS[use]] + ["auto"]
    close = difflib.get_close_matches(str(spec).strip(), names, n=1, cutoff=0.75)
    return f"did you mean {close[0]!r}? " if close else ""


def _auto(adapter, corpus, use: str) -> tuple:
    """``(name, why)``: the objective ``auto`` means for ``adapter`` (and ``corpus``) in ``use``."""
    from .metrics import MASK_FRACTION, has_lm_head, zoo_has_loss, zoo_task
    from .similarity import MIN_SENTENCES, distinct_sentences

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
    if not zoo and use in ("corpus", "per-example") and head_kind(adapter) == "sequence-classification":
        return "prediction-kl", f"{model}'s classification head: the KL divergence of its predicted distribution"
    if use == "gradient":
        return "similarity", "no task or LM head: the similarity to a partner sentence"
    if (
        use == "corpus"
        and adapter.arch == "encoder"
        and not zoo
        and (corpus is None or distinct_sentences(corpus) >= MIN_SENTENCES)
    ):
        return "similarity-structure", "a sentence encoder: the similarity structure of the corpus"
    return "embedding-drift", "the model has no language-model or task head to score a loss with"


def resolve_objective(
    spec: Any = "auto",
    adapter: Optional[ModelAdapter] = None,
    corpus: Any = None,
    *,
    use: str = "corpus",
    probe: Optional[Objective] = None,
    fallback: Optional[set] = None,
) -> tuple:
    """``(objective, why)`` from a name, ``auto`` or an :class:`Objective` (or, for the
    per-example uses, a callable ``fn(outputs, batch) -> [rows]``); checked against
    ``adapter`` and ``corpus`` before any forward. The one place ``auto`` is resolved.

    Args:
        spec: ``auto`` (or ``None``/``""``), a name known for ``use`` or an object.
        use: one of :data:`USES` (which names are known and what ``auto`` chooses).
        probe: the fitted probe objective a bare ``probe`` names (``explain``).
        fallback: a set where a run whose one name serves several uses (the report) keeps
            the uses that do not know it: such a name is resolved as ``auto`` for ``use``,
            which is added to the set (``None``: refused).

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
        obj: Objective = metrics.CallableMetric(spec)
        if adapter is not None:
            obj.check(adapter, corpus)
        return obj, "given"
    spec, why = (spec or "auto").strip(), "named"
    if fallback is not None and spec != "auto" and not known_for(spec, use):
        fallback.add(use)
        spec = "auto"
    if spec == "auto":
        if adapter is None:
            raise InputError("'auto' chooses an objective for a model: give the model")
        spec, why = _auto(adapter, corpus, use)
    obj = _parse(spec, use, probe)
    obj.spec = spec  # the name it was resolved from (printed)
    if adapter is not None:
        obj.check(adapter, corpus)
    pooling = getattr(obj, "pooling", None)
    if use == "corpus" and pooling is not None and hasattr(pooling, "describe"):
        why = f"{why}; {pooling.describe()}"
    return obj, why


def given_objective(objective: object, adapter: Optional[ModelAdapter] = None, corpus: Any = None) -> Objective:
    """``objective``, checked against ``adapter`` and ``corpus``: what every analysis below
    the run calls on the objective it is handed (the run resolved it, once per use, with
    :func:`resolve_objective`; nothing below the run parses a name).

    Raises:
        TypeError: ``objective`` is not an :class:`Objective` (a name or a callable: resolve
            it first, naming how).
        NotApplicable: the objective does not fit the model or corpus (naming those that do).
    """
    if not isinstance(objective, Objective):
        import sys

        frame = sys._getframe(1)  # named: the library's function the caller called
        while frame.f_back is not None and str(frame.f_back.f_globals.get("__name__", "")).startswith("probe."):
            frame = frame.f_back
        where = frame.f_code.co_name
        raise TypeError(
            f"{where}() takes a resolved Objective, not {objective!r}: resolve it once at the top with "
            f"probe.analyses.common.objective.resolve_objective({objective!r}, adapter, corpus, use=...)[0] "
            "(a callable: probe.analyses.common.metrics.CallableMetric(fn)), or give the name to probe.run(..., objective=...)"
        )
    if adapter is not None:
        objective.check(adapter, corpus)
    return objective


def floor_of(objective: Objective) -> tuple:
    """``(floor, source)``: the practical floor of ``objective`` in its units."""
    from probe.analyses.claims import thresholds as T

    return T.min_effect(objective.name), T.floor_source(objective.name)


def default_metric(adapter: ModelAdapter, corpus: Any = None) -> tuple:
    """``(name, why)``: what ``auto`` means for a per-example metric (the model's loss
    where it has one, else ``embedding-drift``), from :func:`resolve_objective`."""
    obj, why = resolve_objective("auto", adapter, corpus, use="per-example")
    return obj.name, why


def get_metric(
    metric: Union[str, Objective, Callable], adapter: Optional[ModelAdapter] = None, corpus: Any = None
) -> Objective:
    """A per-example :class:`Objective` from a name, ``auto``, an objective or a
    callable ``fn(outputs, batch) -> [rows]``; checked against ``adapter``
    (:func:`resolve_objective` with ``use="per-example"``).

    Raises:
        InputError: unknown name (listing the known ones).
        NotApplicable: a metric that does not apply to the model (naming those that do).
    """
    return resolve_objective(metric, adapter, corpus, use="per-example")[0]


def parse_target(
    spec: str, adapter: Optional[ModelAdapter] = None, probe: Optional[InputObjective] = None
) -> InputObjective:
    """A target from a CLI string: ``auto``, ``logit`` / ``logit:<class>``, ``loss:<position>``,
    ``mlm``, ``probe`` (needs ``probe``, the fitted probe target); through
    :func:`resolve_objective` (``use="explain"``).

    Raises:
        InputError: an unknown spec, listing the known forms.
    """
    target, _ = resolve_objective(spec, adapter, None, use="explain", probe=probe)
    return target
