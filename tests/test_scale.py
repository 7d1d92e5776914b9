"""Scale: streaming accumulators equal today's analyses; Ray workers equal one process.

The streaming tests run everywhere (no Ray). The Ray tests start one local cluster with
2 CPUs for the module (2 actors) and skip, saying why, when Ray is not installed
(``pip install -e ".[ray]"``; CI installs it).
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pandas as pd
import pytest
import torch

from conftest import EWT_DEV, GUM_DEV, need_data

from probe.analyses.patterns.role_features import LayerwiseHeadFeatures, head_features
from probe.app.engine.run import run_corpus
from probe.runs.capture import iter_capture
from probe.runs.streaming import feed, stream_layers
from probe.analyses.common.objective import get_metric

TEXTS = [
    "The cat sat on the mat.",
    "A dog barked at the cat and the cat ran away quickly.",
    "It rained.",
    "Birds sing when the sun rises over the quiet hills.",
]


def _sentences(path, n):
    from probe.inputs.readers import read_conllu

    return read_conllu(need_data(path), limit=n)


def _numeric(df: pd.DataFrame) -> np.ndarray:
    return df.select_dtypes("number").to_numpy(dtype=float)


def _assert_features_equal(a: pd.DataFrame, b: pd.DataFrame) -> None:
    assert list(a.columns) == list(b.columns) and len(a) == len(b)
    np.testing.assert_allclose(_numeric(a), _numeric(b), atol=1e-6, equal_nan=True)


class BlockRunner:
    """A runner of :mod:`probe.runs.blocks` as an engine uses one: blocks of ``size`` items,
    the last block first, each part pickled and unpickled (as a Ray worker hands it
    back); the parts are returned in input order."""

    def __init__(self, adapter, size: int):
        self.adapter, self.size, self.blocks = adapter, size, 0

    def __call__(self, job, items):
        import pickle

        items = list(items)
        starts = list(range(0, len(items), self.size))[::-1]
        parts = {}
        for s in starts:
            ids = list(range(s, min(s + self.size, len(items))))
            part = job.run(self.adapter, [items[i] for i in ids], ids)
            parts[s] = pickle.loads(pickle.dumps(part))
        self.blocks += len(starts)
        return [parts[s] for s in sorted(parts)]


def _streamed_features(adapter, items, level):
    acc = LayerwiseHeadFeatures(level=level)
    stream_layers(adapter, items, feed([acc]), batch_size=3)
    return acc.result()


# ---- streaming == today's path (no Ray) ------------------------------------------------
@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_streamed_head_features_equal_full_maps_on_tiny_decoders(tiny_models, family):
    a = tiny_models[family]
    for level in ("token", "word"):
        ref = head_features(iter_capture(a, TEXTS, batch_size=3), level=level)
        got = _streamed_features(a, TEXTS, level)
        _assert_features_equal(got, ref)
    assert ref["induction"].notna().any()  # causal features are really compared


def test_streamed_features_and_syntax_equal_today_on_minilm_ewt(minilm):
    from probe.analyses.structure.streaming import KeptGraphs, LayerwiseRelations
    from probe.analyses.structure.syntax_run import run_syntax

    from probe.analyses.structure.syntax import relation_accuracy
    from probe.analyses.structure.word_graph import word_graphs

    sents = _sentences(EWT_DEV, 16)
    # the reference: every sentence's whole maps, held, turned into word graphs
    whole_maps = iter_capture(minilm, [s.text for s in sents], word_spans=[s.spans for s in sents], batch_size=8)
    ref_relations = relation_accuracy(word_graphs(whole_maps, sents))
    runner = BlockRunner(minilm, 5)
    ref = run_syntax(runner, sents, tree_limit=0, probe_limit=0, batch_size=8)  # streamed, in 4 blocks
    assert runner.blocks == 4
    keys = ["relation", "direction", "layer", "head"]
    pd.testing.assert_frame_equal(
        ref.relations.to_frame().sort_values(keys).reset_index(drop=True),
        ref_relations.to_frame().sort_values(keys).reset_index(drop=True),
        check_exact=False,
        rtol=1e-6,
    )
    rel, kept = LayerwiseRelations(), KeptGraphs(range(5))
    stream_layers(minilm, sents, feed([rel, kept]), batch_size=8)
    a = ref.relations.to_frame().sort_values(keys).reset_index(drop=True)
    b = rel.result().to_frame().sort_values(keys).reset_index(drop=True)
    pd.testing.assert_frame_equal(a, b)
    assert b["hits"].sum() > 0
    graphs = kept.result()
    assert [g.index for g in graphs] == list(range(5))
    whole = iter_capture(minilm, [sents[0].text], word_spans=[sents[0].spans])
    from probe.analyses.structure.word_graph import word_graph

    # alone vs in a padded batch: the forward itself differs at float rounding
    torch.testing.assert_close(graphs[0].attention, word_graph(next(whole), sents[0]).attention, atol=1e-5, rtol=0)
    ref_feat = head_features(
        iter_capture(minilm, [s.text for s in sents], word_spans=[s.spans for s in sents]), level="word"
    )
    _assert_features_equal(_streamed_features(minilm, sents, "word"), ref_feat)


@pytest.mark.parametrize("joined", [True, False])
def test_streamed_coref_equals_whole_maps(minilm, monkeypatch, joined):
    """run_coref streams the windows (here also in blocks of 7, the last first), each
    batch's layers joined or, with a stream budget of 0, fed layer by layer: its counts
    equal coref_accuracy of every window's whole maps, held."""
    import probe.runs.streaming

    if not joined:
        monkeypatch.setattr(probe.runs.streaming, "JOIN_BYTES", 0)
    from probe.analyses.structure.coref import coref_accuracy, coref_windows
    from probe.analyses.structure.coref_mentions import read_number
    from probe.analyses.structure.syntax_run import run_coref
    from probe.analyses.structure.word_graph import word_attention

    sents = _sentences(GUM_DEV, 40)
    numbers = read_number(GUM_DEV, limit=40)
    windows = coref_windows(sents, numbers, context=2)
    maps = iter_capture(minilm, [w.text for w in windows], word_spans=[w.spans for w in windows], batch_size=8)
    ref = coref_accuracy((w, word_attention(m, len(w.words))[0], m.layers) for w, m in zip(windows, maps))
    for model in (minilm, BlockRunner(minilm, 7)):
        got = run_coref(model, sents, numbers, batch_size=8)
        np.testing.assert_array_equal(got.accuracy.hits, ref.hits)
        np.testing.assert_array_equal(got.accuracy.counts, ref.counts)
        assert got.skipped.rows == [] and got.n_windows == len(windows)
    assert ref.counts[0] > 0 and ref.hits.sum() > 0


