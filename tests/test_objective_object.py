"""The objective an object all the way down (issue 56): the run (the CLI, ``probe.run``, the
report's engine) resolves one :class:`~probe.analyses.common.objective.Objective` per use, and
everything below it (``probe/``, ``models/``, ``analyses/``) takes that object under one
parameter name, ``objective``; a name given below the run is refused, naming the fix.

``resolve_objective`` is counted where it is entered, whichever module bound it: the spy
replaces it in every loaded module that imported it, so a call from any floor is seen
(``tests/test_objective_once.py`` counts the name parser and ``auto``, which an
:class:`Objective` handed to ``resolve_objective`` again never reached)."""

from __future__ import annotations

import ast
import json
import sys
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
TEXTS = ["The keys to the cabinet are on the table.", "A dog ran home after the rain.", "Birds sing at dawn."]
#: below the run: the floors that take an Objective and never a name
BELOW = ("probe", "models", "analyses")
#: the resolver itself, and ``probe compare``'s run (it loads the checkpoints it resolves against)
RESOLVERS = {"analyses/common/objective.py", "analyses/compare/run.py"}
#: the functions that parse a name or ``auto`` (each enters ``resolve_objective``)
RESOLVING = {"resolve_objective", "get_metric", "parse_target", "default_metric", "_parse", "_auto"}
#: the old names of the objective's parameter (issue 56: six names for one thing)
OLD_NAMES = {"metric", "obj"}


@pytest.fixture
def entered(monkeypatch) -> Counter:
    """``Counter(use)``: how often ``resolve_objective`` was entered, per use."""
    import probe.analyses.common.objective as O

    real, seen = O.resolve_objective, Counter()

    def counted(spec="auto", adapter=None, corpus=None, *, use="corpus", **kw):
        seen[use] += 1
        return real(spec, adapter, corpus, use=use, **kw)

    for module in list(sys.modules.values()):
        if getattr(module, "resolve_objective", None) is real:
            monkeypatch.setattr(module, "resolve_objective", counted)
    return seen


def test_a_whole_report_enters_resolve_objective_once_per_use(tmp_path, entered):
    """``probe report`` on a zoo model, every section: each use's objective is resolved once
    (the run's ``ctx.objective(use)``), never again by a section or an analysis below it.
    Before: the analyses re-entered it with the run's object (``get_metric``,
    ``resolve_objective(objective, …)``): 10 entries per report."""
    from probe.app.cli import main

    out = tmp_path / "r"
    r = CliRunner().invoke(main, ["report", "--model", "zoo:constructed", "--limit", "4", "--out", str(out), "--quiet"])
    assert r.exit_code == 0, r.output
    sections = json.loads((out / "summary.json").read_text())["sections"]
    ran = {s["name"] for s in sections if s["status"] == "ran"}
    assert {"ablation", "importance", "claims"} <= ran, sections  # the sections that measure by an objective ran
    assert entered and max(entered.values()) == 1, entered
    assert {"per-example", "corpus"} <= set(entered), entered


def test_probe_ablate_enters_resolve_objective_once(tmp_path, entered):
    """``probe ablate`` (with a group, whose sweep takes the same object): one entry per use
    (``per-example``; ``corpus`` where the claims' removal sweep could give its values)."""
    from probe.app.cli import main

    args = ["ablate", "--model", "zoo:constructed", "--limit", "4", "--group", "L0H0,L0H1", "--n-boot", "20"]
    r = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "a"), "--quiet"])
    assert r.exit_code == 0, r.output
    assert entered["per-example"] == 1 and max(entered.values()) == 1, entered


def test_an_unknown_objective_is_named_an_objective(tmp_path):
    """One noun in every message: ``unknown objective``, never ``metric`` or ``target``."""
    from probe.app.cli import main

    for cmd in ("ablate", "importance", "report"):
        r = CliRunner().invoke(
            main, [cmd, "--model", "zoo:constructed", "--objective", "banana", "--out", str(tmp_path / cmd)]
        )
        assert r.exit_code == 1 and "unknown objective 'banana'" in r.output, (cmd, r.output)
        assert "unknown metric" not in r.output and "unknown target" not in r.output


