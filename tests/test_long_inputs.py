"""Long inputs and decoder models: partial capture, memory warning, sparse views, causality."""

from __future__ import annotations

import pytest
import torch

from conftest import make_maps, previous_token
from probe.runs.capture import AttentionCapture, capture
from probe.inputs.long_inputs import attention_window, capture_bytes, top_k_edges

TEXT = "The cat sat on the mat, and the cat sat on the mat again."


def test_partial_capture_is_the_slice_of_the_full_one(tiny_models):
    adapter = tiny_models["llama"]
    batch = adapter.batch([adapter.encode(TEXT)])
    with AttentionCapture(adapter) as full, torch.no_grad():
        adapter.model(**batch)
    rows = [0, 5, 9]
    with (
        AttentionCapture(adapter, layers=[1], heads=[3, 1], query_rows=rows, store_dtype=torch.float16) as part,
        torch.no_grad(),
    ):
        adapter.model(**batch)
    got = part.layer_tensors()[1]
    assert got.dtype == torch.float16 and got.shape[1:3] == (2, 3)
    want = full.layer_tensors()[1][:, [3, 1]][:, :, rows]
    assert torch.allclose(got.float(), want, atol=1e-3)
    maps = capture(adapter, [TEXT], layers=[0], heads=[2], dtype=torch.float16)[0]
    assert maps.attentions.shape[:2] == (1, 1) and maps.meta["heads"] == [2]
    with pytest.raises(ValueError, match="head"):
        AttentionCapture(adapter, heads=[7])


def test_estimate_scales_with_what_is_kept():
    one = capture_bytes(1, 2048, 2048, layers=1, heads=4, model_heads=4)
    all_ = capture_bytes(1, 2048, 2048, layers=24, heads=4, model_heads=4)
    half = capture_bytes(1, 2048, 2048, layers=24, heads=4, model_heads=4, store_bytes=2)
    assert one < half < all_
    # 24 layers × 4 heads × 2048² cells × (4 + 4) bytes, plus one layer's eager temporaries
    assert all_ == 24 * 4 * 2048**2 * 8 + 4 * 2048**2 * 4 * 3


def test_warns_before_a_capture_that_would_not_fit(tiny_models, monkeypatch):
    import probe.inputs.long_inputs as li

    adapter = tiny_models["llama"]
    monkeypatch.setattr(li, "available_memory_bytes", lambda device: 1000)
    with pytest.warns(ResourceWarning, match=r"GiB.*fewer layers"):
        capture(adapter, [TEXT])
    monkeypatch.setattr(li, "available_memory_bytes", lambda device: 10**12)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        capture(adapter, [TEXT])


def test_available_memory_is_read():
    from probe.inputs.long_inputs import available_memory_bytes

    free = available_memory_bytes("cpu")
    assert free is None or free > 0


def test_top_k_edges_and_window_on_a_known_map():
    maps = make_maps(previous_token(6, layers=1, heads=2))
    t = top_k_edges(maps, k=3)
    assert list(t.columns) == ["layer", "head", "query", "key", "weight", "query_token", "key_token"]
    assert len(t) == 6 and (t["weight"] == 1).all()
    assert ((t["query"] - t["key"] == 1) | (t["query"] == 0)).all()  # i -> i-1 (0 -> 0)
    w = attention_window(maps, 2, 5, layer=0, head=1)
    assert w["tokens"] == ("t2", "t3", "t4")
    assert w["mass"].tolist() == [0.0, 1.0, 1.0]  # row 2 attends to token 1, outside the window
    with pytest.raises(ValueError, match="window"):
        attention_window(maps, 4, 9, layer=0, head=0)


def test_decoder_maps_are_causal_and_flow_respects_it(tiny_models):
    """A tiny random Llama: causal maps; rollout and flow send nothing from future tokens."""
    from probe.analyses.flow.attention_flow import attention_flow
    from probe.analyses.flow.rollout import rollout

    adapter = tiny_models["llama"]
    maps = capture(adapter, [TEXT])[0]
    assert maps.kind == "causal"  # (which path captured it follows the installed transformers; not asserted)
    n = maps.n_tokens
    future = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
    assert maps.attentions[..., future].abs().max() == 0
    roll = rollout(maps.attentions, causal=True)
    assert roll[future].abs().max() == 0 and roll[~future].abs().max() > 0
    flow = attention_flow(maps.attentions, causal=True, output_positions=[5])  # flow into token 5
    assert flow.shape == (1, n)
    assert flow[0, 6:].abs().max() == 0 and flow[0, :6].min() > 0  # only from tokens 0..5


def test_faithfulness_target_of_a_causal_lm_is_next_token_loss(tiny_models):
    from probe.analyses.common.targets import LMLoss
    from probe.analyses.common.objective import parse_target
    from probe.app.registry import open_run
    from probe.app.registry.analyses.faithfulness import default_target as faithfulness_target
    from probe.inputs.corpus import Corpus

    ctx = open_run(tiny_models["llama"], Corpus(texts=("a b c",), source="texts"))
    spec = faithfulness_target(ctx)
    assert spec == "loss:-1"
    assert isinstance(parse_target(spec, tiny_models["llama"]), LMLoss)


def test_report_on_a_tiny_random_llama_end_to_end(bert_tokenizer, tmp_path):
    """A causal LM (random tiny LlamaForCausalLM) through the report: roles, rollout into
    the last token, faithfulness of the next-token loss."""
    import transformers as T

    from conftest import _tiny_configs
    from probe.app.report.build import build_report
    from probe.models import ModelAdapter

    torch.manual_seed(0)
    lm = T.AutoModelForCausalLM.from_config(_tiny_configs(len(bert_tokenizer))["llama"])
    adapter = ModelAdapter(name="tiny-llama-lm", model=lm, tokenizer=bert_tokenizer, family="llama")
    texts = [
        "the cat sat on the mat and the cat sat on the mat",
        "one two three four one two three four",
        "a b c d e f a b c d e f",
    ]
    data = build_report(
        tmp_path / "r", adapter=adapter, text=texts, sections=["roles", "rollout", "faithfulness"], strict=True
    )
    assert data.statuses == {"roles": "ran", "rollout": "ran", "faithfulness": "ran"}
    assert all(m.kind == "causal" for m in data.ctx.maps)
    assert "last token" in data.ctx.report.results["rollout"].notes[0]
    assert "target loss:-1" in data.ctx.report.results["faithfulness"].notes[0]


@pytest.mark.slow
def test_zoo_induction_report_finds_previous_token_and_induction_heads(tmp_path):
    from probe.app.report.build import build_report

    data = build_report(tmp_path / "r", model="zoo:induction", limit=60, sections=["roles"], strict=True)
    roles = set(data.ctx.report.results["roles"].tables["roles"]["role"])
    assert {"previous-token", "induction"} <= roles