def test_streamed_features_equal_on_a_zoo_model():
    from probe.inputs.corpus import load_corpus
    from probe.models import load_model

    a = load_model("zoo:prev-token")
    texts = list(load_corpus(model="zoo:prev-token", limit=12).texts)
    ref = head_features(iter_capture(a, texts, batch_size=4))
    _assert_features_equal(_streamed_features(a, texts, "token"), ref)
    assert ref["argmax_prev"].max() > 0.9  # the zoo's previous-token head is found either way


def test_last_rows_keep_the_tail_of_each_example(tiny_models):
    a = tiny_models["llama"]
    seen = {}

    def keep(batch):
        for i, rows in zip(batch.meta.indices, batch.rows):
            seen[(batch.layer, i)] = rows
        with pytest.raises(ValueError, match="needs every query row"):
            batch.maps()

    stream_layers(a, TEXTS, keep, batch_size=2, last_rows=2)
    for i, m in enumerate(iter_capture(a, TEXTS)):
        for li, layer in enumerate(m.layers):
            torch.testing.assert_close(seen[(layer, i)], m.attentions[li, :, -2:, :], atol=1e-6, rtol=0)


def test_ablation_values_merge_to_the_whole_sweep():
    import transformers as T

    from probe.analyses.necessity.ablation import sweep_heads
    from probe.analyses.necessity.ablation_job import sweep_heads_in_blocks
    from probe.models import ModelAdapter
    from probe.models.registry import minilm_path

    tok = T.AutoTokenizer.from_pretrained(str(minilm_path()), local_files_only=True)
    torch.manual_seed(0)
    cfg = T.LlamaConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        vocab_size=len(tok),
        pad_token_id=0,
        initializer_range=0.2,
    )
    a = ModelAdapter(name="tiny-llama-lm", model=T.LlamaForCausalLM(cfg), tokenizer=tok, family="llama")
    for mode in ("zero", "mean"):
        ref = sweep_heads(a, TEXTS * 2, get_metric("loss", a), mode, n_boot=200)
        runner = BlockRunner(a, 3)  # blocks of 3 examples, the last first, pickled
        got = sweep_heads_in_blocks(runner, a, TEXTS * 2, get_metric("loss", a), mode, n_boot=200)
        assert runner.blocks == 3
        np.testing.assert_allclose(got.ablated, ref.ablated, atol=1e-5)
        pd.testing.assert_frame_equal(got.table, ref.table, atol=1e-5)
        assert np.abs(ref.ablated - ref.clean).max() > 1e-3


