"""Zoo commands: ``probe train zoo:<task>`` and ``probe evaluate --model zoo:<task>``."""

from __future__ import annotations

from typing import Optional, Sequence

from probe.errors import InputError

import json

import click

from .numbers import integer

from .common import quiet_option, setup_logging, user_errors, verbose_option


@click.command("train")
@click.argument("spec")
@click.option(
    "--out",
    "-o",
    required=True,
    type=click.Path(),
    help="directory for weights, tokenizer and card (must be empty unless --force)",
)
@click.option("--force", is_flag=True, help="replace a non-empty --out")
@click.option("--steps", type=integer(min=1), default=None, help="training steps (default: the task's)")
@click.option("--seed", type=integer(min=0), default=None, help="random seed (default: the task's)")
@click.option("--batch-size", type=integer(min=1), default=None, help="examples per step (default: the task's)")
@click.option(
    "--checkpoint-every",
    type=integer(min=1),
    default=None,
    help="also save the weights every N steps (and at 0 and the last) under OUT/checkpoints/step-NNNNNN",
)
@click.option(
    "--checkpoints", "n_checkpoints", type=integer(min=1), default=None, help="save N+1 evenly spaced checkpoints"
)
@click.option(
    "--stop-after",
    type=integer(min=1),
    default=None,
    help="end after N of the run's steps (its learning-rate schedule unchanged: a long run's first steps)",
)
@click.option("--json", "as_json", is_flag=True, help="print the card as JSON")
@quiet_option
@verbose_option
@user_errors
def train_cmd(
    spec: str,
    out: str,
    force: bool,
    steps: Optional[int],
    seed: int,
    batch_size: Optional[int],
    checkpoint_every: Optional[int],
    n_checkpoints: Optional[int],
    stop_after: Optional[int],
    as_json: bool,
    quiet: bool,
    verbose: bool,
) -> None:
    """Train a zoo model from scratch: SPEC is zoo:<task>.

    With --checkpoint-every or --checkpoints the run's checkpoints are saved too, for
    `probe compare OUT/checkpoints/step-*` (training dynamics, docs/compare.md)."""
    setup_logging(verbose)
    from probe.models import zoo

    if not spec.startswith("zoo:"):
        raise InputError(
            f"only zoo models can be trained; give zoo:<task>, one of: {', '.join('zoo:' + t for t in zoo.TASKS)}"
        )
    from probe.app.registry.outdir import OutDir

    schedule: Sequence[int] = ()
    if checkpoint_every is not None or n_checkpoints is not None:
        total = zoo.task_module(spec).STEPS if steps is None else steps
        schedule = zoo.checkpoint_schedule(stop_after or total, every=checkpoint_every, n=n_checkpoints)
    target = OutDir(out, force)  # checked before training; written beside it and renamed at the end
    with target as tmp:
        card = zoo.train(
            spec,
            tmp,
            steps=steps,
            seed=seed,
            force=True,
            checkpoints=schedule,
            batch_size=batch_size,
            stop_after=stop_after,
        )
    if as_json:
        click.echo(json.dumps(card, indent=2))
    else:
        click.echo(
            f"zoo:{card['task']}: {card['metric']} {card['accuracy']:.2f}% on {card['n_eval']} "
            f"held-out examples after {_steps_said(card)} ({card['train_seconds']}s) -> {out}"
            + (f" ({len(schedule)} checkpoints in {out}/checkpoints)" if schedule else "")
        )


@click.command("evaluate")
@click.option("--model", "-m", required=True, help="zoo:<task>")
@click.option(
    "--path",
    type=click.Path(file_okay=False),
    default=None,
    help="a directory written by `probe train` (default: the committed model)",
)
@click.option("--limit", "n", type=integer(min=1), default=None, help="held-out examples (default: the card's)")
@click.option("--n", "n_old", type=integer(min=1), default=None, hidden=True)
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@user_errors
def evaluate_cmd(model: str, path: Optional[str], n: Optional[int], n_old: Optional[int], as_json: bool) -> None:
    """Held-out accuracy of a zoo model on its regenerated evaluation set."""
    if n_old is not None:
        click.echo("note: --n is deprecated; use --limit", err=True)
        n = n if n is not None else n_old
    from probe.models import zoo

    if not model.startswith("zoo:"):
        raise InputError(f"evaluate needs a zoo model (zoo:<task>, one of: {', '.join(zoo.TASKS)}); got {model!r}")
    res = zoo.evaluate(model, path=path, n=n)
    if as_json:
        click.echo(json.dumps(res, indent=2))
    else:
        click.echo(
            f"{model}: {res['metric']} {res['accuracy']:.2f}% on {res['n_eval']} held-out examples "
            f"(card: {res['card_accuracy']})"
        )


COMMANDS = [train_cmd, evaluate_cmd]


def _steps_said(card: dict) -> str:
    """``"10 steps"``, or ``"3 of 10 steps (--stop-after 3: the saved model is step 3's)"``."""
    done, total = card.get("step", card["train_steps"]), card["train_steps"]
    if done == total:
        return f"{total} steps"
    return f"{done} of {total} steps (--stop-after {done}: the saved model is step {done}'s)"
