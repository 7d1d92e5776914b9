"""Property-based tests (hypothesis) of every parser and validator of untrusted input.

Replaces the hand-written seeded fuzzer. Each property runs a fixed, bounded number of
examples with ``derandomize=True`` (the same examples on every run and machine: CI is
reproducible, a failure prints its minimal example) and no example database.

Invariants:

* text and CoNLL-U reading never raise anything but ``InputError``; a text file gives its
  non-blank ``\\n``-lines (a leading byte-order mark removed); a treebank read with
  ``skip_invalid`` accounts for every block (valid + skipped = blocks with words);
* head and layer notation: parsing never raises anything but ``InputError``, never returns
  a repeat, and printing then parsing gives back the same heads/layers;
* option values: a number is accepted exactly when it is finite and in range, else
  ``InputError`` (the click type: ``click.BadParameter``);
* store index records: checking never raises anything but ``ValueError``; a store that
  ``probe store verify`` accepts reads back the same examples (ids, texts, tokens) with
  the same shapes, and values within 1e-3 (row sums are what a store can vouch for without
  checksums on tensors; an untouched shard reads back bit for bit).
"""

import json
import math
import re
import shutil
import tempfile
from pathlib import Path

import click
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from probe.app.cli.numbers import Number
from probe.app.registry.notation import head_name, parse_heads, parse_int_list
from probe.app.registry.validate import check_number
from probe.corpus import read_text_file, read_treebank
from probe.errors import InputError
from probe.store import Store
from probe.store_repair import verify_store
from probe.store_schema import check_record, record_crc

