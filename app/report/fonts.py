"""A font for the text a figure shows: matplotlib's default (DejaVu Sans) has no CJK,
Thai or Devanagari glyphs, and draws each missing one as a box with a warning per glyph.

:func:`font_for` looks at the characters a figure will draw; when the default font lacks
some, it finds an installed font that has them and puts it after the default in
``font.family`` (matplotlib ≥ 3.6 falls back glyph by glyph along that list), so Latin
text keeps its look. When no installed font covers them it logs one warning per process
naming the characters and what to install, and silences matplotlib's per-glyph warnings.
"""

from __future__ import annotations

import logging
import warnings
from functools import lru_cache
from typing import Iterable, Optional

log = logging.getLogger(__name__)

_WARNED: set[str] = set()
_GLYPH_WARNING = r"Glyph \d+ .*missing from (current )?font"


@lru_cache(maxsize=None)
def _charmap(path: str) -> frozenset[int]:
    from matplotlib.ft2font import FT2Font

    try:
        return frozenset(FT2Font(path).get_charmap())
    except (OSError, RuntimeError, ValueError):
        return frozenset()


def _default_path() -> str:
    import matplotlib
    from matplotlib import font_manager

    family = matplotlib.rcParams["font.family"]
    first = family[0] if isinstance(family, list) else family
    return font_manager.findfont(font_manager.FontProperties(family=[first]))


@lru_cache(maxsize=256)
def _covering(chars: frozenset[int]) -> tuple[Optional[str], frozenset[int]]:
    """``(family, still missing)``: the installed font with the most of ``chars`` (all,
    ideally; None when no font has any) and the characters it lacks."""
    from matplotlib import font_manager

    best, best_n = None, 0
    sans_first = sorted(
        font_manager.fontManager.ttflist, key=lambda e: not any(w in e.name for w in ("Sans", "Gothic", "Hei"))
    )
    for entry in sans_first:
        if entry.name.startswith("Last Resort"):  # maps every code point to a box: not a cover
            continue
        n = len(chars & _charmap(entry.fname))
        if n > best_n:
            best, best_n = entry.name, n
            if n == len(chars):
                break
    left = (
        chars - _charmap(next(e.fname for e in font_manager.fontManager.ttflist if e.name == best)) if best else chars
    )
    return best, frozenset(left)


@lru_cache(maxsize=1)
def _add_new_system_fonts() -> int:
    """Register the system's fonts that matplotlib's cached list lacks; how many (once)."""
    from matplotlib import font_manager

    known = {e.fname for e in font_manager.fontManager.ttflist}
    added = 0
    for path in font_manager.findSystemFonts():
        if path not in known:
            try:
                font_manager.fontManager.addfont(path)
                added += 1
            except (OSError, RuntimeError, ValueError):
                continue
    return added


def font_for(texts: Iterable[object]) -> Optional[str]:
    """Make the figures drawn next able to show ``texts``; returns the fallback family
    added (None when the default font has every character, or no font has them)."""
    import matplotlib

    chars = frozenset(ord(c) for t in texts for c in str(t) if ord(c) > 0x2FF and not c.isspace())
    if not chars:
        return None
    missing = frozenset(c for c in chars if c not in _charmap(_default_path()))
    if not missing:
        return None
    family, left = _covering(missing)
    if left and _add_new_system_fonts():  # installed after matplotlib cached its font list
        _covering.cache_clear()
        family, left = _covering(missing)
    if left:
        key = "".join(sorted(chr(c) for c in left))[:20]
        if not _WARNED:  # once per process, not once per glyph
            log.warning(
                "no installed font has the characters %s: figures show boxes for them "
                "(install a font for the script, e.g. fonts-noto-cjk)",
                key,
            )
        _WARNED.add(key)
        warnings.filterwarnings("ignore", message=_GLYPH_WARNING)
    if family is None:
        return None
    current = matplotlib.rcParams["font.family"]
    current = list(current) if isinstance(current, list) else [current]
    if family not in current:
        matplotlib.rcParams["font.family"] = current + [family]
    return family
