"""Parallel K axes: what a program with a parallel K axis means, as three programs and
a table (pure functions of the program; the executor runs them, executor/partials.py,
and the pseudocode prints them).

A K axis whose exec type is parallel (docs/teir.md, "Parallel K axes") is split across
the workers with the program's other parallel axes: the parallel iterations, collapsed
into one range, are cut into one contiguous share per worker, as for any parallel
program.  Each worker runs its share with every sequential loop and the same tiles, but
writes into a private block laid out as a dense copy of the output, zeroed first; when
all have finished, the blocks are added into the output in worker order, with the
program's Zero first (the output written over, not added to) and ReLU last (after the
full sum).

:func:`split` gives:

* ``serial``: the same program with its parallel K axes sequential, which is what one
  worker runs (one thread, or a forked child where no parallel region may start): its
  K loops see first and last accesses in order, as the specification's semantics say.
* ``block``: the program each worker runs into its block: every loop sequential in the
  order parallel axes first (the workers' range: its first ``npar`` loops), no Zero and
  no ReLU (the block is zeroed before, and the ReLU waits for the sum), and the
  output's strides replaced by the block's dense ones.
* ``rows``: the reduction's table, one row per output axis: (extent, output stride,
  block stride), outermost first, the block's unit stride last.
"""

from __future__ import annotations

from dataclasses import dataclass

from teir_plan.teir.enums import DimType, ExecType, Prim
from teir_plan.teir.records import TEIR, Primitives, Schedule


@dataclass(frozen=True)
class PartialLayout:
    """A program with parallel K axes, split as the module docstring says."""

    serial: TEIR
    block: TEIR
    npar: int  # the leading loop axes of ``block`` the workers share
    order: tuple[int, ...]  # the program's axis behind each axis of ``block``
    elements: int  # a block's elements (its extent in the output's non-K axes)
    rows: tuple[tuple[int, int, int], ...]  # extent, output stride, block stride
    zero: bool  # prim_first Zero: the output is written over, not added to
    relu: bool  # prim_last ReLU: after the full sum


def parallel_k_axes(teir: TEIR) -> tuple[int, ...]:
    """The program's parallel K axes of more than one step (none for a unary program)."""
    s = teir.schedule
    return tuple(i for i, (role, ex, n) in enumerate(zip(s.dim_types, s.exec_types,
                                                         s.dim_sizes))
                 if role is DimType.K and ex is ExecType.PARALLEL and n > 1)


def split(teir: TEIR) -> PartialLayout | None:
    """The programs and tables of a validated program with a parallel K axis, or None
    for a program without one.

    >>> prog = TEIR.from_fields(data_type="float64", prim_first="zero",
    ...     prim_main="gemm", prim_last="relu", dim_types=["k", "m", "n", "k"],
    ...     exec_types=["parallel", "prim", "prim", "prim"], dim_sizes=[4, 3, 2, 5],
    ...     strides=[[15, 5, 0, 1], [10, 0, 5, 1], [0, 1, 3, 0]])
    >>> lay = split(prog)
    >>> [str(e) for e in lay.serial.schedule.exec_types], lay.npar, lay.elements
    (['seq', 'prim', 'prim', 'prim'], 1, 6)
    >>> lay.block.schedule.strides[2], lay.rows
    ((0, 1, 3, 0), ((2, 3, 3), (3, 1, 1)))
    """
    if not parallel_k_axes(teir):
        return None
    s, p = teir.schedule, teir.primitives
    d = s.num_dims
    serial = teir.with_exec_types(
        [ExecType.SEQ if e is ExecType.PARALLEL and s.dim_types[i] is DimType.K else e
         for i, e in enumerate(s.exec_types)])
    out = s.strides[-1]
    # The block: the output's axes (those it moves along) dense, in the output's own
    # order (largest stride outermost), so that a row of the output is a row of the block.
    moving = sorted((i for i in range(d) if out[i] != 0 and s.dim_sizes[i] > 1),
                    key=lambda i: (-abs(out[i]), i))
    block_stride = [0] * d
    elements = 1
    for i in reversed(moving):
        block_stride[i] = elements
        elements *= s.dim_sizes[i]
    rows = tuple((s.dim_sizes[i], out[i], block_stride[i]) for i in moving)
    par = [i for i in s.loop_axes() if s.exec_types[i] is ExecType.PARALLEL]
    seq = [i for i in s.loop_axes() if s.exec_types[i] is ExecType.SEQ]
    order = par + seq + list(s.prim_axes())
    block = TEIR(
        Primitives(p.data_type, Prim.NONE, p.prim_main, Prim.NONE),
        Schedule([s.dim_types[i] for i in order],
                 [ExecType.PRIM if s.exec_types[i] is ExecType.PRIM else ExecType.SEQ
                  for i in order],
                 [s.dim_sizes[i] for i in order],
                 [[row[i] for i in order] for row in s.strides[:-1]]
                 + [[block_stride[i] for i in order]]),
    )
    return PartialLayout(serial, block, len(par), tuple(order), elements, rows,
                         p.prim_first is Prim.ZERO, p.prim_last is Prim.RELU)
