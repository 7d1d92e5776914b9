"""bench/annotations.py counts what it says: public functions, fully annotated, code lines.

The repository's own share is not asserted here (it changes with every annotation); the
counter is checked on small sources whose answers are written out below.
"""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def counter():
    name = "bench_annotations"
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / "annotations.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclass resolves string annotations through sys.modules
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[name]


SOURCE = textwrap.dedent(
    '''
    def typed(x: int, *args: str, flag: bool = False, **kw: float) -> int:
        """A docstring
        over two lines."""
        # a comment line

        return x


    def untyped(x, y: int) -> int:
        return y


    def no_return(x: int):
        return x


    def _private(x):
        def inner(y):
            return y
        return inner(x)


    class Thing:
        def __init__(self, n):
            self.n = n

        def method(self, k: int) -> int:
            return k

        @classmethod
        def make(cls) -> "Thing":
            return cls(0)

        @staticmethod
        def helper(self) -> None:
            pass


    class _Hidden:
        def visible_name(self, a):
            return a
    '''
)


def test_public_and_annotated_on_a_known_source(counter):
    found = {f.qualname: f for f in counter.count_functions(SOURCE)}
    public = {q: f.annotated for q, f in found.items() if f.public}
    # the unannotated parameter, the missing return and staticmethod's "self" (a parameter
    # like any other there) are what make the three False
    assert public == {
        "typed": True,
        "untyped": False,
        "no_return": False,
        "Thing.method": True,
        "Thing.make": True,
        "Thing.helper": False,
    }
    # private names, names in a private class, dunders and nested functions are not counted
    assert not found["_private"].public
    assert not found["_private.inner"].public
    assert not found["_Hidden.visible_name"].public
    assert not found["Thing.__init__"].public
    assert counter.annotated_share(list(found.values())) == (3, 6)


def test_code_lines_leave_out_docstring_comments_and_blanks(counter):
    found = {f.qualname: f for f in counter.count_functions(SOURCE)}
    assert found["typed"].code_lines == 2  # the def line and the return
    assert found["_private"].code_lines == 4  # the nested def counts inside its outer function
    assert found["Thing.make"].code_lines == 2  # def and return: decorators are not counted


def test_a_private_module_has_no_public_function(counter, tmp_path):
    (tmp_path / "floor").mkdir()
    (tmp_path / "floor" / "open.py").write_text("def f(x: int) -> int:\n    return x\n")
    (tmp_path / "floor" / "_closed.py").write_text("def g(x: int) -> int:\n    return x\n")
    (tmp_path / "floor" / "__init__.py").write_text("def h(x):\n    return x\n")
    scans = counter.scan_floor("floor", root=tmp_path)
    flat = [f for fs in scans.values() for f in fs]
    assert counter.annotated_share(flat) == (1, 2)  # f annotated, h not; g in a private module
