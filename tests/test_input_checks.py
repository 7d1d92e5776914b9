"""The silent wrong results of issue 28, each refused or fixed at its root: byte-order
marks, an index line reading another example's tensor, NaN options, repeated heads and
layers, a resumed capture that differs from a clean one, orphan shards."""

import json
import shutil

import pytest
import torch
from click.testing import CliRunner

from probe.app.cli import main as cli
from probe.inputs.readers import read_conllu, read_text_file
from probe.errors import InputError
from probe.inputs.corpus import Corpus
from probe.runs.pipeline import capture_corpus
from probe.store.directory import Store, done_ids
from probe.store.repair import verify_store
from probe.store.schema import record_crc

BOM = "\ufeff"
ROWS = (
    "1\tThe\tthe\tDET\t_\t_\t2\tdet\t_\t_\n2\tdog\tdog\tNOUN\t_\t_\t3\tnsubj\t_\t_\n"
    "3\tbarks\tbark\tVERB\t_\t_\t0\troot\t_\t_\n"
)
TEXTS = [f"Sentence number {i} has {'many ' * (i % 5)}words in it." for i in range(23)]


# ---- byte-order marks ---------------------------------------------------------------
def test_text_file_with_a_bom_reads_its_first_word(tmp_path, caplog):
    p = tmp_path / "bom.txt"
    p.write_bytes((BOM + "Hello world\nSecond line\n").encode("utf-8"))
    assert read_text_file(p) == ["Hello world", "Second line"]
    assert "byte-order mark" in caplog.text  # reported, not silent


def test_conllu_with_a_bom_is_read(tmp_path, caplog):
    p = tmp_path / "bom.conllu"
    p.write_bytes((BOM + "# text = The dog barks\n" + ROWS + "\n").encode("utf-8"))
    (s,) = read_conllu(p)
    assert s.words == ("The", "dog", "barks") and s.text == "The dog barks" and s.heads == (2, 3, 0)
    assert "byte-order mark" in caplog.text


def test_a_bom_inside_the_text_is_kept(tmp_path):
    p = tmp_path / "mid.txt"
    p.write_text("a" + BOM + "b\n", encoding="utf-8")
    assert read_text_file(p) == ["a" + BOM + "b"]


# ---- store: an index line owns its tensor -----------------------------------------------
@pytest.fixture(scope="module")
def small_store(minilm, tmp_path_factory):
    out = tmp_path_factory.mktemp("own") / "s"
    capture_corpus(minilm, Corpus(texts=tuple(TEXTS[:4])), out, shard_size=2)
    return out


def _steal(store_dir, victim: int, new_id: int):
    """Append a line with a fresh id whose key names example ``victim``'s tensor (valid crc)."""
    lines = (store_dir / "index.jsonl").read_text().splitlines()
    rec = json.loads(lines[victim])
    rec["id"] = new_id
    rec["crc"] = record_crc(rec)
    (store_dir / "index.jsonl").write_text("\n".join(lines + [json.dumps(rec)]) + "\n")


def test_an_index_line_reading_another_examples_tensor_is_refused(small_store, tmp_path):
    c = tmp_path / "c"
    shutil.copytree(small_store, c)
    _steal(c, victim=0, new_id=6)
    check = verify_store(c)
    assert check.n_examples == 4 and len(check.problems) == 1
    assert "index.jsonl:5" in check.problems[0] and "example 6 names the tensor 'ex0'" in check.problems[0]
    with pytest.raises(ValueError, match=r"index.jsonl:5: example 6 names the tensor 'ex0'"):
        Store(c)
    r = CliRunner().invoke(cli, ["store", "verify", str(c)])
    assert r.exit_code == 1 and "1 damaged" in r.output and "example 6" in r.output


def test_two_lines_naming_one_tensor_are_refused_even_with_matching_keys(small_store, tmp_path):
    """Same (shard, key) twice: the second line is named with the line that owns it."""
    from probe.store.schema import scan_index

    c = tmp_path / "c"
    shutil.copytree(small_store, c)
    lines = (c / "index.jsonl").read_text().splitlines()
    (c / "index.jsonl").write_text("\n".join(lines + [lines[1]]) + "\n")
    records, problems, _ = scan_index(c / "index.jsonl")
    assert len(records) == 4 and problems == [(5, "duplicate example id 1")]


