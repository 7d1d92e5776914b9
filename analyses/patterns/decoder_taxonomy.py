"""The decoder head taxonomy in one table: every detector of :mod:`.decoder_heads`,
:mod:`.decoder_circuits` and :mod:`.retrieval_heads` on one causal language model.

:data:`TAXONOMY` names each role once, with the column that holds its score, the threshold
a head must pass, the probe it is measured on and its source. A detector the model cannot
take (no ordinal tokens for successor heads, no unembedding, too few positions for a needle)
leaves its column NaN and says why in ``notes``. A detector bound to a task the model does
not do — successor heads serve continuing an ordinal sequence, retrieval heads copying a
needle — names no head when the model does its task in under half of the prompts
(:data:`.decoder_circuits.TASK_MIN_ACCURACY`) and says so with the measured accuracy
(a "not applicable" note), instead of silently naming none. ``notes`` write every detector's
settings (``settings: …`` lines) beside the scores.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pandas as pd

from probe.errors import InputError, NotApplicable

if TYPE_CHECKING:
    from probe.models.adapter import ModelAdapter

__all__ = ["TaxonomyRole", "TAXONOMY", "DecoderTaxonomy", "decoder_taxonomy"]


@dataclass(frozen=True)
class TaxonomyRole:
    """One role: ``column`` holds its score, ``flag`` the boolean ``score`` passes ``threshold``
    (``at_least``: at or over it; else over it), measured on ``probe``, defined by ``source``."""

    role: str
    column: str
    flag: str
    threshold: float
    probe: str
    source: str
    at_least: bool = False

    def passes(self, score: float) -> bool:
        """Whether ``score`` clears the role's threshold (as the ``flag`` column says)."""
        return score >= self.threshold if self.at_least else score > self.threshold

    @property
    def rule(self) -> str:
        """The threshold in words, e.g. ``> 0.4``."""
        return f"{'≥' if self.at_least else '>'} {self.threshold:g}"


def _roles() -> tuple:
    from .decoder_circuits import COPYING_THRESHOLD, SUCCESSOR_THRESHOLD
    from .decoder_heads import CONTENT_MIN, POSITIONAL_SHARE, THRESHOLDS
    from .retrieval_heads import RETRIEVAL_THRESHOLD

    rr = "repeated random tokens"
    return (
        TaxonomyRole("induction", "induction", "induction_head", THRESHOLDS["induction"], rr, "Olsson et al. 2022"),
        TaxonomyRole(
            "copying", "copying", "copying_head", COPYING_THRESHOLD, "OV circuit eigenvalues", "Olsson et al. 2022"
        ),
        TaxonomyRole(
            "previous-token",
            "previous_token",
            "previous_token_head",
            THRESHOLDS["previous_token"],
            rr,
            "TransformerLens",
        ),
        TaxonomyRole(
            "duplicate-token",
            "duplicate_token",
            "duplicate_token_head",
            THRESHOLDS["duplicate_token"],
            rr,
            "TransformerLens",
        ),
        TaxonomyRole(
            "successor",
            "successor",
            "successor_head",
            SUCCESSOR_THRESHOLD,
            "OV circuit on ordinal tokens",
            "Gould et al. 2023",
        ),
        TaxonomyRole(
            "retrieval", "retrieval", "retrieval_head", RETRIEVAL_THRESHOLD, "needle in a haystack", "Wu et al. 2024"
        ),
        TaxonomyRole("sink", "sink", "sink_head", THRESHOLDS["sink"], "random tokens, length 64", "Gu et al. 2024"),
        TaxonomyRole(
            "positional",
            "positional",
            "positional_head",
            POSITIONAL_SHARE,
            "repeated and distinct random tokens",
            "Voita et al. 2019",
            at_least=True,
        ),
        TaxonomyRole("content", "content", "content_head", CONTENT_MIN, "two token draws", "ours"),
    )


#: every role of the taxonomy, in the order a head's roles are named
TAXONOMY: tuple = _roles()


@dataclass(frozen=True)
class DecoderTaxonomy:
    """``table``: ``layer, head`` and every score and ``*_head`` flag of :data:`TAXONOMY`
    (NaN / False where a detector did not run); ``notes``: why one did not, and on what the
    others ran; ``sink_ratio``: Gu et al.'s Sink₁^ε of the model; ``null_shares``: with
    the calibration, the share of a re-initialised model's heads that pass each role
    (:func:`null_shares`, keyed by the role's flag without ``_head``), else empty."""

    table: pd.DataFrame
    notes: tuple
    sink_ratio: float
    null_shares: dict = field(default_factory=dict)

    def heads(self, role: str) -> list:
        """``[(layer, head)]`` that take ``role`` (a :data:`TAXONOMY` role name)."""
        r = next(x for x in TAXONOMY if x.role == role)
        t = self.table[self.table[r.flag].astype(bool)]
        return [(int(a), int(b)) for a, b in zip(t["layer"], t["head"])]

    def roles_of(self, layer: int, head: int) -> list:
        """The roles ``(layer, head)`` takes, in :data:`TAXONOMY` order."""
        t = self.table
        row = t[(t["layer"] == layer) & (t["head"] == head)].iloc[0]
        return [r.role for r in TAXONOMY if bool(row[r.flag])]

    def to_frame(self) -> pd.DataFrame:
        return self.table


