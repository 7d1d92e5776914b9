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
ALLOWED_UPWARD = {
    ("probe", "probe.app.registry"),
    ("probe", "probe.app.report.model_view"),
    ("probe.__main__", "probe.app.cli"),
}
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
                cycles.append(stack[stack.index(dep) :] + [dep])
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


def test_no_import_cycle_between_files_counting_every_import():
    """Stricter than the module-level check: imports inside functions and under
    ``TYPE_CHECKING`` count too, so no two files lean on each other even lazily (a circle
    that only a deferred import keeps from failing at import time is still a circle). The
    packages' ``__init__`` facades, which re-export their modules' names lazily, stand
    apart: an import of a package's name points past its facade."""
    known = _modules()
    facades = {name for name, path in known.items() if path.name == "__init__.py"}
    graph = {}
    for name, path in known.items():
        if name in facades:
            continue
        deps = {_resolve(m, known) for m in _imports(name, path)}
        graph[name] = {d for d in deps if d and d != name and d not in facades}
    cycles = _cycles(graph)
    assert not cycles, "import cycles between files:\n" + "\n".join(" -> ".join(c) for c in cycles)


#: the core floor's rooms (sub-packages of probe/) and the two shared modules under them; an
#: import between rooms points to a lower rank, and nothing else stands at probe/'s top
ROOMS = {"errors": 0, "maps": 1, "inputs": 1, "store": 2, "tracing": 2, "interventions": 3, "runs": 4}


def _room_imports() -> list:
    """(room, imported room) for every import of one core room by another."""
    out = []
    for path in (ROOT / "probe").rglob("*.py"):
        parts = path.relative_to(ROOT / "probe").with_suffix("").parts
        if parts[0] in ("__init__", "__main__"):
            continue
        name = ".".join(["probe", *[p for p in parts if p != "__init__"]])
        for imp in _imports(name, path):
            room = imp.split(".")[1] if imp.count(".") else None
            if room in ROOMS and room != parts[0]:
                out.append((parts[0], room))
    return out