def test_manifest_with_a_repeated_layer_is_refused(small_store, tmp_path):
    c = tmp_path / "c"
    shutil.copytree(small_store, c)
    m = json.loads((c / "manifest.json").read_text())
    m["layers"] = [0, 0, 1]
    (c / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(ValueError, match=r"layers \[0, 0, 1\] name a layer twice"):
        Store(c)


# ---- resume: bit for bit, orphans removed ------------------------------------------------
def test_resumed_capture_equals_a_clean_one_bit_for_bit_and_leaves_no_orphans(minilm, tmp_path):
    corpus = Corpus(texts=tuple(TEXTS))
    clean = capture_corpus(minilm, corpus, tmp_path / "clean", shard_size=4, batch_size=2)
    out = tmp_path / "r"

    class Boom(Exception):
        pass

    import probe.runs.pipeline as pipeline

    real = pipeline.iter_capture
    seen = {"n": 0}

    def failing(*a, **k):
        for m in real(*a, **k):
            seen["n"] += 1
            if seen["n"] == 10:
                raise Boom()
            yield m

    pipeline.iter_capture = failing
    try:
        with pytest.raises(Boom):
            capture_corpus(minilm, corpus, out, shard_size=4, batch_size=2)
    finally:
        pipeline.iter_capture = real
    assert 0 < len(done_ids(out)) < len(TEXTS)
    # a kill: the last index line cut mid-line, its shard (and a temporary file) left behind
    lines = (out / "index.jsonl").read_text().splitlines()
    (out / "index.jsonl").write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:25])
    (out / "shard-00099.safetensors").write_bytes(b"left by a killed writer")
    (out / "shard-00100.safetensors.tmp").write_bytes(b"half")
    store = capture_corpus(minilm, corpus, out, shard_size=4, batch_size=2)
    assert [r["id"] for r in store.records] == list(range(len(TEXTS)))
    check = verify_store(out)
    assert check.ok and check.orphans == [] and check.n_examples == len(TEXTS)
    for m, f in zip(store, clean):
        assert m.text == f.text and torch.equal(m.attentions, f.attentions)  # bit for bit


def test_repair_removes_orphan_shards(small_store, tmp_path):
    from probe.store.repair import repair_store

    c = tmp_path / "c"
    shutil.copytree(small_store, c)
    (c / "shard-00042.safetensors").write_bytes(b"x" * 100)
    assert verify_store(c).orphans == ["shard-00042.safetensors"]
    assert repair_store(c).orphans == ["shard-00042.safetensors"]
    assert not (c / "shard-00042.safetensors").exists() and verify_store(c).ok


# ---- options: NaN, infinity, ranges; repeated heads and layers ---------------------------
@pytest.mark.parametrize(
    "args, message",
    [
        (["prune", "--threshold", "nan"], "--threshold"),
        (["prune", "--threshold", "inf"], "--threshold"),
        (["prune", "--step", "0"], "--step"),
        (["prune", "--step", "1.5"], "--step"),
        (["rollout", "--residual", "nan"], "--residual"),
        (["complexity", "--max-memory", "-inf"], "--max-memory"),
        (["capture", "--batch-size", "nan"], "--batch-size"),
        (["faithfulness", "--heads", "L0H0,L0H0"], "L0H0 is given twice"),
        (["ablate", "--group", "L0H1,L0H1"], "L0H1 is given twice"),
        (["ablate", "--layers", "0,0,1"], "0 is given twice"),
        (["capture", "--layers", "0,0,1"], "0 is given twice"),
        (["capture", "--layers", "0-2,1"], "1 is given twice"),
    ],
)
def test_bad_option_values_are_refused_before_any_work(tmp_path, args, message):
    text = [] if args[0] == "complexity" else ["--text", "The cat sat."]
    r = CliRunner().invoke(cli, [*args, *text, "--out", str(tmp_path / "o")])
    assert r.exit_code == 2, r.output
    last = [line for line in r.output.splitlines() if line.strip()][-1]
    assert last.startswith("Error:") and message in last
    assert not (tmp_path / "o").exists()


def test_the_api_refuses_the_same_values():
    import probe

    with pytest.raises(InputError, match="--threshold: expected a finite number"):
        probe.run("prune", text=["The cat sat."], threshold=float("nan"))
    with pytest.raises(InputError, match="--heads: head L0H0 is given twice"):
        probe.run("faithfulness", text=["The cat sat."], heads=[(0, 0), "0.0"])
    with pytest.raises(InputError, match="layers \\[0, 0, 1\\] name a layer twice"):
        from probe.runs.pipeline import store_manifest

        class A:
            name, default_stack, n_heads = "m", "encoder", 1

        store_manifest(A(), Corpus(texts=("a",)), Corpus(texts=("a",)), layers=[0, 0, 1])


