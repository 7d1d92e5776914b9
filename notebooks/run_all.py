"""Execute the notebooks and store them with their outputs, or check the stored outputs.

    python notebooks/run_all.py            # execute every notebook, write its outputs into it
    python notebooks/run_all.py --check    # execute, compare with the stored outputs, exit 1 if stale
    python notebooks/run_all.py 02_head_roles.ipynb   # only these

Each notebook runs in a fresh temporary working directory with the interpreter running
this script as its kernel, offline (``HF_HUB_OFFLINE=1``), with matplotlib's Agg backend.
Volatile cell metadata (execution timings) is not stored.

The staleness rule (:func:`compare`), cell by cell:

- the same number of outputs, of the same kinds (stream name, or the set of MIME types);
- text (``stdout``/``stderr`` streams, ``text/plain``, errors) equal once *normalised*:
  absolute paths (a temporary folder, the Python installation) become ``<path>``,
  memory addresses ``0x…``, and any number printed
  next to a unit of time (``1.3 s``, ``20 ms``, ``2 min``) ``<time>``;
- integers (counts, head indices as in ``L0H2``) equal; decimals within 5 % of the larger
  or 2 units of their last printed digit (``0.023`` vs ``0.024`` passes, ``0.023`` vs
  ``0.030`` does not), so a last digit that moves on another CPU or library build does not
  fail, a changed result does;
- rich outputs (HTML views, images) by their MIME types only: their bytes change with
  fonts and library versions.
"""

from __future__ import annotations

import argparse
import copy
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TIMEOUT_S = 600

_PATH = re.compile(r"(?<![\w.])(?:/[\w.@+-]+){2,}/?")  # an absolute path: machine-specific
_ADDR = re.compile(r"0x[0-9a-fA-F]{6,}")
_TIME = re.compile(r"[-+]?\d+(?:\.\d+)?\s*(?:ms|s|sec|seconds|min|minutes|h)\b")
_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


def notebooks(names: Optional[list[str]] = None) -> list[Path]:
    paths = sorted(HERE.glob("*.ipynb"))
    if names:
        wanted = {Path(n).name for n in names}
        paths = [p for p in paths if p.name in wanted]
        missing = wanted - {p.name for p in paths}
        if missing:
            raise SystemExit(f"no such notebook in {HERE}: {', '.join(sorted(missing))}")
    return paths


def kernel_env() -> dict[str, str]:
    """The environment the kernel starts with: this interpreter first on PATH, offline, Agg."""
    bindir = str(Path(sys.executable).parent)
    return {
        "PATH": bindir + os.pathsep + os.environ.get("PATH", ""),
        "HF_HUB_OFFLINE": "1",
        "MPLBACKEND": "Agg",
        "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }


def execute(path: Path, workdir: Path) -> Any:
    """The notebook at ``path`` executed in ``workdir``; an ``nbformat`` node (errors kept as outputs)."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    saved = {k: os.environ.get(k) for k in kernel_env()}
    os.environ.update(kernel_env())
    try:
        NotebookClient(
            nb,
            kernel_name="python3",
            timeout=TIMEOUT_S,
            allow_errors=True,
            resources={"metadata": {"path": str(workdir)}},
        ).execute()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return without_volatile(nb)


def without_volatile(nb: Any) -> Any:
    """A copy without execution timings (``cell.metadata.execution``)."""
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
    return nb


def normalise(text: str) -> str:
    return _TIME.sub("<time>", _ADDR.sub("0x…", _PATH.sub("<path>", text)))


def _numbers_close(a: str, b: str) -> bool:
    if not any(c in a + b for c in ".eE"):  # integers (counts, head indices) are exact
        return int(a) == int(b)
    x, y = float(a), float(b)
    digits = max(len(s.split(".")[1]) if "." in s and "e" not in s.lower() else 0 for s in (a, b))
    return abs(x - y) <= max(0.05 * max(abs(x), abs(y)), 2 * 10**-digits)


def texts_match(old: str, new: str) -> bool:
    """``old`` and ``new`` equal under the staleness rule (normalised, numbers within tolerance)."""
    old, new = normalise(old), normalise(new)
    if _NUMBER.sub("#", old) != _NUMBER.sub("#", new):
        return False
    return all(_numbers_close(a, b) for a, b in zip(_NUMBER.findall(old), _NUMBER.findall(new)))


def _kind(output: Any) -> str:
    if output.output_type == "stream":
        return f"stream:{output.name}"
    if output.output_type == "error":
        return "error"
    return output.output_type + ":" + ",".join(sorted(output.get("data", {})))


def _text(output: Any) -> Optional[str]:
    if output.output_type == "stream":
        return output.text
    if output.output_type == "error":
        return f"{output.ename}: {output.evalue}"
    return output.get("data", {}).get("text/plain")


def compare(stored: Any, fresh: Any) -> list[str]:
    """What differs between the stored and a fresh execution, one line each (empty: not stale)."""
    problems = []
    code_stored = [c for c in stored.cells if c.cell_type == "code"]
    code_fresh = [c for c in fresh.cells if c.cell_type == "code"]
    if [c.source for c in code_stored] != [c.source for c in code_fresh]:
        return ["the code cells differ from the executed ones"]
    for i, (a, b) in enumerate(zip(code_stored, code_fresh), 1):
        if a.execution_count is None:
            problems.append(f"code cell {i} is stored without its outputs")
            continue
        kinds_a, kinds_b = [_kind(o) for o in a.outputs], [_kind(o) for o in b.outputs]
        if kinds_a != kinds_b:
            problems.append(f"code cell {i}: outputs {kinds_a} stored, {kinds_b} now")
            continue
        for oa, ob in zip(a.outputs, b.outputs):
            ta, tb = _text(oa), _text(ob)
            if ta is not None and tb is not None and not texts_match(ta, tb):
                first = next(
                    (
                        la
                        for la, lb in zip(normalise(ta).splitlines(), normalise(tb).splitlines())
                        if not texts_match(la, lb)
                    ),
                    normalise(ta)[:80],
                )
                problems.append(f"code cell {i}: stored text differs, first at: {first.strip()[:100]!r}")
                break
    return problems


def main(argv: Optional[list[str]] = None) -> int:
    import nbformat

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="notebook file names (default: all)")
    parser.add_argument("--check", action="store_true", help="compare with the stored outputs; write nothing")
    args = parser.parse_args(argv)
    failed = 0
    for path in notebooks(args.names):
        with tempfile.TemporaryDirectory() as tmp:
            fresh = execute(path, Path(tmp))
        errors = [o for c in fresh.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
        if errors:
            print(f"{path.name}: {errors[0].ename}: {errors[0].evalue}", file=sys.stderr)
            failed += 1
            continue
        if args.check:
            problems = compare(nbformat.read(path, as_version=4), fresh)
            for p in problems:
                print(f"{path.name}: {p}", file=sys.stderr)
            failed += bool(problems)
            print(f"{path.name}: {'stale' if problems else 'up to date'}")
        else:
            tmp_path = path.with_suffix(".ipynb.tmp")
            nbformat.write(fresh, tmp_path)
            tmp_path.replace(path)  # whole or not at all
            print(f"{path.name}: written ({path.stat().st_size / 1000:.0f} kB)")
    if failed and args.check:
        print("regenerate with: python notebooks/run_all.py", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
