"""Per-head evidence (:mod:`probe.app.registry.evidence`): each analysis declares it once,
and head pages, the verdict, report.md and summary.json print those objects: no sentence
and no count on a page that is not the object's."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _paragraphs(page: str) -> list:
    """The evidence section's paragraphs of a head page, as plain text."""
    body = page.split("<h2>Evidence</h2>", 1)[1].split("<h2>Head view</h2>", 1)[0]
    body = re.sub(r"<svg.*?</svg>", "", body, flags=re.S)
    return [html.unescape(re.sub(r"<[^>]+>", "", p)) for p in re.findall(r"<p>(.*?)</p>", body, flags=re.S)]


@pytest.fixture(scope="module")
def cut_report(tmp_path_factory):
    """zoo:prev-token on 24 sentences, the model-run sections cut to the first 10."""
    from probe.app.report import build_report

    out = tmp_path_factory.mktemp("ev") / "r"
    build_report(
        out, model="zoo:prev-token", limit=24, sections=["ablation", "importance", "roles"], max_model_examples=10
    )
    return out, json.loads((out / "summary.json").read_text())


def test_every_sentence_on_a_head_page_is_an_evidence_object(cut_report):
    out, summary = cut_report
    assert summary["corpus"]["examples"] == 24
    for h in summary["heads"]:
        texts = [ev["text"] for ev in h["evidence"]]
        shown = _paragraphs((out / h["page"]).read_text())
        assert sorted(shown) == sorted(texts), h["page"]  # every paragraph is an object's text, and every text shown
        page = (out / h["page"]).read_text()
        for ev in h["evidence"]:
            for part in ev.get("strong", ()):  # the bold numbers are the object's own
                assert f"<b>{html.escape(part)}</b>" in page, (h["page"], part)


def test_the_count_beside_the_ablation_interval_is_the_sweeps(cut_report):
    """The sweep ran on 10 of the 24 examples: the page, the object and report.md say 10."""
    out, summary = cut_report
    md = (out / "report.md").read_text()
    for h in summary["heads"]:
        (abl,) = [ev for ev in h["evidence"] if ev["section"] == "ablation"]
        assert abl["count"] == 10 and abl["count_of"] == "examples"
        lo, hi = abl["interval"]
        assert lo <= abl["value"] <= hi
        (para,) = [p for p in _paragraphs((out / h["page"]).read_text()) if "ablation of this head" in p]
        assert "95% bootstrap CI over 10 examples" in para and "24" not in para
        assert abl["brief"].endswith("(n=10)") and f"| {abl['brief']} |" in md
    ablation = next(s for s in summary["sections"] if s["name"] == "ablation")
    assert ablation["summary"]["examples"] == 10


def test_verdict_and_grid_read_the_evidence(cut_report):
    out, summary = cut_report
    index = (out / "index.html").read_text()
    for h in summary["heads"]:
        role = next(ev for ev in h["evidence"] if ev["kind"] == "role")
        imp = next(ev for ev in h["evidence"] if ev["kind"] == "importance")
        assert h["verdict"].endswith(f"importance rank {imp['numbers']['rank']}/{imp['numbers']['of']}")
        assert f"importance rank {imp['numbers']['rank']} of" in index
        assert role["label"] in (out / h["page"]).read_text()


def test_ablation_evidence_counts_the_examples_swept_not_the_summary():
    """The count is the sweep's own (``ablated``: ``[head, example]``), whatever the summary says."""
    import numpy as np
    import pandas as pd

    from probe.app.registry import get
    from probe.app.registry.results import AblationResult

    table = pd.DataFrame(
        {
            "layer": [0, 0, 1],
            "head": [0, 1, 0],
            "metric": ["loss"] * 3,
            "mode": ["zero"] * 3,
            "delta": [0.5, -2.0, 0.1],
            "ci_low": [0.4, -2.5, -0.1],
            "ci_high": [0.6, -1.5, 0.3],
        }
    )

    class Sweep:
        ablated = np.zeros((3, 7))

    shows = get("ablation").shows
    ev = shows.head_evidence(
        AblationResult(tables={"ablation": table}, summary={"examples": 99}, data={"sweep": Sweep()})
    )
    (big,) = ev[(0, 1)]
    assert big.count == 7 and "over 7 examples" in big.text and "99" not in big.text
    assert big.numbers["rank"] == 1 and big.numbers["relative"] == 1.0 and big.ci == (-2.5, -1.5)
    assert ev[(0, 0)][0].numbers["rank"] == 2 and ev[(1, 0)][0].numbers["relative"] == pytest.approx(0.05)
    # without the sweep (a resumed report), the section's own count of examples
    (again,) = shows.head_evidence(AblationResult(tables={"ablation": table}, summary={"examples": 12}))[(1, 0)]
    assert again.count == 12 and "over 12 examples" in again.text


