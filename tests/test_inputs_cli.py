"""Inputs and the core CLI: one clear line and a non-zero exit on bad input."""

import json

import pytest
import torch
from click.testing import CliRunner

from conftest import make_maps, previous_token, uniform
from probe.app.cli import main
from probe.inputs.readers import read_conllu
from probe.maps import AttentionMaps

CONLLU = """# sent_id = s1
# text = I don't know.
1\tI\tI\tPRON\t_\t_\t4\tnsubj\t_\t_
2-3\tdon't\t_\t_\t_\t_\t_\t_\t_\t_
2\tdo\tdo\tAUX\t_\t_\t4\taux\t_\t_
3\tn't\tnot\tPART\t_\t_\t4\tadvmod\t_\t_
4\tknow\tknow\tVERB\t_\t_\t0\troot\t_\tSpaceAfter=No
4.1\tknew\t_\t_\t_\t_\t_\t_\t_\t_
5\t.\t.\tPUNCT\t_\t_\t4\tpunct\t_\t_

# sent_id = s2
1\tHello\thello\tINTJ\t_\t_\t0\troot\t_\tSpaceAfter=No
2\t!\t!\tPUNCT\t_\t_\t1\tpunct\t_\t_

"""


def invoke(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def one_line_error(result, *needles):
    assert result.exit_code != 0
    lines = [l for l in result.output.strip().splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error:"), result.output
    for n in needles:
        assert n in lines[0]


def test_read_conllu_multiword_empty_nodes_and_missing_text(tmp_path):
    p = tmp_path / "t.conllu"
    p.write_text(CONLLU)
    s1, s2 = read_conllu(p)
    assert s1.words == ("I", "do", "n't", "know", ".")
    assert [s1.text[a:b] for a, b in s1.spans] == ["I", "do", "n't", "know", "."]
    assert s1.heads == (4, 4, 4, 0, 4) and s1.deprels[2] == "advmod"
    assert s2.text == "Hello!"  # rebuilt from FORM and SpaceAfter=No
    assert s2.spans == ((0, 5), (5, 6))
    assert s1.line == 1 and s2.line == 11


def test_malformed_conllu_names_file_and_line(tmp_path):
    p = tmp_path / "bad.conllu"
    p.write_text(CONLLU.replace("3\tn't\tnot\tPART\t_\t_\t4\tadvmod\t_\t_", "3\tn't\tnot PART"))
    with pytest.raises(ValueError, match=r"bad\.conllu:6: malformed"):
        read_conllu(p)
    r = invoke("capture", "--conllu", str(p), "--out", str(tmp_path / "o"))
    one_line_error(r, "bad.conllu:6")
    assert not (tmp_path / "o").exists()


def test_cli_errors_are_one_line(tmp_path):
    one_line_error(invoke("capture", "--text", "  ", "--out", str(tmp_path / "a")), "empty input")
    one_line_error(
        invoke("capture", "--model", "nope", "--text", "hi", "--out", str(tmp_path / "a")), "unknown model", "minilm"
    )
    one_line_error(invoke("capture", "--text", " ".join(["w"] * 700), "--out", str(tmp_path / "a")), "512")
    latin = tmp_path / "latin1.txt"
    latin.write_bytes("caf\xe9 cr\xe8me\n".encode("latin-1"))
    one_line_error(invoke("capture", "--file", str(latin), "--out", str(tmp_path / "a")), "not UTF-8")
    one_line_error(
        invoke("capture", "--file", str(tmp_path / "missing.txt"), "--out", str(tmp_path / "a")), "cannot read"
    )
    one_line_error(invoke("capture", "--model", "hf:/no/such/dir", "--text", "x", "--out", str(tmp_path / "a")))
    one_line_error(
        invoke("capture", "--model", "hf:someone/not-cached-model", "--text", "x", "--out", str(tmp_path / "a")),
        "never downloads",
    )


def test_capture_and_heatmap_cli(tmp_path):
    r = invoke(
        "capture", "--text", "The cat sat.", "--text", "Dogs bark.", "--layers", "0,5", "--out", str(tmp_path / "s")
    )
    assert r.exit_code == 0 and "2 examples" in r.output
    r = invoke(
        "heatmap", "--store", str(tmp_path / "s"), "--example", "1", "--head", "L5H3", "--out", str(tmp_path / "h")
    )
    assert r.exit_code == 0 and (tmp_path / "h" / "L5H3_ex1.png").stat().st_size > 1000
    rows = (tmp_path / "h" / "L5H3_ex1.csv").read_text().splitlines()
    assert len(rows) == 1 + 5  # header + [CLS] dogs bark . [SEP]
    one_line_error(
        invoke("heatmap", "--store", str(tmp_path / "s"), "--layer", "2", "--head", "0", "--out", str(tmp_path / "x")),
        "not captured",
    )
    one_line_error(
        invoke("heatmap", "--store", str(tmp_path / "s"), "--layer", "5", "--head", "12", "--out", str(tmp_path / "x")),
        "0..11",
    )
    one_line_error(
        invoke(
            "heatmap",
            "--store",
            str(tmp_path / "s"),
            "--example",
            "9",
            "--layer",
            "5",
            "--head",
            "0",
            "--out",
            str(tmp_path / "x"),
        ),
        "out of range",
    )
    assert not (tmp_path / "x").exists()  # nothing half-written


def test_models_json_lists_minilm():
    r = invoke("models", "--json")
    rows = json.loads(r.output)
    mini = [x for x in rows if x["name"] == "minilm"][0]
    assert (mini["layers"], mini["heads"]) == (6, 12)


# ---- the core type ----------------------------------------------------------------
def test_maps_validation_messages():
    with pytest.raises(ValueError, match="4-D"):
        AttentionMaps(attentions=torch.ones(2, 2), tokens=["a", "b"], word_ids=[0, 1], special_mask=[0, 0])
    with pytest.raises(ValueError, match="sum to 1"):
        make_maps(torch.ones(1, 1, 3, 3))
    with pytest.raises(ValueError, match="square"):
        AttentionMaps(
            attentions=torch.full((1, 1, 2, 3), 1 / 3),
            tokens=["a", "b", "c"],
            word_ids=[0, 1, 2],
            special_mask=[0, 0, 0],
        )
    with pytest.raises(ValueError, match="tokens"):
        make_maps(uniform(3), tokens=["a", "b"])


def test_word_level_follows_clark_et_al():
    # tokens: [CLS] un ##able to [SEP]; words: unable(0,1 tokens 1-2) to(2)
    a = torch.tensor(
        [
            [1.0, 0, 0, 0, 0],
            [0.1, 0.2, 0.3, 0.4, 0.0],
            [0.0, 0.5, 0.1, 0.2, 0.2],
            [0.0, 0.3, 0.3, 0.4, 0.0],
            [0.0, 0.0, 0.0, 0.0, 1.0],
        ]
    )[None, None]
    m = AttentionMaps(
        attentions=a,
        tokens=["[CLS]", "un", "##able", "to", "[SEP]"],
        word_ids=[None, 0, 0, 1, None],
        special_mask=[1, 0, 0, 0, 1],
        words=["unable", "to"],
    )
    w = m.word_level()
    assert w.units == ("[CLS]", "unable", "to", "[SEP]")
    got = w.attentions[0, 0]
    # from "unable" = mean of rows 1, 2; to "unable" = sum of columns 1, 2
    assert torch.allclose(got[1], torch.tensor([0.05, (0.5 + 0.6) / 2, 0.3, 0.1]))
    assert torch.allclose(got[2], torch.tensor([0.0, 0.6, 0.4, 0.0]))
    assert torch.allclose(got.sum(-1), torch.ones(4))
    assert w.words_only().shape == (1, 1, 2, 2)


def test_previous_token_map_word_level_is_previous_word():
    m = make_maps(previous_token(5))
    w = m.word_level().attentions[0, 0]
    assert torch.equal(w.argmax(-1)[1:], torch.arange(4))
