"""Reading every site of a decoder: ``probe.trace`` against TransformerLens's ``run_with_cache``
and nnsight's ``trace``, on the same weights and the same inputs, side by side in one run.

    pip install -c constraints.txt -e ".[compare]"
    python bench/bench_sites_vs_peers.py [--models tiny small] [--batch 4] [--seq 128] [--repeats 5]

Models: random GPT-2s built from a config (no download), float32 on the CPU, vocabulary of
the bundled MiniLM tokenizer (30,522): ``tiny`` (2 layers, 64 wide, 4 heads) and ``small``
(12 layers, 768 wide, 12 heads: GPT-2 small's shape). Each peer wraps a deep copy of the
model probe traces. Every variant runs under ``torch.no_grad`` with one torch thread, once
to warm up, then ``--repeats`` rounds in which each runs once, in a seeded random order;
the table gives medians and the ratio to probe's time. Variants:

* ``forward``: the model's own forward, nothing read (the floor);
* ``probe.trace``: ``trace(adapter, batch, read=available_sites(adapter))``: every site
  probe has on GPT-2 (17 per layer kind: embed, pos_embed, q, k, v, attn_scores, pattern,
  z, proj_in, result, attn_out, resid_pre/mid/post, mlp_in/out, ln_final);
* ``TL run_with_cache``: TransformerLens 4's bridge with ``use_attn_result``, every hook it
  has (the row names how many: each module's input and output besides the named sites);
* ``TL run_with_cache (probe's sites)``: the same with ``names_filter`` set to probe's sites
  (names mapped by :mod:`probe.tracing.peers`);
* ``nnsight trace``: the sites that sit at a module's input or output (eager attention
  with ``output_attentions`` for the pattern; q/k/v split from the fused projection, z from
  the output projection's input): all but attn_scores and result, which live inside a
  module's forward.

Agreement: the max |Δ| against probe's value over every site the variant read. Memory: the
peak resident memory a call adds (``/proc/self/clear_refs`` resets the high-water mark after
``gc`` and ``malloc_trim``; Linux only), the cache it returns included.
"""

from __future__ import annotations

import argparse
import copy
import ctypes
import gc
import random
import statistics
import time
from typing import Any, Callable

import torch

CONFIGS = {
    "tiny": dict(n_layer=2, n_embd=64, n_head=4),
    "small": dict(n_layer=12, n_embd=768, n_head=12),
}


def _rss_mib(field: str) -> float:
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def peak_added(fn: Callable[[], Any]) -> float:
    """MiB of resident memory the call of ``fn`` adds at its peak (its result kept)."""
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current RSS
    before = _rss_mib("VmRSS")
    out = fn()
    peak = _rss_mib("VmHWM") - before
    del out
    return peak


def build(size: str, tokenizer):
    import transformers as tr

    from probe.models import ModelAdapter
    from probe.models.architectures import family_for

    cfg = tr.GPT2Config(
        vocab_size=len(tokenizer), n_positions=1024, bos_token_id=101, eos_token_id=102, **CONFIGS[size]
    )
    torch.manual_seed(0)
    model = tr.AutoModelForCausalLM.from_config(cfg).eval()
    return ModelAdapter(name=f"gpt2-{size}", model=model, tokenizer=tokenizer, family=family_for("gpt2"))


def probe_variant(adapter, batch):
    from probe.tracing.site_keys import available_sites
    from probe.tracing.trace import trace

    names = available_sites(adapter)

    def run() -> dict:
        cache = trace(adapter, batch, read=names)
        return {n: cache[n] for n in names}

    return run, names


def tl_variants(adapter, ids, names):
    from transformer_lens.model_bridge.sources._bridge_builder import build_bridge_from_module

    from probe.tracing.peers import as_probe_site, transformer_lens_name

    model = copy.deepcopy(adapter.model)
    bridge = build_bridge_from_module(model, "GPT2LMHeadModel", hf_config=model.config, tokenizer=adapter.tokenizer)
    bridge.set_use_attn_result(True)
    with torch.no_grad():
        keys = list(bridge.run_with_cache(ids[:1, :4])[1].keys())
    wanted = {n: transformer_lens_name(n, keys) for n in names}

    def ours(cache) -> dict:
        return {n: as_probe_site(n, cache[wanted[n]], adapter.n_heads) for n in names}

    def every_hook() -> dict:
        with torch.no_grad():
            return ours(bridge.run_with_cache(ids)[1])

    def probe_sites() -> dict:
        with torch.no_grad():
            return ours(bridge.run_with_cache(ids, names_filter=list(wanted.values()))[1])

    return every_hook, probe_sites, len(keys)