def test_large_model_placement_refuses_clearly(monkeypatch, llama_dir):
    from probe.models import load_model

    with pytest.raises(ValueError, match="is for hf: models"):
        load_model("minilm", device="auto")
    monkeypatch.setitem(sys.modules, "accelerate", None)
    with pytest.raises(ValueError, match="pip install accelerate"):
        load_model(llama_dir, device="auto")


def test_bfloat16_forward_streams_renormalised_rows(llama_dir):
    from probe.models import load_model

    full, half = load_model(llama_dir), load_model(llama_dir, dtype="bfloat16")
    ref, got = _streamed_features(full, TEXTS, "token"), _streamed_features(half, TEXTS, "token")
    np.testing.assert_allclose(_numeric(got), _numeric(ref), atol=0.05, equal_nan=True)
    seen = []
    stream_layers(half, TEXTS[:1], lambda b: seen.append(b.rows[0]))
    assert seen[0].dtype == torch.float32
    torch.testing.assert_close(seen[0].sum(-1), torch.ones(seen[0].shape[:2]), atol=1e-5, rtol=0)


@pytest.mark.parametrize("joined", [True, False])
def test_streamed_roles_report_in_blocks_equals_roles_report(minilm, monkeypatch, joined):
    """roles_streamed in blocks of 3 (each batch's layers joined, or layer by layer with a
    stream budget of 0) equals roles_report of the whole maps, clusters included."""
    import probe.runs.streaming

    if not joined:
        monkeypatch.setattr(probe.runs.streaming, "JOIN_BYTES", 0)
    from probe.analyses.patterns.roles import roles_report, roles_streamed
    from probe.runs.blocks import corpus_items
    from probe.inputs.corpus import from_sentences

    corpus = from_sentences(_sentences(EWT_DEV, 8), source="ewt")
    settings = dict(n_clusters=2, cluster_examples=4, min_examples=1)
    ref = roles_report(iter_capture(minilm, list(corpus.texts), word_spans=list(corpus.word_spans)), **settings)
    got = roles_streamed(BlockRunner(minilm, 3), corpus_items(corpus), **settings)
    assert list(got.roles["role"]) == list(ref.roles["role"])
    _assert_features_equal(got.roles.drop(columns=["mds_x", "mds_y"]), ref.roles.drop(columns=["mds_x", "mds_y"]))
    assert got.n_examples == ref.n_examples == 8
    a, b = got.clusters.divergence, ref.clusters.divergence  # the first 4 examples' head × head divergences
    assert a.n_examples == b.n_examples == 4 and a.n_rows == b.n_rows
    np.testing.assert_allclose(a.matrix, b.matrix, rtol=0, atol=1e-6)
    assert b.matrix.max() > 0.1


