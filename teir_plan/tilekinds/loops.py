"""Strided loops (executor/gemm_tiles.gemm_loops): the GEMM tiles no other kind takes,
too small for a BLAS call to pay off or beyond BLAS' 32-bit integers."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from teir_plan.tilekinds.blas import blas_plan
from teir_plan.tilekinds.kind import (
    Fold,
    GemmTile,
    Lowering,
    Price,
    PriceArgs,
    ScheduleArgs,
    TileKind,
)
from teir_plan.tilekinds.table import (
    T_A_K,
    T_A_M,
    T_B_K,
    T_B_N,
    T_C_M,
    T_C_N,
    T_K,
    T_M,
    T_MODE,
    T_N,
    set_fields,
)
from teir_plan.tiles import flop_factor

if TYPE_CHECKING:
    from teir_plan.machine.params import MachineParams

MODE = 0


def _takes(t: GemmTile) -> int:
    return 1


def _encode(table: np.ndarray, t: GemmTile, axis: int, low: Lowering) -> None:
    set_fields(table, mode=MODE)


def _price(t: GemmTile, axis: int, p: PriceArgs) -> Price:
    return Price(p.flops / p.params.loop_flops)


def _floor_rate(m: int, n: int, k: int, itemsize: int, params: MachineParams,
                dtype: np.dtype) -> float:
    return params.loop_flops


def _owns(table: np.ndarray) -> bool:
    return bool(table[T_MODE] == MODE)


def _describe(table: np.ndarray, dtype: np.dtype) -> str:
    m, n, k = int(table[T_M]), int(table[T_N]), int(table[T_K])
    bp = blas_plan(m, n, k, (int(table[T_A_M]), int(table[T_A_K])),
                   (int(table[T_B_K]), int(table[T_B_N])), (int(table[T_C_M]), int(table[T_C_N])))
    why = ("too few multiply-adds per tile for a BLAS call" if bp is not None
           else "extents beyond BLAS' 32-bit integers")
    return f"each tile runs as jitted strided loops ({why})"



# The rate (flop/s) of row tiles' vectorized loops in L1, a little below float64's.
ROW_FLOPS = 8e9
# Each operand strided along the row (neither unit stride nor broadcast) adds this many
# times the row's time: its elements are gathered one by one (docs/decisions.md).
ROW_GATHER_COST = 2.0


def _fold(args: ScheduleArgs) -> Fold | None:
    """A scalar tile (m = n = k = br = 1) under a loop: lowering folds the innermost loop
    into it (a row tile, tilekinds/row.py), one call per row, whose loop vectorizes only
    over operands of unit (or no) stride along it."""
    c, loops = args.c, args.ch.loops
    if args.tile_flops != 2 or not loops or c.axes[loops[-1]].extent <= 1:
        return None
    inner = c.axes[loops[-1]].extent
    gathers = sum(1 for st in c.axes[loops[-1]].strides if st not in (0, 1))
    per_call = (inner * 2 * flop_factor(c.dtype) / ROW_FLOPS * (1 + ROW_GATHER_COST * gathers)
                + args.params.tile_seconds)
    return Fold(inner, per_call)

KIND = TileKind(name="loops", mode=MODE, owns=_owns, describe=_describe, takes=_takes,
                encode=_encode, price=_price, floor_rate=_floor_rate,
                fold=_fold, fold_rate=ROW_FLOPS, in_walker=True)
