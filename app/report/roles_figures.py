"""Figures of head roles: the layer × head grid coloured by role, and the Clark et al.
(2019) MDS map of heads by Jensen–Shannon distance, coloured by role.

Inputs are the roles table of :func:`probe.analyses.patterns.roles.roles_report` (columns ``layer,
head, role, confidence`` and, for the map, ``mds_x, mds_y``). seaborn/matplotlib are
imported lazily with the Agg backend.
"""

from __future__ import annotations

from typing import Any

from pathlib import Path
from typing import Optional

from probe.errors import InputError

from .style import ROLE_COLOURS, pyplot, set_wrapped_title

#: one stable colour per base role: the report grid and notebooks use the same (style.py)
ROLE_COLORS = ROLE_COLOURS


_plt = pyplot  # the one Agg-backed pyplot of style.py


def _base(role: str) -> str:
    return str(role).split(" (", 1)[0]


def _check(roles, columns):
    missing = [c for c in columns if c not in roles.columns]
    if missing:
        raise InputError(
            f"roles table lacks columns {missing}; compute it with probe.analyses.patterns.roles.roles_report()"
        )
    if roles.empty:
        raise InputError("roles table is empty")


def role_grid_figure(roles: Any, path: Any, title: Optional[str] = None) -> Path:
    """Save a layer × head grid, each cell coloured by its head's role and labelled with
    the confidence (syntactic cells also with the relation). Returns the path.

    Raises:
        ValueError: missing columns or an empty table.
    """
    _check(roles, ("layer", "head", "role", "confidence"))
    import numpy as np
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    plt = _plt()
    import seaborn as sns

    layers = sorted(roles["layer"].unique())
    heads = sorted(roles["head"].unique())
    present = [r for r in ROLE_COLORS if r in set(roles["role"].map(_base))]
    code = {r: i for i, r in enumerate(present)}
    grid = np.full((len(layers), len(heads)), np.nan)
    text = np.full(grid.shape, "", dtype=object)
    for r in roles.itertuples(index=False):
        i, j = layers.index(r.layer), heads.index(r.head)
        base = _base(r.role)
        grid[i, j] = code.get(base, np.nan)
        rel = r.role[len(base) :].strip(" ()")
        conf = "" if r.confidence != r.confidence else f"{r.confidence:.2f}"
        text[i, j] = f"{rel}\n{conf}" if rel else conf
    cmap = ListedColormap([ROLE_COLORS[r] for r in present])
    fig, ax = plt.subplots(figsize=(1.0 + 0.62 * len(heads) + 2.6, 0.9 + 0.5 * len(layers)))
    sns.heatmap(
        grid,
        ax=ax,
        cmap=cmap,
        vmin=-0.5,
        vmax=len(present) - 0.5,
        cbar=False,
        annot=text,
        fmt="",
        annot_kws={"fontsize": 6},
        linewidths=0.5,
        linecolor="white",
        xticklabels=heads,
        yticklabels=layers,
    )
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    set_wrapped_title(fig, ax, title or "head roles (cell text: confidence)", fontsize=10)
    ax.legend(
        handles=[Patch(color=ROLE_COLORS[r], label=r) for r in present],
        bbox_to_anchor=(1.01, 1),
        loc="upper left",
        fontsize=7,
        frameon=False,
    )
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def head_map_figure(roles: Any, path: Any, title: Optional[str] = None) -> Path:
    """Save the 2-D MDS layout of heads (Clark et al. 2019, Fig. 6), points coloured by
    role and labelled ``layer-head``. Returns the path.

    Raises:
        ValueError: missing ``mds_x``/``mds_y`` (run with clustering) or an empty table.
    """
    _check(roles, ("layer", "head", "role", "mds_x", "mds_y"))
    plt = _plt()
    import seaborn as sns

    data = roles.assign(base_role=roles["role"].map(_base))
    order = [r for r in ROLE_COLORS if r in set(data["base_role"])]
    fig, ax = plt.subplots(figsize=(7.5, 6))
    sns.scatterplot(
        data=data,
        x="mds_x",
        y="mds_y",
        hue="base_role",
        hue_order=order,
        palette=ROLE_COLORS,
        edgecolor="black",
        linewidth=0.3,
        s=60,
        ax=ax,
    )
    for r in data.itertuples(index=False):
        ax.annotate(f"L{r.layer}H{r.head}", (r.mds_x, r.mds_y), fontsize=6, xytext=(2, 2), textcoords="offset points")
    ax.set_xlabel("MDS 1")
    ax.set_ylabel("MDS 2")
    ax.set_title(title or "heads by Jensen–Shannon distance (MDS)")
    ax.legend(title="role", fontsize=7, title_fontsize=8, bbox_to_anchor=(1.01, 1), loc="upper left", frameon=False)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
