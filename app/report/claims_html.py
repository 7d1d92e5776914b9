"""The claims block of a head page: each claim as a sentence with its unit, interval,
count, null and threshold (:mod:`probe.analyses.claims`)."""

from __future__ import annotations

from .html import esc

STATUS_CLASS = {"holds": "ran", "does not hold": "muted", "not tested": "skipped", "not enough evidence": "skipped"}
TITLES = {"pattern": "Pattern", "structure": "Structure", "necessity": "Necessity", "redundancy": "Redundancy",
          "weights": "Do the weights matter", "attribution": "Agreement with attributions"}


def _n(v, pct: bool = False) -> str:
    if v is None or v != v:
        return "—"
    return f"{v:.0%}" if pct else f"{v:.3g}"


def claim_sentence(kind: str, c) -> str:
    """One claim (a :class:`probe.analyses.claims.claim.Claim`) in words."""
    if c.status in ("not tested", "not enough evidence"):
        return c.reason.removeprefix("not tested: ") or "no reason recorded"
    ci = f" [{_n(c.ci_low, kind == 'pattern')}, {_n(c.ci_high, kind == 'pattern')}]"
    if kind == "pattern":
        if c.holds:
            return (f"{c.statement}: {c.unit} {_n(c.effect, True)}{ci} (95% CI over examples) ≥ {_n(c.null, True)} "
                    f"({c.threshold}), over {c.count} query rows; profile: {c.reason.split('profile: ')[-1]}")
        return f"no role rule cleared its threshold over {c.count} query rows; largest components: {c.statement}"
    if kind == "structure":
        acc = c.extra.get("accuracy")
        verb = "follows" if c.holds else "best relation"
        return (f"{verb} {c.statement}: accuracy {_n(acc, True)} vs best fixed offset {_n(c.null, True)}, "
                f"margin {_n(c.effect, True)}{ci} (bootstrap over {c.extra.get('sentences')} sentences), "
                f"{c.count} instances, p={_n(c.extra.get('p'))}"
                f"{' (BH significant)' if c.extra.get('bh_significant') else ''}; "
                f"needs margin ≥ {c.threshold}")
    if kind in ("necessity", "weights"):
        what = "removing the head" if kind == "necessity" else "uniform attention weights (values kept)"
        m = c.extra.get("metric", "")
        out = (f"{what}: {m} harm {_n(c.extra.get('harm'))} vs null {_n(c.null)} (same-norm random direction); "
               f"excess {_n(c.effect)}{ci} over {c.count} examples, p={_n(c.extra.get('p'))}"
               f"{' (BH significant)' if c.extra.get('bh_significant') else ' (not significant after BH)'}, "
               f"floor {_n(c.extra.get('min_effect'))}")
        if kind == "necessity" and c.extra.get("importance_rank") is not None:
            out += (f"; gradient importance rank {c.extra['importance_rank']}/{c.extra.get('of')} vs removal rank "
                    f"{c.extra.get('removal_rank')} "
                    f"(Spearman ρ over heads {_n(c.extra.get('rank_agreement_spearman'))})")
        if kind == "weights" and c.extra.get("share_of_removal") is not None:
            out += f"; uniform weights do {_n(c.extra['share_of_removal'], True)} of removing the head"
        return out
    if kind == "redundancy":
        return (f"{c.statement}: {c.reason}; harm {_n(c.extra.get('harm'))} vs null {_n(c.null)}, excess "
                f"{_n(c.effect)}{ci} over {c.count} examples, p={_n(c.extra.get('p'))}")
    if kind == "attribution":
        return f"{c.statement}: {c.reason}; {c.extra.get('target', '')}"
    return c.reason


def claims_block(data, layer: int, head: int) -> str:
    """HTML list of the head's claims ('' when the claims section did not run)."""
    claims = getattr(data, "claims", None)
    if claims is None or (layer, head) not in claims.claims:
        return ""
    items = []
    for kind, c in claims.claims[(layer, head)].items():
        items.append(f"<li><b>{esc(TITLES.get(kind, kind))}</b> — <span class=\"{STATUS_CLASS[c.status]}\">"
                     f"{esc(c.status)}</span>: {esc(claim_sentence(kind, c))}</li>")
    return f"<h2>Claims</h2><ul class=\"claims\">{''.join(items)}</ul>"


def head_claims_html(data, layer: int, head: int) -> str:
    """The top of a head's page (:func:`probe.app.report.pages.head_html`): its one-line
    verdict, then its claims."""
    return f"<p class=\"verdict\">{esc(data.verdicts[(layer, head)])}</p>" + claims_block(data, layer, head)
