"""The head-removal sweep against the peers: every head removed alone (zero-, mean- and
resample-ablation), the objective read per removal, by the toolkit's sweep and by the
natural loop of nnsight and of TransformerLens, on the same weights and inputs, side by side.

    pip install -c constraints.txt -e ".[compare]"
    python bench/bench_sweep_peers.py [--n 32 128] [--repeats 5] [--threads 1]

Model: a random GPT-2 built from a config (no download; seed 0), float32 on the CPU, 4
layers × 8 heads (32 heads), 128 wide (head size 16), a word-level vocabulary of 2,048 EWT dev
words (:func:`word_tokenizer`), so the LM head is about a quarter of a forward's work, as in
GPT-2 small or SmolLM2. A decoder because all three load it: TransformerLens 4.3's bridge has
no adapter for MiniLM's ``BertModel`` (only ``BertForMaskedLM``, whose MLM head MiniLM lacks).
Small because the peers' loops run a forward per head: on this shared 2-core machine (load
10-20) a 6 × 12-head, 384-wide GPT-2 with MiniLM's 30,522-token head took 0.8 s per batch of 8
sentences in every method, 3 × 72 × 16 of them per round at n=128; SmolLM2's 270 heads
more. Data: the first N sentences of EWT dev. Objective: the toolkit's ``auto`` for a decoder
with an LM head, the next-token loss per sentence (its harm: the removal's loss − the clean
loss per sentence, ``[32, n]``).

Methods (each mode timed on its own, each run from the texts to the ``[72, n]`` harms):

* ``probe``: :func:`probe.analyses.claims.removal.removal_sweep` with ``modes=(mode,)``, the
  function the report's removals and claims run (the same sweep as ``probe ablate``'s
  :func:`probe.analyses.necessity.ablation.sweep_heads`): one clean run per batch, every head
  restarted at its layer's output projection from the cached clean stream, rows of all a
  layer's heads packed in forwards of ≤ 2,048 tokens cut to their longest sentence; the mean
  mode's means pass included.
* ``nnsight``: ``NNsight(model).trace(...)`` once per batch and head, the head's slice of
  ``attn.c_proj``'s input (its ``z``) set to zero / the mean / the resampled value.
* ``TL``: TransformerLens's bridge, ``run_with_hooks`` once per batch and head with a hook on
  ``blocks.{l}.attn.hook_z`` setting ``z[:, :, h]``.
* ``plain``: the same loop with no library, a PyTorch forward pre-hook on ``attn.c_proj``
  setting the head's slice of its input: the work any one-forward-per-head loop does, at
  no machinery's cost.

Work: each method's multiply-adds of the linear maps (:func:`multiply_adds`, a global forward
hook), and the seconds per GMAC each took: a ratio of times is the ratio of the work times the
ratio of time per work, printed for the zero mode with what 4× TransformerLens would need.

The peers get the same batches (``sweep_batches``: the toolkit's batching, sentences of
similar length together, batch 8), the same per-position-kind means (each computes its own in
one caching pass over the corpus) and the same resample sources
(:func:`probe.analyses.claims.removal.resample_sources` with the batch's seed), so their harms
must equal the toolkit's: the max |Δ| per mode is printed. Timing: one warm-up of each, then
``--repeats`` rounds, each running every (method, mode) once in a seeded shuffled order;
medians and the ratio peer / probe. Memory: each method's three modes once in a fresh process
(``spawn``), the peak resident memory the run adds (``/proc/self/clear_refs`` after setup).
"""

from __future__ import annotations

import argparse
import copy
import multiprocessing as mp
import os
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
EWT = Path("/work/shared/data/ud-english-ewt/en_ewt-ud-dev.conllu")
if not EWT.exists():
    EWT = ROOT.parent / "shared" / "data" / "ud-english-ewt" / "en_ewt-ud-dev.conllu"
