"""The axis a primitive does not have: one sentinel, and what reading it gives.

A primitive's axes (GEMM's M, N and K, BRGEMM's batch-reduce axis, Copy's two) are
positions in a list of axes: a schedule's dimensions in a TEIR program, a contraction's
axes in the planner.  A primitive without one of them has :data:`NO_AXIS` in its place,
in the planner's choices, in lowering and in the explain report alike.  Read through
:func:`extent_at` and :func:`stride_at`, the absent axis has extent 1 and stride 0 in
every tensor: the primitive spans one element along it, which is how BLAS' arguments
and the tile kinds' ``GemmTile`` take it.

``NO_AXIS`` is an int, not None, so that an axis choice stays a tuple of ints (the
search hashes and compares thousands of them per plan).  As -1 also indexes the last
item of a list, an axis that may be absent is never used as an index directly.

>>> from teir_plan.teir.records import TEIR
>>> prog = TEIR.from_fields(data_type="float32", prim_first="zero", prim_main="gemm",
...     prim_last="none", dim_types=["m", "k"], exec_types=["prim", "prim"],
...     dim_sizes=[8, 24], strides=[[24, 1], [0, 1], [1, 0]])
>>> s, ax = prog.schedule, prim_axes_by_role(prog)
>>> ax.n == NO_AXIS, extent_at(s.dim_sizes, ax.n), stride_at(s.strides[2], ax.n)
(True, 1, 0)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from teir_plan.teir.enums import DimType, Prim
from teir_plan.teir.records import TEIR

NO_AXIS: Final = -1


def extent_at(extents: Sequence[int], axis: int) -> int:
    """``extents[axis]``, 1 for NO_AXIS."""
    return extents[axis] if axis != NO_AXIS else 1


def extent_table(extents: Sequence[int]) -> dict[int, int]:
    """:func:`extent_at` as a table, ``table[axis]``, for loops that read many axes (a
    lookup costs a fraction of a call)."""
    table = dict(enumerate(extents))
    table[NO_AXIS] = 1
    return table


def stride_at(strides: Sequence[int], axis: int) -> int:
    """``strides[axis]`` (one tensor's strides), 0 for NO_AXIS."""
    return strides[axis] if axis != NO_AXIS else 0


@dataclass(frozen=True)
class PrimAxes:
    """Which of a program's prim axes plays which primitive argument (NO_AXIS where the
    primitive has none): GEMM's m, n, k and BRGEMM's batch-reduce axis br (the first K
    prim axis); a Copy's or ReLU's first and second prim axes are its m and n."""

    m: int
    n: int
    k: int = NO_AXIS
    br: int = NO_AXIS


def prim_axes_by_role(teir: TEIR) -> PrimAxes:
    """The prim axes of ``teir`` by the argument each plays (see :class:`PrimAxes`)."""
    s = teir.schedule
    prim = s.prim_axes()
    if teir.is_unary:
        return PrimAxes(prim[0] if prim else NO_AXIS, prim[1] if len(prim) > 1 else NO_AXIS)
    ks = [i for i in prim if s.dim_types[i] is DimType.K]
    br = ks.pop(0) if teir.primitives.prim_main is Prim.BRGEMM and ks else NO_AXIS
    return PrimAxes(next((i for i in prim if s.dim_types[i] is DimType.M), NO_AXIS),
                    next((i for i in prim if s.dim_types[i] is DimType.N), NO_AXIS),
                    ks[0] if ks else NO_AXIS, br)
