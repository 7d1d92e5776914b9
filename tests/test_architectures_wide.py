"""Architectures beyond the family table, each checked differentially: captured maps vs the
model's own eager ``output_attentions``, and zero-ablating a head vs an independent
forward-pre hook on the output projection (zeroing that head's slice on that layer's call
only). Tiny random models built from configs (hidden 32, 2 layers, 4 heads; no download).

The checks are the coverage sweep's (``bench/coverage_sweep.py``); a fixed fast subset of
the sweep itself runs at the end.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest

from probe.errors import NotApplicable
import torch

ROOT = Path(__file__).resolve().parents[1]
TOL = 1e-5
SIZE = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)


def transformers_version() -> str:
    import transformers

    return transformers.__version__


def _sweep():
    spec = importlib.util.spec_from_file_location("coverage_sweep", ROOT / "bench" / "coverage_sweep.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def sweep():
    return _sweep()


def _adapter(model, tokenizer, name: str):
    from probe.models import ModelAdapter
    from probe.models.architectures import family_for

    model.eval()
    return ModelAdapter(
        name=f"tiny-{name}", model=model, tokenizer=tokenizer, family=family_for(model.config.model_type)
    )


def _model(cls_name: str, cfg_name: str, vocab: int, **kw):
    import transformers as T

    cfg = getattr(T, cfg_name)(vocab_size=vocab, pad_token_id=0, **kw)
    torch.manual_seed(0)
    return getattr(T, cls_name)(cfg)


def _exact(sweep, adapter) -> dict:
    """Both differential checks on ``adapter``; asserts they hold, returns the row."""
    inputs, lengths = sweep.inputs_for(adapter)
    cap = sweep.check_capture(adapter, inputs, lengths)
    assert "status" not in cap, cap
    assert cap["capture_delta"] <= TOL, cap
    abl = sweep.check_ablation(adapter, inputs)
    assert abl["ablation_effect"] > 1e-6, abl  # zeroing the head changes the output ...
    assert abl["ablation_delta"] <= TOL, abl  # ... exactly as zeroing its slice by hand does
    return {**cap, **abl}


# ---- ALBERT: one module, two layers ------------------------------------------------------
def test_albert_layers_by_call(sweep, bert_tokenizer):
    from probe.runs.capture import AttentionCapture, capture
    from probe.interventions.heads import ablate_heads

    model = _model("AlbertModel", "AlbertConfig", len(bert_tokenizer), embedding_size=16, **SIZE)
    adapter = _adapter(model, bert_tokenizer, "albert")
    shared = model.encoder.albert_layer_groups[0].albert_layers[0].attention
    assert adapter.n_layers == 2 and adapter.attention_modules() == [shared, shared]
    _exact(sweep, adapter)  # both layers vs eager; ablating (1, 2) vs zeroing the 2nd call only
    inputs, _ = sweep.inputs_for(adapter)
    ref = sweep.eager_reference(model, inputs).attentions
    assert (ref[0] - ref[1]).abs().max() > 1e-3  # the two layers really differ
    with AttentionCapture(adapter) as cap, torch.no_grad():
        model(**inputs)
    maps = capture(adapter, [sweep.TEXTS[0]])[0]  # the two APIs agree: layers 0 and 1, both
    n = maps.attentions.shape[-1]
    assert maps.layers == (0, 1)
    assert torch.allclose(maps.attentions, cap.stacked()[:, 0, :, :n, :n], atol=1e-6)
    # ablating (1, 2) leaves layer 0 alone and changes layer 1's output only from its call on
    with ablate_heads(adapter, [(1, 2)]), AttentionCapture(adapter) as abl, torch.no_grad():
        out1 = model(**inputs).last_hidden_state
    assert torch.equal(abl.layer_tensors()[0], cap.layer_tensors()[0])
    with ablate_heads(adapter, [(0, 2)]), torch.no_grad():
        out0 = model(**inputs).last_hidden_state
    assert (out1 - out0).abs().max() > 1e-4  # (0, 2) and (1, 2) are different ablations
    with pytest.raises(ValueError, match="layers 0..1"):
        ablate_heads(adapter, [(2, 0)])


# ---- CLIP text: causal by behaviour ------------------------------------------------------
def test_clip_text_causal_from_the_models_behaviour(sweep, bert_tokenizer):
    from probe.runs.capture import capture

    model = _model(
        "CLIPTextModel",
        "CLIPTextConfig",
        len(bert_tokenizer),
        max_position_embeddings=64,
        bos_token_id=101,
        eos_token_id=102,
        **SIZE,
    )
    assert model.encoder.layers[0].self_attn.is_causal is False  # the module flag says no
    adapter = _adapter(model, bert_tokenizer, "clip_text_model")
    assert adapter.causal and adapter.arch == "decoder" and adapter.stacks == ("decoder",)
    _exact(sweep, adapter)
    a, b = capture(adapter, ["the cat sat on the mat", "the cat sat on the dog"])
    assert a.kind == "causal"
    # a later token changes no earlier position's attention, and nothing is above the diagonal
    assert torch.allclose(a.attentions[..., :-2, :-2], b.attentions[..., :-2, :-2], atol=1e-6)
    assert torch.triu(a.attentions, 1).abs().max() == 0


def test_bert_stays_bidirectional(bert_tokenizer):
    from probe.models import ModelAdapter

    model = _model("ModernBertModel", "ModernBertConfig", len(bert_tokenizer), **SIZE)
    adapter = ModelAdapter(name="tiny-modernbert", model=model.eval(), tokenizer=bert_tokenizer, family="modernbert")
    assert not adapter.causal and adapter.arch == "encoder"


# ---- hook path: ask the model for attentions ---------------------------------------------
@pytest.mark.parametrize("cls_name,cfg_name", [("DebertaV2Model", "DebertaV2Config"), ("MPNetModel", "MPNetConfig")])
def test_hook_path_asks_for_attentions(sweep, bert_tokenizer, cls_name, cfg_name):
    from probe.tracing.attention_interface import attention_path

    adapter = _adapter(_model(cls_name, cfg_name, len(bert_tokenizer), **SIZE), bert_tokenizer, cls_name)
    if attention_path(adapter) != "hooks":  # the choice follows transformers, not the toolkit
        pytest.skip(
            f"{cls_name} has an attention interface in transformers {transformers_version()} (it had none in "
            "5.24.0): the hook path is not the one taken; the interface path is checked by the coverage tests"
        )
    row = _exact(sweep, adapter)
    assert row["attention_source"].startswith("eager")


# ---- layouts other than [query, key] are refused -----------------------------------------
def test_longformer_band_layout_refused(sweep, bert_tokenizer):
    from probe.models.architectures import UnsupportedModel

    from probe.runs.capture import AttentionCapture, capture

    model = _model("LongformerModel", "LongformerConfig", len(bert_tokenizer), attention_window=[4, 4], **SIZE)
    adapter = _adapter(model, bert_tokenizer, "longformer")
    with pytest.raises(UnsupportedModel, match=r"longformer.*not \[batch, head, query, key\]"):
        capture(adapter, sweep.TEXTS)
    inputs, _ = sweep.inputs_for(adapter)
    with pytest.raises(UnsupportedModel, match="local band"):
        with AttentionCapture(adapter) as cap, torch.no_grad():
            model(**inputs)
    assert not cap._records  # no map of the wrong layout was kept


# ---- BigBird: block-sparse attention switched to full ------------------------------------
def test_bigbird_runs_full_attention(sweep, bert_tokenizer, caplog, capsys):
    """BigBird is changed at load (block-sparse -> full attention): said on stderr when it
    loads (a logging warning, which reaches stderr without any logging set up), not only in
    the card; the full-attention model is then exact."""
    import logging

    model = _model(
        "BigBirdModel",
        "BigBirdConfig",
        len(bert_tokenizer),
        max_position_embeddings=128,
        block_size=2,
        num_random_blocks=1,
        **SIZE,
    )
    assert model.config.attention_type == "block_sparse"
    with caplog.at_level(logging.WARNING, logger="probe.models.adapter"):
        adapter = _adapter(model, bert_tokenizer, "big_bird")
    said = [r.getMessage() for r in caplog.records if r.name == "probe.models.adapter"]
    assert len(said) == 1 and "'big_bird'" in said[0] and "full attention" in said[0], said
    assert "original_full" in adapter.card["attention_type"]
    again = _model("BigBirdModel", "BigBirdConfig", len(bert_tokenizer), max_position_embeddings=128, **SIZE)
    logger = logging.getLogger("probe.models.adapter")
    propagate, logger.propagate = logger.propagate, False  # as with no logging set up: the last-resort handler
    try:
        capsys.readouterr()
        _adapter(again, bert_tokenizer, "big_bird")
    finally:
        logger.propagate = propagate
    err = capsys.readouterr().err
    assert "'big_bird': switched from block-sparse to full attention" in err and err.count("\n") == 1, err
    mods = dict(model.named_modules())
    assert all(any(m is x for x in mods.values()) for m in adapter.attention_modules())  # not stale
    _exact(sweep, adapter)


# ---- ConvBERT: the heads share the output projection's input with a convolution ----------
def _convbert(bert_tokenizer):
    model = _model("ConvBertModel", "ConvBertConfig", len(bert_tokenizer), embedding_size=32, **SIZE)
    return model, _adapter(model, bert_tokenizer, "convbert")


def test_convbert_heads_found_from_the_module_and_ablation_refused(sweep, bert_tokenizer):
    """ConvBERT (Jiang et al., 2020) keeps config.head_ratio of its heads as attention and
    turns the rest into a span-based convolution whose outputs sit beside the heads' in the
    output projection's input ([2 heads x 8 | convolution 16], 32 wide). Capture is exact;
    head ablation is refused in one line, because no head site holds only the heads; the
    sweep's reference finds head 1 at columns 8:16 from the module's own weights x values,
    the same columns the module's attention_head_size puts it at."""
    from probe.models.architectures import UnsupportedModel

    from probe.interventions.heads import ablate_heads
    from probe.tracing.trace import trace

    model, adapter = _convbert(bert_tokenizer)
    att = model.encoder.layer[1].attention.self
    assert (adapter.n_heads, adapter.head_dim) == (att.num_attention_heads, att.attention_head_size) == (2, 8)
    inputs, lengths = sweep.inputs_for(adapter)
    assert sweep.check_capture(adapter, inputs, lengths)["capture_delta"] <= TOL
    with pytest.raises(UnsupportedModel, match="'convbert'.*16 other columns.*head_ratio"):
        ablate_heads(adapter, [(1, 1)])
    with pytest.raises(UnsupportedModel, match="other columns"):
        trace(adapter, inputs, read=["blocks.1.attn.hook_z"])  # the per-head read site refuses too
    where = sweep.reference_head_columns(adapter, inputs, "encoder", 1, 1)
    assert where == {"columns": (8, 16), "width": 32, "heads": 2, "source": "values"}
    d = att.attention_head_size
    assert where["columns"] == (1 * d, 2 * d)  # the module's own layout: heads first, each d wide
    row = sweep.check_type("convbert")
    assert row["status"] == "refused" and "other columns" in row["reason"], row


