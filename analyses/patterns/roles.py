"""Name what each head does, with the evidence: threshold rules over head features.

Roles (stable strings, :data:`ROLES`) and the rule that grants each (defaults in
:class:`RoleThresholds`, features from :mod:`probe.analyses.patterns.role_features`):

=================  ===========================================  =======================
role               rule (default)                               source
=================  ===========================================  =======================
previous-token     ``argmax_prev ≥ 0.9``                        Voita et al. 2019
next-token         ``argmax_next ≥ 0.9``                        Voita et al. 2019
self               ``argmax_self ≥ 0.9``                        Voita et al. 2019
special-token      ``to_special ≥ 0.5`` ([CLS]/[SEP], "no-op")  Clark et al. 2019
punctuation        ``to_punct ≥ 0.5``                           Clark et al. 2019
broad              ``entropy_ratio ≥ 0.9`` or                   Clark et al. 2019
                   ``max_attention ≤ 0.1``
rare-word          ``argmax_rare ≥ 0.5`` and ≥ 2 × chance       Voita et al. 2019
induction          ``induction ≥ 0.5`` (causal)                 Olsson et al. 2022
duplicate-token    ``duplicate ≥ 0.5`` (causal)                 Olsson et al. 2022
syntactic (<rel>)  accuracy ≥ positional baseline + 10 points   Voita et al. 2019
                   on a relation with ≥ 100 instances
coreference        same rule, on coreference rows               Clark et al. 2019
attends <a>, <b>   no rule cleared: its two largest components  (:mod:`.vocabulary`)
=================  ===========================================  =======================

Voita's 90% and 10-point margins and Clark's 50% / 10% are the papers' numbers; the
0.5 for rare-word, induction and duplicate-token and the 100-instance floor are ours
(the papers name no threshold there) and are parameters.

When several rules clear, evidence of a specific function (syntactic, coreference) wins;
otherwise the rule with the largest normalised margin ``(value − t) / (1 − t)`` wins.
``confidence`` is the deciding feature's value (``1 − max_attention`` for broad-by-peak,
the head's accuracy for syntactic/coreference); for a head named by its profile it is
``1 − closeness`` of the nearest rule (``value / threshold``), so 0 means "almost
labelled". A feature that is ``NaN`` (no [CLS]/[SEP] in GPT-2, no duplicates in an
encoder) drops its role instead of failing.
"""

from __future__ import annotations

import logging
from collections.abc import Sized
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional, Sequence

import pandas as pd

from probe.analyses.patterns.head_clusters import HeadClusters, HeadDivergenceAccumulator, clusters_from
from probe.analyses.patterns.vocabulary import (
    base_role,
    choose_rule,
    component_names,
    nearest_rule,
    profile_role,
)
from probe.analyses.patterns.role_features import (
    FEATURES,
    HeadFeatureAccumulator,
    LEVELS,
    layer_summary,
    token_frequencies,
)
from probe.errors import InputError

if TYPE_CHECKING:
    from probe.models.adapter import ModelAdapter
    from probe.runs.blocks import Runner

log = logging.getLogger(__name__)

__all__ = [
    "roles_streamed",
    "ROLES",
    "RoleThresholds",
    "RoleClassifier",
    "RolesReport",
    "assign_roles",
    "head_roles",
    "roles_report",
    "report_from",
    "role_counts",
    "base_role",
    "SYNTAX_COLUMNS",
]

ROLES = (
    "previous-token",
    "next-token",
    "self",
    "special-token",
    "punctuation",
    "broad",
    "rare-word",
    "induction",
    "duplicate-token",
    "syntactic",
    "coreference",
    "profile",
)
SYNTAX_COLUMNS = ("relation", "direction", "layer", "head", "accuracy", "baseline_offset", "baseline_accuracy", "count")
_COREF_RELATIONS = {"coref", "coreference"}


