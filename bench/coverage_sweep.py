"""Coverage generated from transformers itself: one row per ``AutoModel`` model type.

For every model type the installed transformers registers for ``AutoModel``
(``transformers.models.auto.modeling_auto.MODEL_MAPPING_NAMES``) the sweep builds a tiny
randomly initialised model from the type's default config (hidden 32, 2 layers, 4 heads,
FFN 64, the bundled BERT vocabulary; no download), opens it as a user would
(:class:`probe.models.ModelAdapter`) and records one row:

* ``exact`` — the captured maps of every stack equal the model's own eager
  ``output_attentions`` (max |Δ| over real positions ≤ :data:`TOL`) and zero-ablating head
  (1, 2) (layer 0 for one-layer models) equals an independent forward-pre hook that zeroes
  that head's own columns of the output projection's input, found from the layer's own
  weights × values (:func:`reference_head_columns`, never the adapter's head size) (max
  |Δ| ≤ :data:`TOL`); types with a
  learned per-head sink are checked independently of how the model reports its weights
  (:func:`values_delta`: maps × values vs the output projection's input);
* ``refused`` — the toolkit said, in one line, why it cannot instrument the type;
* ``failed`` — anything else: a traceback inside the toolkit, maps of the wrong layout or
  values (must be 0);
* ``not built`` — the sweep could not build a tiny model from the shrunk default config, or
  its own forward runs on none of the inputs the sweep makes for it (:mod:`sweep_inputs`),
  each with its reason: no statement about the toolkit. docs/coverage.md counts four kinds:
  a library the toolkit does not install (timm, natten, detectron2, torchaudio); a type whose
  own default config builds no model in the installed transformers (checked unshrunk on the
  meta device: only a checkpoint's config would); no single forward over inputs (video
  trackers' inference sessions, classes without a forward); and the rest, where the sweep's
  shrink or inputs do not fit the type yet;
* ``no reference`` — built and instrumented, but the model's own eager forward returns no
  attentions to compare with.

Each type runs in its own forked process with a timeout (one hang or crash costs one
row). Writes ``docs/coverage.json``, ``docs/coverage.csv`` and ``docs/coverage.md``::

    python bench/coverage_sweep.py                 # all types (one worker: 3.6 min on 2 cores, 10 min loaded)
    python bench/coverage_sweep.py albert vit      # some types, printed
    python bench/coverage_sweep.py --from-json     # regenerate docs/coverage.md only
"""

from __future__ import annotations

import argparse
import csv
import json
import multiprocessing as mp
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sweep_inputs import UnsupportedInput, working_inputs

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
TOL = 1e-5
TIMEOUT_S = 120

HIDDEN = 32
SIZE_KEYS = {
    # width
    "hidden_size": HIDDEN,
    "d_model": HIDDEN,
    "n_embd": HIDDEN,
    "embed_dim": HIDDEN,
    "dim": HIDDEN,
    "embedding_size": HIDDEN,
    "word_embed_proj_dim": HIDDEN,
    "projection_dim": HIDDEN,
    "projection_size": HIDDEN,  # SigLIP's text head
    "pooler_output_size": HIDDEN,  # ViT's pooler (a dual encoder's image embedding)
    # depth
    "num_hidden_layers": 2,
    "n_layer": 2,
    "n_layers": 2,
    "num_layers": 2,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "num_decoder_layers": 2,
    # heads
    "num_attention_heads": 4,
    "n_head": 4,
    "n_heads": 4,
    "num_heads": 4,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    # feed-forward
    "intermediate_size": 64,
    "ffn_dim": 64,
    "encoder_ffn_dim": 64,
    "decoder_ffn_dim": 64,
    "d_ff": 64,
    "n_inner": 64,
    "hidden_dim": 64,
    # per-head width
    "head_dim": 8,
    "d_kv": 8,
    "d_head": 8,
    "qk_rope_head_dim": 4,
    "qk_nope_head_dim": 4,
    "v_head_dim": 8,
    "kv_lora_rank": 16,
    "q_lora_rank": 16,
    "rotary_dim": 4,
    # mixtures of experts (DeepSeek's grouped routing: one group)
    "n_routed_experts": 4,
    "num_local_experts": 4,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 16,
    "n_group": 1,
    "topk_group": 1,
    # inputs (detectors: fewer queries than a tiny image has anchors)
    "num_queries": 4,
    "image_size": 32,
    "patch_size": 8,
    "num_mel_bins": 16,
    "max_source_positions": 16,
    "max_length": 64,
}


#: sizes only ever shrunk (MobileViT V2's 2-pixel patches stay 2)
NEVER_GROW = ("patch_size", "num_queries")


def tiny_config(model_type: str, vocab: int):
    """The type's default config shrunk: every size field it has set to the tiny value
    (sub-configs too); ``num_key_value_heads`` 2 where the type has it."""
    import transformers

    cfg = transformers.AutoConfig.for_model(model_type, **INIT_KWARGS.get(model_type, {}))
    _shrink(cfg, vocab, depth=0, max_depth=DEEP_CONFIGS.get(model_type, 2))
    return cfg


#: types whose sizes sit deeper than two sub-configs down (NeMo SpeechLM's diarization
#: encoder is audio_config.diarization_config.audio_config: 512 wide, 31 layers unshrunk)
DEEP_CONFIGS = {"nemo_speechlm": 3}


#: arguments the config must be made with (not settable afterwards): DETR-likes and OmDet-Turbo
#: take the transformers ResNet / Swin backbone instead of timm's, which is not installed
INIT_KWARGS: dict[str, dict] = {
    t: {"use_timm_backbone": False}
    for t in ("detr", "conditional_detr", "dab-detr", "deformable_detr", "table-transformer", "omdet-turbo")
}


