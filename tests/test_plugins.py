"""Plugins by entry point: an analysis in an installed package (entry-point group
``attention_probe.analyses``) appears in ``probe --help``, ``probe.run`` and the report, as a
built-in one does; a broken plugin is left out with one line and stops nothing.

The package is installed as a real distribution would be: a folder on ``sys.path`` with the
module and a ``*.dist-info`` holding its METADATA and ``entry_points.txt`` (what pip writes),
read by :mod:`importlib.metadata` in a fresh interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PLUGIN = '''
"""A third party's analysis: the share of each head's attention on the first token."""
from probe.app.registry import Analysis, Result
from probe.app.registry.presentation import Presentation, TableView


def run(ctx):
    import pandas as pd

    rows = []
    for layer in range(ctx.maps[0].attentions.shape[0]):
        for head in range(ctx.maps[0].attentions.shape[1]):
            share = sum(float(m.attentions[layer, head, :, 0].mean()) for m in ctx.maps) / len(ctx.maps)
            rows.append({"layer": layer, "head": head, "first_token_share": share})
    table = pd.DataFrame(rows)
    return Result(tables={"first": table}, per_head=table, notes=[f"plugin ran on {len(ctx.maps)} examples"],
                  summary={"examples": len(ctx.maps)})


ANALYSIS = Analysis("first-token", "Attention to the first token (a plugin)", run, needs=("maps",),
                    section=True, shows=Presentation(tables={"first": TableView("first_token_share")}))
'''


CLAIM_PLUGIN = '''
"""A third party's claim kind: a head's attention on the first token, as a claim."""
from probe.analyses.claims.claim import Claim
from probe.analyses.claims.protocol import ClaimTest, register_claim


def compute(inputs):
    out = {}
    for layer, head in inputs.heads:
        share = sum(float(m.attentions[layer, head, :, 0].mean()) for m in inputs.maps) / max(len(inputs.maps), 1)
        status = "holds" if share > 0.5 else "does not hold"
        out[(layer, head)] = Claim("first-heavy", status, "attends to the first token", effect=share,
                                   count=len(inputs.maps), reason=f"share {share:.2f}")
    return out


register_claim(ClaimTest("first-heavy", "First-token heavy", "most of its attention is on the first token", compute))
'''


def _install(site: Path, name: str, module: str, source: str | None, entry: str, group: str = "analyses") -> None:
    """A distribution ``name`` in ``site``: module ``module`` (when ``source``) and the entry point."""
    if source is not None:
        (site / module).mkdir(parents=True)
        (site / module / "__init__.py").write_text(textwrap.dedent(source))
    info = site / f"{name.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[attention_probe.{group}]\n{entry}\n")


def _python(site: Path, code: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(site), MPLBACKEND="Agg", HF_HUB_OFFLINE="1")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, env=env, timeout=600)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    site = tmp_path_factory.mktemp("site-packages")
    _install(site, "probe-first-token", "probe_first_token", PLUGIN, "first = probe_first_token")
    _install(site, "probe-first-heavy", "probe_first_heavy", CLAIM_PLUGIN, "first-heavy = probe_first_heavy", "claims")
    _install(
        site,
        "probe-broken",
        "probe_broken",
        "raise ImportError('needs a package this machine lacks')",
        "broken = probe_broken",
    )
    return site


@pytest.mark.slow
def test_an_installed_plugin_is_a_command_a_run_and_a_report_section(site, tmp_path):
    code = textwrap.dedent(
        """
        import json, sys
        from click.testing import CliRunner
        import probe
        from probe.app.cli import main
        help_text = CliRunner().invoke(main, ["--help"]).output
        res = probe.run("first-token", model="zoo:constructed", limit=4)
        report = CliRunner().invoke(main, ["report", "--model", "zoo:constructed", "--limit", "4",
                                           "--sections", "first-token,roles,claims", "--out", "rep", "--quiet"])
        print(json.dumps({"help": help_text, "rows": len(res.tables["first"]),
                          "cols": list(res.tables["first"].columns), "report_exit": report.exit_code,
                          "report_output": report.output}))
        """
    )
    r = _python(site, code, tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert "first-token" in out["help"] and "Attention to the first token (a plugin)" in out["help"]
    assert out["rows"] == 2 and out["cols"] == ["layer", "head", "first_token_share"]  # zoo:constructed: 1 × 2 heads
    assert out["report_exit"] == 0, out["report_output"]
    summary = json.loads((tmp_path / "rep" / "summary.json").read_text())
    assert "first-token" in json.dumps(summary)
    claims = [h["claims"]["first-heavy"] for h in summary["heads"] if "first-heavy" in h["claims"]]
    assert len(claims) == 2 and {c["status"] for c in claims} <= {"holds", "does not hold"}
    index = (tmp_path / "rep" / "index.html").read_text()
    assert "Attention to the first token (a plugin)" in index
    # the broken plugin is left out in one line naming it, and nothing else changed
    assert "analysis plugin 'broken'" in r.stderr and "needs a package this machine lacks" in r.stderr
    assert "Traceback" not in r.stderr


def test_no_plugin_installed_leaves_the_built_in_analyses(tmp_path):
    r = _python(tmp_path, "from probe.app.registry import analyses_registered; print(analyses_registered())", tmp_path)
    assert r.returncode == 0, r.stderr
    assert "first-token" not in r.stdout and "roles" in r.stdout