MODES = ("zero", "mean", "resample")
METHODS = ("probe", "nnsight", "TL", "plain")
BATCH = 8
SEED = 0
VOCAB = 2048
SHAPE = dict(n_layer=4, n_embd=128, n_head=8)


def word_tokenizer(words: int = VOCAB):
    """A word-level tokenizer of EWT dev's ``words`` most frequent lower-cased words (BERT's
    pre-tokenization; ``[UNK]`` for the rest, 10.8% of the first 128 sentences' tokens),
    ``[CLS] … [SEP]`` around each sentence: a vocabulary a small model's head can afford."""
    import collections

    import conllu
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    with open(EWT, encoding="utf-8") as fh:
        texts = [s.metadata["text"] for s in conllu.parse(fh.read())]
    pre = pre_tokenizers.BertPreTokenizer()
    counts = collections.Counter(w.lower() for t in texts for w, _ in pre.pre_tokenize_str(t))
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
    vocab = {t: i for i, t in enumerate(specials + [w for w, _ in counts.most_common(words - len(specials))])}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tk.normalizer = normalizers.Lowercase()
    tk.pre_tokenizer = pre
    tk.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tk, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]"
    )


def build_adapter():
    import transformers as tr

    from probe.models import ModelAdapter
    from probe.models.architectures import family_for

    tok = word_tokenizer()
    cfg = tr.GPT2Config(vocab_size=len(tok), n_positions=512, bos_token_id=2, eos_token_id=3, **SHAPE)
    torch.manual_seed(0)
    model = tr.AutoModelForCausalLM.from_config(cfg).eval()
    return ModelAdapter(name="gpt2-4x8", model=model, tokenizer=tok, family=family_for("gpt2"))


def setup(n: int):
    """``(adapter, corpus, objective, batches)``: the model, the first ``n`` EWT dev
    sentences, the loss objective and the sweep's batches ``[(number, MetricBatch)]``."""
    from probe.analyses.claims.removal import sweep_batches
    from probe.analyses.common.objective import resolve_objective
    from probe.inputs.corpus import load_corpus

    adapter = build_adapter()
    corpus = load_corpus(conllu=str(EWT), limit=n)
    obj, _ = resolve_objective("auto", adapter, corpus)
    batches = [
        (num, list(idx), obj.make_batch(adapter, corpus, list(idx)))
        for num, idx in sweep_batches(adapter, corpus, BATCH)
    ]
    return adapter, corpus, obj, batches


# ---------------------------------------------------------------- probe


def run_probe(ctx, mode: str) -> np.ndarray:
    from probe.analyses.claims.removal import removal_sweep

    adapter, corpus, obj, _ = ctx
    return removal_sweep(adapter, corpus, obj, modes=(mode,), batch_size=BATCH, seed=SEED).harm[mode]


# ---------------------------------------------------------------- the peers' shared pieces


class _Logits:
    """The readout's view of a peer's output (``.logits``)."""

    def __init__(self, logits):
        self.logits = logits


def kind_means(ctx, z_of) -> dict:
    """Per-position-kind means of every head's ``z``, as the toolkit defines them
    (:func:`probe.analyses.necessity.ablation.position_kind_means`: float64 sums over the
    non-padding positions of each kind, a kind absent from the corpus gets the overall mean),
    from ``z_of(batch) -> {layer: [b, s, H, dh]}`` (the peer's caching pass)."""
    from probe.analyses.necessity.position_kinds import position_kinds

    adapter, _, _, batches = ctx
    kinds = position_kinds(adapter)
    L, H, dh = adapter.n_layers, adapter.n_heads, adapter.head_dim
    sums = torch.zeros(kinds.n, L, H, dh, dtype=torch.float64)
    counts = torch.zeros(kinds.n, dtype=torch.float64)
    for _, _, batch in batches:
        z = z_of(batch)
        valid = batch.inputs["attention_mask"].bool()
        kind = kinds.index(batch)
        for k in range(kinds.n):
            sel = valid & (kind == k)
            counts[k] += float(sel.sum())
            for layer in range(L):
                sums[k, layer] += z[layer].double()[sel].sum(0)
    means = sums / counts.clamp(min=1)[:, None, None, None]
    means[counts == 0] = sums.sum(0) / counts.sum().clamp(min=1)
    return {"means": means.float(), "kinds": kinds}


