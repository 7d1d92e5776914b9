"""The one contract, walked over every registered analysis and every CLI command.

For each command: ``--help`` works; each analysis runs with its defaults on
``zoo:constructed`` (or the smallest input its needs allow, named in ``INPUTS``) with a
small ``--limit``, writes only inside ``--out`` (nothing beside it, no temporary
directory left), refuses a non-empty ``--out`` without ``--force`` (before computing),
and names heads one way (``L2H8``; ``layer``/``head`` columns) in its CSV and JSON.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from probe.app.cli import main
from probe.app.registry import registered

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

#: extra arguments per command (beyond --out) so it runs quickly with its defaults otherwise;
#: the reason is in the comment
INPUTS = {
    "syntax": ["--model", "zoo:brackets", "--limit", "6", "--tree-limit", "2", "--probe-limit", "0"],  # gold trees
    "coref": None,  # needs a CorefUD treebank: run in test_coref.py on GUM
    "logit-attribution": ["--model", "zoo:induction", "--limit", "2"],  # a causal LM (an encoder is refused)
    "faithfulness": [
        "--model",
        "zoo:agreement",
        "--limit",
        "2",
        "--steps",
        "8",  # IG's completeness gate (1%) needs a few steps: with 2 (doubled to 16) every example misses it
        "--permutations",
        "1",
        "--methods",
        "ig",
        "--attention-methods",
        "attention",
    ],  # needs a task head with logits
    "flow-correlation": ["--limit", "3"],  # default model zoo:agreement (a classifier)
    "alignment": ["--limit", "3"],  # zoo:translate's own pairs
    "complexity": ["--n", "8,16", "--d", "4", "--kinds", "self_attention,rnn", "--repeats", "1"],
    "paper-figures": ["--top", "1"],  # needs English words in the vocabulary: its default, minilm
    "decoder-heads": ["--n-tokens", "4", "--probe-inputs", "4"],  # its own probe inputs: no corpus, no --limit
}
DEFAULT_INPUT = ["--model", "zoo:constructed", "--limit", "4"]
SPEED = {
    "ablate": ["--n-boot", "20"],
    "patch": ["--n-boot", "20"],
    "prune": ["--ig-steps", "2"],
    "importance": ["--ig-steps", "2"],
}

#: a head written as 2-8, 5:5 or 1.0 (not L2H8) inside a value that names heads
OTHER_HEAD_FORMS = re.compile(r"(?<![\w.])\d+[-:.]\d+(?![\w.])")


def _analysis_commands():
    return [a.command_name for a in registered() if a.command_name]


def _head_values(path: Path) -> list:
    """Values that name heads: string cells of CSV columns called head(s)/pruned/top, and
    string values under such keys in JSON."""
    import pandas as pd

    out = []
    if path.suffix == ".csv":
        frame = pd.read_csv(path)
        for col in frame.columns:
            if str(col).lower() in ("head", "heads", "pruned", "top", "best_head") and frame[col].dtype == object:
                out += [v for v in frame[col].dropna().astype(str)]
    elif path.suffix == ".json":

        def walk(node, key=""):
            if isinstance(node, dict):
                for k, v in node.items():
                    walk(v, str(k))
            elif isinstance(node, list):
                for v in node:
                    walk(v, key)
            elif isinstance(node, str) and key.lower() in ("head", "heads", "pruned", "best_head"):
                out.append(node)

        walk(json.loads(path.read_text()))
    return out


def test_the_registry_and_the_cli_agree():
    names = _analysis_commands()
    assert len(names) == len(set(names)) and set(names) <= set(main.commands)
    for cmd in ("models", "capture", "heatmap", "report", "train", "evaluate"):
        assert cmd in main.commands
    for a in registered():
        assert a.title and callable(a.run)
        for p in a.params:  # one name for example counts
            assert p.option not in ("--max-examples", "--examples", "--n-examples"), (a.name, p.option)


@pytest.mark.parametrize("name", sorted(set(main.commands)))
def test_help_works(name):
    r = CliRunner().invoke(main, [name, "--help"])
    assert r.exit_code == 0, r.output
    if name in _analysis_commands():
        assert "--out" in r.output and "--force" in r.output and "--quiet" in r.output
        for old in ("--max-examples", "--examples"):  # hidden aliases only
            assert old not in r.output, (name, old)
    if name in {a.command_name for a in registered() if set(a.needs) & {"corpus", "maps", "treebank"}}:
        assert "--limit" in r.output, name


@pytest.mark.slow
@pytest.mark.parametrize("name", _analysis_commands())
def test_each_analysis_runs_with_defaults_and_keeps_the_contract(name, tmp_path, monkeypatch):
    args = INPUTS.get(name, DEFAULT_INPUT)
    if args is None:
        pytest.skip(f"{name} needs a dedicated treebank; its CLI test lives beside its analysis")
    monkeypatch.chdir(tmp_path)
    args = list(args) + SPEED.get(name, [])
    out = tmp_path / "out"
    r = CliRunner().invoke(main, [name] + args + ["--out", str(out), "--quiet"])
    assert r.exit_code == 0, r.output
    # writes only inside --out: nothing beside it, no temporary directory left over
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    files = [p for p in out.rglob("*") if p.is_file()]
    assert any(p.suffix in (".csv", ".json") for p in files), files
    for path in files:
        if path.suffix in (".csv", ".json"):
            bad = [v for v in _head_values(path) if OTHER_HEAD_FORMS.search(v)]
            assert not bad, f"{path.name}: heads not written as L2H8: {bad[:5]}"
    for path in out.glob("*.csv"):  # tidy tables: a head column goes with a layer column
        import pandas as pd

        cols = list(pd.read_csv(path, nrows=1).columns)
        if "head" in cols and "layer" in cols:
            assert cols.index("layer") < cols.index("head"), path.name
    # a non-empty --out is refused without --force, and nothing in it is touched
    before = {p: p.stat().st_mtime_ns for p in files}
    again = CliRunner().invoke(main, [name] + args + ["--out", str(out)])
    assert again.exit_code == 1 and "not empty: pass --force" in again.output
    assert {p: p.stat().st_mtime_ns for p in files} == before


def test_out_is_checked_before_any_compute(tmp_path):
    """A bad --out fails at once (the model would take seconds to load)."""
    import time

    (tmp_path / "file").write_text("x")
    t0 = time.perf_counter()
    r = CliRunner().invoke(main, ["ablate", "--model", "minilm", "--text", "A b.", "--out", str(tmp_path / "file")])
    assert r.exit_code == 1 and "is a file: --out is always a directory" in r.output
    assert time.perf_counter() - t0 < 2.0


def test_a_failed_run_leaves_nothing(tmp_path):
    r = CliRunner().invoke(
        main,
        [
            "ablate",
            "--model",
            "zoo:constructed",
            "--objective",
            "accuracy",
            "--limit",
            "2",
            "--out",
            str(tmp_path / "o"),
        ],
    )
    assert r.exit_code == 1 and "metrics that apply: embedding-drift" in r.output
    assert list(tmp_path.iterdir()) == []


def test_heads_are_accepted_in_every_notation():
    from probe.app.cli.common import parse_heads

    assert parse_heads("L2H8,2.9 2:10+2-11,l3h8") == [(2, 8), (2, 9), (2, 10), (2, 11), (3, 8)]
    assert parse_heads("all") is None
    import click

    with pytest.raises(click.BadParameter, match="L2H8 is given twice"):  # one head in two notations
        parse_heads("L2H8,2.8")

    with pytest.raises(click.BadParameter, match="L2H8"):
        parse_heads("2/8")


def test_error_boundary_one_line_and_exit_codes(tmp_path):
    from probe.app.cli import ProbeGroup
    from probe.app.cli.runner import build_command
    from probe.app.registry import Analysis, Param

    r = CliRunner().invoke(main, ["ablate", "--model", "nope:x", "--text", "a", "--out", str(tmp_path / "a")])
    assert r.exit_code == 1 and r.output.startswith("Error: ") and "Traceback" not in r.output

    def broken(ctx):
        if ctx.params["kind"] == "bug":
            raise RuntimeError("a bug")
        raise FileNotFoundError("no such file: x.conllu")

    group = ProbeGroup()
    group.add_command(build_command(Analysis("broken", "Broken", broken, params=(Param("kind", str, "bug"),))))
    r = CliRunner().invoke(group, ["broken", "--out", str(tmp_path / "b")])
    assert r.exit_code == 3 and "unexpected RuntimeError: a bug" in r.output
    assert "rerun with --verbose" in r.output and "Traceback" not in r.output
    assert len(r.output.strip().splitlines()) == 1
    r = CliRunner().invoke(group, ["broken", "--out", str(tmp_path / "c"), "--verbose"])
    assert r.exit_code == 3 and "Traceback" in r.output
    r = CliRunner().invoke(group, ["broken", "--kind", "missing", "--out", str(tmp_path / "d")])
    assert r.exit_code == 1 and r.output.strip() == "Error: no such file: x.conllu"
    assert list(tmp_path.iterdir()) == []


def test_python_api_runs_an_analysis():
    import probe

    res = probe.run("roles", model="zoo:constructed", limit=6, no_figure=True, clusters=0)
    roles = res.tables["roles"].set_index(["layer", "head"])["role"]
    assert roles[(0, 0)] == "previous-token" and roles[(0, 1)] == "special-token"
    with pytest.raises(ValueError, match="no parameter"):
        probe.run("roles", model="zoo:constructed", limt=3)


def test_python_api_on_a_loaded_model_names_that_model_not_the_default(tiny_models):
    """``probe.run(name, adapter=…)`` without ``model``: the run is the adapter's (its notes
    named the default spec, ``minilm``, before)."""
    import probe

    res = probe.run(
        "roles", adapter=tiny_models["bert"], text=["The cat sat.", "A dog ran."], no_figure=True, clusters=0
    )
    line = next(n for n in res.notes if "heads from" in n)
    assert "tiny-bert on text" in line and "minilm" not in line


# ---- the README tour ---------------------------------------------------------------------
ROOT = Path(__file__).resolve().parents[1]


def test_docs_cli_page_renders_the_tour_and_every_command():
    """docs/cli.md is filled when the site is built (docs/hooks.py): the tour table from the
    registry and each command's --help, so neither can go stale."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    page = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert hooks.TOUR in page and hooks.REFERENCE in page
    from probe.app.cli.tour import table

    rendered = hooks.on_page_markdown(page, None, None, None)
    assert table() in rendered and hooks.TOUR not in rendered
    for name in main.commands:
        assert f"### `probe {name}`" in rendered, name
    assert "--limit" in rendered.split("### `probe syntax`", 1)[1]


