"""Is attention an explanation here? Attributions, agreement, permutations, ground truth.

:func:`run_faithfulness` drives one model over one corpus and one target:

1. the target (:mod:`probe.analyses.common.targets`; for ``probe:<property>`` a logistic-regression
   probe is first fitted on the treebank's sentences and the rest runs on its held-out
   split, :mod:`probe.analyses.structure.ud_probe`);
2. attributions with captum (:mod:`probe.analyses.explanation.attributions`);
3. attention-based scores from the same examples (:mod:`probe.analyses.explanation.attention_scores`);
4. their agreement, Kendall τ / Spearman ρ (:mod:`probe.analyses.explanation.agreement`; Jain & Wallace 2019);
5. the permutation effect of every head (:mod:`probe.analyses.explanation.counterfactual`);
6. where the evidence is known (zoo:agreement's subject; the probe's UD word), evidence
   recovery (:mod:`probe.analyses.explanation.ground_truth`);
7. a per-head verdict combining them (:func:`verdict_table`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence, TYPE_CHECKING, Union

if TYPE_CHECKING:
    import os
    import pandas as pd

    from probe.analyses.common.objective import Objective
    from probe.inputs.corpus import Corpus
    from probe.models import ModelAdapter

import numpy as np

from probe.analyses.explanation.agreement import Agreement, agreement, attribution_scoresets
from probe.analyses.explanation.attention_scores import attention_scores
from probe.analyses.explanation.attributions import METHODS, Attributions
from probe.analyses.explanation.completeness import gated_attributions
from probe.analyses.explanation.counterfactual import PermutationEffects, permutation_effects
from probe.analyses.explanation.sample import N_STRATA
from probe.analyses.explanation.ground_truth import EvidenceRecovery, evidence_recovery
from probe.analyses.explanation.reference import choose_reference, with_method
from probe.errors import InputError, NotApplicable

log = logging.getLogger(__name__)

__all__ = ["FaithfulnessReport", "run_faithfulness", "verdict_rule", "verdict_table", "fit_objective"]


#: the median total variation under permutation below which a head's weights are "irrelevant"
MIN_EFFECT = 1e-3
#: the share of examples whose τ must be positive and significant for a head to "agree"
MIN_SIGNIFICANT = 0.5


def verdict_rule(v: pd.DataFrame, min_effect: float = MIN_EFFECT, min_significant: float = MIN_SIGNIFICANT) -> str:
    """One line saying how :func:`verdict_table` decided each head, with the numbers of
    ``v`` (its output) that put every head where it is: the smallest median total variation
    (why no head is "weights irrelevant") and the largest share of significant τ (why none
    "agrees"), each with its head. ``""`` for an empty table."""
    if not len(v):
        return ""
    ref = v.attrs.get("reference", "ig")
    sig = f"tau_{ref}_significant"
    line = (
        f"verdict per head: “weights irrelevant” when permuting its attention moves the output by a median "
        f"total variation under {min_effect:g}, else “relevant, agrees” when its τ with {ref} is positive and "
        f"significant in ≥ {min_significant:.0%} of the examples, else “relevant, disagrees”; here"
    )
    said = []
    if "tvd_median" in v.columns and v["tvd_median"].notna().any():
        r = v.loc[v["tvd_median"].idxmin()]
        said.append(f"smallest median total variation {r['tvd_median']:.3g} (L{int(r['layer'])}H{int(r['head'])})")
    if sig in v.columns and v[sig].notna().any():
        positive = v[v[f"tau_{ref}"] > 0] if (v[f"tau_{ref}"] > 0).any() else v
        r = positive.loc[positive[sig].idxmax()]
        said.append(
            f"largest share of examples with a significant τ, of a head whose mean τ is positive, {r[sig]:.0%} "
            f"(L{int(r['layer'])}H{int(r['head'])})"
        )
    return line + (" " + ", ".join(said) if said else " (no head measured)")


def verdict_table(
    agree: Agreement,
    perm: Optional[PermutationEffects] = None,
    truth: Optional[EvidenceRecovery] = None,
    *,
    reference: str = "ig",
    min_effect: float = MIN_EFFECT,
    min_significant: float = MIN_SIGNIFICANT,
) -> pd.DataFrame:
    """Per head: agreement with the reference attribution, permutation effect, evidence
    recovery, and a verdict.

    Verdicts: ``weights irrelevant`` (median TVD under permutation below ``min_effect``:
    permuting the head changes nothing), ``relevant, agrees`` (the ranking correlates
    positively and significantly with the attribution in at least ``min_significant`` of
    the examples), ``relevant, disagrees`` otherwise; ``agrees`` / ``disagrees`` alone
    when no permutation was run.

    Returns:
        DataFrame ``layer, head, tau_<ref>, tau_<ref>_significant, rho_<ref>, tvd_median,
        tvd_mean, abs_delta_median, share_unchanged, top1_rate, mean_rank, verdict``. A
        saturated classifier can show a tiny median TVD while a few examples flip: read
        ``tvd_mean`` and ``share_unchanged`` beside the verdict.
    """
    s = agree.summary
    s = s[(s["method"] == "attention") & (s["head"] >= 0)]
    if reference not in set(s["attribution"]):
        reference = s["attribution"].iloc[0]
    t = s[s["attribution"] == reference][["layer", "head", "tau_mean", "tau_significant", "rho_mean"]]
    t = t.rename(
        columns={
            "tau_mean": f"tau_{reference}",
            "tau_significant": f"tau_{reference}_significant",
            "rho_mean": f"rho_{reference}",
        }
    )
    if perm is not None:
        t = t.merge(
            perm.summary[["layer", "head", "tvd_median", "tvd_mean", "abs_delta_median", "share_unchanged"]],
            on=["layer", "head"],
            how="left",
        )
    if truth is not None:
        g = truth.summary
        g = g[(g["method"] == "attention") & (g["head"] >= 0)][["layer", "head", "top1_rate", "mean_rank"]]
        t = t.merge(g, on=["layer", "head"], how="left")
    verdicts = []
    for _, r in t.iterrows():
        agrees = r[f"tau_{reference}"] > 0 and r[f"tau_{reference}_significant"] >= min_significant
        word = "agrees" if agrees else "disagrees"
        if perm is None or np.isnan(r.get("tvd_median", np.nan)):
            verdicts.append(word)
        elif r["tvd_median"] < min_effect:
            verdicts.append("weights irrelevant")
        else:
            verdicts.append(f"relevant, {word}")
    t["verdict"] = verdicts
    t.attrs["reference"] = reference
    return t.reset_index(drop=True)


@dataclass(frozen=True)
class FaithfulnessReport:
    """Everything :func:`run_faithfulness` measured; :meth:`write` saves it as CSV/JSON."""

    attributions: Attributions
    agreement: Agreement
    permutation: Optional[PermutationEffects]
    ground_truth: Optional[EvidenceRecovery]
    verdict: pd.DataFrame
    info: dict = field(default_factory=dict)

    def to_frame(self) -> pd.DataFrame:
        """The :attr:`verdict` table."""
        return self.verdict

    def write(self, out: str | os.PathLike) -> list[Path]:
        """Write ``agreement.csv``, ``agreement_per_example.csv``, ``permutation.csv``,
        ``ground_truth.csv``, ``verdict.csv``, ``attributions.csv``, ``completeness.csv``
        and ``summary.json`` into directory ``out``; returns the paths."""
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        files = {
            "agreement.csv": self.agreement.summary,
            "agreement_per_example.csv": self.agreement.per_example,
            "verdict.csv": self.verdict,
            "attributions.csv": self.attributions.to_frame(),
        }
        if "ig" in self.attributions.methods:
            files["completeness.csv"] = self.attributions.completeness()
        if self.permutation is not None:
            files["permutation.csv"] = self.permutation.summary
            files["permutation_per_example.csv"] = self.permutation.per_example
        if self.ground_truth is not None:
            files["ground_truth.csv"] = self.ground_truth.summary
        paths = []
        for name, df in files.items():
            df.to_csv(out / name, index=False)
            paths.append(out / name)
        (out / "summary.json").write_text(json.dumps(self.info, indent=2, default=str))
        paths.append(out / "summary.json")
        return paths


def fit_objective(
    adapter: ModelAdapter,
    objective: Objective,
    corpus: Corpus,
    *,
    seed: int = 0,
    pairs: Optional[str] = None,
    embeddings: Optional[tuple] = None,
) -> tuple[Objective, Corpus, Optional[list], dict]:
    """``(objective, corpus to explain, evidence words or None, info)`` for the run's
    resolved explain objective (:func:`probe.analyses.common.objective.resolve_objective`
    with ``use="explain"``, once, by the run: only checked here), fitted where it names
    data: ``similarity`` takes its partner sentences, ``probe:<property>`` fits a probe on
    the treebank (``corpus.sentences``) and returns its held-out split; zoo corpora give
    their examples' ``evidence_word``. ``embeddings``: the corpus's embeddings from an
    earlier run (:func:`.pairs.similarity_target`'s ``known``).

    Raises:
        TypeError: ``objective`` is not an :class:`Objective` (a name: resolve it first).
        InputError: a probe target without a CoNLL-U corpus.
    """
    from probe.analyses.common.objective import Unfitted, given_objective

    resolved = given_objective(objective, adapter, corpus)
    info: dict = {"target": resolved.called}
    if isinstance(resolved, Unfitted) and resolved.kind == "similarity":
        from probe.analyses.explanation.pairs import similarity_target

        fitted_pairs, corpus, info = similarity_target(adapter, corpus, pairs, known=embeddings)
        return fitted_pairs, corpus, None, info
    if isinstance(resolved, Unfitted):  # probe:<property>
        from probe.analyses.structure.ud_probe import fit_probe, ud_labels

        prop = resolved.arg
        if not corpus.sentences:
            raise InputError("a probe target reads UD annotation: give the treebank with --conllu")
        labels = ud_labels(corpus.source, prop or "subject-number", limit=len(corpus.sentences))
        spans = corpus.word_spans or ()  # a treebank's corpus has its words' spans
        encs = [adapter.encode(corpus.texts[lab.sentence], spans[lab.sentence], truncate=True) for lab in labels]
        fitted = fit_probe(adapter, encs, [lab.label for lab in labels], prop=prop or "subject-number", seed=seed)
        info["probe"] = fitted.to_dict()
        keep = [labels[i].sentence for i in fitted.test_idx]
        held_out = [labels[i].evidence_word for i in fitted.test_idx]
        return fitted.target, corpus.subset(keep, reason="probe training split"), held_out, info
    evidence: Optional[list] = None
    if corpus.examples and "evidence_word" in corpus.examples[0]:
        evidence = [int(e["evidence_word"]) for e in corpus.examples]
    return resolved, corpus, evidence, info


def _spans(corpus) -> Optional[list]:
    if corpus.word_spans:
        return list(corpus.word_spans)
    if corpus.examples and "words" in corpus.examples[0]:  # zoo: words joined by single spaces
        out = []
        for e in corpus.examples:
            spans, pos = [], 0
            for w in e["words"]:
                spans.append((pos, pos + len(w)))
                pos += len(w) + 1
            out.append(tuple(spans))
        return out
    return None


def _null_agreement(
    adapter, target, corpus, encs, spans, attention_methods, n_steps, internal_batch_size, seed, kind=None,
    reference="ig",
):  # fmt: skip
    """``{"tau_max", "tau_quantile", "significant_max", "source", "n", "heads", "reference"}``: the
    per-head agreement of attention with the run's ``reference`` attribution on the null model
    ``kind`` (``None``: the default; :mod:`probe.analyses.claims.null_model`; the same examples
    and target; IG with the same gate, any other reference on every example, IG not computed),
    or ``None`` where it cannot run (logged)."""
    from probe.analyses.claims import thresholds as T
    from probe.analyses.claims.null_model import DEFAULT_NULL, null_adapter
    from probe.runs.capture import capture

    try:
        nadapter = null_adapter(adapter, seed=seed, kind=kind or DEFAULT_NULL)
        nencs = [nadapter.encode(t, spans[i] if spans else None) for i, t in enumerate(corpus.texts)]
        nattrs, ngate = gated_attributions(
            nadapter, target, nencs, (reference,), n_steps, internal_batch_size=internal_batch_size
        )
        keep = list(ngate.passed) if ngate is not None else list(range(len(nencs)))
        maps = capture(nadapter, list(corpus.texts), word_spans=spans)
        att = [
            attention_scores(m, target.reads(m.n_tokens, nadapter), methods=("attention",), index=i, adapter=nadapter)
            for i, m in enumerate(maps)
        ]
        sets = attribution_scoresets(nattrs)
        s = agreement([att[i] for i in keep], [sets[i] for i in keep]).summary
    except (NotApplicable, InputError) as exc:
        log.warning("no null agreement: %s", getattr(exc, "reason", exc))
        return None
    s = s[(s["method"] == "attention") & (s["head"] >= 0) & (s["attribution"] == reference)]
    if not len(s):
        return None
    tau = s["tau_mean"].to_numpy(dtype=float)
    return {
        "tau_max": float(np.nanmax(tau)),
        "tau_quantile": float(np.nanquantile(tau, 1 - T.FDR)),
        "significant_max": float(np.nanmax(s["tau_significant"].to_numpy(dtype=float))),
        "source": nadapter.card["null_source"],
        "n": int(len(keep)),
        "heads": int(len(s)),
        "reference": reference,
    }


def _drawn(adapter, corpus, evidence, n: int, seed: int, n_strata: int) -> tuple:
    """``(corpus, evidence, info)``: ``n`` examples of ``corpus`` drawn across it, stratified by
    token length (:func:`.sample.stratified_sample`), with their evidence words and what was
    drawn. Drawn among the examples of at least :data:`.agreement.MIN_WORDS` words, those the
    agreement test can use (every example when none has that many)."""
    from probe.inputs.corpus import token_lengths

    from .agreement import MIN_WORDS
    from .sample import length_strata, stratified_sample

    lengths = np.asarray(token_lengths(corpus.texts, adapter))
    spans = _spans(corpus)
    words = [len(spans[i]) if spans else len(t.split()) for i, t in enumerate(corpus.texts)]
    pool = np.flatnonzero(np.asarray(words) >= MIN_WORDS)
    pool = pool if len(pool) else np.arange(len(corpus))
    picked = pool[stratified_sample(lengths[pool], n, seed=seed, n_strata=n_strata)]
    k = int(length_strata(lengths[pool], min(n_strata, n, len(pool))).max()) + 1
    sub = corpus.subset(picked.tolist(), reason="not drawn to be explained")
    said = {"n": len(picked), "of": len(corpus), "eligible": len(pool), "min_words": MIN_WORDS, "strata": k}
    said.update(seed=seed, indices=picked.tolist(), tokens_min=int(lengths[picked].min()))
    said.update(tokens_max=int(lengths[picked].max()), corpus_tokens_max=int(lengths.max()))
    return sub, [evidence[i] for i in picked] if evidence is not None else None, said


def _readable(adapter: ModelAdapter, target: Any, corpus: Any, evidence: Any, info: dict) -> tuple:
    """``(corpus, evidence)`` without the examples ``target`` cannot read (a one-token text
    has no next-token loss: ``target.reads`` refuses it), said in ``info["unreadable"]``;
    as given when every example is readable, or none is (the target's own error then says why)."""
    from probe.inputs.corpus import token_lengths

    bad, why = [], ""
    for i, n in enumerate(token_lengths(corpus.texts, adapter)):
        try:
            target.reads(int(n), adapter)
        except InputError as exc:
            bad.append(i)
            why = why or str(exc)
    if not bad or len(bad) == len(corpus):
        return corpus, evidence
    skip = set(bad)
    keep = [i for i in range(len(corpus)) if i not in skip]
    info["unreadable"] = {"n": len(bad), "of": len(corpus), "indices": bad, "why": why}
    log.info("faithfulness leaves out %d of %d example(s) the target cannot read: %s", len(bad), len(corpus), why)
    sub = corpus.subset(keep, reason="the target cannot read it")
    return sub, [evidence[i] for i in keep] if evidence is not None else None


def _to_explain(adapter, target, corpus, evidence, info: dict, max_examples, seed: int, n_strata: int) -> tuple:
    """``(corpus, evidence)`` to explain: the readable examples (:func:`_readable`), then
    ``max_examples`` of them drawn across the corpus (:func:`_drawn`, said in ``info["explained"]``)."""
    corpus, evidence = _readable(adapter, target, corpus, evidence, info)
    if max_examples is not None and max_examples < len(corpus):
        corpus, evidence, info["explained"] = _drawn(adapter, corpus, evidence, max_examples, seed, n_strata)
    return corpus, evidence


def _permuted(adapter, objective, encs, heads, n_permutations, examples, seed, progress) -> tuple:
    """``(PermutationEffects, [indices])``: :func:`permutation_effects` on ``examples`` of the
    encodings ``encs`` drawn at random (seeded; all where ``None`` or at least their number),
    its ``example`` column the index into ``encs``."""
    idx = list(range(len(encs)))
    if examples is not None and 0 < examples < len(encs):
        idx = sorted(np.random.default_rng(seed).choice(len(encs), int(examples), replace=False).tolist())
    perm = permutation_effects(
        adapter, objective, [encs[i] for i in idx], heads=heads, n_permutations=n_permutations, seed=seed,
        progress=progress,
    )  # fmt: skip
    perm.per_example["example"] = [idx[i] for i in perm.per_example["example"]]
    return perm, idx


def _attributed(adapter, objective, encs, methods, n_steps, internal_batch_size, progress, info: dict) -> tuple:
    """``(attributions, IG gate or None, reference, examples kept, methods compared or None
    for all)``: ``methods`` attributed, IG gated (:func:`.completeness.gated_attributions`), and the
    reference chosen (:func:`.reference.choose_reference`, said in ``info["reference"]`` and,
    where it is not IG, ``info["reference_why"]``). With IG the reference, the examples it
    passed are kept; otherwise every example, compared with every method but IG (the
    reference computed for it where it was not asked)."""
    attrs, gate = gated_attributions(
        adapter, objective, encs, methods, n_steps, internal_batch_size=internal_batch_size, progress=progress
    )
    reference, why = choose_reference(methods, gate)
    info["reference"] = reference
    if reference == "ig" and gate is not None:
        return attrs, gate, reference, list(gate.passed), None
    info["reference_why"] = why
    log.info("faithfulness: %s", why)
    attrs = with_method(adapter, objective, encs, attrs, reference, internal_batch_size=internal_batch_size)
    return attrs, gate, reference, list(range(len(encs))), [m for m in attrs.methods if m != "ig"]


def run_faithfulness(
    adapter: ModelAdapter,
    corpus: Any,
    objective: Objective,
    *,
    methods: Sequence[str] = METHODS,
    attention_methods: Sequence[str] = ("attention", "rollout", "flow"),
    n_steps: int = 50,
    internal_batch_size: int = 64,
    n_permutations: int = 5,
    heads: Optional[Sequence[tuple]] = None,
    permute: bool = True,
    permute_examples: Optional[int] = None,
    max_examples: Optional[int] = None,
    seed: int = 0,
    progress: bool = False,
    pairs: Optional[str] = None,
    null: Union[bool, str] = True,
    n_strata: int = N_STRATA,
    embeddings: Optional[tuple] = None,
) -> FaithfulnessReport:
    """Run the whole faithfulness study of ``objective`` on ``corpus``.

    Args:
        adapter: the model.
        corpus: a :class:`probe.inputs.corpus.Corpus`.
        objective: the run's resolved :class:`probe.analyses.common.objective.Objective`
            (``use="explain"``: ``logit`` / ``logit:<class>`` / ``loss:<position>`` /
            ``probe:<property>`` / ``similarity``; fitted by :func:`fit_objective`).
        methods: attribution methods (:data:`probe.analyses.explanation.attributions.METHODS`).
        attention_methods: see :data:`probe.analyses.explanation.attention_scores.ATTENTION_METHODS`.
        n_steps, internal_batch_size: IG settings.
        n_permutations: random permutations per example and head.
        heads: heads to permute (default all); ``permute=False`` skips permutations.
        permute_examples: permute on this many of the explained examples, drawn at random
            (seeded; default all): a head's verdict reads the median change over them
            (``info["permuted_examples"]``).
        max_examples: explain N examples drawn across the corpus (after a probe's split),
            stratified by token length in ``n_strata`` strata (:func:`.sample.stratified_sample`,
            seeded by ``seed``), among those long enough for the agreement test
            (``info["explained"]`` says which and how); ``None``: every example.
        seed: probe split, sample and permutation seed.
        pairs: a pairs file for the ``similarity`` target (default: nearest neighbours).
        null: also measure the agreement on a null model (``True``: the default one,
            or its name: ``reinit``, ``permute``; :mod:`probe.analyses.claims.null_model`;
            same examples, target and steps):
            ``info["null_agreement"]``, the bar the attribution claim is held to.
        embeddings: ``(readout described, [n, d])``: the corpus's embeddings from an earlier
            run of the model (NaN rows where not computed), for the similarity target.

    IG is gated (:mod:`.completeness`): an example whose completeness error stays above
    1% after raising the steps is left out of the agreement and counted
    (``info["ig_gate"]``). The verdict's reference is IG where it passes on some example,
    else blank-out (:mod:`.reference`; ``info["reference"]``, ``info["reference_why"]``).

    Raises:
        ValueError: on bad input anywhere along the way (see the modules).
    """
    from probe.runs.capture import capture

    objective, corpus, evidence, info = fit_objective(
        adapter, objective, corpus, seed=seed, pairs=pairs, embeddings=embeddings
    )
    corpus, evidence = _to_explain(adapter, objective, corpus, evidence, info, max_examples, seed, n_strata)
    if not len(corpus):
        raise InputError("no examples left to explain")
    spans = _spans(corpus)
    encs = [adapter.encode(t, spans[i] if spans else None) for i, t in enumerate(corpus.texts)]
    attrs, gate, reference, keep, used = _attributed(
        adapter, objective, encs, methods, n_steps, internal_batch_size, progress, info
    )
    maps = capture(adapter, list(corpus.texts), word_spans=spans)
    att = [
        attention_scores(m, objective.reads(m.n_tokens, adapter), methods=attention_methods, index=i, adapter=adapter)
        for i, m in enumerate(maps)
    ]
    attr_sets = attribution_scoresets(attrs, used)
    agree = agreement([att[i] for i in keep], [attr_sets[i] for i in keep], progress=progress)
    null_agree = (
        _null_agreement(
            adapter,
            objective,
            corpus,
            encs,
            spans,
            attention_methods,
            n_steps,
            internal_batch_size,
            seed,
            kind=null if isinstance(null, str) else None,
            reference=reference,
        )  # fmt: skip
        if null
        else None
    )
    perm = None
    if permute:
        perm, info["permuted_examples"] = _permuted(
            adapter, objective, encs, heads, n_permutations, permute_examples, seed, progress
        )
    truth = evidence_recovery([att, attr_sets], evidence) if evidence is not None else None
    verdict = verdict_table(agree, perm, truth, reference=reference)
    info.update(
        {
            "model": adapter.name,
            "n_examples": len(encs),
            "attribution_methods": list(attrs.methods),
            "attention_methods": list(attention_methods),
            "n_steps": n_steps,
            "internal_batch_size": internal_batch_size,
            "n_permutations": n_permutations if permute else 0,
            "skipped": corpus.skipped,
            "agreement_skipped_short": agree.skipped,
        }
    )
    if gate is not None:
        info["ig_gate"] = gate.to_dict()
    if null_agree is not None:
        info["null_agreement"] = null_agree
    elif null:  # asked for and not computed (logged): no claim may hold uncalibrated
        info["null_agreement_unavailable"] = True
    if "ig" in methods:
        rel = attrs.completeness()["relative_error"]
        info["ig_completeness"] = {
            "median_relative_error": float(rel.median()),
            "max_relative_error": float(rel.max()),
            "share_within_1pct": float((rel < 0.01).mean()),
        }
    return FaithfulnessReport(
        attributions=attrs, agreement=agree, permutation=perm, ground_truth=truth, verdict=verdict, info=info
    )
