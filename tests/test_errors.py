"""Errors by kind (probe.errors): bad input exits 1 in one line, 'does not apply' is the only
source of 'skipped', and anything else — a ValueError from numpy included — is a bug (exit 3)."""

import numpy as np
import pytest
from click.testing import CliRunner

from probe.errors import InputError, NotApplicable, is_input_error


def _raised(fn):
    try:
        fn()
    except Exception as exc:
        return exc
    raise AssertionError("nothing raised")


def test_kinds_are_told_apart(tiny_models):
    assert is_input_error(InputError("bad --limit")) and isinstance(InputError("x"), ValueError)
    assert is_input_error(NotApplicable("needs a treebank"))
    assert NotApplicable("needs a treebank").reason == "needs a treebank"
    assert is_input_error(_raised(lambda: tiny_models["bert"].check_head(9, 0)))  # the toolkit's own validator
    assert not is_input_error(_raised(lambda: np.zeros(3).reshape(2, 2)))  # numpy's ValueError: a bug
    assert not is_input_error(_raised(lambda: {}["k"]))  # any other exception: a bug


@pytest.mark.parametrize(
    "kind, code, text",
    [
        ("numpy", 3, "unexpected ValueError: cannot reshape"),
        ("input", 1, "Error: --limit must be at least 1"),
        ("not_applicable", 1, "Error: no treebank: give --conllu"),
    ],
)
def test_cli_exit_status_by_kind(tmp_path, kind, code, text):
    from probe.app.cli import ProbeGroup
    from probe.app.cli.runner import build_command
    from probe.app.registry import Analysis, Param

    def analysis(ctx):
        if ctx.params["kind"] == "numpy":
            np.zeros(3).reshape(2, 2)
        if ctx.params["kind"] == "input":
            raise InputError("--limit must be at least 1")
        raise NotApplicable("no treebank: give --conllu")

    group = ProbeGroup()
    group.add_command(build_command(Analysis("kinds", "Kinds", analysis, params=(Param("kind", str, "numpy"),))))
    r = CliRunner().invoke(group, ["kinds", "--kind", kind, "--out", str(tmp_path / "o")])
    assert r.exit_code == code and text in r.output and "Traceback" not in r.output
    assert len(r.output.strip().splitlines()) == 1
    if code == 3:
        assert "rerun with --verbose" in r.output
