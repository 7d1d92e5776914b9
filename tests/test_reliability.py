"""One test per defect of issue 19: no foreign code, no silent wrong result, clean
refusals instead of tracebacks, hangs or misleading messages (stores: test_store.py)."""

import importlib
import json
import subprocess
import sys
import time

import pytest
import torch
from click.testing import CliRunner

from probe.app.cli import main
from probe.inputs.readers import read_conllu, read_treebank, skipping_invalid

LONG = " ".join(["word"] * 700)  # beyond minilm's 512 tokens


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def one_line_error(result, *needles):
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error:"), result.output
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


# ---- no foreign code -----------------------------------------------------------
def _custom_code_dir(tmp_path, bert_tokenizer, model_type: str):
    """A local model directory whose config asks for a Python file that writes a marker."""
    import transformers as T

    d = tmp_path / "evil"
    cfg = T.BertConfig(
        hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16, vocab_size=len(bert_tokenizer)
    )
    T.BertModel(cfg).save_pretrained(d, safe_serialization=True)
    bert_tokenizer.save_pretrained(d)
    marker = tmp_path / "MARKER"
    (d / "evil.py").write_text(
        f"open({str(marker)!r}, 'w').write('ran')\n"
        "from transformers import BertConfig as EvilConfig, BertModel as EvilModel\n"
    )
    data = json.loads((d / "config.json").read_text())
    data.update(
        model_type=model_type,
        architectures=["EvilModel"],
        auto_map={"AutoConfig": "evil.EvilConfig", "AutoModel": "evil.EvilModel"},
    )
    (d / "config.json").write_text(json.dumps(data))
    return d, marker


