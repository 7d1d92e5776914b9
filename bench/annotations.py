"""How much of the package is annotated, and which functions are long: two numbers of issue 38.

Prints, per floor (models, probe, analyses, app) and in total, the share of public functions
and methods that are fully annotated, then every function in app/ and probe/ longer than
60 code lines. Parsed with :mod:`ast`; nothing is imported, so it runs in a second.

- *public*: a module-level function or a method whose name has no leading underscore, in
  a module (no part of its path has one) and classes whose names have none. Dunder
  methods start with an underscore and are not counted; functions nested in functions
  are not reachable by a caller and are not counted either.
- *fully annotated*: every parameter except a method's leading ``self``/``cls`` has an
  annotation (``*args`` and ``**kwargs`` included), and there is a return annotation
  (``__init__`` needs none, should a caller count dunders).
- *code lines*: the function's lines from ``def`` to its end (decorators not counted)
  that are not blank, not comment-only and not its docstring; a nested function's lines
  count in the function around it too.

Usage: ``python bench/annotations.py [--over N]`` from the repository root.
"""

from __future__ import annotations

import argparse
import ast
import io
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path

FLOORS = ("models", "probe", "analyses", "app")
LONG_FLOORS = ("app", "probe")
ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class FunctionInfo:
    """One function or method found in a module's source."""

    qualname: str  # "Class.method" or "function"
    lineno: int
    public: bool
    annotated: bool
    code_lines: int


def _is_private(name: str) -> bool:
    return name.startswith("_")


def _is_annotated(node: ast.FunctionDef | ast.AsyncFunctionDef, is_method: bool) -> bool:
    args = node.args
    positional = [*args.posonlyargs, *args.args]
    decorators = {d.id for d in node.decorator_list if isinstance(d, ast.Name)}
    if is_method and positional and "staticmethod" not in decorators:
        if positional[0].arg in ("self", "cls"):
            positional = positional[1:]
    params = [*positional, *args.kwonlyargs]
    params += [a for a in (args.vararg, args.kwarg) if a is not None]
    if any(p.annotation is None for p in params):
        return False
    return node.returns is not None or node.name == "__init__"


def _comment_or_blank_lines(source: str) -> set[int]:
    """Line numbers (1-based) that hold nothing but whitespace or a comment."""
    lines = source.splitlines()
    code: set[int] = set()
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT):
                continue
            if tok.type in (tokenize.DEDENT, tokenize.ENDMARKER):
                continue
            code.update(range(tok.start[0], tok.end[0] + 1))
    except (tokenize.TokenError, IndentationError):
        return set()
    return {i for i in range(1, len(lines) + 1) if i not in code}


def _docstring_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> set[int]:
    body = node.body
    if (
        body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        return set(range(body[0].lineno, (body[0].end_lineno or body[0].lineno) + 1))
    return set()


def count_functions(source: str, module_public: bool = True) -> list[FunctionInfo]:
    """Every function and method in ``source``, with whether it is public and fully annotated.

    ``module_public`` is False for a module whose path has a part with a leading
    underscore: nothing in it is public. Functions nested in functions are listed under
    their enclosing name (``outer.inner``), for their length, and are never public.
    """
    tree = ast.parse(source)
    skip = _comment_or_blank_lines(source)
    found: list[FunctionInfo] = []

    def visit(node: ast.AST, prefix: str, public: bool, in_class: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".", public and not _is_private(child.name), True)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                is_public = public and not _is_private(child.name)
                first = child.lineno
                last = child.end_lineno or first
                lines = set(range(first, last + 1)) - skip - _docstring_lines(child)
                found.append(
                    FunctionInfo(
                        qualname=prefix + child.name,
                        lineno=child.lineno,
                        public=is_public,
                        annotated=_is_annotated(child, in_class),
                        code_lines=len(lines),
                    )
                )
                visit(child, prefix + child.name + ".", False, False)
            else:
                visit(child, prefix, public, in_class)

    visit(tree, "", module_public, False)
    return found


def annotated_share(functions: list[FunctionInfo]) -> tuple[int, int]:
    """``(fully annotated, total)`` over the public ones of ``functions``."""
    public = [f for f in functions if f.public]
    return sum(f.annotated for f in public), len(public)


def scan_floor(floor: str, root: Path = ROOT) -> dict[Path, list[FunctionInfo]]:
    """The functions of every module under ``root / floor``, keyed by path."""
    out: dict[Path, list[FunctionInfo]] = {}
    for path in sorted((root / floor).rglob("*.py")):
        rel = path.relative_to(root)
        parts = rel.parts[:-1] if path.name == "__init__.py" else rel.parts
        module_public = not any(_is_private(part) for part in parts)
        out[rel] = count_functions(path.read_text(encoding="utf-8"), module_public)
    return out


def main(argv: list[str] | None = None) -> int:
    """Print the annotated share per floor and the long functions of app/ and probe/."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--over", type=int, default=60, help="code lines that make a function long")
    parser.add_argument("--missing", metavar="FLOOR", help="also list the unannotated public functions of FLOOR")
    args = parser.parse_args(argv)

    total_done = total_all = 0
    scans = {floor: scan_floor(floor) for floor in FLOORS}
    print(f"{'floor':<10} {'annotated':>9} {'public':>7} {'share':>7}")
    for floor, modules in scans.items():
        done, count = annotated_share([f for fs in modules.values() for f in fs])
        total_done += done
        total_all += count
        print(f"{floor:<10} {done:>9} {count:>7} {done / max(count, 1):>7.1%}")
    print(f"{'total':<10} {total_done:>9} {total_all:>7} {total_done / max(total_all, 1):>7.1%}")

    print(f"\nfunctions over {args.over} code lines in {', '.join(f + '/' for f in LONG_FLOORS)}:")
    long = [
        (f.code_lines, f"{path}:{f.lineno} {f.qualname}")
        for floor in LONG_FLOORS
        for path, fs in scans[floor].items()
        for f in fs
        if f.code_lines > args.over
    ]
    for lines, where in sorted(long, reverse=True):
        print(f"  {lines:>4}  {where}")
    if not long:
        print("  none")

    if args.missing:
        print(f"\nunannotated public functions in {args.missing}/:")
        for path, fs in scan_floor(args.missing).items():
            for f in fs:
                if f.public and not f.annotated:
                    print(f"  {path}:{f.lineno} {f.qualname}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