@dataclass(frozen=True)
class RoleThresholds:
    """Rule thresholds (see the module docstring for sources).

    Attributes:
        positional: share of rows whose maximum sits on one relative position (0.9).
        special: attention mass to special tokens (0.5).
        punctuation: attention mass to punctuation (0.5).
        broad_entropy_ratio: entropy / uniform entropy (0.9).
        broad_max_attention: mean largest weight of a row (0.1).
        rare_word: share of rows whose maximum is on the rarest token (0.5).
        rare_over_chance: ``argmax_rare`` must also be this many times a random head's (2).
        induction: Olsson induction score (0.5).
        duplicate: Olsson duplicate-token score (0.5).
        syntactic_margin: accuracy points above the best positional baseline (10).
        syntax_min_count: fewest instances of a relation to trust it (100).
    """

    positional: float = 0.9
    special: float = 0.5
    punctuation: float = 0.5
    broad_entropy_ratio: float = 0.9
    broad_max_attention: float = 0.1
    rare_word: float = 0.5
    rare_over_chance: float = 2.0
    induction: float = 0.5
    duplicate: float = 0.5
    syntactic_margin: float = 10.0
    syntax_min_count: int = 100

    def __post_init__(self):
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in ("syntactic_margin", "syntax_min_count", "rare_over_chance"):
                if not v >= 0:
                    raise InputError(f"threshold {f.name} must be ≥ 0, got {v}")
            elif not 0 < v < 1:
                raise InputError(f"threshold {f.name} must lie strictly between 0 and 1, got {v}")


def _rules(t: RoleThresholds) -> list[tuple[str, str, float]]:
    """(role, feature, threshold) for the ≥ rules, in tie-break order."""
    return [
        ("induction", "induction", t.induction),
        ("duplicate-token", "duplicate", t.duplicate),
        ("previous-token", "argmax_prev", t.positional),
        ("next-token", "argmax_next", t.positional),
        ("self", "argmax_self", t.positional),
        ("rare-word", "argmax_rare", t.rare_word),
        ("special-token", "to_special", t.special),
        ("punctuation", "to_punct", t.punctuation),
        ("broad", "entropy_ratio", t.broad_entropy_ratio),
    ]


def _shares(features: pd.DataFrame, h: int) -> dict:
    """The profile components of row ``h`` (the rarest token and punctuation only above twice
    what a head attending at random gets, as in the pattern claim)."""
    from probe.analyses.patterns.vocabulary import COMPONENTS

    out = {}
    for c in COMPONENTS:
        if c in features.columns:
            v = float(features[c].iat[h])
            if c == "to_rare" and "rare_chance" in features.columns and v < 2.0 * float(features["rare_chance"].iat[h]):
                continue
            chance = features.attrs.get("punct_chance")
            if c == "to_punct" and chance is not None and v < 2.0 * chance:  # what a random head gets says nothing
                continue
            out[c] = v
    return out


def _chance(shares: dict) -> dict:
    return {k: shares[k] for k in ("rare_chance", "punct_chance") if k in shares}


def _check_evidence(table: Optional[pd.DataFrame], name: str) -> Optional[pd.DataFrame]:
    if table is None:
        return None
    if not isinstance(table, pd.DataFrame):
        raise InputError(f"{name} must be a pandas DataFrame with columns {list(SYNTAX_COLUMNS)}")
    table = table.copy()
    if name == "coreference" and "baseline_accuracy" not in table.columns:
        # probe.analyses.structure.coref's best(): setting, layer, head, accuracy, nearest_mention,
        # nearest_agreeing, count — the stronger baseline is the one to beat
        bases = [c for c in ("nearest_mention", "nearest_agreeing") if c in table.columns]
        if bases:
            table["baseline_accuracy"] = table[bases].max(axis=1)
    if "relation" not in table.columns and "setting" in table.columns:
        table["relation"] = table["setting"]
    missing = [
        c for c in ("relation", "layer", "head", "accuracy", "baseline_accuracy", "count") if c not in table.columns
    ]
    if missing:
        raise InputError(
            f"{name} table lacks columns {missing}; expected the syntax analysis's "
            f"best.csv columns {list(SYNTAX_COLUMNS)}"
        )
    t = table.copy()
    scale = 100.0 if max(t["accuracy"].max(), t["baseline_accuracy"].max()) <= 1.0 else 1.0
    t["acc_pts"] = t["accuracy"] * scale
    t["base_pts"] = t["baseline_accuracy"] * scale
    return t


