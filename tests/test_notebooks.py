"""Execute every notebook in notebooks/ with nbclient (kernel ``python3`` of this
environment); a notebook whose imports are not available is skipped, naming them.

A notebook teaches: markdown cells tell the method (with its paper), how to read the
result and a zoo check. Its output is quiet: nothing on stderr but the messages the
notebook explains (listed in its metadata ``probe.explained_stderr`` and said in a
markdown cell), and nothing written into the working directory.
"""

from __future__ import annotations

import ast
import re
import importlib
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def _imports(nb) -> list:
    mods = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for node in ast.walk(ast.parse(cell.source)):
            if isinstance(node, ast.Import):
                mods += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                mods.append(node.module)
    return mods


def _missing(mods) -> list:
    out = []
    for m in dict.fromkeys(mods):
        try:
            importlib.import_module(m)
        except ImportError:
            out.append(m)
    return out


def test_notebooks_teach():
    """One question per notebook, told in prose around the code: a paper cited, a zoo check."""
    import nbformat

    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        prose = [c.source for c in nb.cells if c.cell_type == "markdown"]
        code = [c.source for c in nb.cells if c.cell_type == "code"]
        assert prose[0].startswith("# "), path.name
        assert len(prose) >= 4 and len(code) >= 3, path.name
        assert re.search(r"\(\d{4}|\d{4}\)|et al\. \d{4}|\d{4}, ", " ".join(prose)), f"{path.name} cites no paper"
        assert "zoo" in " ".join(code), f"{path.name} has no zoo check"
        assert "HF_HUB_DISABLE_PROGRESS_BARS" in code[0], f"{path.name} does not silence the loading bars"


def test_notebooks_are_stored_without_outputs():
    import nbformat

    assert len(NOTEBOOKS) == 7
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None, path.name


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    missing = _missing(_imports(nb))
    if missing:
        pytest.skip(f"{path.name} imports {', '.join(missing)}, not available yet")
    # the kernel runs this interpreter (the venv's), offline, with the project importable
    bindir = str(Path(sys.executable).parent)
    monkeypatch.setenv("PATH", bindir + os.pathsep + os.environ.get("PATH", ""))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    client = NotebookClient(nb, kernel_name="python3", timeout=600,
                            resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
    explained = nb.metadata.get("probe", {}).get("explained_stderr", [])
    stderr = [line for c in nb.cells if c.cell_type == "code" for o in c.outputs
              if o.output_type == "stream" and o.name == "stderr" for line in o.text.splitlines() if line.strip()]
    noise = [line for line in stderr if not any(e in line for e in explained)]
    assert not noise, f"{path.name} writes to stderr: {noise[:3]}"
    prose = " ".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert not explained or "warn" in prose.lower(), f"{path.name}: its expected warning is not explained"
    assert sorted(p.name for p in tmp_path.iterdir()) == [], f"{path.name} wrote into the working directory"
    last = [c for c in nb.cells if c.cell_type == "code"][-1]
    assert last.outputs, f"{path.name}: the last cell shows nothing"