def _calls(tiny: object) -> dict:
    """Each analysis below the run, called with a name where its objective goes."""
    from probe.analyses.circuits.attribution import edge_attribution
    from probe.analyses.circuits.path_patching import path_patch
    from probe.analyses.claims.heads import head_claims
    from probe.analyses.claims.removal import removal_sweep
    from probe.analyses.common.metrics import as_corpus
    from probe.analyses.compare.attribution import attribute_change
    from probe.analyses.explanation.faithfulness import run_faithfulness
    from probe.analyses.necessity.ablation import sweep_heads
    from probe.analyses.necessity.head_groups import ablate_group
    from probe.analyses.necessity.importance import head_importance
    from probe.analyses.necessity.patching import patch_heads
    from probe.analyses.necessity.pruning import pruning_curve
    from probe.analyses.necessity.screen import screen_heads
    from probe.analyses.necessity.sequential import sequential_necessity

    a, c, bad = tiny, as_corpus(TEXTS), as_corpus(TEXTS[::-1])
    return {
        "sweep_heads": lambda: sweep_heads(a, c, "loss"),
        "ablate_group": lambda: ablate_group(a, c, [(0, 0)], "embedding-drift"),
        "patch_heads": lambda: patch_heads(a, c, bad, "embedding-drift"),
        "head_importance": lambda: head_importance(a, c, "embedding-drift"),
        "pruning_curve": lambda: pruning_curve(a, c, "embedding-drift"),
        "removal_sweep": lambda: removal_sweep(a, c, "auto"),
        "screen_heads": lambda: screen_heads(a, c, "auto"),
        "sequential_necessity": lambda: sequential_necessity(a, c, [(0, 0)], floor=0.1, objective="auto"),
        "path_patch": lambda: path_patch(a, c, bad, "embedding-drift"),
        "edge_attribution": lambda: edge_attribution(a, c, bad, "embedding-drift"),
        "run_faithfulness": lambda: run_faithfulness(a, c, "similarity"),
        "head_claims": lambda: head_claims(a, c, _maps(a, c), objective="auto"),
        "attribute_change": lambda: attribute_change(a, a, c, "embedding-drift"),
    }


def _maps(adapter: object, corpus: object) -> list:
    from probe.runs.capture import capture

    return capture(adapter, list(corpus.texts))


@pytest.mark.parametrize(
    "where",
    [
        "sweep_heads",
        "ablate_group",
        "patch_heads",
        "head_importance",
        "pruning_curve",
        "removal_sweep",
        "screen_heads",
        "sequential_necessity",
        "path_patch",
        "edge_attribution",
        "run_faithfulness",
        "head_claims",
        "attribute_change",
    ],
)
def test_below_the_run_a_name_is_refused_naming_the_fix(tiny_models, where):
    """A name handed to an analysis is a ``TypeError`` that says where and how to resolve it,
    before any forward (before: each resolved it again, a second resolution per use)."""
    call = _calls(tiny_models["bert"])[where]
    with pytest.raises(TypeError) as got:
        call()
    message = str(got.value)
    assert f"{where}() takes a resolved Objective, not '" in message, message
    assert "resolve_objective(" in message and "probe.run(..., objective=...)" in message


def _functions_below_the_run() -> list:
    """``(path, function node)`` of every function in the floors below the run but the resolvers."""
    found = []
    for floor in BELOW:
        for path in sorted((ROOT / floor).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel in RESOLVERS:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    found.append((rel, node))
    return found


def test_nothing_below_the_run_parses_an_objective_s_name():
    """No function below the run calls the resolver or its name-parsing wrappers: the objective
    arrives resolved (``given_objective`` checks it), so a name never travels down."""
    calls = [
        f"{rel}:{node.lineno} {name}()"
        for rel, fn in _functions_below_the_run()
        for node in ast.walk(fn)
        if isinstance(node, ast.Call)
        and (name := getattr(node.func, "id", getattr(node.func, "attr", None))) in RESOLVING
    ]
    assert not calls, calls


def test_the_objective_has_one_parameter_name_below_the_run():
    """``objective``, not ``metric``, ``obj``, nor a ``target``/``readout``/``spec`` typed as an
    objective (the six names of issue 56)."""
    bad = []
    for rel, fn in _functions_below_the_run():
        a = fn.args
        for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs):
            typed = ast.unparse(arg.annotation) if arg.annotation is not None else ""
            if arg.arg in OLD_NAMES or (arg.arg in ("target", "readout", "spec") and "Objective" in typed):
                bad.append(f"{rel}:{fn.lineno} {fn.name}({arg.arg}: {typed or '?'})")
    assert not bad, bad
