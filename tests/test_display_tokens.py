"""Readable tokens in every view, table and figure (app/report/tokens.py) and a font for the
text's script in figures (app/report/fonts.py)."""

from __future__ import annotations

import logging
import warnings

import pytest
import torch

TEXT = "The keys to the cabinet are on the table."


@pytest.fixture(scope="module")
def byte_level_tokenizer():
    """A GPT-2-style byte-level BPE tokenizer trained here on a few lines (no download)."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        [TEXT, "We have a cat on the mat.", "日本語のテキスト"] * 10,
        vocab_size=300,
        min_frequency=1,
        special_tokens=["<|endoftext|>"],
        show_progress=False,
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe._tokenizer, bos_token="<|endoftext|>", eos_token="<|endoftext|>"
    )


def _pieces(tok, text):
    return tok.convert_ids_to_tokens(tok(text)["input_ids"])


def test_byte_level_pieces_are_decoded_with_a_visible_leading_space(byte_level_tokenizer):
    from probe.app.report.tokens import SPACE, display_tokens

    pieces = _pieces(byte_level_tokenizer, TEXT)
    assert any(p.startswith("Ġ") for p in pieces)  # the raw pieces are byte-level
    shown = display_tokens(pieces)
    assert not any("Ġ" in s for s in shown)
    assert f"{SPACE}the" in shown
    assert "".join(shown).replace(SPACE, " ") == TEXT  # nothing lost, nothing added
    ja = display_tokens(_pieces(byte_level_tokenizer, "日本語のテキスト"))
    assert "".join(ja).replace("…", "") == "日本語のテキスト"  # whole characters decoded back


def test_a_character_split_over_pieces_shows_whole_in_its_first_piece():
    from probe.app.report.tokens import display_tokens

    # "日" is e6 97 a5: GPT-2 spells the bytes æ Ĺ ¥; split in two pieces after a space
    assert display_tokens(["Ġæ", "Ĺ¥", "Ġa"]) == ["␣日", "…", "␣a"]


def test_sentencepiece_and_wordpiece():
    from probe.app.report.tokens import display_tokens

    assert display_tokens(["<s>", "▁The", "▁cat", "s", "</s>"]) == ["<s>", "␣The", "␣cat", "s", "</s>"]
    # WordPiece reads well as it is, and Latin-1 letters are not mistaken for bytes
    bert = ["[CLS]", "são", "paulo", "##s", "[SEP]"]
    assert display_tokens(bert) == bert
    assert display_tokens(["[CLS]", "a", "\n", "[SEP]"]) == ["[CLS]", "a", "↵", "[SEP]"]


def test_repeated_words_carry_their_position():
    from probe.app.report.tokens import positioned

    assert positioned(["[CLS]", "The", "keys", "␣the", "cabinet", "the", "."]) == [
        "[CLS]",
        "The(1)",
        "keys",
        "␣the(3)",
        "cabinet",
        "the(5)",
        ".",
    ]


def _byte_level_maps(tok):
    from probe.maps import AttentionMaps

    pieces = tuple(_pieces(tok, TEXT))
    n = len(pieces)
    a = torch.softmax(torch.randn(2, 2, n, n), -1)
    return AttentionMaps(
        attentions=a,
        tokens=pieces,
        word_ids=tuple(range(n)),
        special_mask=torch.zeros(n, dtype=torch.bool),
        words=pieces,
        layers=(0, 1),
        text=TEXT,
    )


def test_head_view_and_line_view_show_readable_tokens(byte_level_tokenizer):
    from probe.app.report.head_view import example_data, line_view_svg

    m = _byte_level_maps(byte_level_tokenizer)
    data = example_data(m, [0, 1], [0, 1])
    assert "␣cabin" in "".join(data["tokens"]) and not any("Ġ" in t for t in data["tokens"])
    assert data["trivial"][-1]  # "." is still punctuation
    svg = line_view_svg(m, 0, 1)
    assert "Ġ" not in svg and "␣the" in svg


def test_rollout_lines_tell_repeated_words_apart(minilm):
    from probe.app.registry.analyses.rollout import _result
    from probe.analyses.flow.rollout import rollout_maps
    from probe.runs.capture import capture

    scores = rollout_maps(capture(minilm, [TEXT])[0])
    line = _result(scores, "rollout").notes[0]
    words = line.split(": ", 1)[1]
    the = [w.split()[0] for w in words.split(", ") if w.startswith("the")]
    assert all("(" in w for w in the), line  # the three "the" carry their positions


def test_figures_warn_once_when_no_font_has_the_script(tmp_path, caplog):
    from probe.app.report import fonts
    from probe.app.report.figures import attention_heatmap
    from probe.maps import AttentionMaps

    toks = ("[CLS]", "日", "本", "語", "の", "本", "[SEP]")
    n = len(toks)
    m = AttentionMaps(
        attentions=torch.softmax(torch.randn(1, 1, n, n), -1),
        tokens=toks,
        word_ids=(None, 0, 1, 2, 3, 4, None),
        special_mask=torch.tensor([1, 0, 0, 0, 0, 0, 1]).bool(),
        words=toks[1:-1],
        layers=(0,),
    )
    fonts._WARNED.clear()
    with caplog.at_level(logging.WARNING, logger="probe.app.report.fonts"), warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("default")
        attention_heatmap(m, 0, 0, tmp_path / "a.png")
        attention_heatmap(m, 0, 0, tmp_path / "b.png")
    family, left = fonts._covering(frozenset(ord(c) for c in "日本語の"))  # what the figures found
    glyphs = [x for x in w if "Glyph" in str(x.message)]
    said = [r for r in caplog.records if "no installed font" in r.getMessage()]
    if left:  # this machine has no font for the script: one line, no glyph flood
        assert len(said) == 1 and not glyphs
    else:  # it has one: it is used, nothing to say
        assert family and not said and not glyphs
        import matplotlib

        assert family in matplotlib.rcParams["font.family"]


# ---- `probe models` answers at once ------------------------------------------------------
def test_models_listing_reads_files_only_and_matches_the_zoo():
    """The catalog lists what the zoo's own code lists, and `probe models` imports neither
    torch nor transformers (the listing is what makes it answer in well under a second)."""
    import subprocess
    import sys

    from probe.models import catalog, zoo

    assert catalog.zoo_rows() == zoo.list_zoo()
    code = (
        "import sys; from click.testing import CliRunner; from probe.app.cli import main; "
        "r = CliRunner().invoke(main, ['models']); assert r.exit_code == 0, r.output; "
        "print('zoo:induction' in r.output, 'torch' in sys.modules, 'transformers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "False", "False"]


def test_loading_shows_no_bar_and_a_missing_model_names_the_hub_command(capfd):
    from probe.models import load_model

    load_model("minilm")
    assert "Loading weights" not in capfd.readouterr().err
    with pytest.raises(ValueError, match=r"hf download no-such-org/no-such-model"):
        load_model("hf:no-such-org/no-such-model")


def test_index_page_shows_the_head_grid_before_the_settings(tmp_path):
    from test_report import _ctx, _evil_maps

    from probe.app.report.build import analyse, write_report

    out = write_report(analyse(_ctx([_evil_maps()]), sections=["roles"], strict=True), tmp_path / "rep")
    html = (out / "index.html").read_text()
    heads, view, settings = (
        html.index("<h2>Heads</h2>"),
        html.index("<h2>Head view</h2>"),
        html.index("Corpus, model and settings"),
    )
    assert heads < view < settings
    assert "<details><summary><b>Corpus, model and settings" in html  # folded
