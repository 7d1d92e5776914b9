"""The import-direction contract: models < probe core < analyses < app, no cycles.

Every module's imports are parsed with ``ast`` (module level and inside functions) and
mapped to its floor; an import from a lower floor to a higher one fails, except the one
documented lazy facade (``probe/__init__.py``'s ``_EXPORTS``, which resolves names on
first access). Module-level imports must form no cycle. pyproject's explicit ``packages``
list must name every package folder.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: installed package -> folder (pyproject's package-dir)
PACKAGE_DIRS = {"probe.models": "models", "probe.analyses": "analyses", "probe.app": "app", "probe": "probe"}
FLOORS = {"probe.models": 0, "probe": 1, "probe.analyses": 2, "probe.app": 3}
#: the places a lower floor names a higher one: the lazy facade (strings, not imports) and
#: ``python -m probe``, the command line's entry point (nothing imports it)
ALLOWED_UPWARD = {("probe", "probe.app.registry"), ("probe", "probe.app.report.model_view"),
                  ("probe.__main__", "probe.app.cli")}
#: upward imports found by this test and not yet fixed; listed so that no *new* one can appear
KNOWN_VIOLATIONS: set = set()


def _modules() -> dict:
    """module name -> source path, for every .py under the mapped folders."""
    out = {}
    for package, folder in PACKAGE_DIRS.items():
        base = ROOT / folder
        for path in base.rglob("*.py"):
            rel = path.relative_to(base).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            name = ".".join([package] + parts)
            if package == "probe" and parts and parts[0] in ("models", "analyses", "app"):
                continue
            out[name] = path
    return out


def _floor(module: str) -> int:
    best = max((p for p in FLOORS if module == p or module.startswith(p + ".")), key=len)
    return FLOORS[best]


def _imports(name: str, path: Path, top_level_only: bool = False) -> set:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_pkg = path.name == "__init__.py"
    nodes = tree.body if top_level_only else ast.walk(tree)
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            found.add(mod)
            found.update(f"{mod}.{a.name}" for a in node.names)  # `from pkg import submodule`
    return {m for m in found if m == "probe" or m.startswith("probe.")}


def _resolve(mod: str, known: dict):
    while mod and mod not in known:
        mod = mod.rpartition(".")[0]
    return mod or None


def test_every_import_points_down():
    known = _modules()
    assert len(known) > 100, "the module walk found too few modules"
    bad = []
    for name, path in known.items():
        for imp in _imports(name, path):
            target = _resolve(imp, known)
            if target is None or target == name:
                continue
            if _floor(target) > _floor(name) and (name, target) not in ALLOWED_UPWARD | KNOWN_VIOLATIONS:
                bad.append(f"{name} -> {target}")
    assert not bad, "upward imports (models < probe < analyses < app):\n" + "\n".join(sorted(set(bad)))


def test_the_lazy_facade_is_strings_only():
    """probe/__init__.py names higher floors only as strings in _EXPORTS (no import)."""
    path = ROOT / "probe" / "__init__.py"
    assert not {m for m in _imports("probe", path) if _floor(m) > 1}
    tree = ast.parse(path.read_text())
    exports = next(n for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "_EXPORTS")
    targets = {v.value for v in exports.value.values}
    assert {t for t in targets if _floor(t) > 1} <= {t for _, t in ALLOWED_UPWARD}


def _cycles(graph: dict) -> list:
    """Every back edge of a depth-first walk, as the cycle it closes."""
    state, stack, cycles = {}, [], []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                cycles.append(stack[stack.index(dep):] + [dep])
            elif dep not in state:
                visit(dep)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return cycles


def test_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_level_import_cycle():
    known = _modules()
    graph = {}
    for name, path in known.items():
        deps = {_resolve(m, known) for m in _imports(name, path, top_level_only=True)}
        graph[name] = {d for d in deps if d and d != name}
    cycles = _cycles(graph)
    assert not cycles, "module-level import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_pyproject_packages_cover_every_package_folder():
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(conf["packages"])
    assert conf["package-dir"] == PACKAGE_DIRS
    found = set()
    for package, folder in PACKAGE_DIRS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            if package == "probe" and rel.parts and rel.parts[0] in ("models", "analyses", "app"):
                continue
            found.add(".".join([package] + list(rel.parts)))
    assert found - listed == set(), f"package folders missing from pyproject's packages: {sorted(found - listed)}"
    assert listed - found == set(), f"pyproject lists packages with no folder: {sorted(listed - found)}"


def test_import_probe_beside_a_users_models_and_analyses(tmp_path):
    """A folder with its own models.py and analyses.py (a Django app, a research repo)
    does not shadow the toolkit: everything lives under the `probe` namespace."""
    (tmp_path / "models.py").write_text("raise ImportError('the user models.py was imported')\n")
    (tmp_path / "analyses.py").write_text("raise ImportError('the user analyses.py was imported')\n")
    code = ("import probe, probe.models, probe.analyses, probe.app.registry; "
            "import models, analyses")  # the user's files are still theirs
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": ""})
    assert "the user models.py was imported" in res.stderr  # `import models` is the user's file…
    ok = subprocess.run([sys.executable, "-c", "import probe; import probe.models; import probe.analyses; "
                         "print(probe.models.__file__)"], cwd=tmp_path, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert Path(ok.stdout.strip()).parent == ROOT / "models"  # …and probe.models is the toolkit's


def test_help_imports_neither_torch_nor_transformers():
    code = ("import sys; from click.testing import CliRunner; from probe.app.cli import main; "
            "r = CliRunner().invoke(main, ['--help']); assert r.exit_code == 0; "
            "r = CliRunner().invoke(main, ['ablate', '--help']); assert r.exit_code == 0; "
            "print(sorted(m for m in ('torch', 'transformers', 'pandas') if m in sys.modules))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"


@pytest.mark.parametrize("name", ["probe.app.registry", "probe.app.cli"])
def test_top_floor_imports_are_light(name):
    res = subprocess.run([sys.executable, "-c", f"import sys, {name}; print('torch' in sys.modules)"],
                         capture_output=True, text=True, cwd=ROOT)
    assert res.stdout.strip() == "False", res.stderr


def test_the_facade_keeps_functions_over_submodules_of_the_same_name():
    """`probe.capture` is the function even after the submodule probe.capture is imported
    (notebooks call probe.capture(...) after other code imported the module)."""
    code = ("import probe.capture, probe; from probe.capture import iter_capture; "
            "assert callable(probe.capture) and probe.capture.__name__ == 'capture', probe.capture; "
            "assert probe.AttentionMaps.__name__ == 'AttentionMaps'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
