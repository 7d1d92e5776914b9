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
    assert not isinstance(NotApplicable("x"), ValueError)  # its own kind: no `except ValueError` skips
    bad_head = _raised(lambda: tiny_models["bert"].check_head(9, 0))  # the toolkit's own validator
    assert isinstance(bad_head, InputError) and is_input_error(bad_head)
    assert not is_input_error(_raised(lambda: np.zeros(3).reshape(2, 2)))  # numpy's ValueError: a bug


def test_a_plain_value_error_is_a_bug_wherever_it_was_raised(monkeypatch):
    """No heuristic by place: a plain ValueError raised by the toolkit's own code (its
    innermost frame in probe/) is a bug too; only InputError and NotApplicable are input."""
    import probe.errors
    from probe.analyses.common.accumulate import merge_all

    exc = _raised(lambda: merge_all([]))  # "nothing to merge": an invariant of the engine
    assert type(exc) is ValueError and "probe/runs/blocks.py" in _innermost_file(exc)
    assert not is_input_error(exc)
    assert not hasattr(probe.errors, "raised_by_toolkit")


def _innermost_file(exc) -> str:
    tb = exc.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_code.co_filename


def test_the_error_kinds_are_one_class_on_every_floor():
    """The models' validators raise the same classes the CLI and the report catch."""
    import probe.models.errors
    from probe.analyses.structure.word_graph import AlignmentError
    from probe.models.architectures import UnsupportedModel
    from probe.store.directory import ExampleOutOfRange

    assert probe.models.errors.InputError is InputError and probe.models.errors.NotApplicable is NotApplicable
    assert issubclass(UnsupportedModel, NotApplicable) and issubclass(AlignmentError, InputError)
    assert issubclass(ExampleOutOfRange, IndexError) and issubclass(ExampleOutOfRange, InputError)
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
