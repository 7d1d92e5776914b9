"""Named stages of a run (issue 56): work several sections read — the causal claims' decided
pass and screened necessity — is a stage the sections declare in their registration
(``Analysis(reads=…)``), computed once per run before the first section that reads it, not
one section's private logic that another reaches into."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ANALYSES = ROOT / "app" / "registry" / "analyses"


def _imported(path: Path) -> set:
    """Every module and name an ``import`` in ``path`` names (function bodies included)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            out.add(node.module or "")
            out.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_the_ablation_section_knows_nothing_of_the_claims_section():
    """The ablation entry builds no part of the claims: it imports neither the claims section,
    its result type, nor the decided pass, the screen or the null model, and never asks which
    sections the report runs; the claims entry reads no other section's skip reason by name."""
    got = _imported(ANALYSES / "ablation.py")
    banned = (
        "probe.app.registry.results.ClaimsResult",
        "probe.app.registry.analyses.claims",
        "probe.analyses.claims.decided",
        "probe.analyses.claims.screened",
        "probe.analyses.claims.screened_claims",
        "probe.analyses.claims.null_model",
    )
    assert not [m for m in got if m.startswith(banned) or m.endswith(".claims")], sorted(got)
    assert "report.produces" not in (ANALYSES / "ablation.py").read_text()
    claims = (ANALYSES / "claims.py").read_text()
    assert "report.skipped" not in claims and "from .faithfulness" not in claims


def test_the_sections_declare_the_shared_removals_they_read():
    """Ablation starts the decided pass and the screen (mean-ablation of every head only);
    the claims join them (the weights test rides on the pass, the null's bar on the screen);
    faithfulness reads them where made."""
    from probe.app.registry import get
    from probe.app.registry.removal_stages import DECIDED, SCREENED
    from probe.app.registry.stages import reads_of

    ablation, claims, faith = get("ablation"), get("claims"), get("faithfulness")
    for stage in (DECIDED, SCREENED):
        read = reads_of(ablation, stage)
        assert read is not None and read.starts and read.parts == ("necessity",)
        assert read.asks({"mode": "mean", "layers": None, "group": ()})
        assert not read.asks({"mode": "zero", "layers": None, "group": ()})
        assert not read.asks({"mode": "mean", "layers": [0], "group": ()})
        assert not reads_of(claims, stage).starts and not reads_of(faith, stage).starts
    assert reads_of(claims, DECIDED).parts == ("necessity", "weights")
    assert reads_of(claims, SCREENED).parts == ("necessity", "null")
    with pytest.raises(TypeError, match="has no part"):
        DECIDED("banana")


def _counting_stage(calls: list):
    from probe.app.registry.stages import Stage

    def compute(ctx, asks):
        calls.append([(a.reader, a.parts, a.starts, a.params.get("k")) for a in asks])
        return object()

    return Stage("counted", "a stage that counts its computations", compute, parts=("a", "b"))


def _sections(stage, seen: dict, starts=True):
    from probe.app.registry import Analysis, Param, Result

    def reader(name):
        def run(ctx):
            seen[name] = ctx.stage(stage)
            return Result(notes=[name])

        return run

    return [
        Analysis("first", "starts the stage", reader("first"), params=(Param("k", int, 1),), section=True,
                 reads=(stage("a", starts=starts),), order=1),
        Analysis("between", "reads nothing", lambda ctx: Result(), section=True, order=2),
        Analysis("second", "joins it", reader("second"), params=(Param("k", int, 2),), section=True,
                 reads=(stage("b", starts=False),), order=3),
    ]  # fmt: skip


def test_a_stage_is_computed_once_before_its_first_reader():
    """Two sections read a stage: it is computed once, before the first, from both sections'
    asks (their parts and parameters); both read the same value; a section reading nothing
    does not compute it."""
    from test_presentation import _two_heads

    from probe.app.registry import open_run
    from probe.app.report.sections import run_sections

    calls, seen = [], {}
    stage = _counting_stage(calls)
    maps, corpus = _two_heads()
    ctx = open_run(None, corpus, maps=maps)
    outcomes = run_sections(ctx, _sections(stage, seen), strict=True)
    assert [o.status for o in outcomes] == ["ran"] * 3
    assert calls == [[("first", ("a",), True, 1), ("second", ("b",), False, 2)]]
    assert seen["first"] is seen["second"] is ctx.stages["counted"] is not None


def test_a_stage_only_joined_is_not_made():
    """Where no reader starts the stage (only joiners), it is not computed: each reads ``None``."""
    from test_presentation import _two_heads

    from probe.app.registry import open_run
    from probe.app.report.sections import run_sections

    calls, seen = [], {}
    stage = _counting_stage(calls)
    maps, corpus = _two_heads()
    run_sections(open_run(None, corpus, maps=maps), _sections(stage, seen, starts=False), strict=True)
    assert calls == [] and seen == {"first": None, "second": None}


def test_a_lone_command_computes_the_stage_when_its_analysis_asks():
    """Outside a report (``probe ablate``, ``probe.run``) the stage is computed the first time the
    running analysis asks for it, with the run's parameters, and kept."""
    from test_presentation import _two_heads

    from probe.app.registry import open_run

    calls, seen = [], {}
    stage = _counting_stage(calls)
    first = _sections(stage, seen)[0]
    maps, corpus = _two_heads()
    ctx = open_run(None, corpus, maps=maps, params={"k": 7})
    got = ctx.stage(stage, first)
    assert ctx.stage(stage, first) is got and ctx.stage(stage) is got
    assert calls == [[("first", ("a",), True, 7)]]


def test_why_a_result_is_missing_is_read_by_its_type():
    """A reader learns why a result type is absent through the run: the reason its producer
    was skipped with, else that it did not run (the name from the registry, not the reader)."""
    from test_presentation import _two_heads

    from probe.app.registry import open_run
    from probe.app.registry.results import FaithfulnessResult

    maps, corpus = _two_heads()
    ctx = open_run(None, corpus, maps=maps)
    assert ctx.why_no_result(FaithfulnessResult) == "the faithfulness section did not run"
    ctx.report.skipped["faithfulness"] = "no live model (report built from stored maps)"
    assert ctx.why_no_result(FaithfulnessResult) == "no live model (report built from stored maps)"


def test_the_report_builder_reads_sections_through_their_registration():
    """``app/report/build.py`` names no result type and reads no section's report parameters
    (it still maps its own four options onto the parameters of those names, ``_overrides``):
    the heads' claims come from the section whose presentation says it makes them, and the
    settings lines on model-run and explained examples from the sections' own ``settings``."""
    tree = ast.parse((ROOT / "app" / "report" / "build.py").read_text(encoding="utf-8"))
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    names |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    assert not {"ClaimsResult", "report_params", "explained_setting", "causal_path", "screened_setting"} & names
    from probe.app.registry import get

    declared = {a: get(a).settings for a in ("ablation", "importance", "claims", "faithfulness")}
    assert all(callable(f) for f in declared.values())
    said = declared["faithfulness"](2001, 72, {"explain_limit": 40, "sized_by_power": False})
    assert list(said) == ["faithfulness examples"] and said["faithfulness examples"].startswith("40 of 2001")