def test_cli_engine_stream_streams_and_local_runs_as_stream(tmp_path, monkeypatch):
    """``probe syntax --engine stream`` streams: its sentences go through
    :func:`probe.runs.streaming.stream_layers` (one layer of one batch at a time) and no
    example's maps are captured whole; ``--engine local`` (every example's maps held) is
    not offered by a command that streams, and is refused in one line, nothing written."""
    from click.testing import CliRunner

    import probe.runs.capture
    import probe.runs.streaming
    from probe.app.cli import main
    from probe.errors import InputError

    conllu = str(need_data(EWT_DEV))
    streamed, whole = [], []
    real_stream, real_capture = probe.runs.streaming.stream_layers, probe.runs.capture.capture
    monkeypatch.setattr(
        probe.runs.streaming, "stream_layers", lambda *a, **k: streamed.append(1) or real_stream(*a, **k)
    )
    monkeypatch.setattr(probe.runs.capture, "capture", lambda *a, **k: whole.append(1) or real_capture(*a, **k))
    args = ["syntax", "--conllu", conllu, "--limit", "6", "--tree-limit", "0", "--probe-limit", "0"]
    r = CliRunner().invoke(main, [*args, "--engine", "stream", "-o", str(tmp_path / "s")])
    assert r.exit_code == 0, r.output
    assert streamed and not whole
    assert len(pd.read_csv(tmp_path / "s" / "best.csv"))
    # one vocabulary (issue 59, row 13): local, one process, is this always-streaming command's stream
    streamed.clear()
    r = CliRunner().invoke(main, [*args, "--engine", "local", "-o", str(tmp_path / "l")])
    assert r.exit_code == 0, r.output
    assert streamed and not whole
    r = CliRunner().invoke(main, [*args, "--engine", "bogus", "-o", str(tmp_path / "b")])
    assert r.exit_code == 2 and "'bogus' is not one of 'auto', 'local', 'stream', 'ray'" in r.output
    assert not (tmp_path / "b").exists()
    import probe

    from probe.app.registry.runs import engine_of

    assert engine_of("local", ("stream", "ray"), "syntax").name == "stream"
    with pytest.raises(InputError, match=r"^syntax runs with --engine local, not 'ray'$"):
        engine_of("ray", ("local",), "syntax")


def test_cli_engine_stream_ablates_a_zoo_model_with_its_task_loss(tmp_path):
    """The engine's blocks carry the zoo examples, so --objective auto picks the task's loss
    (not embedding-drift) and the table equals the one-process sweep."""
    from click.testing import CliRunner

    from probe.analyses.necessity.ablation import sweep_heads
    from probe.app.cli import main
    from probe.inputs.corpus import load_corpus
    from probe.models import load_model

    r = CliRunner().invoke(
        main,
        ["ablate", "--model", "zoo:prev-token", "--limit", "6", "--n-boot", "20", "--engine", "stream"]
        + ["--out", str(tmp_path / "s"), "--quiet"],
    )
    assert r.exit_code == 0, r.output
    got = pd.read_csv(tmp_path / "s" / "ablation.csv")
    assert set(got["metric"]) == {"loss"}
    adapter = load_model("zoo:prev-token")
    ref = sweep_heads(
        adapter,
        load_corpus(limit=6, model="zoo:prev-token"),
        objective=get_metric("loss", adapter),
        mode="zero",
        n_boot=20,
    )
    pd.testing.assert_frame_equal(got, ref.table.reset_index(drop=True), atol=1e-6, check_dtype=False)


def test_ray_missing_says_how_to_install(monkeypatch, tmp_path):
    from click.testing import CliRunner

    from probe.app.cli import main
    from probe.app.engine import Engine

    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ValueError, match=r'pip install -e "\.\[ray\]"'):
        Engine("ray").job_settings()
    r = CliRunner().invoke(main, ["roles", "--text", "A b.", "--engine", "ray", "--out", str(tmp_path / "o")])
    assert r.exit_code == 1 and 'pip install -e ".[ray]"' in r.output and not (tmp_path / "o").exists()


def test_engine_options_are_declared_once_for_the_corpus_commands():
    """--engine/--address/--workers come from Analysis.engines (the runner adds them), and
    the one option decorator gives capture the same options."""
    from click.testing import CliRunner

    from probe.app.cli import main
    from probe.app.registry import ENGINES, registered

    with_engines = {a.command_name for a in registered() if a.engines}
    assert with_engines == {"roles", "syntax", "coref", "ablate"}
    for name in sorted(with_engines) + ["capture"]:
        out = CliRunner().invoke(main, [name, "--help"]).output
        offered = "local|stream|ray" if name == "capture" else "stream|ray"
        assert all(opt in out for opt in ("--engine", "--address", "--workers", offered)), name
    assert "--engine" not in CliRunner().invoke(main, ["rollout", "--help"]).output
    with pytest.raises(ValueError, match="rollout runs with --engine local, not 'stream'"):
        import probe

        probe.run("rollout", model="zoo:constructed", limit=2, engine="stream")
    assert ENGINES == ("local", "stream", "ray")


