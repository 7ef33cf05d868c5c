"""Packing an operand into a contiguous buffer laid out for the contraction.

numpy transposes every operand into a matrix; we pack only where the cost
model says it pays.  The packed layout mirrors the output: batch (C) axes
outermost in the output's order, then the K axes in the other input's order,
then the operand's own free axes (M for in0, N for in1) in the output's order,
innermost.  Free axes then fuse exactly where they fuse in the output, giving
the largest BLAS tiles the output layout allows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from teir_plan.frontend.contraction import Axis, Contraction
from teir_plan.machine.params import MachineParams
from teir_plan.planner.copy import CopyPlan, plan_copy
from teir_plan.teir.enums import DimType

TENSOR_NAMES = ("in0", "in1", "out")


@dataclass(frozen=True)
class Pack:
    """Copy input ``tensor`` into a new row-major buffer of ``shape`` before the main step."""

    tensor: int
    shape: tuple[int, ...]
    names: tuple[str, ...]  # axis names of the packed buffer, outermost first
    copy: CopyPlan

    @property
    def seconds(self) -> float:
        return self.copy.cost.seconds

    def describe(self) -> str:
        return (
            f"pack {TENSOR_NAMES[self.tensor]} into a contiguous "
            f"{'x'.join(map(str, self.shape))} buffer ordered {' '.join(self.names)}"
        )


def packed_order(c: Contraction, j: int) -> list[int]:
    """Axis order (outermost first) of input ``j``'s packed buffer."""
    own = DimType.M if j == 0 else DimType.N
    other = 1 - j
    ax = c.axes
    present = [i for i, a in enumerate(ax) if a.strides[j] != 0]
    batch = sorted((i for i in present if ax[i].role is DimType.C),
                   key=lambda i: -abs(ax[i].strides[2]))
    ks = sorted((i for i in present if ax[i].role is DimType.K),
                key=lambda i: (-abs(ax[i].strides[other]), -abs(ax[i].strides[j])))
    free = sorted((i for i in present if ax[i].role is own),
                  key=lambda i: -abs(ax[i].strides[2]))
    # The free axes that will form the tile: the run that is contiguous in the output
    # (each stride = the next one's stride x extent).  K goes just outside them, so the
    # tile's leading dimension stays small; the other free axes become outer loops.
    inner = len(free)
    while inner > 0:
        i = free[inner - 1]
        if inner == len(free):
            ok = abs(ax[i].strides[2]) == min(abs(ax[f].strides[2]) for f in free)
        else:
            nxt = free[inner]
            ok = abs(ax[i].strides[2]) == abs(ax[nxt].strides[2]) * ax[nxt].extent
        if not ok:
            break
        inner -= 1
    return batch + free[:inner] + ks + free[inner:]


def pack_variant(
    c: Contraction, j: int, params: MachineParams, threads: int,
    order: list[int] | None = None,
) -> tuple[Contraction, Pack] | None:
    """``c`` with input ``j`` packed (its axes in ``order``, outermost first:
    :func:`packed_order`'s by default), and the pack, or None if packing changes
    nothing."""
    if order is None:
        order = packed_order(c, j)
    if not order:
        return None
    new: dict[int, int] = {}
    acc = 1
    for i in reversed(order):
        new[i] = acc
        acc *= c.axes[i].extent
    if all(c.axes[i].strides[j] == new[i] for i in order):
        return None
    moves = [(c.axes[i].name, c.axes[i].extent, c.axes[i].strides[j], new[i]) for i in order]
    copy = plan_copy(moves, c.dtype, params, threads)[0]
    axes = []
    for i, a in enumerate(c.axes):
        s = list(a.strides)
        if i in new:
            s[j] = new[i]
        axes.append(Axis(a.name, a.role, a.extent, (s[0], s[1], s[2])))
    shape = tuple(c.axes[i].extent for i in order)
    assert math.prod(shape) == acc
    return (
        Contraction(tuple(axes), c.dtype),
        Pack(j, shape, tuple(c.axes[i].name for i in order), copy),
    )
