"""``probe report --engine stream|ray`` (issue 31): the corpus statistics streamed over the
whole corpus as accumulators (in this process or two Ray actors), only a kept sample's
maps held; the numbers equal the local engine's."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from probe.app.report.compare import close, fact_differences

#: the bundled sample (24 treebank sentences): statistics over 24, maps kept for 8
KEPT = 8
SECTIONS = "syntax,ablation,roles"


def _report(tmp_path, engine: str, *extra) -> dict:
    from probe.app.cli import main

    out = tmp_path / engine
    args = ["report", "--sections", SECTIONS, "--engine", engine, "--out", str(out), *extra]
    if engine != "local":
        args += ["--kept-examples", str(KEPT)]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    return json.loads((out / "summary.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def local_summary(tmp_path_factory):
    return _report(tmp_path_factory.mktemp("local"), "local")


def _check_against_local(got: dict, ref: dict, engine: str) -> None:
    assert fact_differences(got, ref) == []
    n_facts = sum(len(f) for h in ref["heads"] for f in h["facts"].values())
    assert n_facts > 1000  # syntax, ablation and roles facts of all 72 heads were compared
    for sa, sb in zip(got["sections"], ref["sections"], strict=True):
        assert sa["status"] == sb["status"] == "ran"
        assert close(sa["summary"], sb["summary"]) and sa["notes"] == sb["notes"], sa["name"]
    assert [h["verdict"] for h in got["heads"]] == [h["verdict"] for h in ref["heads"]]
    # only the kept sample's maps were held; the statistics counted all 24 sentences
    assert ref["corpus"]["examples"] == 24 and got["corpus"]["examples"] == KEPT
    stated = got["settings"]
    assert stated["engine"].startswith(engine) and "syntax, roles on all 24 examples" in stated["engine"]
    assert f"first {KEPT} of 24" in stated["kept sample"]
    syntax = next(s for s in got["sections"] if s["name"] == "syntax")
    assert "over 24 sentences" in syntax["notes"][0]


def test_stream_engine_report_equals_local(tmp_path, local_summary):
    _check_against_local(_report(tmp_path, "stream"), local_summary, "stream")


def test_roles_from_the_kept_sample_alone_would_differ(tmp_path, local_summary):
    """The equality above is not the kept sample's: the local report of the first 8
    sentences names other numbers (so the engine really streamed all 24)."""
    small = _report(tmp_path, "local", "--limit", str(KEPT))
    assert len(fact_differences(small, local_summary)) > 100


@pytest.mark.slow
def test_ray_engine_report_with_two_workers_equals_local(tmp_path, local_summary):
    ray = pytest.importorskip("ray", reason='Ray is an optional extra: pip install -e ".[ray]"')
    try:
        got = _report(tmp_path, "ray", "--workers", "2")
    finally:
        ray.shutdown()
    _check_against_local(got, local_summary, "ray (2 Ray workers)")


def test_kept_examples_must_be_positive(tmp_path):
    from probe.app.cli import main

    r = CliRunner().invoke(main, ["report", "--engine", "stream", "--kept-examples", "0", "--out", str(tmp_path / "r")])
    assert r.exit_code != 0 and "kept-examples" in r.output


def test_streamed_relations_keep_words_absorbed_by_a_neighbours_token(minilm):
    """EWT dev sentence 27 has a word without a token of its own (absorbed by its
    neighbour's): the capture's maps align it, so the stream's must too. Before the fix
    the engine skipped 49 of EWT dev's 2,001 sentences the local report counts."""
    from conftest import EWT_DEV, need_data

    from probe.analyses.structure.syntax import relation_accuracy
    from probe.analyses.structure.word_graph import Skipped, word_graphs
    from probe.app.engine.analyses import report_statistics
    from probe.capture import capture
    from probe.corpus import read_conllu
    from probe.inputs import from_sentences

    sents = read_conllu(str(need_data(EWT_DEV)), limit=30)[25:30]
    corpus = from_sentences(sents, source="ewt")
    maps = capture(minilm, list(corpus.texts), word_spans=list(corpus.word_spans))
    assert any(m.meta.get("absorbed_words") for m in maps)  # the case is really in the input
    skipped = Skipped([])
    ref = relation_accuracy(word_graphs(maps, sents, skipped=skipped))
    got = report_statistics(minilm, corpus, treebank=True, batch_size=4, engine="local")
    assert len(skipped) == 0 and got["skipped"] == []
    assert got["relations"].n_sentences == ref.n_sentences == 5
    keys = ["relation", "direction", "layer", "head"]
    a = ref.to_frame().sort_values(keys).reset_index(drop=True)
    b = got["relations"].to_frame().sort_values(keys).reset_index(drop=True)
    import pandas as pd

    pd.testing.assert_frame_equal(a, b, check_exact=False, rtol=1e-6)