# ---- Ray: 2 workers == one process ------------------------------------------------------
# One local cluster (2 CPUs, so 2 actors) for the module; every Ray run uses the tiny random
# Llama (the point is equality, and each actor loads the model) on EWT dev sentences, in
# blocks of 4 (3 blocks: both actors busy, one block left for the retried one).
RAY_SENTENCES, RAY_BLOCK = 12, 4


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray", reason='Ray is an optional extra: pip install -e ".[ray]"')
    from probe.app.engine.ray_engine import ensure_ray

    ensure_ray(None, 2)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield ray
    ray.shutdown()


class KillOnce:
    """An accumulator that kills its worker process the first time it sees ``index``
    (a marker file makes it once across restarts): Ray must retry the block."""

    def __init__(self, marker: str, index: int):
        self.marker, self.index = marker, index

    def update(self, layer, maps, meta):
        if self.index in meta.indices and os.path.exists(self.marker):
            os.remove(self.marker)
            os._exit(1)

    def merge(self, other):
        return self

    def result(self):
        return None


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    import transformers as T

    from probe.models.registry import minilm_path

    tok = T.AutoTokenizer.from_pretrained(str(minilm_path()), local_files_only=True)
    torch.manual_seed(0)
    cfg = T.LlamaConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        vocab_size=len(tok),
        pad_token_id=0,
        initializer_range=0.2,
    )
    path = tmp_path_factory.mktemp("tiny-llama")
    T.LlamaForCausalLM(cfg).save_pretrained(path, safe_serialization=True)
    tok.save_pretrained(path)
    return f"hf:{path}"


@pytest.fixture(scope="module")
def llama(llama_dir):
    from probe.models import load_model

    return load_model(llama_dir)


@pytest.mark.slow
def test_ray_two_workers_with_one_killed_equal_one_process(ray_cluster, llama, llama_dir, tmp_path):
    """Roles features (token and word level) and syntax relation counts on EWT dev."""
    from probe.analyses.structure.streaming import LayerwiseRelations

    sents = _sentences(EWT_DEV, RAY_SENTENCES)
    marker = tmp_path / "kill-once"
    marker.write_text("")

    def accs():
        return [LayerwiseHeadFeatures("token"), LayerwiseHeadFeatures("word"), LayerwiseRelations()]

    (tok, word, rel), _ = run_corpus(llama, sents, accs(), engine="local", batch_size=4)
    _assert_features_equal(tok.result(), head_features(iter_capture(llama, [s.text for s in sents])))
    (rtok, rword, rrel, _k), _ = run_corpus(
        llama_dir,
        sents,
        accs() + [KillOnce(str(marker), 5)],
        engine="ray",
        workers=2,
        block_size=RAY_BLOCK,
        batch_size=4,
    )
    assert not marker.exists()  # a worker really died on block 1, and the block was retried
    _assert_features_equal(rtok.result(), tok.result())
    _assert_features_equal(rword.result(), word.result())
    pd.testing.assert_frame_equal(rrel.result().to_frame(), rel.result().to_frame())
    assert rtok.n_examples == RAY_SENTENCES and rrel.result().counts.sum() > 0
    assert rtok.result()["induction"].notna().any()  # causal features are really compared


@pytest.mark.slow
def test_ray_ablation_sums_equal_one_process(ray_cluster, llama, llama_dir):
    from probe.analyses.necessity.ablation import sweep_heads
    from probe.inputs.corpus import Corpus

    texts = [s.text for s in _sentences(EWT_DEV, RAY_SENTENCES)]
    from probe.analyses.necessity.ablation_job import sweep_heads_in_blocks
    from probe.app.engine.run import engine_runner

    on_ray = engine_runner(llama_dir, engine="ray", workers=2, block_size=RAY_BLOCK)
    for mode in ("zero", "mean"):  # mean: the driver's head means travel with the job
        swept = sweep_heads_in_blocks(
            on_ray, llama, Corpus(texts=tuple(texts), source="ewt"), get_metric("loss", llama), mode, n_boot=200
        )
        whole = sweep_heads(llama, texts, get_metric("loss", llama), mode, n_boot=200)
        np.testing.assert_allclose(swept.ablated, whole.ablated, atol=1e-5)
        pd.testing.assert_frame_equal(swept.table, whole.table, atol=1e-5)
        assert np.abs(whole.ablated - whole.clean).max() > 1e-3


