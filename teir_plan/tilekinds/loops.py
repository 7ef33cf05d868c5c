"""Strided loops (executor/gemm_tiles._gemm_loops): the GEMM tiles no other kind takes,
too small for a BLAS call to pay off or beyond BLAS' 32-bit integers."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from teir_plan.tilekinds.blas import blas_plan
from teir_plan.tilekinds.kind import GemmTile, Lowering, Price, PriceArgs, TileKind
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


KIND = TileKind(name="loops", mode=MODE, owns=_owns, describe=_describe, takes=_takes,
                encode=_encode, price=_price, floor_rate=_floor_rate)
