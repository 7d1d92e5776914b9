"""Edge attribution vs exact path patching on every edge of MiniLM (6 layers x 12 heads),
side by side in one run, on the same sentence pairs.

Objective: cosine of the mean-pooled embedding to the corrupted partner's embedding
(:class:`probe.analyses.circuits.objectives.SimilarityMetric`); pairs differ in one or two
content words (same token length).

* EAP and EAP-IG (5 steps): all 6,552 edges (72 heads x later q/k/v slots, + 72 head->output).
* exact path patching: too slow for all edges on a CPU, so two timed parts, labelled:
  (a) the 72 head->output edges (one frozen-heads forward block per sender: step 1 of every
  sender), (b) every edge out of one sender (head 0.0: 180 head->head edges, step 2);
  all edges extrapolated as (a) + 6,480 x (b's time per edge). Rank agreement (Spearman)
  with EAP/EAP-IG over the 252 edges patched exactly.

    python bench/bench_circuits.py [--pairs 8]

``--heads``: instead, the head circuit curve (MiniLM is post-LayerNorm, so the edge curve is
not defined; :mod:`probe.analyses.circuits.heads`): heads ranked by the sum of their
outgoing EAP / EAP-IG edge scores, heads outside the circuit writing their corrupted output;
faithfulness at k heads, the smallest 90% circuit, and 20 random head orders beside it.

    python bench/bench_circuits.py --heads [--pairs 8]

``--seq2seq``: exact path patching vs EAP / EAP-IG over every edge of tiny randomly
initialised BART and T5 models (2 + 2 layers, 4 heads, unit-gain weights, as in
``tests/test_circuits.py``), teacher-forced loss of fixed targets, encoder input corrupted:
Spearman overall and per edge kind, and the time of each method.

    python bench/bench_circuits.py --seq2seq
"""

from __future__ import annotations

import argparse
import time
from probe.analyses.common.objective import get_metric

