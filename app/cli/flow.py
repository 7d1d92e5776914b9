"""``probe rollout`` and ``probe flow``: how much each input token feeds an output
position (Abnar & Zuidema 2020; norm-based and gradient-weighted variants).

Both write ``<method>.json`` (``tokens``, ``output_positions``, ``scores``: one row of
input-token scores per output position), ``<method>.csv`` (tidy) and ``<method>.png``.
"""

from __future__ import annotations

from pathlib import Path

import click

from .common import device_option, model_option, setup_logging, user_errors, verbose_option


def _source_options(fn):
    fn = click.option("--example", type=int, default=None,
                      help="example index in --store (default 0)")(fn)
    fn = click.option("--store", "store_dir", type=click.Path(file_okay=False), default=None,
                      help="a store written by `probe capture`")(fn)
    fn = click.option("--text", "-t", default=None, help="input sentence (with --model)")(fn)
    fn = model_option(fn)
    fn = device_option(fn)
    return fn


def _position_options(fn):
    fn = click.option("--all-positions", is_flag=True,
                      help="score every output position (the full matrix)")(fn)
    fn = click.option("--output-position", "-p", "positions", type=int, multiple=True,
                      help="output position(s) to explain (repeatable; negative counts from "
                           "the end). Default: [CLS] for encoders, the last token for decoders")(fn)
    fn = click.option("--heads", default="mean", show_default=True,
                      help="head combination: 'mean' or head indices like 0,3,5")(fn)
    fn = click.option("--residual", type=click.FloatRange(0, 1), default=0.5, show_default=True,
                      help="identity weight of the residual adjustment")(fn)
    fn = click.option("--out", "-o", required=True, type=click.Path(file_okay=False),
                      help="output directory for JSON, CSV and the heatmap")(fn)
    fn = click.option("-v", "--verbose", is_flag=True)(fn)
    return fn


def _heads(value: str):
    from .common import parse_int_list

    return "mean" if value.strip() == "mean" else parse_int_list(value, "--heads")


def _maps(model, text, store_dir, example, device):
    """The AttentionMaps of one example from --text (live model) or --store."""
    if (text is None) == (store_dir is None):
        raise click.UsageError("give exactly one of --text (with --model) or --store (with --example)")
    if store_dir is not None:
        from probe.store import Store

        store = Store(store_dir)
        i = 0 if example is None else example
        if not -len(store) <= i < len(store):
            raise click.BadParameter(
                f"the store has {len(store)} examples (0..{len(store) - 1})", param_hint="--example")
        return store[i]
    if example is not None:
        raise click.UsageError("--example goes with --store")
    from probe.models import load_model
    from probe.capture import capture

    return capture(load_model(model, device=device), [text])[0]


def _write(scores, out: str, title: str) -> list:
    from probe.app.report.score_figures import token_scores_heatmap

    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    stem = d / scores.method
    scores.to_json(stem.with_suffix(".json"), indent=1)
    scores.to_frame().to_csv(stem.with_suffix(".csv"), index=False)
    png = token_scores_heatmap(scores, stem.with_suffix(".png"), title=title)
    return [stem.with_suffix(".json"), stem.with_suffix(".csv"), png]


def _summary(scores, top: int = 5) -> str:
    """The top words per output position; itself, special tokens and punctuation apart."""
    from probe.app.report.score_figures import split_top

    lines = []
    for r, p in enumerate(scores.output_positions[:3]):
        words, trivial = split_top(scores.tokens, scores.scores[r], p, k=top)
        parts = ", ".join(f"{t} {s:.3f}" for _, t, s in words)
        apart = ", ".join(f"{t} {s:.3f}" for _, t, s in trivial[:4]) + (" …" if len(trivial) > 4 else "")
        lines.append(f"  {p} {scores.tokens[p]}: {parts}")
        lines.append(f"      (apart: itself, special tokens, punctuation: {apart})")
    if len(scores.output_positions) > 3:
        lines.append(f"  … {len(scores.output_positions) - 3} more rows")
    return "\n".join(lines)


@click.command("rollout")
@_source_options
@_position_options
@click.option("--weights", type=click.Choice(["attention", "norm", "grad"]), default="attention",
              show_default=True,
              help="roll out raw attention, norm-based weights ‖αf(x)‖ (Kobayashi 2020) or "
                   "gradient-weighted attention (Chefer 2021); norm and grad need --text")