def replacement(ctx, mode, number, batch, z_clean, means):
    """``layer -> [b, s, H, dh]`` (None: zero) for one batch under ``mode``."""
    from probe.analyses.claims.removal import resample_sources
    from probe.analyses.necessity.position_kinds import position_kinds

    adapter = ctx[0]
    L = adapter.n_layers
    if mode == "zero":
        return {layer: None for layer in range(L)}
    if mode == "mean":
        kind = means["kinds"].index(batch)  # [b, s]
        return {layer: means["means"][:, layer][kind] for layer in range(L)}
    gen = torch.Generator().manual_seed(SEED * 1_000_003 + int(number))
    src = resample_sources(position_kinds(adapter).index(batch), batch.inputs["attention_mask"], gen).reshape(-1)
    out = {}
    for layer in range(L):
        b, s, H, dh = z_clean[layer].shape
        out[layer] = z_clean[layer].reshape(b * s, H, dh)[src].reshape(b, s, H, dh)
    return out


def peer_sweep(ctx, mode, forward, z_of) -> np.ndarray:
    """The natural loop: per batch a clean forward (caching ``z`` where resample needs it), then
    one forward per head with that head's ``z`` replaced. ``forward(batch, layer, head, value)``
    -> logits (``layer`` None: clean); ``z_of(batch)`` -> every layer's ``z``."""
    adapter, corpus, obj, batches = ctx
    L, H = adapter.n_layers, adapter.n_heads
    means = kind_means(ctx, z_of) if mode == "mean" else None
    n = len(corpus)
    clean = np.zeros(n)
    pert = np.zeros((L * H, n))
    for number, idx, batch in batches:
        if mode == "resample":
            z_clean = z_of(batch)
            logits = z_clean.pop("logits")
        else:
            z_clean, logits = None, forward(batch, None, None, None)
        clean[idx] = obj.readout(_Logits(logits), batch).double().numpy()
        values = replacement(ctx, mode, number, batch, z_clean, means)
        for layer in range(L):
            for h in range(H):
                v = values[layer]
                out = forward(batch, layer, h, None if v is None else v[:, :, h])
                pert[layer * H + h, idx] = obj.readout(_Logits(out), batch).double().numpy()
    return np.stack([obj.harm(clean, pert[j]) for j in range(L * H)])


# ---------------------------------------------------------------- nnsight


def nnsight_methods(ctx):
    from nnsight import NNsight

    adapter = ctx[0]
    model = copy.deepcopy(adapter.model)
    nn_model = NNsight(model)
    dh, L = adapter.head_dim, adapter.n_layers

    def forward(batch, layer, head, value):
        with nn_model.trace(**batch.inputs):
            if layer is not None:
                z = nn_model.transformer.h[layer].attn.c_proj.input
                z[:, :, head * dh : (head + 1) * dh] = 0 if value is None else value.reshape(*value.shape[:2], dh)
            out = nn_model.output.logits.save()
        return out

    def z_of(batch):
        saved = {}
        with nn_model.trace(**batch.inputs):
            for layer in range(L):
                saved[layer] = nn_model.transformer.h[layer].attn.c_proj.input.save()
            saved["logits"] = nn_model.output.logits.save()
        b, s = batch.inputs["input_ids"].shape
        return {k: (v if k == "logits" else v.reshape(b, s, adapter.n_heads, dh)) for k, v in saved.items()}

    return forward, z_of


# ---------------------------------------------------------------- the loop with no library