#: examples per property (bounded: the whole module runs in well under a minute)
N = 100
PROFILE = dict(
    max_examples=N,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
EXOTIC = [
    "\u0301",
    "\u200d",
    "\u200b",
    "\u2028",
    "\u2029",
    "\x85",
    "\x1c",
    "\x00",
    "\x07",
    "\ufeff",
    "\t",
    "\r",
    "\n",
    "é",
    "👩\u200d💻",
    " ",
    "#",
    "-",
    ".",
    "0",
    "9",
    "_",
    "=",
    "word",
    "The cat",
]
GOOD = [
    "1\tThe\tthe\tDET\t_\t_\t2\tdet\t_\t_",
    "2\tdog\tdog\tNOUN\t_\t_\t3\tnsubj\t_\t_",
    "3\tbarks\tbark\tVERB\t_\t_\t0\troot\t_\t_",
]
VALUES = ["", "_", "0", "1", "2", "3", "99", "-1", "1-2", "2-3", "3.1", "x", "\ufeff1", "1\ufeff", "é"]


def _tmpfile(data: bytes) -> Path:
    d = Path(tempfile.mkdtemp(prefix="prop-"))
    p = d / "input"
    p.write_bytes(data)
    return p


# ---- text files ---------------------------------------------------------------------
text_bytes = st.one_of(
    st.binary(max_size=300),
    st.lists(st.sampled_from(EXOTIC), max_size=30).map(lambda xs: "".join(xs).encode("utf-8")),
    st.text(max_size=200).map(lambda t: t.encode("utf-8", errors="surrogatepass")),
)


@settings(**PROFILE)
@given(data=text_bytes, bom=st.booleans())
def test_text_reader_reads_lines_or_refuses(data, bom):
    p = _tmpfile((b"\xef\xbb\xbf" if bom else b"") + data)
    try:
        lines = read_text_file(p)
    except InputError:
        return
    finally:
        shutil.rmtree(p.parent)
    text = data.decode("utf-8")
    if not bom and text.startswith("\ufeff"):
        text = text[1:]
    assert lines == [ln.strip() for ln in re.split(r"\r\n|\r|\n", text) if ln.strip()]  # any line ending


# ---- CoNLL-U --------------------------------------------------------------------------
@st.composite
def treebanks(draw):
    """A few sentences built from good rows with columns set to drawn values, lines dropped,
    duplicated or replaced by exotic text; sometimes a leading BOM."""
    blocks = []
    for _ in range(draw(st.integers(1, 4))):
        rows = [r.split("\t") for r in GOOD]
        for _ in range(draw(st.integers(0, 3))):
            r, c = draw(st.integers(0, 2)), draw(st.integers(0, 9))
            rows[r][c] = draw(st.sampled_from(VALUES + EXOTIC))
        lines = ["# text = The dog barks"] + ["\t".join(r) for r in rows]
        op = draw(st.integers(0, 4))
        k = draw(st.integers(0, len(lines) - 1))
        if op == 1:
            lines.pop(k)
        elif op == 2:
            lines.insert(k, lines[k])
        elif op == 3:
            lines[k] = draw(st.sampled_from(EXOTIC))
        blocks.append("\n".join(lines))
    bom = "\ufeff" if draw(st.booleans()) else ""
    return bom + "\n\n".join(blocks) + "\n\n"


@settings(**PROFILE)
@given(text=treebanks(), raw=st.binary(max_size=200), use_raw=st.booleans())
def test_conllu_reader_accounts_for_every_block_or_refuses(text, raw, use_raw):
    data = raw if use_raw else text.encode("utf-8")
    p = _tmpfile(data)
    try:
        try:
            strict = read_treebank(p)[0]
        except InputError:
            strict = None
        try:
            sentences, invalid = read_treebank(p, skip_invalid=True)
        except InputError:
            return
    finally:
        shutil.rmtree(p.parent)
    blocks, block = [], []  # blank = whitespace only (U+2028 too), as the reader says
    for ln in re.split(r"\r\n|\r|\n", data.decode("utf-8").removeprefix("\ufeff")):
        if ln.strip():
            block.append(ln)
        elif block:
            blocks.append(block)
            block = []
    blocks = [b for b in blocks + [block] if any(not ln.startswith("#") for ln in b)]
    assert len(sentences) + len(invalid) <= len(blocks)
    assert strict is None or (len(strict) == len(sentences) and not invalid)
    for s in sentences:
        assert len(s.words) == len(s.spans) == len(s.heads) and all(0 <= h <= len(s) for h in s.heads)
        assert all(s.text[a:b] for a, b in s.spans)


# ---- head and layer notation ----------------------------------------------------------
notation_text = st.text(alphabet="LlHh0123456789.,:-+ \t_x", max_size=30)


@settings(**PROFILE)
@given(value=st.one_of(notation_text, st.text(max_size=20)))
def test_head_notation_parses_unique_heads_or_refuses(value):
    try:
        heads = parse_heads(value)
    except InputError:
        return
    assert heads is None or len(set(heads)) == len(heads)
    if heads:
        assert parse_heads(",".join(head_name(*h) for h in heads)) == heads


@settings(**PROFILE)
@given(
    heads=st.lists(st.tuples(st.integers(0, 99), st.integers(0, 99)), min_size=1, max_size=8, unique=True),
    forms=st.lists(st.sampled_from(["L{}H{}", "{}.{}", "{}:{}", "{}-{}"]), min_size=8, max_size=8),
    sep=st.sampled_from([",", " ", "+", ", "]),
)
def test_every_head_form_round_trips_and_a_repeat_is_refused(heads, forms, sep):
    text = sep.join(f.format(*h) for f, h in zip(forms, heads))
    assert parse_heads(text) == heads
    with pytest.raises(InputError, match="given twice"):
        parse_heads(text + sep + head_name(*heads[0]))


@settings(**PROFILE)
@given(value=st.one_of(st.text(alphabet="0123456789-, x", max_size=25), st.text(max_size=15)))
def test_layer_lists_parse_unique_integers_or_refuse(value):
    try:
        out = parse_int_list(value)
    except InputError:
        return
    assert out is None or (len(set(out)) == len(out) and all(isinstance(x, int) for x in out))


@settings(**PROFILE)
@given(layers=st.lists(st.integers(0, 500), min_size=1, max_size=10, unique=True))
def test_layer_lists_round_trip(layers):
    assert parse_int_list(",".join(map(str, layers))) == layers
    assert parse_int_list(layers) == layers
    with pytest.raises(InputError, match="given twice"):
        parse_int_list(layers + [layers[-1]])


# ---- option values ----------------------------------------------------------------------
@settings(**PROFILE)
@given(
    x=st.one_of(
        st.floats(allow_nan=True, allow_infinity=True),
        st.integers(-(10**20), 10**20),
        st.sampled_from(["nan", "inf", "-inf", "NaN", "1e309", "0.5", " 2 ", "", "x", "1_0"]),
    ),
    lo=st.one_of(st.none(), st.floats(-10, 10)),
    hi=st.one_of(st.none(), st.floats(-10, 10)),
    kind=st.sampled_from([int, float]),
)
def test_a_number_is_accepted_exactly_when_finite_and_in_range(x, lo, hi, kind):
    try:
        got = check_number(x, "--x", kind, lo, hi)
    except InputError:
        try:
            v = float(x) if not isinstance(x, str) else float(x.strip())
        except ValueError:
            return
        if kind is int and not (
            isinstance(x, int)
            or (isinstance(x, str) and x.strip().lstrip("-").isdigit())
            or (isinstance(x, float) and x.is_integer())
        ):
            return
        assert not math.isfinite(v) or (lo is not None and v < lo) or (hi is not None and v > hi) or abs(v) > 2**62, (
            x,
            lo,
            hi,
            kind,
        )
        return
    assert isinstance(got, kind) and math.isfinite(got)
    assert (lo is None or got >= lo) and (hi is None or got <= hi)


@settings(**PROFILE)
@given(text=st.text(max_size=12))
def test_the_click_number_type_fails_only_with_bad_parameter(text):
    try:
        got = Number(float, 0.0, 1.0).convert(text, None, None)
    except click.BadParameter:
        return
    assert 0.0 <= got <= 1.0


# ---- store index records and stores -----------------------------------------------------
@pytest.fixture(scope="module")
def real_store(minilm, tmp_path_factory):
    from probe.inputs import Corpus
    from probe.pipeline import capture_corpus

    out = tmp_path_factory.mktemp("propstore") / "s"
    texts = ("The cat sat.", "A dog barked at night.", "Go!", "Birds fly south.", "It rained all day.")
    capture_corpus(minilm, Corpus(texts=texts), out, shard_size=2, layers=[0, 5])
    return out


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 10) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=6), c, max_size=4),
    max_leaves=12,
)


