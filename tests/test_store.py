"""The store: ragged, lazy, and a killed capture resumes with every example exactly once."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from probe.runs.capture import capture
from probe.inputs.corpus import Corpus
from probe.runs.pipeline import capture_corpus
from probe.store.directory import Store, done_ids

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


def test_examples_sharing_their_batch_buffer_are_stored_each_alone(minilm, tmp_path):
    """Captured examples are views of one batch buffer; with one layer and equal lengths
    each is even a contiguous view of a storage the other example shares. The store writes
    each as its own tensor and reads back each example's own values."""
    texts = ["one two three four", "five six seven eight"]
    maps = capture(minilm, texts, layers=[2])
    assert all(m.attentions.is_contiguous() for m in maps)
    assert maps[0].attentions.untyped_storage().data_ptr() == maps[1].attentions.untyped_storage().data_ptr()
    store = capture_corpus(minilm, Corpus(texts=tuple(texts)), tmp_path / "v", layers=[2])
    for m, f in zip(store, maps):
        assert torch.equal(m.attentions, f.attentions)


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

    import probe.runs.pipeline as pipeline

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
    cmd = [
        sys.executable,
        "-m",
        "probe",
        "capture",
        "--conllu",
        str(ewt_dev),
        "--limit",
        "120",
        "--batch-size",
        "8",
        "--out",
        str(out),
    ]
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


# ---- validated on open, damaged parts named, one writer, verify/repair -------------
import shutil  # noqa: E402

from probe.store.lock import StoreLock  # noqa: E402
from probe.store.repair import repair_store, verify_store  # noqa: E402
from probe.store.schema import record_crc  # noqa: E402

SMALL = ("The cat sat on the mat.", "A dog barked.", "Birds fly south in winter.", "It rained.", "Go!")


@pytest.fixture(scope="module")
def small_store(minilm, tmp_path_factory):
    """5 examples in 3 shards (2 + 2 + 1)."""
    out = tmp_path_factory.mktemp("small") / "s"
    capture_corpus(minilm, Corpus(texts=SMALL), out, shard_size=2)
    return out


@pytest.fixture
def copy(small_store, tmp_path):
    dst = tmp_path / "c"
    shutil.copytree(small_store, dst)
    return dst


def _lines(store_dir):
    return (store_dir / "index.jsonl").read_text().splitlines()


