"""``probe roles`` and the report's roles section: name what each head does, with the
evidence (previous-token, special-token, broad, induction, syntactic …)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from probe.errors import InputError
from probe.app.registry import STREAMING, Analysis, Param, Result
from probe.app.registry.presentation import HeadBlock, Presentation, Streamed, TableView, VerdictHint
from probe.app.registry.results import RolesResult, SyntaxResult

if TYPE_CHECKING:
    from probe.app.registry import Context

#: per-head columns of the roles table shown on the report's head pages
ROLE_FACTS = (
    "role",
    "confidence",
    "decided_by",
    "also",
    "to_cls",
    "to_sep",
    "to_special",
    "to_punct",
    "prev",
    "self",
    "next",
    "positional_share",
    "positional_offset",
    "entropy_ratio",
    "max_attention",
    "argmax_rare",
)
#: relations that are not evidence of a syntactic head (mirrors the syntax section)
NOT_SYNTACTIC = ("punct", "all", "root")


def _thresholds(items) -> dict:
    """NAME=VALUE pairs -> keyword arguments of RoleThresholds (checked)."""
    from probe.analyses.patterns.roles import RoleThresholds

    import math

    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            number = float(value)
        except ValueError:
            sep = ""
        if not sep:
            raise InputError(f"--threshold: expected NAME=VALUE, got {item!r}")
        if not math.isfinite(number):
            raise InputError(f"--threshold: {item!r} is not a finite number")
        if name.strip() in out:  # the last would win silently
            raise InputError(
                f"--threshold: {name.strip()} is given twice ({name.strip()}={out[name.strip()]:g} and {item}); "
                "give each threshold once"
            )
        out[name.strip()] = number
    try:
        RoleThresholds(**out)  # type: ignore[arg-type]  # unknown names are caught below
    except TypeError:
        raise InputError(
            f"--threshold: unknown threshold in {list(out)}; known: {', '.join(RoleThresholds.__dataclass_fields__)}"
        ) from None
    return out


def _evidence(path, name):
    if not path:
        return None
    import pandas as pd

    try:
        return pd.read_csv(path)
    except (OSError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the {name} table {path}: {exc}") from None


def _store(ctx):
    """The ``--store`` to read: an existing one, or one captured into now from the input."""
    store_dir = ctx.params["store"]
    if not ctx.has_input and (Path(store_dir) / "manifest.json").exists():
        return ctx.read_store(store_dir), f"store {store_dir}"
    if not ctx.has_input and not ctx.is_zoo:
        raise InputError(
            f"{store_dir} is not a store (no manifest.json): give an input "
            "(--text, --file or --conllu) to capture into it"
        )
    from probe.runs.pipeline import capture_corpus

    corpus = ctx.corpus.kept
    store = capture_corpus(
        ctx.adapter,
        corpus,
        store_dir,
        batch_size=ctx.params["batch_size"],
        progress=ctx.progress and len(corpus) > 1,
    )
    return store, f"{ctx.adapter.name} on {corpus.source} (store {store_dir})"


def run(ctx: Context) -> Result:
    """Each head's role (Clark et al. 2019's patterns, Kovaleva et al. 2019's classes) from
    the corpus streamed through the model on the run's engine, or from a ``--store``."""
    p = ctx.params
    report, described = _roles(ctx)
    counts = dict(zip(report.counts.role, map(int, report.counts.heads)))
    summary = {"source": described, "n_examples": report.n_examples, "counts": counts}
    if report.clusters is not None:
        summary["cluster_examples"] = report.clusters.divergence.n_examples
    notes = [
        f"{len(report.roles)} heads from {report.n_examples} examples ({described}): "
        + ", ".join(f"{r} {n}" for r, n in counts.items())
    ]
    if report.n_examples < p["min_examples"]:
        notes.append(f"warning: only {report.n_examples} examples (< {p['min_examples']}); the roles are unstable")
    cols = [c for c in ROLE_FACTS if c in report.roles.columns]
    tables = {"roles": report.roles, "layers": report.layers, "counts": report.counts}
    if ctx.model is not None and ctx.adapter.causal:  # a decoder: its taxonomy on its own probe inputs too
        from .decoder_heads import taxonomy_result

        tax = taxonomy_result(ctx.adapter)
        tables["decoder_heads"] = tax.tables["taxonomy"]
        summary["decoder_heads"] = tax.summary["heads"]
        notes.append("decoder taxonomy (decoder_heads.csv): " + "; ".join(tax.notes[-8:]))
    return Result(
        tables=tables,
        per_head=report.roles[["layer", "head"] + cols],
        notes=notes,
        summary=summary,
        summary_name="roles",
        writers=_writers(report, described, p["no_figure"]),
    )


