"""The report at scale (issue 31): memory sized from the input length, task-head
checkpoints, the report's own options."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, bert_tokenizer):
    """Tiny random task-head checkpoints saved to folders: kind -> path."""
    import transformers as T

    V = len(bert_tokenizer)
    bert = T.BertConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, pad_token_id=0)
    gpt2 = T.GPT2Config(vocab_size=V, n_embd=32, n_layer=2, n_head=4, bos_token_id=101, eos_token_id=102,
                        pad_token_id=0)
    out = {}
    for kind, build in [("mlm", lambda: T.BertForMaskedLM(bert)), ("gpt2", lambda: T.GPT2LMHeadModel(gpt2)),
                        ("seqcls", lambda: T.BertForSequenceClassification(bert)),
                        ("tokcls", lambda: T.BertForTokenClassification(bert))]:
        torch.manual_seed(0)
        d = tmp_path_factory.mktemp(kind)
        build().save_pretrained(d, safe_serialization=True)
        bert_tokenizer.save_pretrained(d)
        out[kind] = d
    return out


def test_length_groups_cover_corpus_and_shrink_for_long_inputs(tiny_models):
    from probe.budget import length_groups, memory_budget, row_bytes, workspace

    a = tiny_models["bert"]
    lengths = [10, 500, 12, 300, 11, 9, 480]
    with memory_budget(int(8 * row_bytes(a, 500) * 3)):  # workspace: 3 rows of 500 tokens
        groups = length_groups(lengths, a, cap=16)
        assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
        for g in groups:
            assert len(g) * row_bytes(a, max(lengths[i] for i in g)) <= workspace()
        assert groups[0] == [1, 6, 3]  # the longest first, three per forward
        assert len(groups) == 2 and sorted(groups[1]) == [0, 2, 4, 5]


def test_budget_refused_with_smallest_that_works(tiny_models):
    from probe.budget import check_budget, smallest_budget

    a = tiny_models["bert"]
    need = smallest_budget(a, 400)
    check_budget(a, 400, need)  # exactly enough: accepted
    with pytest.raises(ValueError, match="smallest budget that works is"):
        check_budget(a, 400, need - 1)


def test_parse_size():
    from probe.budget import parse_size

    assert parse_size("4G") == 4 << 30 and parse_size("1500M") == 1500 << 20 and parse_size("2.5GiB") == int(2.5 * (1 << 30))
    for bad in ("0", "-1G", "4X", ""):
        with pytest.raises(ValueError):
            parse_size(bad)


def test_importance_in_budget_sized_chunks_equals_one_batch(checkpoints):
    """Chunks sized from the input length (one row per forward under a tiny budget) give
    the same importance as one padded batch: the grouping changes memory, not values."""
    from probe.analyses.common.metrics import get_metric, prepare
    from probe.analyses.necessity.importance import gradient_importance, ig_importance
    from probe.budget import memory_budget, row_bytes
    from probe.inputs import Corpus
    from probe.models import load_model

    a = load_model(f"hf:{checkpoints['mlm']}")
    corpus = Corpus(texts=("a short one .", "The cat sat on the mat because it was warm and the sun was out .",
                           "Dogs bark .", "Colourless green ideas sleep furiously tonight in the garden ."),
                    source="texts")
    m = get_metric("loss", a, corpus)
    whole = gradient_importance(a, corpus, m, chunks=prepare(a, corpus, m, batch_size=16))
    with memory_budget(8 * row_bytes(a, 20)):  # one row per forward
        sized = gradient_importance(a, corpus, m, batch_size=16)
        ig_sized = ig_importance(a, corpus, m, n_steps=4, batch_size=16)
    ig_whole = ig_importance(a, corpus, m, n_steps=4, chunks=prepare(a, corpus, m, batch_size=16))
    assert whole.raw.max() > 0
    assert abs(whole.raw - sized.raw).max() < 1e-5 * max(1.0, abs(whole.raw).max())
    assert abs(ig_whole.raw - ig_sized.raw).max() < 1e-5 * max(1.0, abs(ig_whole.raw).max())


def test_report_refuses_too_small_budget_before_capture(checkpoints, tmp_path):
    from probe.app.cli import main

    res = CliRunner().invoke(main, ["report", "--model", f"hf:{checkpoints['mlm']}", "--text", "a b c d e",
                                    "--memory-budget", "1K", "--out", str(tmp_path / "r")])
    assert res.exit_code != 0
    assert "smallest budget that works is" in res.output and "Traceback" not in res.output
    assert not (tmp_path / "r").exists()
