"""Head pages render the claims and never contradict them (issue 43): every head page of a
zoo encoder, a zoo decoder and the bundled sentence model states each claim with the status
summary.json gives it; a role is stated only where the pattern claim holds (else "Closest
rule"); no printed comparison of two shares contradicts itself; no "CI excluding 0" where
no interval could reach below 0; the faithfulness block's verdict is the weights and
attribution claims' statuses, never its own "relevant"/"irrelevant" beside them."""

from __future__ import annotations

import html
import json
import re

import pytest

from probe.analyses.claims.protocol import claim_test

COMPARISON = re.compile(r"(\d+(?:\.\d+)?)% ([<>≤≥]) (\d+(?:\.\d+)?)%")


def _text(page: str) -> str:
    page = re.sub(r"<svg.*?</svg>", "", page, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", "", page))


def _claims_status(page: str) -> dict:
    block = page.split("<h2>Claims</h2>", 1)[1].split("</ul>", 1)[0]
    return {
        html.unescape(t): s for t, s in re.findall(r"<li><b>(.*?)</b> — <span[^>]*>(.*?)</span>", block, flags=re.S)
    }


def _check(out):
    summary = json.loads((out / "summary.json").read_text())
    assert summary["heads"]
    for h in summary["heads"]:
        page = (out / h["page"]).read_text()
        shown = _claims_status(page)
        for kind, c in h["claims"].items():
            assert shown[claim_test(kind).title] == c["status"], (h["page"], kind)
        text = _text(page)
        for a, op, b in COMPARISON.findall(text):
            a, b = float(a), float(b)
            ok = {"<": a < b, ">": a > b, "≤": a <= b, "≥": a >= b}[op]
            assert ok, (h["page"], f"{a}% {op} {b}%")
        attends = page.split("What it attends to", 1)[1].split("<h3>", 1)[0] if "What it attends to" in page else ""
        if attends and h["claims"]["pattern"]["status"] != "holds":
            assert "Closest rule" in attends, h["page"]
        if h["claims"]["pattern"]["status"] == "holds":
            assert "Closest rule" not in attends, h["page"]
        _verdict_follows_claims(page, text, h)
    return summary


VERDICT = re.compile(r"Verdict \(the claims above\): ([^.]*)\.")


def _verdict_follows_claims(page: str, text: str, h: dict) -> None:
    """No verdict word of the faithfulness section's own ("Verdict: relevant, agrees",
    "weights irrelevant") on a page whose claims ran; the verdict there names the weights
    and attribution claims with their summary.json statuses."""
    assert "Verdict: " not in text, (h["page"], re.findall(r"Verdict: [^.]*", text))
    if "Is its attention an explanation?" not in page:
        return
    (said,) = VERDICT.findall(text)
    shown = dict(part.split(" — ", 1) for part in said.split("; "))
    for kind in ("weights", "attribution"):
        assert shown[claim_test(kind).title] == h["claims"][kind]["status"], (h["page"], kind)


@pytest.mark.parametrize("model", ["zoo:prev-token", "zoo:induction"])
def test_zoo_head_pages_follow_their_claims(model, tmp_path):
    from probe.app.report import build_report

    build_report(tmp_path / "r", model=model, limit=16, sections=["roles", "claims"])
    summary = _check(tmp_path / "r")
    assert any(h["claims"]["pattern"]["status"] == "holds" for h in summary["heads"])  # not vacuous


def test_faithfulness_verdict_follows_the_claims(tmp_path):
    """zoo:agreement (a classifier whose target the faithfulness section explains): every
    head has the section's own verdict ("weights irrelevant" here), which its block used to
    print as "Verdict: …" beside the claims; the page's verdict is now the claims'."""
    import pandas as pd

    from probe.app.report import build_report

    out = tmp_path / "r"
    build_report(out, model="zoo:agreement", limit=16, sections=["roles", "faithfulness", "claims"])
    summary = _check(out)
    faith = next(x for x in summary["sections"] if x["name"] == "faithfulness")
    assert faith["status"] == "ran"  # the block whose verdict follows the claims is on every page
    own = pd.read_csv(out / "tables" / "faithfulness_verdict.csv").set_index(["layer", "head"])["verdict"]
    for h in summary["heads"]:
        text = _text((out / h["page"]).read_text())
        assert isinstance(own[(h["layer"], h["head"])], str)  # the section's own word exists …
        assert own[(h["layer"], h["head"])] not in text  # … and is not on the page
        assert "Verdict (the claims above)" in text


def test_relevant_never_beside_weights_that_do_not_hold():
    """The issue's page: the permutation test says "relevant, agrees" while "Do the weights
    matter" does not hold and the attribution claim holds; the block says the claims."""
    from types import SimpleNamespace

    from probe.app.registry.analyses.faithfulness import SHOWS
    from probe.app.registry.evidence import HeadEvidence

    faith = HeadEvidence(
        "faithfulness",
        "faithfulness",
        "Kendall τ between its attention and the IG attributions: +0.41 (mean over 12 sentences). "
        "Permuting its attention moves the output distribution by a median total variation of 0.08 "
        "(Jain & Wallace 2019). Verdict: relevant, agrees.",
        label="relevant, agrees",
        strong=("+0.41", "relevant, agrees"),
    )
    weights = HeadEvidence("claims", "weights", "uniform weights …", status="does not hold")
    attribution = HeadEvidence("claims", "attribution", "τ +0.41 …", status="holds")
    data = SimpleNamespace(evidence={(2, 8): [faith, weights, attribution]})
    block = _text(SHOWS.block.render(data, 2, 8))
    assert "relevant" not in block and "Verdict: " not in block
    assert "Verdict (the claims above): Do the weights matter — does not hold; " in block
    assert "Agreement with attributions — holds." in block
    assert "median total variation of 0.08" in block  # the measurement stays, only the verdict word goes
    data = SimpleNamespace(evidence={(2, 8): [faith]})  # no claims ran: the section's own verdict
    assert "Verdict: relevant, agrees." in _text(SHOWS.block.render(data, 2, 8))