def _roles(ctx: Context) -> tuple:
    """``(RolesReport, described)``: the roles of the ``--store`` (read, or captured into in
    this process) or of the corpus streamed through ``ctx.runner``; ``described`` says of what."""
    from probe.analyses.patterns.roles import roles_report

    p = ctx.params
    settings = dict(
        coreference=_evidence(p["coreference"], "coreference"),
        n_clusters=p["clusters"] or None,
        cluster_examples=p["cluster_examples"],
        level=p["level"],
        min_examples=p["min_examples"],
        **_thresholds(p["threshold"]),
    )
    syntax = _evidence(p["syntax"], "syntax")
    if p["store"] and not ctx.engine.in_process:
        raise InputError(
            f"--store runs in this process, not with --engine {ctx.engine.name} (to capture a store on Ray "
            "actors, use `probe capture --engine ray`)"
        )
    if p["store"]:  # maps read from (or captured into) a store, one example at a time
        source, described = _store(ctx)
        return roles_report(source, syntax=syntax, progress=ctx.progress, **settings), described
    from probe.analyses.patterns.roles import roles_streamed  # the corpus streams wherever the run's engine runs it
    from probe.runs.blocks import corpus_items

    corpus = ctx.corpus.as_given
    report = roles_streamed(ctx.runner, corpus_items(corpus), syntax=syntax, batch_size=p["batch_size"], **settings)
    engine = ctx.engine.name
    return report, f"{ctx.model_name} on {corpus.source}" + (f" (--engine {engine})" if engine != "local" else "")


def _writers(report: Any, described: str, no_figure: bool) -> list:
    """The writers of distances.csv (with clusters) and the role figures (unless ``no_figure``)."""
    writers: list = []
    clusters = report.clusters
    if clusters is not None:

        def distances(d: Path) -> list:
            clusters.distances_frame().to_csv(d / "distances.csv")
            return [d / "distances.csv"]

        writers.append(distances)
    if not no_figure:

        def figures(d: Path) -> list:
            from probe.app.report.roles_figures import head_map_figure, role_grid_figure

            out = [role_grid_figure(report.roles, d / "roles.png", title=f"head roles: {described}")]
            if report.clusters is not None:
                out.append(head_map_figure(report.roles, d / "roles.mds.png"))
            return out

        writers.append(figures)
    return writers


def accumulators(ctx: Context, corpus: Any) -> dict:
    """The report section's sums: the head features of every example at token and word
    level (:class:`probe.analyses.patterns.role_features.LayerwiseHeadFeatures`; the token
    level's kept per example, which the pattern claims take as they are:
    :func:`.claims.summed_by_roles`) and the corpus's punctuation share (the chance rule of
    ``to_punct``)."""
    from probe.analyses.patterns.role_features import PunctuationShare
    from probe.analyses.patterns.role_features import LayerwiseHeadFeatures

    return {
        "token": LayerwiseHeadFeatures("token", keep_examples=True),
        "word": LayerwiseHeadFeatures("word"),
        "punct": PunctuationShare(),
    }


