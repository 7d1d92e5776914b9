"""Issue 41, reliability round four: what is stored, loaded and read is what it says it is.

One section per row of the issue's table (``row N``), each a bad input that was a silent
wrong result or a crash: resumed captures with other weights, dtype or tokenizer; configs
contradicting their weights; a vocabulary larger than the embedding; CoNLL-U whose ``# text``
or fields disagree with UD; CR-only text; empty, repeated or contradictory options;
stores with negative maps or a missing index line; tokens spanning two words.
"""

import copy
import hashlib
import json
import logging
import shutil

import pytest
import torch
from click.testing import CliRunner

from probe.app.cli import main as cli
from probe.inputs.readers import read_conllu, read_text_file, read_treebank
from probe.errors import InputError
from probe.inputs.corpus import Corpus
from probe.runs.pipeline import capture_corpus
from probe.store.directory import Store
from probe.store.repair import verify_store
from probe.store.schema import record_crc

TEXTS = tuple(f"Sentence {i} is about {'cats ' * (i % 3)}and dogs." for i in range(6))
ROWS = (
    "1\tThe\tthe\tDET\t_\t_\t2\tdet\t_\t_\n"
    "2\tdog\tdog\tNOUN\t_\t_\t3\tnsubj\t_\t_\n"
    "3\tbarks\tbark\tVERB\t_\t_\t0\troot\t_\t_\n"
)


