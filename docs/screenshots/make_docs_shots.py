"""Screenshots of the documentation site and of the head view with readable tokens.

    python -m mkdocs build --strict && python docs/screenshots/make_docs_shots.py

Writes, with headless Chromium (``chromium --headless --screenshot``), into this folder:
``docs_front.png`` (site/index.html), ``docs_api.png`` (site/api/capture.html),
``head_view_gpt2.png`` (a tiny random GPT-2 with a byte-level BPE tokenizer trained here
on a few sentences: no download) and ``head_view_bert.png`` (the bundled MiniLM). The
report's own pages are shot by tests/test_browser.py (``PROBE_SCREENSHOTS``).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
TEXT = "The keys to the cabinet are on the table, and the cat sat on the mat."


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return str(shutil.which(name))
    raise SystemExit("needs Chromium (apt-get install chromium)")


def shoot(url: str, out: Path, size: str = "1280,900") -> Path:
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [
                chromium(),
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                f"--user-data-dir={profile}",
                f"--window-size={size}",
                "--virtual-time-budget=3000",
                f"--screenshot={out}",
                url,
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
    print(f"wrote {out.relative_to(ROOT)}")
    return out


def gpt2_adapter():
    """A 2-layer random GPT-2 whose tokenizer is byte-level BPE (Ġ pieces), as GPT-2's is."""
    import transformers as T
    from tokenizers import ByteLevelBPETokenizer

    from probe.models import ModelAdapter

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        [TEXT, "A cat and a dog sat on the table."] * 20,
        vocab_size=320,
        min_frequency=1,
        special_tokens=["<|endoftext|>"],
        show_progress=False,
    )
    tok = T.PreTrainedTokenizerFast(
        tokenizer_object=bpe._tokenizer, bos_token="<|endoftext|>", eos_token="<|endoftext|>"
    )
    cfg = T.GPT2Config(
        vocab_size=len(tok),
        n_embd=64,
        n_layer=2,
        n_head=4,
        n_positions=64,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    import torch

    torch.manual_seed(0)
    return ModelAdapter(
        name="tiny random GPT-2 (byte-level BPE)", model=T.GPT2LMHeadModel(cfg), tokenizer=tok, family="gpt2"
    )


def main() -> int:
    from probe import capture, load_model
    from probe.app.report.head_view import head_view

    site = ROOT / "site"
    if not (site / "index.html").is_file():
        raise SystemExit("build the site first: python -m mkdocs build --strict")
    shoot((site / "index.html").as_uri(), HERE / "docs_front.png")
    shoot((site / "api" / "capture.html").as_uri(), HERE / "docs_api.png")
    with tempfile.TemporaryDirectory() as tmp:
        for adapter, name, (layer, head) in ((gpt2_adapter(), "gpt2", (1, 2)), (load_model("minilm"), "bert", (2, 8))):
            maps = capture(adapter, [TEXT])[0]
            page = Path(tmp) / f"{name}.html"
            head_view(maps, layer, head).save(page)
            shoot(page.as_uri(), HERE / f"head_view_{name}.png", size="760,470")
    return 0


if __name__ == "__main__":
    sys.exit(main())