def test_every_command_has_a_tour_example():
    from probe.app.cli.tour import rows

    named = {r[0] for r in rows() if r[2]}
    assert named == set(main.commands), set(main.commands) ^ named


@pytest.mark.slow
def test_every_readme_tour_example_runs(tmp_path, monkeypatch):
    """Each example verbatim (relative outputs under a temporary folder; the bundled
    treebank path made absolute). The coref example needs GUM from ../shared/data."""
    import shlex

    from probe.app.cli.tour import examples

    monkeypatch.chdir(tmp_path)
    ran = []
    for line in examples():
        line = line.replace("app/report/sample/", str(ROOT / "app" / "report" / "sample") + "/")
        line = line.replace("../shared/data/", str(DATA) + "/")
        args = shlex.split(line)[1:]
        if any(a.startswith(str(DATA)) for a in args) and not DATA.exists():
            continue  # the shared treebanks are not in this checkout
        r = CliRunner().invoke(main, args + ["--quiet"] * (args[0] not in ("models", "evaluate", "store")))
        assert r.exit_code == 0, f"{line}\n{r.output}"
        ran.append(args[0])
    assert len(ran) >= len(examples()) - 1


def test_adding_an_analysis_is_one_declaration(tmp_path):
    """The registry docstring's example: one declaration gives a command, a report section
    and probe.run()."""
    import probe
    from probe.app.cli import ProbeGroup
    from probe.app.cli.runner import build_command
    from probe.app.registry import _REGISTRY, Analysis, Param, Result, register
    from probe.app.report.sections import choose

    def run(ctx):
        from probe.analyses.patterns.role_features import head_features

        table = head_features(ctx.maps).head(ctx.params["top"])
        return Result(
            tables={"features": table},
            per_head=table,
            notes=[f"{len(table)} heads"],
            summary={"examples": len(ctx.maps)},
        )

    a = register(
        Analysis(
            "features-demo",
            "Per-head attention features",
            run,
            needs=("maps",),
            params=(Param("top", int, 5, "heads listed"),),
            section=True,
        )
    )
    try:
        res = probe.run("features-demo", model="zoo:constructed", limit=3, top=1)
        assert len(res.tables["features"]) == 1 and res.summary == {"examples": 3}
        assert a in choose(["features-demo"])
        group = ProbeGroup()
        group.add_command(build_command(a))
        r = CliRunner().invoke(
            group, ["features-demo", "--model", "zoo:constructed", "--limit", "3", "--out", str(tmp_path / "f")]
        )
        assert r.exit_code == 0, r.output
        assert sorted(p.name for p in (tmp_path / "f").iterdir()) == ["features.csv", "summary.json"]
    finally:
        _REGISTRY.pop("features-demo", None)


