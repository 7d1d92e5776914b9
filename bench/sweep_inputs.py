"""The coverage sweep's inputs: each kind of model gets its own kind of input, at the sizes
its (shrunk) config states.

:func:`candidates` yields the input sets a model's forward may take, in order: its main input
alone (tokens, pixels at the config's image size, mel features, raw audio, past values), then
the same with the other inputs its forward names and the config implies (a dual encoder's
pixels beside its tokens, a Qwen-VL-like tower's flattened patches and ``grid_thw``, a layout
model's ``bbox``, a time-series model's time features and observed mask, a video model's
frames). :func:`working_inputs` runs the model's own forward on each (no toolkit) and keeps
the first that runs; where none does, the first one's error is the type's reason.

Seeded (``torch.Generator`` 0): the same model always gets the same inputs.
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Iterator
from typing import Any

BATCH = 2
TEXTS = ["The cat sat on the mat.", "A longer sentence, with commas, that makes the batch ragged."]

#: sub-configs where a tower's sizes live (first found wins)
TOWERS = (
    "vision_config",
    "audio_config",
    "encoder_config",
    "backbone_config",
    "image_config",
    "video_config",
    "speech_config",
    "decoder_config",
)

_CHOSEN: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class UnsupportedInput(Exception):
    """The sweep cannot make this model's inputs."""


def _get(cfg: Any, key: str) -> Any:
    try:
        return getattr(cfg, key, None)
    except Exception:
        return None


def find(cfg: Any, *keys: str, default: Any = None, towers_first: bool = False) -> Any:
    """The first of ``keys`` set on the config or one of its towers' sub-configs."""
    towers = [_get(cfg, s) for s in TOWERS if _get(cfg, s) is not None]
    for c in [*towers, cfg] if towers_first else [cfg, *towers]:
        for k in keys:
            v = _get(c, k)
            if v is not None and not isinstance(v, bool):
                return v
    return default


def _int(v: Any, default: int) -> int:
    if isinstance(v, (list, tuple)) and v:
        v = v[0]
    return int(v) if isinstance(v, int) and v > 0 else default


