"""What the report shows agrees with itself (issue 56, item 7): the roles table and
report.md name a role only where its pattern claim holds, and the grid paints one only
there, on a real random model too; tables captioned "strongest first" are sorted so; the
faithfulness section says in one line why its heads got the verdicts they did; one
objective line per run; the docs site's nav is whole."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pandas as pd

from probe.analyses.claims.claim import Claim

ROOT = Path(__file__).resolve().parents[1]


def _pattern(status: str, statement: str = "broad") -> dict:
    return {"pattern": Claim("pattern", status, statement)}


def test_the_roles_table_names_a_role_only_where_its_pattern_claim_holds():
    """The default report's roles table led with L0H3 "broad", confidence 0.909, while its
    pattern claim did not hold (a re-initialised model's heads are as broad)."""
    from probe.app.report.tables import ranked_table

    roles = pd.DataFrame(
        {"layer": [0, 0, 1], "head": [3, 2, 0], "role": ["broad", "previous-token", "special-token"],
         "confidence": [0.909, 1.0, 0.6], "decided_by": ["e", "a", "t"], "n_examples": [24] * 3}
    )  # fmt: skip
    claims = {(0, 3): _pattern("does not hold"), (0, 2): _pattern("holds", "previous-token"),
              (1, 0): _pattern("holds", "special-token")}  # fmt: skip
    shown = ranked_table("roles", "roles", roles, claims=claims)
    rows = [re.findall(r"<td[^>]*>(.*?)</td>", r) for r in re.findall(r"<tr>(.*?)</tr>", shown)[1:]]
    assert [r[:4] for r in rows] == [
        ["0", "2", "previous-token", "holds"],
        ["0", "3", "(broad)", "does not hold"],
        ["1", "0", "special-token", "holds"],
    ]
    assert "<th>pattern claim</th>" in shown
    assert "(broad)" not in ranked_table("roles", "roles", roles)  # no claims ran: the roles' own words
    counts = pd.DataFrame({"role": ["special-token", "broad", "previous-token"], "heads": [1, 1, 1]})
    shown = ranked_table("roles", "role_counts", counts, claims=claims)
    assert re.findall(r"<tr><td>(.*?)</td><td>(\d+)</td><td>(\d+)</td></tr>", shown) == [
        ("special-token", "1", "1"), ("broad", "1", "0"), ("previous-token", "1", "1"),
    ]  # fmt: skip


def test_report_md_names_a_role_only_where_its_pattern_claim_holds():
    from probe.app.report.outputs import _evidence_cells

    head = {
        "evidence": [{"kind": "role", "headline": True, "brief": "broad", "section": "roles", "text": ""}],
        "claims": {"pattern": {"status": "does not hold"}},
    }
    assert _evidence_cells(head)["role"] == "(broad; pattern claim: does not hold)"
    head["claims"]["pattern"]["status"] = "holds"
    assert _evidence_cells(head)["role"] == "broad"


def test_the_faithfulness_verdict_says_why_in_one_line():
    """All 72 heads of the default report were “relevant, disagrees” with nothing saying
    why: the line states the rule and the two numbers that put every head there."""
    from probe.analyses.explanation.faithfulness import verdict_rule

    v = pd.DataFrame(
        {"layer": [0, 0, 2], "head": [1, 10, 1], "tau_ig": [0.2, -0.3, 0.35], "tau_ig_significant": [0.3, 0.9, 0.42],
         "tvd_median": [0.004, 0.00102, 0.004], "verdict": ["relevant, disagrees"] * 3}
    )  # fmt: skip
    v.attrs["reference"] = "ig"
    line = verdict_rule(v)
    assert "under 0.001" in line and "≥ 50% of the examples" in line and "\n" not in line
    assert "smallest median total variation 0.00102 (L0H10)" in line
    # L0H10's 90% is of a negative τ: it cannot agree; the largest share that could is L2H1's 42%
    assert line.endswith("of a head whose mean τ is positive, 42% (L2H1)")


def test_a_report_prints_one_objective_line(minilm, capsys):
    """MiniLM's report printed three objectives under three nouns (``metric: embedding-drift``,
    ``target: similarity``, ``objective: similarity-structure``), then one line with three
    names side by side; now the run's objective is named once, as the claims (the head pages
    and summary.json) name it, and the other sections say how they measure it."""
    from probe.app.registry import open_run
    from probe.inputs.corpus import Corpus

    texts = ("The cat sat on the mat.", "A dog ran home.", "Birds sing at dawn.", "Rain fell all night.")
    ctx = open_run(minilm, Corpus(texts=texts), objective="auto", objective_fallback=True, echo=True)
    readers = {"per-example": ["ablation", "importance"], "explain": ["faithfulness"], "corpus": ["claims"]}
    ctx.open_objectives(readers, readers=readers)
    printed = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert printed == [
        "objective: similarity-structure (claims), measured per example as embedding-drift (ablation, importance) "
        "and per input as similarity (faithfulness); why each: the index's settings; choose with --objective"
    ]
    # the name printed first is the one the claims record (summary.json's claims and the head pages)
    assert printed[0].split()[1] == ctx.objective("corpus").called == "similarity-structure"
    assert [line.split(" (")[0] for line in ctx.said] == [
        "objective: embedding-drift", "objective: similarity", "objective: similarity-structure"
    ]  # each use's why kept for the index, under the one noun  # fmt: skip


def test_a_command_prints_its_objective_under_the_one_noun(minilm, capsys):
    """``probe ablate`` printed ``metric: embedding-drift (…)``, ``probe faithfulness``
    ``target: similarity (…)``: each command's one objective is now ``objective: <name>``,
    the name its tables and notes use (``Objective.called``)."""
    from probe.app.registry import open_run
    from probe.inputs.corpus import Corpus

    for use, name in (("per-example", "embedding-drift"), ("explain", "similarity")):
        ctx = open_run(minilm, Corpus(texts=("The cat sat on the mat.", "A dog ran home.")), echo=True)
        assert ctx.objective(use).called == name
        (line,) = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
        assert line.startswith(f"objective: {name} (") and line.endswith("; choose with --objective)"), line


def test_the_roles_note_counts_heads_as_the_table_shows_them():
    """The roles note counted heads per role by its own rule ("broad 2") beside a table that
    puts a role its pattern claim rejects in parentheses; now a head counts for its role
    only where its pattern claim does not reject it, the rejected counted apart."""
    from probe.app.registry.results import RolesResult
    from probe.app.report.tables import notes_shown

    roles = pd.DataFrame(
        {"layer": [0, 0, 1, 1, 2], "head": [3, 2, 0, 1, 0],
         "role": ["broad", "previous-token", "special-token", "broad", "syntactic (nsubj)"]}
    )  # fmt: skip
    counts = pd.DataFrame({"role": ["previous-token", "special-token", "broad", "syntactic"], "heads": [1, 1, 2, 1]})
    result = RolesResult(
        tables={"roles": roles, "role_counts": counts},
        notes=["heads per role: previous-token 1, special-token 1, broad 2, syntactic 1", "roles estimated from 24"],
    )
    claims = {(0, 3): _pattern("does not hold"), (0, 2): _pattern("holds", "previous-token"),
              (1, 0): _pattern("not enough evidence", "special-token"), (1, 1): _pattern("holds")}  # fmt: skip
    # L2H0 has no pattern claim: it counts, as the table shows its role plainly
    assert notes_shown("roles", result, claims) == [
        "heads per role: previous-token 1, broad 1, syntactic 1 (a role counts where its pattern claim does not "
        "reject it, as in the table); named by the rule but not held by the pattern claim, shown in parentheses: "
        "(special-token) 1, (broad) 1",
        "roles estimated from 24",
    ]
    assert notes_shown("roles", result, None) == result.notes  # no claims ran: the rule's counts
    assert notes_shown("syntax", result, claims) == result.notes  # a section that declares none


def test_tables_said_strongest_first_are_sorted_so(minilm_report_8):
    """Every index table captioned "strongest first" is sorted by its declared column
    (|column| where declared so), greyed rows (too few instances) after the others."""
    from probe.app.report.tables import view_of

    out, _ = minilm_report_8
    index = (out / "index.html").read_text(encoding="utf-8")
    checked = 0
    blocks = re.findall(
        r'<p class="muted">([^<]*?): \d+ rows, ([^—<]*) — <a href="tables/([^"]+)\.csv"[^>]*>CSV</a></p>'
        r'<div class="scroll"><table class="data">(.*?)</table>',
        index,
    )
    assert blocks
    for name, order, csv, table in blocks:
        if order.strip() != "strongest first":
            continue
        section = csv[: -len(name) - 1]
        view = view_of(section, name)
        rows = re.findall(r"<tr( class=\"few\"[^>]*)?>(.*?)</tr>", table)
        head = [html.unescape(c) for c in re.findall(r"<th>(.*?)</th>", rows[0][1])]
        key = view.sort.strip("|")
        values = []
        for few, row in rows[1:]:
            if few:
                break  # the greyed rows come last
            cell = html.unescape(re.findall(r"<td[^>]*>(.*?)</td>", row)[head.index(key)])
            v = float(cell)
            values.append(abs(v) if view.sort.startswith("|") else v)
        want = sorted(values, reverse=not view.ascending)
        assert values == want, (section, name, values)
        checked += 1
    assert checked >= 4  # syntax, ablation, faithfulness, roles, claims' structure


def test_a_random_model_grid_paints_no_role_its_claims_reject(tiny_models, tmp_path):
    """A randomly initialised BERT: the roles' rule calls its heads "broad" (confidence
    near 1); where the pattern claim does not hold the grid cell stays white, the role in
    parentheses, and the roles table says the claim's status."""
    import json

    from probe.app.report.build import build_report

    texts = [f"The {w} sat on the mat near the old door today." for w in ("cat", "dog", "bird", "man", "boy", "girl")]
    out = tmp_path / "r"
    build_report(out, adapter=tiny_models["bert"], text=texts * 2, sections=["roles", "claims"], engine="local")
    summary = json.loads((out / "summary.json").read_text())
    index = (out / "index.html").read_text(encoding="utf-8")
    held = {(h["layer"], h["head"]): h["claims"]["pattern"]["status"] == "holds" for h in summary["heads"]}
    cells = re.findall(r'<td style="background:(#[0-9a-f]+)"><a href="heads/L(\d+)H(\d+)\.html"[^>]*>L\d+H\d+<br>(.*?) <span',
                       index)  # fmt: skip
    assert len(cells) == len(held) == 8
    for colour, layer, head, label in cells:
        if not held[(int(layer), int(head))]:
            assert colour == "#ffffff" and (label == "&nbsp;" or label.startswith('<span class="muted">(')), label
    assert not all(held.values())  # a random model: not every head holds a pattern
    table = index.split(">roles: ", 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr><td>(\d+)</td><td>(\d+)</td><td>(.*?)</td><td>(.*?)</td>", table)
    assert len(rows) == 8 and "<th>pattern claim</th>" in table
    for layer, head, role, status in rows:
        assert status == summary["heads"][int(layer) * 4 + int(head)]["claims"]["pattern"]["status"]
        assert role.startswith("(") == (status != "holds"), (layer, head, role, status)


def test_the_grid_tags_no_decoder_role_a_null_model_takes_as_often():
    """A random GPT-2's grid tagged every head "pos" (positional) while every head of a
    re-initialised model passes that probe too (the calibration says 100%): a role half
    or more of the null model's heads pass is in parentheses."""
    from probe.app.registry.analyses.decoder_heads import _tag
    from probe.app.registry.evidence import HeadEvidence

    def tagged(label, **shares):
        numbers = {f"null_share:{k.replace('_', '-')}": v for k, v in shares.items()}
        return _tag([HeadEvidence("decoder-heads", "taxonomy", label=label, numbers=numbers)])

    assert tagged("positional", positional=1.0) == "(pos)"
    assert tagged("induction, positional", induction=0.0, positional=0.5) == "ind (pos)"
    assert tagged("previous-token", previous_token=0.02) == "prev"
    assert tagged("sink") == "sink"  # not calibrated (--no-null): as the taxonomy says
