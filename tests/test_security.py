"""One test per promise of docs/security.md: what is read, what is run (nothing foreign),
what is written and where, how HTML escapes untrusted text."""

import json
import pickle
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from probe.app.cli import main as cli
from probe.app.registry.outdir import OutDir, check_out
from probe.errors import InputError

ROOT = Path(__file__).resolve().parents[1]


class _Evil:
    """Unpickling this creates a file: proof that something was unpickled."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (Path(self.marker), "unpickled"))


# ---- reads ------------------------------------------------------------------------------
def test_reads_weights_only_from_safetensors_never_a_pickle(tmp_path, bert_tokenizer):
    """A model folder with a pickle instead of safetensors is refused; the pickle never runs."""
    import transformers as T

    marker = tmp_path / "UNPICKLED"
    cfg = T.BertConfig(
        hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32, vocab_size=len(bert_tokenizer)
    )
    cfg.architectures = ["BertModel"]
    cfg.save_pretrained(tmp_path)
    bert_tokenizer.save_pretrained(tmp_path)
    (tmp_path / "pytorch_model.bin").write_bytes(pickle.dumps(_Evil(str(marker))))
    from probe.models import load_model

    with pytest.raises(ValueError, match="safetensors"):
        load_model(f"hf:{tmp_path}")
    assert not marker.exists()


def test_reads_a_model_folder_not_a_file(tmp_path):
    from probe.models import load_model

    (tmp_path / "config.json").write_text('{"model_type": "bert"}')
    with pytest.raises(ValueError, match="hf: names a model folder"):
        load_model(f"hf:{tmp_path / 'config.json'}")


def test_no_source_file_calls_an_unpickler_or_trusts_remote_code():
    """A textual audit of the shipped code: no torch.load / pickle.load(s) on input, and
    trust_remote_code is only ever passed as False."""
    offenders = []
    for path in [
        *ROOT.glob("probe/**/*.py"),
        *ROOT.glob("models/**/*.py"),
        *ROOT.glob("analyses/**/*.py"),
        *ROOT.glob("app/**/*.py"),
    ]:
        if ".venv" in path.parts:
            continue
        text = path.read_text(encoding="utf-8")
        for pattern in (r"torch\.load\(", r"(?<!`)trust_remote_code\s*=\s*True", r"weights_only\s*=\s*False"):
            if re.search(pattern, text):
                offenders.append(f"{path.relative_to(ROOT)}: {pattern}")
        if re.search(r"pickle\.loads?\(", text) and "ray_engine" not in path.name:
            offenders.append(f"{path.relative_to(ROOT)}: pickle.load")  # ray: own objects between own processes
    assert not offenders, offenders


def test_reads_store_lines_that_own_their_tensor_only(tmp_path):
    from probe.store.schema import check_record

    rec = {
        "id": 3,
        "shard": "shard-00000.safetensors",
        "key": "ex0",
        "tokens": ["a"],
        "word_ids": [0],
        "special": [0],
        "words": ["a"],
    }
    with pytest.raises(ValueError, match="names the tensor 'ex0', not its own 'ex3'"):
        check_record(rec)


# ---- executes -------------------------------------------------------------------------------
def test_executes_no_code_shipped_with_a_model(tmp_path):
    from probe.models import load_model

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", "auto_map": {"AutoModel": "evil.E"}}))
    (tmp_path / "evil.py").write_text(f"open({str(tmp_path / 'RAN')!r}, 'w').write('ran')\n")
    with pytest.raises(ValueError, match="never runs code shipped with a model"):
        load_model(f"hf:{tmp_path}")
    assert not (tmp_path / "RAN").exists()


# ---- writes ---------------------------------------------------------------------------------
def test_writes_only_under_out_and_never_half_overwrites(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("kept")
    with pytest.raises(RuntimeError):
        with OutDir(out, force=True) as tmp:
            (tmp / "new.txt").write_text("partial")
            raise RuntimeError("the analysis failed half-way")
    assert [p.name for p in out.iterdir()] == ["old.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temporary directory left


def test_writes_through_a_symlink_into_its_target(tmp_path):
    real, link = tmp_path / "real", tmp_path / "link"
    real.mkdir()
    link.symlink_to(real)
    assert check_out(link) == real.resolve()
    with OutDir(link) as tmp:
        (tmp / "r.csv").write_text("x")
    assert link.is_symlink() and (real / "r.csv").read_text() == "x"


def test_writes_nowhere_unwritable_and_says_so_before_compute(tmp_path, monkeypatch):
    import os

    monkeypatch.setattr(os, "access", lambda *a, **k: True)  # as root: permission bits say yes
    with pytest.raises(InputError, match="cannot write --out /proc/x: creating a file in /proc failed"):
        check_out("/proc/x")


# ---- HTML -------------------------------------------------------------------------------------
def test_html_escapes_untrusted_text():
    from probe.app.report.html import esc, script_json

    evil = '</script><img src=x onerror="alert(1)">\u2028&'
    assert "<" not in esc(evil) and '"' not in esc(evil)
    js = script_json({"token": evil})
    assert "</script>" not in js and "<" not in js and "\u2028" not in js
    assert json.loads(js) == {"token": evil}


def test_report_pages_escape_a_hostile_sentence(tmp_path):
    r = CliRunner().invoke(
        cli,
        [
            "report",
            "--text",
            "<script>alert(1)</script> owns you",
            "--sections",
            "roles",
            "--out",
            str(tmp_path / "rep"),
        ],
    )
    assert r.exit_code == 0, r.output
    pages = [p.read_text(encoding="utf-8") for p in (tmp_path / "rep").rglob("*.html")]
    assert pages and not any("<script>alert(1)" in page for page in pages)
