"""Refuse before the slow part (issue 57): each class of refused command line answers with
its one line before torch or transformers is imported — checked in a fresh interpreter that
reports what it had imported when the refusal came — and the model floor's list of built-in
names is the registry's."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

PROBE = textwrap.dedent(
    """
    import json, sys
    from probe.app.cli import main
    try:
        main(sys.argv[1:], standalone_mode=False)
        said, code = "", 0
    except SystemExit as exc:
        said, code = "", exc.code
    except Exception as exc:
        said, code = str(getattr(exc, "message", exc)), getattr(exc, "exit_code", 3)
    print(json.dumps({"said": said, "code": code,
                      "torch": "torch" in sys.modules, "transformers": "transformers" in sys.modules}))
    """
)


def _refused(*argv: str) -> dict:
    r = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def full_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("full")
    (d / "kept.txt").write_text("someone else's file")
    return d


CASES = {
    "unknown name": (("roles", "--model", "smollm", "--text", "a b"), "unknown model 'smollm'; did you mean smollm2?"),
    "unknown zoo task": (
        ("ablate", "--model", "zoo:inducton"),
        "unknown zoo task 'inducton'; did you mean zoo:induction?",
    ),
    "hf path absent": (("roles", "--model", "hf:/nonexistent/model", "--text", "a"), "neither a local directory"),
    "gguf file absent": (
        ("roles", "--model", "gguf:/nonexistent/m.gguf", "--text", "a"),
        "gguf:/nonexistent/m.gguf: no such file",
    ),
    "gguf path a directory": (
        ("roles", "--model", "gguf:/tmp", "--text", "a"),
        "gguf:/tmp: a directory, not a file",
    ),
    "missing --file": (("roles", "--file", "/nonexistent/in.txt"), "cannot read /nonexistent/in.txt"),
    "missing --conllu": (("syntax", "--conllu", "/nonexistent/t.conllu"), "cannot read /nonexistent/t.conllu"),
    "report: unknown name": (("report", "--model", "minlm"), "did you mean minilm?"),
    "report: missing --file": (("report", "--file", "/nonexistent/in.txt"), "cannot read /nonexistent/in.txt"),
    "capture: unknown name": (("capture", "--model", "bananas", "--text", "a"), "unknown model 'bananas'"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_refusal_comes_before_torch_is_imported(case, tmp_path):
    argv, said = CASES[case]
    out = _refused(*argv, "--out", str(tmp_path / "out"))
    assert out["code"] == 1 and said in out["said"], out
    assert not out["torch"] and not out["transformers"], f"{case}: refused only after importing torch"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", [("report",), ("roles", "--text", "a b"), ("capture", "--text", "a b")])
def test_a_full_out_is_refused_before_torch(command, full_dir):
    out = _refused(*command, "--out", str(full_dir))
    assert out["code"] == 1 and "is not empty" in out["said"] and not out["torch"], out
    assert (full_dir / "kept.txt").read_text() == "someone else's file"


def test_a_known_model_passes_the_preflight_without_torch():
    """The check refuses nothing that loads: every built-in name, each committed zoo task,
    a local folder as hf: and as a bare directory (a check that refused everything would
    pass the tests above)."""
    code = textwrap.dedent(
        """
        import sys
        from probe.models.model_names import BUILTIN_NAMES, check_spec
        from probe.models.catalog import zoo_rows, ZOO_WEIGHTS
        for spec in [*BUILTIN_NAMES, *(r["name"] for r in zoo_rows()),
                     "hf:" + str(ZOO_WEIGHTS / "induction"), str(ZOO_WEIGHTS / "induction")]:
            check_spec(spec)
        print("torch" in sys.modules)
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "False"


def test_the_floors_built_in_names_are_the_registrys():
    from probe.models import registry
    from probe.models.model_names import BUILTIN_NAMES, BUILTIN_PREFIXES
    from probe.models.zoo import TASKS
    from probe.models.catalog import zoo_rows

    assert set(BUILTIN_NAMES) == set(registry._NAMED)
    assert set(BUILTIN_PREFIXES) == set(registry._LOADERS)
    assert {r["name"] for r in zoo_rows()} == {f"zoo:{t}" for t in TASKS}