def test_garbage_index_line_is_an_error_naming_the_line_not_a_truncation(copy):
    lines = _lines(copy)
    lines.insert(1, "garbage")
    (copy / "index.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"index\.jsonl:2: not a JSON line.*probe store repair"):
        Store(copy)


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("shard", "../other/shard-00000.safetensors", "not a shard file of this store"),
        ("shard", "/etc/passwd", "not a shard file of this store"),
        ("id", None, "without 'id'"),
        ("word_ids", [0], "word_ids must give each"),
        ("text", "an edited text", "does not match its checksum"),
    ],
)
def test_bad_index_record_is_refused(copy, field, value, message):
    lines = _lines(copy)
    rec = json.loads(lines[2])
    if value is None:
        del rec[field]
    else:
        rec[field] = value
    lines[2] = json.dumps(rec)
    (copy / "index.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"index\.jsonl:3: .*" + message):
        Store(copy)


@pytest.mark.parametrize(
    "damage, message",
    [
        ("truncate", "the shard is not a readable safetensors file"),
        ("empty", "the shard is not a readable safetensors file"),
        ("random", "the shard is not a readable safetensors file"),
        ("missing", "the shard file is missing"),
    ],
)
def test_damaged_shard_names_store_and_example(copy, damage, message):
    shard = copy / "shard-00001.safetensors"  # examples 2 and 3
    data = shard.read_bytes()
    if damage == "truncate":
        shard.write_bytes(data[: len(data) // 2])
    elif damage == "empty":
        shard.write_bytes(b"")
    elif damage == "random":
        shard.write_bytes(os.urandom(len(data)))
    else:
        shard.unlink()
    store = Store(copy)  # lazily: opening still works, the two other shards read
    assert store[0].text == SMALL[0] and store[4].text == SMALL[4]
    with pytest.raises(ValueError, match=rf"example 2 \(shard-00001.safetensors\): {message}"):
        store[2]
    with pytest.raises(ValueError, match="example 2"):
        list(store)


def test_index_naming_a_tensor_the_shard_lacks(copy):
    lines = _lines(copy)
    rec = json.loads(lines[0])
    rec["id"], rec["key"] = 99, "ex99"
    rec["crc"] = record_crc(rec)  # a consistent record naming a tensor the shard lacks
    lines[0] = json.dumps(rec)
    (copy / "index.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"example 99 .*no tensor 'ex99'"):
        Store(copy)[-1]


@pytest.mark.parametrize(
    "text, message",
    [
        ("[1, 2]", "must hold a JSON object, found a list"),
        ('{"model": "x"', r"manifest\.json:1: not valid JSON"),
        ('{"model": "x"}', "lacks version, dtype"),
    ],
)
def test_bad_manifest_names_the_file(copy, text, message):
    (copy / "manifest.json").write_text(text)
    with pytest.raises(ValueError, match=message):
        Store(copy)


def test_resume_checks_the_shards_of_finished_examples(minilm, copy):
    (copy / "shard-00000.safetensors").write_bytes(b"\x00" * 10)
    with pytest.raises(ValueError, match="shard shard-00000.safetensors of example 0 is unreadable.*repair"):
        capture_corpus(minilm, Corpus(texts=SMALL), copy, shard_size=2)


def test_verify_and_repair_then_resume_restores_the_store(minilm, small_store, copy):
    (copy / "shard-00001.safetensors").unlink()
    with open(copy / "index.jsonl", "a") as f:
        f.write("not json\n")
        f.write('{"id": 9, "shard": "shard-0')  # torn tail
    (copy / "shard-00042.safetensors").write_bytes(b"orphan")
    check = verify_store(copy)
    assert check.n_examples == 3 and len(check.problems) == 3 and check.torn_tail
    assert check.orphans == ["shard-00042.safetensors"]
    fixed = repair_store(copy)
    assert fixed.n_examples == 3 and fixed.dropped == 4  # 2 examples, 1 bad line, 1 torn tail
    assert sorted(p.name for p in copy.glob("shard-*")) == ["shard-00000.safetensors", "shard-00002.safetensors"]
    after = verify_store(copy)  # sound, but two examples short of the capture's five
    assert not after.problems and not after.orphans and "lists 3 of the 5 examples" in after.incomplete
    assert [r["id"] for r in Store(copy).records] == [0, 1, 4]
    store = capture_corpus(minilm, Corpus(texts=SMALL), copy, shard_size=2)  # redoes 2 and 3
    assert verify_store(copy).ok
    ref = Store(small_store)
    assert [r["id"] for r in store.records] == list(range(5))
    for a, b in zip(store, ref):
        assert a.tokens == b.tokens and torch.allclose(a.attentions, b.attentions, atol=1e-5)


def test_second_writer_fails_at_once_and_stale_lock_is_taken_over(minilm, copy):
    with StoreLock(copy):
        with pytest.raises(ValueError, match=rf"being written by process {os.getpid()}"):
            capture_corpus(minilm, Corpus(texts=SMALL), copy, shard_size=2)
    assert not (copy / ".lock").exists()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    import socket

    (copy / ".lock").write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname()}))
    assert len(capture_corpus(minilm, Corpus(texts=SMALL), copy, shard_size=2)) == 5  # stale: taken over
    assert not (copy / ".lock").exists()
    (copy / ".lock").write_text(json.dumps({"pid": 1, "host": "elsewhere"}))
    with pytest.raises(ValueError, match="locked by 1 on host 'elsewhere'.*remove that file"):
        repair_store(copy)


@pytest.mark.slow
def test_two_concurrent_cli_captures_one_refuses_store_equals_a_single_run(tmp_path):
    """Two `probe capture` processes into one --out: the second fails at once while the
    first holds the lock (paused with SIGSTOP so the overlap is certain), the first then
    finishes, and the store equals a single run's."""
    texts = tmp_path / "in.txt"
    texts.write_text("\n".join(f"Line {i} of the shared input, with a few words." for i in range(40)) + "\n")
    cmd = [sys.executable, "-m", "probe", "capture", "--file", str(texts), "--batch-size", "4"]
    first = subprocess.Popen(
        cmd + ["--out", str(tmp_path / "both")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    deadline = time.time() + 120
    while time.time() < deadline and not (tmp_path / "both" / ".lock").exists() and first.poll() is None:
        time.sleep(0.05)
    first.send_signal(signal.SIGSTOP)
    try:
        second = subprocess.run(
            cmd + ["--out", str(tmp_path / "both")],
            capture_output=True,
            text=True,
            timeout=300,
            stdin=subprocess.DEVNULL,
        )
    finally:
        first.send_signal(signal.SIGCONT)
    out, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    assert second.returncode == 1 and "being written by process" in second.stderr
    subprocess.run(cmd + ["--out", str(tmp_path / "single")], check=True, capture_output=True, timeout=300)
    both, single = Store(tmp_path / "both"), Store(tmp_path / "single")
    assert [r["id"] for r in both.records] == [r["id"] for r in single.records] == list(range(40))
    for a, b in zip(both, single):
        assert a.text == b.text and torch.equal(a.attentions, b.attentions)