def _evidence(features: pd.DataFrame, syntax, coreference, t: RoleThresholds) -> dict:
    """(layer, head) → (role, confidence, decided_by) from the syntax/coreference tables."""
    out: dict = {}
    tables = []
    syn = _check_evidence(syntax, "syntax")
    if syn is not None:
        is_coref = syn["relation"].astype(str).str.lower().isin(_COREF_RELATIONS)
        tables += [(syn[~is_coref], "syntactic"), (syn[is_coref], "coreference")]
    coref = _check_evidence(coreference, "coreference")
    if coref is not None:
        tables.append((coref, "coreference"))
    known = set(zip(features["layer"], features["head"]))
    for table, kind in tables:
        for r in table.itertuples(index=False):
            margin = r.acc_pts - r.base_pts
            if r.count < t.syntax_min_count or margin < t.syntactic_margin:
                continue
            key = (int(r.layer), int(r.head))
            if key not in known:
                continue
            role = "coreference" if kind == "coreference" else f"syntactic ({r.relation})"
            direction = f" {r.direction}" if "direction" in table.columns else ""
            base = f" (offset {r.baseline_offset:+d})" if "baseline_offset" in table.columns else ""
            why = (
                f"{r.relation}{direction}: accuracy {r.acc_pts:.1f} vs positional baseline "
                f"{r.base_pts:.1f}{base}, n={int(r.count)}"
            )
            if key not in out or margin > out[key][3]:
                out[key] = (role, r.acc_pts / 100.0, why, margin)
    return out


def assign_roles(
    features: pd.DataFrame,
    thresholds: Optional[RoleThresholds] = None,
    syntax: Optional[pd.DataFrame] = None,
    coreference: Optional[pd.DataFrame] = None,
) -> pd.DataFrame:
    """Label each head from its features (no fitting: threshold rules).

    Args:
        features: :func:`probe.analyses.patterns.role_features.head_features` output (one row per
            head; extra columns, e.g. ``word_*``, are carried along).
        thresholds: :class:`RoleThresholds` (defaults from the literature).
        syntax: optional per-relation table of the syntax analysis (``best.csv``:
            ``relation, direction, layer, head, accuracy, baseline_offset,
            baseline_accuracy, count``; accuracy as percent or fraction). Rows whose
            relation is ``coref``/``coreference`` count as coreference evidence.
        coreference: optional table of the same shape, all rows coreference evidence;
            :meth:`probe.analyses.structure.coref.CorefAccuracy.best` 's table (``setting, layer, head,
            accuracy, nearest_mention, nearest_agreeing, count``) is read too, the
            stronger of its two baselines being the one to beat.

    Returns:
        ``DataFrame`` ``layer, head, role, confidence, decided_by, also`` then every
        feature column, one row per head. ``also`` lists the other roles whose rule
        cleared (``;``-separated).

    Raises:
        ValueError: missing feature columns, malformed evidence tables.
    """
    t = thresholds or RoleThresholds()
    need = ["layer", "head"] + [f for _, f, _ in _rules(t)] + ["max_attention", "rare_chance"]
    missing = [c for c in need if c not in features.columns]
    if missing:
        raise InputError(f"feature table lacks columns {missing}; compute it with head_features()")
    rules = _rules(t)
    rule_t = {
        "induction": t.induction,
        "duplicate": t.duplicate,
        "positional": t.positional,
        "rare": t.rare_word,
        "special": t.special,
        "punctuation": t.punctuation,
        "broad_entropy_ratio": t.broad_entropy_ratio,
    }
    punct_chance = features.attrs.get("punct_chance")
    columns = [f for _, f, _ in rules] + ["max_attention", "rare_chance"]
    evidence = _evidence(features, syntax, coreference, t)

    roles, conf, why, also = [], [], [], []
    for h in range(len(features)):
        shares = {c: float(features[c].iat[h]) for c in columns}
        if punct_chance is not None:
            shares["punct_chance"] = float(punct_chance)
        # one rule for probe roles and the pattern claim (probe.analyses.patterns.vocabulary.choose_rule)
        hit = choose_rule(shares, rule_t, t.rare_over_chance, broad_max_attention=t.broad_max_attention)
        names = [
            r
            for r, f, _ in rules
            if choose_rule({f: shares[f], **_chance(shares)}, rule_t, t.rare_over_chance) is not None
        ]
        key = (int(features["layer"].iat[h]), int(features["head"].iat[h]))
        if key in evidence:
            role, c, w, _ = evidence[key]
        elif hit is not None and hit[1] == "max_attention":
            role, c = "broad", 1.0 - hit[3]
            w = f"max_attention={hit[3]:.3f} ≤ {t.broad_max_attention:g}"
        elif hit is not None:
            role, feat, x, c = hit
            w = f"{feat}={c:.3f} ≥ {x:g}"
        else:
            near = nearest_rule(shares, rule_t, t.rare_over_chance)
            c = float(max(0.0, 1.0 - near[3] / near[2])) if near is not None else 1.0
            role = profile_role(_shares(features, h), component_names())
            w = (
                f"no rule cleared; closest {near[0]}: {near[1]}={near[3]:.3f} < {near[2]:g}"
                if near is not None
                else "no rule cleared"
            )
        if hit is not None and hit[1] == "max_attention":
            names.append("broad")
        roles.append(role)
        conf.append(c)
        why.append(w)
        also.append(";".join(n for n in dict.fromkeys(names) if n != base_role(role)))
    out = pd.DataFrame(
        {
            "layer": features["layer"].to_numpy(),
            "head": features["head"].to_numpy(),
            "role": roles,
            "confidence": conf,
            "decided_by": why,
            "also": also,
        }
    )
    rest = features.drop(columns=["layer", "head"])
    return pd.concat([out, rest.reset_index(drop=True)], axis=1)


