"""Resolve once (issue 38): the one ``--objective`` walks from the CLI to the forward as
the run's (``open_run(objective=...)``), is resolved once per use when the run opens
(``ctx.objective(use)``) and reaches the analyses as an ``Objective``, never a string.

The spies wrap :func:`probe.analyses.common.objective._parse` (the one parser of an
objective's name) and ``_auto`` (the one place ``auto`` is decided): every resolution of
a name passes through them, however a module imported ``resolve_objective``."""

from __future__ import annotations

import json
from collections import Counter

import pytest

TEXTS = [
    "The keys to the cabinet are on the table.",
    "A dog ran home after the rain.",
    "Birds sing in the morning.",
    "We left early because it rained.",
    "The cat that the dogs chased sat on the mat.",
]


@pytest.fixture
def resolutions(monkeypatch):
    """``{"parse": Counter(use), "auto": Counter(use)}``, filled as names are resolved."""
    import probe.analyses.common.objective as O

    seen: dict = {"parse": Counter(), "auto": Counter()}
    parse, auto = O._parse, O._auto

    def counted_parse(spec, use, probe):
        seen["parse"][use] += 1
        return parse(spec, use, probe)

    def counted_auto(adapter, corpus, use):
        seen["auto"][use] += 1
        return auto(adapter, corpus, use)

    monkeypatch.setattr(O, "_parse", counted_parse)
    monkeypatch.setattr(O, "_auto", counted_auto)
    return seen


def test_a_report_resolves_its_objective_once_per_use(tiny_models, tmp_path, resolutions):
    """Four model-running sections share three uses (ablation and importance: per-example;
    claims: corpus, and the ablation's removal sweep reuses it; faithfulness: explain):
    three resolutions, one per use, not one per section; the choices are printed once each."""
    from probe.app.report.build import build_report

    sections = ["ablation", "importance", "claims", "faithfulness"]
    data = build_report(tmp_path / "r", adapter=tiny_models["bert"], text=TEXTS, sections=sections, strict=True)
    assert resolutions["parse"] == Counter({"per-example": 1, "corpus": 1, "explain": 1})
    assert resolutions["auto"] == resolutions["parse"]  # each was auto, decided once
    summary = json.loads((data.path / "summary.json").read_text())
    assert {s["name"]: s["status"] for s in summary["sections"]} == dict.fromkeys(sections, "ran")
    choices = summary["settings"]["choices"]
    # each use's choice said once, under the one noun (it was metric:, target: and objective:)
    assert len(choices) == 3 and all(c.startswith("objective: ") for c in choices), choices
    assert len({c.split(" (")[0] for c in choices}) == 3, choices
    # the index page and report.md say them in one line, not as a Python list
    md = (data.path / "report.md").read_text(encoding="utf-8")
    index = (data.path / "index.html").read_text(encoding="utf-8")
    assert f"- choices: {'; '.join(choices)}\n" in md.replace("&lt;", "<").replace("&gt;", ">"), md[:2000]
    assert "[&quot;objective" not in index and "[&#x27;objective" not in index and "; objective: " in index
    assert "- limit: none\n" in md and "None" not in md  # no limit was given: said, not a Python None
    by = {s["name"]: s["summary"] for s in summary["sections"]}
    assert by["ablation"]["metric"] == by["importance"]["metric"] == "embedding-drift"  # the one per-example resolution


def test_a_named_objective_reaches_the_analysis_as_an_objective(tiny_models, resolutions, monkeypatch):
    """``probe.run(..., objective="embedding-drift")``: one resolution, and the sweep receives
    the resolved object (no string on the way to the forward)."""
    import probe
    import probe.analyses.necessity.ablation_job as job
    from probe.analyses.common.metrics import DriftMetric

    received = []
    real = job.sweep_heads_in_blocks

    def spy(runner, adapter, corpus, metric, *a, **k):
        received.append(metric)
        return real(runner, adapter, corpus, metric, *a, **k)

    monkeypatch.setattr(job, "sweep_heads_in_blocks", spy)
    res = probe.run("ablation", adapter=tiny_models["bert"], text=TEXTS[:2], objective="embedding-drift", n_boot=10)
    assert len(received) == 1 and isinstance(received[0], DriftMetric)
    assert resolutions["parse"]["per-example"] == 1 and not resolutions["auto"]
    assert set(res.table["metric"]) == {"embedding-drift"}


def test_one_objective_option_with_no_old_spellings(tmp_path):
    """``--objective`` is the one option: ``--metric`` and ``--target`` are gone (an unknown
    option, exit 2), and a name no use of the command knows is refused in one line."""
    from click.testing import CliRunner

    from probe.app.cli import main

    for old in ("--metric", "--target"):
        r = CliRunner().invoke(main, ["ablate", "--text", "A b.", old, "loss", "--out", str(tmp_path / "o")])
        assert r.exit_code == 2 and f"No such option '{old}'" in r.output
    r = CliRunner().invoke(main, ["ablate", "--text", "A b.", "--objective", "banana", "--out", str(tmp_path / "o")])
    assert r.exit_code == 1 and r.output.count("\n") == 1 and "unknown objective 'banana'" in r.output, r.output
    assert not (tmp_path / "o").exists()