def section(ctx: Context) -> RolesResult:
    """The report's variant: roles fitted from the head features of every example of the
    run (fed from the held maps, or streamed by the engine: ``ctx.accumulated``), with
    the syntax section's best heads as evidence when it ran; as
    :func:`probe.analyses.patterns.roles.head_roles` fits them from whole maps."""
    from probe.analyses.patterns.roles import RoleClassifier

    acc = ctx.accumulated("roles")
    clf = RoleClassifier()
    clf.punct_chance_ = acc["punct"].result()
    n = acc["token"].n_examples
    clf.fit_tables({"token": acc["token"].result(), "word": acc["word"].result()}, n, syntax=syntax_evidence(ctx))
    return section_from(ctx, clf.roles_, n)


def syntax_evidence(ctx: Context) -> Any:
    """The syntax section's best heads (non-syntactic relations left out), or ``None``."""
    syntax = ctx.result_of(SyntaxResult)
    best = syntax.best if syntax else None
    if best is not None:
        best = best[~best["relation"].isin(NOT_SYNTACTIC)]
    return best


def section_from(ctx: Context, roles: Any, n_examples: int) -> RolesResult:
    """The roles section of a roles table however it was fitted (from the kept maps, or
    from head features streamed on an engine: ``probe report --engine``)."""
    from probe.analyses.patterns.roles import role_counts

    cols = [c for c in ROLE_FACTS if c in roles.columns]
    counts = role_counts(roles)
    notes = [COUNTS_NOTE + ", ".join(f"{r} {n}" for r, n in zip(counts["role"], counts["heads"]))]
    if n_examples < 100:
        notes.append(f"roles estimated from {n_examples} examples (fewer than 100: unstable)")
    return RolesResult(
        tables={"roles": roles, "role_counts": counts},
        per_head=roles[["layer", "head"] + cols],
        notes=notes,
        summary={"role_counts": dict(zip(counts["role"], counts["heads"].astype(int)))},
    )


#: the attention profile a head page draws: (label, roles column)
PROFILE = (
    ("[CLS] / first token", "to_cls"),
    ("[SEP] / last token", "to_sep"),
    ("punctuation", "to_punct"),
    ("previous token", "prev"),
    ("itself", "self"),
    ("next token", "next"),
)
#: the shares a verdict reads beside the role
VERDICT_SHARES = ("to_cls", "to_sep", "to_punct", "positional_share")


def head_evidence(result: RolesResult) -> dict:
    """Each head's role with its confidence and the rule that decided it (``role``, over
    the sentences the roles were fitted on), and where its attention goes on average
    (``profile``: the shares of :data:`PROFILE` as ``parts``, over its query tokens)."""
    from probe.app.registry.evidence import HeadEvidence, finite
    from probe.app.report.style import number

    t = result.roles
    if t is None or not len(t):
        return {}
    out = {}
    for rec in t.to_dict("records"):
        role = rec.get("role")
        if not isinstance(role, str) or not role:
            continue
        n_ex, n_rows = rec.get("n_examples"), rec.get("n_rows")
        n_ex = int(n_ex) if finite(n_ex) else None
        n_rows = int(n_rows) if finite(n_rows) else None
        conf = rec.get("confidence")
        text = (
            f"Role: {role}, confidence {number(conf, digits=2)} (0 = no rule cleared, 1 = far past its "
            f"threshold). Why: {rec.get('decided_by', '')}."
        )
        over = f" over {n_rows} query tokens in {n_ex} sentences" if n_rows is not None and n_ex is not None else ""
        out[(int(rec["layer"]), int(rec["head"]))] = [
            HeadEvidence(
                "roles",
                "role",
                text,
                value=float(conf) if finite(conf) else float("nan"),
                count=n_ex,
                count_of="sentences",
                unit="confidence",
                label=role,
                brief=role,
                strong=(role,),
                numbers={k: rec[k] for k in VERDICT_SHARES if finite(rec.get(k))},
            ),
            HeadEvidence(
                "roles",
                "profile",
                f"Where its attention goes, on average{over}:",
                count=n_rows,
                count_of="query tokens",
                headline=False,
                parts=tuple((label, float(rec[k])) for label, k in PROFILE if finite(rec.get(k))),
                numbers={"sentences": n_ex},
            ),
        ]
    return out


