"""The store: ragged, lazy, and a killed capture resumes with every example exactly once."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from probe.capture import capture
from probe.inputs import Corpus
from probe.pipeline import capture_corpus
from probe.store import Store, StoreWriter, done_ids

TEXTS = [f"Sentence number {i} has {'many ' * (i % 5)}words in it." for i in range(23)]


def test_roundtrip_is_ragged_and_exact(minilm, tmp_path):
    store = capture_corpus(minilm, Corpus(texts=tuple(TEXTS[:5])), tmp_path / "s", shard_size=2)
    fresh = capture(minilm, TEXTS[:5])
    assert len(store) == 5 and len(list(tmp_path.joinpath("s").glob("shard-*.safetensors"))) == 3
    for m, f in zip(store, fresh):
        assert m.attentions.shape == f.attentions.shape  # no padding stored
        assert torch.equal(m.attentions, f.attentions)
        assert m.tokens == f.tokens and m.word_ids == f.word_ids
    assert torch.equal(store[3].attentions, fresh[3].attentions)


def test_float16_store(minilm, tmp_path):
    store = capture_corpus(minilm, Corpus(texts=tuple(TEXTS[:2])), tmp_path / "h", dtype="float16")
    m = store[0]
    assert m.attentions.dtype == torch.float16
    assert torch.allclose(m.attentions.float(), capture(minilm, TEXTS[:1])[0].attentions, atol=1e-3)


def test_interrupted_then_resumed_holds_each_example_once(minilm, tmp_path):
    out = tmp_path / "r"
    corpus = Corpus(texts=tuple(TEXTS))

    class Boom(Exception):
        pass

    import probe.pipeline as pipeline

    real = pipeline.iter_capture

    def failing(*a, **k):
        for n, m in enumerate(real(*a, **k)):
            if n == 9:
                raise Boom()
            yield m

    pipeline.iter_capture = failing
    try:
        with pytest.raises(Boom):
            capture_corpus(minilm, corpus, out, shard_size=4, batch_size=4)
    finally:
        pipeline.iter_capture = real
    partial = done_ids(out)
    assert 0 < len(partial) < len(TEXTS)
    # simulate a kill in the middle of writing an index line
    with open(out / "index.jsonl", "a") as f:
        f.write('{"id": 22, "shard": "shard-0')
    store = capture_corpus(minilm, corpus, out, shard_size=4, batch_size=4)
    ids = [r["id"] for r in store.records]
    assert ids == list(range(len(TEXTS)))  # every example exactly once, none lost
    fresh = capture(minilm, TEXTS)
    for m, f in zip(store, fresh):  # other batch compositions: equal up to float rounding
        assert m.text == f.text and torch.allclose(m.attentions, f.attentions, atol=1e-5)


@pytest.mark.slow
def test_killed_cli_run_resumes(tmp_path, ewt_dev):
    """A real SIGKILL of `probe capture`, then the same command again."""
    out = tmp_path / "ewt"
    cmd = [sys.executable, "-m", "probe", "capture", "--conllu", str(ewt_dev), "--limit", "120",
           "--batch-size", "8", "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and len(done_ids(out)) < 64:
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = len(done_ids(out))
    assert 0 < killed_at < 120
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    store = Store(out)
    assert [r["id"] for r in store.records] == list(range(120))


def test_resume_onto_other_input_is_refused(minilm, tmp_path):
    capture_corpus(minilm, Corpus(texts=("one sentence.",)), tmp_path / "x")
    with pytest.raises(ValueError, match="different capture"):
        capture_corpus(minilm, Corpus(texts=("another sentence.",)), tmp_path / "x")


def test_not_a_store(tmp_path):
    with pytest.raises(ValueError, match="not an attention store"):
        Store(tmp_path)
