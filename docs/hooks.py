"""mkdocs hooks: a nav that tolerates pages not written yet, and the CLI reference.

- ``on_config``: the package's layout as links under ``build/pkg/probe`` (``models/``,
  ``analyses/`` and ``app/`` beside ``probe/``'s modules and rooms, as pyproject's package-dir maps
  them), where mkdocstrings reads the docstrings: griffe cannot follow setuptools' editable
  import hook. Then entries of ``nav`` whose page is not in ``docs/`` are dropped (other
  branches add pages such as ``circuits.md``; the site builds before and after they land),
  and a section left empty is dropped with them.
- ``on_page_markdown``: in ``cli.md``, ``<!-- cli-tour -->`` becomes the tour table
  (``probe.app.cli.tour.table()``, from the analysis registry) and ``<!-- cli-reference -->``
  one section per command with its ``--help`` text, rendered from the click application
  itself (``on_page_content`` drops the Sphinx role names docstrings use). Nothing is
  generated into the repository, so the page cannot go stale; no network.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

log = logging.getLogger("mkdocs.hooks.probe")

TOUR = "<!-- cli-tour -->"
REFERENCE = "<!-- cli-reference -->"


def _present(entry: Any, docs: Path) -> Any:
    """The nav entry with its missing pages removed; None when nothing of it is left."""
    if isinstance(entry, str):
        return entry if entry.startswith(("http://", "https://")) or (docs / entry).is_file() else None
    if isinstance(entry, dict):
        out = {}
        for title, value in entry.items():
            kept = _present(value, docs)
            if kept not in (None, []):
                out[title] = kept
        return out or None
    if isinstance(entry, list):
        kept = [k for k in (_present(e, docs) for e in entry) if k is not None]
        return kept or None
    return entry


def package_tree(root: Path) -> Path:
    """``root/build/pkg``, holding ``probe/`` with the mapped folders linked in; returned."""
    out = root / "build" / "pkg"
    pkg = out / "probe"
    pkg.mkdir(parents=True, exist_ok=True)
    for old in pkg.iterdir():
        if old.is_symlink():
            old.unlink()
    for f in (root / "probe").iterdir():  # its modules and its rooms (tracing/, store/, runs/ ...)
        if f.suffix == ".py" or (f.is_dir() and (f / "__init__.py").is_file()):
            (pkg / f.name).symlink_to(f.resolve(), target_is_directory=f.is_dir())
    for folder in ("models", "analyses", "app"):
        (pkg / folder).symlink_to((root / folder).resolve(), target_is_directory=True)
    return out


# made when mkdocs imports this file, before any plugin reads its config (mkdocstrings
# keeps only search paths that exist when it starts)
package_tree(Path(__file__).resolve().parents[1])


def on_config(config: Any) -> Any:
    docs = Path(config["docs_dir"])
    if config.get("nav"):
        config["nav"] = _present(config["nav"], docs) or []
    return config


def _help_of(command: Any, path: list[str]) -> list[str]:
    """Markdown for one command (and its subcommands): ``probe <path> --help`` verbatim."""
    import click

    name = " ".join(["probe", *path])
    ctx = click.Context(command, info_name=name)
    lines = [f"### `{name}`", "", "```text", command.get_help(ctx).rstrip(), "```", ""]
    if isinstance(command, click.Group):
        for sub in sorted(command.list_commands(ctx)):
            lines += _help_of(command.get_command(ctx, sub), [*path, sub])
    return lines


def cli_reference() -> str:
    """Every top-level command of ``probe`` with its options, in name order."""
    import click

    from probe.app.cli import main

    ctx = click.Context(main, info_name="probe")
    lines: list[str] = []
    for name in sorted(main.list_commands(ctx)):
        command = main.get_command(ctx, name)
        if command is not None and not command.hidden:
            lines += _help_of(command, [name])
    return "\n".join(lines)


_RST_ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj):(?=<code>)")


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    """Docstrings are written with Sphinx roles (``:class:`AttentionMaps```); show the
    name alone, as code, instead of the role's spelling."""
    return _RST_ROLE.sub("", html).replace("::</p>", ":</p>")  # and RST's literal-block "::"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if TOUR in markdown:
        from probe.app.cli.tour import table

        markdown = markdown.replace(TOUR, table())
    if REFERENCE in markdown:
        markdown = markdown.replace(REFERENCE, cli_reference())
    return markdown