class RoleClassifier:
    """Threshold-rule head-role classifier in the scikit-learn estimator shape.

    Parameters are set in ``__init__`` (thresholds as keyword arguments of
    :class:`RoleThresholds`); ``fit(source)`` streams once over a
    :class:`probe.store.directory.Store` or any iterable of :class:`AttentionMaps` and sets:

    * ``features_``: token-level features, plus ``word_<feature>`` columns;
    * ``roles_``: :func:`assign_roles` output (the roles.csv table);
    * ``n_examples_``: how many examples were used.

    Args:
        level: which level's features decide the roles (``"token"`` or ``"word"``);
            both levels are always reported.
        word_level: also compute word-level features (one extra aggregation per example).
        min_examples: below this many examples a warning says the estimate is unstable.
        frequencies: unit → count for the rare-word features (default: the corpus's own).
        **thresholds: fields of :class:`RoleThresholds`.

    Raises:
        ValueError: unknown level or threshold, bad threshold values (in ``__init__``);
            no examples, cross-attention (in ``fit``).
    """

    def __init__(
        self,
        level: str = "token",
        word_level: bool = True,
        min_examples: int = 100,
        frequencies: Optional[Mapping[str, int]] = None,
        progress: bool = False,
        **thresholds,
    ):
        if level not in LEVELS:
            raise InputError(f"level must be one of {LEVELS}, got {level!r}")
        if level == "word" and not word_level:
            raise InputError("level='word' needs word_level=True")
        known = {f.name for f in fields(RoleThresholds)}
        unknown = sorted(set(thresholds) - known)
        if unknown:
            raise InputError(f"unknown threshold(s) {unknown}; known: {sorted(known)}")
        self.level = level
        self.word_level = word_level
        self.min_examples = int(min_examples)
        self.frequencies = frequencies
        self.progress = progress
        self.thresholds = RoleThresholds(**thresholds)

    def get_params(self) -> dict:
        return dict(
            level=self.level, word_level=self.word_level, min_examples=self.min_examples, **asdict(self.thresholds)
        )

    def fit(
        self,
        source: Iterable,
        syntax: Optional[pd.DataFrame] = None,
        coreference: Optional[pd.DataFrame] = None,
        observers: Sequence = (),
    ) -> "RoleClassifier":
        """Stream once over ``source``; ``syntax``/``coreference`` as in
        :func:`assign_roles`; each of ``observers`` gets ``update(maps)`` for every
        example of the same pass (e.g. a :class:`HeadDivergenceAccumulator`)."""
        levels = ("token", "word") if self.word_level else ("token",)
        accs = {}
        for lv in levels:
            freqs = self.frequencies
            if freqs is None and getattr(source, "records", None) is not None:
                freqs = token_frequencies(source, lv)  # from a Store's index: no tensor read
            accs[lv] = HeadFeatureAccumulator(level=lv, frequencies=freqs)
        it = source
        if self.progress:
            from tqdm.auto import tqdm

            it = tqdm(source, total=len(source) if isinstance(source, Sized) else None, unit="ex", desc="head roles")
        from probe.analyses.patterns.role_features import is_punctuation

        words = punct = 0
        for maps in it:
            for t, sp in zip(maps.tokens, maps.special_mask.tolist()):  # the share a random head puts on punctuation
                if not sp:
                    words += 1
                    punct += is_punctuation(str(t))
            for acc in accs.values():
                acc.update(maps)
            for obs in observers:
                obs.update(maps)
        self.punct_chance_ = punct / max(words, 1)
        return self.fit_tables(
            {lv: acc.result() for lv, acc in accs.items()},
            accs["token"].n_examples,
            syntax=syntax,
            coreference=coreference,
        )

    def fit_tables(
        self,
        tables: Mapping[str, pd.DataFrame],
        n_examples: int,
        syntax: Optional[pd.DataFrame] = None,
        coreference: Optional[pd.DataFrame] = None,
    ) -> "RoleClassifier":
        """Fit from feature tables already accumulated (``{"token": …, "word": …}``, as
        :func:`head_features` returns them, e.g. merged from many workers)."""
        levels = ("token", "word") if self.word_level else ("token",)
        n = n_examples
        self.n_examples_ = n
        if n < self.min_examples:
            log.warning(
                "head roles estimated from %d example(s), fewer than %d: the features "
                "(and so the roles) are unstable; give a larger corpus",
                n,
                self.min_examples,
            )
        else:
            log.info("head roles estimated from %d examples", n)
        main = tables[self.level]
        features = main.copy()
        other = [lv for lv in levels if lv != self.level]
        for lv in other:
            extra = tables[lv][list(FEATURES) + ["n_rows"]].add_prefix(f"{lv}_")
            features = pd.concat([features, extra.reset_index(drop=True)], axis=1)
        if features[["to_cls", "to_sep", "to_special"]].isna().all().all():
            log.info("no special tokens in the corpus (e.g. GPT-2): the special-token role is not assigned")
        features.attrs["punct_chance"] = getattr(self, "punct_chance_", None)
        self.features_ = features
        self.roles_ = assign_roles(features, self.thresholds, syntax=syntax, coreference=coreference)
        return self