def nnsight_variant(adapter, ids):
    from nnsight import NNsight

    model = copy.deepcopy(adapter.model)
    model.set_attn_implementation("eager")
    nn_model = NNsight(model)
    n_heads = adapter.n_heads

    def heads(x):
        return x.view(*x.shape[:-1], n_heads, -1)

    def run() -> dict:
        saved: dict = {}
        with torch.no_grad(), nn_model.trace(ids, output_attentions=True):
            tr = nn_model.transformer
            saved["hook_embed"] = tr.wte.output.save()
            saved["hook_pos_embed"] = tr.wpe.output.save()
            for l, h in enumerate(tr.h):
                b = f"blocks.{l}."
                saved[b + "hook_resid_pre"] = h.input.save()
                saved[b + "qkv"] = h.attn.c_attn.output.save()
                saved[b + "attn.hook_proj_in"] = h.attn.c_proj.input.save()
                attn = h.attn.output.save()
                saved[b + "attn.hook_pattern"], saved[b + "hook_attn_out"] = attn[1], attn[0]
                saved[b + "hook_resid_mid"] = h.ln_2.input.save()
                saved[b + "hook_mlp_in"] = h.mlp.input.save()
                saved[b + "hook_mlp_out"] = h.mlp.output.save()
                saved[b + "hook_resid_post"] = h.output.save()
            saved["ln_final.hook_normalized"] = tr.ln_f.output.save()
        for l in range(adapter.n_layers):
            b = f"blocks.{l}."
            q, k, v = saved.pop(b + "qkv").split(model.config.n_embd, dim=-1)
            saved[b + "attn.hook_q"], saved[b + "attn.hook_k"], saved[b + "attn.hook_v"] = heads(q), heads(k), heads(v)
            saved[b + "attn.hook_z"] = heads(saved[b + "attn.hook_proj_in"])
        return saved

    return run


def max_diff(ours: dict, theirs: dict) -> float:
    return max(float((ours[n].expand_as(t) - t).abs().max()) for n, t in theirs.items())


def measure(size: str, tokenizer, batch_size: int, seq: int, repeats: int) -> list:
    adapter = build(size, tokenizer)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1000, len(tokenizer), (batch_size, seq), generator=g)
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    probe_run, names = probe_variant(adapter, batch)
    tl_all, tl_sites, n_tl_hooks = tl_variants(adapter, ids, names)

    def forward():
        with torch.no_grad():
            return adapter.model(**batch).logits

    variants = {
        "forward (nothing read)": forward,
        "probe.trace": probe_run,
        f"TL run_with_cache (all {n_tl_hooks} hooks)": tl_all,
        "TL run_with_cache (probe's sites)": tl_sites,
        "nnsight trace (module boundaries)": nnsight_variant(adapter, ids),
    }
    reference = probe_run()
    results = {k: fn() for k, fn in variants.items()}  # warm-up, and the values compared
    times: dict = {k: [] for k in variants}
    order = list(variants)
    rng = random.Random(0)
    for _ in range(repeats):
        rng.shuffle(order)
        for k in order:
            t = time.perf_counter()
            variants[k]()
            times[k].append(time.perf_counter() - t)
    mems = {k: peak_added(fn) for k, fn in variants.items()}
    base = statistics.median(times["probe.trace"])
    rows = []
    for k in variants:
        out = results[k]
        read = len(out) if isinstance(out, dict) else 0
        diff = max_diff(reference, out) if isinstance(out, dict) and k != "probe.trace" else None
        med = statistics.median(times[k])
        rows.append((size, k, read, med, med / base, mems[k], diff))
    del results
    return rows


def main() -> None:
    import transformers as tr

    from probe.models.registry import minilm_path

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["tiny", "small"], choices=sorted(CONFIGS))
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    import nnsight
    import transformer_lens  # noqa: F401
    from importlib.metadata import version

    tokenizer = tr.AutoTokenizer.from_pretrained(str(minilm_path()), local_files_only=True)
    print(
        f"torch {torch.__version__}, transformers {tr.__version__}, transformer-lens {version('transformer-lens')}, "
        f"nnsight {nnsight.__version__}; batch {args.batch} × {args.seq} tokens, {args.repeats} rounds, 1 thread\n"
    )
    print("| model | variant | sites read | median s | × probe.trace | peak added MiB | max abs Δ vs probe |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for size in args.models:
        for size_, k, read, med, ratio, mem, diff in measure(size, tokenizer, args.batch, args.seq, args.repeats):
            d = "—" if diff is None else f"{diff:.1e}"
            print(f"| {size_} | {k} | {read or '—'} | {med:.4f} | {ratio:.2f} | {mem:.0f} | {d} |")


if __name__ == "__main__":
    main()