@settings(**PROFILE)
@given(data=st.data())
def test_index_records_are_checked_with_value_errors_only(real_store, data):
    rec = json.loads((real_store / "index.jsonl").read_text().splitlines()[data.draw(st.integers(0, 4))])
    for _ in range(data.draw(st.integers(1, 3))):
        key = data.draw(st.sampled_from(sorted(rec) + ["extra"]))
        if data.draw(st.booleans()):
            rec.pop(key, None)
        else:
            rec[key] = data.draw(json_values)
    if data.draw(st.booleans()):
        rec["crc"] = record_crc(rec)  # a consistent, edited record
    try:
        check_record(rec)
    except ValueError:
        return
    assert rec["key"] == f"ex{rec['id']}"  # an accepted record names its own tensor


@settings(**dict(PROFILE, max_examples=100))
@given(data=st.data())
def test_a_store_verify_accepts_reads_back_equal(real_store, data):
    original = {
        r["id"]: (r["text"], r["tokens"], m.attentions.clone())
        for r, m in zip(Store(real_store).records, Store(real_store))
    }
    d = Path(tempfile.mkdtemp(prefix="propstore-")) / "s"
    shutil.copytree(real_store, d)
    try:
        files = sorted(p.name for p in d.iterdir() if p.is_file() and not p.name.startswith("."))
        touched = set()
        for _ in range(data.draw(st.integers(1, 2))):
            name = data.draw(st.sampled_from(files))
            target = d / name
            if not target.exists():
                continue
            raw = bytearray(target.read_bytes())
            op = data.draw(st.integers(0, 5))
            if op == 0 and raw:
                raw[data.draw(st.integers(0, len(raw) - 1))] ^= 1 << data.draw(st.integers(0, 7))
            elif op == 1:
                raw = raw[: data.draw(st.integers(0, len(raw)))]
            elif op == 2:
                target.unlink()
                touched.add(name)
                continue
            elif op == 3:
                pos = data.draw(st.integers(0, len(raw)))
                raw[pos:pos] = data.draw(st.sampled_from([b"\n", b"garbage\n", b"\x00", b'{"id": 1}\n', b"../"]))
            else:  # index lines: duplicate, drop, or re-id one with a valid checksum
                target = d / "index.jsonl"
                if not target.exists():
                    continue
                lines = target.read_text(errors="replace").splitlines()
                if not lines:
                    continue
                k = data.draw(st.integers(0, len(lines) - 1))
                if op == 4:
                    lines.insert(k, lines[k]) if data.draw(st.booleans()) else lines.pop(k)
                else:
                    try:
                        rec = json.loads(lines[k])
                        rec["id"] = data.draw(st.integers(0, 7))
                        rec["crc"] = record_crc(rec)
                        lines[k] = json.dumps(rec)
                    except (ValueError, TypeError):
                        pass
                raw = bytearray(("\n".join(lines) + "\n").encode())
            target.write_bytes(bytes(raw))
            touched.add(target.name)
        try:
            check = verify_store(d)
        except ValueError:
            return
        if check.problems:
            return
        store = Store(d)
        assert len(store) == check.n_examples
        for rec, m in zip(store.records, store):
            text, tokens, att = original[rec["id"]]  # each id reads its own example, never another's
            assert rec["text"] == text and list(m.tokens) == list(tokens) and m.attentions.shape == att.shape
            if rec["shard"] in touched:
                assert torch.allclose(m.attentions.float(), att.float(), atol=1e-3)
            else:
                assert torch.equal(m.attentions, att)
    finally:
        shutil.rmtree(d.parent)
