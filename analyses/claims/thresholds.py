"""Every threshold and test a claim uses, named once, with the paper or reason it comes from.

A claim names the threshold it was judged against (``Claim.threshold``); the report's
settings section lists :func:`thresholds_in_force`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Threshold:
    """A named value and where it comes from."""

    name: str
    value: object
    source: str


_ALL = {}


def _t(name: str, value, source: str):
    _ALL[name] = Threshold(name, value, source)
    return value


# ---- statistics -------------------------------------------------------------------------
#: false discovery rate controlled across heads (and across head × relation for structure)
FDR = _t("fdr", 0.05, "Benjamini & Hochberg (1995) step-up procedure, q = 0.05 across all tests of a claim kind")
#: bootstrap resamples and coverage of every interval
N_BOOT = _t("n_boot", 1000, "percentile bootstrap over examples/sentences (Efron 1979)")
CONFIDENCE = _t("confidence", 0.95, "two-sided 95% intervals")
#: the paired test of an intervention against its null
PAIRED_TEST = _t(
    "paired_test",
    "wilcoxon signed-rank, one-sided",
    "Wilcoxon (1945): per-example effect minus null effect; no normality assumed",
)

# ---- pattern ----------------------------------------------------------------------------
#: share of query rows whose maximum sits on one relative position
POSITIONAL = _t("positional", 0.9, "Voita et al. (2019): positional heads point to the same offset in ≥ 90% of rows")
#: attention mass to special tokens / punctuation for a "sink" role
SPECIAL = _t("special", 0.5, "Clark et al. (2019): heads putting over half of their attention on [CLS]/[SEP]")
PUNCTUATION = _t("punctuation", 0.5, "Clark et al. (2019), attention to punctuation, same bar as special tokens")
#: a share of attention to a kind of token must also be this many times the share of such tokens
OVER_CHANCE = _t(
    "over_chance",
    2.0,
    "as for Voita et al.'s rare-word head: twice what a head attending at random "
    "gets (a corpus of brackets is all punctuation)",
)
#: Olsson et al.'s induction / duplicate-token scores (mean mass, causal models only)
INDUCTION = _t("induction", 0.5, "Olsson et al. (2022): mass on the token after an earlier occurrence")
DUPLICATE = _t("duplicate", 0.5, "Olsson et al. (2022): mass on earlier occurrences of the same token")
#: rows whose maximum is on the rarest token, and how far above a random head
RARE = _t("rare", 0.5, "Voita et al. (2019): rare-word head points to the rarest token in 66% of rows; 50% here")
#: broad attention: entropy near the uniform row's
BROAD_ENTROPY = _t("broad_entropy_ratio", 0.9, "Clark et al. (2019) broad heads; entropy ≥ 90% of a uniform row's")
BROAD_MAX_ATTENTION = _t(
    "broad_max_attention", 0.1, "Clark et al. (2019) broad heads: no row puts more than 10% on one token (mean peak)"
)
#: fewest query rows before a pattern is stated
PATTERN_MIN_ROWS = _t("pattern_min_rows", 50, "below 50 query rows a share moves by > 0.1 with one sentence")
#: fewest examples before a pattern is stated (its interval is a bootstrap over examples)
PATTERN_MIN_EXAMPLES = _t(
    "pattern_min_examples",
    10,
    "a share's interval is a bootstrap over examples: fewer than 10 have too few distinct resamples "
    "(as structure_min_sentences); one long sentence gave a zero-width interval",
)

# ---- structure --------------------------------------------------------------------------
#: accuracy above the best fixed-offset baseline (fraction)
STRUCTURE_MARGIN = _t("structure_margin", 0.10, "Voita et al. (2019): 10 points above the positional baseline")
#: fewest instances of a relation before it is tested
STRUCTURE_MIN_COUNT = _t(
    "structure_min_count",
    20,
    "Clark et al. (2019) report relations with ≥ 20 instances (their 'flagged' rows); fewer: not enough evidence",
)
#: fewest sentences for a bootstrap over sentences
STRUCTURE_MIN_SENTENCES = _t(
    "structure_min_sentences", 10, "a bootstrap over fewer than 10 sentences has too few distinct resamples"
)
#: relations never claimed (punctuation attaches anywhere; 'all' pools; root has no head)
STRUCTURE_EXCLUDED = _t("structure_excluded", ("punct", "all", "root"), "Clark et al. (2019) leave these out")

# ---- necessity and weights --------------------------------------------------------------
#: smallest mean harm above the null worth a claim, per metric (below: practically nothing)
MIN_EFFECT = _t(
    "min_effect",
    {"loss": 0.01, "accuracy": 1.0, "prediction-kl": 0.01, "embedding-drift": 0.005, "similarity-structure": 0.02},
    "practical floors in each objective's units: 0.01 nats of loss, 1 point of accuracy, 0.005 of "
    "1−cos drift, 0.02 of 1−ρ similarity structure (see FLOOR_SOURCES); other objectives: 0",
)
#: why each floor, per objective
FLOOR_SOURCES = _t(
    "floor_sources",
    {
        "loss": "0.01 nats per token: a perplexity change of 1%, below what LM comparisons report as a difference",
        "accuracy": "1 percentage point of task accuracy (accuracy is scored in percent)",
        "prediction-kl": "0.01 nats of KL of the predicted class distribution, the loss floor's size "
        "(a change of the predicted probabilities below what a loss floor of 0.01 nats allows)",
        "embedding-drift": "1−cos 0.005: a sentence embedding moved by less keeps its neighbours",
        "similarity-structure": "1−ρ 0.02: each sentence's similarity ranking keeps Spearman ρ ≥ 0.98 with the clean "
        "one, 2 points on the Spearman×100 scale sentence-embedding benchmarks report "
        "(Reimers & Gurevych 2019)",
    },
    "each objective's floor with its reason",
)
#: the null of every removal: the same perturbation turned in a random direction
NULL = _t(
    "null",
    "random rotation of the removed vector (context only, never the test)",
    "the head's output (or the change of it) minus a randomly rotated copy: same norm at every position, "
    "random direction (a noise floor the metric can reach, unlike 0 for a non-negative metric)",
)
#: share of the removal's harm uniform weights must reproduce for a "routing" head
ROUTING_SHARE = _t(
    "routing_share",
    0.5,
    "a head whose uniform weights do at least half the harm of removing it "
    "routes information by where it looks; below, and with removal under the "
    "floor, the head is an inert sink (Clark et al. 2019's no-op reading of "
    "attention to [SEP]; Xiao et al. 2023's attention sinks)",
)
#: the power a "does not hold" states its detectable effect at
POWER = _t("power", 0.8, "the smallest effect detectable with 80% power at one-sided level q (Cohen 1988)")
#: fewest examples for a paired test
MIN_EXAMPLES = _t("min_examples", 8, "the one-sided Wilcoxon test cannot reach p < 0.01 with fewer than 7 pairs")

# ---- redundancy -------------------------------------------------------------------------
GROUP_MIN = _t("group_min", 2, "a group is two or more heads that are not needed alone and share a named pattern")

# ---- attribution ------------------------------------------------------------------------
#: a target must beat the majority class on held-out data with a CI excluding it
TARGET_CONFIDENCE = _t("target_confidence", 0.95, "Wilson (1927) score interval of held-out accuracy")
#: agreement: τ > 0 and significant in at least this share of examples
AGREEMENT_SHARE = _t(
    "agreement_share",
    0.5,
    "Jain & Wallace (2019): a head agrees with attributions when its ranking correlates significantly in most examples",
)

#: the attribution claim's resolution: how far from AGREEMENT_SHARE a head's rate of significant
#: agreement may be and still be called wrongly with probability above 1 − POWER
AGREEMENT_MARGIN = _t(
    "agreement_margin",
    0.05,
    "the explained examples are as many as it takes for a head significant in 55% of them to be called "
    "agreeing, and one in 45% not, each with 80% power: Jain & Wallace's 'most examples' resolved to 5 points",
)
#: the most examples the report's faithfulness section explains by that rule (a compute cap)
EXPLAIN_CAP = _t(
    "explain_cap",
    256,
    "a compute cap: each explained example costs about 3 CPU-seconds for MiniLM on EWT dev (integrated "
    "gradients, the null model's, the permutations; docs/explanation.md), 256 about 13 CPU-minutes",
)


def thresholds_in_force() -> dict:
    """``name -> {"value", "source"}`` for every threshold above (JSON-able)."""
    return {
        t.name: {"value": list(t.value) if isinstance(t.value, tuple) else t.value, "source": t.source}
        for t in _ALL.values()
    }


def floor_source(name: str) -> str:
    """Why :func:`min_effect` of the objective named ``name`` is what it is."""
    return FLOOR_SOURCES.get(str(name), "no practical floor stated for this objective: 0")


def min_effect(name: str) -> float:
    """:data:`MIN_EFFECT` of the objective named ``name`` (``Objective.name``, which a saved
    sweep records; 0 for an objective without a stated floor)."""
    return float(MIN_EFFECT.get(str(name), 0.0))
