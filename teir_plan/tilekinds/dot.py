"""Dot-product tiles (executor/gemm_tiles.dot_tile_kernel): a GEMM tile with one output row or
column whose K axis has unit stride in both operands, as vectorized dot products rather
than a BLAS call made for wide tiles."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from teir_plan.teir.axes import extent_at
from teir_plan.tilekinds.kind import (
    GemmTile,
    Lowering,
    Price,
    PriceArgs,
    ScheduleArgs,
    Split,
    TileKind,
)
from teir_plan.tilekinds.table import T_K, T_M, T_MODE, T_N, T_SWAP, set_fields
from teir_plan.tiles import DOT_SPLIT_MIN_K

if TYPE_CHECKING:
    from teir_plan.machine.params import MachineParams

MODE = 4
# The shortest K that runs as dot products: BLAS' ?gemm is made for wide tiles
# (docs/decisions.md).
DOT_MIN_K = 16
# The rate (flop/s) of the dot tiles' vectorized loops in L1, a little below the slower
# of float32's and float64's.
DOT_FLOPS = 10e9


def dot_tile(m: int, n: int, k: int, br: int, a: tuple[int, int], b: tuple[int, int]) -> bool:
    """Whether a GEMM tile runs as dot products: one output row or column, a plain GEMM,
    K at least DOT_MIN_K steps with unit stride in A (``a``: its M and K strides) and in
    B (``b``: its K and N strides).

    >>> dot_tile(4096, 1, 4096, 1, (4096, 1), (1, 0)), dot_tile(8, 8, 64, 1, (64, 1), (1, 8))
    (True, False)
    """
    return br == 1 and k >= DOT_MIN_K and (m == 1 or n == 1) and a[1] == 1 and b[0] == 1


def _takes(t: GemmTile) -> int:
    return int(dot_tile(t.m, t.n, t.k, t.br, t.a, t.b))


def _may_take(t: GemmTile) -> bool:
    return t.a[1] == 1 and t.b[0] == 1


def _encode(table: np.ndarray, t: GemmTile, axis: int, low: Lowering) -> None:
    set_fields(table, mode=MODE, swap=t.m == 1 and t.n > 1)


def _price(t: GemmTile, axis: int, p: PriceArgs) -> Price:
    return Price(p.flops / DOT_FLOPS)


def _floor_rate(m: int, n: int, k: int, itemsize: int, params: MachineParams,
                dtype: np.dtype) -> float:
    return DOT_FLOPS if min(m, n) == 1 and k >= DOT_MIN_K else 0.0


def _owns(table: np.ndarray) -> bool:
    return bool(table[T_MODE] == MODE)


def _describe(table: np.ndarray, dtype: np.dtype) -> str:
    m, n, k = int(table[T_M]), int(table[T_N]), int(table[T_K])
    count, side = (n, "column") if table[T_SWAP] else (m, "row")
    what = "one dot product" if count == 1 else f"{count} dot products (one per output {side})"
    return (f"each tile runs as {what}, k={k} along the unit stride of both "
            f"operands, in a vectorized jitted loop (no BLAS call)")



def _split(args: ScheduleArgs) -> Split | None:
    """One long dot product and no loops: its K range is split over the threads
    (run_dot_split)."""
    c, ch = args.c, args.ch
    if ch.loops or not (args.tile_flops == 2 * extent_at(c.extents, ch.k)
                        >= 2 * DOT_SPLIT_MIN_K):
        return None
    return Split(args.threads, float(args.threads), args.params.parallel_seconds, 0.0)

KIND = TileKind(name="dot", mode=MODE, owns=_owns, describe=_describe, takes=_takes,
                may_take=_may_take, encode=_encode, price=_price, floor_rate=_floor_rate,
                split=_split, in_walker=True)
