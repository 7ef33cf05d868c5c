"""Row tiles (executor/gemm_tiles.row_tile_kernel): a scalar product tile (m = n = k = br = 1:
elementwise products, dot products and the spec's scalar schedules) that takes the
program's innermost loop into itself, a whole row per call in a vectorized loop, instead
of one element per call of the loop walker (about 50 ns each: docs/decisions.md).

Not a rule on the tile alone: lowering folds the loop after the GEMM kinds chose strided
loops for the scalar tile (:func:`fold`)."""

from __future__ import annotations

import numpy as np

from teir_plan.tilekinds.kind import TileKind
from teir_plan.tilekinds.loops import MODE as LOOPS_MODE
from teir_plan.tilekinds.table import (
    L_IN0,
    L_IN1,
    L_IS_K,
    L_OUT,
    L_SIZE,
    T_BR,
    T_C_M,
    T_K,
    T_M,
    T_MODE,
    T_N,
    T_ROW_PAR,
    set_fields,
)

MODE = 3
# Priced with the loops kind, whose scalar tiles these are (loops.ROW_FLOPS).


def fold(loops: np.ndarray, npar: int, tile: np.ndarray) -> np.ndarray:
    """Fold the innermost loop of a scalar-tile program into its tile (a row tile: T_M
    elements along strides T_A_M (in0), T_B_N (in1), T_C_M (out; 0: the loop is a K
    loop, summed into one element)).  Returns the loop table without a folded
    sequential loop; a parallel loop stays in the table (``row_par``: the parallel
    runner walks its iterations in runs, any other walker one element at a time).

    >>> from teir_plan.tilekinds.table import TILE_LEN
    >>> loops = np.array([[4, 1, 1, 1, 0]])  # one parallel C loop
    >>> tile = np.zeros(TILE_LEN, np.int64)
    >>> tile[[T_M, T_N, T_K, T_BR]] = 1
    >>> fold(loops, 1, tile).tolist(), int(tile[T_MODE] == MODE)
    ([[4, 1, 1, 1, 0]], 1)
    """
    if (tile[T_MODE] != LOOPS_MODE or len(loops) == 0
            or any(tile[f] != 1 for f in (T_M, T_N, T_K, T_BR))):
        return loops
    last = loops[-1]
    size, s0, s1, s2, is_k = (int(last[f]) for f in (L_SIZE, L_IN0, L_IN1, L_OUT, L_IS_K))
    # A K loop sums into one element (out stride 0); any other loop writes a new
    # element each step.  A loop of one step gains nothing.
    if size <= 1 or (s2 == 0) != bool(is_k):
        return loops
    set_fields(tile, mode=MODE, a_m=s0, b_n=s1, c_m=s2)
    if len(loops) > npar:  # the innermost sequential loop: folded into the tile
        set_fields(tile, m=size)
        return loops[:-1]
    set_fields(tile, row_par=1)  # the innermost parallel loop: walked in runs by run_chunk
    return loops


def _owns(table: np.ndarray) -> bool:
    return bool(table[T_MODE] == MODE)


def _describe(table: np.ndarray, dtype: np.dtype) -> str:
    loop = ("innermost parallel loop (its iterations walked in runs)"
            if table[T_ROW_PAR] else f"innermost loop ({table[T_M]} elements)")
    does = ("sums the products into one output element" if table[T_C_M] == 0
            else "writes the elementwise products")
    return (f"the scalar tiles run as rows: the program's {loop} is taken into "
            f"one vectorized jitted loop that {does}")


KIND = TileKind(name="row", mode=MODE, owns=_owns, describe=_describe, in_walker=True)