# ---- [UNK]: counted per example, long words named, never hidden as special --------------
def test_unknown_tokens_are_counted_per_example_and_noted(minilm, caplog):
    from probe.inputs.corpus import fit_to_model

    corpus = fit_to_model(Corpus(texts=("I love 🍕 pizza 😀", "x" * 1_000_000, "plain words")), minilm)
    assert corpus.unknown == (2, 1, 0)
    assert "2 of 3 examples hold [UNK] tokens (3 in all" in caplog.text
    assert "example 1: a word of 1,000,000 characters became one [UNK] token" in caplog.text
    assert corpus.subset([1, 2]).unknown == (1, 0)


def test_a_store_records_each_examples_unknown_tokens(minilm, tmp_path):
    store = capture_corpus(minilm, Corpus(texts=("Pizza 🍕 and 😀 here", "No unknowns here")), tmp_path / "s")
    assert [r["meta"]["unknown_tokens"] for r in store.records] == [2, 0]


def test_unk_is_not_hidden_as_a_special_token(minilm):
    from probe.analyses.common.metrics import _special

    enc = minilm.tokenizer(["I love 🍕 pizza"], return_tensors="pt")
    special = _special(minilm, enc["input_ids"], enc["attention_mask"])[0].tolist()
    tokens = minilm.tokenizer.convert_ids_to_tokens(enc["input_ids"][0])
    assert tokens[3] == "[UNK]" and special == [True, False, False, False, False, True]


# ---- models: hf: names a folder; config contradicting weights --------------------------
def test_hf_path_to_a_file_is_one_clear_error(tmp_path):
    from probe.models import load_model

    (tmp_path / "config.json").write_text('{"model_type": "bert"}')
    with pytest.raises(ValueError, match=r"is a file; hf: names a model folder .* use hf:"):
        load_model(f"hf:{tmp_path / 'config.json'}")


def test_config_contradicting_its_weights_is_bad_input(tmp_path, bert_tokenizer):
    import transformers as T

    cfg = T.LlamaConfig(
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        vocab_size=len(bert_tokenizer),
        pad_token_id=0,
    )
    torch.manual_seed(0)
    T.LlamaForCausalLM(cfg).save_pretrained(tmp_path)
    bert_tokenizer.save_pretrained(tmp_path)
    c = json.loads((tmp_path / "config.json").read_text())
    c.update(num_attention_heads=8, num_key_value_heads=4)
    (tmp_path / "config.json").write_text(json.dumps(c))
    r = CliRunner().invoke(cli, ["capture", "--model", f"hf:{tmp_path}", "--text", "hi", "--out", str(tmp_path / "o")])
    assert r.exit_code == 1, r.output
    last = r.output.strip().splitlines()[-1]
    assert last.startswith("Error:") and "does not match its weights" in last
    assert "k_proj.weight is [16, 32]" in last and "num_attention_heads=8" in last and "unexpected" not in last


# ---- --out: resolved once, links followed, writability proved first ---------------------
def test_out_through_a_symlink_writes_into_its_target_and_keeps_the_link(tmp_path):
    real, link = tmp_path / "real", tmp_path / "link"
    real.mkdir()
    link.symlink_to(real)
    r = CliRunner().invoke(cli, ["rollout", "--text", "The cat sat.", "--out", str(link)])
    assert r.exit_code == 0, r.output
    assert link.is_symlink() and (real / "rollout.csv").is_file()


def test_unwritable_out_is_refused_before_any_compute(tmp_path, monkeypatch):
    """Permission bits lie for root (/proc says writable): the check creates a file."""
    import os

    import probe.models as models
    from probe.app.report.build import build_report

    def no_model(*a, **k):
        raise AssertionError("the model was loaded before --out was checked")

    monkeypatch.setattr(models, "load_model", no_model)
    monkeypatch.setattr(os, "access", lambda *a, **k: True)
    with pytest.raises(InputError, match="cannot write --out /proc/x/y: creating a file in /proc failed"):
        build_report("/proc/x/y", text=["The cat sat."])


def test_the_report_states_unknown_tokens(minilm):
    from probe.app.report.build import _unknown_summary
    from probe.inputs.corpus import fit_to_model

    corpus = fit_to_model(Corpus(texts=("Pizza 🍕 here", "plain", "😀 and 😀")), minilm)
    assert _unknown_summary(corpus, minilm) == "3 [UNK] in 2 of 3 examples (example 0: 1, example 2: 2)"
    assert _unknown_summary(fit_to_model(Corpus(texts=("plain",)), minilm), minilm) == "none ([UNK] in 0 of 1 examples)"