def _files(directory) -> dict:
    """name -> sha256 of every file of a directory (the store untouched: same dict)."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir()) if p.is_file()}


def _run(*args):
    r = CliRunner().invoke(cli, [str(a) for a in args])
    return r, (r.output.strip().splitlines() or [""])[-1]


@pytest.fixture()
def tiny(tiny_models):
    """A private copy of the tiny BERT (tests change its weights and tokenizer)."""
    return copy.deepcopy(tiny_models["bert"])


def _interrupted(adapter, out, n=3):
    """A store of ``TEXTS`` killed after ``n`` examples (one shard per example)."""
    import probe.runs.pipeline as pipeline

    real = pipeline.iter_capture

    class Killed(Exception):
        pass

    def dying(*a, **k):
        for i, m in enumerate(real(*a, **k)):
            if i == n:
                raise Killed
            yield m

    pipeline.iter_capture = dying
    try:
        with pytest.raises(Killed):
            capture_corpus(adapter, Corpus(texts=TEXTS), out, shard_size=1, batch_size=2)
    finally:
        pipeline.iter_capture = real
    assert len(Store(out)) == n
    return out


# ---- row 1: a resume with other weights, dtype or tokenizer is refused --------------------
def test_row01_manifest_records_provenance(tiny, tmp_path):
    store = capture_corpus(tiny, Corpus(texts=TEXTS[:2]), tmp_path / "s")
    m = store.manifest
    assert len(m["weights"]) == 32 and len(m["tokenizer"]) == 16
    assert m["forward_dtype"] == "float32" and m["device"] == "cpu" and m["toolkit"]
    assert m["options"] == {"batch_size": 16, "truncate": False} and m["rows"] == "sum to 1"


@pytest.mark.parametrize("change", ["weights", "dtype", "tokenizer", "batch_size"])
def test_row01_resume_with_anything_different_is_refused_and_the_store_untouched(tiny, tmp_path, change):
    out = _interrupted(tiny, tmp_path / "s")
    before = _files(out)
    other, batch = copy.deepcopy(tiny), 2
    if change == "weights":
        with torch.no_grad():
            other.model.encoder.layer[1].attention.self.query.weight[0, 0] += 0.5
        said = "other weights (state-dict fingerprint)"
    elif change == "dtype":
        other.model.to(torch.bfloat16)
        said = "another forward dtype (--dtype): 'float32' ≠ 'bfloat16'"
    elif change == "tokenizer":
        other.tokenizer.add_tokens(["zebraword"])
        said = "another tokenizer"
    else:
        batch = 4
        said = "another capture option batch_size: 2 ≠ 4"
    with pytest.raises(InputError, match="resuming would mix two captures") as exc:
        capture_corpus(other, Corpus(texts=TEXTS), out, shard_size=1, batch_size=batch)
    assert said in str(exc.value) and "\n" not in str(exc.value)
    assert _files(out) == before  # untouched: no shard, index line or manifest change
    finished = capture_corpus(tiny, Corpus(texts=TEXTS), out, shard_size=1, batch_size=2)  # same model: resumes
    assert len(finished) == len(TEXTS) and verify_store(out).ok


def test_row01_the_tokenizer_fingerprint_ignores_the_state_a_call_leaves():
    """Encoding a padded, truncated batch leaves truncation/padding settings on the fast
    tokenizer's backend; the fingerprint of the same tokenizer must not change with them (a
    resume in a process that had already encoded text was refused as 'another tokenizer')."""
    from probe.models import load_model
    from probe.models.fingerprint import tokenizer_fingerprint

    tok = copy.deepcopy(load_model("minilm").tokenizer)  # a copy: the bundled one is shared by later tests
    before = tokenizer_fingerprint(tok)
    tok(["a short text", "a somewhat longer text to pad against"], truncation=True, padding=True, max_length=6)
    assert tokenizer_fingerprint(tok) == before
    tok.add_tokens(["zzqqxx"])  # a real change of the vocabulary still changes it
    assert tokenizer_fingerprint(tok) != before


def test_row01_the_same_weights_loaded_again_have_the_same_fingerprint(minilm):
    from probe.models import load_model
    from probe.models.fingerprint import tokenizer_fingerprint, weights_fingerprint

    again = load_model("minilm")
    assert weights_fingerprint(again.model) == weights_fingerprint(minilm.model)
    assert tokenizer_fingerprint(again.tokenizer) == tokenizer_fingerprint(minilm.tokenizer)


def test_row01_an_old_store_stays_readable_and_is_not_resumed(tiny, tmp_path):
    out = _interrupted(tiny, tmp_path / "s")
    m = json.loads((out / "manifest.json").read_text())
    for key in ("weights", "forward_dtype", "device", "tokenizer", "toolkit", "options", "rows"):
        m.pop(key)
    (out / "manifest.json").write_text(json.dumps(m))
    assert len(Store(out)) == 3 and Store(out)[0].attentions.shape[0] == 2  # readable
    with pytest.raises(InputError, match="written before stores recorded their weights"):
        capture_corpus(tiny, Corpus(texts=TEXTS), out, shard_size=1, batch_size=2)


# ---- rows 2 and 3: loading checks what it loads --------------------------------------------
@pytest.fixture(scope="module")
def tiny_dir(bert_tokenizer, tmp_path_factory):
    """A saved 2-layer BERT with the MiniLM tokenizer (an hf: folder)."""
    import transformers as T

    d = tmp_path_factory.mktemp("tinybert")
    cfg = T.BertConfig(
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=16,
        vocab_size=len(bert_tokenizer),
        architectures=["BertModel"],
    )
    torch.manual_seed(0)
    T.BertModel(cfg).save_pretrained(d)
    bert_tokenizer.save_pretrained(d)
    return d


def _edited(tiny_dir, tmp_path, **config):
    d = tmp_path / "model"
    shutil.copytree(tiny_dir, d)
    c = json.loads((d / "config.json").read_text())
    c.update(config)
    (d / "config.json").write_text(json.dumps(c))
    return d


@pytest.mark.parametrize(
    "layers, said",
    [
        (3, "says num_hidden_layers=3 but its weights hold 2 layers (layers 2..2 would be random)"),
        (1, "says num_hidden_layers=1 but its weights hold 2 layers (layers 1..1 would be dropped)"),
    ],
)
def test_row02_a_config_with_more_or_fewer_layers_than_the_weights_is_refused(tiny_dir, tmp_path, layers, said):
    d = _edited(tiny_dir, tmp_path, num_hidden_layers=layers)
    r, last = _run("capture", "--model", f"hf:{d}", "--text", "The dog barks.", "--out", tmp_path / "o")
    assert r.exit_code == 1 and last.startswith("Error:") and said in last, r.output
    assert not (tmp_path / "o").exists()  # nothing written


def test_row02_the_unedited_folder_loads(tiny_dir):
    from probe.models import load_model

    assert load_model(f"hf:{tiny_dir}").n_layers == 2


def test_row02_missing_and_unexpected_keys_are_refused(tiny_dir, tmp_path):
    from safetensors.torch import load_file, save_file

    from probe.models import load_model

    d = _edited(tiny_dir, tmp_path)
    weights = load_file(str(d / "model.safetensors"))
    weights.pop("pooler.dense.weight")
    weights["encoder.extra.weight"] = torch.zeros(2)
    save_file(weights, str(d / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(InputError, match=r"1 weight\(s\) the model needs are not in its safetensors files"):
        load_model(f"hf:{d}")
    weights["pooler.dense.weight"] = torch.zeros(16, 16)
    save_file(weights, str(d / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(InputError, match=r"hold 1 weight\(s\) the model has no place for \(e.g. encoder.extra"):
        load_model(f"hf:{d}")


def test_row03_a_vocabulary_larger_than_the_embedding_is_refused_and_leaves_no_store(tiny_dir, tmp_path):
    import transformers as T

    d = tmp_path / "small"
    shutil.copytree(tiny_dir, d)
    (d / "model.safetensors").unlink()
    cfg = T.BertConfig.from_pretrained(d)
    cfg.vocab_size = 1000
    T.BertModel(cfg).save_pretrained(d)
    r, last = _run("capture", "--model", f"hf:{d}", "--text", "The zebra barks.", "--out", tmp_path / "o")
    assert r.exit_code == 1, r.output
    assert "its tokenizer has 30,522 tokens but the model's embedding has 1,000 rows" in last
    assert not (tmp_path / "o").exists()


def test_row03_a_capture_that_fails_before_its_first_example_leaves_no_store(tiny, tmp_path):
    import probe.runs.pipeline as pipeline

    def broken(*a, **k):
        raise IndexError("index out of range in self")
        yield

    real, pipeline.iter_capture = pipeline.iter_capture, broken
    try:
        with pytest.raises(IndexError):
            capture_corpus(tiny, Corpus(texts=TEXTS), tmp_path / "o")
    finally:
        pipeline.iter_capture = real
    assert not (tmp_path / "o").exists()


# ---- row 4: # text holding words the token lines lack ---------------------------------------
def test_row04_text_with_words_the_token_lines_lack_is_refused(tmp_path):
    p = tmp_path / "t.conllu"
    p.write_text("# text = The dog barks at the mailman\n" + ROWS + "\n")
    with pytest.raises(InputError, match=r"t.conllu:1: # text goes on after the last word: 'atthemailman'"):
        read_conllu(p)
    p.write_text("# text = The cat barks\n" + ROWS + "\n")
    with pytest.raises(InputError, match=r"# text and the words differ at 'catbarks' \(the words have 'dogbarks'\)"):
        read_conllu(p)
    p.write_text("# text = The cat barks\n" + ROWS + "\n# text = The dog barks\n" + ROWS + "\n")
    sentences, invalid = read_treebank(p, skip_invalid=True)
    assert [s.text for s in sentences] == ["The dog barks"] and invalid[0].line == 1


def test_row04_multiword_tokens_and_no_space_after_agree_with_the_text(tmp_path):
    p = tmp_path / "t.conllu"
    p.write_text(
        "# text = I don't know.\n"
        "1\tI\tI\tPRON\t_\t_\t3\tnsubj\t_\t_\n"
        "2-3\tdon't\t_\t_\t_\t_\t_\t_\t_\t_\n"
        "2\tdo\tdo\tAUX\t_\t_\t4\taux\t_\t_\n"
        "3\tn't\tnot\tPART\t_\t_\t4\tadvmod\t_\t_\n"
        "4\tknow\tknow\tVERB\t_\t_\t0\troot\t_\tSpaceAfter=No\n"
        "5\t.\t.\tPUNCT\t_\t_\t4\tpunct\t_\t_\n\n"
    )
    (s,) = read_conllu(p)
    assert s.text == "I don't know." and s.words == ("I", "do", "n't", "know", ".")


def test_row04_the_real_treebanks_agree_with_their_text(ewt_dev, gum_dev):
    assert len(read_conllu(ewt_dev)) == 2001
    assert len(read_conllu(gum_dev)) > 1000


# ---- row 5: CR-only line endings ----------------------------------------------------------
@pytest.mark.parametrize("end", ["\r", "\r\n", "\n"])
def test_row05_text_files_with_any_line_ending_give_their_lines(tmp_path, end):
    p = tmp_path / "t.txt"
    p.write_bytes(end.join(["First line.", "Second line.", "Third line."]).encode() + end.encode())
    assert read_text_file(p) == ["First line.", "Second line.", "Third line."]


def test_row05_a_cr_only_treebank_reads_its_sentences(tmp_path):
    p = tmp_path / "t.conllu"
    p.write_bytes(("# text = The dog barks\n" + ROWS + "\n").replace("\n", "\r").encode() * 2)
    assert [s.words for s in read_conllu(p)] == [("The", "dog", "barks")] * 2


# ---- row 6: whitespace in fields -----------------------------------------------------------
@pytest.mark.parametrize(
    "row, said",
    [
        ("2\tdog\tdog\tNOUN\t_\t_\t3\tnsubj \t_\t_", "whitespace at an end of the DEPREL field 'nsubj '"),
        ("2\tdog\tdog\tNOUN \t_\t_\t3\tnsubj\t_\t_", "whitespace at an end of the UPOS field 'NOUN '"),
        ("2\tdog\tdog\tNO UN\t_\t_\t3\tnsubj\t_\t_", "whitespace in the UPOS field 'NO UN'"),
        ("2\tdog\tdog\tNOUN\t_\t_\t3\tnsubj\t_\tA=b ", "whitespace at an end of the MISC field 'A=b '"),
        ("2\t dog\tdog\tNOUN\t_\t_\t3\tnsubj\t_\t_", "whitespace at an end of the FORM field ' dog'"),
        ("2\tdog\tdog\tNOUN\t_\t_\t 3\tnsubj\t_\t_", "whitespace at an end of the HEAD field ' 3'"),
    ],
)
def test_row06_whitespace_in_a_field_is_refused(tmp_path, row, said):
    rows = ROWS.splitlines()
    rows[1] = row
    p = tmp_path / "t.conllu"
    p.write_text("\n".join(rows) + "\n\n")
    with pytest.raises(InputError, match=r"t.conllu:2: " + said.replace("(", r"\(")):
        read_conllu(p)


def test_row06_a_space_inside_form_and_lemma_is_allowed(tmp_path):
    p = tmp_path / "t.conllu"
    p.write_text(
        "# text = 100 000 dogs\n1\t100 000\t100 000\tNUM\t_\t_\t2\tnummod\t_\t_\n2\tdogs\tdog\tNOUN\t_\t_\t0\troot\t_\t_\n\n"
    )
    (s,) = read_conllu(p)
    assert s.words == ("100 000", "dogs") and s.deprels == ("nummod", "root")


# ---- row 7 and row 11: empty option lists ---------------------------------------------------
@pytest.mark.parametrize("value", [",", " , ", ",,"])
def test_row07_an_empty_head_list_is_refused(value):
    from probe.app.registry.notation import parse_heads

    with pytest.raises(InputError, match="names no head"):
        parse_heads(value, "--heads")


def test_row07_heads_comma_on_the_command_line_is_one_error(tmp_path):
    r, last = _run("faithfulness", "--text", "The cat sat.", "--heads", ",", "--out", tmp_path / "o")
    assert r.exit_code == 2 and "--heads" in last and "',' names no head" in last, r.output
    assert not (tmp_path / "o").exists()


def test_row11_layers_comma_is_refused_and_leaves_no_manifest(tmp_path):
    out = tmp_path / "s"
    r, last = _run("capture", "--text", "The cat sat.", "--layers", ",", "--out", out)
    assert r.exit_code == 2 and "--layers" in last and "names no number" in last, r.output
    assert not out.exists()
    r, _ = _run("capture", "--text", "The cat sat.", "--layers", "0,1", "--out", out)  # the corrected rerun
    assert r.exit_code == 0, r.output
    assert Store(out).manifest["layers"] == [0, 1]


def test_row11_a_refused_capture_into_a_new_directory_leaves_nothing(minilm, tmp_path):
    with pytest.raises(InputError):
        capture_corpus(minilm, Corpus(texts=("The cat sat.",)), tmp_path / "s", layers=[9])
    assert not (tmp_path / "s").exists()


# ---- row 8 and row 9: store verify checks ranges and completeness ---------------------------
@pytest.fixture(scope="module")
def store5(minilm, tmp_path_factory):
    out = tmp_path_factory.mktemp("five") / "s"
    capture_corpus(minilm, Corpus(texts=TEXTS[:5]), out, shard_size=2, layers=[0, 1])
    return out


def _negated(store5, tmp_path):
    """A copy whose example 2 has negative entries, rows still summing to 1."""
    from safetensors.torch import load_file, save_file

    c = tmp_path / "neg"
    shutil.copytree(store5, c)
    rec = [json.loads(x) for x in (c / "index.jsonl").read_text().splitlines()][2]
    tensors = load_file(str(c / rec["shard"]))
    a = tensors[rec["key"]]
    a[..., 0] += 0.5
    a[..., 1] -= 0.5  # rows still sum to 1, two entries leave [0, 1]
    save_file(tensors, str(c / rec["shard"]), metadata={"format": "probe-attention"})
    assert torch.allclose(a.sum(-1), torch.ones(()), atol=1e-5) and a.min() < 0
    return c


def test_row08_store_verify_fails_a_store_with_negative_maps(store5, tmp_path):
    c = _negated(store5, tmp_path)
    check = verify_store(c)
    assert not check.ok and check.n_examples == 4
    assert "example 2" in check.problems[0] and "entries are negative" in check.problems[0]
    r, _ = _run("store", "verify", c)
    assert r.exit_code == 1 and "entries are negative" in r.output


def test_row08_roles_refuses_a_store_with_negative_maps(store5, tmp_path):
    c = _negated(store5, tmp_path)
    r, last = _run("roles", "--store", c, "--out", tmp_path / "o")
    assert r.exit_code == 1 and "example 2" in last and "entries are negative" in last, r.output


def test_row08_rows_off_one_are_refused(store5, tmp_path):
    from probe.store.schema import map_range_problem

    a = torch.full((1, 1, 2, 4), 0.25)
    assert map_range_problem(a, {"dtype": "float32"}) == ""
    a[0, 0, 1] = 0.3
    assert "sums to 1.2, off 1 by 0.2" in map_range_problem(a, {"dtype": "float32"})
    a[0, 0, 1] = 0.2
    assert "off 1 by 0.2" in map_range_problem(a, {"dtype": "float32"})
    assert map_range_problem(a, {"dtype": "float32", "rows": "at most 1"}) == ""  # learned sinks
    a[0, 0, 0, 0] = float("nan")
    assert "NaN or infinite" in map_range_problem(a, {"dtype": "float32"})


def test_row09_store_verify_fails_a_store_with_an_index_line_missing(store5, tmp_path):
    c = tmp_path / "gap"
    shutil.copytree(store5, c)
    lines = (c / "index.jsonl").read_text().splitlines()
    (c / "index.jsonl").write_text("\n".join(lines[:2] + lines[3:]) + "\n")
    check = verify_store(c)
    assert not check.ok and check.n_examples == 4
    assert not check.problems and check.incomplete == (
        "the index lists 4 of the 5 examples its capture was given (manifest: n_input less skipped): "
        "index lines are missing; run the capture again to finish it"
    )
    r, _ = _run("store", "verify", c)
    assert r.exit_code == 1 and "4 of the 5 examples" in r.output
    assert verify_store(store5).ok  # the complete store passes


# ---- row 10: superscript digits -----------------------------------------------------------
@pytest.mark.parametrize("col, value", [(6, "²"), (6, "٣"), (0, "²")])
def test_row10_non_ascii_digits_are_refused_with_and_without_skip_invalid(tmp_path, col, value):
    rows = [r.split("\t") for r in ROWS.splitlines()]
    rows[1][col] = value
    p = tmp_path / "t.conllu"
    p.write_text("\n".join("\t".join(r) for r in rows) + "\n\n" + ROWS + "\n")
    with pytest.raises(InputError, match=r"t.conllu:2: (HEAD of word 2 must be a word number|malformed CoNLL-U ID)"):
        read_conllu(p)
    sentences, invalid = read_treebank(p, skip_invalid=True)
    assert len(sentences) == 1 and len(invalid) == 1 and invalid[0].line == 2


def test_row10_on_the_command_line_with_and_without_skip_invalid(tmp_path):
    rows = ROWS.replace("\t3\tnsubj", "\t²\tnsubj")
    p = tmp_path / "t.conllu"
    p.write_text(rows + "\n" + ROWS + "\n")
    r, last = _run("syntax", "--conllu", p, "--out", tmp_path / "a")
    assert r.exit_code == 1 and "HEAD of word 2 must be a word number, found '²'" in last, r.output
    r, _ = _run("syntax", "--conllu", p, "--skip-invalid", "--out", tmp_path / "b")
    assert r.exit_code == 0 and "skipped 1 invalid CoNLL-U sentence(s)" in r.output, r.output


# ---- row 12: contradictory or repeated options -----------------------------------------------
def test_row12_heatmap_layer_contradicting_the_head_is_refused(store5, tmp_path):
    r, last = _run("heatmap", "--store", store5, "--layer", "1", "--head", "L0H3", "--out", tmp_path / "o")
    assert r.exit_code == 2 and "--layer 1 contradicts --head L0H3 (layer 0)" in r.output, r.output
    r, _ = _run("heatmap", "--store", store5, "--layer", "0", "--head", "L0H3", "--out", tmp_path / "o")
    assert r.exit_code == 0, r.output  # agreeing: fine
    r, _ = _run("heatmap", "--store", store5, "--layer", "1", "--head", "3", "--out", tmp_path / "p")
    assert r.exit_code == 0 and "L1H3_ex0" in r.output, r.output


def test_row12_a_repeated_output_position_is_refused(tmp_path):
    r, last = _run("rollout", "--text", "The cat sat.", "-p", "0", "-p", "0", "--out", tmp_path / "o")
    assert r.exit_code == 1 and "--output-position 0 is given twice" in last, r.output
    from probe.analyses.common.token_scores import output_positions_for

    with pytest.raises(InputError, match="output position -5 names token 0 again"):
        output_positions_for(5, [0, -5])
    with pytest.raises(InputError, match="give one of them"):
        output_positions_for(5, [1], all_positions=True)
    assert output_positions_for(5, [0, -1]) == (0, 4)


def test_row12_a_threshold_given_twice_is_refused():
    from probe.app.registry.analyses.roles import _thresholds

    with pytest.raises(InputError, match=r"positional is given twice \(positional=0.9 and positional=0.1\)"):
        _thresholds(["positional=0.9", "positional=0.1"])
    with pytest.raises(InputError, match="not a finite number"):
        _thresholds(["positional=nan"])
    assert _thresholds(["positional=0.9"]) == {"positional": 0.9}


def test_row12_a_head_group_given_twice_is_refused(tmp_path):
    r, last = _run("ablate", "--text", "The cat sat.", "--group", "L0H1", "--group", "0.1", "--out", tmp_path / "o")
    assert r.exit_code == 1 and "--group L0H1 is given twice" in last, r.output


# ---- row 13: a token spanning two words -------------------------------------------------------
def test_row13_a_token_spanning_two_words_is_assigned_by_the_rule_and_counted(minilm, tmp_path, caplog):
    from probe.inputs.corpus import fit_to_model, load_corpus
    from probe.models.alignment import align_loop, spanning_tokens

    p = tmp_path / "t.conllu"
    p.write_text(
        "# text = I cannot go\n"
        "1\tI\tI\tPRON\t_\t_\t3\tnsubj\t_\t_\n"
        "2\tcan\tcan\tAUX\t_\t_\t3\taux\t_\tSpaceAfter=No\n"
        "3\tnot\tnot\tPART\t_\t_\t0\troot\t_\t_\n"
        "4\tgo\tgo\tVERB\t_\t_\t3\txcomp\t_\t_\n\n"
    )
    corpus = load_corpus(conllu=str(p))
    with caplog.at_level(logging.WARNING):
        fit_to_model(corpus, minilm)
    assert "1 token(s) in 1 of 1 examples span two words written without a space" in caplog.text
    assert (
        "'cannot' over 'can' + 'not'" in caplog.text
        and "the first on ties); a word left without a token of its own shares it" in caplog.text
    )
    enc = minilm.tokenizer(list(corpus.texts), return_offsets_mapping=True)
    offsets, special = enc["offset_mapping"][0], [0, 0, 0, 0, 1]
    special[0] = 1
    assert spanning_tokens(offsets, special, corpus.word_spans[0]) == [2]
    word_ids, _ = align_loop(offsets, special, corpus.word_spans[0])
    assert word_ids[2] == 1  # 'cannot' overlaps 'can' and 'not' by 3 each: the first, 'can'


def test_row13_spaced_text_has_no_spanning_token(minilm, caplog):
    from probe.inputs.corpus import fit_to_model

    corpus = Corpus(texts=("I can not go",), word_spans=(((0, 1), (2, 5), (6, 9), (10, 12)),))
    with caplog.at_level(logging.WARNING):
        fit_to_model(corpus, minilm)
    assert "span two words" not in caplog.text


def test_record_crc_still_guards_edited_lines(store5, tmp_path):
    """The checksum of round three still holds with the new manifest fields."""
    c = tmp_path / "c"
    shutil.copytree(store5, c)
    lines = (c / "index.jsonl").read_text().splitlines()
    rec = json.loads(lines[0])
    rec["text"] = "edited"
    lines[0] = json.dumps(rec)
    (c / "index.jsonl").write_text("\n".join(lines) + "\n")
    assert any("checksum" in p for p in verify_store(c).problems)
    rec["crc"] = record_crc(rec)
    lines[0] = json.dumps(rec)
    (c / "index.jsonl").write_text("\n".join(lines) + "\n")
    assert verify_store(c).ok  # a consistent edit of the text is not the store's to refuse
