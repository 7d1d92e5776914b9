"""Input-token scores per output position: the result type of rollout, flow and friends.

Rollout and attention flow (Abnar & Zuidema, 2020), norm-based attention (Kobayashi et
al., 2020) and gradient-weighted rollout (Chefer et al., 2021) all answer the same
question: *how much does input token j feed output position i?* Their answer for one
example is a matrix ``scores[k, n]``: one row of ``n`` input-token scores for each of the
``k`` chosen output positions. :class:`TokenScores` holds it with the tokens, so that it
can be written as JSON / CSV and read back by other tools.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from probe.errors import InputError

if TYPE_CHECKING:
    import os

    import pandas as pd

__all__ = ["TokenScores"]


@dataclass(frozen=True)
class TokenScores:
    """Scores of the input tokens for some output positions of one example.

    Attributes:
        tokens: the ``n`` tokens of the example.
        output_positions: the ``k`` output positions (indices into ``tokens``).
        scores: float64 array ``[k, n]``; ``scores[r, j]`` is how much input token
            ``j`` feeds output position ``output_positions[r]``.
        method: the method that produced the scores (``"rollout"``, ``"flow"``, …).
        meta: JSON-able facts about how the scores were computed.

    Raises:
        ValueError: when the shapes of ``scores``, ``tokens`` and ``output_positions``
            disagree or a position is out of range.
    """

    tokens: tuple
    output_positions: tuple
    scores: Any  # given as an array or a tensor; stored as a read-only float64 ndarray
    method: str = ""
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "tokens", tuple(str(t) for t in self.tokens))
        object.__setattr__(self, "output_positions", tuple(int(p) for p in self.output_positions))
        s = np.asarray(
            self.scores.detach().cpu().numpy() if hasattr(self.scores, "detach") else self.scores,
            dtype=np.float64,
        )
        n, k = len(self.tokens), len(self.output_positions)
        if s.shape != (k, n):
            raise ValueError(f"scores must have shape [output positions, tokens] = ({k}, {n}); got {s.shape}")
        bad = [p for p in self.output_positions if not 0 <= p < n]
        if bad:
            raise InputError(f"output positions {bad} out of range 0..{n - 1}")
        s.setflags(write=False)
        object.__setattr__(self, "scores", s)

    def row(self, position: int) -> np.ndarray:
        """Scores ``[n]`` of one output position (a model position, not a row index)."""
        try:
            r = self.output_positions.index(int(position))
        except ValueError:
            raise InputError(
                f"position {position} not among the output positions {list(self.output_positions)}"
            ) from None
        return self.scores[r]

    def to_frame(self) -> pd.DataFrame:
        """Tidy table: one row per (output position, input position) with the score."""
        import pandas as pd

        k, n = self.scores.shape
        out = np.repeat(np.asarray(self.output_positions, dtype=int), n)
        inp = np.tile(np.arange(n), k)
        toks = np.asarray(self.tokens, dtype=object)
        return pd.DataFrame(
            {
                "method": self.method,
                "output_position": out,
                "output_token": toks[out] if n else [],
                "input_position": inp,
                "input_token": toks[inp] if n else [],
                "score": self.scores.reshape(-1),
            }
        )

    def to_dict(self) -> dict:
        """JSON-able dict: ``tokens``, ``output_positions``, ``scores`` (list of rows),
        ``method`` and ``meta``."""
        return {
            "method": self.method,
            "tokens": list(self.tokens),
            "output_positions": list(self.output_positions),
            "scores": self.scores.tolist(),
            "meta": self.meta,
        }

    def to_json(self, path: str | os.PathLike | None = None, **kwargs: Any) -> str:
        """The :meth:`to_dict` as JSON text; also written to ``path`` when given."""
        text = json.dumps(self.to_dict(), **kwargs)
        if path is not None:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text)
        return text

    @classmethod
    def from_dict(cls, d: dict) -> "TokenScores":
        """Inverse of :meth:`to_dict` (also accepts the parsed JSON file)."""
        missing = {"tokens", "output_positions", "scores"} - set(d)
        if missing:
            raise InputError(f"token-score JSON lacks the keys {sorted(missing)}")
        scores = np.asarray(d["scores"], dtype=np.float64).reshape(len(d["output_positions"]), len(d["tokens"]))
        return cls(d["tokens"], d["output_positions"], scores, d.get("method", ""), d.get("meta", {}))


def output_positions_for(
    n_tokens: int, positions: Sequence[int] | None, *, kind: str = "self", all_positions: bool = False
) -> tuple:
    """Resolve the output positions to score.

    Args:
        n_tokens: sequence length ``n``.
        positions: explicit positions (negative counts from the end), or ``None`` for the
            default: position 0 ([CLS] / <s>) for ``kind="self"``, the last token for
            ``kind="causal"`` (a decoder's next-token prediction is read there).
        kind: ``"self"`` or ``"causal"``.
        all_positions: every position ``0..n-1`` (the full matrix).

    Returns:
        tuple of non-negative ints.

    Raises:
        ValueError: a position outside ``-n..n-1``, naming the valid range; a position
            given twice (``0`` and ``-n`` too); explicit positions with ``all_positions``.
    """
    if all_positions:
        if positions:  # the explicit positions would be ignored silently
            raise InputError(
                f"output positions {list(positions)} and all positions asked for together: give one of them"
            )
        return tuple(range(n_tokens))
    if positions is None:
        return (n_tokens - 1,) if kind == "causal" else (0,)
    out = []
    for p in positions:
        p = int(p)
        if not -n_tokens <= p < n_tokens:
            raise InputError(
                f"output position {p} is out of range: the example has {n_tokens} tokens, "
                f"valid positions are 0..{n_tokens - 1} (or -{n_tokens}..-1 from the end)"
            )
        if p % n_tokens in out:  # scored twice: a duplicate row
            raise InputError(
                f"output position {p} names token {p % n_tokens} again (the example has {n_tokens} tokens): "
                "give each position once"
            )
        out.append(p % n_tokens)
    return tuple(out)
