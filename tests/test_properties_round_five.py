"""Property tests (hypothesis) of issue 59's checks, seeded with its rows: the safetensors
header check (random truncations and header bytes), the config check (random values of
each size field) and the store manifest schema (random values of each field).

Each property asserts both sides: a damaged or absurd input is refused with ``InputError``
and nothing else, and a sound one is accepted (a check that refused everything would fail
here). Same profile as tests/test_properties.py: derandomized, bounded, no database.
"""

import json
import math
import shutil

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from probe.errors import InputError
from probe.models.weights_check import SIZE_FIELDS

PROFILE = dict(
    max_examples=60,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(scope="module")
def weights_file(tmp_path_factory):
    from safetensors.torch import save_file

    path = tmp_path_factory.mktemp("w5") / "model.safetensors"
    save_file({"a.weight": torch.randn(4, 3), "b.bias": torch.arange(5, dtype=torch.int64)}, str(path))
    return path


@settings(**PROFILE)
@given(cut=st.integers(0, 10_000))
@example(cut=10_000)  # row 1's untouched file (cut past the end)
def test_a_weights_file_is_accepted_exactly_when_whole(weights_file, tmp_path, cut):
    from probe.models.weights_check import read_safetensors_header

    data = weights_file.read_bytes()
    cut = min(cut, len(data))
    p = tmp_path / f"cut{cut}.safetensors"
    p.write_bytes(data[:cut])
    if cut == len(data):
        assert set(read_safetensors_header(p)) == {"a.weight", "b.bias"}
    else:
        with pytest.raises(InputError, match=str(p)):
            read_safetensors_header(p)


@settings(**PROFILE)
@given(
    length=st.one_of(st.integers(0, 2**64 - 1), st.just(None)),
    at=st.integers(0, 200),
    noise=st.binary(min_size=0, max_size=8),
)
@example(length=2**60, at=0, noise=b"")  # row 2: an absurd header length
@example(length=None, at=0, noise=b"")  # the sound file
def test_header_bytes_are_refused_or_read_as_safetensors_reads_them(weights_file, tmp_path, length, at, noise):
    """Whatever the header bytes, the check raises InputError or accepts; when it accepts,
    safetensors itself reads every tensor (the check never passes what the library cannot)."""
    from safetensors import safe_open

    from probe.models.weights_check import read_safetensors_header

    data = bytearray(weights_file.read_bytes())
    if length is not None:
        data[:8] = length.to_bytes(8, "little")
    n = int.from_bytes(data[:8], "little")
    at = 8 + at % max(1, min(n, len(data) - 8))
    data[at : at + len(noise)] = noise
    p = tmp_path / "h.safetensors"
    p.write_bytes(bytes(data))
    try:
        header = read_safetensors_header(p)
    except InputError as exc:
        assert str(p) in str(exc)
        return
    with safe_open(str(p), framework="pt") as f:
        assert set(f.keys()) == set(header)
        for k in f.keys():
            assert list(f.get_tensor(k).shape) == header[k]["shape"]
    if length is None and not noise:
        assert set(header) == {"a.weight", "b.bias"}


SOUND = {"hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2, "vocab_size": 100}
values = st.one_of(
    st.integers(-3, 10**13),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.text(max_size=4),
    st.none(),
    st.lists(st.integers(), max_size=2),
)


@settings(**dict(PROFILE, max_examples=150))
@given(field=st.sampled_from(sorted(SIZE_FIELDS)), value=values)
@example(field="num_hidden_layers", value=1_000_000_000)  # row 3
@example(field="num_hidden_layers", value=1e9)  # row 4
@example(field="vocab_size", value=50)  # sound
def test_a_config_is_accepted_exactly_when_its_sizes_are_whole_and_fit(field, value):
    from probe.models.weights_check import check_config, parameter_bytes

    memory = 2**30
    config = {**SOUND, field: value}
    whole = value is None or (type(value) is int and value >= 1)
    fits = whole and parameter_bytes({k: v for k, v in config.items() if v is not None}) <= memory
    if whole and fits:
        check_config(config, "m", memory=memory)
    else:
        with pytest.raises(InputError, match=field if not whole else "more than this machine"):
            check_config(config, "m", memory=memory)


@pytest.fixture(scope="module")
def zoo_store(tmp_path_factory):
    from probe.inputs.corpus import Corpus
    from probe.models import load_model
    from probe.runs.pipeline import capture_corpus

    out = tmp_path_factory.mktemp("ps5") / "s"
    capture_corpus(load_model("zoo:induction"), Corpus(texts=("a b c a b c", "d e f d e")), out)
    return out


json_values = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(-(10**31), 10**31), st.floats(allow_nan=False), st.text(max_size=5)
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=3), inner, max_size=3)),
    max_leaves=5,
)


@settings(**dict(PROFILE, max_examples=50))
@given(
    field=st.sampled_from(["n_input", "skipped", "n_heads", "model", "stack", "rows", "options", "weights", "layers"]),
    value=json_values,
)
@example(field="n_input", value=10**30)  # row 11
@example(field="n_input", value=-1)
@example(field="n_input", value="2")
@example(field="n_input", value=2)  # sound
def test_a_manifest_is_read_only_with_sound_fields(zoo_store, tmp_path, field, value):
    from probe.store.directory import Store
    from probe.store.schema import MANIFEST_FIELDS, read_manifest

    d = tmp_path / "s"
    if d.exists():
        shutil.rmtree(d)
    shutil.copytree(zoo_store, d)
    m = json.loads((d / "manifest.json").read_text())
    m[field] = value
    (d / "manifest.json").write_text(json.dumps(m))
    try:
        read = read_manifest(d)
    except InputError as exc:
        assert "manifest.json" in str(exc)
        ok, _ = MANIFEST_FIELDS.get(field, (None, None))
        if ok is not None:
            assert not ok(value) or field == "layers"
        return
    ok, _ = MANIFEST_FIELDS.get(field, (lambda v: True, ""))
    assert ok(read[field])
    if field == "n_input":
        assert isinstance(value, int) and 0 <= value <= 10**9 and not math.isnan(float(value))
    store = Store(d)  # every reader opens it
    assert len(store) == 2