@pytest.mark.slow
def test_ray_store_equals_one_process_store_and_resumes(ray_cluster, llama, llama_dir, tmp_path, monkeypatch):
    from probe.app.engine.capture import capture
    from probe.inputs.corpus import from_sentences
    from probe.runs.pipeline import capture_corpus, store_manifest
    from probe.store.directory import Store, StoreWriter

    corpus = from_sentences(_sentences(EWT_DEV, 2 * RAY_BLOCK), source="ewt")
    local = capture_corpus(llama, corpus, tmp_path / "local", batch_size=4)
    manifest = store_manifest(llama, corpus, corpus)
    real = StoreWriter.append_index
    calls = []

    def driver_dies_after_one_block(self, records):
        if calls:
            raise KeyboardInterrupt("driver killed")
        calls.append(1)
        real(self, records)

    monkeypatch.setattr(StoreWriter, "append_index", driver_dies_after_one_block)
    with pytest.raises(KeyboardInterrupt):
        capture(
            llama_dir,
            corpus,
            tmp_path / "ray",
            manifest=manifest,
            batch_size=4,
            engine="ray",
            workers=2,
            block_size=RAY_BLOCK,
        )
    monkeypatch.setattr(StoreWriter, "append_index", real)
    assert len(Store(tmp_path / "ray")) == RAY_BLOCK  # the first block survived the driver
    store = capture(
        llama_dir,
        corpus,
        tmp_path / "ray",
        manifest=manifest,
        batch_size=4,
        engine="ray",
        workers=2,
        block_size=RAY_BLOCK,
    )
    assert store.ids == local.ids == list(range(2 * RAY_BLOCK))
    assert {r["shard"] for r in store.records} == {"shard-00000000.safetensors", "shard-00000004.safetensors"}
    for x, y in zip(store, local):
        assert (x.tokens, x.word_ids, x.words, x.layers) == (y.tokens, y.word_ids, y.words, y.layers)
        # blocks of 4 are batched otherwise than one process's length-sorted window:
        # the same forward up to float rounding of the padded batch (~1e-6)
        torch.testing.assert_close(x.attentions, y.attentions, atol=1e-5, rtol=0)


def test_cpus_per_worker_packs_every_actor_onto_the_nodes():
    from probe.app.engine.ray_engine import cpus_per_worker

    assert cpus_per_worker([2.0], 1) == 2  # one worker on a 2-core box uses both cores
    assert cpus_per_worker([2.0], 2) == 1
    assert cpus_per_worker([8.0, 8.0], 2) == 8
    assert cpus_per_worker([8.0, 8.0], 3) == 4  # 5 each would leave the third actor without a node
    assert cpus_per_worker([16.0, 4.0], 2) == 8  # both fit on the big node
    assert cpus_per_worker([16.0, 4.0], 6) == 3  # 5 on the big node, 1 on the small one
    assert cpus_per_worker([1.0], 4) == 1  # more actors than CPUs: one each, Ray queues the rest


class ThreadsJob:
    """Reports the torch threads of the actor that ran the block."""

    def run(self, adapter, items, indices, progress=False):
        from probe.runs.blocks import Part

        return Part(first=int(indices[0]), value=torch.get_num_threads(), n_items=len(items))


