"""One run: :func:`probe.app.registry.open_run` opens the one context that the commands,
the report and ``probe.run`` read; the engine is a property of the run, the maps are
captured on first use, and the report built on such a run is the report."""

from __future__ import annotations

import json

import pytest

TEXTS = ["The cat sat on the mat.", "A dog ran home.", "Birds sing.", "It rains.", "We left early."]


def test_open_run_holds_the_engine_and_captures_maps_on_first_use(minilm):
    from probe.app.engine import Engine
    from probe.app.registry import Context, Inputs, open_run

    ctx = open_run(minilm, Inputs(text=TEXTS[:2]), engine="stream")
    assert type(ctx) is Context and ctx.engine == Engine("stream")
    assert ctx.engine_run == {"engine": "stream", "device": "cpu"}  # one name from the CLI to run_job
    assert ctx.engine_model is minilm  # a stream engine runs the model this process loaded
    assert not ctx.maps_captured
    maps = ctx.maps
    assert ctx.maps_captured and len(maps) == 2 and ctx.maps is maps  # captured once
    assert maps[0].n_heads == minilm.n_heads

    local = open_run("minilm", Inputs(text=TEXTS[:1]))
    assert local.engine.name == "local" and local.engine_run is None and not local.maps_captured
    assert open_run("minilm", engine="ray").engine_model == "minilm"  # each Ray actor loads the spec


def test_open_run_keeps_the_maps_of_a_sample_on_an_engine(minilm):
    from probe.app.registry import Inputs, open_run

    ctx = open_run(minilm, Inputs(text=TEXTS), engine="stream", kept_examples=2)
    assert len(ctx.corpus.kept) == 2 and len(ctx.maps) == 2  # maps held for 2
    assert ctx.corpus.as_given is ctx.corpus.whole and len(ctx.corpus.whole) == len(TEXTS)  # all 5 streamed
    local = open_run(minilm, Inputs(text=TEXTS), kept_examples=2)
    assert len(local.corpus.kept) == len(TEXTS) and local.corpus.kept is local.corpus.whole  # local keeps all


def test_open_run_refuses_an_unknown_engine():
    from probe.app.registry import open_run
    from probe.errors import InputError

    with pytest.raises(InputError, match="unknown engine 'spark'.*local, stream, ray"):
        open_run("minilm", engine="spark")
    with pytest.raises(InputError, match="kept_examples"):
        open_run("minilm", engine="stream", kept_examples=0)


def test_a_run_is_frozen_and_the_report_state_lives_apart(minilm):
    """Every attribute of a run is fixed when it opens, its parameters and its lazy caches
    included (set: AttributeError); what a report gathers (results, skipped reasons,
    streamed sums, settings) is its ReportState, which the run does not write."""
    from probe.app.registry import Inputs, open_run
    from probe.app.registry.context import ReportState

    state = ReportState(settings={"model": "x"})
    ctx = open_run(minilm, Inputs(text=TEXTS[:1]), engine="stream", objective="embedding-drift", report=state)
    fixed = ("engine", "objective_spec", "model", "results", "params", "corpus", "report", "_built", "_echo")
    for name in fixed:
        with pytest.raises(AttributeError, match=f"a run is frozen: {name} is fixed"):
            setattr(ctx, name, None)
    with pytest.raises(AttributeError, match="a run is frozen"):
        del ctx.model
    assert ctx.engine.name == "stream" and ctx.objective_spec == "embedding-drift" and ctx.params == {}
    ctx.say("metric: a choice")
    ctx.say("metric: a choice")  # said once
    assert ctx.said == ("metric: a choice",) and state.settings == {"model": "x"}  # the report copies them
    assert ctx.report is state and open_run(minilm).report.results == {}  # each run its own report state


def test_each_analysis_gets_its_parameters_on_its_own_view_of_the_run(minilm):
    """``with_params`` gives an analysis the run with its parameters (read-only): the run is
    unchanged, and the view shares what the run builds (maps captured once, for both)."""
    from probe.app.registry import Inputs, open_run

    ctx = open_run(minilm, Inputs(text=TEXTS[:2]), params={"seed": 0})
    view = ctx.with_params({"seed": 1, "top": 3})
    assert view.params == {"seed": 1, "top": 3} and ctx.params == {"seed": 0}
    with pytest.raises(TypeError, match="parameters are fixed"):
        view.params["seed"] = 2
    with pytest.raises(AttributeError, match="a run is frozen: params"):
        view.params = {"seed": 2}
    assert view.maps is ctx.maps and view.corpus is ctx.corpus and view.report is ctx.report
    view.say("a choice")
    assert ctx.said == ("a choice",)


def test_results_are_read_by_type(minilm):
    from probe.app.registry import Inputs, Result, open_run
    from probe.app.registry.results import AblationResult, SyntaxResult

    ctx = open_run(minilm, Inputs(text=TEXTS[:1]))
    assert ctx.result_of(SyntaxResult) is None
    ctx.report.results["x"], ctx.report.results["y"] = Result(), SyntaxResult(tables={"best": "b"})
    assert ctx.result_of(SyntaxResult).best == "b" and ctx.result_of(AblationResult) is None


def _without_times(summary: dict) -> dict:
    """summary.json less what a second run cannot repeat (seconds)."""
    summary = json.loads(json.dumps(summary))
    summary.pop("seconds")
    summary["settings"].pop("capture seconds", None)
    for s in summary["sections"]:
        s.pop("seconds")
    return summary


@pytest.mark.slow
def test_report_on_an_opened_run_is_build_reports(minilm, tmp_path):
    """``analyse`` + ``write_report`` on a run opened by hand (maps captured lazily by the
    run) write the summary.json of :func:`build_report` on the same model and corpus."""
    from probe.app.registry import open_run
    from probe.app.registry.context import ReportState
    from probe.app.report.build import analyse, build_report, write_report
    from probe.app.report.bundled import sample_corpus
    from probe.inputs.corpus import fit_to_model

    sections = ["syntax", "roles", "rollout", "ablation"]
    built = build_report(tmp_path / "built", adapter=minilm, limit=4, sections=sections, strict=True)
    settings = {k: v for k, v in built.ctx.report.settings.items() if k != "choices"}
    ctx = open_run(minilm, fit_to_model(sample_corpus(limit=4), minilm), report=ReportState(settings=settings))
    assert not ctx.maps_captured
    data = analyse(ctx, sections=sections, strict=True)
    write_report(data, tmp_path / "opened")
    a, b = (json.loads((tmp_path / d / "summary.json").read_text(encoding="utf-8")) for d in ("built", "opened"))
    assert data.statuses == built.statuses == dict.fromkeys(sections, "ran")
    assert _without_times(a) == _without_times(b)