def test_report_prints_a_line_per_section_and_quiet_silences_it(tmp_path):
    args = ["report", "--model", "zoo:constructed", "--limit", "3", "--sections", "roles,rollout"]
    r = CliRunner().invoke(main, args + ["--out", str(tmp_path / "a")])
    assert r.exit_code == 0, r.output
    assert "[1/2] roles …" in r.output and "[2/2] rollout …" in r.output
    q = CliRunner().invoke(main, args + ["--out", str(tmp_path / "b"), "--quiet"])
    assert q.exit_code == 0 and "[1/2]" not in q.output and q.output.strip().startswith("wrote ")


def test_every_option_docs_cli_names_exists_on_its_command():
    """Each `--option` the hand-written part of docs/cli.md names exists: on the command
    written before it (`complexity --kinds`, `rollout`/`flow --head-indices`), else on at
    least one command, and an option listed for heads on the commands that take heads."""
    import re

    page = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    options = {name: {o for p in cmd.params for o in p.opts} for name, cmd in main.commands.items()}
    every = set().union(*options.values()) | {"--help", "--version", "--verbose", "--quiet"}
    named = 0
    for span in re.findall(r"`([^`]*--[a-z][^`]*)`", page):
        words = span.replace("/", " ").split()
        commands = [w for w in words if w in options]
        for opt in (w for w in words if w.startswith("--")):
            opt = opt.split("=")[0]
            named += 1
            if commands:
                for c in commands:
                    assert opt in options[c], f"docs/cli.md: `{span}`: probe {c} has no {opt}"
            else:
                assert opt in every, f"docs/cli.md: `{span}`: no command has {opt}"
    assert named >= 10  # the check read the page's options
