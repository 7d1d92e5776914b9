"""``probe patch``: activation patching of each head (clean output into the corrupted run)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from probe.app.registry import Analysis, Param, Result

from ._shared import BATCH, GROUPS, N_BOOT, group_note, group_table, head_name

if TYPE_CHECKING:
    from probe.app.registry import Context


def _corrupted(ctx, clean):
    from probe.inputs.corpus import Corpus, load_corpus

    p = ctx.params
    if p["corrupted"] or p["corrupted_file"]:
        return load_corpus(text=p["corrupted"] or None, file=p["corrupted_file"], limit=ctx.limit)
    if clean.examples and ctx.zoo_task == "induction":
        from probe.analyses.necessity.patching import corrupt_zoo

        ex = corrupt_zoo(ctx.adapter.card.get("task", ""), clean.examples)
        ctx.say("corrupted inputs: zoo:induction's built-in corruption (the first copy replaced)")
        return Corpus(texts=tuple(e["text"] for e in ex), examples=tuple(ex), source="corrupted")
    ctx.say(
        "corrupted inputs: each example's words in a seeded random order (same tokens and length; "
        "give --corrupted or --corrupted-file for your own)"
    )
    return shuffled_words(clean)


def shuffled_words(corpus: Any, seed: int = 0) -> Any:
    """Each example's words (whitespace-separated) in a seeded random order: a corruption
    that keeps the tokens, so the pair tokenizes to the same length."""
    import random
    from probe.inputs.corpus import Corpus

    rng = random.Random(seed)
    texts = []
    for t in corpus.texts:
        words = t.split()
        order = list(range(len(words)))
        for _ in range(10):  # a different order where one exists
            rng.shuffle(order)
            if order != sorted(order) or len(words) < 2:
                break
        texts.append(" ".join(words[i] for i in order))
    examples = (
        tuple(dict(e, text=t, words=t.split()) for e, t in zip(corpus.examples, texts)) if corpus.examples else ()
    )
    return Corpus(texts=tuple(texts), examples=examples, source="shuffled words")


def run(ctx: Context) -> Result:
    from probe.analyses.necessity.head_groups import patch_group
    from probe.analyses.necessity.patching import patch_heads

    p = ctx.params
    from probe.inputs.corpus import fit_pairs

    clean = ctx.corpus.as_given
    bad = _corrupted(ctx, clean)
    clean, bad = fit_pairs(clean, bad, ctx.adapter)  # a pair with an over-long side is dropped whole
    objective = ctx.objective("per-example")
    name = objective.called
    res = patch_heads(
        ctx.adapter,
        clean,
        bad,
        objective,
        batch_size=p["batch_size"],
        n_boot=p["n_boot"],
        progress=ctx.progress and len(clean) > 1,
    )
    groups = [
        patch_group(ctx.adapter, clean, bad, g, objective, batch_size=p["batch_size"], n_boot=p["n_boot"])
        for g in p["group"]
        if g
    ]
    gt = group_table(groups)
    best = res.table.sort_values("restored", ascending=False).head(3)

    def figure(d):
        from probe.app.report.ablation_figures import head_heatmap

        return [
            head_heatmap(res.table, "restored", d / "patching.png", f"{ctx.adapter.name}: restored fraction ({name})")
        ]

    notes = [
        f"{len(clean)} pairs, metric {name}; most restoring: "
        + ", ".join(f"{head_name(r.layer, r.head)} {r.restored:.2f}" for r in best.itertuples())
    ]
    if len(clean) < 2:
        notes.append("1 pair: no confidence interval (ci_low/ci_high are empty); give at least 2 pairs")
    if gt is not None:
        notes.append(group_note(gt))
    summary = {
        "model": ctx.adapter.name,
        "pairs": len(clean),
        "metric": name,
        "path": res.path,
        "clean": float(res.clean.mean()),
        "corrupted": float(res.corrupted.mean()),
        "top": best[["layer", "head", "restored"]].to_dict("records"),
    }
    tables = {"patching": res.table, **({"groups": gt} if gt is not None else {})}
    per_head = res.table[["layer", "head", "restored"]].rename(columns={"restored": "patching_restored"})
    return Result(
        tables=tables, per_head=per_head, notes=notes, summary=summary, summary_name="patching", writers=[figure]
    )


ANALYSIS = Analysis(
    "patch",
    "Activation patching: which head's clean output restores the corrupted run?",
    run,
    needs=("model", "corpus"),
    help="Patch each head's clean output into the corrupted run; write patching.csv (restored fraction with "
    "bootstrap CI) and a heatmap. With a zoo model and no input, the evaluation set is paired with "
    "corrupted copies (zoo:induction: the first half replaced).",
    objective="per-example",
    params=(
        Param("corrupted", str, None, "corrupted partner of each --text (repeatable, in order)", multiple=True),
        Param("corrupted_file", str, None, "one corrupted input per line, paired with the lines of --file"),
        N_BOOT,
        GROUPS,
        BATCH,
    ),
    order=33,
    example="probe patch --model zoo:induction --objective accuracy --limit 20 --group L1H0,L1H1 --out out/patch",
)
