"""What moves when the pins move: the helper of ``bench/newest_releases.sh``.

Three subcommands, each printing plain lines (run inside the newest-releases venv)::

    python bench/release_diff.py versions constraints.txt     # installed vs pinned versions
    python bench/release_diff.py changed-types OLD_MODELS_DIR  # AutoModel types added or changed
    python bench/release_diff.py rows docs/coverage.json ROWS.jsonl  # sweep statuses that changed

``changed-types`` compares the installed ``transformers/models`` folder with the pinned
release's (``OLD_MODELS_DIR``, unpacked from its wheel): a type is *added* when the pinned
release did not register it for ``AutoModel``, *changed* when any file of its model folder
differs. It prints the types, one a line, and a summary on stderr.
"""

from __future__ import annotations

import filecmp
import json
import re
import sys
from importlib import metadata
from pathlib import Path


def _name(text: str) -> str:
    """A distribution name in its normal form (PEP 503)."""
    return re.sub(r"[-_.]+", "-", text).lower()


def versions(constraints: str) -> int:
    """Print every installed distribution whose version differs from its pin (and those on
    only one side); returns 0."""
    pinned = {}
    for line in Path(constraints).read_text().splitlines():
        line = line.split("#")[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            pinned[_name(name)] = version.strip()
    installed = {_name(d.metadata["Name"]): d.version for d in metadata.distributions() if d.metadata["Name"]}
    for own in ("attention-probe", "pip", "setuptools", "wheel"):  # the project and the venv's own tools
        installed.pop(own, None)
    # a local label (torch's "+cpu") names the build, not another release
    moved = sorted(n for n in pinned.keys() & installed.keys() if pinned[n] != installed[n].split("+")[0])
    print(f"{len(moved)} of {len(pinned)} pinned packages differ from constraints.txt:")
    for n in moved:
        print(f"  {n}: {pinned[n]} -> {installed[n]}")
    for n in sorted(installed.keys() - pinned.keys()):
        print(f"  {n}: (not pinned) {installed[n]}")
    for n in sorted(pinned.keys() - installed.keys()):
        print(f"  {n}: {pinned[n]} -> (not installed)")
    return 0


def _registered(models_dir: Path) -> set:
    """The AutoModel types a transformers ``models`` folder registers (read from its
    ``auto/modeling_auto.py`` source, so the pinned release need not be importable)."""
    text = (models_dir / "auto" / "modeling_auto.py").read_text()
    block = text.split("MODEL_MAPPING_NAMES = OrderedDict(", 1)[1].split("\n)\n", 1)[0]
    return set(re.findall(r'^\s*\("([^"]+)",', block, flags=re.M))


def changed_types(old_models: str) -> int:
    """Print the AutoModel types the installed transformers added or changed since the
    release whose ``models`` folder is ``old_models``."""
    import transformers
    from transformers.models.auto.configuration_auto import model_type_to_module_name
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    new_models = Path(transformers.__file__).parent / "models"
    old = Path(old_models)
    before = _registered(old)
    added, changed = [], []
    for t in sorted(MODEL_MAPPING_NAMES):
        folder = model_type_to_module_name(t)
        if t not in before:
            added.append(t)
            continue
        a, b = new_models / folder, old / folder
        if not b.is_dir():
            changed.append(t)
            continue
        cmp = filecmp.dircmp(a, b, ignore=["__pycache__"])
        if _differs(cmp):
            changed.append(t)
    print(
        f"transformers {transformers.__version__}: {len(MODEL_MAPPING_NAMES)} AutoModel types; "
        f"{len(added)} added, {len(changed)} changed since the pinned release "
        f"({len(before)} types): added {' '.join(added) or '-'}; changed {' '.join(changed) or '-'}",
        file=sys.stderr,
    )
    for t in added + changed:
        print(t)
    return 0


def _differs(cmp: filecmp.dircmp) -> bool:
    if cmp.left_only or cmp.right_only or cmp.diff_files or cmp.funny_files:
        return True
    _, mismatch, errors = filecmp.cmpfiles(cmp.left, cmp.right, cmp.common_files, shallow=False)
    return bool(mismatch or errors) or any(_differs(sub) for sub in cmp.subdirs.values())


def rows(pinned_json: str, new_rows: str) -> int:
    """Print the sweep rows whose status differs from the pinned run's (docs/coverage.json),
    and the new run's counts."""
    from collections import Counter

    data = json.loads(Path(pinned_json).read_text())
    before = {r["model_type"]: r for r in data["rows"]}
    after = [json.loads(line) for line in Path(new_rows).read_text().splitlines() if line.strip()]
    counts = Counter(r["status"] for r in after)
    print(
        f"sweep on transformers {data['transformers']} -> this venv, {len(after)} types: "
        + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    )
    moved = 0
    for r in after:
        old = before.get(r["model_type"], {}).get("status", "(new type)")
        if old != r["status"]:
            moved += 1
            print(f"  {r['model_type']}: {old} -> {r['status']}  {r.get('reason', '')[:200]}")
    print(f"{moved} of {len(after)} statuses changed")
    return 0


def main(argv: list[str]) -> int:
    commands = {"versions": versions, "changed-types": changed_types, "rows": rows}
    if not argv or argv[0] not in commands:
        print(f"usage: release_diff.py {{{'|'.join(commands)}}} ARGS", file=sys.stderr)
        return 2
    return commands[argv[0]](*argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