#: per-type settings the generic shrink cannot guess (sizes given as lists, …)
TWEAKS: dict[str, dict] = {
    "funnel": {"block_sizes": [1, 1], "num_decoder_layers": 1},
    # its Mamba-2 mixer (1024 wide, 128 heads, state 256) ran past 120 s on a loaded machine
    "falcon_h1": {"mamba_d_ssm": 64, "mamba_n_heads": 8, "mamba_d_state": 16, "mamba_chunk_size": 16},
    "longformer": {"attention_window": [4, 4]},
    # hybrids that place their attention layers by index or period (none in two layers otherwise)
    "bamba": {
        "attn_layer_indices": [1],
        "mamba_n_heads": 8,
        "mamba_d_head": 8,
        "mamba_n_groups": 1,
        "mamba_d_state": 16,
        "mamba_chunk_size": 16,
    },
    "jamba": {"attn_layer_period": 2, "attn_layer_offset": 1, "expert_layer_period": 2, "expert_layer_offset": 1},
    # VITS's vocoder and flows (512 channels, 256× upsampling) took ~80 s a type
    "vits": {
        "upsample_initial_channel": 32,
        "upsample_rates": [2, 2],
        "upsample_kernel_sizes": [4, 4],
        "resblock_kernel_sizes": [3],
        "resblock_dilation_sizes": [[1, 3]],
        "flow_size": 16,
        "duration_predictor_filter_channels": 32,
    },
    # time series: a horizon and context the tiny inputs hold
    "autoformer": {"prediction_length": 4, "context_length": 8, "label_length": 4},
    "lfm2_moe": {"layer_types": ["conv", "full_attention"]},
    "esmc": {"num_key_value_heads": 4},  # no grouped keys and values
    "bros": {"dim_bbox_projection": 8},  # one head's width
    "zamba2": {"mamba_headdim": 8, "mamba_d_state": 16, "attention_hidden_size": 2 * HIDDEN, "hybrid_layer_ids": [1]},
    "seggpt": {"image_size": [32, 16]},  # the prompt and the image stacked: each 16 × 16
    "swin2sr": {"image_size": 16, "window_size": 2, "patch_size": 1},
    "granite_speech5_encoder": {"context_size": 8},  # attention blocks of frames the tiny input fills
    "encodec": {"codebook_dim": HIDDEN},  # the quantiser works at the encoder's width
    "xcodec": {"codebook_dim": 2 * HIDDEN},  # acoustic | semantic features side by side
    "dory": {"n_input_layers": 1, "n_recurrent_layers": 1, "n_output_layers": 1, "sliding_window": 8},
    # Zamba ties its shared transformer across hybrid layers: two of them; attention over [hidden | embeddings]
    "zamba": {
        "num_hidden_layers": 4,
        "layers_block_type": ["linear_attention", "hybrid", "linear_attention", "hybrid"],
        "attention_hidden_size": 2 * HIDDEN,
    },
    # Mimi's upsampling convolution has one group per channel (512): the shrunk width's
    **{
        t: {"upsample_groups": HIDDEN}
        for t in ("mimi", "mimi_decoder", "pocket_tts_audio_tokenizer", "pocket_tts_audio_tokenizer_decoder")
    },
    "mobilevitv2": {"image_size": 64},
    "tvp": {"max_img_size": 64, "visual_prompt_size": 8, "num_frames": 2},
    "informer": {"prediction_length": 4, "context_length": 8},
    "time_series_transformer": {"prediction_length": 4, "context_length": 8},
    # DETR-like detectors: fewer queries than the tiny image has anchors
    **{
        t: {"num_queries": 4}
        for t in ("rt_detr", "rt_detr_v2", "d_fine", "deimv2", "pp_doclayout_v3", "pp_doclayout_v4")
    },
    # state-space mixers: heads × head size = expand × the shrunk width, one group
    "mamba2": {"expand": 1, "n_groups": 1},
    "granitemoehybrid": {
        "layer_types": ["linear_attention", "full_attention"],
        "mamba_n_heads": 8,
        "mamba_d_head": 8,
        "mamba_n_groups": 1,
        "mamba_d_state": 16,
        "mamba_chunk_size": 16,
    },
    "recurrent_gemma": {"block_types": ["recurrent", "attention"]},
    "gemma3n_text": {"num_kv_shared_layers": 0},
    "efficientnet": {"hidden_dim": 2560},  # its last convolution's width (round_filters(1280))
    "levit": {"patch_size": 16},  # its patch embedding always downsamples 16×
    "sapiens2": {
        "num_key_value_heads_per_layer": [2, 2],
        "num_key_value_attention_heads": 2,
        "num_first_full_attention_layers": 1,
        "num_last_full_attention_layers": 1,
    },
    "xlstm": {"embedding_dim": 32, "num_blocks": 2, "num_heads": 4},
    "vjepa2": {"pred_num_hidden_layers": 2, "pred_num_attention_heads": 4, "pred_hidden_size": 32},
    "reformer": {"axial_pos_embds_dim": (16, 16), "axial_pos_shape": (4, 16), "attn_layers": ("local", "local")},
    "fastspeech2_conformer_hifigan": {"model_in_dim": 16},
    "layoutlmv3": {"coordinate_size": 4, "shape_size": 8, "input_size": 32},
    "lilt": {"hidden_size": 48},  # its six layout embeddings split the width
    # SAM: the vision neck's width is the prompt encoder's and the mask decoder's; its image
    # embedding is the tiny image's patch grid
    **{
        f"{t}_vision_model": {"output_channels": HIDDEN, "window_size": 2, "num_pos_feats": 16}
        for t in ("sam", "sam_hq")
    },
    **{f"{t}_prompt_encoder": {"image_embedding_size": 4} for t in ("sam", "sam_hq")},
    # SAM 2's Hiera: four stages from 32 channels, one block each, windows of 2, a 64-pixel image;
    # its neck takes the stages' widths and the feature maps' sizes
    "sam2_hiera_det_model": {
        "embed_dim_per_stage": [32, 64, 128, 256],
        "blocks_per_stage": [1, 1, 1, 1],
        "num_attention_heads_per_stage": [1, 2, 4, 8],
        "window_size_per_stage": [2, 2, 2, 2],
        "global_attention_blocks": [],  # a global block may not start a stage (its window 0 is pooled)
        "window_positional_embedding_background_size": [2, 2],
        "image_size": [64, 64],
    },
    "sam2_vision_model": {
        "backbone_channel_list": [256, 128, 64, 32],
        "backbone_feature_sizes": [[16, 16], [8, 8], [4, 4]],
    },
    "step3p5": {"sliding_window": 8, "num_sliding_attention_heads": 4},  # Step 3.7's text model
    "bridgetower": {"hidden_size": 64},  # its cross-modal attention has width // 64 heads
    "bridgetower_vision_model": {"hidden_size": 64},
    "bridgetower_text_model": {"hidden_size": 64},
    "align": {"projection_dim": 640},  # its EfficientNet's pooled width (320 channels × 2)
    "yolos": {"image_size": [32, 32], "num_detection_tokens": 4},
    # Q-Former models: a placeholder id for the query outputs in the text (none by default)
    **{t: {"image_token_id": 3} for t in ("blip-2", "instructblip")},
    "instructblipvideo": {"video_token_id": 3},
    # its projection after two stride-2 convolutions takes the first one's channels // 4 as the
    # mel bins (128 unshrunk): 16 channels for the sweep's 16 bins
    "gemma4_audio": {"subsampling_conv_channels": [16, 32]},
    # block attention without grouped keys and values (its reshape uses the query heads)
    **{t: {"num_key_value_heads": 4} for t in ("granite_speech5_ctc", "granite_speech5_encoder")},
    "radio": {"patch_dim": 3 * 8 * 8},  # channels × patch² of the shrunk 8-pixel patch
    # no projection around the quantiser: its codebook is the encoder's width
    **{t: {"codebook_dim": HIDDEN} for t in ("wavtokenizer", "wavtokenizer_encoder")},
    # codecs with a semantic encoder: the quantiser takes acoustic | semantic features (2 × 32),
    # rotary attention without key/value groups
    **{t: {"quantization_dim": 2 * HIDDEN, "num_key_value_heads": 4} for t in ("neucodec", "xcodec2")},
    "lightglue": {"descriptor_dim": HIDDEN},  # its keypoints' descriptors enter at its width
    # latent attention with its query head size stated apart (nope + rope), and 4 zero experts
    "longcat_flash": {"qk_head_dim": 8, "zero_expert_num": 4},
    # rotary on part of an 8-wide head (the shrink's rope-only head leaves none for the rest);
    # output groups that divide the 4 heads, a low-rank output at the tiny width
    "deepseek_v4": {"head_dim": 8, "o_groups": 2, "o_lora_rank": 16},
    # its cache slots: layers per stack × H cycles × (L cycles + 1) = the 2 layers
    "hrm_text": {"num_layers_per_stack": 1, "H_cycles": 1, "L_cycles": 1, "L_bp_cycles": [1]},
    "muse_spark_audio": {"hidden_sizes": (HIDDEN,) * 4},  # its four downsampling stages at the tiny width
    # Dia's decoder's cross-attention sizes are named apart (16 heads of 128 unshrunk)
    "dia_decoder": {"cross_num_attention_heads": 4, "cross_head_dim": 8, "cross_num_key_value_heads": 2},
    # the Omni thinkers' rotary index reads vision_start_token_id, which their config class does not
    # define: an id the sweep's texts do not hold (text-only, no vision start)
    **{t: {"vision_start_token_id": 4} for t in ("qwen2_5_omni_thinker", "qwen3_omni_moe_thinker")},
}


def _set(cfg, key: str, value) -> None:
    try:
        setattr(cfg, key, value)
    except Exception:
        pass


def _get(cfg, key: str):
    """``getattr(cfg, key, None)``, None where the config refuses to say (Gemma 4's per-layer
    attributes raise on the whole config)."""
    try:
        return getattr(cfg, key, None)
    except Exception:
        return None


DEPTH_KEYS = ("num_hidden_layers", "n_layer", "n_layers", "num_layers", "decoder_layers", "encoder_layers")


#: the prefixes of a hybrid's other attention layers' sizes (sliding-window, linear, indexer)
HYBRID_PREFIXES = ("swa_", "linear_", "index_")


def _shrink_prefixed(cfg) -> None:
    """The head sizes of a hybrid's other kind of layer, named with a prefix
    (``swa_num_attention_heads``, ``linear_num_heads``, ``index_n_heads``, ``linear_head_dim``):
    4 heads, 2 key/value heads, 8 wide, as the main attention's. Unshrunk, the two layers of a
    hybrid disagree in head count (64 vs 4) and the adapter rightly refuses the type."""
    for key, value in list(vars(cfg).items()):
        if key in SIZE_KEYS or not isinstance(value, int) or isinstance(value, bool):
            continue
        if not key.startswith(HYBRID_PREFIXES):  # not mamba_ (its mixer ties heads to the width), encoder_, …
            continue
        if key.endswith(("_num_attention_heads", "_num_heads", "_n_heads")):
            _set(cfg, key, 4)
        elif key.endswith(("_num_key_value_heads", "_num_kv_heads")):
            _set(cfg, key, 2)
        elif key.endswith("_head_dim") and key not in ("qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"):
            _set(cfg, key, 8)


#: size fields named by a suffix (a sub-module's own width: X-CLIP's ``mit_hidden_size``, a
#: vision tower's ``out_hidden_size`` into the shrunk text model, CLAP's patch embedding)
SUFFIX_SIZES = {"_hidden_size": HIDDEN, "_intermediate_size": 64, "_embed_dim": HIDDEN}


#: suffixed sizes another size must equal (MobileBERT's true_hidden_size is its bottleneck's)
SUFFIX_KEEP = ("true_hidden_size",)


def _shrink_suffixed(cfg) -> None:
    for key, value in list(vars(cfg).items()):
        if key in SIZE_KEYS or key in SUFFIX_KEEP or not isinstance(value, int) or isinstance(value, bool):
            continue
        for suffix, size in SUFFIX_SIZES.items():
            if key.endswith(suffix) and value > size:
                _set(cfg, key, size)


