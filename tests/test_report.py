"""The per-head report: sections run or skipped, pages, escaping, --force, the CLI."""

from __future__ import annotations

import json
import re

import pytest
import torch

from conftest import LAW, MAKING, make_maps, previous_token, uniform

EVIL = ["<script>alert(1)</script>", '"q"', "a&b", "</script>"]


def _ctx(maps_list, sentences=()):
    from probe.inputs.corpus import Corpus
    from probe.app.registry import open_run
    from probe.app.registry.context import ReportState

    corpus = Corpus(texts=tuple(m.text for m in maps_list), sentences=tuple(sentences), source="hand-built")
    return open_run(None, corpus, maps=list(maps_list), report=ReportState(settings={"model": "hand-built"}))


def _evil_maps():
    """2 layers × 2 heads on 6 tokens: L0H0 previous-token, the others uniform;
    tokens that would break HTML if not escaped."""
    n = 6
    a = torch.cat([previous_token(n, 1, 1), uniform(n, 1, 1)], 1)  # [1, 2, n, n]
    a = torch.cat([a, uniform(n, 1, 2)], 0)  # [2, 2, n, n]
    tokens = ["[CLS]"] + EVIL + ["[SEP]"]
    special = [True, False, False, False, False, True]
    m = make_maps(a, tokens=tokens, special=special)
    from dataclasses import replace

    return replace(m, text=" ".join(EVIL))


@pytest.fixture
def evil_report(tmp_path):
    from probe.app.report.build import analyse, write_report

    ctx = _ctx([_evil_maps(), _evil_maps()])
    data = analyse(ctx, sections=["roles", "syntax", "ablation"], strict=True)
    out = write_report(data, tmp_path / "rep")
    return data, out


# ---- the bundled sample -------------------------------------------------------------
def test_bundled_sample_is_a_valid_treebank_with_the_paper_sentences():
    from probe.app.report.bundled import SAMPLE_CONLLU
    from probe.inputs.readers import read_conllu

    sents = read_conllu(SAMPLE_CONLLU)
    assert len(sents) == 24
    assert sents[0].text == MAKING and sents[1].text == LAW
    for s in sents:
        assert sum(h == 0 for h in s.heads) == 1, s.sent_id
        assert all(0 <= h <= len(s) for h in s.heads)
        assert [s.text[a:b] for a, b in s.spans] == list(s.words)
    # hand annotation checks: "The Law" det → Law, "making … process" obj
    assert (sents[1].words[0], sents[1].heads[0], sents[1].deprels[0]) == ("The", 2, "det")
    assert sents[0].deprels[sents[0].words.index("process")] == "obj"


# ---- sections: ran / skipped / failed ------------------------------------------------
def test_sections_skip_with_reasons_and_never_error(evil_report):
    data, out = evil_report
    st = data.statuses
    assert st["roles"] == "ran"
    assert st["syntax"] == "skipped"
    reasons = {o.name: o.reason for o in data.outcomes}
    assert "treebank" in reasons["syntax"]
    assert st["ablation"] == "skipped" and "live model" in reasons["ablation"]
    summary = json.loads((out / "summary.json").read_text())
    assert {s["name"]: s["status"] for s in summary["sections"]} == st
    html = (out / "index.html").read_text()
    assert "skipped" in html and "treebank" in html


def test_missing_module_failed_and_valueerror_sections():
    from probe.app.registry import Result
    from probe.app.report.sections import Section, run_sections
    from probe.errors import NotApplicable

    class BoomResult(Result):
        """What the failing section would have produced."""

    def boom(ctx):
        raise RuntimeError("bug in the analysis")

    def refuse(ctx):
        raise NotApplicable("only 3 sentences: need 20")

    def numpy_bug(ctx):  # a ValueError is not "does not apply": numpy and pandas raise it for bugs
        import numpy as np

        np.zeros(3).reshape(2, 2)

    secs = [
        Section("nomod", "No module", lambda c: Result(), modules=("analyses.does_not_exist",)),
        Section("boom", "Boom", boom, produces=BoomResult),
        Section("refuse", "Refuse", refuse),
        Section("later", "Later", lambda c: Result(), requires=(BoomResult,)),
        Section("numpy", "Numpy", numpy_bug),
    ]
    ctx = _ctx([_evil_maps()])
    out = {o.name: o for o in run_sections(ctx, secs)}
    assert out["nomod"].status == "skipped" and "analyses.does_not_exist" in out["nomod"].reason
    assert out["boom"].status == "failed" and "bug in the analysis" in out["boom"].reason
    assert out["refuse"].status == "skipped" and out["refuse"].reason == "only 3 sentences: need 20"
    assert out["numpy"].status == "failed" and out["numpy"].reason.startswith("ValueError: cannot reshape")
    assert out["later"].status == "skipped" and "boom" in out["later"].reason
    with pytest.raises(RuntimeError):
        run_sections(ctx, secs[1:2], strict=True)


