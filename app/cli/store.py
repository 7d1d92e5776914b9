"""``probe store verify DIR`` and ``probe store repair DIR``: check and mend a capture store."""

from __future__ import annotations

import click

from .common import user_errors


@click.group("store")
def store_group() -> None:
    """Check (verify) or mend (repair) an attention store written by `probe capture`."""


def _summary(check) -> str:
    parts = [f"{check.n_examples} examples read correctly"]
    if check.problems:
        parts.append(f"{len(check.problems)} damaged (first: {check.problems[0]})")
    if check.torn_tail:
        parts.append("a last index line cut by an interrupted capture")
    if check.orphans:
        parts.append(f"{len(check.orphans)} files no index line refers to ({', '.join(check.orphans[:3])})")
    return "; ".join(parts)


@store_group.command("verify")
@click.argument("directory", type=click.Path(file_okay=False))
@user_errors
def verify_cmd(directory: str) -> None:
    """Read every example of the store; exit 1 when something is damaged."""
    from probe.store.repair import verify_store

    check = verify_store(directory)
    if check.problems:
        raise click.ClickException(f"{directory}: {_summary(check)}; run `probe store repair {directory}`")
    if check.incomplete:
        raise click.ClickException(f"{directory}: {_summary(check)}; {check.incomplete}")
    click.echo(
        f"{directory}: {_summary(check)}" + ("" if check.ok else " (harmless; `probe store repair` removes them)")
    )


@store_group.command("repair")
@click.argument("directory", type=click.Path(file_okay=False))
@user_errors
def repair_cmd(directory: str) -> None:
    """Drop damaged examples, a torn index tail and orphan shards; a capture then redoes them."""
    from probe.store.repair import repair_store

    check = repair_store(directory)
    click.echo(
        f"{directory}: kept {check.n_examples} examples; dropped {check.dropped} index line(s)"
        + (f"; removed {len(check.orphans)} orphan file(s)" if check.orphans else "")
    )
    for line in check.problems[:10]:
        click.echo(f"  dropped: {line}")


COMMANDS = [store_group]
