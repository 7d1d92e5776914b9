"""Capture through transformers' attention interface: overhead and memory.

    python bench/bench_interface.py [--repeats 7] [--batch 4] [--memory-n 2048]

1. Time, for MiniLM (BERT, 6 layers × 12 heads) and a tiny random Llama (4 layers × 4
   heads, hidden 128, 2 key/value heads) at n = 128 and 512 tokens, one batch through:
   the model's plain SDPA forward; its eager forward with ``output_attentions=True``; the
   toolkit's capture of all layers through the attention interface (recording into one
   batch buffer, as ``probe.capture`` does); the same through hooks (eager switch, each
   layer copied into the buffer). Variants are interleaved (A B C D, A B C D, ...), medians of
   ``--repeats``, torch on 1 thread. Target: interface capture no slower than eager
   ``output_attentions``.
2. Peak memory (RSS high-water mark, reset after the model is built, each case in a fresh
   subprocess) of capturing one layer's maps
   versus all layers' for a ``--memory-n``-token input of a 24-layer tiny Llama (4 heads,
   hidden 64), beside a plain forward.

Prints only; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def tiny_llama(layers: int, hidden: int, heads: int, kv_heads: int, max_pos: int):
    import transformers as T

    from probe.models import ModelAdapter
    from probe.models.registry import minilm_path

    tok = T.AutoTokenizer.from_pretrained(str(minilm_path()), local_files_only=True)
    cfg = T.LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_pos,
        pad_token_id=0,
    )
    torch.manual_seed(0)
    model = T.AutoModelForCausalLM.from_config(cfg)
    return ModelAdapter(name="tiny-llama", model=model, tokenizer=tok, family="llama")


def variants(adapter, batch: dict) -> dict:
    from probe.runs.capture import AttentionCapture

    model = adapter.model

    def sdpa():
        with torch.no_grad():
            model(**batch)

    def eager_oa():
        prev = model.config._attn_implementation
        model.set_attn_implementation("eager")
        try:
            with torch.no_grad():
                out = model(**batch, output_attentions=True)
            [a.shape for a in out.attentions]
        finally:
            model.set_attn_implementation(prev)

    def capture(path):
        def run():  # as probe.capture records a batch: into one buffer (the interface computes there)
            with AttentionCapture(adapter, path=path, into_buffer=True) as cap, torch.no_grad():
                model(**batch)
            cap.layer_tensors()

        return run

    return {
        "sdpa": sdpa,
        "eager output_attentions": eager_oa,
        "interface capture": capture("interface"),
        "hooks capture": capture("hooks"),
    }


def overhead(repeats: int, batch_size: int) -> None:
    from probe.models import load_model

    models = {"minilm": load_model("minilm"), "tiny-llama": tiny_llama(4, 128, 4, 2, 1024)}
    print(
        f"{'model':<11} {'n':>4} {'sdpa s':>9} {'eager+oa s':>11} {'interface s':>12} {'hooks s':>9} "
        f"{'iface/eager':>12} {'iface/sdpa':>11} {'hooks/eager':>12}"
    )
    for name, adapter in models.items():
        for n in (128, 512):
            ids = torch.randint(1000, 2000, (batch_size, n))
            batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
            fns = variants(adapter, batch)
            times = {k: [] for k in fns}
            for fn in fns.values():
                fn()  # warm-up
            for _ in range(repeats):
                for k, fn in fns.items():  # interleaved
                    t = time.perf_counter()
                    fn()
                    times[k].append(time.perf_counter() - t)
            m = {k: statistics.median(v) for k, v in times.items()}
            e, s, i, h = m["eager output_attentions"], m["sdpa"], m["interface capture"], m["hooks capture"]
            print(
                f"{name:<11} {n:>4} {s:>9.4f} {e:>11.4f} {i:>12.4f} {h:>9.4f} {i / e:>12.2f} {i / s:>11.2f} "
                f"{h / e:>12.2f}"
            )


MEMORY_CHILD = r"""
import json, sys, torch
sys.path.insert(0, {bench!r})
from bench_interface import tiny_llama
from probe.runs.capture import capture
torch.set_num_threads(1)
case, n = sys.argv[1], int(sys.argv[2])
adapter = tiny_llama(24, 64, 4, 4, n + 8)
text = " ".join(["word"] * (n - 2))  # n tokens with [CLS] and [SEP]
def hwm():  # peak RSS (VmHWM) in bytes
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
with open("/proc/self/clear_refs", "w") as f:  # reset the peak to the current RSS
    f.write("5")
base = hwm()
if case == "plain forward":
    batch = adapter.batch([adapter.encode(text)])
    with torch.no_grad():
        adapter.model(**batch)
    stored = 0
else:
    layers = [12] if case.endswith("one layer") else None
    path = "hooks" if case.startswith("hooks") else "interface"
    maps = capture(adapter, [text], layers=layers, path=path)
    stored = maps[0].attentions.numel() * 4
    assert maps[0].n_tokens == n, maps[0].n_tokens
print(json.dumps({{"base": base, "peak": hwm(), "stored": stored}}))
"""


def memory(n: int) -> None:
    code = MEMORY_CHILD.format(bench=str(ROOT / "bench"))
    print(f"\npeak RSS, 24-layer tiny Llama (4 heads, hidden 64), one {n}-token input, fresh process each:")
    print(f"{'case':<28} {'peak MiB':>9} {'peak above model MiB':>21} {'maps kept MiB':>14}")
    for case in ("plain forward", "interface, one layer", "hooks, one layer", "interface, all 24 layers"):
        out = subprocess.run([sys.executable, "-c", code, case, str(n)], capture_output=True, text=True, cwd=ROOT)
        if out.returncode != 0:
            print(f"{case:<28} failed: {out.stderr.strip().splitlines()[-1]}")
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        mib = 2**20
        print(f"{case:<28} {r['peak'] / mib:>9.0f} {(r['peak'] - r['base']) / mib:>21.0f} {r['stored'] / mib:>14.0f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--memory-n", type=int, default=2048)
    p.add_argument("--skip-timing", action="store_true")
    args = p.parse_args()
    torch.set_num_threads(1)
    import logging

    logging.getLogger("transformers").setLevel(logging.ERROR)
    import os

    print(
        f"torch {torch.__version__}, 1 thread; {os.cpu_count()} cores, 1-minute load average {os.getloadavg()[0]:.1f}"
    )
    if not args.skip_timing:
        overhead(args.repeats, args.batch)
    memory(args.memory_n)


if __name__ == "__main__":
    main()