def _settings(base, vocab_size: int) -> list:
    """The pattern detectors' settings, one line each (what the output writes beside the scores)."""
    from .decoder_heads import CONTENT_MIN, POSITIONAL_SHARE, THRESHOLDS

    t, n = base.n_tokens, base.n_examples
    big_n = 1 + 2 * t
    return [
        f"settings: repeated-token probe = {n} sequences of <bos> + {t} random tokens + the same {t} again "
        f"({big_n} positions; pool: the {vocab_size} non-special tokens, uniform, distinct within a copy)",
        f"settings: induction = mean over the second copy of A[i, i-{t}+1] (Olsson et al. 2022 prefix matching), "
        f"head when > {THRESHOLDS['induction']:g} (ours, no published threshold); duplicate-token = A[i, i-{t}], "
        f"head when > {THRESHOLDS['duplicate_token']:g} (ours); previous-token = A[i, i-1] over i >= 1, head when > "
        f"{THRESHOLDS['previous_token']:g} (ours)",
        f"settings: TransformerLens detect_head (error_measure='mul', same tokens) = induction and duplicate-token x "
        f"{t}/{big_n}, previous-token x {big_n - 1}/{big_n}: the *_tl columns",
        f"settings: sink probe (Gu et al. 2024) = {n} sequences of {base.sink_length} tokens, the first "
        f"{base.sink_first}, the rest random; alpha_1 = mean attention to position 0 over all queries; sink head when "
        f"> {THRESHOLDS['sink']:g} (the paper's epsilon); Sink1^0.3 = {base.sink_ratio:.2f}",
        f"settings: content = mean total variation between the rows on the repeated probe and on {2 * t} distinct "
        f"random tokens, content head when > {CONTENT_MIN:g} (ours); positional = share of the rows i >= 1 of both "
        f"probes whose largest weight is at the head's most common relative offset, head when >= "
        f"{POSITIONAL_SHARE:g} (Voita et al. 2019)",
    ]


def _task_gate(table: pd.DataFrame, name: str, accuracy: float, task: str) -> tuple:
    """``(table, note)``: ``name``'s heads unnamed (scores kept) when the model does its task
    in fewer than :data:`TASK_MIN_ACCURACY` of the prompts, said with the measured accuracy."""
    from .decoder_circuits import TASK_MIN_ACCURACY

    if accuracy >= TASK_MIN_ACCURACY:
        return table, f"{name}: the model {task} in {accuracy:.0%} of the prompts"
    best = float(table[name].max())
    note = (
        f"{name}: not applicable: the model {task} in only {accuracy:.0%} of the prompts (< {TASK_MIN_ACCURACY:.0%}), "
        f"so no head is named {name} (scores kept in the column, max {best:.2f})"
    )
    return table.assign(**{name + "_head": False}), note