@pytest.mark.slow
def test_one_ray_worker_takes_every_cpu_of_the_local_cluster(ray_cluster, llama_dir):
    from probe.app.engine.ray_engine import _node_cpus, cpus_per_worker
    from probe.app.engine.run import run_job

    want = cpus_per_worker(_node_cpus(ray_cluster), 1)
    assert want == int(ray_cluster.cluster_resources()["CPU"]) >= 2
    parts = run_job(llama_dir, ["a b c", "d e f", "g h"], ThreadsJob(), engine="ray", workers=1, block_size=2)
    assert [p.value for p in parts] == [want, want]
    parts = run_job(llama_dir, ["a b c", "d e f", "g h"], ThreadsJob(), engine="ray", workers=2, block_size=2)
    assert [p.value for p in parts] == [want // 2] * 2


class WhoJob:
    """Reports the process and the loaded model object of the actor that ran the block."""

    def run(self, adapter, items, indices, progress=False):
        from probe.runs.blocks import Part

        return Part(first=int(indices[0]), value=(os.getpid(), id(adapter)), n_items=len(items))


@pytest.mark.slow
def test_later_ray_calls_reuse_the_loaded_actors(ray_cluster, llama_dir):
    """The sequential claims call the runner once per block of sentences: every call with the
    same settings runs on the same actors, their model loaded once (each call used to start a
    pool and load the model again: 437 s against 171 s local for the report on EWT dev);
    other settings (threads) replace the pool."""
    from probe.app.engine.run import run_job

    texts = ["a b c", "d e f", "g h", "i j"]

    def who(workers):
        return {p.value for p in run_job(llama_dir, texts, WhoJob(), engine="ray", workers=workers, block_size=1)}

    first = who(2)
    assert len({pid for pid, _ in first}) == 2  # two actors shared the four blocks
    assert who(2) == first and who(2) == first  # the same processes and the same loaded models
    other = who(1)
    assert len(other) == 1 and not other & first  # one actor with both CPUs: a new pool


def test_auto_block_size_gives_each_worker_about_four_blocks():
    from probe.app.engine.jobs import StoreJob
    from probe.app.engine.run import auto_block_size

    assert auto_block_size(2001, 1) == 501 and auto_block_size(2001, 2) == 251
    assert auto_block_size(10, 1) == 16  # no block smaller than 16 items
    assert auto_block_size(10**6, 8) == 512  # nor larger than 512
    assert StoreJob.block_size == 64  # a store's blocks hold their maps until the shard is written


def test_head_features_pickle_packed_and_equal(minilm):
    """A worker's accumulator travels pickled: the per-example rare-unit summaries are
    packed into flat arrays on the way (fast) and come back as they were."""
    import pickle

    from probe.analyses.patterns.role_features import HeadFeatureAccumulator

    texts = ["The cat sat on the mat.", "A dog barked twice at the mailman.", "Rare words: zyzzyva, qoph."]
    acc = HeadFeatureAccumulator("token")
    for m in iter_capture(minilm, texts):
        acc.update(m)
    state = acc.__getstate__()
    assert "_deferred" not in state and state["_packed"]["mass"].shape[-1] == sum(state["_packed"]["sizes"])
    back = pickle.loads(pickle.dumps(acc))
    assert [d[0] for d in back._deferred] == [d[0] for d in acc._deferred]
    for x, y in zip(back._deferred, acc._deferred):
        assert all(torch.equal(a, b) for a, b in zip(x[1:4], y[1:4])) and x[4] == y[4]
    pd.testing.assert_frame_equal(back.result(), acc.result())
    assert acc.result()["to_rare"].notna().all()  # the deferred features were really resolved


@pytest.mark.slow
def test_ray_screened_necessity_equals_one_process(ray_cluster, llama, llama_dir):
    """The screened path (issue 44) on two Ray workers: its means, screen, exact
    confirmations and sequential blocks are jobs on the engine's runner, split in blocks of
    4 batches; the claims (status, examples used, effect) and the per-head examples equal
    one process's."""
    from probe.analyses.claims.screened import screened_necessity
    from probe.analyses.common.objective import resolve_objective
    from probe.app.engine.run import engine_runner
    from probe.inputs.corpus import Corpus

    corpus = Corpus(texts=tuple(s.text for s in _sentences(EWT_DEV, RAY_SENTENCES)), source="ewt")
    obj, _ = resolve_objective("loss", llama, corpus)
    heads = [(layer, h) for layer in range(llama.n_layers) for h in range(llama.n_heads)]
    on_ray = engine_runner(llama_dir, engine="ray", workers=2, block_size=1)
    kw = dict(batch_size=2, min_top=2, min_audit=2, block=4)
    here = screened_necessity(llama, corpus, obj, heads, **kw)
    there = screened_necessity(llama, corpus, obj, heads, runner=on_ray, **kw)
    assert here.info["examples_per_head"] == there.info["examples_per_head"] and here.info["exact_removals"] > 0
    assert here.info["confirmed"] == there.info["confirmed"] and here.info["audited"] == there.info["audited"]
    for k, c in here.claims.items():
        assert (c.status, c.count, c.statement) == (
            there.claims[k].status,
            there.claims[k].count,
            there.claims[k].statement,
        )
        assert c.effect == pytest.approx(there.claims[k].effect, rel=1e-4, abs=1e-6, nan_ok=True)  # float32 readouts