def _shrink_stages(cfg) -> None:
    """Hierarchical vision backbones (Swin, Swin V2, Donut, MaskFormer-Swin, Swin2SR, ConvNeXt,
    LeViT …): one block per stage, the stages' widths doubling from the shrunk ``embed_dim``
    with one 32-wide head per 32 channels (every stage's width divides by its heads), a window
    of 2 patches, and ``hidden_size`` the last stage's width as the model computes it."""
    depths, heads, embed = _get(cfg, "depths"), _get(cfg, "num_heads"), _get(cfg, "embed_dim")
    if isinstance(depths, (list, tuple)) and len(depths) > 1:
        stages = _get(cfg, "stage_names")  # a backbone names its stages: keep them all
        n = len(stages) - 1 if isinstance(stages, list) and len(stages) > len(depths) else len(depths)
        _set(cfg, "depths", [1] * n)
        if isinstance(_get(cfg, "num_layers"), int):
            _set(cfg, "num_layers", n)
        if isinstance(heads, (list, tuple)) and isinstance(embed, int):
            _set(cfg, "num_heads", [max(1, embed * 2**i // 32) for i in range(n)])
            _set(cfg, "hidden_size", embed * 2 ** (n - 1))
            if isinstance(_get(cfg, "window_size"), int):
                _set(cfg, "window_size", 2)
            if isinstance(_get(cfg, "patch_size"), int):
                _set(cfg, "patch_size", 4)
                if isinstance(_get(cfg, "image_size"), int):  # the last stage still 2 × 2 patches
                    _set(cfg, "image_size", 4 * 2**n)
        if isinstance(_get(cfg, "num_stages"), int):
            _set(cfg, "num_stages", n)


def _shrink_per_layer(cfg, before: int, after: int) -> None:
    """Lists with one entry per layer (``layer_types``, ``mlp_only_layers`` of the full
    depth, …) cut to the shrunk depth. A hybrid's first layers are often all linear attention
    or state-space layers (Qwen3-Next: three linear layers per full one): where the cut would
    leave no attention layer the original list had, its last entry becomes that layer type."""
    for key, value in list(vars(cfg).items()):
        if not isinstance(value, list) or len(value) != before or before <= after:
            continue
        cut = value[:after]
        kinds = list(dict.fromkeys(v for v in value if isinstance(v, str)))
        attention = [v for v in kinds if "attention" in v and "linear" not in v]
        if attention and not any(v in attention for v in cut):
            cut[-1] = attention[0]
        elif len(kinds) > 1 and len(set(cut) & set(kinds)) == 1:  # two kinds of layer: keep both
            cut[-1] = next(v for v in kinds if v != cut[0])
        _set(cfg, key, cut)


def _shrink_rope_sections(cfg) -> None:
    """Multimodal rotary sections (``mrope_section``, Qwen2-VL's temporal/height/width split
    of the rotary half) rescaled to the shrunk head: they must sum to ``head_dim // 2``."""
    head = _get(cfg, "head_dim")
    if not isinstance(head, int):
        width, heads = _get(cfg, "hidden_size"), _get(cfg, "num_attention_heads")
        head = width // heads if isinstance(width, int) and isinstance(heads, int) and heads else None
    partial = _get(cfg, "partial_rotary_factor")
    if isinstance(head, int) and isinstance(partial, float) and 0 < partial < 1:
        head = int(head * partial)  # GLM-4V: rotary on half the head
    for key in ("rope_parameters", "rope_scaling"):
        rope = _get(cfg, key)
        if not isinstance(head, int) or not isinstance(rope, dict):
            continue
        rotary = head
        partial = rope.get("partial_rotary_factor")
        if isinstance(partial, float) and 0 < partial < 1 and not isinstance(_get(cfg, "partial_rotary_factor"), float):
            rotary = int(head * partial)
        if "mrope_section" in getattr(type(cfg), "ignore_keys_at_rope_validation", ()) and "mrope_section" not in rope:
            rope["mrope_section"] = [0, 0, 0]  # the model's own default ([16, 24, 24]) is for a 128-wide head
        for name in ("mrope_section", "mrope_sections"):
            sections = rope.get(name)
            if isinstance(sections, list) and sections and sum(sections) != rotary // 2:
                n, total = len(sections), rotary // 2
                rope[name] = [total // n + (1 if i < total % n else 0) for i in range(n)]


def _shrink(cfg, vocab: int, depth: int, max_depth: int = 2) -> None:
    from transformers import PretrainedConfig

    depth_before = next((v for k in DEPTH_KEYS if isinstance(v := _get(cfg, k), int)), None)
    for key, value in SIZE_KEYS.items():
        current = _get(cfg, key)
        if isinstance(current, int) and not isinstance(current, bool):
            _set(cfg, key, min(value, current) if key in NEVER_GROW else value)
    _shrink_prefixed(cfg)
    _shrink_suffixed(cfg)
    depth_after = next((v for k in DEPTH_KEYS if isinstance(v := _get(cfg, k), int)), None)
    if depth_before and depth_after:
        _shrink_per_layer(cfg, depth_before, depth_after)
    _shrink_stages(cfg)
    if "head_dim" in vars(cfg) and vars(cfg)["head_dim"] is None:  # Ministral, HunYuan: None is not derived
        _set(cfg, "head_dim", SIZE_KEYS["head_dim"])
    _shrink_rope_sections(cfg)
    if isinstance(_get(cfg, "num_key_value_heads"), int) or (
        "num_key_value_heads" in vars(cfg) and vars(cfg)["num_key_value_heads"] is None
    ):  # None (Nemotron) is not derived either
        cfg.num_key_value_heads = 2
    if isinstance(_get(cfg, "qk_rope_head_dim"), int) and hasattr(cfg, "head_dim"):
        _set(cfg, "head_dim", cfg.qk_rope_head_dim)  # multi-head latent attention: rotary on the rope part
    if isinstance(_get(cfg, "qk_rope_head_dim"), int) and isinstance(_get(cfg, "num_key_value_heads"), int):
        _set(
            cfg, "num_key_value_heads", (_get(cfg, "num_attention_heads") or 4)
        )  # latent attention: no key/value groups
    for key, value in TWEAKS.get((_get(cfg, "model_type") or ""), {}).items():
        _set(cfg, key, value)
    for key, value in {"num_experts_per_tok": 2, "vocab_size": vocab}.items():  # None is not derived (ESM, DeepSeek-V2)
        if key in vars(cfg) and vars(cfg)[key] is None:
            _set(cfg, key, value)
    if isinstance(_get(cfg, "vocab_size"), int):
        cfg.vocab_size = vocab
    positions = _get(cfg, "max_position_embeddings")
    if isinstance(positions, int):  # XLNet's raises (no limit): left alone
        _set(cfg, "max_position_embeddings", max(positions, 128) if positions >= 64 else positions)
    if hasattr(cfg, "pad_token_id"):
        _set(cfg, "pad_token_id", 0)
    for key in ("decoder_start_token_id", "bos_token_id", "eos_token_id"):  # ids the shrunk vocabulary has
        value = _get(cfg, key)
        if isinstance(value, int) and isinstance(_get(cfg, "vocab_size"), int) and value >= cfg.vocab_size:
            _set(cfg, key, 2)
    if depth < max_depth:
        for sub in list(vars(cfg).values()):
            if isinstance(sub, PretrainedConfig):
                _shrink(sub, vocab, depth + 1, max_depth)


def model_class(model_type: str):
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    name = MODEL_MAPPING_NAMES[model_type]
    name = name[0] if isinstance(name, (tuple, list)) else name
    return getattr(transformers, name)


def build_model(model_type: str, tokenizer):
    import torch

    cfg = tiny_config(model_type, len(tokenizer))
    cls = model_class(model_type)
    own = getattr(cls, "config_class", None)
    if isinstance(own, type) and not isinstance(cfg, own):  # MusicGen's model is its decoder: its own sub-config
        cfg = next((v for v in vars(cfg).values() if isinstance(v, own)), cfg)
    torch.manual_seed(0)
    model = cls(cfg)
    languages = getattr(cfg, "languages", None)
    if hasattr(model, "set_default_language") and languages:  # X-MOD: one adapter per language
        model.set_default_language(languages[0])
    return model.eval()


# ---- the checks ------------------------------------------------------------------------
TEXTS = ["The cat sat on the mat.", "A longer sentence, with commas, that makes the batch ragged."]
TARGETS = ["le chat", "une phrase plus longue avec des virgules"]
REF_KEYS = {"encoder": "encoder_attentions", "decoder": "decoder_attentions", "cross": "cross_attentions"}


def texts_for(adapter) -> tuple[list, list]:
    """``(TEXTS, TARGETS)``, or their first pair alone for a model that runs one length per
    batch (``adapter.batching``: its padding leaks, so a ragged batch has no exact reference)."""
    from probe.models.batching import ONE_LENGTH

    n = 1 if adapter.batching == ONE_LENGTH else len(TEXTS)
    return TEXTS[:n], TARGETS[:n]


def inputs_for(adapter) -> tuple[dict, dict]:
    """Model inputs (text through the adapter's tokenizer, or the non-text inputs the model's
    own forward ran on: :func:`sweep_inputs.working_inputs`) and, per stack, the real
    (query, key) lengths of each example."""
    if adapter.input_name != "input_ids":
        return working_inputs(adapter.model, _tokenizer()), {"encoder": None, "decoder": None}
    texts, targets = texts_for(adapter)
    encs = [adapter.encode(t) for t in texts]
    inputs = adapter.batch(encs)
    lengths = {"encoder": [len(e) for e in encs], "decoder": [len(e) for e in encs]}
    if adapter.arch == "encoder-decoder":
        tencs = [adapter.encode(t, target=True) for t in targets]
        inputs.update(adapter.decoder_inputs(tencs))
        lengths["decoder"] = [len(t) for t in tencs]
    return inputs, lengths


def example_features(model, name: str, batch: int = 2) -> dict:
    """Seeded random non-text inputs of the shape the model's config implies:
    ``pixel_values`` ``[batch, channels, size, size]``, ``input_features`` ``[batch, mel bins,
    2 × source positions]`` (Whisper), ``input_values`` ``[batch, samples]``."""
    import torch

    cfg = model.config
    g = torch.Generator().manual_seed(0)
    dtype = next(model.parameters()).dtype
    if name == "pixel_values":
        size = getattr(cfg, "image_size", 32)
        size = size[0] if isinstance(size, (list, tuple)) else size
        x = torch.randn(batch, getattr(cfg, "num_channels", 3), size, size, generator=g)
    elif name == "input_features":
        frames = 2 * getattr(cfg, "max_source_positions", 8)
        x = torch.randn(batch, getattr(cfg, "num_mel_bins", 16), frames, generator=g)
    elif name == "input_values" and isinstance(getattr(cfg, "num_mel_bins", None), int):  # spectrogram patches
        x = torch.randn(batch, getattr(cfg, "max_length", 64), cfg.num_mel_bins, generator=g)
    elif name == "input_values":
        x = torch.randn(batch, 1600, generator=g)
    else:
        raise UnsupportedInput(f"the sweep makes no {name!r} inputs")
    inputs = {name: x.to(dtype)}
    import inspect

    image, patch = getattr(cfg, "image_size", 32), getattr(cfg, "patch_size", 8)
    if (
        "noise" in inspect.signature(model.forward).parameters
        and name == "pixel_values"
        and isinstance(image, int)
        and isinstance(patch, int)
    ):  # ViT-MAE's masking (Hiera, with per-axis sizes, draws its own)
        size = image // patch
        inputs["noise"] = torch.rand(batch, size * size, generator=g)
    if getattr(cfg, "is_encoder_decoder", False):
        start = getattr(cfg, "decoder_start_token_id", None) or 0
        start = start if start < (getattr(cfg, "vocab_size", None) or 0) else 0
        inputs["decoder_input_ids"] = torch.tensor([[start, 5, 6, 7]] * batch)
    return inputs


def own_forward(model, tokenizer) -> dict:
    """The tiny model's own forward on the sweep's inputs, without the toolkit: the first input
    set of its kind that runs (:mod:`sweep_inputs`), returned."""
    return working_inputs(model, tokenizer)


def eager_reference(model, inputs: dict):
    """The model's own eager forward with ``output_attentions=True``."""
    import torch

    prev = model.config._attn_implementation
    dynamic = type(model)._can_set_attn_implementation()
    try:
        if dynamic:
            model.set_attn_implementation("eager")
        else:
            model.config._attn_implementation_internal = "eager"
    except Exception:
        model.config._attn_implementation_internal = "eager"
    try:
        with torch.no_grad():
            return model(**inputs, output_attentions=True)
    finally:
        try:
            if dynamic:
                model.set_attn_implementation(prev)
            else:
                model.config._attn_implementation_internal = prev
        except Exception:
            model.config._attn_implementation_internal = prev


def reference_key(adapter, stack: str) -> str:
    """The output field holding ``stack``'s own eager maps (an encoder's cross-attention
    stack, BLIP-2's Q-Former: ``cross_attentions``)."""
    return REF_KEYS[stack] if adapter.arch == "encoder-decoder" or stack == "cross" else "attentions"


def own_maps(ref, key: str):
    """``ref``'s maps under ``key``; for ``attentions``, without the cross-attention maps a model
    records there too (BLIP-2's Q-Former: one attention class for both, so its ``attentions``
    interleave layer 0's self-, layer 0's cross- and layer 1's self-attention)."""
    want = getattr(ref, key, None)
    cross = getattr(ref, "cross_attentions", None) if key == "attentions" else None
    if want is None or not cross:
        return want
    return tuple(w for w in want if not any(w is c for c in cross))


def main_output(out):
    import torch

    for key in ("last_hidden_state", "encoder_last_hidden_state"):
        v = getattr(out, key, None)
        if torch.is_tensor(v):
            return v
    items = list(out.values()) if hasattr(out, "values") else list(out)
    while items:  # the first tensor, nested tuples included (MGP-STR's logits per head)
        v = items.pop(0)
        if torch.is_tensor(v):
            return v
        if isinstance(v, (tuple, list)):
            items = list(v) + items
    raise RuntimeError("the model's output holds no tensor")


def check_capture(adapter, inputs: dict, lengths: dict) -> dict:
    """Max |Δ| between captured maps and eager ``output_attentions``, per stack."""
    import torch

    from probe.runs.capture import capture, capture_inputs

    try:
        ref = eager_reference(adapter.model, inputs)
    except Exception as e:
        if lengths["encoder"] is not None:  # text the model cannot run on alone: the toolkit's refusal first
            from probe.models.architectures import UnsupportedModel

            try:
                capture(adapter, TEXTS[:1], stack=adapter.default_stack)
            except UnsupportedModel:
                raise
            except Exception:  # the model's own error (UDOP without boxes): no reference, as below
                pass
        return {"status": "no reference", "reason": f"the model's own eager forward fails: {_line(e)}"}
    worst, source, vals = 0.0, "", None
    sinks = False
    for stack in adapter.stacks:
        values = value_projections(adapter, stack) if has_sinks(adapter, stack) else None
        sinks = values is not None  # sinks, and values to check the maps' scale against
        key = reference_key(adapter, stack)
        want = own_maps(ref, key)
        if want is None or len(want) == 0 or any(w is None for w in want):
            return {"status": "no reference", "reason": f"eager forward returned no {key}"}
        if lengths["encoder"] is None:  # images, audio
            maps = capture_inputs(adapter, inputs, stack=stack)
        else:  # text, as a user captures it (padding trimmed per example)
            enc_dec = adapter.arch == "encoder-decoder"
            texts, targets = texts_for(adapter)
            maps = capture(adapter, texts, stack=stack, targets=targets if enc_dec else None)
        source = maps[0].meta["attention_source"]
        want = torch.stack(list(want))
        for i, m in enumerate(maps):
            got, ref_i = m.attentions, want[:, i]
            if lengths["encoder"] is not None:
                ref_i = ref_i[..., : got.shape[-2], : got.shape[-1]]
            if tuple(got.shape) != tuple(ref_i.shape) or got.shape[-2] != (
                ref_i.shape[-2]
                if lengths["encoder"] is None
                else lengths["decoder" if stack in ("decoder", "cross") else "encoder"][i]
            ):
                return {
                    "status": "failed",
                    "reason": f"{stack}: captured {tuple(got.shape)} vs eager {tuple(want[:, i].shape)}",
                }
            if sinks:  # rows sum to the keys' share, or (Granite-SWA's report) to 1: compare shapes
                got = got / got.sum(-1, keepdim=True).clamp_min(1e-30)
                ref_i = ref_i / ref_i.sum(-1, keepdim=True).clamp_min(1e-30)
            worst = max(worst, (got.double() - ref_i.double()).abs().max().item())
        if sinks:
            vals = max(vals or 0.0, values_delta(adapter, inputs, stack, maps, values))
            worst = max(worst, vals)
    out: dict = {"capture_delta": worst, "attention_source": source}
    if vals is not None:
        out.update(reference=SINK_REFERENCE, values_delta=vals)
    return out


#: how a row with learned sinks is checked (recorded in the row, explained in docs/coverage.md)
SINK_REFERENCE = (
    "learned sink: captured maps row-normalised vs eager output_attentions, and maps x values "
    "vs the output projection's input, per head"
)


def has_sinks(adapter, stack: str) -> bool:
    """Whether the stack's attention modules carry a learned per-head sink (``sinks``:
    gpt-oss, Granite-SWA): an extra softmax logit whose share is no key's."""
    import torch

    return any(torch.is_tensor(getattr(m, "sinks", None)) for m in adapter.attention_modules(stack))


def value_projections(adapter, stack: str):
    """Each layer's value projection (a Linear child named like one, :data:`VALUE_NAMES`),
    read here from the attention modules, or None when a layer has none (a fused or latent
    key/value projection: HY-V4's sinks are then checked against the eager report as it is)."""
    import torch

    from probe.models.architectures import VALUE_NAMES

    out = []
    for m in adapter.attention_modules(stack):
        children = {name.lower(): sub for name, sub in m.named_children()}
        found = [children[n] for n in VALUE_NAMES if isinstance(children.get(n), torch.nn.Linear)]
        if not found:
            return None
        out.append(found[0])
    return out


def values_delta(adapter, inputs: dict, stack: str, maps, values: list) -> float:
    """Max |Δ| between ``maps[i][l, h] @ V_h`` (``values``: the layers' value projections,
    :func:`value_projections`) and the model's own input to the output projection (head ``h``'s slice), over every layer, head and real query of ``stack``.

    Convention-independent: whatever the model reports as ``output_attentions``, the weights
    that really mix the values are the ones whose product with the values is the output
    projection's input. ``V`` ``[batch, key, kv_heads * head_dim]`` is read by a forward hook
    on the layer's value projection and the output projection's input ``[batch, query, heads
    * head_dim]`` by a forward-pre hook, both registered here (not the toolkit's capture);
    grouped key/value heads are repeated as the model repeats them (head h reads key/value
    head ``h // (heads / kv_heads)``); a module's ``v_scale`` (MiMo-V2-Flash multiplies the
    value projection's output by it) is applied.
    """
    import torch

    projs = adapter.head_output_modules(stack)
    seen: dict = {"v": {}, "o": {}}

    def keep(kind, module, tensor):
        seen[kind].setdefault(id(module), []).append(tensor.detach())

    handles = [m.register_forward_hook(lambda m, a, out: keep("v", m, out)) for m in set(values)]
    handles += [m.register_forward_pre_hook(lambda m, a: keep("o", m, a[0])) for m in set(projs)]
    try:
        with torch.no_grad():
            adapter.model(**inputs)
    finally:
        for h in handles:
            h.remove()
    heads = adapter.n_heads
    worst = 0.0
    attention = adapter.attention_modules(stack)
    for layer, (vm, om) in enumerate(zip(values, projs)):
        v = seen["v"][id(vm)][sum(1 for m in values[:layer] if m is vm)]
        o = seen["o"][id(om)][sum(1 for m in projs[:layer] if m is om)]
        scale = getattr(attention[layer], "v_scale", None)  # MiMo-V2-Flash scales v_proj's output
        v = v * scale if isinstance(scale, (int, float)) or torch.is_tensor(scale) else v
        dh = o.shape[-1] // heads  # the value head width (MLA-like types: not the query's)
        kv = v.shape[-1] // dh  # per layer (MiMo's sliding layers have more key/value heads)
        for i, m in enumerate(maps):
            a = m.attentions[layer].double()  # [head, query, key]
            q, k = a.shape[-2], a.shape[-1]
            for h in range(heads):
                g = h // (heads // kv)
                mixed = a[h] @ v[i, :k, g * dh : (g + 1) * dh].double()
                worst = max(worst, (mixed - o[i, :q, h * dh : (h + 1) * dh].double()).abs().max().item())
    return worst


def _config_head_size(cfg, layer: int = 0) -> int | None:
    """The per-head width a config states for ``layer`` (``head_dim``, ``d_kv``,
    ``v_head_dim``, or hidden size over heads; a per-layer config's where the config has
    one, as Gemma 4; its ``text_config`` where it has one), or None."""
    per_layer = _get(cfg, "per_layer_config")
    if isinstance(per_layer, dict):
        own = per_layer.get(layer, per_layer.get(f"{layer:02d}", per_layer.get(str(layer))))
        v = own.get("head_dim") if isinstance(own, dict) else _get(own, "head_dim")
        if isinstance(v, int) and v > 0:
            return v
    for c in (cfg, _get(cfg, "text_config")):
        for k in ("v_head_dim", "head_dim", "d_kv", "attention_head_size"):
            v = _get(c, k)
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                return v
        width = next(
            (getattr(c, k) for k in ("hidden_size", "d_model", "n_embd") if isinstance(getattr(c, k, None), int)), None
        )
        heads = next(
            (
                getattr(c, k)
                for k in ("num_attention_heads", "n_head", "num_heads")
                if isinstance(getattr(c, k, None), int)
            ),
            None,
        )
        if width and heads and width % heads == 0:
            return width // heads
    return None


def _value_child(module):
    """The attention module's own value projection (a Linear child named like one), or None."""
    import torch

    from probe.models.architectures import VALUE_NAMES

    children = {name.lower(): sub for name, sub in module.named_children()}
    return next((children[n] for n in VALUE_NAMES if isinstance(children.get(n), torch.nn.Linear)), None)


def reference_head_columns(adapter, inputs: dict, stack: str, layer: int, head: int) -> dict:
    """Where head ``head`` of layer ``layer`` sits in the output projection's input, found from
    the model's own computation, never from the adapter's head size or head count.

    One eager forward with ``output_attentions`` records the layer's weights ``P``
    ``[batch, heads, query, key]`` (the head count is P's), the value projection's output
    ``V`` and the output projection's input ``O`` ``[batch, query, width]``. For each head
    size ``d`` the config or the module suggests (``v_head_dim``/``head_dim``/``d_kv``, hidden
    over the config's heads, the module's ``attention_head_size``, width over P's heads) the
    head's own output ``P_h @ V_g`` (``g`` its key/value group) is looked for among the
    ``d``-wide windows of ``O``; the window it equals (max |Δ| ≤ 1e-4 of the head's largest output) is the head's
    columns: ``source`` ``"values"``. Where no value projection is found or none matches
    (values normalised after the projection, a learned sink's rescaling), the config's head
    size places head ``h`` at ``h·d``: ``source`` ``"config"``, where the heads at that size
    fill the input; else the input's width over P's heads: ``source`` ``"width / heads"`` (no
    independent statement; counted apart in docs/coverage.md).

    Returns ``{"columns": (start, stop), "width": W, "heads": n, "source": ...}``.
    """
    import torch

    attention = adapter.attention_modules(stack)
    projs = adapter.head_output_modules(stack)
    module, proj = attention[layer], projs[layer]
    call = sum(1 for m in projs[:layer] if m is proj)  # shared modules (ALBERT): which call
    value = _value_child(module)
    seen: dict = {"v": [], "o": []}
    handles = [proj.register_forward_pre_hook(lambda m, a: seen["o"].append(a[0].detach()))]
    if value is not None:
        handles.append(value.register_forward_hook(lambda m, a, out: seen["v"].append(out.detach())))
    try:
        torch.manual_seed(0)
        ref = eager_reference(adapter.model, inputs)
    finally:
        for h in handles:
            h.remove()
    probs = own_maps(ref, reference_key(adapter, stack))[layer].double()  # [batch, heads, query, key]
    heads = probs.shape[1]
    if len(seen["o"]) <= call:
        raise RuntimeError(
            f"the output projection of layer {layer} ({type(proj).__name__}) never ran as a module in the eager "
            "forward: no input of it to zero by hand"
        )
    o = seen["o"][call].double()
    width = o.shape[-1]
    cfg = adapter.model.config
    from_config = _config_head_size(cfg, layer)
    mask = inputs.get("attention_mask")
    valid = (
        mask.bool()
        if torch.is_tensor(mask) and mask.dim() == 2 and tuple(mask.shape) == tuple(o.shape[:2])
        else torch.ones(o.shape[:2], dtype=torch.bool)
    )
    if value is not None and len(seen["v"]) > call and o.dim() == 3:
        v = seen["v"][call].double()
        scale = getattr(module, "v_scale", None)  # MiMo-V2-Flash scales v_proj's output
        v = v * scale if isinstance(scale, (int, float)) or torch.is_tensor(scale) else v
        stated = getattr(module, "attention_head_size", None)
        sizes = [from_config, stated if isinstance(stated, int) else None, width // heads]
        for d in dict.fromkeys(x for x in sizes if x and x <= width):
            if v.shape[-1] % d or v.shape[1] != probs.shape[-1]:
                continue
            kv = v.shape[-1] // d
            if heads % kv:
                continue
            g = head // (heads // kv)
            z = probs[:, head] @ v[..., g * d : (g + 1) * d]  # [batch, query, d]: the head's own output
            if z.shape[:2] != o.shape[:2]:  # a sequence-first projection input (MLCD): no window to match
                continue
            windows = o.unfold(-1, d, 1)  # [batch, query, width - d + 1, d]
            diff = (windows - z[:, :, None, :])[valid].abs().amax(dim=(0, -1))  # per window start
            # relative to the head's own output: values near 0 (D-FINE's encoder on a one-position
            # map) would otherwise match every window within an absolute tolerance
            tol = 1e-4 * max(z[valid].abs().max().item(), 1e-12)
            hits = (diff <= tol).nonzero().flatten().tolist()
            if hits:
                start = hits[0]
                return {"columns": (start, start + d), "width": width, "heads": heads, "source": "values"}
    if from_config and from_config * heads == width:
        return {
            "columns": (head * from_config, (head + 1) * from_config),
            "width": width,
            "heads": heads,
            "source": "config",
        }
    d = width // heads  # the config's size does not fill the projection's input: the reference is the old rule's
    return {"columns": (head * d, (head + 1) * d), "width": width, "heads": heads, "source": "width / heads"}


def check_ablation(adapter, inputs: dict) -> dict:
    """Zero-ablate head (1, 2) with the toolkit vs an independent pre-hook that zeroes the
    head's own columns of the output projection's input (found by
    :func:`reference_head_columns` from the model's computation, not from the adapter) on
    that layer's call only."""
    import torch

    from probe.interventions.heads import HeadIntervention
    from probe.tracing.edits import Zero

    stack = adapter.default_stack
    layer = 1 if adapter.n_layers_of(stack) > 1 else 0
    head = min(2, adapter.n_heads - 1)
    projs = adapter.head_output_modules(stack)
    proj = projs[layer]
    call_of_layer = sum(1 for m in projs[:layer] if m is proj)  # shared modules: which call
    intervention = HeadIntervention(adapter, {layer: Zero(head=head)}, stack=stack)  # the toolkit's refusals first
    where = reference_head_columns(adapter, inputs, stack, layer, head)
    start, stop = where["columns"]
    mask = inputs.get("attention_mask")

    def run():  # seeded: a stochastic forward (VITS's duration predictor draws noise) repeats itself
        torch.manual_seed(0)
        with torch.no_grad():
            return main_output(adapter.model(**inputs))

    calls = [0]

    def by_hand(module, args):
        k = calls[0]
        calls[0] += 1
        if k != call_of_layer:
            return None
        x = args[0].clone()
        x[..., start:stop] = 0
        return (x,) + tuple(args[1:])

    clean = run()
    handle = proj.register_forward_pre_hook(by_hand)
    try:
        want = run()
    finally:
        handle.remove()

    def delta(a, b) -> float:
        if a.shape != b.shape:  # the edit changed the output's length (VITS: the waveform's)
            return float("inf")
        d = a.double() - b.double()
        if mask is not None and d.dim() == 3 and d.shape[:2] == mask.shape:
            d = d[mask.bool()]
        return d.abs().max().item()

    with intervention:
        got = run()
    return {
        "ablation_delta": delta(got, want),
        "ablation_effect": delta(clean, want),
        "head_columns": f"{start}:{stop} of {where['width']} ({where['source']})",
    }


def check_type(model_type: str) -> dict:
    """One row for ``model_type``."""
    row: dict[str, Any] = {"model_type": model_type}
    try:
        row["class"] = model_class(model_type).__name__
        tokenizer = _tokenizer()
        model = build_model(model_type, tokenizer)
    except ImportError as e:
        return {**row, "status": "not built", "reason": f"{MISSING_LIBRARY}: {_line(e)}"}
    except Exception as e:
        return {**row, "status": "not built", "reason": default_fails(model_type) or _line(e)}
    _enter(1)
    try:
        own_forward(model, tokenizer)
    except UnsupportedInput as e:
        return {**row, "status": "not built", "reason": _line(e)}
    except Exception as e:
        return {**row, "status": "not built", "reason": f"its own forward fails: {_line(e)}"}
    from probe.models import ModelAdapter
    from probe.models.architectures import UnsupportedModel as REFUSALS
    from probe.models.architectures import family_for

    _enter(2)
    try:
        adapter = ModelAdapter(
            name=f"tiny-{model_type}", model=model, tokenizer=tokenizer, family=family_for(model_type)
        )
        row.update(
            arch=adapter.arch, stacks="/".join(adapter.stacks), layers=adapter.n_layers, inputs=adapter.input_name
        )
        inputs, lengths = inputs_for(adapter)
        cap = check_capture(adapter, inputs, lengths)
        row.update(cap)
        if "status" in cap:
            return row
        row.update(check_ablation(adapter, inputs))
    except REFUSALS as e:
        return {**row, "status": "refused", "reason": _line(e)}
    except UnsupportedInput as e:
        return {**row, "status": "not built", "reason": _line(e)}
    except TypeError as e:
        if "required positional argument" in str(e) and row.get("inputs") != "input_ids":
            return {**row, "status": "not built", "reason": f"needs inputs the sweep does not make: {_line(e)}"}
        return {**row, "status": "failed", "reason": _line(e), "traceback": traceback.format_exc()[-2000:]}
    except Exception as e:
        return {**row, "status": "failed", "reason": _line(e), "traceback": traceback.format_exc()[-2000:]}
    ok = row["capture_delta"] <= TOL and row["ablation_delta"] <= TOL and row["ablation_effect"] > 0
    row["status"] = "exact" if ok else "failed"
    if not ok:
        row["reason"] = (
            f"capture |Δ| {row['capture_delta']:.1e}, ablation |Δ| {row['ablation_delta']:.1e}, "
            f"effect {row['ablation_effect']:.1e}"
        )
    return row


#: the start of a not-built reason where the type needs a library the toolkit does not install
MISSING_LIBRARY = "needs a library that is not installed here (no dependency of the toolkit)"

#: what kind of not built a reason is, by its start (docs/coverage.md counts them)
NOT_BUILT_KINDS = (
    (MISSING_LIBRARY, "needs a library not installed here (timm, natten, detectron2, torchaudio)"),
    ("its own default config builds no model", "its own default config builds no model in this transformers"),
    ("UnsupportedInput: ", "no single forward over inputs (a video session, no forward at all) or inputs not made"),
    ("", "the sweep's shrink or inputs do not fit the type yet (left to do)"),
)


def _not_built_kind(reason: str) -> str:
    return next(kind for start, kind in NOT_BUILT_KINDS if reason.startswith(start))


def default_fails(model_type: str) -> str | None:
    """Why the type's own default config, unshrunk, builds no model either (built on the meta
    device: no memory), or None where it builds: then only a config from a checkpoint (a
    download) builds the type, and the sweep says so."""
    import torch
    import transformers

    try:
        cfg = transformers.AutoConfig.for_model(model_type, **INIT_KWARGS.get(model_type, {}))
        with torch.device("meta"):
            model_class(model_type)(cfg)
    except Exception as e:
        return (
            f"its own default config builds no model in transformers {transformers.__version__} "
            f"(unshrunk, the same class raises {_line(e)}): only a checkpoint's config would"
        )
    return None


def _line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]


_TOKENIZER = None


def _tokenizer():
    global _TOKENIZER
    if _TOKENIZER is None:
        import transformers
        from probe.models.registry import minilm_path

        _TOKENIZER = transformers.AutoTokenizer.from_pretrained(str(minilm_path()), local_files_only=True)
    return _TOKENIZER


# ---- the sweep -------------------------------------------------------------------------
MEMORY_LIMIT = 3 * 2**30  # address space per type: a config whose size fields the shrink missed fails alone


PHASES = ("building the model", "its own forward", "the toolkit")
_PHASE = None  # a shared counter in forked children: which of PHASES is running


def _enter(phase: int) -> None:
    if _PHASE is not None:
        _PHASE.value = phase


def _child(model_type: str, conn, phase) -> None:
    import resource

    global _PHASE
    _PHASE = phase
    import logging
    import warnings

    import torch

    warnings.filterwarnings("ignore")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    torch.set_num_threads(1)

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT + _address_space(), resource.RLIM_INFINITY))
    try:
        conn.send(check_type(model_type))
    except BaseException as e:
        conn.send({"model_type": model_type, "status": "failed", "reason": _line(e)})
    conn.close()


def _address_space() -> int:
    """This process's virtual memory size in bytes (the child's limit counts from it)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


#: per-type time limits where the default is too short on a loaded machine (NeMo SpeechLM:
#: a composite speech model, 24 s alone, over 200 s with five sessions on two cores)
TIMEOUTS = {"nemo_speechlm": 600.0}


def run_one(model_type: str, timeout: float = TIMEOUT_S) -> dict:
    """``check_type`` in a forked process, killed after ``timeout`` seconds (or the
    type's own limit in :data:`TIMEOUTS`, whichever is longer)."""
    timeout = max(timeout, TIMEOUTS.get(model_type, 0.0))
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    t0 = time.perf_counter()
    phase = ctx.Value("i", 0)
    proc = ctx.Process(target=_child, args=(model_type, child, phase))
    proc.start()
    child.close()
    row: dict | None = None
    if parent.poll(timeout):
        try:
            row = parent.recv()
        except EOFError:
            row = None
    proc.join(5)
    if proc.is_alive():
        proc.kill()
        proc.join()
    if row is None:
        why = f"timed out after {timeout:.0f} s" if proc.exitcode in (None, -9) else f"process died ({proc.exitcode})"
        where = PHASES[phase.value]
        row = {
            "model_type": model_type,
            "status": "failed" if phase.value == 2 else "not built",
            "reason": f"{why} in {where}",
        }
    row["seconds"] = round(time.perf_counter() - t0, 1)
    return row


def _done(model_type: str, folder: Path) -> bool:
    """Whether a row for ``model_type`` is in any row file of ``folder``."""
    needle = f'"model_type": "{model_type}"'
    return any(needle in f.read_text() for f in folder.glob("*.jsonl"))


def all_types() -> list[str]:
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    return sorted(MODEL_MAPPING_NAMES)


def write_outputs(rows: list[dict], version: str, n_types: int) -> None:
    rows = sorted(rows, key=lambda r: r["model_type"])
    DOCS.mkdir(exist_ok=True)
    (DOCS / "coverage.json").write_text(
        json.dumps({"transformers": version, "autmodel_types": n_types, "rows": rows}, indent=1, default=str)
    )
    fields = [
        "model_type",
        "class",
        "status",
        "arch",
        "stacks",
        "inputs",
        "capture_delta",
        "ablation_delta",
        "attention_source",
        "reason",
    ]
    with open(DOCS / "coverage.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    (DOCS / "coverage.md").write_text(markdown(rows, version, n_types))


def markdown(rows: list[dict], version: str, n_types: int) -> str:
    from collections import Counter

    counts = Counter(r["status"] for r in rows)
    lines = [
        "# Coverage: every AutoModel type of the installed transformers",
        "",
        f"Generated by `python bench/coverage_sweep.py` with transformers {version}: {n_types} model types "
        "registered for `AutoModel`, each built as a tiny random model from its default config "
        "(hidden 32, 2 layers, 4 heads, sub-configs shrunk too; per-layer lists such as `layer_types` cut to "
        "two layers keeping both kinds of layer; multimodal rotary sections fitted to the shrunk head; "
        "hierarchical backbones one block per stage; per-type settings in `TWEAKS`; no download), given its "
        "own kind of input (`bench/sweep_inputs.py`: the first input set its own forward runs on — tokens; "
        "pixels at the config's image size, video frames or image pairs; mel features in either layout; "
        "waveforms; a dual encoder's pixels or audio beside its tokens; flattened patches with `grid_thw`; "
        "layout boxes; past values with time features; codec latents) and opened with `ModelAdapter`. "
        "Each type runs in a "
        "forked process with a time and memory limit; on a shared machine run it as parallel workers "
        "(`--shard K/N --jsonl rows-K.jsonl`, a second worker per shard with `--reverse`) and merge the row "
        "files with `--from-jsonl` (a later file's row replaces an earlier one, so types re-run after a fix "
        "replace their first row). This table: one full sweep with one worker, `python bench/coverage_sweep.py "
        "--shard 0/1 --jsonl rows.jsonl` (3.6 min wall on the shared 2-core machine, 10 min while it was "
        "loaded), then `python bench/coverage_sweep.py --from-jsonl rows.jsonl`; the types whose inputs or "
        "settings changed since (issue 40: 30 of them) re-run with `python bench/coverage_sweep.py --update "
        "TYPE ...`, which merges their rows into docs/coverage.json.",
        "",
        f"- **exact**: {counts.get('exact', 0)} — captured maps of every stack equal the model's own eager "
        "`output_attentions` (types with learned sinks: maps × values equal the output projection's input, "
        "see *Learned sinks*) and zero-ablating head L1H2 equals an independent pre-hook that zeroes that "
        "head's own columns of the output projection's input (max |Δ| ≤ "
        f"{TOL:g} each); where those columns are: {_sources(rows)}",
        f"- **refused**: {counts.get('refused', 0)} — the toolkit says why, in one line (grouped below)",
        f"- **failed**: {counts.get('failed', 0)}",
        f"- **no reference**: {counts.get('no reference', 0)} — the model's own eager forward returns no "
        "attentions to compare with",
        f"- **not built**: {counts.get('not built', 0)} ({100 * counts.get('not built', 0) / max(n_types, 1):.0f}% "
        "of the registered types) — the sweep does not build this type or cannot make its inputs (each "
        "listed below with its reason); says nothing about the toolkit",
        "",
    ]
    refused = Counter(_group(r["reason"]) for r in rows if r["status"] == "refused")
    if refused:
        lines += ["## Refused, by reason", "", "| reason | types |", "|---|---|"]
        for reason, _ in refused.most_common():
            types = [r["model_type"] for r in rows if r["status"] == "refused" and _group(r["reason"]) == reason]
            lines.append(f"| {_cell(reason)} | {len(types)}: {', '.join(types)} |")
        lines.append("")
    failed = [r for r in rows if r["status"] in ("failed", "no reference")]
    if failed:
        lines += ["## Failed / no reference, each explained", "", "| type | status | what | why |", "|---|---|---|---|"]
        lines += [
            f"| {r['model_type']} | {r['status']} | {_cell(r.get('reason', ''))} | "
            f"{_cell(EXPLAINED.get(r['model_type'], EXPLAINED.get(r['status'], '')))} |"
            for r in failed
        ]
        lines.append("")
    lines += ["## How the toolkit reads a model", "", *NOTES, ""]
    lines += [
        "## Exact",
        "",
        "| type | stacks | inputs | path | max \\|Δ\\| capture | max \\|Δ\\| ablation | head L1H2's columns |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r["status"] == "exact":
            lines.append(
                f"| {r['model_type']} | {r.get('stacks', '')} | {r.get('inputs', '')} | "
                f"{r.get('attention_source', '')}{'; sink: maps × values' if r.get('reference') else ''} | "
                f"{r['capture_delta']:.1e} | {r['ablation_delta']:.1e} | {r.get('head_columns', '')} |"
            )
    built = Counter(_group(r["reason"]) for r in rows if r["status"] == "not built")
    kinds = Counter(_not_built_kind(r["reason"]) for r in rows if r["status"] == "not built")
    lines += ["", "## Not built by the sweep", "", "| kind | types |", "|---|---|"]
    lines += [f"| {kind} | {kinds[kind]} |" for _, kind in NOT_BUILT_KINDS if kinds.get(kind)]
    lines += ["", "| why | types |", "|---|---|"]
    for reason, _ in built.most_common():
        types = [r["model_type"] for r in rows if r["status"] == "not built" and _group(r["reason"]) == reason]
        lines.append(f"| {_cell(reason)} | {len(types)}: {', '.join(types)} |")
    return "\n".join(lines) + "\n"


#: why a row failed, where it is understood (rendered beside it in docs/coverage.md)
EXPLAINED = {
    "pocket_tts_audio_tokenizer": (
        "a toolkit limitation, not fixed: the codec runs two separate transformers (its encoder's, over the "
        "audio frames, and its decoder's, over the quantised latents); the adapter joins their 2 + 2 "
        "attention modules into one 4-layer 'decoder' stack, while the model's own output_attentions reports "
        "one transformer's 2 layers. Each transformer should be its own stack (or the type refused); the "
        "encoder-only and decoder-only types (pocket_tts_audio_tokenizer_encoder/_decoder) are exact. Mimi, "
        "built the same way, returns no attentions of its own (no reference)"
    ),
    "no reference": (
        "the model's own eager forward returns no attentions (its modules return none, or "
        "its output drops them) or fails on the tiny config, so the captured maps cannot be "
        "checked; not counted exact"
    ),
}

NOTES = [
    (
        "- **Layers by call, not by module.** A short forward at load (two token sequences that differ in "
        "their last token) records the order the attention modules are called: ALBERT's one shared layer "
        "becomes one entry per layer, and the trace tells the layers apart by call (`probe/tracing/layer_calls.py`): "
        "capture, `ablate_heads`, head gates, values, streaming, reweighting and gradients are exact per "
        "layer. The residual stream has no block module per layer there, so the residual cache and the "
        "`resid_*` sites refuse shared layers in one line, and restart is not offered (full forwards)."
    ),
    (
        "- **Causality from behaviour.** The same forward says whether a later token changes an earlier "
        "position's output: CLIP's text model (causal mask built outside its attention modules, "
        "`is_causal=False` on them) is a causal decoder."
    ),
    (
        "- **Discovery by structure.** Output projections are found by name in any case (ModernBERT's `Wo`, "
        "Funnel's `post_proj`) or as the only Linear child that computes no query, key or value; modules a "
        "text input never calls (a multimodal model's vision tower, its projector's cross-attention) are "
        "left out; head counts come from the attention modules themselves."
    ),
    (
        "- **The hook path asks for attentions** (`output_attentions=True`: DeBERTa-v2, MPNet) and refuses "
        "any layout other than `[batch, head, query, key]` (Longformer's local band, Funnel's pooled "
        "queries, CANINE's downsampled layers, CPM-Ant's prompt positions). The weights are the last 4-D "
        "tensor a module returns after its output, so LED's decoder and cross-attention, which return their "
        "cache after the weights, are read (LED's row stays refused for its Longformer encoder)."
    ),
    (
        "- **BigBird** runs with full attention (`attention_type='original_full'`, noted in the adapter's "
        "card and said on stderr when it loads): block-sparse attention has no `[query, key]` map, and BigBird swaps its modules by itself "
        "on short inputs."
    ),
    (
        "- **Padding that leaks** (ConvBERT's span convolution, Nyströmformer's convolution on the values: "
        "layers that mix positions outside the attention mask) is found when the model loads "
        "(`probe.models.batching.padding_check`), noted in the adapter's card (`batching: one length per batch`) and "
        "said on stderr; the toolkit then batches texts of one token length, and these rows compare the capture with "
        "the eager forward of one text (a ragged batch has no exact reference)."
    ),
    (
        "- **Ablation** is refused where the output projection's input is not the heads side by side (a norm "
        "over all heads before it: BitNet's `attn_sub_norm`, differential attention's `groupnorm`; a projection "
        "module that gates the heads' outputs by the layer input before its Linear: Inkling 2's `o_proj`, "
        "found inside it rather than taking the attention's `sink_proj`), or holds other columns beside them: ConvBERT turns `config.head_ratio` of "
        "its heads into a span-based convolution whose outputs follow the attention heads' (2 heads × 8 | "
        "16 convolution columns); the attention module's own `attention_head_size` says so, and width / "
        "heads would have zeroed the convolution half (the old reference, which took the head size from "
        "the adapter, agreed with that and called ConvBERT exact)."
    ),
    (
        "- **The ablation reference** (`reference_head_columns`) takes nothing from the adapter's head size: "
        "one eager forward records the layer's weights P (whose head axis is the head count), its value "
        "projection's output V and the output projection's input O; head h's own output P_h · V_g (g its "
        "key/value group, at each head size the config or the module suggests) is looked for among O's "
        "columns, and the window it equals is zeroed by hand. Where no value projection is named or none "
        "matches (fused q|k|v, values normalised after the projection, a sink's rescaling) the config's "
        "head size places the head, and only where that does not fill O the width over the heads does."
    ),
    (
        "- **Images and audio** (`pixel_values`, `input_features`, `input_values`, and any other main input) "
        "capture through `probe.runs.capture.capture_inputs` and ablate with `HeadIntervention` around the "
        "model's own forward; every text path refuses them in one line. The main input is the class's "
        "`main_input_name` where its forward takes it, else the forward's first required argument (Qwen-VL-like "
        "vision towers keep the default `input_ids` but take `hidden_states` and `grid_thw`; they attend over "
        "all images' patches as one sequence and are refused in one line)."
    ),
    ("- **float64** models are captured in float64 (softmax kept in float64, maps stored in float64)."),
    (
        "- **Learned sinks** (gpt-oss, Granite-SWA, GraniteMoE-SWA, MiMo-V2-Flash, Flint, the OpenAI privacy "
        "filter, HY-V4: a per-head `sinks` logit that takes a share "
        "of every row and belongs to no key): the toolkit reports the *effective* weights, the ones that "
        "multiply the values, so a row sums to the keys' share (1 − the sink's). gpt-oss's own "
        "`output_attentions` reports the same; Granite-SWA's reports the softmax over the keys alone and scales "
        "the head's output afterwards by `sigmoid(logsumexp − sink)`, which is the same number. Rows of types "
        "with sinks (path marked *sink* below) are checked independently of either report: captured maps × "
        "the layer's values (a hook on the value projection) equal the model's own input to the output "
        "projection (a pre-hook on it), per head and real query, and the row-normalised maps equal the "
        "row-normalised eager report; the larger |Δ| is the row's. Where a layer has no value projection "
        "to read (HY-V4: latent keys and values) the maps are compared with the eager report as it is "
        "(HY-V4's is the effective weights, as gpt-oss's)."
    ),
    (
        "- **A broken eager path is refused, not captured.** NemotronAsrStreaming's attention (the streaming "
        "encoder, and the ASR models built on it) applies `attention_mask.logical_not()`, a boolean reading; "
        "eager attention, the path whose weights the toolkit (and `output_attentions`) reads, hands it the "
        "additive mask (0 where allowed), so every allowed key is masked (all-NaN rows on short inputs) and "
        "disallowed keys (padding, beyond the chunked context) are attended. Its own SDPA forward is finite. "
        "The adapter refuses these types at load in one line (`BOOLEAN_MASK_ATTENTION` in "
        "`models/architectures.py`)."
    ),
    (
        "- **Sweep settings per type**: NeMo SpeechLM's diarization encoder sits three sub-configs deep "
        "(shrunk one level further: `DEEP_CONFIGS`) and the type gets a 600 s limit (`TIMEOUTS`; ~25 s alone, "
        "over 200 s with five sessions on two cores)."
    ),
]


def _sources(rows: list[dict]) -> str:
    """How the exact rows' ablation reference placed the head (``head_columns``'s source)."""
    from collections import Counter

    found = Counter(
        (r.get("head_columns") or "(not recorded)").rpartition("(")[2].rstrip(")")
        for r in rows
        if r["status"] == "exact"
    )
    words = {
        "values": "found from the layer's own weights × values",
        "config": "at the config's head size (no value projection to match)",
        "width / heads": "at the input's width over the heads (neither fitted)",
    }
    return "; ".join(f"{n} {words.get(k, k)}" for k, n in found.most_common())


def _group(reason: str) -> str:
    """A reason without the model's own name, so like refusals group together."""
    import re

    reason = re.sub(r"tiny-[\w-]+", "the model", reason)
    reason = re.sub(r"\b[A-Z]\w*(Model|Config|Attention)\w*\b", "…", reason)
    reason = re.sub(r"'[^']*'|\"[^\"]*\"|\d+", "…", reason)
    return reason[:160]


def _cell(text: str) -> str:
    """``text`` as one table cell: pipes escaped, one line, and ``] [`` escaped (Markdown, and
    mkdocs --strict, read ``[rows, heads] [(…, …)]`` as a reference link to a missing target)."""
    return text.replace("|", "\\|").replace("\n", " ").replace("] [", "] \\[")[:240]


def main(argv: list[str] | None = None) -> int:
    import transformers

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("types", nargs="*", help="model types (default: every AutoModel type)")
    p.add_argument("--timeout", type=float, default=TIMEOUT_S)
    p.add_argument("--from-json", action="store_true", help="rewrite docs/coverage.md from docs/coverage.json")
    p.add_argument("--update", action="store_true", help="re-run the given types and merge into docs/coverage.json")
    p.add_argument("--shard", default="", help="K/N: run every N-th type from the K-th (parallel sweeps)")
    p.add_argument("--reverse", action="store_true", help="run the types last to first (a second worker on a shard)")
    p.add_argument("--jsonl", default="", help="append each row to this file as it is made")
    p.add_argument("--from-jsonl", nargs="+", default=[], help="write the outputs from these row files")
    args = p.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    n_types = len(all_types())
    if args.from_json:
        data = json.loads((DOCS / "coverage.json").read_text())
        (DOCS / "coverage.md").write_text(markdown(data["rows"], data["transformers"], data["autmodel_types"]))
        return 0
    if args.from_jsonl:
        rows = [json.loads(line) for f in args.from_jsonl for line in Path(f).read_text().splitlines() if line]
        write_outputs(list({r["model_type"]: r for r in rows}.values()), transformers.__version__, n_types)
        return 0
    _tokenizer()  # loaded once, before the forks, with what every child imports
    import transformers.modeling_utils
    from probe.models import ModelAdapter  # noqa: F401

    import probe.runs.capture
    import probe.interventions.heads  # noqa: F401

    types = args.types or all_types()
    if args.shard:
        k, n = (int(x) for x in args.shard.split("/"))
        types = types[k::n]
    if args.reverse:
        types = types[::-1]
    rows = []
    for t in types:
        if args.jsonl and args.reverse and _done(t, Path(args.jsonl).parent):
            break  # the forward worker of this shard got here
        row = run_one(t, args.timeout)
        rows.append(row)
        if args.jsonl:
            with open(args.jsonl, "a") as f:
                f.write(json.dumps(row, default=str) + "\n")
        print(
            json.dumps(
                {
                    k: row.get(k)
                    for k in ("model_type", "status", "capture_delta", "ablation_delta", "reason", "seconds")
                }
            ),
            flush=True,
        )
    if not args.types and not args.shard:
        write_outputs(rows, transformers.__version__, n_types)
    elif args.update:
        data = json.loads((DOCS / "coverage.json").read_text())
        by_type = {r["model_type"]: r for r in data["rows"]}
        by_type.update({r["model_type"]: r for r in rows})
        write_outputs(list(by_type.values()), transformers.__version__, n_types)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.exit(main())