def _detect_circuits(adapter: ModelAdapter, table: pd.DataFrame, n_examples: int, seed: int) -> tuple:
    """``(table, notes)``: copying, successor and retrieval merged in, each with its settings
    or the reason it was not scored."""
    from .decoder_circuits import SUCCESSOR_THRESHOLD, copying_scores, successor_scores, successor_task_accuracy
    from .retrieval_heads import RETRIEVAL_THRESHOLD, retrieval_scores

    notes = []
    n_context = min(24, adapter.max_length - 6)
    for name, detect in (
        ("copying", lambda: copying_scores(adapter)),
        ("successor", lambda: successor_scores(adapter)),
        ("retrieval", lambda: retrieval_scores(adapter, n_context=n_context, n_examples=n_examples, seed=seed)),
    ):
        try:
            part = detect()
            if name == "successor":
                accuracy, n_prompts = successor_task_accuracy(adapter)
                part.attrs.update(task_accuracy=accuracy, n_prompts=n_prompts)
        except (NotApplicable, InputError) as exc:
            notes.append(f"{name}: not scored ({exc})")
            table = table.assign(**{name: float("nan"), name + "_head": False})
            continue
        table = table.merge(part, on=["layer", "head"])
        if name == "successor":
            notes.append(
                f"settings: successor (Gould et al. 2023) = OV circuit on {part.attrs['n_pairs']} ordinal pairs among "
                f"{part.attrs['n_tokens']} tokens, head when > {SUCCESSOR_THRESHOLD:g} (ours; chance "
                f"{1 / part.attrs['n_tokens']:.2f}); task: {part.attrs['n_prompts']} prompts of 3 ordinal tokens"
            )
            table, note = _task_gate(
                table, "successor", part.attrs["task_accuracy"], "continues an ordinal sequence (greedy next token)"
            )
            notes.append(note)
        if name == "retrieval":
            notes.append(
                f"settings: retrieval (Wu et al. 2024) = {n_examples} needle inputs (<bos>, {n_context} random tokens "
                f"holding a needle of {part.attrs['answer_len'] + 1}, its first token as the cue, "
                f"{part.attrs['answer_len']} tokens decoded greedily), head when > {RETRIEVAL_THRESHOLD:g} (the paper's)"
            )
            table, note = _task_gate(
                table, "retrieval", part.attrs["answer_recall"], "emits the needle's answer tokens"
            )
            notes.append(note)
    return table, notes


def null_shares(adapter: ModelAdapter, n_tokens: int, n_examples: int, seed: int = 0) -> dict:
    """``{role: share}``: the share of the re-initialised model's heads
    (:func:`probe.analyses.claims.null_model.null_adapter`, seed ``seed``) that pass each
    pattern role's threshold on the same probes, and the copying and successor thresholds on
    its weights (successor where the tokenizer holds ordinal tokens) — what a threshold
    without a published value is calibrated against (the share should be small)."""
    from probe.analyses.claims.null_model import null_adapter

    from .decoder_circuits import copying_scores, successor_scores
    from .decoder_heads import THRESHOLDS, decoder_head_scores

    null = null_adapter(adapter, seed=seed)
    t = decoder_head_scores(null, n_tokens=n_tokens, n_examples=n_examples, seed=seed).table
    roles = list(THRESHOLDS) + ["positional", "content"]
    shares = {role: float(t[role + "_head"].mean()) for role in roles}
    shares["copying"] = float(copying_scores(null)["copying_head"].mean())
    try:
        shares["successor"] = float(successor_scores(null)["successor_head"].mean())
    except NotApplicable:  # no ordinal tokens: the model's successor scores are not computed either
        pass
    return shares


def decoder_taxonomy(
    adapter: ModelAdapter,
    n_tokens: int | None = None,
    n_examples: int | None = None,
    seed: int = 0,
    sink_length: int | None = None,
    calibrate: bool = False,
) -> DecoderTaxonomy:
    """Run every detector on ``adapter`` (a causal LM) at its paper's settings (the
    defaults of :mod:`.decoder_heads`); ``notes`` write each detector's settings and, with
    ``calibrate``, the share of a re-initialised model's heads that pass each pattern role.

    Raises:
        NotApplicable: ``adapter`` is not a causal (decoder) model.
        InputError: the repeated random tokens do not fit its positions.
    """
    from .decoder_heads import PROBE_EXAMPLES, REPEAT_TOKENS, SINK_LENGTH, decoder_head_scores, probe_vocabulary

    if not adapter.causal:
        raise NotApplicable(f"{adapter.name} is not a causal language model: the decoder head taxonomy needs one")
    notes = []
    if n_tokens is None:  # the default, cut to the model's positions (said)
        n_tokens = min(REPEAT_TOKENS, max(2, (adapter.max_length - 1) // 2))
        if n_tokens < REPEAT_TOKENS:
            notes.append(
                f"settings: {n_tokens} random tokens per copy, not {REPEAT_TOKENS}: "
                f"{adapter.name} has {adapter.max_length} positions"
            )
    n_examples = PROBE_EXAMPLES if n_examples is None else n_examples
    sink_length = SINK_LENGTH if sink_length is None else sink_length
    base = decoder_head_scores(adapter, n_tokens, n_examples, seed, sink_length)
    notes = _settings(base, len(probe_vocabulary(adapter)[0])) + notes
    shares: dict = {}
    if calibrate:
        shares = null_shares(adapter, n_tokens, n_examples, seed)
        notes.append(
            "calibration: share of the re-initialised model's heads that pass (same probes and readings of the weights): "
            + ", ".join(f"{role} {share:.1%}" for role, share in shares.items())
        )
    table, more = _detect_circuits(adapter, base.table, n_examples, seed)
    return DecoderTaxonomy(table, tuple(notes + more), base.sink_ratio, shares)
