"""``probe faithfulness``: attention vs attributions, head permutations, evidence recovery."""

from __future__ import annotations

import click

from .common import (device_option, input_options, limit_option, model_option, out_dir_option, setup_logging,
                     user_errors, verbose_option)


def _heads(value):
    """'0:1,5:3' → [(0, 1), (5, 3)]; 'all' / None → None (every head)."""
    if value in (None, "", "all"):
        return None
    out = []
    for part in value.split(","):
        try:
            layer, head = part.split(":")
            out.append((int(layer), int(head)))
        except ValueError:
            raise click.BadParameter(f"expected layer:head pairs like 0:1,5:3, got {value!r}",
                                     param_hint="--heads") from None
    return out


@click.command("faithfulness")
@model_option
@input_options
@limit_option
@click.option("--target", "target", required=True,
              help="logit | logit:<class> | loss:<position> | probe:subject-number | probe:tense")
@click.option("--methods", default="ig,saliency,input_x_gradient,blank_out", show_default=True,
              help="attribution methods")
@click.option("--attention-methods", default="attention,rollout,flow", show_default=True,
              help="attention scores: attention,rollout,flow,norm-rollout")
@click.option("--steps", type=click.IntRange(min=1), default=50, show_default=True, help="IG steps")
@click.option("--internal-batch-size", type=click.IntRange(min=1), default=64, show_default=True,
              help="most rows per forward (bounds memory)")
@click.option("--permutations", type=click.IntRange(min=0), default=5, show_default=True,
              help="attention permutations per example and head (0: skip)")
@click.option("--heads", default=None, help="heads to permute as layer:head,… (default all)")
@click.option("--max-examples", type=click.IntRange(min=1), default=None,
              help="explain only the first N examples (after a probe's train/test split)")
@click.option("--seed", type=int, default=0, show_default=True)
@device_option
@out_dir_option
@verbose_option
@user_errors
def faithfulness_cmd(model, text, file_, conllu, limit, target, methods, attention_methods, steps,
                     internal_batch_size, permutations, heads, max_examples, seed, device, out, verbose):
    """Is attention an explanation? Writes agreement.csv, permutation.csv,
    ground_truth.csv (when the evidence is known) and verdict.csv to --out."""
    setup_logging(verbose)
    from probe.analyses.explanation.faithfulness import run_faithfulness
    from probe.models import load_model
    from probe.inputs import load_corpus

    corpus = load_corpus(text=text, file=file_, conllu=conllu, limit=limit, model=model)
    adapter = load_model(model, device=device)
    report = run_faithfulness(
        adapter, corpus, target,
        methods=[m.strip() for m in methods.split(",") if m.strip()],
        attention_methods=[m.strip() for m in attention_methods.split(",") if m.strip()],
        n_steps=steps, internal_batch_size=internal_batch_size, n_permutations=max(permutations, 1),
        heads=_heads(heads), permute=permutations > 0, max_examples=max_examples, seed=seed,
        progress=len(corpus) > 1,
    )
    paths = report.write(out)
    counts = report.verdict["verdict"].value_counts().to_dict()
    click.echo(f"{report.info['n_examples']} examples, target {target}: "
               + ", ".join(f"{n} heads {v}" for v, n in counts.items()))
    if "probe" in report.info:
        p = report.info["probe"]
        click.echo(f"probe {p['property']}: held-out accuracy {p['test_accuracy']:.3f} "
                   f"(majority {p['majority_baseline']:.3f}, {p['n_test']} sentences)")
    click.echo("wrote " + ", ".join(str(p) for p in paths))


COMMANDS = [faithfulness_cmd]