@user_errors
def rollout_cmd(model, device, text, store_dir, example, out, verbose, residual, heads,
                positions, all_positions, weights):
    """Attention rollout: input-token scores for chosen output positions."""
    setup_logging(verbose)
    pos = list(positions) or None
    if weights == "attention":
        from probe.analyses.flow.rollout import rollout_maps

        maps = _maps(model, text, store_dir, example, device)
        scores = rollout_maps(maps, heads=_heads(heads), residual=residual,
                              output_positions=pos, all_positions=all_positions)
    else:
        if text is None or store_dir is not None:
            raise click.UsageError(f"--weights {weights} needs a live model: use --model and --text")
        if heads.strip() != "mean":
            raise click.UsageError(f"--weights {weights} uses the head mean; drop --heads")
        from probe.models import load_model

        adapter = load_model(model, device=device)
        if weights == "norm":
            from probe.analyses.flow.norm_attention import norm_rollout_maps
            from probe.values import capture_values

            scores = norm_rollout_maps(capture_values(adapter, text), residual=residual,
                                       output_positions=pos, all_positions=all_positions)
        else:
            from probe.analyses.flow.grad_attention import grad_rollout_maps
            from probe.grads import attention_gradients

            first = pos[0] if pos else None
            scores = grad_rollout_maps(attention_gradients(adapter, text, position=first),
                                       output_positions=pos, all_positions=all_positions)
    files = _write(scores, out, f"{scores.method} ({weights})")
    click.echo(_summary(scores))
    click.echo("wrote " + ", ".join(str(f) for f in files))


@click.command("flow")
@_source_options
@_position_options
@click.option("--reference", is_flag=True,
              help="compute with networkx, one max-flow per pair (slow; the reference)")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="processes for the fast solver (default: all cores when the work is large)")
@click.option("--max-tokens", type=click.IntRange(min=1), default=128, show_default=True,
              help="warn with the estimated time above this many tokens")
@user_errors
def flow_cmd(model, device, text, store_dir, example, out, verbose, residual, heads, positions,
             all_positions, reference, workers, max_tokens):
    """Attention flow (max-flow on the layered attention graph) for chosen output positions."""
    setup_logging(verbose)
    from probe.analyses.flow.attention_flow import flow_maps

    maps = _maps(model, text, store_dir, example, device)
    # a long input warns (stderr) with the estimated time before the solver starts
    scores = flow_maps(maps, heads=_heads(heads), residual=residual,
                       output_positions=list(positions) or None, all_positions=all_positions,
                       reference=reference, workers=workers, max_tokens=max_tokens)
    files = _write(scores, out, "attention flow" + (" (networkx)" if reference else ""))
    click.echo(_summary(scores))
    click.echo("wrote " + ", ".join(str(f) for f in files))


@click.command("flow-correlation")
@model_option
@click.option("--examples", "n_examples", type=click.IntRange(min=3), default=1000, show_default=True,
              help="held-out examples of the zoo task (its evaluation set)")
@click.option("--out", "-o", required=True, type=click.Path(file_okay=False))
@verbose_option
@user_errors
def flow_correlation_cmd(model, n_examples, out, verbose):
    """Spearman ρ of raw attention, rollout and flow with blank-out importance, per
    layer (Abnar & Zuidema 2020, Table 1), for a zoo sequence classifier."""
    setup_logging(verbose)
    if not model.startswith("zoo:"):
        raise click.BadParameter("needs a zoo classifier, e.g. zoo:agreement", param_hint="--model")
    from tqdm.auto import tqdm

    from probe.analyses.flow.blankout import blank_out_importance, correlation_table, importance_correlations
    from probe.models import load_model
    from probe.models.zoo import eval_examples
    from probe.capture import capture

    adapter = load_model(model)
    examples = eval_examples(model.split(":", 1)[1], n=n_examples)
    texts = [e["text"] for e in examples]
    maps = capture(adapter, texts, batch_size=64)
    imps = [blank_out_importance(adapter, e["text"], e.get("label"))[0]
            for e in tqdm(examples, desc="blank-out", disable=not verbose)]
    per_example = importance_correlations([m.attentions for m in maps], imps,
                                          [m.special_mask for m in maps])
    table = correlation_table(per_example)
    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    per_example.to_csv(d / "flow_correlation_examples.csv", index=False)
    table.to_csv(d / "flow_correlation.csv", index=False)
    (d / "flow_correlation.json").write_text(table.to_json(orient="records", indent=1))
    for pos in ("all", "words"):
        t = table[table.positions == pos]
        click.echo(f"positions: {pos} (Spearman ρ with blank-out, mean ± std over {len(examples)} examples)")
        for method in ("raw", "rollout", "flow"):
            r = t[t.method == method]
            click.echo(f"  {method:<8}" + "  ".join(f"L{int(x.layer)} {x['mean']:+.2f} ± {x['std']:.2f}"
                                                  for _, x in r.iterrows()))
    click.echo(f"wrote {d / 'flow_correlation.csv'}, {d / 'flow_correlation.json'}, "
               f"{d / 'flow_correlation_examples.csv'}")


COMMANDS = [rollout_cmd, flow_cmd, flow_correlation_cmd]