def test_a_page_prints_the_objects_numbers_not_its_own():
    """Hand-made evidence objects on a head page: their text and counts, nothing else."""
    from conftest import make_maps, previous_token

    from probe.app.registry import open_run
    from probe.app.registry.evidence import HeadEvidence
    from probe.app.report.build import analyse
    from probe.app.report.evidence import evidence_html
    from probe.app.report.sections import SectionOutcome
    from probe.inputs.corpus import Corpus

    m = make_maps(previous_token(5, 1, 1))
    data = analyse(open_run(None, Corpus(texts=(m.text,) * 3), maps=[m] * 3), sections=["roles"], strict=True)
    data.outcomes.append(SectionOutcome("ablation", "Ablation", "ran"))
    made = HeadEvidence(
        "ablation",
        "ablation",
        "Zero-ablation of this head changes the loss by +0.31 [+0.20, +0.42] (95% bootstrap CI over 7 examples).",
        value=0.31,
        interval=(0.2, 0.42),
        count=7,
        unit="loss",
        strong=("+0.31 [+0.20, +0.42]",),
    )
    data.evidence[(0, 0)] = [ev for ev in data.evidence[(0, 0)] if ev.section != "ablation"] + [made]
    page = evidence_html(data, 0, 0)
    assert "changes the loss by <b>+0.31 [+0.20, +0.42]</b> (95% bootstrap CI over 7 examples)." in page
    assert "over 3 examples" not in page and "Δ loss" in page  # the strip's label is the object's unit


#: per-head column names a section's own module writes into its per-head facts; no other
#: module of the top floor may know them (they read the section's evidence objects)
FLATTENED = {
    "ablation_delta": "app/registry/analyses/ablation.py",
    "ablation_ci_": "app/registry/analyses/ablation.py",
    "ablation_metric": "app/registry/analyses/ablation.py",
    "ablation_relative": "app/registry/analyses/ablation.py",
    "importance_rank": "app/registry/analyses/importance.py",
    "importance_of": "app/registry/analyses/importance.py",
    "importance_method": "app/registry/analyses/importance.py",
    "faith_verdict": "app/registry/analyses/faithfulness.py",
    "faith_tau_": "app/registry/analyses/faithfulness.py",
    "syntax_relation": "app/registry/analyses/syntax.py",
    "syntax_accuracy": "app/registry/analyses/syntax.py",
    "syntax_baseline": "app/registry/analyses/syntax.py",
}


def test_flattened_names_live_only_in_their_producing_module():
    found = []
    for path in sorted((ROOT / "app").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        text = path.read_text(encoding="utf-8")
        found += [(name, rel) for name, owner in FLATTENED.items() if name in text and rel != owner]
    assert not found, "modules that know another section's per-head column names:\n" + "\n".join(map(str, found))
    report = "".join(p.read_text(encoding="utf-8") for p in (ROOT / "app" / "report").glob("*.py"))
    for name in ("ablation_delta", "faith_tau_", "importance_rank", "ablation_ci_low"):
        assert name not in report


def test_the_syntax_plots_legend_fits_inside_the_plot():
    """Each legend line of the per-relation plot fits the plot's width (12px sans-serif, at
    most 7 px a character) and height; it names what the bar's colours mean (the whole legend
    on one line once ran past the right edge and was cut)."""
    from probe.app.report.evidence import W, versus_svg

    svg = versus_svg([("det", 0.8, 0.6, 100), ("conj", 0.2, 0.3, 900), ("voc", 0.5, 0.2, 5)], min_count=20)
    height = int(re.search(r'height="(\d+)"', svg).group(1))
    texts = re.findall(r'<text x="([\d.]+)" y="([\d.]+)"[^>]*>([^<]*)</text>', svg)
    legend = [(float(x), float(y), t) for x, y, t in texts if ":" in t]
    assert [t.split(":")[0] for _, _, t in legend] == ["bar", "tick", "pale"]
    for x, y, t in legend:
        assert x + 7 * len(html.unescape(t)) <= W and y <= height, t
    assert "pale" not in versus_svg([("det", 0.8, 0.6, 100)])