def test_auto_map_directory_is_refused_and_never_runs(tmp_path, bert_tokenizer):
    d, marker = _custom_code_dir(tmp_path, bert_tokenizer, "bert")
    proc = subprocess.run(
        [sys.executable, "-m", "probe", "capture", "--model", f"hf:{d}", "--text", "hi", "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 1 and "needs custom Python code" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and "[y/N]" not in proc.stdout + proc.stderr
    assert not marker.exists()


def test_transformers_itself_is_told_never_to_trust_remote_code(tmp_path, bert_tokenizer, monkeypatch):
    """Without the toolkit's own check, transformers still refuses (trust_remote_code=False)."""
    from probe.models import registry

    d, marker = _custom_code_dir(tmp_path, bert_tokenizer, "evil-model")
    monkeypatch.setattr(registry, "refuse_custom_code", lambda directory: None)
    monkeypatch.setattr(sys, "stdin", None)
    with pytest.raises(ValueError):
        registry.load_hf(str(d))
    assert not marker.exists()


# ---- CoNLL-U validated as UD requires --------------------------------------------
GOOD = [
    "1\tThe\tthe\tDET\t_\t_\t2\tdet\t_\t_",
    "2\tdog\tdog\tNOUN\t_\t_\t3\tnsubj\t_\t_",
    "3\tbarks\tbark\tVERB\t_\t_\t0\troot\t_\t_",
]


def _treebank(tmp_path, *sentences):
    blocks = []
    for k, rows in enumerate(sentences):
        blocks.append("\n".join([f"# sent_id = s{k}", "# text = The dog barks"] + rows))
    path = tmp_path / "t.conllu"
    path.write_text("\n\n".join(blocks) + "\n\n")
    return path


def _with(col, row, value):
    rows = [r.split("\t") for r in GOOD]
    rows[row][col] = value
    return ["\t".join(r) for r in rows]


@pytest.mark.parametrize(
    "rows, line, problem",
    [
        (_with(6, 0, "99"), 9, "HEAD 99 of word 1 is out of range"),
        (_with(6, 2, "1"), 7, "exactly one root"),  # 1->2->3->1: a cycle and no root
        (_with(6, 1, "2"), 10, "word 2 is its own head"),
        (_with(0, 1, "1"), 10, "word ID 1 is duplicate"),
        (_with(0, 2, "5"), 11, "word ID 5 is out of order"),
        (_with(6, 1, "0"), 11, "exactly one root"),  # two roots: the second is named
        (["1-2\tdon't\t_\t_\t_\t_\t_\t_\t_\t_"] + GOOD[:1], 10, "multiword range ends at word 2"),
    ],
)
def test_invalid_sentences_are_refused_with_file_and_line(tmp_path, rows, line, problem):
    path = _treebank(tmp_path, GOOD, rows)  # the bad sentence: comments at lines 7-8, words from line 9
    with pytest.raises(ValueError, match=rf"t\.conllu:{line}: .*{problem}.*--skip-invalid"):
        read_conllu(path)
    sentences, invalid = read_treebank(path, skip_invalid=True)
    assert len(sentences) == 1 and len(invalid) == 1 and invalid[0].line == line
    assert sentences[0].heads == (2, 3, 0)


def test_cycle_with_root_is_refused(tmp_path):
    rows = GOOD + ["4\t.\t.\tPUNCT\t_\t_\t5\tpunct\t_\t_", "5\t!\t!\tPUNCT\t_\t_\t4\tpunct\t_\t_"]
    with pytest.raises(ValueError, match="word 4 is in a cycle"):
        read_conllu(_treebank(tmp_path, rows))


def test_syntax_cli_refuses_then_skips_and_lists_in_skipped_csv(tmp_path):
    path = _treebank(tmp_path, GOOD, _with(6, 0, "99"), *[GOOD] * 10)
    one_line_error(invoke("syntax", "--conllu", path, "--out", tmp_path / "a"), "t.conllu:9", "--skip-invalid")
    assert not (tmp_path / "a" / "relations.csv").exists()
    res = invoke("syntax", "--conllu", path, "--out", tmp_path / "b", "--skip-invalid")
    assert res.exit_code == 0, res.output
    assert "skipped 1 invalid CoNLL-U sentence" in res.output
    import pandas as pd

    skipped = pd.read_csv(tmp_path / "b" / "skipped.csv")
    assert list(skipped.line) == [9] and list(skipped.sent_id) == ["s1"]
    assert json.loads((tmp_path / "b" / "summary.json").read_text())["n_input"] == 11


def test_load_corpus_counts_invalid_sentences(tmp_path):
    from probe.inputs.corpus import load_corpus

    path = _treebank(tmp_path, GOOD, _with(6, 1, "2"), GOOD)
    with skipping_invalid() as invalid:
        corpus = load_corpus(conllu=str(path))
    assert len(corpus) == 2 and corpus.skipped == {"invalid CoNLL-U": 1} and len(invalid) == 1


def test_ewt_reads_unchanged(ewt_dev):
    sentences, invalid = read_treebank(ewt_dev)
    assert len(sentences) == 2001 and invalid == []


# ---- preconditions -------------------------------------------------------------
def test_paper_figures_refuses_a_vocabulary_without_the_words(tmp_path):
    one_line_error(
        invoke("paper-figures", "--model", "zoo:agreement", "--out", tmp_path), "vocabulary lacks", "'Law'", "[UNK]"
    )


def test_complexity_refuses_sizes_that_give_no_fit(tmp_path):
    one_line_error(invoke("complexity", "--n", "16", "--d", "16", "--out", tmp_path), "two different sizes")
    assert not (tmp_path / "summary.md").exists()


def test_bogus_device_is_a_clean_error(tmp_path):
    one_line_error(
        invoke("capture", "--text", "hi", "--device", "bogus", "--out", tmp_path / "o"), "unknown device 'bogus'"
    )
    one_line_error(invoke("capture", "--text", "hi", "--device", "cuda:99", "--out", tmp_path / "o"), "cuda:99")


@pytest.mark.parametrize(
    "args",
    [
        ("evaluate", "--model", "zoo:induction", "--limit", "100000000"),
        ("alignment", "--limit", "100000000", "--out", "{tmp}"),
        ("flow-correlation", "--model", "zoo:agreement", "--limit", "100000000", "--out", "{tmp}"),
    ],
)
def test_huge_counts_are_refused_at_once(tmp_path, args):
    start = time.perf_counter()
    one_line_error(invoke(*[a.format(tmp=tmp_path) for a in args]), "at most 10000")
    assert time.perf_counter() - start < 60


@pytest.mark.parametrize("command", ["ablate", "prune", "roles"])
def test_over_long_text_names_the_limit(tmp_path, command):
    line = one_line_error(invoke(command, "--text", LONG, "--out", tmp_path / "o"), "512 tokens")
    assert "empty corpus" not in line and "no examples" not in line


def test_patch_drops_the_whole_pair_of_an_over_long_line(minilm, tmp_path):
    from probe.inputs.corpus import Corpus, fit_pairs

    clean = Corpus(texts=("The cat sat.", LONG, "A dog ran."))
    bad = Corpus(texts=("The dog sat.", "short", "A cat ran."))
    c, b = fit_pairs(clean, bad, minilm)
    assert c.texts == ("The cat sat.", "A dog ran.") and b.texts == ("The dog sat.", "A cat ran.")
    assert c.skipped == b.skipped == {"pair with a text longer than 512 tokens": 1}
    one_line_error(invoke("patch", "--text", LONG, "--corrupted", "short", "--out", tmp_path / "o"), "512 tokens")


@pytest.mark.parametrize("command", ["rollout", "flow", "faithfulness"])
def test_commands_without_truncate_do_not_advise_it(tmp_path, command):
    extra = ["--objective", "logit"] if command == "faithfulness" else []
    res = invoke(command, "--text", LONG, "--out", tmp_path / "o", *extra)
    assert res.exit_code == 1 and "--truncate" not in res.output, res.output


def test_heatmap_keeps_a_foreign_file_and_creates_the_parent(minilm, tmp_path):
    """heatmap's --out is a directory: a non-empty one is refused untouched (no silent
    overwrite of a CSV already there), and missing parents are created."""
    from probe.inputs.corpus import Corpus
    from probe.runs.pipeline import capture_corpus

    capture_corpus(minilm, Corpus(texts=("The cat sat.",)), tmp_path / "s")
    (tmp_path / "fig").mkdir()
    (tmp_path / "fig" / "L0H0_ex0.csv").write_text("precious\n")
    one_line_error(
        invoke("heatmap", "--store", tmp_path / "s", "--head", "L0H0", "--out", tmp_path / "fig"), "not empty"
    )
    assert (tmp_path / "fig" / "L0H0_ex0.csv").read_text() == "precious\n"
    res = invoke("heatmap", "--store", tmp_path / "s", "--head", "L0H0", "--out", tmp_path / "new" / "dir")
    assert res.exit_code == 0 and (tmp_path / "new" / "dir" / "L0H0_ex0.csv").exists(), res.output


# ---- bounded memory ------------------------------------------------------------
def test_sort_window_and_batches_are_bounded_in_bytes(minilm, monkeypatch):
    """Long texts: the window closes (and each batch is cut) at ``window_bytes`` of maps,
    not at batch_size × sort_window examples; results are unchanged."""
    cap = importlib.import_module("probe.runs.capture")

    texts = [" ".join(["word"] * n) for n in (200, 5, 300, 8, 250, 6, 220, 7)]
    cell = minilm.n_layers * minilm.n_heads * 4
    bound = cell * 2 * 300**2  # about two of the longest maps
    batches, real, produced = [], cap._capture_batch, [0]

    def spy(adapter, encs, *a, **k):
        batches.append([len(e) for e in encs])
        produced[0] += len(encs)
        return real(adapter, encs, *a, **k)

    monkeypatch.setattr(cap, "_capture_batch", spy)
    held, done = [], 0
    out = []
    for m in cap.iter_capture(minilm, iter(texts), batch_size=8, sort_window=8, window_bytes=bound):
        held.append(produced[0] - done)  # maps captured and not yet handed over (this one included)
        done += 1
        out.append(m)
    for b in batches:
        assert len(b) == 1 or len(b) * max(b) ** 2 * cell <= bound, batches
    assert max(held) < len(texts)  # the window closed before holding every example's maps
    window_lens = [len(minilm.tokenizer(t)["input_ids"]) for t in texts]
    assert max(held) <= 1 + bound // (cell * min(window_lens) ** 2)
    ref = cap.capture(minilm, texts, batch_size=1)
    assert all(torch.allclose(a.attentions, b.attentions, atol=1e-5) for a, b in zip(out, ref))