def _what(by: dict, cls: str, sep: str) -> str:
    """The verdict's "what" from the head's role (and its best relation, when it looks
    syntactic: :func:`.syntax.is_syntactic`); ``""`` without a role."""
    from probe.app.report.verdict import SILENT

    from .syntax import is_syntactic, syntactic_text

    r = by.get("role", SILENT)
    role = r.label
    if not role:
        return ""
    if role.startswith("syntactic") or (role.startswith("attends ") and is_syntactic(by)):
        return syntactic_text(by) or f"looks syntactic ({role})"
    if role == "special-token":
        c, s = r.number("to_cls") or 0.0, r.number("to_sep") or 0.0
        return f"attends to {sep if s >= c else cls} ({max(c, s):.0%} of its attention)"
    if role in ("previous-token", "next-token", "self"):
        share = r.number("positional_share")
        where = {"previous-token": "the previous token", "next-token": "the next token", "self": "the token itself"}
        return f"attends to {where[role]}" + (f" ({share:.0%} of rows peak there)" if share is not None else "")
    if role == "broad":
        return "attends broadly (no single token stands out)"
    if role == "punctuation":
        p = r.number("to_punct")
        return "attends to punctuation" + (f" ({p:.0%})" if p is not None else "")
    if role.startswith("attends "):  # no rule named it: its two largest components
        return role
    return f"looks like a {role} head"


#: bar colours of an attention profile's parts (the others: the accent)
PROFILE_COLOURS = {"[CLS] / first token": "#bdbdbd", "[SEP] / last token": "#bdbdbd", "punctuation": "#f4a6b7"}


def _block(data, layer: int, head: int) -> str:
    """The head's role (only its closest rule when the pattern claim does not hold) and its
    attention profile as bars."""
    from probe.app.report.evidence import bars_svg, items, one, sentence
    from probe.app.report.style import ACCENT

    role = one(data, layer, head, "roles", "role")
    if role is None:
        return ""
    pattern = one(data, layer, head, "claims", "pattern")
    if pattern is not None and pattern.status != "holds" and role.label:
        # the pattern claim decides whether a role is stated; the roles section's label is then only the closest rule
        out = f"<p>Closest rule (the pattern claim does not hold, so no role is claimed): {sentence(role)}</p>"
    else:
        out = f"<p>{sentence(role)}</p>"
    for profile in items(data, layer, head, "roles", "profile"):
        bars = [(label, value, PROFILE_COLOURS.get(label, ACCENT)) for label, value in profile.parts]
        out += f"<p>{sentence(profile)}</p>" + (bars_svg(bars) if bars else "")
    return out


#: the roles table's leading columns on the index page
TABLE_COLUMNS = (
    "layer",
    "head",
    "role",
    "confidence",
    "decided_by",
    "to_special",
    "to_punct",
    "positional_share",
    "positional_offset",
    "entropy_ratio",
    "n_examples",
    "n_rows",
)


def _pattern_status(claims: dict, layer: Any, head: Any) -> str:
    """The status of the head's pattern claim, or ``""`` when it has none."""
    c = claims.get((int(layer), int(head)), {}).get("pattern")
    return "" if c is None else str(c.status)


def _roles_beside_claims(df: Any, claims: dict) -> Any:
    """The roles table beside the claims: a ``pattern claim`` column after ``role`` with the
    head's status, and the role in parentheses where that claim does not hold (the roles'
    rule names it, the claim does not: a random model's heads all read "broad")."""
    status = [_pattern_status(claims, la, h) for la, h in zip(df["layer"], df["head"])]
    df = df.copy()
    df["role"] = [r if s in ("", "holds") else f"({r})" for r, s in zip(df["role"], status)]
    df.insert(list(df.columns).index("role") + 1, "pattern claim", status)
    return df


#: how the roles section's first note starts (the heads per role, by its rule)
COUNTS_NOTE = "heads per role: "