def test_unknown_section_name_is_a_user_error():
    from probe.app.report.sections import choose

    with pytest.raises(ValueError, match="unknown report section.*known: .*roles"):
        choose(["rolez"])


# ---- pages, escaping, outputs --------------------------------------------------------
def test_every_page_exists_and_corpus_text_is_escaped(evil_report):
    data, out = evil_report
    pages = sorted(p.name for p in (out / "heads").glob("*.html"))
    assert pages == ["L0H0.html", "L0H1.html", "L1H0.html", "L1H1.html"]
    for page in [out / "index.html"] + list((out / "heads").glob("*.html")):
        html = page.read_text()
        # the only <script> tags are ours: the component's code and its JSON data
        for m in re.finditer(r"<script([^>]*)>", html):
            assert m.group(1) in ("", ' type="application/json"')
        assert "<script>alert" not in html and '</script>"' not in html
        assert "alert(1)" not in html.replace("&lt;script&gt;alert(1)&lt;/script&gt;", "").replace(
            "\\u003cscript\\u003ealert(1)\\u003c/script\\u003e", ""
        )
    head = (out / "heads" / "L0H0.html").read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in head  # sentence and line-view tokens, as text
    assert "&quot;q&quot;" in head and "a&amp;b" in head
    # embedded JSON round-trips to the original tokens
    blob = re.search(r'<script type="application/json">(.*?)</script>', head, re.S).group(1)
    assert json.loads(blob)["examples"][0]["tokens"][1:5] == EVIL


def test_verdicts_and_grid_follow_roles(evil_report):
    data, out = evil_report
    assert data.flat_facts(0, 0)["role"] == "previous-token"
    assert data.verdicts[(0, 0)].startswith("attends to the previous token (100%")
    assert data.flat_facts(1, 1)["role"] == "broad"
    html = (out / "index.html").read_text()
    from probe.app.report.style import ROLE_COLOURS

    assert 'href="heads/L0H0.html"' in html and ROLE_COLOURS["previous-token"] in html
    summary = json.loads((out / "summary.json").read_text())
    h00 = next(h for h in summary["heads"] if (h["layer"], h["head"]) == (0, 0))
    assert h00["verdict"] == data.verdicts[(0, 0)] and h00["facts"]["roles"]["role"] == "previous-token"
    md = (out / "report.md").read_text()
    assert f"| 0 | 0 | {data.verdicts[(0, 0)]} | previous-token |" in md
    assert (out / "tables" / "roles_roles.csv").exists()
    assert len(list((out / "heads").glob("L0H0_ex*.png"))) >= 1


def test_verdict_sentences():
    from probe.app.registry.evidence import HeadEvidence as E
    from probe.app.report.verdict import verdict

    v = verdict(
        [
            E("roles", "role", label="attends 30% [CLS], 20% next token"),
            E("syntax", "syntax", label="det", value=0.92, numbers={"baseline": 0.51}),
            E("ablation", "ablation", value=0.08, interval=(0.05, 0.11), unit="drift"),
        ]
    )
    assert v == "looks syntactic (det, 92% vs 51% baseline) and matters (drift +0.08)"
    v = verdict(
        [
            E("roles", "role", label="special-token", numbers={"to_cls": 0.1, "to_sep": 0.8}),
            E("ablation", "ablation", value=0.001, interval=(-0.002, 0.004), unit="loss"),
        ]
    )
    assert v.startswith("attends to [SEP] (80% of its attention); ablating it changes nothing (loss +0.001")
    v = verdict(
        [
            E("roles", "role", label="special-token", numbers={"to_cls": 0.7, "to_sep": 0.1}),
            E(
                "ablation",
                "ablation",
                value=0.0007,
                interval=(0.0005, 0.0009),
                unit="embedding-drift",
                numbers={"relative": 0.2},
            ),
            E("importance", "importance", numbers={"rank": 64, "of": 72}),
            E("faithfulness", "faithfulness", value=-0.05, label="relevant, disagrees", numbers={"reference": "ig"}),
        ]
    )
    assert v == (
        "attends to [CLS] (70% of its attention); ablating it changes little (embedding-drift +0.0007, "
        "20% of the largest head effect), importance rank 64/72; weights relevant, disagrees with ig "
        "(τ -0.05)"
    )
    assert verdict([]).startswith("no evidence yet")
    # a weak relation (19% vs 6%) is not called syntactic
    assert verdict([E("syntax", "syntax", label="nmod", value=0.19, numbers={"baseline": 0.06})]).startswith(
        "no evidence"
    )