def plain_methods(ctx):
    """The natural loop with no library: a PyTorch forward pre-hook on ``attn.c_proj`` setting
    the head's slice of its input. What nnsight's and TransformerLens's loops cost without
    their machinery: the work any one-forward-per-head loop does."""
    adapter = ctx[0]
    model = copy.deepcopy(adapter.model)
    dh, L = adapter.head_dim, adapter.n_layers
    projs = [model.transformer.h[layer].attn.c_proj for layer in range(L)]

    def forward(batch, layer, head, value):
        if layer is None:
            return model(**batch.inputs).logits

        def edit(module, args):
            z = args[0].clone()
            z[:, :, head * dh : (head + 1) * dh] = 0 if value is None else value.reshape(*value.shape[:2], dh)
            return (z,)

        handle = projs[layer].register_forward_pre_hook(edit)
        try:
            return model(**batch.inputs).logits
        finally:
            handle.remove()

    def z_of(batch):
        saved = {}
        hooks = [
            p.register_forward_pre_hook(lambda m, a, layer=layer: saved.__setitem__(layer, a[0].detach()))
            for layer, p in enumerate(projs)
        ]
        try:
            saved["logits"] = model(**batch.inputs).logits
        finally:
            for h in hooks:
                h.remove()
        b, s = batch.inputs["input_ids"].shape
        return {k: (v if k == "logits" else v.reshape(b, s, adapter.n_heads, dh)) for k, v in saved.items()}

    return forward, z_of


# ---------------------------------------------------------------- TransformerLens


def tl_methods(ctx):
    from transformer_lens.model_bridge.sources._bridge_builder import build_bridge_from_module

    adapter = ctx[0]
    model = copy.deepcopy(adapter.model)
    bridge = build_bridge_from_module(model, "GPT2LMHeadModel", hf_config=model.config, tokenizer=adapter.tokenizer)
    L = adapter.n_layers
    names = [f"blocks.{layer}.attn.hook_z" for layer in range(L)]

    def forward(batch, layer, head, value):
        kw = dict(attention_mask=batch.inputs["attention_mask"])
        if layer is None:
            return bridge(batch.inputs["input_ids"], **kw)

        def edit(z, hook):
            z[:, :, head] = 0 if value is None else value
            return z

        return bridge.run_with_hooks(batch.inputs["input_ids"], fwd_hooks=[(names[layer], edit)], **kw)

    def z_of(batch):
        logits, cache = bridge.run_with_cache(
            batch.inputs["input_ids"], attention_mask=batch.inputs["attention_mask"], names_filter=names
        )
        out = {layer: cache[names[layer]] for layer in range(L)}
        out["logits"] = logits
        return out

    return forward, z_of


def methods(ctx) -> dict:
    nn_fwd, nn_z = nnsight_methods(ctx)
    tl_fwd, tl_z = tl_methods(ctx)
    pl_fwd, pl_z = plain_methods(ctx)
    return {
        "probe": lambda mode: run_probe(ctx, mode),
        "nnsight": lambda mode: peer_sweep(ctx, mode, nn_fwd, nn_z),
        "TL": lambda mode: peer_sweep(ctx, mode, tl_fwd, tl_z),
        "plain": lambda mode: peer_sweep(ctx, mode, pl_fwd, pl_z),
    }


# ---------------------------------------------------------------- work


def multiply_adds(run) -> int:
    """The multiply-adds of every linear map ``run()`` applies, counted by a global forward
    hook (``nn.Linear`` and GPT-2's ``Conv1D``: input rows × in × out; the attention scores,
    norms and activations, a few % of the work here, not counted). The model's work, whatever
    the method's machinery costs in time."""
    from torch.nn.modules.module import register_module_forward_hook

    total = [0]

    def hook(module, args, output):
        if not args or not hasattr(args[0], "shape"):
            return
        if isinstance(module, torch.nn.Linear):
            fan_in, fan_out = module.in_features, module.out_features
        elif type(module).__name__ == "Conv1D":
            fan_in, fan_out = module.weight.shape
        else:
            return
        total[0] += int(args[0].shape[:-1].numel()) * int(fan_in) * int(fan_out)

    handle = register_module_forward_hook(hook)
    try:
        run()
    finally:
        handle.remove()
    return total[0]


