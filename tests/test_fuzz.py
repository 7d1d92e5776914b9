"""Fuzz the three readers of untrusted files with a seeded generator (reproducible: the
failing case's seed is in the assertion message).

* the CoNLL-U reader (:func:`probe.corpus.read_treebank`): random bytes and random
  mutations of real EWT sentences;
* the text reader (:func:`probe.corpus.read_text_file`): random bytes and text with
  exotic Unicode (combining marks, ZWJ, line/paragraph separators, control characters);
* the store reader (:class:`probe.store.Store`): random corruptions of a real small store.

Each case must give a ``ValueError`` or a correct result — never another exception, and
never a silently changed count: a treebank's valid + skipped sentences equal its blocks,
a text file gives one example per non-blank ``\\n``-line, a store reads its examples with
their values (up to the ±1e-3 row-sum check, the precision a store can vouch for without
checksums) or refuses; a store that lost whole index lines (as a killed capture does)
reads the rest and says it is incomplete (``Store.complete``, a warning).
"""

import random
import shutil
import time

import pytest
import torch

from probe.corpus import read_text_file, read_treebank
from probe.store import Store

SEED = 19
CASES = {"conllu": 1500, "text": 1000, "store": 1000}
EXOTIC = ["\u0301", "\u200d", "\u200b", "\u2028", "\u2029", "\x85", "\x1c", "\x00", "\x07", "\ufeff",
          "\t", "\r", "\n", "é", "👩\u200d💻", "\ud7ff", " ", "#", "-", ".", "0", "9", "_", "="]


def _report(capsys, name, n, seconds, outcomes):
    with capsys.disabled():
        print(f"\nfuzz {name}: {n} cases in {seconds:.1f} s; outcomes {dict(sorted(outcomes.items()))}")


def _random_bytes(rng: random.Random) -> bytes:
    n = rng.choice([0, 1, 2, 10, 100, 1000])
    return bytes(rng.getrandbits(8) for _ in range(n))


# ---- CoNLL-U -------------------------------------------------------------------
@pytest.fixture(scope="module")
def ewt_blocks(ewt_dev):
    text = ewt_dev.read_text(encoding="utf-8")
    return [b for b in text.split("\n\n") if b.strip()][:400]


def _mutate_conllu(rng: random.Random, text: str) -> str:
    lines = text.split("\n")
    for _ in range(rng.choice([1, 1, 2, 3])):
        k = rng.randrange(len(lines))
        op = rng.randrange(9)
        cols = lines[k].split("\t")
        if op == 0:  # a column to a random value
            c = rng.randrange(len(cols))
            cols[c] = rng.choice(["", "_", "0", "1", "2", "99", "-1", "1-2", "3.1", "x", rng.choice(EXOTIC)])
            lines[k] = "\t".join(cols)
        elif op == 1:  # HEAD to another word number
            if len(cols) == 10:
                cols[6] = str(rng.randrange(0, 30))
                lines[k] = "\t".join(cols)
        elif op == 2:
            del lines[k]
        elif op == 3:
            lines.insert(k, lines[k])
        elif op == 4:
            j = rng.randrange(len(lines))
            lines[k], lines[j] = lines[j], lines[k]
        elif op == 5:  # insert a character
            pos = rng.randrange(len(lines[k]) + 1)
            lines[k] = lines[k][:pos] + rng.choice(EXOTIC) + lines[k][pos:]
        elif op == 6 and lines[k]:  # delete a character
            pos = rng.randrange(len(lines[k]))
            lines[k] = lines[k][:pos] + lines[k][pos + 1:]
        elif op == 7:  # drop a column
            if len(cols) > 1:
                del cols[rng.randrange(len(cols))]
                lines[k] = "\t".join(cols)
        else:  # cut the text
            return "\n".join(lines)[: rng.randrange(len(text) + 1)]
        if not lines:
            return ""
    return "\n".join(lines)


def _word_blocks(text: str) -> int:
    """Blocks holding a non-comment line: each is a sentence, valid or skipped."""
    n, has_word = 0, False
    for line in text.split("\n") + [""]:
        line = line[:-1] if line.endswith("\r") else line
        if line.strip():
            has_word = has_word or not line.startswith("#")
        else:
            n += has_word
            has_word = False
    return n


def _check_sentence_result(s):
    n = len(s.words)
    assert n and len(s.heads) == len(s.spans) == len(s.deprels) == n
    assert sum(h == 0 for h in s.heads) == 1 and all(0 <= h <= n and h != i + 1 for i, h in enumerate(s.heads))
    for i in range(n):  # every word reaches the root
        j, steps = i, 0
        while s.heads[j] != 0:
            j, steps = s.heads[j] - 1, steps + 1
            assert steps <= n
    assert all(0 <= a < b <= len(s.text) for a, b in s.spans)


