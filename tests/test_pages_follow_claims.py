"""Head pages render the claims and never contradict them (issue 43): every head page of a
zoo encoder, a zoo decoder and the bundled sentence model states each claim with the status
summary.json gives it; a role is stated only where the pattern claim holds (else "Closest
rule"); no printed comparison of two shares contradicts itself; no "CI excluding 0" where
no interval could reach below 0."""

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
    return summary


@pytest.mark.parametrize("model", ["zoo:prev-token", "zoo:induction"])
def test_zoo_head_pages_follow_their_claims(model, tmp_path):
    from probe.app.report import build_report

    build_report(tmp_path / "r", model=model, limit=16, sections=["roles", "claims"])
    summary = _check(tmp_path / "r")
    assert any(h["claims"]["pattern"]["status"] == "holds" for h in summary["heads"])  # not vacuous


@pytest.mark.slow
def test_minilm_head_pages_follow_their_claims(minilm, tmp_path):
    from probe.app.report import build_report

    build_report(tmp_path / "r", adapter=minilm, limit=12, sections=["roles", "claims"])
    _check(tmp_path / "r")
