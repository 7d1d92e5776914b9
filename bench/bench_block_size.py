"""The block test's block size on a per-example objective: its error rates and the examples it
takes, on a real model's own harms.

    python bench/bench_block_size.py                  # SmolLM2, 256 EWT dev sentences, blocks 16 / 32 / 64
    python bench/bench_block_size.py --rounds 4000 --blocks 32,64

The screened path decides each exactly removed head with the block test
(:class:`probe.analyses.necessity.sequential.MixtureTest`: a normal-mixture e-process on each
block's mean harm and its estimated variance, Howard et al. 2021), which is valid only as the
block means approach a Gaussian (Waudby-Smith et al. 2024). How small may a block be?

1. **Harms**: every listed head (default: the heads SmolLM2's report removed exactly: the
   eight its screen confirmed and eight it audited) mean-ablated on every one of the corpus'
   sentences, the next-token loss's harm per sentence (``removal_sweep``, the exact path's
   own removals; ``[heads, n]``). The bar is the report's: the floor and the null model's
   (``--bar``, default the objective's floor 0.02 raised to SmolLM2's null bar 0.0757).
2. **Error rates at the boundary**: each head's harms shifted so their mean is the bar
   exactly, then ``--rounds`` sequences of ``n`` sentences drawn from them with replacement
   (the skew and tails of the real harms kept) and fed to the test in blocks. A head whose
   mean *is* the bar must be stopped as "not necessary" (``E' ≥ 1/q``) in at most a share
   ``q`` of the sequences, and stopped as "necessary" at the level ``1/q`` (a lone head
   needs ``m/q``) in at most ``q``: the rates printed per block size are these two
   (the largest over heads, and their mean).
3. **Examples taken** on the heads' own harms (unshifted): the mean number of sentences the
   test takes before it stops, per block size, over the same resampled sequences.

Prints, never asserts.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

#: the heads the SmolLM2 report's screened necessity removed exactly (docs/smollm2.md): the
#: eight it confirmed, then eight of the 27 it audited (its first eight by layer)
DEFAULT_HEADS = "L0H0,L0H1,L0H6,L0H7,L0H8,L1H0,L5H2,L11H1,L0H5,L1H5,L2H5,L5H3,L7H7,L8H5,L12H1,L17H6"


def parse_heads(text: str) -> list:
    out = []
    for part in text.split(","):
        layer, head = part.strip().upper().lstrip("L").split("H")
        out.append((int(layer), int(head)))
    return out


def decide(estimates: np.ndarray, variances: np.ndarray, sizes: list, bar: float, q: float) -> tuple:
    """``(stop, kind)`` of each row of block estimates and their variances ``[r, blocks]``
    (blocks of ``sizes`` examples) fed to the block test
    (:class:`probe.analyses.necessity.sequential.MixtureTest`) at level ``q``, threshold
    ``1/q`` each way: the examples taken at the first stop (all if none) and ``+1`` necessary,
    ``-1`` not necessary, ``0`` none."""
    from probe.analyses.necessity.sequential import MixtureTest

    r = len(estimates)
    test = MixtureTest(r, bar)
    stop = np.full(r, int(sum(sizes)))
    kind = np.zeros(r, int)
    live = np.ones(r, bool)
    level = np.log(1.0 / q)
    for b, size in enumerate(sizes):
        test.update(estimates[:, b], variances[:, b], size, active=live)
        hit_up = live & (test.log_wealth >= level)
        hit_down = live & ~hit_up & (test.log_wealth_against >= level)
        stop[hit_up | hit_down] = int(sum(sizes[: b + 1]))
        kind[hit_up], kind[hit_down] = 1, -1
        live &= ~(hit_up | hit_down)
    return stop, kind


def run_test(harms: np.ndarray, bar: float, block: int, q: float, spread: float = 0.0) -> tuple:
    """:func:`decide` on per-example ``harms`` ``[r, n]`` cut into blocks of ``block``, each
    block's variance as the report takes it (``floored_block_variance``; ``spread``: the floor
    under the per-example variance, 0 for none)."""
    from probe.analyses.necessity.sequential import floored_block_variance

    r, n = harms.shape
    parts = [harms[:, start : start + block] for start in range(0, n, block)]
    got = [floored_block_variance(p, np.full(r, spread)) for p in parts]
    est, var = np.stack([g[0] for g in got], 1), np.stack([g[1] for g in got], 1)
    return decide(est, var, [p.shape[1] for p in parts], bar, q)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--conllu", default="../shared/data/ud-english-ewt/en_ewt-ud-dev.conllu")
    ap.add_argument("--limit", type=int, default=256)
    ap.add_argument("--heads", default=DEFAULT_HEADS)
    ap.add_argument("--bar", type=float, default=0.0757, help="the bar the heads are tested against")
    ap.add_argument("--blocks", default="16,32,64")
    ap.add_argument("--rounds", type=int, default=2000)
    ap.add_argument("--q", type=float, default=0.05)
    ap.add_argument(
        "--harms", default=None, help="an .npy file: the harms are read from it if it exists, else saved to it"
    )
    ap.add_argument(
        "--floors",
        default="none,screen",
        help="the block variance's floor: none, screen (the screen's spread), or both",
    )
    args = ap.parse_args()
    import torch

    from probe.analyses.claims.removal import removal_sweep
    from probe.analyses.common.objective import resolve_objective
    from probe.inputs.corpus import load_corpus
    from probe.models import load_model

    adapter = load_model(args.model)
    corpus = load_corpus(conllu=args.conllu, limit=args.limit)
    obj, _ = resolve_objective("auto", adapter, corpus)
    heads = parse_heads(args.heads)
    t = time.perf_counter()
    if args.harms and Path(args.harms).exists():
        harms = np.load(args.harms)
    else:
        harms = removal_sweep(adapter, corpus, obj, heads, modes=("mean",)).harm["mean"]  # [heads, n]
        if args.harms:
            np.save(args.harms, harms)
    n = harms.shape[1]
    print(
        f"{args.model}, {n} sentences, objective {obj.name}, {len(heads)} heads mean-ablated on every sentence "
        f"({time.perf_counter() - t:.0f} s; torch threads {torch.get_num_threads()}); bar {args.bar}, q {args.q}, "
        f"{args.rounds} resampled sequences per head"
    )
    for (layer, head), h in zip(heads, harms):
        skew = float(((h - h.mean()) ** 3).mean() / h.std() ** 3)
        print(f"  L{layer}H{head}: mean harm {h.mean():+.4f}, sd {h.std(ddof=1):.4f}, skewness {skew:+.1f}")
    floors = args.floors.split(",")
    spread = np.zeros(len(heads))
    if "screen" in floors:  # the first-order screen's per-example estimates of each head, every sentence
        from probe.analyses.necessity.ablation import position_kind_means
        from probe.analyses.necessity.screen import screen_heads

        means = position_kind_means(adapter, corpus, obj, 8, adapter.default_stack)
        scr = screen_heads(adapter, corpus, obj, modes=("mean",), means=means, batch_size=8)
        index = {tuple(h): i for i, h in enumerate(scr.heads)}
        est = scr.estimate["mean"].reshape(n, -1)[:, [index[h] for h in heads]]  # [n, heads]
        spread = est.var(axis=0, ddof=1)
        for (layer, head), h, e in zip(heads, harms, est.T):
            print(
                f"  L{layer}H{head}: the screen's sd {e.std(ddof=1):.4f} against the exact {h.std(ddof=1):.4f} "
                f"(correlation {np.corrcoef(e, h)[0, 1]:+.2f})"
            )
    rng = np.random.default_rng(0)
    draws = rng.integers(0, n, size=(len(heads), args.rounds, n))
    blocks = [int(b) for b in args.blocks.split(",")]
    variants = [(b, f) for f in floors for b in blocks]
    print(
        "| block | variance floor | wrongly 'not necessary' at the bar (max / mean over heads) | wrongly 'necessary' "
        "at the bar, level 1/q (max / mean) | sentences taken on the heads' own harms (mean over heads) |"
    )
    print("| ---: | --- | ---: | ---: | ---: |")
    per_head: dict = {}
    for block, floor in variants:
        down, up, taken = [], [], []
        for h, d, v in zip(harms, draws, spread if floor == "screen" else np.zeros(len(heads))):
            at_bar = (h - h.mean() + args.bar)[d]  # [rounds, n], mean = bar
            _, kind = run_test(at_bar, args.bar, block, args.q, spread=v)
            down.append(float((kind == -1).mean()))
            up.append(float((kind == 1).mean()))
            stop, _ = run_test(h[d], args.bar, block, args.q, spread=v)
            taken.append(float(stop.mean()))
        per_head[block, floor] = (down, taken)
        said = "the screen's spread" if floor == "screen" else "none"
        print(
            f"| {block} | {said} | {max(down):.3f} / {np.mean(down):.3f} | {max(up):.3f} / {np.mean(up):.3f} | "
            f"{np.mean(taken):.1f} |"
        )
    print(
        "per head, by block and floor ("
        + " / ".join(f"{b} {f}" for b, f in variants)
        + "): wrongly 'not necessary' at the bar; sentences taken on its own harms"
    )
    for k, (layer, head) in enumerate(heads):
        wrong = " / ".join(f"{per_head[v][0][k]:.3f}" for v in variants)
        taken = " / ".join(f"{per_head[v][1][k]:.0f}" for v in variants)
        print(f"  L{layer}H{head}: {wrong}; {taken}")


if __name__ == "__main__":
    main()