# ---------------------------------------------------------------- memory


def _status_mib(key: str) -> float:
    with open("/proc/self/status") as f:
        return int(next(line.split()[1] for line in f if line.startswith(key + ":"))) / 1024


def _peak(method: str, n: int, threads: int, q) -> None:
    torch.set_num_threads(threads)
    with torch.no_grad():
        ctx = setup(n)
        run = methods(ctx)[method]
        run("zero")  # warm (imports, the bridge's first call) before the mark is reset
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        base = _status_mib("VmRSS")
        for mode in MODES:
            run(mode)
        q.put((base, _status_mib("VmHWM")))


def peaks(n: int, threads: int) -> dict:
    out = {}
    spawn = mp.get_context("spawn")
    for method in METHODS:
        q = spawn.Queue()
        p = spawn.Process(target=_peak, args=(method, n, threads, q))
        p.start()
        out[method] = q.get()
        p.join()
    return out


# ---------------------------------------------------------------- main


def measure(n: int, repeats: int, warm: bool = True) -> tuple:
    ctx = setup(n)
    run = methods(ctx)
    keys = [(m, mode) for m in METHODS for mode in MODES]
    results = {k: run[k[0]](k[1]) for k in keys} if warm else {}  # warm-up, and the values compared
    times: dict = {key: [] for key in keys}
    order = list(keys)
    rng = random.Random(n)
    for _ in range(repeats):
        rng.shuffle(order)
        for m, mode in order:
            t = time.perf_counter()
            r = run[m](mode)
            times[m, mode].append(time.perf_counter() - t)
            results.setdefault((m, mode), r)  # without a warm-up, the first round's values
    diffs = {
        (m, mode): float(np.abs(results[m, mode] - results["probe", mode]).max()) for m in METHODS[1:] for mode in MODES
    }
    lengths = [int(b.inputs["attention_mask"].sum()) for _, _, b in ctx[3]]
    work = {key: multiply_adds(lambda key=key: run[key[0]](key[1])) for key in keys}
    return times, diffs, sum(lengths), len(ctx[3]), work


def print_times(n: int, times: dict, diffs: dict, tokens: int, n_batches: int) -> None:
    """The timing table's rows for one ``n``: each mode's medians and ratios, the three modes together."""
    med = {k: statistics.median(v) for k, v in times.items()}
    for mode in MODES:
        p, nn, tl, pl = (med[m, mode] for m in METHODS)
        print(
            f"| {n} | {mode} | {p:.2f} | {nn:.2f} | {tl:.2f} | {pl:.2f} | {nn / p:.2f}× | {tl / p:.2f}× | {pl / p:.2f}× | "
            f"{diffs['nnsight', mode]:.1e} | {diffs['TL', mode]:.1e} | {diffs['plain', mode]:.1e} |",
            flush=True,
        )
    every = {m: [sum(x) for x in zip(*(times[m, mode] for mode in MODES))] for m in METHODS}
    tot = {m: statistics.median(v) for m, v in every.items()}
    print(
        f"| {n} | all three | {tot['probe']:.2f} | {tot['nnsight']:.2f} | {tot['TL']:.2f} | {tot['plain']:.2f} | "
        f"{tot['nnsight'] / tot['probe']:.2f}× | {tot['TL'] / tot['probe']:.2f}× | {tot['plain'] / tot['probe']:.2f}× | | | |",
        flush=True,
    )
    print(
        f"|   | ({tokens} tokens in {n_batches} batches; per-round times: "
        + "; ".join(f"{m} {mode} [{', '.join(f'{t:.2f}' for t in times[m, mode])}]" for m in METHODS for mode in MODES)
        + ") | | | | | | | | | | |",
        flush=True,
    )