PAIRS = [
    ("the cat sat quietly on the warm mat", "the dog sat quietly on the cold mat"),
    ("she bought fresh bread at the market", "she sold fresh fish at the market"),
    ("the children played football in the park", "the children played chess in the house"),
    ("he drove his car to the city yesterday", "he rode his horse to the city yesterday"),
    ("the river flows slowly through the valley", "the road runs slowly through the valley"),
    ("my sister reads books every evening", "my brother writes letters every evening"),
    ("the storm destroyed many old houses", "the fire destroyed many old trees"),
    ("we ate dinner at a small restaurant", "we ate lunch at a small hotel"),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--heads", action="store_true", help="the head circuit curve instead of the timing")
    ap.add_argument("--seq2seq", action="store_true", help="encoder-decoder agreement on tiny BART and T5")
    args = ap.parse_args()
    if args.heads:
        return head_curve(args.pairs)
    if args.seq2seq:
        return seq2seq()
    import torch
    from probe.analyses.circuits.attribution import edge_attribution
    from probe.analyses.circuits.edges import Edge, all_edges
    from probe.analyses.circuits.objectives import SimilarityMetric
    from probe.analyses.circuits.path_patching import path_patch
    from probe.models import load_model
    from scipy.stats import spearmanr

    torch.set_num_threads(2)
    a = load_model("minilm")
    clean = [p[0] for p in PAIRS[: args.pairs]]
    bad = [p[1] for p in PAIRS[: args.pairs]]
    m = SimilarityMetric(bad)
    edges = all_edges(a)
    inner = [e for e in edges if not e.to_output]
    print(
        f"minilm: {a.n_layers} layers x {a.n_heads} heads, {len(edges)} edges ({len(inner)} head->head q/k/v, "
        f"{len(edges) - len(inner)} head->output); {len(clean)} pairs; machine shared (2 cores), one run"
    )
    t = time.perf_counter()
    eap = edge_attribution(a, clean, bad, m, "eap", batch_size=8)
    t_eap = time.perf_counter() - t
    t = time.perf_counter()
    ig = edge_attribution(a, clean, bad, m, "eap-ig", steps=5, batch_size=8)
    t_ig = time.perf_counter() - t
    outs = [Edge(l, h, -1, -1, "out") for l in range(a.n_layers) for h in range(a.n_heads)]
    t = time.perf_counter()
    ex_out = path_patch(a, clean, bad, m, outs, batch_size=8)
    t_out = time.perf_counter() - t
    one = [e for e in inner if e.sender == (0, 0)]
    t = time.perf_counter()
    ex_one = path_patch(a, clean, bad, m, one, batch_size=8)
    t_one = time.perf_counter() - t
    per_edge = (t_one - t_out / len(outs)) / len(one)
    t_all = t_out + per_edge * len(inner)
    print(f"objective: clean {ex_out.clean.mean():.4f}, corrupted {ex_out.corrupted.mean():.4f} (cosine to partner)")
    print("| method | edges | seconds | passes per batch |")
    print("| --- | --- | --- | --- |")
    print(f"| EAP | {len(edges)} (all) | {t_eap:.1f} | {eap.passes} |")
    print(f"| EAP-IG (5 steps) | {len(edges)} (all) | {t_ig:.1f} | {ig.passes} |")
    print(f"| exact, measured: head->output | {len(outs)} | {t_out:.1f} | |")
    print(f"| exact, measured: edges out of head 0.0 | {len(one)} | {t_one:.1f} | |")
    print(f"| exact, EXTRAPOLATED to all edges | {len(edges)} | {t_all:.0f} | |")
    print(f"ratio exact (extrapolated) / EAP: {t_all / t_eap:.0f}x; / EAP-IG: {t_all / t_ig:.0f}x")
    exact = dict(zip(ex_out.table["edge"], ex_out.table["effect"]))
    exact.update(zip(ex_one.table["edge"], ex_one.table["effect"]))
    for name, res in (("EAP", eap), ("EAP-IG", ig)):
        sub = res.table[res.table["edge"].isin(exact)]
        rho = spearmanr(sub["effect"], sub["edge"].map(exact))[0]
        rho_out = spearmanr(sub[sub.channel == "out"]["effect"], sub[sub.channel == "out"]["edge"].map(exact))[0]
        print(f"Spearman exact vs {name}: {rho:.2f} over {len(sub)} edges ({rho_out:.2f} over the 72 head->output)")
    top = ex_out.table.sort_values("effect", ascending=False).head(5)
    print(
        "heads feeding the similarity most (exact head->output effect, share of the corruption's change): "
        + ", ".join(f"{r.sender_layer}.{r.sender_head} {r.effect:.3f}" for r in top.itertuples())
    )
    topi = ig.table[~ig.table.channel.eq("out")].sort_values("effect", key=abs, ascending=False).head(5)
    print("largest head->head edges by EAP-IG: " + ", ".join(f"{r.edge} {r.effect:.3f}" for r in topi.itertuples()))


SEQ2SEQ_CLEAN = ["the cat sat on the mat today", "a dog ran in the big park"]
SEQ2SEQ_CORRUPT = ["the cow ate on the hill today", "a man ran at the old house"]
SEQ2SEQ_TARGETS = ["le chat est assis sur le tapis", "un chien court dans le parc"]


def seq2seq() -> None:
    import torch
    import transformers as T
    from probe.analyses.circuits.attribution import edge_attribution
    from probe.analyses.circuits.path_patching import path_patch
    from probe.models import ModelAdapter
    from probe.models.registry import minilm_path
    from scipy.stats import spearmanr

    from probe.inputs.corpus import Corpus

    torch.set_num_threads(1)
    tok = T.AutoTokenizer.from_pretrained(str(minilm_path()), local_files_only=True)
    v = len(tok)
    configs = {
        "bart": (
            T.BartConfig(
                vocab_size=v, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, pad_token_id=0,
                bos_token_id=101, eos_token_id=102, decoder_start_token_id=101, forced_eos_token_id=None,
            ),
            T.BartForConditionalGeneration,
        ),
        "t5": (
            T.T5Config(vocab_size=v, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, pad_token_id=0,
                       decoder_start_token_id=0),
            T.T5ForConditionalGeneration,
        ),
    }  # fmt: skip
    clean = Corpus(texts=tuple(SEQ2SEQ_CLEAN), targets=tuple(SEQ2SEQ_TARGETS))
    bad = Corpus(texts=tuple(SEQ2SEQ_CORRUPT), targets=tuple(SEQ2SEQ_TARGETS))
    print("| model | edges | Spearman exact vs EAP | vs EAP-IG (4 steps) | EAP: encoder -> cross k/v | "
          "seconds exact / EAP / EAP-IG |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- |")
    for family, (cfg, cls) in configs.items():
        torch.manual_seed(0)
        model = cls(cfg)
        with torch.no_grad():
            for n, p in model.named_parameters():
                if p.dim() == 2 and not any(k in n for k in ("emb", "shared", "lm_head")):
                    p.normal_(0, p.shape[-1] ** -0.5)
        a = ModelAdapter(name=f"tiny-{family}", model=model, tokenizer=tok, family=family)
        times = []
        t = time.perf_counter()
        pp = path_patch(a, clean, bad, get_metric("loss", a))
        times.append(time.perf_counter() - t)
        t = time.perf_counter()
        eap = edge_attribution(a, clean, bad, get_metric("loss", a), "eap")
        times.append(time.perf_counter() - t)
        t = time.perf_counter()
        ig = edge_attribution(a, clean, bad, get_metric("loss", a), "eap-ig", steps=4)
        times.append(time.perf_counter() - t)
        cross = pp.table["channel"].isin(["k", "v"]) & pp.table["edge"].str.contains("->x")
        rho = lambda x, y: spearmanr(x, y)[0]  # noqa: E731
        print(
            f"| {family} (loss clean {pp.clean.mean():.3f}, corrupted {pp.corrupted.mean():.3f}) | {len(pp.table)} | "
            f"{rho(pp.table.effect, eap.table.effect):.2f} | {rho(pp.table.effect, ig.table.effect):.2f} | "
            f"{rho(pp.table.effect[cross], eap.table.effect[cross]):.2f} ({int(cross.sum())} edges) | "
            + " / ".join(f"{x:.1f}" for x in times)
            + " |"
        )


def head_curve(pairs: int) -> None:
    import numpy as np
    import torch
    from probe.analyses.circuits.attribution import edge_attribution
    from probe.analyses.circuits.heads import head_circuit_objective, head_recovery_curve
    from probe.analyses.circuits.objectives import SimilarityMetric
    from probe.models import load_model

    torch.set_num_threads(2)
    a = load_model("minilm")
    clean = [p[0] for p in PAIRS[:pairs]]
    bad = [p[1] for p in PAIRS[:pairs]]
    m = SimilarityMetric(bad)
    ks = [1, 2, 4, 8, 10, 13, 18, 24, 36, 48, 60, 72]
    rng = np.random.default_rng(0)
    every = [(l, h) for l in range(a.n_layers) for h in range(a.n_heads)]
    orders = [[every[i] for i in rng.permutation(len(every))] for _ in range(20)]
    curves = {}
    for name, method in (("EAP", "eap"), ("EAP-IG (5 steps)", "eap-ig")):
        t = time.perf_counter()
        res = edge_attribution(a, clean, bad, m, method, steps=5, batch_size=8)
        hc = head_recovery_curve(a, clean, bad, m, res.table, share=0.9, batch_size=8)
        curves[name] = (hc, time.perf_counter() - t)
    hc0 = next(iter(curves.values()))[0]
    vals = head_circuit_objective(a, clean, bad, m, [o[:k] for o in orders for k in ks], batch_size=8)
    rand = (vals.reshape(len(orders), len(ks)) - hc0.empty) / (hc0.full - hc0.empty)
    print(
        f"minilm, {len(clean)} pairs, similarity: m(all heads) = {hc0.full:.4f} (clean), "
        f"m(no head) = {hc0.empty:.4f} (every head corrupted; embeddings and MLPs clean)"
    )
    print("| heads kept | " + " | ".join(str(k) for k in ks) + " |")
    print("| --- |" + " --- |" * len(ks))
    for name, (hc, _) in curves.items():
        f = hc.curve.set_index("n_heads")["faithfulness"]
        print(f"| {name} ranking | " + " | ".join(f"{f[k]:.2f}" for k in ks) + " |")
    print("| random orders: median | " + " | ".join(f"{v:.2f}" for v in np.median(rand, 0)) + " |")
    print("| random orders: 95th pct | " + " | ".join(f"{v:.2f}" for v in np.quantile(rand, 0.95, 0)) + " |")
    for name, (hc, secs) in curves.items():
        names = [f"{l}.{h}" for l, h in hc.circuit]
        print(
            f"{name}: smallest 90% circuit {len(names)} heads (faithfulness "
            f"{hc.curve['faithfulness'].iloc[len(names)]:.3f}): "
            + ", ".join(names)
            + f"; {secs:.0f} s (scores + curve)"
        )


if __name__ == "__main__":
    main()