# ---- --force semantics ---------------------------------------------------------------
def test_existing_dir_refused_then_replaced_atomically(tmp_path, monkeypatch):
    from probe.app.report import build
    from probe.app.report.build import analyse, write_report

    out = tmp_path / "rep"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    data = analyse(_ctx([_evil_maps()]), sections=["roles"])
    with pytest.raises(ValueError, match="not empty: pass --force"):
        write_report(data, out)
    assert (out / "keep.txt").read_text() == "mine"

    def broken(data, tmp):
        (tmp / "index.html").write_text("half")
        raise RuntimeError("disk full")

    monkeypatch.setattr(build, "_render", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        write_report(data, out, force=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rep"]  # no temp dir left behind
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]  # untouched
    monkeypatch.undo()
    write_report(data, out, force=True)
    assert not (out / "keep.txt").exists() and (out / "index.html").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rep"]


def test_out_that_is_a_file_or_has_no_parent(tmp_path):
    from probe.app.report.build import analyse, write_report

    data = analyse(_ctx([_evil_maps()]), sections=["roles"])
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(ValueError, match="is a file: --out is always a directory"):
        write_report(data, f, force=True)
    with pytest.raises(ValueError, match="not a writable directory"):  # a parent that is a file
        write_report(data, f / "below")
    assert (write_report(data, tmp_path / "no" / "such") / "index.html").exists()  # parents are created


# ---- head view component ------------------------------------------------------------
def test_head_view_data_and_errors():
    from probe.app.report.head_view import HeadView, head_view

    m = _evil_maps()
    v = head_view(m, layer=1, head=1)
    d = v.data()
    assert d["layers"] == [0, 1] and d["heads"] == [0, 1] and d["initial"] == [1, 1]
    assert v.weights()[0, 0, 3, 2] == 1.0  # previous-token head, query 3 → key 2
    html = v._repr_html_()
    assert "ProbeHeadView" in html and "data-probe-head-view" in html and "<script>alert" not in html
    # one byte per weight: what the browser draws is the weight to within 1/510
    w = HeadView(m, layers=[0], heads=[0]).weights()
    assert w.shape == (1, 1, 6, 6) and abs(w[0, 0] - previous_token(6)[0, 0].numpy()).max() <= 1 / 510 + 1e-7
    with pytest.raises(ValueError, match="head 5 out of range"):
        HeadView(m, heads=[5])
    with pytest.raises(ValueError, match="layer 7 was not captured"):
        HeadView(m, layers=[7])
    with pytest.raises(ValueError, match="initial"):
        HeadView(m, layers=[0], initial=(1, 0))


def test_script_json_cannot_close_the_script():
    from probe.app.report.html import script_json

    s = script_json({"t": "</script><b>&"})
    assert "<" not in s and ">" not in s and "&" not in s
    assert json.loads(s) == {"t": "</script><b>&"}


# ---- the real model ----------------------------------------------------------------
@pytest.mark.slow
def test_report_on_minilm_with_bundled_treebank(minilm, tmp_path):
    """Capture → sections → pages on the bundled model and 6 sample sentences."""
    from probe.app.report.build import build_report

    data = build_report(tmp_path / "r", adapter=minilm, limit=6, sections=["syntax", "roles", "rollout"], strict=True)
    assert data.statuses == {"syntax": "ran", "roles": "ran", "rollout": "ran"}
    assert len(data.ctx.maps) == 6 and data.ctx.report.representatives[:2] == [0, 1]  # the paper sentences
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert len(summary["heads"]) == 72 and summary["model"]["layers"] == 6
    assert len(list((tmp_path / "r" / "heads").glob("L*H*.html"))) == 72
    # minilm has [CLS]/[SEP] sink heads (Clark et al. 2019): some verdict names one
    assert any("attends to [CLS]" in v or "attends to [SEP]" in v for v in data.verdicts.values())
    best = data.ctx.report.results["syntax"].tables["best"]
    det = best[(best.relation == "det") & (best.direction == "dep_to_head")].iloc[0]
    assert det.accuracy > det.baseline_accuracy  # a det head beats the +1 baseline
    top = data.ctx.report.results["rollout"].tables["top"]
    assert set(top["method"]) == {"rollout", "flow"}
    # the heads no rule names ("attends 35% [CLS], 7% itself", one string each) share one
    # legend entry under the grid, not one entry per string
    roles = data.ctx.report.results["roles"].tables["roles"]
    profiles = {r for r in roles["role"] if r.startswith("attends ")}
    assert len(profiles) >= 2
    html = (tmp_path / "r" / "index.html").read_text()
    legend = html[html.index('<p class="legend">') :]
    assert legend.count("attends … (no rule cleared") == 1
    assert not any(f">{p}<" in legend for p in profiles)


@pytest.mark.slow
def test_cli_report_text_input_and_force(minilm, tmp_path, monkeypatch):
    from click.testing import CliRunner

    from probe import models
    from probe.app.cli.report import report_cmd

    monkeypatch.setattr(models, "load_model", lambda *a, **k: minilm)
    out = tmp_path / "cli"
    args = ["--text", LAW, "--text", '<b>bold</b> & "quotes"', "--out", str(out), "--sections", "roles,syntax"]
    r = CliRunner().invoke(report_cmd, args)
    assert r.exit_code == 0, r.output
    assert "syntax       skipped: no treebank" in r.output and "roles        ran" in r.output
    r2 = CliRunner().invoke(report_cmd, args)
    assert r2.exit_code == 1 and "not empty: pass --force" in r2.output
    r3 = CliRunner().invoke(report_cmd, args + ["--force"])
    assert r3.exit_code == 0, r3.output
    page = (out / "heads" / "L0H0.html").read_text()
    assert "&lt;b&gt;bold&lt;/b&gt; &amp; &quot;quotes&quot;" in page
    # one run time: the command's last line states the time the index states (they said 387 s and 455 s)
    import re

    said = re.search(r"built in (\d+ s), as the index says", r3.output).group(1)
    assert f"built in {said}" in (out / "index.html").read_text()
    r4 = CliRunner().invoke(report_cmd, ["--out", str(tmp_path / "x"), "--sections", "nope"])
    assert r4.exit_code == 1 and "unknown report section" in r4.output


def test_a_table_caption_says_strongest_first_only_when_it_is_sorted_so():
    """The index captions each table by how :func:`ranked` orders it: a declared view whose
    sort column is there ("strongest first"), else the analysis' own order (the captions
    said "strongest first" over tables left in layer and head order)."""
    import pandas as pd

    from probe.app.report.tables import order_said, ranked

    df = pd.DataFrame({"layer": [0, 0, 1], "head": [0, 1, 0], "delta": [0.1, -0.9, 0.5], "metric": ["m"] * 3})
    assert order_said("ablation", "ablation", df) == "strongest first"
    assert ranked("ablation", "ablation", df)["delta"].tolist() == [-0.9, 0.5, 0.1]
    assert order_said("ablation", "no-such-table", df) == "in the analysis' order"
    assert order_said("ablation", "ablation", df.drop(columns="delta")) == "in the analysis' order"


def test_the_grid_paints_a_role_only_where_its_pattern_claim_holds(evil_report):
    """With the claims run, a role the roles' rule names but whose pattern claim does not hold
    is not painted as one (a random model's grid was all "broad", confidence 1.0, while no
    pattern claim held): its cell is white, its role in parentheses, and the legend says why."""
    from probe.analyses.claims.claim import Claim
    from probe.analyses.claims.heads import HeadClaims
    from probe.app.report.html import esc
    from probe.app.report.pages import UNHELD, _grid
    from probe.app.report.style import ROLE_COLOURS

    data, _ = evil_report
    before = _grid(data)
    assert ROLE_COLOURS["broad"] in before and esc(UNHELD) not in before
    status = {(0, 0): "holds", (0, 1): "does not hold", (1, 0): "not enough evidence", (1, 1): "does not hold"}
    data.claims = HeadClaims({k: {"pattern": Claim("pattern", s)} for k, s in status.items()})
    after = _grid(data)
    assert ROLE_COLOURS["previous-token"] in after  # L0H0's claim holds: painted
    assert ROLE_COLOURS["broad"] not in after and esc(UNHELD) in after
    assert after.count('<span class="muted">(broad)</span>') == 3
