"""An analysis owns what the report shows of it (``Analysis.shows``) and a claim kind is a
registered ``ClaimTest``: a new per-head analysis, or a new claim kind, is one module
(tests/previous_share_analysis.py, tests/sharpness_claim.py) and appears everywhere;
the report's modules name no section."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]

#: string constants of app/report equal to an analysis name that do not name the section
#: (module, value): why
NOT_A_SECTION = {
    ("circuit_figures.py", "faithfulness"): "a column of the circuit's recovery curve",
    ("style.py", "coref"): "the grid's short label of the coreference role",
    ("syntax_figures.py", "coref"): "a key of the files `probe coref` writes",
}


def section_literals(path: Path, names: set) -> list:
    """``line: value`` of every string constant in ``path`` equal to one of ``names``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return sorted(
        f"{node.lineno}: {node.value}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names
    )


def test_the_report_names_no_section():
    """No module of app/report/ holds a registered analysis' name as a string (compare*.py
    reads summary.json's fixed fields and is left as it is)."""
    from probe.app.registry import registered

    names = {a.name for a in registered()}
    found = {}
    for path in sorted((ROOT / "app" / "report").glob("*.py")):
        if path.name.startswith("compare"):
            continue
        hits = [h for h in section_literals(path, names) if (path.name, h.split(": ", 1)[1]) not in NOT_A_SECTION]
        if hits:
            found[path.name] = hits
    assert not found, f"section names in the report (declare them in Analysis.shows): {found}"


