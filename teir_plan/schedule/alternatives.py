"""What planning records about the result layouts it did not take, for the explain report
(which renders what planning recorded and never plans), as opt_einsum's ``PathInfo`` is
recorded while its path is found."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple


class LayoutOption(NamedTuple):
    """One result layout an order='K' plan weighed (its ``result_layouts`` option)."""

    memory_order: str  # the layout's indices, outermost first
    seconds: float  # its predicted seconds, or the ceiling its search stopped at
    chosen: bool  # the plan's layout
    pruned: bool  # ``seconds`` is only the ceiling its search could not get under


@dataclass(frozen=True)
class FreeLayout:
    """For a plan whose result layout was fixed (``out=``, or ``order`` other than 'K'):
    the layout ``order='K'`` would choose for the same contraction (``memory_order``,
    outermost index first) and its predicted ``seconds``, and the margin by which a plan
    must be predicted faster to be preferred (schedule.build.LAYOUT_MARGIN)."""

    memory_order: str
    seconds: float
    margin: float


def free_layout(layouts: Sequence[tuple[str, float | None]], margin: float
                ) -> FreeLayout | None:
    """The layout ``order='K'`` chooses among ``layouts`` (each in memory order with its
    contraction's predicted seconds, C order first; None: not costed while planning the
    fixed layout), as it chooses: C order unless another is predicted ``margin`` times
    faster.  None when any layout was not costed (the choice is then unknown).

    >>> free_layout([("abc", 2.0), ("cab", 1.5), ("bca", 1.0)], 1.1)
    FreeLayout(memory_order='bca', seconds=1.0, margin=1.1)
    >>> free_layout([("abc", 2.0), ("cab", None)], 1.1) is None
    True
    """
    if not layouts or any(s is None for _, s in layouts):
        return None
    scores = [s * (margin if i else 1.0) for i, (_, s) in enumerate(layouts)]  # type: ignore[operator]
    order, seconds = layouts[scores.index(min(scores))]
    assert seconds is not None
    return FreeLayout(order, seconds, margin)
