"""A decoder's report speaks decoder (issue 39 item 6): ``probe report --model hf:<dir>`` on
tiny random Llama (grouped-query), Qwen3, Gemma-3 (sliding window) and GPT-2 checkpoints —
every section runs or is skipped with its reason, the objective is the next-token loss, the
decoder taxonomy is on the grid and the head pages, and no page speaks of syntax when no
treebank was parsed. Also: ``probe roles`` on zoo:induction writes the taxonomy."""

from __future__ import annotations

import json
import re

import pytest
import torch
from click.testing import CliRunner

TEXTS = ["The cat sat on the mat today.", "A dog barked at the moon.", "Birds sing in the tall trees at dawn."]


def _config(kind: str, vocab: int):
    import transformers as T

    common = dict(vocab_size=vocab, pad_token_id=0, bos_token_id=101, eos_token_id=102)
    gqa = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=64)
    return {
        "gpt2": lambda: T.GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=64, **common),
        "llama": lambda: T.LlamaConfig(max_position_embeddings=64, **gqa, **common),
        "qwen3": lambda: T.Qwen3Config(head_dim=8, max_position_embeddings=64, **gqa, **common),
        "gemma3_text": lambda: T.Gemma3TextConfig(
            head_dim=8,
            sliding_window=3,
            layer_types=["sliding_attention", "full_attention"],
            max_position_embeddings=64,
            **gqa,
            **common,
        ),
    }[kind]()


@pytest.mark.slow  # four whole reports of tiny models: ~60-90 s each on 2 shared cores
@pytest.mark.parametrize("kind", ["llama", "qwen3", "gemma3_text", "gpt2"])
def test_decoder_report_runs_every_section_on_next_token_loss_with_the_taxonomy(kind, tmp_path):
    import transformers as T

    from probe.app.cli import main
    from probe.models.registry import minilm_path

    torch.manual_seed(0)
    # its own tokenizer, saved and read back first: under pytest -n 2 the session's shared
    # one had been given a 30,523rd token by an earlier test in the same worker
    T.AutoTokenizer.from_pretrained(str(minilm_path()), local_files_only=True).save_pretrained(tmp_path / "m")
    vocab = len(T.AutoTokenizer.from_pretrained(str(tmp_path / "m"), local_files_only=True))
    T.AutoModelForCausalLM.from_config(_config(kind, vocab)).save_pretrained(tmp_path / "m")
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    out = tmp_path / "r"
    res = CliRunner().invoke(
        main, ["report", "--model", f"hf:{tmp_path / 'm'}", "--file", str(texts), "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "summary.json").read_text())
    sections = {s["name"]: s for s in summary["sections"]}
    assert {"ablation", "importance", "faithfulness", "roles", "decoder-heads", "claims"} <= set(sections)
    for s in sections.values():  # ran, or skipped with its reason; never failed
        assert s["status"] == "ran" or (s["status"] == "skipped" and s.get("reason")), s
    assert sections["syntax"]["status"] == "skipped" and "treebank" in sections["syntax"]["reason"]
    assert sections["decoder-heads"]["status"] == "ran"
    assert any(c.startswith("objective: loss") and "next-token loss" in c for c in summary["settings"]["choices"])
    assert sections["ablation"]["summary"]["metric"] == "loss"
    # the taxonomy: every head scored; a random model's heads are near-uniform, so few or none are named
    heads = {(h["layer"], h["head"]): h for h in summary["heads"]}
    assert len(heads) == 8
    for h in heads.values():
        (tax,) = [e for e in h["evidence"] if e["section"] == "decoder-heads"]
        assert 0 <= tax["numbers"]["induction"] <= 1 and -1 <= tax["numbers"]["copying"] <= 1
        assert tax["numbers"]["successor"] < 0.5 and tax["numbers"]["retrieval"] <= 0.1  # random weights
    index = (out / "index.html").read_text()
    grid = index[index.index('class="grid"') : index.index("<h2>Head view")]
    tags = re.findall(r'<span class="tag">([^<]*)</span>', grid)
    named = [e.get("label", "") for h in heads.values() for e in h["evidence"] if e["section"] == "decoder-heads"]
    assert len(tags) == sum(bool(n) for n in named)  # a cell tag for every head the taxonomy names, no other
    if tags:  # (a random model may name none: near-uniform heads are neither content nor positional heads)
        assert "decoder probes (second line)" in grid
    page = (out / "heads" / "L1H0.html").read_text()
    assert "<h3>Decoder probes</h3>" in page and "Olsson et al. 2022" in page and "Wu et al. 2024" in page
    for f in sorted((out / "heads").glob("*.html")):  # nothing was parsed: no page claims syntax
        # (the structure claim's "not tested: no dependency annotation", in the claims table and its
        # folded evidence, is the one mention)
        shown = re.sub(r"<script.*?</script>|<style.*?</style>", " ", f.read_text(), flags=re.S)
        text = re.sub(r"<[^>]+>", " ", shown)
        assert not re.search(r"syntax|syntactic", text, re.I), (f.name, text[:300])
        said = re.findall(r"not tested ?: no dependency annotation", text, re.I)
        assert text.count("dependen") == len(said) == 2, f.name


def test_probe_roles_on_a_decoder_writes_the_taxonomy(tmp_path):
    from probe.app.cli import main

    out = tmp_path / "roles"
    res = CliRunner().invoke(
        main, ["roles", "--model", "zoo:induction", "--limit", "8", "--no-figure", "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    import pandas as pd

    t = pd.read_csv(out / "decoder_heads.csv").set_index(["layer", "head"])
    layer1 = [(1, 0), (1, 1), (1, 2), (1, 3)]
    assert list(t.index[t["induction_head"]]) == layer1 and list(t.index[t["copying_head"]]) == layer1
    assert list(t.index[t["previous_token_head"]]) == [(0, 3)]
    assert "previous-token: L0H3" in res.output and "retrieval: L1H0, L1H1, L1H2, L1H3" in res.output
