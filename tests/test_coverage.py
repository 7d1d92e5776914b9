"""Coverage: every architecture listed opens, captures what its own eager attention
computes, and ablates heads exactly — tiny random models built from configs, no download.

For each architecture (hidden 32, 2 layers, 4 heads, the bundled BERT vocabulary):

* captured weights (path chosen automatically: transformers' attention interface, or hooks)
  equal the model's own eager ``output_attentions`` (max |Δ| ≤ 1e-5), for every stack;
* the model's outputs under capture equal its eager outputs (the toolkit's attention
  function computes the same thing, not only the same weights);
* rows sum to 1 over the keys the mask allows (padding trimmed; nothing above the diagonal
  for causal stacks);
* zero-ablating a head equals zeroing that head's slice of the output projection's input
  by hand (on the interface path and on the hook path).

``python tests/test_coverage.py`` prints the README coverage table.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from probe.errors import NotApplicable
import torch

TEXTS = ["The cat sat on the mat.", "A much longer sentence, with commas, that makes the batch ragged and padded."]
TARGETS = ["le chat", "une phrase beaucoup plus longue avec des virgules"]
TOL = 1e-5

# architectures that cannot be supported, with the reason (xfail strict): none today
UNSUPPORTED: dict[str, str] = {}
# notes shown in the coverage table
NOTES = {
    "falcon": (
        "own `output_attentions` under SDPA adds a bool mask (not causal): reference run with eager set on the config"
    ),
    "bloom": "ALiBi inside the module; no attention interface in transformers 5",
    "mistral": "sliding window 4",
    "gemma2": "sliding window 4, soft-capping 0.1 (binding on random scores)",
    "gemma3_text": "sliding window 4",
    "gemma": "multi-query (1 key/value head)",
    "gptj": "rotary on 4 dims",
}


def tiny_configs(vocab: int) -> dict:
    """Architecture name -> a 2-layer, 4-head transformers config of hidden size 32."""
    import transformers as T

    c = dict(vocab_size=vocab, pad_token_id=0)
    dec = dict(bos_token_id=101, eos_token_id=102)
    size = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
    gqa = dict(size, num_key_value_heads=2)
    seq2seq = dict(
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        forced_eos_token_id=None,
    )
    return {
        "bert": T.BertConfig(**size, **c),
        "roberta": T.RobertaConfig(**size, max_position_embeddings=130, **c),
        "distilbert": T.DistilBertConfig(dim=32, n_layers=2, n_heads=4, hidden_dim=64, **c),
        "electra": T.ElectraConfig(embedding_size=32, **size, **c),
        "gpt2": T.GPT2Config(n_embd=32, n_layer=2, n_head=4, **dec, **c),
        "gpt_neox": T.GPTNeoXConfig(**size, **dec, **c),
        "gptj": T.GPTJConfig(n_embd=32, n_layer=2, n_head=4, rotary_dim=4, **dec, **c),
        "opt": T.OPTConfig(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=4, ffn_dim=64, word_embed_proj_dim=32, **dec, **c
        ),
        "bloom": T.BloomConfig(hidden_size=32, n_layer=2, n_head=4, **dec, **c),
        "falcon": T.FalconConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, **dec, **c),
        "llama": T.LlamaConfig(**gqa, **dec, **c),
        "mistral": T.MistralConfig(**gqa, sliding_window=4, **dec, **c),
        "mixtral": T.MixtralConfig(**gqa, num_local_experts=2, num_experts_per_tok=1, **dec, **c),
        "qwen2": T.Qwen2Config(**gqa, **dec, **c),
        "qwen3": T.Qwen3Config(**gqa, head_dim=8, **dec, **c),
        "gemma": T.GemmaConfig(**size, num_key_value_heads=1, head_dim=8, **dec, **c),
        "gemma2": T.Gemma2Config(
            **gqa, head_dim=8, sliding_window=4, attn_logit_softcapping=0.1, query_pre_attn_scalar=8, **dec, **c
        ),
        "gemma3_text": T.Gemma3TextConfig(**gqa, head_dim=8, sliding_window=4, query_pre_attn_scalar=8, **dec, **c),
        "phi3": T.Phi3Config(**gqa, **dec, **c),
        "olmo": T.OlmoConfig(**size, **dec, **c),
        "bart": T.BartConfig(**seq2seq, decoder_start_token_id=101, **dec, **c),
        "t5": T.T5Config(
            d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, decoder_start_token_id=0, eos_token_id=102, **c
        ),
        "marian": T.MarianConfig(**seq2seq, decoder_start_token_id=0, **dec, **c),
    }


def build(name: str, tokenizer):
    """A seeded tiny random model of architecture ``name`` as a ModelAdapter."""
    import transformers as T

    from probe.models import ModelAdapter
    from probe.models.architectures import family_for

    cfg = tiny_configs(len(tokenizer))[name]
    torch.manual_seed(0)
    model = T.AutoModel.from_config(cfg)
    return ModelAdapter(name=f"tiny-{name}", model=model, tokenizer=tokenizer, family=family_for(cfg.model_type))


def _inputs(adapter):
    encs = [adapter.encode(t) for t in TEXTS]
    inputs = adapter.batch(encs)
    lengths = {"encoder": [len(e) for e in encs], "decoder": [len(e) for e in encs]}
    if adapter.arch == "encoder-decoder":
        tencs = [adapter.encode(t, target=True) for t in TARGETS]
        inputs.update(adapter.decoder_inputs(tencs))
        lengths["decoder"] = [len(t) for t in tencs]
    return inputs, lengths


def _eager_reference(adapter, inputs):
    """The model's own eager forward with ``output_attentions`` (forced on the config for
    models that cannot switch at run time)."""
    model = adapter.model
    prev = model.config._attn_implementation
    dynamic = type(model)._can_set_attn_implementation()
    if dynamic:
        model.set_attn_implementation("eager")
    else:
        model.config._attn_implementation_internal = "eager"
    try:
        with torch.no_grad():
            return model(**inputs, output_attentions=True)
    finally:
        if dynamic:
            model.set_attn_implementation(prev)
        else:
            model.config._attn_implementation_internal = prev


REF_KEYS = {"encoder": "encoder_attentions", "decoder": "decoder_attentions", "cross": "cross_attentions"}


def _hidden(out) -> torch.Tensor:
    return out.last_hidden_state


def _delta(a: torch.Tensor, b: torch.Tensor, inputs: dict) -> float:
    """Max |a − b| over real (non-padding) positions: padded positions hold whatever
    each attention kernel makes of an empty row."""
    valid = inputs.get("decoder_attention_mask", inputs["attention_mask"]).bool()
    return (a - b)[valid].abs().max().item()


def check_capture(adapter) -> dict:
    """Capture every stack of ``adapter`` in one forward per stack; compare with eager."""
    from probe.tracing.attention_interface import attention_path
    from probe.runs.capture import AttentionCapture

    inputs, lengths = _inputs(adapter)
    ref = _eager_reference(adapter, inputs)
    worst, worst_out, worst_rows = 0.0, 0.0, 0.0
    for stack in adapter.stacks:
        key = REF_KEYS[stack] if adapter.arch == "encoder-decoder" else "attentions"
        with AttentionCapture(adapter, stack=stack) as cap, torch.no_grad():
            out = adapter.model(**inputs)
        got = cap.stacked()  # [layer, batch, head, q, k]
        want = torch.stack(getattr(ref, key))
        q_len = lengths["decoder" if stack in ("decoder", "cross") else "encoder"]
        k_len = lengths["decoder" if stack == "decoder" else "encoder"]
        for i in range(len(TEXTS)):
            g = got[:, i, :, : q_len[i], : k_len[i]]
            worst = max(worst, (g - want[:, i, :, : q_len[i], : k_len[i]]).abs().max().item())
            worst_rows = max(worst_rows, (g.sum(-1) - 1).abs().max().item())
            if stack == "decoder" or (stack == adapter.default_stack and adapter.causal):
                above = torch.triu(torch.ones(q_len[i], k_len[i], dtype=torch.bool), diagonal=1)
                worst_rows = max(worst_rows, g[..., above].abs().max().item() if above.any() else 0.0)
        worst_out = max(worst_out, _delta(_hidden(out), _hidden(ref), inputs))
    return {"path": attention_path(adapter), "max_delta": worst, "output_delta": worst_out, "row_error": worst_rows}


def _sweep():
    """bench/coverage_sweep.py as a module (its independent ablation reference)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("coverage_sweep", ROOT / "bench" / "coverage_sweep.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ROOT = Path(__file__).resolve().parents[1]


def check_ablation(adapter, layer: int = 1, head: int = 2) -> dict:
    """Zero-ablate one head with the toolkit (interface path where available, and hooks);
    compare with zeroing, by hand, that head's own columns of the output projection's input,
    found from the model's computation (the sweep's :func:`reference_head_columns`: the
    head's weights × values located among the projection's input columns), never from the
    adapter's head size. Compared on the stack's own output (the encoder's, for
    encoder-decoders), real positions only."""
    from probe.interventions.heads import HeadIntervention
    from probe.tracing.edits import Zero

    inputs, _ = _inputs(adapter)
    stack = adapter.default_stack
    site = "encoder_last_hidden_state" if adapter.arch == "encoder-decoder" else "last_hidden_state"
    valid = inputs["attention_mask"].bool()
    proj = adapter.head_output_modules(stack)[layer]
    where = _sweep().reference_head_columns(adapter, inputs, stack, layer, head)
    start, stop = where["columns"]

    def run():
        with torch.no_grad():
            return getattr(adapter.model(**inputs), site)

    def by_hand(module, args):
        x = args[0].clone()
        x[..., start:stop] = 0
        return (x,) + tuple(args[1:])

    handle = proj.register_forward_pre_hook(by_hand)
    try:
        want = run()
    finally:
        handle.remove()
    result = {"effect": (run() - want)[valid].abs().max().item(), "source": where["source"]}  # it changed something
    for path in ("auto", "hooks"):
        with HeadIntervention(adapter, {layer: Zero(head=head)}, stack=stack, path=path):
            result[path] = (run() - want)[valid].abs().max().item()
    return result


def _tokenizer():
    import transformers

    from probe.models.registry import minilm_path

    return transformers.AutoTokenizer.from_pretrained(str(minilm_path()), local_files_only=True)


ARCHITECTURES = list(tiny_configs(30522))


def _params():
    return [
        pytest.param(a, marks=pytest.mark.xfail(reason=UNSUPPORTED[a], strict=True)) if a in UNSUPPORTED else a
        for a in ARCHITECTURES
    ]


@pytest.mark.parametrize("arch", _params())
def test_architecture_capture_and_ablation(bert_tokenizer, arch):
    adapter = build(arch, bert_tokenizer)
    cap = check_capture(adapter)
    assert cap["max_delta"] <= TOL, cap
    assert cap["output_delta"] <= TOL, cap
    assert cap["row_error"] <= TOL, cap
    # which path (interface or hooks) is not asserted: it follows the installed transformers
    # (falcon took hooks on 5.24.0, the interface on 5.25.0); the maps, outputs and ablation are
    abl = check_ablation(adapter)
    assert abl["effect"] > 1e-4  # zeroing the head changes the output ...
    assert abl["auto"] <= TOL and abl["hooks"] <= TOL, abl  # ... exactly as zeroing its slice does
    assert adapter.model.config._attn_implementation in ("sdpa", "eager")  # restored


def test_generic_discovery_names_stacks_and_projections(bert_tokenizer):
    """Models outside the family table are read by shape: stacks, layers, projections."""
    gemma = build("gemma2", bert_tokenizer)
    assert gemma.family == "gemma2" and gemma.arch == "decoder" and gemma.n_layers == 2
    assert [type(m).__name__ for m in gemma.head_output_modules()] == ["Linear", "Linear"]
    assert gemma.head_output_modules()[1] is gemma.model.layers[1].self_attn.o_proj
    t5 = build("t5", bert_tokenizer)
    assert t5.stacks == ("encoder", "decoder", "cross")
    bloom = build("bloom", bert_tokenizer)
    assert bloom.arch == "decoder" and bloom.head_output_modules()[0] is bloom.model.h[0].self_attention.dense
    phi = build("phi3", bert_tokenizer)
    with pytest.raises(NotApplicable, match="fused"):
        phi.value_modules()  # q|k|v in one projection: no separate value module


def test_interface_intervention_leaves_nothing_attached(bert_tokenizer):
    """An intervention on the interface path whose forward raises: no session, no hook,
    the attention implementation restored; the edit applies once (not also at the
    stand-by projection hook)."""
    from probe.tracing.attention_interface import active_sessions
    from probe.tracing.hooks import count_hooks
    from probe.interventions.heads import HeadIntervention
    from probe.tracing.edits import Scale

    adapter = build("llama", bert_tokenizer)
    model = adapter.model
    inputs, _ = _inputs(adapter)
    with pytest.raises(RuntimeError, match="boom"):
        with HeadIntervention(adapter, {1: Scale(2.0, head=2)}):
            assert active_sessions(model) == 1 and count_hooks(model) == 1
            raise RuntimeError("boom")
    assert active_sessions(model) == 0 and count_hooks(model) == 0
    assert model.config._attn_implementation == "sdpa"
    with torch.no_grad():
        with HeadIntervention(adapter, {1: Scale(2.0, head=2)}, path="interface"):
            once = model(**inputs).last_hidden_state
        with HeadIntervention(adapter, {1: Scale(2.0, head=2)}, path="hooks"):
            hooked = model(**inputs).last_hidden_state
    valid = inputs["attention_mask"].bool()
    assert (once - hooked)[valid].abs().max() < 1e-5  # scaled by 2, not by 4


def test_hf_opens_an_architecture_outside_the_table(bert_tokenizer, tmp_path):
    """``hf:<path>`` opens a model type the family table never named (found by shape) and
    captures through the interface."""
    from probe.runs.capture import capture
    from probe.models import load_model
    from probe.models.architectures import ARCHITECTURES

    tiny = build("qwen3", bert_tokenizer)
    assert "qwen3" not in ARCHITECTURES
    tiny.model.save_pretrained(tmp_path, safe_serialization=True)
    bert_tokenizer.save_pretrained(tmp_path)
    adapter = load_model(f"hf:{tmp_path}")
    assert (adapter.family, adapter.arch, adapter.n_layers, adapter.n_heads) == ("qwen3", "decoder", 2, 4)
    maps = capture(adapter, TEXTS[:1])[0]
    inputs = adapter.batch([adapter.encode(TEXTS[0])])
    want = torch.stack(_eager_reference(adapter, inputs).attentions)[:, 0]  # [layer, head, q, k]
    assert maps.kind == "causal" and (maps.attentions - want).abs().max() <= TOL  # what it computed, not which path


def test_reweighting_uniform_permute_given(bert_tokenizer):
    """Attention reweighting on a causal GQA model: uniform rows are 1/(i+1); a permutation
    keeps each row's values and the causal mask; given = own weights changes nothing."""
    from probe.runs.capture import AttentionCapture
    from probe.interventions.reweighting import AttentionReweighting
    from probe.tracing.edits import ReplaceWeights

    adapter = build("llama", bert_tokenizer)
    inputs, lengths = _inputs(adapter)
    with AttentionCapture(adapter, layers=[1]) as cap, torch.no_grad():
        clean = _hidden(adapter.model(**inputs))
    own = cap.layer_tensors()[1][:, 2]  # [batch, q, k]
    n = lengths["encoder"][0]
    for mode, value in (("uniform", None), ("permute", None), ("given", own)):
        with (
            AttentionReweighting(adapter, {1: ReplaceWeights(head=2, mode=mode, weights=value)}),
            AttentionCapture(adapter, layers=[1]) as cap,
            torch.no_grad(),
        ):
            out = _hidden(adapter.model(**inputs))
        w = cap.layer_tensors()[1][0, 2, :n, :n]
        if mode == "uniform":
            assert torch.allclose(w, torch.tril(torch.ones(n, n)) / torch.arange(1, n + 1)[:, None], atol=1e-6)
        elif mode == "permute":
            assert torch.allclose(w.sort(-1).values, own[0, :n, :n].sort(-1).values)
            assert torch.triu(w, 1).abs().max() == 0 and not torch.allclose(w, own[0, :n, :n])
        if mode == "given":
            assert _delta(out, clean, inputs) < 1e-5
        else:
            assert _delta(out, clean, inputs) > 1e-4
        assert torch.allclose(cap.layer_tensors()[1][:, 0], own.new_tensor(0) + cap.layer_tensors()[1][:, 0])
    with pytest.raises(ValueError, match="interface"):
        AttentionReweighting(build("bloom", bert_tokenizer), {0: ReplaceWeights(head=0)})


def coverage_rows(tokenizer=None) -> list[dict]:
    """One row per architecture: path, max |Δ| vs eager, ablation check."""
    tokenizer = tokenizer or _tokenizer()
    rows = []
    for arch in ARCHITECTURES:
        if arch in UNSUPPORTED:
            rows.append({"architecture": arch, "path": "unsupported", "note": UNSUPPORTED[arch]})
            continue
        adapter = build(arch, tokenizer)
        cap, abl = check_capture(adapter), check_ablation(adapter)
        rows.append(
            {
                "architecture": arch,
                "stacks": "/".join(adapter.stacks),
                **cap,
                "ablation_delta": max(abl["auto"], abl["hooks"]),
                "note": NOTES.get(arch, ""),
            }
        )
    return rows


def markdown_table(rows: list[dict]) -> str:
    lines = [
        "| architecture | stacks | path | max \\|Δ\\| weights vs eager | max \\|Δ\\| outputs "
        "| zero-ablation vs zeroed slice | note |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r["path"] == "unsupported":
            lines.append(f"| {r['architecture']} | | unsupported | | | | {r['note']} |")
            continue
        ok = "✓" if r["ablation_delta"] <= TOL else "✗"
        lines.append(
            f"| {r['architecture']} | {r['stacks']} | {r['path']} | {r['max_delta']:.1e} | "
            f"{r['output_delta']:.1e} | {ok} ({r['ablation_delta']:.1e}) | {r['note']} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import logging

    logging.getLogger("transformers").setLevel(logging.ERROR)
    print(markdown_table(coverage_rows()))