def print_work(works: dict) -> None:
    """Each method's model work (multiply-adds of its linear maps, :func:`multiply_adds`) and
    the time it took per unit of work: a ratio of times is the ratio of work × the ratio of
    time per work. The peers' loops do the plain loop's work; the sweep does less (each head
    from its own layer's output projection on, no padding or unread last token) in fewer,
    larger forwards."""
    print("\nwork: multiply-adds of the linear maps (GMAC) and seconds per GMAC (the median time / the work)\n")
    print(
        "| n | mode | "
        + " | ".join(f"{m} GMAC" for m in METHODS)
        + " | "
        + " | ".join(f"{m} s/GMAC" for m in METHODS)
        + " |"
    )
    print("|---:|---|" + "---:|" * (2 * len(METHODS)))
    said = []
    for n, (work, med) in works.items():
        for mode in MODES:
            g = {m: work[m, mode] / 1e9 for m in METHODS}
            print(
                f"| {n} | {mode} | "
                + " | ".join(f"{g[m]:.2f}" for m in METHODS)
                + " | "
                + " | ".join(f"{med[m, mode] / g[m]:.3f}" for m in METHODS)
                + " |"
            )
        zero = {m: work[m, "zero"] for m in METHODS}
        tl_ratio = med["TL", "zero"] / med["probe", "zero"]
        work_ratio = zero["TL"] / zero["probe"]
        said.append(
            f"n = {n}, zero: the sweep does {zero['probe'] / zero['plain']:.0%} of the plain loop's work; "
            f"TL / probe {tl_ratio:.2f}× = work {work_ratio:.2f}× × time per work "
            f"{tl_ratio / work_ratio:.2f}× (TL's machinery and small forwards: "
            f"{med['TL', 'zero'] / med['plain', 'zero']:.2f}× the plain loop's time for its work). "
            f"At this work, 4× TL would need the sweep's multiply-adds {4.0 / work_ratio:.2f}× faster than TL's, "
            f"{4.0 / work_ratio * med['plain', 'zero'] / med['TL', 'zero']:.2f}× faster than the plain loop's."
        )
    print("\n" + "\n".join(said))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[32, 128])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--no-warmup", action="store_true", help="time the first round too (its values compared)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    import nnsight
    import transformers as tr
    from importlib.metadata import version

    load0 = os.getloadavg()
    print(
        f"torch {torch.__version__}, transformers {tr.__version__}, transformer-lens {version('transformer-lens')}, "
        f"nnsight {nnsight.__version__}; random GPT-2 4 layers × 8 heads (128 wide, vocabulary 2,048), next-token loss, batch {BATCH}, "
        f"{args.threads} thread(s), median of {args.repeats} shuffled rounds"
        + (" (no warm-up round)" if args.no_warmup else "")
    )
    print(f"load average before: {' '.join(f'{x:.2f}' for x in load0)}\n")
    print(
        "| n | mode | probe s | nnsight s | TL s | plain s | nnsight / probe | TL / probe | plain / probe "
        "| max \\|Δ\\| nnsight | max \\|Δ\\| TL | max \\|Δ\\| plain |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    works = {}
    with torch.no_grad():
        for n in args.n:
            times, diffs, tokens, n_batches, work = measure(n, args.repeats, warm=not args.no_warmup)
            works[n] = (work, {k: statistics.median(v) for k, v in times.items()})
            print_times(n, times, diffs, tokens, n_batches)
    print_work(works)
    print(f"\nload average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if not args.no_memory:
        n = max(args.n)
        for m, (base, peak) in peaks(n, args.threads).items():
            print(
                f"peak RSS {m:<8} n={n}, three modes: {peak:.0f} MiB (after setup {base:.0f} MiB, +{peak - base:.0f} MiB)"
            )


if __name__ == "__main__":
    main()