def test_the_core_floor_stands_in_rooms_that_import_down():
    top = {p.stem for p in (ROOT / "probe").iterdir() if (p.suffix == ".py" or p.is_dir()) and p.name != "__pycache__"}
    assert top - {"__init__", "__main__"} == set(ROOMS), "a module at probe/'s top belongs in a room (ROOMS)"
    pairs = _room_imports()
    assert ("runs", "tracing") in pairs, "the room walk found no imports"
    up = sorted({f"{a} -> {b}" for a, b in pairs if ROOMS[b] >= ROOMS[a]})
    assert not up, "imports between probe/'s rooms must point down " + str(ROOMS) + ":\n" + "\n".join(up)


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
    code = (
        "import probe, probe.models, probe.analyses, probe.app.registry; "
        "import models, analyses"
    )  # the user's files are still theirs
    res = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ""}
    )
    assert "the user models.py was imported" in res.stderr  # `import models` is the user's file…
    ok = subprocess.run(
        [
            sys.executable,
            "-c",
            "import probe; import probe.models; import probe.analyses; print(probe.models.__file__)",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0, ok.stderr
    assert Path(ok.stdout.strip()).parent == ROOT / "models"  # …and probe.models is the toolkit's


def test_help_imports_neither_torch_nor_transformers():
    code = (
        "import sys; from click.testing import CliRunner; from probe.app.cli import main; "
        "r = CliRunner().invoke(main, ['--help']); assert r.exit_code == 0; "
        "r = CliRunner().invoke(main, ['ablate', '--help']); assert r.exit_code == 0; "
        "print(sorted(m for m in ('torch', 'transformers', 'pandas') if m in sys.modules))"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"


@pytest.mark.parametrize("name", ["probe.app.registry", "probe.app.cli"])
def test_top_floor_imports_are_light(name):
    res = subprocess.run(
        [sys.executable, "-c", f"import sys, {name}; print('torch' in sys.modules)"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert res.stdout.strip() == "False", res.stderr


def test_public_functions_never_share_a_name_with_a_module():
    """``probe.capture`` and ``probe.trace`` are functions even after every module of the
    core floor is imported: no module of ``probe/`` is named like a public export, so the
    import system never sets a submodule over an exported name (no facade needed)."""
    code = (
        "import pkgutil, importlib, probe; "
        "[importlib.import_module(m.name) for m in pkgutil.walk_packages(probe.__path__, 'probe.') "
        "if m.name.split('.')[1] not in ('models', 'analyses', 'app', '__main__')]; "
        "assert callable(probe.capture) and probe.capture.__name__ == 'capture', probe.capture; "
        "assert callable(probe.trace) and probe.trace.__name__ == 'trace', probe.trace; "
        "assert probe.AttentionMaps.__name__ == 'AttentionMaps'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
    exports = set(probe_exports())
    rooms = {p.stem for p in (ROOT / "probe").iterdir() if p.suffix == ".py" or p.is_dir()}
    assert not exports & rooms, f"a module of probe/ is named like a public export: {sorted(exports & rooms)}"


def probe_exports() -> dict:
    tree = ast.parse((ROOT / "probe" / "__init__.py").read_text())
    node = next(n for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "_EXPORTS")
    return {k.value: v.value for k, v in zip(node.value.keys, node.value.values)}


# ---- one trace core, no private imports, errors by kind -------------------------------------
#: the trace core: the only modules that register hooks on a model, attach attention-interface
#: sessions or override a module's forward (probe.models.hooks is its primitive; the interface
#: path's sessions are defined in probe.tracing.attention_interface, the trace's own in
#: probe.tracing.session, and attached by probe.tracing.trace_context)
TRACE_CORE = {"probe.models.hooks", "probe.tracing.trace_context", "probe.tracing.session"}
#: mechanisms not yet views of the trace, each for a stated reason; listed so that no *new*
#: module can hook a model (capture, interventions, reweighting, circuits' paths and layer
#: identity by call are views of the trace: it dispatches a module several layers share by
#: call, and any module's input or output is a site, probe.tracing.site_keys.ModuleSite)
NOT_YET_TRACE_VIEWS = {
    # the adapter's discovery at load time (which attention modules a forward calls),
    # on the floor below probe.tracing.trace
    "probe.models.adapter",
}
HOOK_CALLS = {
    "register_forward_hook",
    "register_forward_pre_hook",
    "register_full_backward_hook",
    "register_full_backward_pre_hook",
    "register_backward_hook",
    "register_module_forward_hook",
    "register_module_forward_pre_hook",
}
HOOK_NAMES = {"HookSet", "HookContext", "AttentionSession"}


def _hook_uses(path: Path) -> list:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in HOOK_CALLS | {"attach"} and isinstance(node.ctx, ast.Load):
            if node.attr != "attach" or "session" in ast.unparse(node.value).lower():
                found.append(f"{node.lineno}: {node.attr}")
        elif isinstance(node, ast.Name) and node.id in HOOK_NAMES:
            found.append(f"{node.lineno}: {node.id}")
        elif isinstance(node, ast.alias) and node.name in HOOK_NAMES:
            found.append(f"import {node.name}")
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Attribute) and t.attr == "forward" for t in node.targets
        ):
            found.append(f"{node.lineno}: .forward = (a stubbed forward)")
    return found


def test_only_the_trace_core_registers_hooks():
    """Every read or edit of a live model goes through probe.tracing.trace (sites of probe.models.sites)."""
    known = _modules()
    bad = {
        name: uses
        for name, path in known.items()
        if name not in TRACE_CORE | NOT_YET_TRACE_VIEWS | {"probe.tracing.attention_interface"}
        and (uses := _hook_uses(path))
    }
    assert not bad, "hooks registered outside the trace core (use probe.tracing.trace_context.Trace):\n" + "\n".join(
        f"{n}: {u}" for n, u in sorted(bad.items())
    )
    # the interface module defines the session types but attaches nothing itself
    attaches = [
        u
        for u in _hook_uses(ROOT / "probe" / "tracing" / "attention_interface.py")
        if "attach" in u or "register_" in u
    ]
    assert not attaches
    assert all(_hook_uses(known[name]) for name in TRACE_CORE)  # the check sees the core's own hooks


def test_one_module_registers_hooks_with_torch():
    """torch's ``register_*hook`` is called in one module, the own-handle primitive
    (probe.models.hooks: handles kept, exactly those removed); the trace and the adapter's
    load-time discovery register through it."""
    calls = {
        name for name, path in _modules().items() if any(u.split(": ")[-1] in HOOK_CALLS for u in _hook_uses(path))
    }
    assert calls == {"probe.models.hooks"}, calls


def test_hook_check_finds_a_hook():
    src = "def f(m, fn):\n    h = m.register_forward_pre_hook(fn)\n    m.forward = fn\n"
    path = ROOT / "tests" / "_hook_sample.py"
    try:
        path.write_text(src)
        assert sorted(_hook_uses(path)) == ["2: register_forward_pre_hook", "3: .forward = (a stubbed forward)"]
    finally:
        path.unlink()


#: private names imported across modules today, in code another branch is rewriting (the one
#: sweep of analyses/necessity); listed so that no *new* one can appear
KNOWN_PRIVATE_IMPORTS: set = set()


def _private_imports(name: str, path: Path, known: dict) -> set:
    """``(module, source, name)`` for each ``from source import _name`` (module level or in a
    function) where ``_name`` is not a module of ``source``'s own package."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_pkg = path.name == "__init__.py"
    out = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            base = name.split(".") if is_pkg else name.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            src = ".".join(base + ([node.module] if node.module else []))
        else:
            src = node.module or ""
        if not (src == "probe" or src.startswith("probe.")):
            continue
        for alias in node.names:
            private = alias.name.startswith("_") and not alias.name.startswith("__")
            if private and f"{src}.{alias.name}" not in known:  # a private module of a package is its own
                out.add((name, src, alias.name))
    return out


def test_no_private_name_is_imported_across_modules():
    known = _modules()
    found = set().union(*(_private_imports(n, p, known) for n, p in known.items()))
    new = sorted(found - KNOWN_PRIVATE_IMPORTS)
    assert not new, "private names imported from another module (make them public or move them):\n" + "\n".join(
        f"{a} <- {b}.{c}" for a, b, c in new
    )


BROAD = {"Exception", "BaseException", "ValueError"}
#: handlers of a broad type that do not re-raise, each for a stated reason (path -> count):
#: the report's one section runner (marks a section *failed* with the exception's type),
#: validation that collects a user's bad records as problems, and number formatting of
#: ``float(x)`` conversions. Anything else that catches ValueError/Exception and carries
#: on is "ValueError as control flow" (tests/test_errors.py, probe.errors).
ALLOWED_BROAD_HANDLERS = {
    "app/report/sections.py": 1,  # failed: <type>: <message>
    "app/registry/__init__.py": 1,  # an installed analysis plugin that fails to import: left out, said in one line
    "analyses/claims/protocol.py": 1,  # the same for a claim-kind plugin
    "probe/store/repair.py": 1,  # a store's bad records listed as problems
    "probe/store/schema.py": 1,
    "probe/inputs/readers.py": 1,  # a malformed CoNLL-U sentence, reported with --skip-invalid
    "models/registry.py": 1,  # `probe models`: the bundled model's package missing
    "app/report/pages.py": 1,  # /proc/uptime unreadable: no elapsed time printed
    "app/report/evidence.py": 1,  # float(x) of a table cell
    "app/report/verdict.py": 1,
    "app/report/style.py": 1,
    "app/report/html.py": 1,
    "app/registry/analyses/roles.py": 1,  # float(value) of NAME=VALUE, refused right after
    "app/report/fonts.py": 2,  # a font file that cannot be read: the next one is tried
    "models/batching.py": 1,  # the padding check's trial forward on ids alone failed: the structural verdict stands
    "models/adapter.py": 2,  # discovery's trial forward failed: nothing is left out; a forward whose
    # signature inspect cannot read keeps the class's main_input_name
    "probe/tracing/hooks.py": 1,  # restoring the attention setting on a sub-model that has none of its own
    # (RT-DETR's ResNet backbone has no SDPA): the config's field is restored instead
}


def _broad_handlers(path: Path) -> int:
    def names(t) -> set:
        if t is None:
            return {"BaseException"}
        if isinstance(t, ast.Tuple):
            return set().union(*(names(e) for e in t.elts))
        return {t.id} if isinstance(t, ast.Name) else {t.attr} if isinstance(t, ast.Attribute) else set()

    tree = ast.parse(path.read_text(encoding="utf-8"))
    return sum(
        1
        for node in ast.walk(tree)
        if isinstance(node, ast.ExceptHandler)
        and names(node.type) & BROAD
        and not any(isinstance(n, ast.Raise) for b in node.body for n in ast.walk(b))
    )


def test_no_broad_except_turns_an_error_into_a_status():
    counts = {}
    for folder in PACKAGE_DIRS.values():
        for path in (ROOT / folder).rglob("*.py"):
            n = _broad_handlers(path)
            if n:
                counts[str(path.relative_to(ROOT))] = n
    extra = {p: n for p, n in counts.items() if n > ALLOWED_BROAD_HANDLERS.get(p, 0)}
    assert not extra, (
        "except Exception / ValueError that carries on (raise NotApplicable for 'does not apply', "
        f"InputError for bad input; let bugs propagate): {extra}"
    )


# ---- one run, typed results (issue 26, items 4 and 5) ---------------------------------
#: the only modules that touch ``ctx.report.results`` by key: the report's section runner (writes
#: each result under its section's name) and the context (``result_of`` reads by type)
RESULTS_BY_KEY = {"app/report/sections.py", "app/registry/context.py"}


def _results_by_key(path: Path) -> list:
    """``line: text`` of each ``<x>.results[...]`` or ``<x>.results.get(...)``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "results":
            found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and isinstance(node.func.value, ast.Attribute)
            and node.func.value.attr == "results"
        ):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_section_reads_another_through_a_string_key():
    """A section reads another's output by type (``ctx.result_of(AblationResult)``, declared
    in ``consumes``), never as ``ctx.report.results["ablation"]`` or ``.results.get(name)``."""
    bad = {}
    for path in (ROOT / "app").rglob("*.py"):
        rel = str(path.relative_to(ROOT))
        if rel not in RESULTS_BY_KEY and (uses := _results_by_key(path)):
            bad[rel] = uses
    assert not bad, "results read by name (use ctx.result_of(<type>) and declare consumes):\n" + "\n".join(
        f"{p}: {u}" for p, u in sorted(bad.items())
    )


def test_results_check_finds_a_read_by_name(tmp_path):
    src = 'def f(ctx, n):\n    a = ctx.results["ablation"]\n    b = ctx.results.get(n)\n    return ctx.result_of(a)\n'
    path = tmp_path / "_results_sample.py"  # never into the source tree
    path.write_text(src)
    assert _results_by_key(path) == ["2: ctx.results['ablation']", "3: ctx.results.get(n)"]


def _classes(path: Path) -> list:
    return [n.name for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(n, ast.ClassDef)]


def test_one_context_class_for_commands_and_the_report():
    """One run, one context: ``probe.app.registry.Context`` (opened by ``open_run``) is the
    only context class of the top floor; no ``ReportContext`` beside it."""
    found = {
        f"{path.relative_to(ROOT)}:{name}"
        for path in (ROOT / "app").rglob("*.py")
        for name in _classes(path)
        if name.endswith("Context")
    }
    assert found == {"app/registry/context.py:Context"}, found
    import probe.app.report as report

    assert not hasattr(report, "ReportContext")


def test_what_sections_consume_is_produced_before_them():
    """A section that others read declares the type it produces (one section per type); a
    section nobody reads may return a plain ``Result`` (``produces=None``: one module, no
    class in registry/results.py). What a section consumes is produced by a section that
    the runner puts before it."""
    from probe.app.registry import Result
    from probe.app.report.sections import in_order, registered

    sections = registered()
    typed = [s for s in sections if s.produces is not None]
    produced = {s.produces: s.name for s in typed}
    assert all(isinstance(s.produces, type) and issubclass(s.produces, Result) for s in typed)
    assert len(produced) == len(typed), "two sections produce the same type"
    order = [s.name for s in in_order(sections)]
    for s in sections:
        for kind in s.consumes + s.requires:
            assert kind in produced, f"{s.name} consumes {kind.__name__}, which no section produces"
            assert order.index(produced[kind]) < order.index(s.name)


def _guarded_imports(path: Path) -> list:
    """``try: from probe… import X`` (or a relative import) whose ``except ImportError``
    carries on: a constant that may or may not exist."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Try):
            continue
        ours = [
            n
            for b in node.body
            for n in ast.walk(b)
            if isinstance(n, ast.ImportFrom) and (n.level or (n.module or "").startswith("probe"))
        ]
        guarded = [
            h
            for h in node.handlers
            if "ImportError" in ast.unparse(h.type or ast.Name("BaseException"))
            and not any(isinstance(n, ast.Raise) for b in h.body for n in ast.walk(b))
        ]
        if ours and guarded:
            out.append(node.lineno)
    return out


def test_guard_check_finds_a_guarded_import():
    src = "try:\n    from probe.x import CONST\nexcept ImportError:\n    CONST = None\n"
    path = ROOT / "tests" / "_guard_sample.py"
    try:
        path.write_text(src)
        assert _guarded_imports(path) == [1]
    finally:
        path.unlink()


def test_no_guarded_import_of_our_own_names():
    bad = {
        str(p.relative_to(ROOT)): lines
        for folder in ("app", "analyses", "probe", "models")
        for p in (ROOT / folder).rglob("*.py")
        if (lines := _guarded_imports(p))
    }
    assert not bad, f"guarded imports of the project's own names (import them plainly): {bad}"


#: plain ``raise ValueError`` left in the toolkit (path -> count), each an internal invariant
#: whose breaking is a bug (exit 3, a report section *failed*): merging accumulators of
#: different shapes, score arrays built by the toolkit itself, a claim's own fields, the
#: registry's checks of an analysis as a developer declares it, a zoo model built wrong,
#: and ValueErrors raised to be caught a few lines below (validate.py, the zoo's weights
#: check). Validators of a user's input raise InputError, "does not apply" NotApplicable
#: (probe.errors); anything not listed here may raise neither a plain ValueError.
ALLOWED_PLAIN_VALUE_ERRORS = {
    "analyses/claims/claim.py": 2,  # a Claim's status and kind, set by the toolkit
    "analyses/claims/statistics.py": 1,  # a proportion of 0 ≤ successes ≤ n
    "analyses/common/accumulate.py": 1,  # merging accumulators / partitioned blocks
    "analyses/structure/streaming.py": 1,  # an accumulator fed both by layer and whole examples
    "probe/runs/blocks.py": 2,  # merging the blocks' accumulators (moved from accumulate.py)
    "analyses/common/similarity.py": 1,  # similarity-structure has no per-run score
    "analyses/common/token_scores.py": 1,  # scores shaped by the toolkit
    "analyses/common/word_scores.py": 2,
    "analyses/explanation/agreement.py": 2,  # attention and attributions of one corpus
    "analyses/explanation/ground_truth.py": 1,
    "analyses/flow/blankout.py": 1,
    "analyses/flow/grad_attention.py": 2,
    "analyses/flow/norm_attention.py": 3,  # values and projections read from one model
    "analyses/necessity/ablation_sums.py": 2,
    "analyses/patterns/role_features.py": 5,  # merging feature accumulators (another level, kept examples, fed two ways; the punctuation share)
    "analyses/structure/attention_probe.py": 3,  # the probe's own fit/predict contract
    "analyses/structure/coref.py": 1,  # merging coreference counts
    "analyses/structure/syntax.py": 1,  # merging relation counts
    "analyses/structure/trees.py": 2,  # a score matrix built by the toolkit
    "analyses/structure/ud_probe.py": 1,  # encodings and labels of one corpus
    "app/registry/__init__.py": 2,  # an analysis registered wrong (a developer's error)
    "app/registry/presentation.py": 1,  # a verdict hint declared in an unknown slot (a developer's error)
    "analyses/claims/protocol.py": 1,  # a claim kind registered twice (a developer's error)
    "app/registry/validate.py": 1,  # raised and caught in one function
    "models/zoo/_common.py": 1,  # duplicate vocabulary
    "models/zoo/constructed.py": 1,  # a constructed model's config
    "models/zoo/relay.py": 1,  # the relay model's tokenizer
}
#: the classes that subclass ValueError directly: InputError only (NotApplicable is its own
#: exception, so no `except ValueError` turns "does not apply" into anything)
ERROR_KINDS = {"models/errors.py": {"InputError"}}


def _plain_value_errors(path: Path) -> tuple:
    """(number of ``raise ValueError`` / ``raise ValueError(...)``, names of classes whose
    base is ``ValueError`` itself) in one module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    raises, classes = 0, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and node.exc is not None:
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            raises += isinstance(exc, ast.Name) and exc.id == "ValueError"
        elif isinstance(node, ast.ClassDef) and any(
            isinstance(b, ast.Name) and b.id == "ValueError" for b in node.bases
        ):
            classes.add(node.name)
    return raises, classes


def test_plain_value_error_check_finds_one():
    src = "class E(ValueError):\n    pass\n\n\ndef f(x):\n    if x:\n        raise ValueError('x')\n    raise ValueError\n"
    path = ROOT / "tests" / "_value_error_sample.py"
    try:
        path.write_text(src)
        assert _plain_value_errors(path) == (2, {"E"})
    finally:
        path.unlink()


def test_bad_input_is_an_input_error_not_a_plain_value_error():
    """The command line tells bad input (exit 1) from a bug (exit 3) by type only
    (probe.errors.is_input_error): a validator that raised a plain ValueError would now
    report a user's typo as a bug, so no new one may appear."""
    counts, classes = {}, {}
    for folder in PACKAGE_DIRS.values():
        for path in (ROOT / folder).rglob("*.py"):
            n, found = _plain_value_errors(path)
            rel = str(path.relative_to(ROOT))
            if n:
                counts[rel] = n
            if found:
                classes[rel] = found
    extra = {p: n for p, n in counts.items() if n > ALLOWED_PLAIN_VALUE_ERRORS.get(p, 0)}
    assert not extra, (
        "raise ValueError in the toolkit (a validator raises probe.errors.InputError, 'does not apply' "
        f"NotApplicable; an internal invariant is listed in ALLOWED_PLAIN_VALUE_ERRORS): {extra}"
    )
    assert classes == ERROR_KINDS, f"subclass InputError or NotApplicable, not ValueError: {classes}"


#: words that make a comparison with "auto" one about an objective (metric, target) name
OBJECTIVE_WORDS = ("metric", "objective", "target", "spec", "chosen")
#: (file, function) allowed to compare such a name with "auto": the one resolver
AUTO_COMPARISONS = {("analyses/common/objective.py", "resolve_objective")}


def _auto_comparisons(path: Path) -> set:
    """``(function, line)`` of each comparison of an objective-like name with ``"auto"``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()

    def is_auto(node) -> bool:
        if isinstance(node, ast.Constant):
            return node.value == "auto"
        return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(is_auto(e) for e in node.elts)

    def visit(node, func: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else func
            if isinstance(child, ast.Compare) and any(is_auto(x) for x in [child.left, *child.comparators]):
                text = ast.unparse(child).lower()
                if any(w in text for w in OBJECTIVE_WORDS):
                    found.add((name, child.lineno))
            visit(child, name)

    visit(tree, "")
    return found


def test_auto_objective_is_resolved_in_one_function():
    """'auto' for a metric, objective or target is resolved by resolve_objective only: a
    comparison of such a name with "auto" anywhere else is a second resolver."""
    bad = []
    for folder in ("models", "probe", "analyses", "app"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for func, line in _auto_comparisons(path):
                if (rel, func) not in AUTO_COMPARISONS:
                    bad.append(f"{rel}:{line} in {func or '<module>'}")
    assert not bad, "'auto' compared outside resolve_objective:\n" + "\n".join(bad)


def test_auto_check_finds_a_second_resolver(tmp_path):
    p = tmp_path / "m.py"
    p.write_text('def pick(metric):\n    if metric in (None, "auto"):\n        return "loss"\n    return metric\n')
    assert _auto_comparisons(p) == {("pick", 2)}
    p.write_text('def solve(solver):\n    return solver == "auto"\n')
    assert _auto_comparisons(p) == set()


#: what an analysis would read to branch on the engine: the engine's settings and model,
#: or the engine's package itself (an analysis takes ``ctx.runner`` and the accumulators)
ENGINE_BRANCHES = ("engine_run", "engine_model", "sweep_runner")


def _engine_branches(path: Path) -> list:
    """``(line, what)`` of each read of the engine's settings or import of probe.app.engine."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and node.attr in ENGINE_BRANCHES:
            found.append((node.lineno, node.attr))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("probe.app.engine"):
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, a.name) for a in node.names if a.name.startswith("probe.app.engine"))
    return found


def test_no_analysis_branches_on_the_engine():
    """The engine is a property of the run: every analysis (commands and report sections)
    takes ``ctx.runner`` (this process or the engine's workers, :mod:`probe.runs.blocks`) or
    reads its declared accumulators (``ctx.accumulated``); none reads the engine's
    settings or calls a mirror of itself in ``probe.app.engine``."""
    bad = []
    for path in sorted((ROOT / "app" / "registry" / "analyses").glob("*.py")):
        bad += [f"{path.name}:{line} {what}" for line, what in _engine_branches(path)]
    assert not bad, "an analysis branches on the engine:\n" + "\n".join(bad)


def test_engine_branch_check_finds_one(tmp_path):
    p = tmp_path / "m.py"
    p.write_text(
        "def run(ctx):\n    if ctx.engine_run:\n        from probe.app.engine import analyses\n"
        "        return analyses.roles(ctx.engine_model)\n"
    )
    assert _engine_branches(p) == [(2, "engine_run"), (3, "probe.app.engine"), (4, "engine_model")]
