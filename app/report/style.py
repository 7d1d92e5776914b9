"""One look for every figure: the colour maps, the role palette, the number format, and
which tokens are "trivial" (special tokens, punctuation) in score figures.

Every figure of the CLI (``probe heatmap``, ``probe roles``, ``probe rollout`` …), the
report (grid, heatmaps, thumbnails drawn in the browser) and the notebooks takes its
colours from here, so a role or a weight has the same colour wherever it is shown.
"""

from __future__ import annotations

from typing import Any

import math
import re
import unicodedata

from probe.analyses.patterns.vocabulary import base_role

#: sequential map of attention weights and token scores (0 = a pale peach, 1 = near black); seaborn's
#: "rocket" reversed, so that light cells read as "little attention" on a white page
ATTENTION_CMAP = "rocket_r"
#: signed quantities centred on 0 (ablation deltas, importance differences)
DIVERGING_CMAP = "RdBu_r"
#: the accent of single-series bar and line plots (the head view's lines too)
ACCENT = "#4c72b0"
#: the colour of excluded or reference values (baselines, special tokens)
MUTED = "#9a9a9a"

#: one colour per base role; light enough for dark text on a cell, distinct as points
ROLE_COLOURS = {
    "previous-token": "#74a9cf",
    "next-token": "#a6dba0",
    "self": "#fdd976",
    "special-token": "#bdbdbd",
    "punctuation": "#f4a6b7",
    "broad": "#c2a5cf",
    "rare-word": "#fdae6b",
    "induction": "#ef6f6c",
    "duplicate-token": "#b8e186",
    "syntactic": "#41ab5d",
    "coreference": "#de77ae",
    "profile": "#f0f0f0",
}
#: short labels of roles for grid cells
ROLE_ABBREV = {
    "previous-token": "prev",
    "next-token": "next",
    "self": "self",
    "special-token": "special",
    "punctuation": "punct",
    "broad": "broad",
    "rare-word": "rare",
    "induction": "induct",
    "duplicate-token": "dup",
    "coreference": "coref",
    "profile": "?",
}


def role_colour(role: Any) -> str:
    return ROLE_COLOURS.get(base_role(role), "#eeeeee")


def cmap(name: str = ATTENTION_CMAP) -> Any:
    """The matplotlib colour map object of ``name`` (seaborn's maps registered)."""
    import matplotlib

    import seaborn  # noqa: F401  (registers "rocket" & co. with matplotlib)

    return matplotlib.colormaps[name]


def cmap_stops(n: int = 32, name: str = ATTENTION_CMAP) -> list:
    """``n`` hex colours sampled evenly from the colour map, for drawing in the browser
    (the report's thumbnails use the same map as its PNG heatmaps)."""
    m = cmap(name)
    out = []
    for i in range(n):
        r, g, b, _ = m(i / (n - 1))
        out.append(f"#{int(r * 255):02x}{int(g * 255):02x}{int(b * 255):02x}")
    return out


# ---- numbers -------------------------------------------------------------------------
def _decimals_for(spread: float) -> int:
    """Decimals that keep one significant digit of ``spread`` (an uncertainty), two when
    it starts with a 1 (the particle-physics rounding rule)."""
    if not spread or not math.isfinite(spread) or spread <= 0:
        return 3
    e = int(math.floor(math.log10(spread)))
    lead = int(spread / 10**e)
    return max(0, -e + (1 if lead == 1 else 0))


def number(value: Any, ci: Any = None, *, digits: int = 3, percent: bool = False, signed: bool = False) -> str:
    """A number rounded to what its uncertainty supports.

    With ``ci = (low, high)`` the value and the interval keep two significant digits of
    the interval's half-width (``0.19699999690055847`` with CI ``[0.12, 0.27]`` reads
    ``0.20 [0.12, 0.27]``); without, ``digits`` significant digits. ``percent``
    multiplies by 100 and appends ``%``; ``signed`` writes ``+`` for positives. Missing
    or NaN values read ``—``.
    """
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int) and ci is None and not percent:
        return f"{value:+d}" if signed else str(value)
    try:
        v = float(value)
    except (TypeError, ValueError):
        return "—" if value is None else str(value)
    if math.isnan(v):
        return "—"
    scale = 100.0 if percent else 1.0
    suffix = "%" if percent else ""
    sign = "+" if signed else ""
    if ci is not None:
        lo, hi = (float(x) * scale for x in ci)
        if math.isfinite(lo) and math.isfinite(hi):
            d = _decimals_for((hi - lo) / 2)
            return f"{v * scale:{sign}.{d}f}{suffix} [{lo:{sign}.{d}f}{suffix}, {hi:{sign}.{d}f}{suffix}]"
    x = v * scale
    if x == 0:
        return f"0{suffix}"
    if percent and abs(x) < 0.1:  # shares: a tiny one reads as "< 0.1%", not 2.4e-5%
        return f"{'-' if x < 0 else ''}<0.1%"
    if abs(x) >= 10**digits:
        return f"{x:{sign}.0f}{suffix}" if abs(x) < 1e6 else f"{x:{sign}.{digits - 1}e}{suffix}".replace("e+0", "e")
    if abs(x) < 10 ** -(digits + 1):
        return f"{x:{sign}.{digits - 1}e}{suffix}".replace("e-0", "e-").replace("e+0", "e")
    d = max(0, digits - 1 - int(math.floor(math.log10(abs(x)))))
    if round(abs(x), d) >= 10 ** (digits - d):  # 0.00999 rounds up to 0.010, not 0.0100
        d = max(0, d - 1)
    return f"{x:{sign}.{d}f}{suffix}"


# ---- trivial tokens in score figures ---------------------------------------------------
_SPECIAL = re.compile(r"^(\[[A-Z]+\]|<[^<>\s]*>|<\|[^|]*\|>)$")


def is_special_token(token: Any) -> bool:
    """``[CLS]``, ``[SEP]``, ``<s>``, ``</s>``, ``<|endoftext|>`` and the like."""
    return bool(_SPECIAL.match(str(token).strip()))


def is_punctuation(token: Any) -> bool:
    """A token made only of punctuation characters (after word-piece markers)."""
    t = str(token).strip().lstrip("#").lstrip("Ġ▁␣")  # ␣: a displayed leading space (tokens.py)
    return bool(t) and all(unicodedata.category(c).startswith("P") or c in "`^~|" for c in t)


def is_trivial(token: Any) -> bool:
    """Special token or punctuation: the mass of these is shown apart in score figures."""
    return is_special_token(token) or is_punctuation(token)


def pyplot() -> Any:
    """matplotlib's pyplot with the Agg backend (imported lazily: figures only)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def set_wrapped_title(fig: Any, ax: Any, text: str, fontsize: float = 11.0) -> None:
    """``ax``'s title, wrapped to the figure's width so a narrow figure (a 1-layer,
    2-head model's grid) shows all of it instead of clipping it at the edges."""
    import textwrap

    width_in = float(fig.get_size_inches()[0])
    per_line = max(12, int(width_in * 72 / (0.55 * fontsize)))
    ax.set_title("\n".join(textwrap.wrap(str(text), per_line)) or str(text), fontsize=fontsize)