def _notes_beside_claims(result: Result, claims: dict) -> list:
    """The roles section's notes beside the claims: the heads per role counted as the roles
    table shows them (:func:`_roles_beside_claims`): a head counts for its role only where its
    pattern claim does not reject it (holds, or the head has none); the heads whose pattern
    claim does not hold are counted apart, by the role the roles' rule named."""
    from collections import Counter

    from probe.analyses.patterns.vocabulary import base_role

    notes = list(result.notes)
    roles = result.tables.get("roles")  # a plain Result where the section ran as its streamed form
    if roles is None or not len(roles) or not notes or not notes[0].startswith(COUNTS_NOTE):
        return notes
    held: Counter = Counter()
    rejected: Counter = Counter()
    for layer, head, role in zip(roles["layer"], roles["head"], roles["role"]):
        status = _pattern_status(claims, layer, head)
        (held if status in ("", "holds") else rejected)[base_role(role)] += 1
    order = list(result.tables["role_counts"]["role"]) if "role_counts" in result.tables else sorted(held | rejected)
    line = COUNTS_NOTE + (", ".join(f"{r} {held[r]}" for r in order if held[r]) or "none")
    line += " (a role counts where its pattern claim does not reject it, as in the table)"
    if rejected:
        line += "; named by the rule but not held by the pattern claim, shown in parentheses: " + ", ".join(
            f"({r}) {rejected[r]}" for r in order if rejected[r]
        )
    return [line] + notes[1:]


def _counts_beside_claims(df: Any, claims: dict) -> Any:
    """The role counts beside the claims: of each role's heads, how many hold it as a pattern claim."""
    from probe.analyses.patterns.vocabulary import base_role

    held: dict = {}
    for by_kind in claims.values():
        c = by_kind.get("pattern")
        if c is not None and c.status == "holds":
            held[base_role(c.statement)] = held.get(base_role(c.statement), 0) + 1
    return df.assign(**{"pattern claim holds": [held.get(base_role(r), 0) for r in df["role"]]})


SHOWS = Presentation(
    evidence=head_evidence,
    kinds=("role", "profile"),
    block=HeadBlock("What it attends to", _block, order=10),
    tables={
        "roles": TableView("confidence", False, TABLE_COLUMNS, beside_claims=_roles_beside_claims),
        "role_counts": TableView("heads", beside_claims=_counts_beside_claims),
    },
    verdict=(VerdictHint("what", _what),),
    streamed=Streamed(whole="roles"),
    notes_beside_claims=_notes_beside_claims,
)


ANALYSIS = Analysis(
    "roles",
    "Head roles: what each head does, with the evidence; clusters of similar heads",
    run,
    shows=SHOWS,
    needs=("corpus", "maps"),
    help="Classify every head (previous-token, special-token, broad, induction, …) with its evidence; writes "
    "roles.csv (layer, head, role, confidence, decided_by, also, every feature, mds_x, mds_y, cluster), "
    "layers.csv, counts.csv, distances.csv, roles.json and the figures roles.png, roles.mds.png.",
    params=(
        Param("store", str, None, "read this store (from `probe capture`); with an input, capture into it (resumable)"),
        Param(
            "level", str, "token", "features that decide the roles (both levels are written)", choices=("token", "word")
        ),
        Param("syntax", str, None, "best.csv of the syntax analysis: labels 'syntactic (<rel>)' heads"),
        Param("coreference", str, None, "table of the same shape for coreference"),
        Param("clusters", int, 8, "agglomerative clusters of heads (0: no clustering)", min=0),
        Param("cluster_examples", int, 100, "examples used for the head × head JS divergences", min=1),
        Param("min_examples", int, 100, "warn below this many examples", min=1),
        Param(
            "threshold",
            str,
            None,
            "override a rule threshold, e.g. positional=0.8 (see probe.analyses.patterns.roles.RoleThresholds)",
            multiple=True,
        ),
        Param("batch_size", int, 16, "examples per forward", min=1),
        Param("no_figure", bool, False, "write the tables only"),
    ),
    section=section,
    accumulators=accumulators,
    produces=RolesResult,
    consumes=(SyntaxResult,),
    modules=("probe.analyses.patterns.roles",),
    order=45,
    engines=STREAMING,
    example="probe roles --model zoo:constructed --limit 20 --out out/roles",
)