def test_fuzz_conllu_reader(tmp_path, ewt_blocks, capsys):
    rng, outcomes, start = random.Random(SEED), {}, time.perf_counter()
    path = tmp_path / "f.conllu"
    for case in range(CASES["conllu"]):
        if case % 5 == 0:
            data = _random_bytes(rng)
            text = data.decode("utf-8", errors="replace")
        else:
            k = rng.randrange(len(ewt_blocks) - 3)
            text = _mutate_conllu(rng, "\n\n".join(ewt_blocks[k: k + rng.choice([1, 2, 3])]) + "\n\n")
            data = text.encode("utf-8", errors="surrogatepass")
        path.write_bytes(data)
        for skip in (False, True):
            try:
                sentences, invalid = read_treebank(path, skip_invalid=skip)
            except ValueError:
                outcomes["ValueError"] = outcomes.get("ValueError", 0) + 1
                continue
            except Exception as exc:
                pytest.fail(f"case {case} (seed {SEED}): {type(exc).__name__}: {exc}\n{data[:400]!r}")
            outcomes["read"] = outcomes.get("read", 0) + 1
            assert skip or not invalid
            assert len(sentences) + len(invalid) == _word_blocks(data.decode("utf-8")), f"case {case}: count"
            for s in sentences:
                _check_sentence_result(s)
    _report(capsys, "CoNLL-U", CASES["conllu"] * 2, time.perf_counter() - start, outcomes)


# ---- text files ----------------------------------------------------------------
def test_fuzz_text_reader(tmp_path, capsys):
    rng, outcomes, start = random.Random(SEED + 1), {}, time.perf_counter()
    path = tmp_path / "f.txt"
    for case in range(CASES["text"]):
        if case % 2:
            data = _random_bytes(rng)
        else:
            parts = [rng.choice(EXOTIC + ["word", "The cat", " ", "\n", "\r\n"]) for _ in range(rng.randrange(30))]
            data = "".join(parts).encode("utf-8", errors="surrogatepass")
        path.write_bytes(data)
        try:
            lines = read_text_file(path)
        except ValueError:
            outcomes["ValueError"] = outcomes.get("ValueError", 0) + 1
            continue
        except Exception as exc:
            pytest.fail(f"case {case} (seed {SEED + 1}): {type(exc).__name__}: {exc}\n{data!r}")
        outcomes["read"] = outcomes.get("read", 0) + 1
        expected = [ln.strip() for ln in data.decode("utf-8").split("\n") if ln.strip()]
        assert lines == expected, f"case {case}: {data!r}"
    _report(capsys, "text", CASES["text"], time.perf_counter() - start, outcomes)


# ---- stores --------------------------------------------------------------------
@pytest.fixture(scope="module")
def real_store(minilm, tmp_path_factory):
    from probe.inputs import Corpus
    from probe.pipeline import capture_corpus

    out = tmp_path_factory.mktemp("fuzzstore") / "s"
    texts = ("The cat sat.", "A dog barked at night.", "Go!", "Birds fly south.", "It rained all day.")
    capture_corpus(minilm, Corpus(texts=texts), out, shard_size=2, layers=[0, 5])
    return out


def _corrupt_store(rng: random.Random, d):
    files = sorted(p for p in d.iterdir() if p.is_file())
    target = rng.choice(files)
    data = bytearray(target.read_bytes())
    op = rng.randrange(6)
    if op == 0 and data:  # flip bytes
        for _ in range(rng.choice([1, 2, 8])):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif op == 1:  # truncate
        data = data[: rng.randrange(len(data) + 1)]
    elif op == 2:
        data = bytearray(_random_bytes(rng))
    elif op == 3:
        target.unlink()
        return f"delete {target.name}"
    elif op == 4 and data:  # insert bytes
        pos = rng.randrange(len(data))
        data[pos:pos] = rng.choice([b"\n", b"garbage\n", b"\x00", b'{"id": 1}\n', b"../", b"\xff"])
    else:  # duplicate or drop an index line
        lines = (d / "index.jsonl").read_bytes().split(b"\n")
        k = rng.randrange(max(1, len(lines) - 1))
        lines.insert(k, lines[k]) if rng.random() < 0.5 else lines.pop(k)
        target, data = d / "index.jsonl", bytearray(b"\n".join(lines))
    target.write_bytes(bytes(data))
    return f"op {op} on {target.name}"


def test_fuzz_store_reader(real_store, tmp_path, capsys):
    rng, outcomes, start = random.Random(SEED + 2), {}, time.perf_counter()
    original = [(m.text, m.tokens, m.attentions.clone()) for m in Store(real_store)]
    for case in range(CASES["store"]):
        d = tmp_path / f"c{case}"
        shutil.copytree(real_store, d)
        what = _corrupt_store(rng, d)
        try:
            store = Store(d)
            got = [(m.text, m.tokens, m.attentions) for m in store]
        except ValueError:
            outcomes["ValueError"] = outcomes.get("ValueError", 0) + 1
            shutil.rmtree(d)
            continue
        except Exception as exc:
            pytest.fail(f"case {case} (seed {SEED + 2}, {what}): {type(exc).__name__}: {exc}")
        outcomes["read"] = outcomes.get("read", 0) + 1
        # fewer examples is a coherent store (as after a kill), and it says so (warning, .complete)
        assert len(got) == len(original) or (len(got) < len(original) and not store.complete), f"{case}: {what}"
        by_text = {t: (tok, a) for t, tok, a in original}
        for text, tokens, att in got:
            tok, ref = by_text[text]
            assert tokens == tok and att.shape == ref.shape, f"case {case}: {what}"
            assert torch.allclose(att.float(), ref.float(), atol=1e-3), f"case {case}: {what}"
        shutil.rmtree(d)
    _report(capsys, "store", CASES["store"], time.perf_counter() - start, outcomes)