def head_roles(
    source: Iterable,
    syntax: Optional[pd.DataFrame] = None,
    coreference: Optional[pd.DataFrame] = None,
    **params: Any,
) -> pd.DataFrame:
    """Roles of every head over a corpus: ``RoleClassifier(**params).fit(source).roles_``.

    Returns ``layer, head, role, confidence, decided_by, also`` and every feature.
    """
    return RoleClassifier(**params).fit(source, syntax=syntax, coreference=coreference).roles_


def role_counts(roles: pd.DataFrame) -> pd.DataFrame:
    """Number of heads per role: ``role, heads`` (syntactic relations pooled as
    ``syntactic``), in :data:`ROLES` order, roles with no head left out."""
    if "role" not in roles.columns:
        raise InputError("roles table lacks the 'role' column; compute it with head_roles()")
    counts = roles["role"].map(base_role).value_counts()
    order = [r for r in ROLES if r in counts.index] + sorted(set(counts.index) - set(ROLES))
    return pd.DataFrame({"role": order, "heads": [int(counts[r]) for r in order]})


@dataclass(frozen=True)
class RolesReport:
    """Everything ``probe roles`` writes: per-head roles with their features and
    clusters, the per-layer share of attention to [CLS]/[SEP]/punctuation, the number
    of heads per role, and the clustering itself."""

    roles: pd.DataFrame
    layers: pd.DataFrame
    counts: pd.DataFrame
    clusters: Optional[HeadClusters]
    n_examples: int

    def to_frame(self) -> pd.DataFrame:
        """The roles.csv table: ``layer, head, role, confidence, …features…, mds_x,
        mds_y, cluster``."""
        return self.roles