def test_the_section_name_check_finds_one(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text('ORDER = {("ablation", "ablation"): 1}\nx = "ablation_delta"\n', encoding="utf-8")
    assert section_literals(sample, {"ablation", "roles"}) == ["1: ablation", "1: ablation"]


# ---- a per-head analysis in one module --------------------------------------------------
@pytest.fixture
def previous_share(monkeypatch):
    """tests/previous_share_analysis.py imported (registered) into a copy of the registry."""
    import probe.app.registry as registry

    registry.registered()  # the built-in analyses first
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    sys.modules.pop("previous_share_analysis", None)
    yield importlib.import_module("previous_share_analysis")
    sys.modules.pop("previous_share_analysis", None)


def _two_heads():
    """Three examples of one layer, two heads: head 0 looks uniformly, head 1 at the previous token."""
    from conftest import make_maps, previous_token, uniform

    from probe.inputs.corpus import Corpus

    n = 5
    m = make_maps(torch.cat([uniform(n), previous_token(n)], dim=1))
    return [m] * 3, Corpus(texts=(m.text,) * 3)


def test_a_new_per_head_analysis_is_one_module(previous_share, tmp_path):
    """Registered from one module, it is a report section with its own block on the head
    pages, its sorted table on the index, its part of the verdict and its facts and
    evidence in summary.json; its numbers are the maps' (1/5 per row, and 1)."""
    from probe.app.registry import open_run
    from probe.app.report.build import analyse, write_report
    from probe.app.report.sections import choose

    name = previous_share.NAME
    assert [s.name for s in choose([name])] == [name] and name not in [s.name for s in choose()]
    maps, corpus = _two_heads()
    data = analyse(open_run(None, corpus, maps=maps), sections=[name], strict=True)
    out = write_report(data, tmp_path / "report")
    summary = json.loads((out / "summary.json").read_text())
    assert [s["name"] for s in summary["sections"]] == [name] and summary["sections"][0]["status"] == "ran"
    heads = {(h["layer"], h["head"]): h for h in summary["heads"]}
    assert heads[(0, 0)]["facts"][name]["share"] == pytest.approx(0.2)  # uniform over 5 tokens
    assert heads[(0, 1)]["facts"][name]["share"] == pytest.approx(1.0)
    (ev,) = heads[(0, 0)]["evidence"]
    assert ev["section"] == name and ev["value"] == pytest.approx(0.2) and ev["count"] == 3
    assert heads[(0, 1)]["verdict"] == "previous-token share 100%"  # the declared hint, the only one said
    page = (out / "heads" / "L0H0.html").read_text()
    assert "<h3>How much it looks back</h3><p><b>20%</b> of its attention goes to the previous token, over 3" in page
    index = (out / "index.html").read_text()
    # its declared table view: the largest share first
    assert "<tr><td>0</td><td>1</td><td>1</td></tr><tr><td>0</td><td>0</td><td>0.200</td></tr>" in index


def test_a_new_analysis_is_a_command_and_runs_from_python(previous_share, tmp_path):
    """``probe.run`` finds it at once; ``probe previous-share`` exists in a CLI started
    after the module is imported (--help, and a run through click's CliRunner)."""
    import probe

    res = probe.run(previous_share.NAME, text=["The cat sat on the mat.", "A dog ran home."])
    assert set(res.per_head.columns) == {"layer", "head", "share"} and res.summary == {"examples": 2}
    assert ((res.per_head["share"] > 0) & (res.per_head["share"] <= 1)).all()
    out = tmp_path / "cli"
    script = (
        "import json, sys; sys.path.insert(0, 'tests'); import previous_share_analysis\n"
        "from click.testing import CliRunner\nfrom probe.app.cli import main\n"
        "h = CliRunner().invoke(main, ['previous-share', '--help'])\n"
        f"r = CliRunner().invoke(main, ['previous-share', '--text', 'The cat sat on the mat.', '--out', {str(out)!r}])\n"
        "print(json.dumps([h.exit_code, h.output, r.exit_code, r.output]))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    help_code, help_text, run_code, run_text = json.loads(done.stdout.strip().splitlines()[-1])
    assert help_code == 0 and "Previous-token share per head" in help_text and "--text" in help_text
    assert run_code == 0, run_text
    assert (out / "shares.csv").read_text().splitlines()[0] == "layer,head,share"


# ---- a claim kind in one module ---------------------------------------------------------
@pytest.fixture
def sharpness(monkeypatch):
    """tests/sharpness_claim.py imported (registered) into a copy of the claim kinds."""
    from probe.analyses.claims import protocol

    monkeypatch.setattr(protocol, "_TESTS", dict(protocol._TESTS))
    sys.modules.pop("sharpness_claim", None)
    yield importlib.import_module("sharpness_claim")
    sys.modules.pop("sharpness_claim", None)


def test_a_new_claim_kind_is_one_module(sharpness, tmp_path):
    """Registered from one module, the kind is computed for every head, listed on the head
    pages under its title, in summary.json's claim fields and counts, in report.md's table
    and in the head's summary sentence; its numbers are the maps' (row maxima 0.2 and 1)."""
    from probe.app.registry import open_run
    from probe.app.report.build import analyse, write_report

    maps, corpus = _two_heads()
    data = analyse(open_run(None, corpus, maps=maps), sections=["claims"], strict=True)
    out = write_report(data, tmp_path / "report")
    summary = json.loads((out / "summary.json").read_text())
    heads = {(h["layer"], h["head"]): h for h in summary["heads"]}
    flat, sharp = heads[(0, 0)]["claims"][sharpness.KIND], heads[(0, 1)]["claims"][sharpness.KIND]
    assert sharp["status"] == "holds" and sharp["effect"] == pytest.approx(1.0) and sharp["count"] == 15
    assert flat["status"] == "does not hold" and flat["effect"] == pytest.approx(0.2)
    assert list(heads[(0, 0)]["claims"])[-1] == sharpness.KIND  # after the built-in kinds
    assert summary["claims"]["counts"][sharpness.KIND] == {
        "holds": 1,
        "does not hold": 1,
        "depends on the baseline": 0,
        "not tested": 0,
        "not enough evidence": 0,
    }
    assert "sharp (mean largest weight 1.00)" in heads[(0, 1)]["verdict"].lower()
    assert "sharp" not in heads[(0, 0)]["verdict"].lower()
    page = (out / "heads" / "L0H0.html").read_text()
    assert '<li><b>Sharpness</b> — <span class="muted">does not hold</span>: mean largest weight 0.20' in page
    assert f" {sharpness.KIND} |" in (out / "report.md").read_text()