def test_reference_catches_the_old_convbert_layout(sweep, bert_tokenizer):
    """The old rule (the projection's width over the head count: 32 / 2 = 16 per head) put
    head 1 on columns 16:32, the convolution half. The sweep's independent reference puts
    it on 8:16; zeroing the old columns is not zeroing the head (the outputs differ by far
    more than the sweep's tolerance), so the sweep now reports the old layout instead of
    calling it exact."""
    model, adapter = _convbert(bert_tokenizer)
    inputs, _ = sweep.inputs_for(adapter)
    where = sweep.reference_head_columns(adapter, inputs, "encoder", 1, 1)
    width, heads = where["width"], where["heads"]
    old = (1 * (width // heads), 2 * (width // heads))
    assert old == (16, 32) and old != where["columns"]
    proj = adapter.head_output_modules()[1]

    def zeroed(start, stop):
        def hook(module, args):
            x = args[0].clone()
            x[..., start:stop] = 0
            return (x,)

        handle = proj.register_forward_pre_hook(hook)
        try:
            with torch.no_grad():
                return model(**inputs).last_hidden_state
        finally:
            handle.remove()

    valid = inputs["attention_mask"].bool()
    gap = (zeroed(*old) - zeroed(*where["columns"]))[valid].abs().max().item()
    assert gap > 1e-2, gap  # what the old layout's ablation was off by: the sweep's TOL is 1e-5


# ---- LED: decoder and cross-attention return their cache after the weights ---------------
def test_led_decoder_and_cross_attention_read_from_the_weights_item(sweep, bert_tokenizer):
    """LED's decoder attention returns (output, weights, past_key_value): the weights are not
    the last item. Decoder and cross-attention maps equal LED's own eager decoder_attentions /
    cross_attentions; the encoder (Longformer's local band) stays refused in one line."""
    from probe.models.architectures import UnsupportedModel

    from probe.runs.capture import capture

    kw = dict(
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        attention_window=[4, 4],
        max_encoder_position_embeddings=128,
        max_decoder_position_embeddings=128,
        decoder_start_token_id=101,
    )
    model = _model("LEDModel", "LEDConfig", len(bert_tokenizer), **kw)
    adapter = _adapter(model, bert_tokenizer, "led")
    assert adapter.stacks == ("encoder", "decoder", "cross")
    texts, targets = ["The cat sat on the mat."], ["le chat"]
    enc, tgt = adapter.encode(texts[0]), adapter.encode(targets[0], target=True)
    inputs = adapter.batch([enc])
    inputs.update(adapter.decoder_inputs([tgt]))
    ref = sweep.eager_reference(model, inputs)
    for stack, key in (("decoder", "decoder_attentions"), ("cross", "cross_attentions")):
        maps = capture(adapter, texts, stack=stack, targets=targets)[0]
        want = torch.stack(getattr(ref, key))[:, 0, :, : maps.attentions.shape[-2], : maps.attentions.shape[-1]]
        assert maps.attentions.shape[-2] == len(tgt)
        assert (maps.attentions - want).abs().max() <= TOL, stack
    with pytest.raises(UnsupportedModel, match="'led'.*local band"):
        capture(adapter, texts, stack="encoder", targets=targets)


def test_wavlm_captured_past_its_position_bias_and_ablation_refused(sweep):
    """WavLM's attention returns (output, weights, position_bias): the 3-D bias is skipped
    and the weights are captured exactly; its output projection's weights go to torch's
    functional multi_head_attention_forward (never a module call), so head ablation is
    refused in one line rather than silently doing nothing."""
    row = sweep.check_type("wavlm")
    assert row["capture_delta"] <= TOL, row
    assert row["status"] == "refused" and "multi_head_attention_forward" in row["reason"], row
    assert "\n" not in row["reason"]


def test_inkling2_gated_projection_found_and_ablation_refused(sweep, bert_tokenizer):
    """Inkling 2's o_proj is a module around a Linear that first multiplies the heads'
    outputs by a sigmoid gate of the layer input. Discovery takes o_proj.linear (not
    sink_proj, the attention's other Linear, whose input is the layer input and which the
    structural rule took before: the sweep's reference caught the ablation 0.85 off once the
    type was built with widths that divide); head ablation is refused naming the gate."""
    tok = sweep._tokenizer()
    model = sweep.build_model("inkling2_text", tok)
    adapter = _adapter(model, tok, "inkling2_text")
    assert adapter.head_output_modules()[1] is model.layers[1].self_attn.o_proj.linear
    row = sweep.check_type("inkling2_text")
    assert row["capture_delta"] <= TOL, row
    assert row["status"] == "refused" and "gates the heads' outputs" in row["reason"], row


# ---- discovery by structure --------------------------------------------------------------
def test_modernbert_wo_discovered(sweep, bert_tokenizer):
    model = _model("ModernBertModel", "ModernBertConfig", len(bert_tokenizer), **SIZE)
    adapter = _adapter(model, bert_tokenizer, "modernbert")
    assert adapter.head_output_modules() == [model.layers[0].attn.Wo, model.layers[1].attn.Wo]
    _exact(sweep, adapter)


def test_funnel_post_proj_discovered(sweep, bert_tokenizer):
    from probe.models.architectures import UnsupportedModel

    from probe.runs.capture import capture

    kw = dict(d_model=32, n_head=4, d_head=8, d_inner=64, num_decoder_layers=1)
    one_block = _model("FunnelModel", "FunnelConfig", len(bert_tokenizer), block_sizes=[2], **kw)
    adapter = _adapter(one_block, bert_tokenizer, "funnel")
    assert adapter.head_output_modules()[0] is one_block.encoder.blocks[0][0].attention.post_proj
    assert adapter.n_layers == 3  # two encoder layers, then the decoder's one
    _exact(sweep, adapter)
    pooled = _adapter(
        _model("FunnelModel", "FunnelConfig", len(bert_tokenizer), block_sizes=[1, 1], **kw), bert_tokenizer, "funnel"
    )
    with pytest.raises(UnsupportedModel, match="funnel.*pooled queries"):
        capture(pooled, sweep.TEXTS)  # pooling shortens the queries between blocks


# ---- non-text inputs ----------------------------------------------------------------------
def _vision_and_audio():
    import transformers as T

    vit = T.ViTModel(T.ViTConfig(image_size=32, patch_size=8, **SIZE))
    clip_vision = T.CLIPVisionModel(T.CLIPVisionConfig(image_size=32, patch_size=8, **SIZE))
    whisper = T.WhisperModel(
        T.WhisperConfig(
            d_model=32,
            encoder_layers=2,
            decoder_layers=2,
            encoder_attention_heads=4,
            decoder_attention_heads=4,
            encoder_ffn_dim=64,
            decoder_ffn_dim=64,
            num_mel_bins=16,
            max_source_positions=16,
            vocab_size=100,
            pad_token_id=0,
            decoder_start_token_id=1,
        )
    )
    return {"vit": vit, "clip_vision_model": clip_vision, "whisper": whisper}


@pytest.mark.parametrize("name", ["vit", "clip_vision_model", "whisper"])
def test_non_text_inputs_capture_and_ablate(sweep, name):
    from probe.models import ModelAdapter
    from probe.models.architectures import UnsupportedModel

    from probe.runs.capture import capture_inputs

    torch.manual_seed(0)
    model = _vision_and_audio()[name].eval()
    adapter = ModelAdapter(name=f"tiny-{name}", model=model, tokenizer=None, family=name)
    _exact(sweep, adapter)  # capture (every stack) and ablation with pixel_values / input_features
    inputs = sweep.example_features(model, adapter.input_name)
    maps = capture_inputs(adapter, inputs)
    ref = sweep.eager_reference(model, inputs)
    want = ref.encoder_attentions if name == "whisper" else ref.attentions
    assert len(maps) == 2 and maps[1].meta["inputs"] == adapter.input_name
    assert (maps[1].attentions - torch.stack(want)[:, 1]).abs().max() <= TOL
    with pytest.raises(UnsupportedModel, match=f"takes {adapter.input_name}, not text"):
        adapter.encode("a sentence")


def test_text_cli_refuses_an_image_model_in_one_line(tmp_path):
    from click.testing import CliRunner
    from probe.app.cli import main

    torch.manual_seed(0)
    _vision_and_audio()["vit"].save_pretrained(tmp_path / "vit", safe_serialization=True)
    r = CliRunner().invoke(
        main,
        ["capture", "--model", f"hf:{tmp_path / 'vit'}", "--text", "A cat.", "--out", str(tmp_path / "out"), "--quiet"],
    )
    assert r.exit_code == 1, r.output
    lines = [x for x in r.output.strip().splitlines() if x]
    assert len(lines) == 1 and "'vit'" in lines[0] and "pixel_values" in lines[0], r.output
    assert "Traceback" not in r.output


def test_uninstrumentable_type_refused_in_one_line(tmp_path, bert_tokenizer):
    import transformers as T
    from click.testing import CliRunner
    from probe.app.cli import main

    torch.manual_seed(0)
    mamba = T.MambaModel(T.MambaConfig(hidden_size=32, num_hidden_layers=2, vocab_size=len(bert_tokenizer)))
    mamba.save_pretrained(tmp_path / "mamba", safe_serialization=True)
    bert_tokenizer.save_pretrained(tmp_path / "mamba")
    r = CliRunner().invoke(
        main,
        [
            "capture",
            "--model",
            f"hf:{tmp_path / 'mamba'}",
            "--text",
            "A cat.",
            "--out",
            str(tmp_path / "out"),
            "--quiet",
        ],
    )
    assert r.exit_code == 1, r.output
    lines = [x for x in r.output.strip().splitlines() if x]
    assert len(lines) == 1 and "'mamba'" in lines[0] and "no attention modules" in lines[0], r.output
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


# ---- learned sinks: the weights that mix the values -------------------------------------------
def _granite_swa(sweep, tokenizer):
    model = sweep.build_model("granite_swa", tokenizer)
    torch.manual_seed(1)
    for m in model.modules():  # sinks of different sizes per head (zeros at init)
        if torch.is_tensor(getattr(m, "sinks", None)):
            m.sinks.data = torch.randn_like(m.sinks)
    return model, _adapter(model, tokenizer, "granite_swa")


def test_granite_swa_sink_maps_mix_the_values(sweep, bert_tokenizer):
    """Granite-SWA scales each head's output by its sink's complement after the softmax
    (``sigmoid(logsumexp − sink)``) and reports the softmax before that scaling. The toolkit
    reports the effective weights (rows sum to the keys' share, as gpt-oss's): captured maps ×
    the layer's values equal the model's own input to ``o_proj``, per head; the model's
    reported weights do not, so the check would fail on maps of the other convention."""
    from probe.runs.capture import capture

    model, adapter = _granite_swa(sweep, bert_tokenizer)
    row = _exact(sweep, adapter)
    assert row["reference"] == sweep.SINK_REFERENCE and row["values_delta"] <= TOL
    inputs, lengths = sweep.inputs_for(adapter)
    maps = capture(adapter, sweep.TEXTS)
    sums = torch.cat([m.attentions.sum(-1).flatten() for m in maps])
    assert sums.max() < 0.999 and sums.min() > 0  # the sink takes a share of every row
    ref = torch.stack(sweep.eager_reference(model, inputs).attentions)  # [layer, batch, head, q, k]
    for i, m in enumerate(maps):  # same distribution over keys, scaled per row
        n = lengths["decoder"][i]
        want = ref[:, i, :, :n, :n]
        assert (m.attentions / m.attentions.sum(-1, keepdim=True) - want).abs().max() <= TOL
    n = [m.attentions.shape[-1] for m in maps]  # the model's own report, in place of the maps
    reported = [SimpleNamespace(attentions=ref[:, i, :, : n[i], : n[i]]) for i in range(len(maps))]
    values = sweep.value_projections(adapter, adapter.default_stack)
    assert values is not None and sweep.values_delta(adapter, inputs, adapter.default_stack, reported, values) > 1e-2


def test_boolean_mask_attention_refused_at_load(sweep, bert_tokenizer):
    """NemotronAsrStreaming's attention masks with ``attention_mask.logical_not()``: under its
    own (sdpa) forward the mask is boolean and the output finite; under eager attention (what
    the toolkit reads) the mask is additive, every allowed key is masked and the weights are
    NaN. The toolkit refuses the type at load in one line naming it."""
    from probe.models.architectures import UnsupportedModel

    model = sweep.build_model("nemotron_asr_streaming_encoder", bert_tokenizer)
    inputs = sweep.example_features(model, model.main_input_name)
    with torch.no_grad():
        assert torch.isfinite(model(**inputs).last_hidden_state).all()
    eager = sweep.eager_reference(model, inputs).attentions
    assert torch.isnan(eager[0]).all()  # every row: the root cause, not a few degenerate rows
    with pytest.raises(UnsupportedModel, match="'nemotron_asr_streaming_encoder'.*logical_not") as e:
        _adapter(model, bert_tokenizer, "nemotron_asr_streaming_encoder")
    assert "\n" not in str(e.value)


def test_codec_with_two_transformers_refused_at_load(sweep, bert_tokenizer):
    """Pocket TTS's audio tokenizer (no encoder-decoder) runs an encoder transformer, then a
    decoder transformer, each counting its layers from 0, and reports the encoder's
    attentions only: read as one stack the toolkit captured 4 layers against the model's 2
    (the sweep's one failed row). It is refused at load in one line naming both stacks."""
    from probe.models.architectures import UnsupportedModel, discover_attention
    from sweep_inputs import working_inputs  # on the path once the sweep is loaded

    model = sweep.build_model("pocket_tts_audio_tokenizer", bert_tokenizer)
    inputs = working_inputs(model, bert_tokenizer)
    assert len(sweep.eager_reference(model, inputs).attentions) == 2  # the encoder's two layers
    with pytest.raises(UnsupportedModel, match="'pocket_tts_audio_tokenizer'.*two attention stacks") as e:
        discover_attention(model)
    assert "encoder.encoder_transformer.layers, 2 layers" in str(e.value)
    assert "decoder.decoder_transformer.layers, 2 layers" in str(e.value)
    with pytest.raises(UnsupportedModel, match="open one of them") as e:
        _adapter(model, bert_tokenizer, "pocket_tts_audio_tokenizer")
    assert "\n" not in str(e.value)
    row = sweep.check_type("pocket_tts_audio_tokenizer")
    assert row["status"] == "refused", row


# ---- float64 --------------------------------------------------------------------------------
def test_float64_captured_at_float64_accuracy(sweep, bert_tokenizer):
    from probe.runs.capture import capture

    model = _model("BertModel", "BertConfig", len(bert_tokenizer), **SIZE).double()
    adapter = _adapter(model, bert_tokenizer, "bert")
    maps = capture(adapter, sweep.TEXTS)
    inputs, lengths = sweep.inputs_for(adapter)
    want = torch.stack(sweep.eager_reference(model, inputs).attentions)
    assert want.dtype == torch.float64
    for i, m in enumerate(maps):
        n = lengths["encoder"][i]
        assert m.attentions.dtype == torch.float64
        assert (m.attentions - want[:, i, :, :n, :n]).abs().max() <= 1e-12  # float32 would be ~1e-8
        assert (m.attentions.sum(-1) - 1).abs().max() <= 1e-12


# ---- the sweep itself, on a fixed fast subset -------------------------------------------------
SUBSET = {
    "albert": "exact",
    "clip_text_model": "exact",
    "vit": "exact",
    "granite_swa": "exact",
    "sam3_vit_model": "exact",  # windowed [b, h, w, c] projection input: edited inside the attention function
    "vitdet": "refused",  # the same layout without the attention interface: no per-head site
    "mamba": "refused",
    "longformer": "refused",
    "nemotron_asr_streaming_encoder": "refused",
    # built since issue 40 gave them their own inputs (stacked mel frames with their mask;
    # flattened patches with their positions) and refused since it (two stacks in a codec)
    "fun_asr_nano_encoder": "exact",
    "gemma4_vision": "exact",
    "pocket_tts_audio_tokenizer": "refused",
}


def test_coverage_sweep_subset(sweep):
    rows = [sweep.check_type(t) for t in SUBSET]
    assert {r["model_type"]: r["status"] for r in rows} == SUBSET, [(r["model_type"], r.get("reason")) for r in rows]
    for r in rows:
        if r["status"] == "refused":
            assert f"'{r['model_type']}'" in r["reason"] and "\n" not in r["reason"]
    text = sweep.markdown(rows, "x", len(SUBSET))
    assert "**exact**: 7" in text and "**refused**: 5" in text and "**failed**: 0" in text


def test_head_mixing_norm_refuses_ablation_not_capture(sweep, bert_tokenizer):
    """BitNet normalises all heads together between the attention and the output projection:
    capture is exact, but no head's output can be edited alone, so ablation is refused."""
    from probe.models.architectures import UnsupportedModel

    from probe.interventions.heads import ablate_heads

    adapter = _adapter(
        _model("BitNetModel", "BitNetConfig", len(bert_tokenizer), num_key_value_heads=2, **SIZE),
        bert_tokenizer,
        "bitnet",
    )
    inputs, lengths = sweep.inputs_for(adapter)
    assert sweep.check_capture(adapter, inputs, lengths)["capture_delta"] <= TOL
    with pytest.raises(UnsupportedModel, match="'bitnet'.*attn_sub_norm"):
        ablate_heads(adapter, [(1, 2)])


def test_albert_every_trace_site_by_call(sweep, bert_tokenizer):
    """Values, streaming and attention reweighting on ALBERT (one module for both layers) are
    trace views, told apart by call: each layer's values equal the shared value projection
    applied to that layer's own input (the model's hidden_states), streamed maps equal eager
    output_attentions per layer, and replacing layer 1's weights leaves layer 0 alone."""
    from probe.runs.capture import AttentionCapture
    from probe.interventions.reweighting import AttentionReweighting
    from probe.tracing.edits import ReplaceWeights
    from probe.runs.streaming import stream_layers
    from probe.tracing.trace import trace

    model = _model("AlbertModel", "AlbertConfig", len(bert_tokenizer), embedding_size=16, **SIZE)
    adapter = _adapter(model, bert_tokenizer, "albert")
    inputs, _ = sweep.inputs_for(adapter)
    with torch.no_grad():
        ref = model(**inputs, output_hidden_states=True)
    value = model.encoder.albert_layer_groups[0].albert_layers[0].attention.value
    cache = trace(adapter, inputs, read=["blocks.0.attn.hook_v", "blocks.1.attn.hook_v"])
    b, s = inputs["input_ids"].shape
    for layer in (0, 1):
        with torch.no_grad():
            want = value(ref.hidden_states[layer]).reshape(b, s, 4, 8)  # the layer's own input
        assert torch.allclose(cache[f"blocks.{layer}.attn.hook_v"], want, atol=1e-6)
    assert (cache["blocks.0.attn.hook_v"] - cache["blocks.1.attn.hook_v"]).abs().max() > 1e-3

    encs = [adapter.encode(t) for t in sweep.TEXTS[:2]]
    got: dict = {}
    stream_layers(adapter, encs, lambda lb: got.setdefault(lb.layer, lb.rows), batch_size=2)
    eager = sweep.eager_reference(model, adapter.batch(encs)).attentions
    for layer in (0, 1):
        for i, e in enumerate(encs):
            n = len(e)
            assert torch.allclose(got[layer][i], eager[layer][i, :, :n, :n], atol=1e-6)

    with AttentionCapture(adapter) as clean, torch.no_grad():
        out = model(**inputs).last_hidden_state
    with AttentionReweighting(adapter, {1: ReplaceWeights(head=2)}), AttentionCapture(adapter) as cap, torch.no_grad():
        out1 = model(**inputs).last_hidden_state
    assert torch.equal(cap.layer_tensors()[0], clean.layer_tensors()[0])  # layer 0: untouched
    assert (out1 - out).abs().max() > 1e-4
    given = clean.layer_tensors()[1][:, 2]  # layer 1's own weights given back: nothing changes
    with AttentionReweighting(adapter, {1: ReplaceWeights(head=2, mode="given", weights=given)}), torch.no_grad():
        same = model(**inputs).last_hidden_state
    assert torch.allclose(same, out, atol=1e-5)


def test_albert_residual_sites_refused_in_one_line(bert_tokenizer):
    """The residual stream has no block module per layer when layers share one (ALBERT):
    the residual cache and the ``resid_*`` sites say so in one line; restart is not offered."""
    from probe.models.architectures import UnsupportedModel
    from probe.tracing.restart import ResidualCache, RestartFrom, supports_restart

    model = _model("AlbertModel", "AlbertConfig", len(bert_tokenizer), embedding_size=16, **SIZE)
    adapter = _adapter(model, bert_tokenizer, "albert")
    assert not supports_restart(adapter)  # callers of restart run full forwards instead
    with pytest.raises(UnsupportedModel, match="'albert'.*2 layers share 1 attention module.*residual") as e:
        ResidualCache(adapter)
    assert "\n" not in str(e.value)
    with pytest.raises(NotApplicable, match="restart is not supported for tiny-albert"):
        RestartFrom(adapter, 1, torch.zeros(1, 4, 32))


def test_albert_gradients_by_call(sweep, bert_tokenizer):
    """Gradient-weighted attention tells ALBERT's two calls of one module apart: each layer's
    ``∂target/∂attention`` equals autograd through the model's own eager ``output_attentions``."""
    from probe.runs.grads import attention_gradients

    model = _model("AlbertModel", "AlbertConfig", len(bert_tokenizer), embedding_size=16, **SIZE)
    adapter = _adapter(model, bert_tokenizer, "albert")
    text = sweep.TEXTS[0]

    def target(out):  # a few features of [CLS] (its norm is fixed by the final LayerNorm)
        return out.last_hidden_state[0, 0, :4].sum(), "[CLS] features 0-3"

    got = attention_gradients(adapter, text, target=target)
    inputs = adapter.batch([adapter.encode(text)])
    prev = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        out = model(**inputs, output_attentions=True)
        want = torch.stack(torch.autograd.grad(target(out)[0], list(out.attentions)))[:, 0]
    finally:
        model.set_attn_implementation(prev)
    assert got.grads.shape == want.shape == (2, 4, len(got.maps.tokens), len(got.maps.tokens))
    scale = want.abs().max()
    assert scale > 1e-3 and (got.grads - want).abs().max() <= 1e-5 * scale
    assert (want[0] - want[1]).abs().max() > 0.1 * scale  # the two layers' gradients really differ
    assert (got.maps.attentions - torch.stack(out.attentions)[:, 0].detach()).abs().max() <= TOL


# ---- types the sweep builds from their own configs (issue 40) ------------------------------
@pytest.mark.parametrize(
    "model_type, says",
    [
        ("rwkv", "state a head count"),  # a recurrent mixer named *Attention: no softmax heads
        ("swin", "windowed attention"),  # each stage's windows are rows of its own
        ("qwen2_5_vl_vision", "as 1 sequence"),  # a tower over flattened patches of several images
        ("autoformer", "not attention probabilities"),  # auto-correlation weights
    ],
)
def test_models_it_cannot_read_are_refused_in_one_line(sweep, model_type, says):
    """Each of these used to end in a traceback inside the toolkit (a NotApplicable without a
    model reason, a stack of unequal tensors, an InputError about the user's input) or was
    read through the wrong input; each is now refused, in one line, naming why."""
    row = sweep.check_type(model_type)
    assert row["status"] == "refused", row
    assert says in row["reason"] and "\n" not in row["reason"]


@pytest.mark.parametrize("model_type", ["rt_detr_v2", "mgp-str"])
def test_detectors_and_recognisers_capture_and_ablate_exactly(sweep, model_type):
    """RT-DETR carries a backbone without SDPA (restoring the model's own attention setting
    after the eager capture used to raise); MGP-STR's output holds only nested tuples. Maps
    equal eager, ablation equals the independent reference."""
    row = sweep.check_type(model_type)
    assert row["status"] == "exact", row


def test_reference_finds_each_head_on_a_one_position_map(sweep):
    """D-FINE's encoder attends over one position on a tiny image: every head's output is its
    value slice, near 0. The reference finds each head's own columns (an absolute tolerance
    matched every window to head 0's)."""
    tokenizer = sweep._tokenizer()
    model = sweep.build_model("d_fine", tokenizer)
    adapter = _adapter(model, tokenizer, "d_fine")
    inputs = sweep.working_inputs(model, tokenizer)
    found = [sweep.reference_head_columns(adapter, inputs, "encoder", 1, h)["columns"] for h in range(4)]
    assert found == [(64 * h, 64 * (h + 1)) for h in range(4)]