def _params(model) -> dict:
    try:
        return dict(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        return {}


def _required(params: dict) -> list[str]:
    return [
        n
        for n, p in params.items()
        if p.default is inspect.Parameter.empty and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and n != "self"
    ]


def _gen():
    import torch

    return torch.Generator().manual_seed(0)


def image_size(cfg: Any) -> tuple[int, int]:
    size = find(cfg, "image_size", "img_size", "input_size", "max_img_size", towers_first=True)
    if isinstance(size, dict):
        size = size.get("height") or size.get("shortest_edge")
    if isinstance(size, (list, tuple)) and len(size) >= 2:
        return int(size[0]), int(size[1])
    s = _int(size, 32)
    return s, s


def pixels(cfg: Any, frames: int | None = None) -> Any:
    """Images ``[batch, channels, H, W]`` at the config's image size (video: ``[batch, frames,
    channels, H, W]``)."""
    import torch

    h, w = image_size(cfg)
    c = _int(find(cfg, "num_channels", "in_channels", "in_chans", towers_first=True), 3)
    shape = (BATCH, c, h, w) if frames is None else (BATCH, frames, c, h, w)
    return torch.randn(*shape, generator=_gen())


def text(tokenizer, vocab: int | None) -> dict:
    """The sweep's two texts through the bundled tokenizer (ids clipped into a small vocabulary)."""
    enc = dict(tokenizer(TEXTS, padding=True, return_tensors="pt"))
    enc.pop("token_type_ids", None)
    if isinstance(vocab, int) and vocab < len(tokenizer):
        enc["input_ids"] = enc["input_ids"] % vocab
    return enc


def boxes(n_tokens: int) -> Any:
    """Valid layout boxes ``[batch, tokens, 4]`` (x0 ≤ x1, y0 ≤ y1, inside 0..1000)."""
    import torch

    g = _gen()
    lo = torch.randint(0, 500, (BATCH, n_tokens, 2), generator=g)
    hi = lo + torch.randint(1, 400, (BATCH, n_tokens, 2), generator=g)
    return torch.cat([lo, hi], -1)


def patches_with_grid(cfg: Any, name: str, grid_name: str, temporal: int | None = None) -> dict:
    """A Qwen-VL-like vision tower's input: flattened patches ``[patches, channels ×
    temporal × patch²]`` and ``grid_thw`` ``[[t, h, w]]`` (one image per row of the grid; two
    images of 4 × 4 patches, a multiple of the spatial merge)."""
    import torch

    patch = _int(find(cfg, "patch_size", towers_first=True), 8)
    temporal = temporal or _int(find(cfg, "temporal_patch_size", towers_first=True), 1)
    channels = _int(find(cfg, "in_channels", "num_channels", towers_first=True), 3)
    merge = _int(find(cfg, "spatial_merge_size", "merge_size", towers_first=True), 2)
    side = 2 * merge
    grid = torch.tensor([[1, side, side]] * BATCH)
    n = int(grid.prod(-1).sum())
    flat = torch.randn(n, channels * temporal * patch * patch, generator=_gen())
    return {name: flat, grid_name: grid}


def time_series(model, params: dict) -> dict:
    """A time-series model's past values (and time features, observed mask, future ones for
    the encoder-decoders) at the config's context length and lags."""
    import torch

    cfg = model.config
    g = _gen()
    context = _int(find(cfg, "context_length", "prediction_length"), 32)
    lags = find(cfg, "lags_sequence") or [0]
    channels = _int(find(cfg, "input_size", "num_input_channels"), 1)
    past = context + max(lags)
    shape = (BATCH, past) if channels == 1 and "num_input_channels" not in vars(cfg) else (BATCH, past, channels)
    out: dict[str, Any] = {"past_values": torch.randn(*shape, generator=g)}
    if "past_time_features" in params:
        feats = _int(find(cfg, "num_time_features"), 0)
        out["past_time_features"] = torch.randn(BATCH, past, feats, generator=g)
        out["past_observed_mask"] = torch.ones(*shape)
        horizon = _int(find(cfg, "prediction_length"), 4)
        out["future_values"] = torch.randn(BATCH, horizon, *shape[2:], generator=g)
        out["future_time_features"] = torch.randn(BATCH, horizon, feats, generator=g)
    elif "past_observed_mask" in params:
        out["past_observed_mask"] = torch.ones(*shape)
    if "past_values_padding" in params:
        out["past_values_padding"] = torch.zeros(BATCH, past)
    if "freq" in params:
        out["freq"] = torch.zeros(BATCH, 1, dtype=torch.long)
    return out


def audio_features(cfg: Any, frames_last: bool = True) -> Any:
    """Mel features ``[batch, mel bins, frames]`` (or frames first) at the config's sizes."""
    import torch

    mel = _int(
        find(
            cfg,
            "feature_projection_input_dim",
            "input_feat_per_channel",
            "num_mel_bins",
            "feature_size",
            "n_mels",
            "input_feat_size",
            "input_dim",
            towers_first=True,
        ),
        16,
    )
    frames = 2 * _int(find(cfg, "max_source_positions", towers_first=True), 16)
    shape = (BATCH, mel, frames) if frames_last else (BATCH, frames, mel)
    return torch.randn(*shape, generator=_gen())


def waveform(cfg: Any, channels: int | None = None, samples: int = 1600) -> Any:
    import torch

    hop = find(cfg, "hop_length", "frame_size", "downsample_factor", towers_first=True)
    if isinstance(hop, int) and hop > 0:
        samples = hop * max(1, -(-samples // hop))
    shape = (BATCH, samples) if channels is None else (BATCH, channels, samples)
    return torch.randn(*shape, generator=_gen())


def _main_only(model, tokenizer, name: str) -> Iterator[dict]:
    """The main input alone, in each layout the sweep knows for it."""
    import torch

    cfg = model.config
    g = _gen()
    if name == "input_ids":
        yield text(tokenizer, find(cfg, "vocab_size"))
        codebooks = _get(cfg, "num_codebooks")
        if isinstance(codebooks, int) and codebooks > 1:  # MusicGen: one row of codes per codebook
            enc = text(tokenizer, find(cfg, "vocab_size"))
            yield {
                "input_ids": enc["input_ids"].repeat_interleave(codebooks, 0),
                "attention_mask": enc["attention_mask"],
            }
            codes = enc["input_ids"] % _int(_get(cfg, "codebook_vocab_size"), find(cfg, "vocab_size") or 1)
            for k in (codebooks, codebooks + 1):  # Kyutai STT: text and audio codes per position (in each vocabulary)
                yield {"input_ids": codes[..., None].expand(-1, -1, k).contiguous()}
    elif name == "pixel_values":
        frames = find(cfg, "num_frames", towers_first=True)
        image, patch = _get(cfg, "image_size"), _get(cfg, "patch_size")
        if "noise" in _params(model) and isinstance(image, int) and isinstance(patch, int):
            # ViT-MAE's random masking, drawn here (Hiera, with per-axis sizes, draws its own)
            side = image // patch
            yield {"pixel_values": pixels(cfg), "noise": torch.rand(BATCH, side * side, generator=g)}
        yield {"pixel_values": pixels(cfg)}
        for n in dict.fromkeys([frames if isinstance(frames, int) else 2, 1, 2]):
            yield {"pixel_values": pixels(cfg, n)}  # video frames, image pairs (LightGlue), one image (IDEFICS)
        c = pixels(cfg).shape[1]
        for height in (64, 96):  # a text line (PP-OCR recognisers; V5 mobile pools the 32× downsampled height by 3)
            yield {"pixel_values": torch.randn(BATCH, c, height, 256, generator=g)}
    elif name == "pixel_values_videos":
        yield {"pixel_values_videos": pixels(cfg, _int(find(cfg, "num_frames", towers_first=True), 2))}
    elif name == "input_features":
        params = _params(model)
        for frames_last in (True, False):
            x = audio_features(cfg, frames_last=frames_last)
            out = {"input_features": x}
            if "input_features_mask" in params:
                out["input_features_mask"] = torch.ones(
                    BATCH, x.shape[-1] if frames_last else x.shape[1], dtype=torch.long
                )
            yield out
        yield {"input_features": audio_features(cfg, frames_last=False)[:, None]}  # CLAP: [batch, 1, frames, mel]
        stacked = _get(cfg, "num_stacked_frames")  # Fun-ASR-Nano: seven mel frames a step, with their mask
        for k in (2, 4, *([stacked] if isinstance(stacked, int) and stacked > 4 else [])):  # Granite Speech 5: four
            x = audio_features(cfg, frames_last=False)
            out = {"input_features": torch.randn(BATCH, x.shape[1], k * x.shape[2], generator=g)}
            if "input_features_mask" in params:
                out["input_features_mask"] = torch.ones(BATCH, x.shape[1], dtype=torch.long)
            yield out
        window = find(cfg, "n_window", towers_first=True)  # Qwen3-ASR: frames in whole windows
        if isinstance(window, int) and window > 0:
            x = torch.randn(BATCH, audio_features(cfg).shape[1], 2 * window, generator=g)
            yield {"input_features": x, "input_features_mask": torch.ones(BATCH, 2 * window, dtype=torch.long)}
    elif name == "input_values":
        if isinstance(_get(cfg, "num_mel_bins"), int):  # spectrogram patches (AST)
            yield {"input_values": torch.randn(BATCH, _int(_get(cfg, "max_length"), 64), cfg.num_mel_bins, generator=g)}
        channels = _int(find(cfg, "audio_channels", "channels", "in_channels"), 1)
        yield {"input_values": waveform(cfg)}
        yield {"input_values": waveform(cfg, channels)}
        yield {"input_values": waveform(cfg, channels, samples=15360)}  # codecs with long strides
        yield {"input_values": waveform(cfg, samples=15360)}  # Muse Spark: whole 1920-sample frames
        width = _int(find(cfg, "hidden_size", "d_model"), 32)
        x = torch.randn(BATCH, 16, width, generator=g)  # SpeechT5 without pre-nets: embeddings
        yield {
            "input_values": x,
            **({"decoder_input_values": x[:, :4]} if "decoder_input_values" in _params(model) else {}),
        }
    elif name == "inputs_embeds" or name == "inputs":  # Perceiver's preprocessed inputs, embeddings
        width = _int(find(cfg, "d_model", "hidden_size"), 32)
        yield {name: torch.randn(BATCH, 16, width, generator=g)}
    elif name in ("latents", "hidden_states"):  # a codec's decoder (latents) or encoder (audio as channels)
        width = _int(find(cfg, "hidden_size", "vae_dim", "d_model"), 32)
        yield {name: torch.randn(BATCH, width, 8, generator=g)}
        for samples in (1920, 24000):
            yield {name: torch.randn(BATCH, _int(find(cfg, "channels", "audio_channels"), 1), samples, generator=g)}
        yield {name: torch.randn(BATCH, 8, width, generator=g)}
    elif name.endswith(("_embeds", "_hidden_states")):  # BLIP-2's Q-Former queries, a diffusion head's inputs
        width = _int(find(cfg, "hidden_size", "d_model"), 32)
        params = _params(model)
        got = {
            n: torch.randn(BATCH, 8, width, generator=g)
            for n in _required(params)
            if n == name or n.endswith(("_embeds", "_hidden_states"))
        }
        yield got
        layers = _get(cfg, "target_layer_ids")  # Muse Glimmer's drafter: the target's layers side by side
        if isinstance(layers, list) and len(layers) > 1:
            wide = len(layers) * width
            yield {n: v if n == name else torch.randn(BATCH, 8, wide, generator=g) for n, v in got.items()}
        if "encoder_hidden_states" in params:  # the Q-Former's cross-attention over image features
            other = _int(find(cfg, "encoder_hidden_size"), width)
            yield {**got, "encoder_hidden_states": torch.randn(BATCH, 8, other, generator=g)}
    elif name == "states":  # Decision Transformer: states, actions, returns, timesteps
        steps = 4
        yield {
            "states": torch.randn(BATCH, steps, _int(_get(cfg, "state_dim"), 4), generator=g),
            "actions": torch.randn(BATCH, steps, _int(_get(cfg, "act_dim"), 2), generator=g),
            "rewards": torch.randn(BATCH, steps, 1, generator=g),
            "returns_to_go": torch.randn(BATCH, steps, 1, generator=g),
            "timesteps": torch.arange(steps).repeat(BATCH, 1),
            "attention_mask": torch.ones(BATCH, steps, dtype=torch.long),
        }
    elif name == "past_values":
        yield time_series(model, _params(model))
    elif name == "audio_mel":
        feats = audio_features(cfg, frames_last=False)
        yield {"audio_mel": feats, "audio_mel_mask": torch.zeros(feats.shape[:2], dtype=torch.bool)}
    else:
        raise UnsupportedInput(f"the sweep makes no {name!r} inputs")


def _extras(model, tokenizer, base: dict) -> Iterator[dict]:
    """``base`` with the other inputs the forward names and the config implies, one candidate
    per layout of each (the others at their first layout)."""
    import torch

    cfg = model.config
    params = _params(model)
    more: dict[str, Any] = {}
    if "input_ids" in params and "input_ids" not in base:
        more.update(text(tokenizer, find(cfg, "vocab_size")))
    ids = {**base, **more}.get("input_ids")
    if "bbox" in params and ids is not None:
        more["bbox"] = boxes(ids.shape[1])
    if "qformer_input_ids" in params and ids is not None:
        more["qformer_input_ids"] = ids
    if "image_attention_mask" in params and ids is not None:  # IDEFICS: which image each token sees
        more["image_attention_mask"] = torch.ones(BATCH, ids.shape[1], 1, dtype=torch.long)
    if "visual_feats" in params:  # LXMERT: region features and boxes
        n = 4
        more["visual_feats"] = torch.randn(BATCH, n, _int(_get(cfg, "visual_feat_dim"), 32), generator=_gen())
        more["visual_pos"] = torch.rand(BATCH, n, _int(_get(cfg, "visual_pos_dim"), 4), generator=_gen())
    if "prompt_pixel_values" in params:  # SegGPT: the image, a prompt image and its mask, stacked in height
        h, w = image_size(cfg)
        half = torch.randn(BATCH, 3, h // 2, w, generator=_gen())
        yield {**base, "pixel_values": half, "prompt_pixel_values": half, "prompt_masks": half}
    if "task_inputs" in params:  # OneFormer's task tokens
        more["task_inputs"] = text(tokenizer, find(cfg, "vocab_size"))["input_ids"]
    semantic = _get(cfg, "semantic_model_config")
    if semantic is not None and "input_features" in params and "input_values" in base:
        # a codec with a semantic encoder (NeuCodec, XCodec2): its features, one frame per hop of the audio
        width = _int(_get(semantic, "feature_projection_input_dim"), 160)
        frames = base["input_values"].shape[-1] // _int(find(cfg, "hop_length"), 320)
        yield {
            **base,
            "input_features": torch.randn(BATCH, frames, width, generator=_gen()),
            "input_features_mask": torch.ones(BATCH, frames, dtype=torch.long),
        }
    layouts: list[list[dict]] = []
    for name in ("pixel_values", "pixel_values_videos", "input_features", "input_values"):
        if name in params and name not in base:
            found = [v for v in _main_only(model, tokenizer, name) if set(v) <= set(params)]
            if found:
                more.update(found[0])
                layouts.append(found[1:])
    if more:
        yield {**base, **more}
    for rest in layouts:
        for other in rest:
            yield {**base, **more, **other}
    grid = next((n for n in ("grid_thw", "image_grid_thw") if n in params), None)
    if grid:
        flat = "hidden_states" if "hidden_states" in params else "pixel_values"
        for temporal in (None, 2, 1):
            got = patches_with_grid(cfg, flat, grid, temporal)
            if "merge_sizes" in params:  # VideoLLaMA 3: a merge size per image
                got["merge_sizes"] = torch.tensor([_int(find(cfg, "spatial_merge_size", "merge_size"), 2)] * BATCH)
            yield got
        got = patches_with_grid(cfg, flat, grid, 1)
        p = _int(find(cfg, "patch_size", towers_first=True), 8)
        yield {flat: got[flat].reshape(got[flat].shape[0], -1, p, p), grid: got[grid]}  # Kimi: [patches, C, p, p]
    if ids is not None and "input_features" in params and "input_features" not in base:
        # Voxtral Realtime adds each audio position to a text position: 8 mel frames a token
        mel = audio_features(cfg).shape[1]
        yield {**base, **more, "input_features": torch.randn(BATCH, mel, 8 * ids.shape[1], generator=_gen())}
    if "target_sizes" in params:  # MiniCPM's NaViT-style tower: the images' patches packed in one row
        patch = _int(find(cfg, "patch_size", towers_first=True), 8)
        side = image_size(cfg)[0] // patch
        c = _int(find(cfg, "num_channels", towers_first=True), 3)
        yield {
            "pixel_values": torch.randn(1, c, patch, BATCH * side * side * patch, generator=_gen()),
            "target_sizes": torch.tensor([[side, side]] * BATCH),
        }
    if "pixel_position_ids" in params:  # Gemma 4's vision tower: flattened patches and their (x, y)
        patch = _int(find(cfg, "patch_size", towers_first=True), 8)
        side = 2 * _int(_get(cfg, "pooling_kernel_size"), 1)  # whole pooling windows
        ys, xs = torch.meshgrid(torch.arange(side), torch.arange(side), indexing="ij")
        yield {
            "pixel_values": torch.randn(BATCH, side * side, 3 * patch * patch, generator=_gen()),
            "pixel_position_ids": torch.stack([xs.flatten(), ys.flatten()], -1).repeat(BATCH, 1, 1),
        }
    if "spatial_shapes" in params:  # SigLIP 2's NaFlex: patches flattened with their grid
        patch = _int(find(cfg, "patch_size", towers_first=True), 8)
        c = _int(find(cfg, "num_channels", towers_first=True), 3)
        side = 4
        yield {
            "pixel_values": torch.randn(BATCH, side * side, c * patch * patch, generator=_gen()),
            "pixel_attention_mask": torch.ones(BATCH, side * side, dtype=torch.long),
            "spatial_shapes": torch.tensor([[side, side]] * BATCH),
            **{k: v for k, v in {**base, **more}.items() if k in ("input_ids", "attention_mask")},
        }


#: config fields naming the token a vision-language model replaces with its image (or video)
#: features: BLIP-2 and InstructBLIP put ``num_query_tokens`` Q-Former outputs there
PLACEHOLDER_IDS = ("image_token_id", "image_token_index", "video_token_id", "video_token_index")


def with_placeholders(model, inputs: dict) -> dict:
    """``inputs`` with the image placeholders a Q-Former model's text must hold: its
    ``num_query_tokens`` outputs (per video frame) replace as many placeholder tokens, so the
    ids start with that many (the placeholder id is the config's; the sweep's tweak sets one
    where the default config has none). Kosmos-2: ``latent_query_num`` tokens flagged in
    ``image_embeds_position_mask``. Other inputs come back unchanged."""
    import torch

    cfg = model.config
    ids, px = inputs.get("input_ids"), inputs.get("pixel_values")
    if ids is None or px is None:
        return inputs
    params = _params(model)
    frames = px.shape[1] if px.dim() == 5 else 1
    latent = _get(cfg, "latent_query_num")
    if "image_embeds_position_mask" in params and isinstance(latent, int):
        flags = torch.zeros(BATCH, 1 + latent + ids.shape[1], dtype=torch.long)
        flags[:, 1 : 1 + latent] = 1
        ids = torch.cat([ids[:, :1], torch.full((BATCH, latent), 3), ids], 1)
        mask = torch.ones_like(ids)
        return {**inputs, "input_ids": ids, "attention_mask": mask, "image_embeds_position_mask": flags}
    token = next((v for k in PLACEHOLDER_IDS if isinstance(v := _get(cfg, k), int)), None)
    queries = _get(cfg, "num_query_tokens")
    if (
        token is None
        or not isinstance(queries, int)
        or "qformer_input_ids" not in params
        and "num_query_tokens" not in vars(cfg)
    ):
        return inputs
    n = queries * frames
    out = {**inputs, "input_ids": torch.cat([torch.full((BATCH, n), token), ids], 1)}
    if "attention_mask" in inputs:
        out["attention_mask"] = torch.cat([torch.ones(BATCH, n, dtype=torch.long), inputs["attention_mask"]], 1)
    return out


def candidates(model, tokenizer) -> Iterator[dict]:
    """The input sets to try, in order (see the module's docstring)."""
    params = _params(model)
    name = getattr(model, "main_input_name", "input_ids")
    name = name[0] if isinstance(name, (list, tuple)) else str(name or "input_ids")
    required = _required(params)
    if name not in params and required:  # a tower whose class keeps the default main input
        name = required[0]
    found = False
    try:
        for base in _main_only(model, tokenizer, name):
            found = True
            yield with_placeholders(model, base)
            for inputs in _extras(model, tokenizer, base):
                yield with_placeholders(model, inputs)
    except UnsupportedInput:
        if not found:
            yield from _extras(model, tokenizer, {})
            raise


def with_decoder(model, inputs: dict) -> dict:
    """An encoder-decoder's decoder input (its start token and three ids)."""
    import torch

    cfg = model.config
    if not getattr(cfg, "is_encoder_decoder", False) or "decoder_input_ids" in inputs:
        return inputs
    if "decoder_input_ids" not in _params(model):
        return inputs
    start = getattr(cfg, "decoder_start_token_id", None) or 0
    start = start if start < (getattr(cfg, "vocab_size", None) or 0) else 0
    ids = torch.tensor([[start, 5, 6, 7]] * BATCH)
    channels = _get(_get(cfg, "decoder_config"), "num_channels")
    if isinstance(channels, int) and channels > 1:  # Dia: one audio code per channel at each step
        ids = ids[..., None].expand(-1, -1, channels).contiguous()
    return {**inputs, "decoder_input_ids": ids}


def working_inputs(model, tokenizer) -> dict:
    """The first of :func:`candidates` the model's own forward runs on (remembered per model);
    raises the first candidate's error where none runs."""
    import torch

    if model in _CHOSEN:
        return _CHOSEN[model]
    if getattr(type(model).forward, "__name__", "") == "_forward_unimplemented":
        raise UnsupportedInput(f"{type(model).__name__} defines no forward (it generates through other methods)")
    if "inference_session" in _required(_params(model)):
        raise UnsupportedInput(
            f"{type(model).__name__} runs through a video inference session (frames added one at a time), "
            "not one forward over inputs"
        )
    dtype = next(model.parameters()).dtype
    first: BaseException | None = None
    tried = 0
    try:
        for inputs in candidates(model, tokenizer):
            inputs = with_decoder(model, inputs)
            inputs = {k: v.to(dtype) if torch.is_tensor(v) and v.is_floating_point() else v for k, v in inputs.items()}
            tried += 1
            try:
                torch.manual_seed(0)
                with torch.no_grad():
                    model(**inputs)
            except Exception as e:  # the next candidate
                first = first or e
                continue
            _CHOSEN[model] = inputs
            return inputs
    except UnsupportedInput:
        if first is None:
            raise
    if first is None:
        raise UnsupportedInput("the sweep makes no inputs for this model")
    raise first
