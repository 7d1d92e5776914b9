"""A per-head analysis in one module, as a user would write it: importing it registers
``previous-share`` (the share of each head's attention on the previous token) with what the
report shows of it. tests/test_presentation.py finds it in the CLI, ``probe.run``, the
report's sections, its head pages and summary.json."""

from __future__ import annotations

from typing import Any

from probe.app.registry import Analysis, Result, register
from probe.app.registry.evidence import HeadEvidence
from probe.app.registry.presentation import HeadBlock, Presentation, TableView, VerdictHint

NAME = "previous-share"


def previous_share(maps: list) -> Any:
    """``layer, head, share``: the mean over examples and query tokens ``i ≥ 1`` of
    ``A[i, i - 1]`` (each example's ``attentions``: ``[layers, heads, n, n]``)."""
    import pandas as pd
    import torch

    per_example = []
    for m in maps:
        a = m.attentions.float()
        per_example.append(torch.diagonal(a, offset=-1, dim1=-2, dim2=-1).mean(-1))  # [layers, heads]
    share = torch.stack(per_example).mean(0)
    rows = [
        {"layer": int(layer), "head": h, "share": float(share[li, h])}
        for li, layer in enumerate(maps[0].layers)
        for h in range(share.shape[1])
    ]
    return pd.DataFrame(rows)


def run(ctx: Any) -> Result:
    table = previous_share(ctx.maps)
    return Result(
        tables={"shares": table},
        per_head=table,
        notes=[f"previous-token share of {len(table)} heads over {len(ctx.maps)} examples"],
        summary={"examples": len(ctx.maps)},
    )


def evidence(result: Result) -> dict:
    n = result.summary.get("examples")
    out = {}
    for r in result.tables["shares"].itertuples(index=False):
        shown = f"{r.share:.0%}"
        out[(int(r.layer), int(r.head))] = [
            HeadEvidence(
                NAME,
                "previous-share",
                f"{shown} of its attention goes to the previous token, over {n} examples.",
                value=float(r.share),
                count=n,
                count_of="examples",
                unit="share",
                strong=(shown,),
            )
        ]
    return out


def _block(data: Any, layer: int, head: int) -> str:
    from probe.app.report.evidence import items, sentence

    return "".join(f"<p>{sentence(ev)}</p>" for ev in items(data, layer, head, NAME))


def _remark(by: dict, cls: str, sep: str) -> str:
    ev = by.get("previous-share")
    return "" if ev is None else f"previous-token share {ev.value:.0%}"


ANALYSIS = register(
    Analysis(
        NAME,
        "Previous-token share per head",
        run,
        needs=("corpus", "maps"),
        section=True,
        report_default=False,
        shows=Presentation(
            evidence=evidence,
            kinds=("previous-share",),
            block=HeadBlock("How much it looks back", _block, order=60),
            tables={"shares": TableView("share")},
            verdict=(VerdictHint("remark", _remark),),
        ),
    )
)