def roles_report(
    source: Iterable,
    syntax: Optional[pd.DataFrame] = None,
    coreference: Optional[pd.DataFrame] = None,
    n_clusters: Optional[int] = 8,
    cluster_examples: Optional[int] = 100,
    seed: int = 0,
    **params: Any,
) -> RolesReport:
    """Roles, features and Clark et al. (2019) clusters of every head in one pass.

    Args:
        source: a Store or an iterable of AttentionMaps (read once).
        syntax, coreference: optional evidence tables (see :func:`assign_roles`).
        n_clusters: agglomerative clusters (``None``: no clustering).
        cluster_examples: the JS divergences use the first N examples (their cost
            grows with ``(layers·heads)²``); ``None`` for all.
        seed: MDS random state.
        **params: :class:`RoleClassifier` parameters and thresholds.

    Raises:
        ValueError: as :class:`RoleClassifier` and :func:`probe.analyses.patterns.head_clusters.cluster_heads`.
    """
    div = HeadDivergenceAccumulator(cluster_examples) if n_clusters else None
    clf = RoleClassifier(**params).fit(source, syntax=syntax, coreference=coreference, observers=[div] if div else [])
    return report_from(clf, div, n_clusters, seed)


def roles_streamed(
    model: ModelAdapter | Runner,
    items: Sequence,
    syntax: Optional[pd.DataFrame] = None,
    coreference: Optional[pd.DataFrame] = None,
    n_clusters: Optional[int] = 8,
    cluster_examples: Optional[int] = 100,
    seed: int = 0,
    *,
    batch_size: int = 16,
    progress: bool = False,
    **params: Any,
) -> RolesReport:
    """:func:`roles_report` of a corpus streamed through the model (each batch's layers
    joined as they pass: no example's maps are held beyond its batch; the head × head
    divergences of the clustering are summed over the first ``cluster_examples``).

    Args:
        model: a :class:`probe.models.ModelAdapter` (runs here), or a runner of
            :mod:`probe.runs.blocks` (e.g. an engine's workers, a block of the corpus each).
        items: the corpus as items (:func:`probe.runs.blocks.corpus_items`: texts with word spans).
        syntax, coreference, n_clusters, cluster_examples, seed, params: as :func:`roles_report`.

    Raises:
        InputError: as :func:`roles_report`, and an empty corpus.
    """
    from probe.analyses.patterns.role_features import PunctuationShare
    from probe.analyses.patterns.head_clusters import KeptDivergence
    from probe.analyses.patterns.role_features import LayerwiseHeadFeatures
    from probe.runs.blocks import as_runner, stream_into

    items = list(items)
    keep = range(min(cluster_examples or len(items), len(items))) if n_clusters else ()
    accs = [LayerwiseHeadFeatures("token"), LayerwiseHeadFeatures("word"), KeptDivergence(keep), PunctuationShare()]
    token, word, kept, punct = stream_into(as_runner(model, progress), items, accs, batch_size=batch_size).accumulators
    clf = RoleClassifier(**params)
    clf.punct_chance_ = punct.result()  # as RoleClassifier.fit counts it over the same maps
    clf.fit_tables(
        {"token": token.result(), "word": word.result()}, token.n_examples, syntax=syntax, coreference=coreference
    )
    return report_from(clf, kept.result() if n_clusters else None, n_clusters, seed)


def report_from(
    clf: RoleClassifier, div: Optional[HeadDivergenceAccumulator], n_clusters: Optional[int], seed: int = 0
) -> RolesReport:
    """The :class:`RolesReport` of a fitted classifier and (optionally) filled divergences."""
    roles, clusters = clf.roles_, None
    if div is not None:
        clusters = clusters_from(div.result(), n_clusters=8 if n_clusters is None else n_clusters, seed=seed)
        roles = roles.merge(clusters.to_frame(), on=["layer", "head"], how="left")
    return RolesReport(
        roles=roles,
        layers=layer_summary(clf.features_),
        counts=role_counts(roles),
        clusters=clusters,
        n_examples=clf.n_examples_,
    )
