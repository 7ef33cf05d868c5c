"""The integer tables that tell the jitted kernels what to run, each with one schema.

The tile table: :data:`FIELDS` names every slot of the row that says what one tile is;
the tile kinds (this package) fill a ``TILE_LEN`` int64 array by name
(:func:`set_fields`) and the kernels (copy_kernels, gemm_tiles, walker, blocked) read
it through the ``T_*`` indices derived from it.  The loop table (:data:`LOOP_FIELDS`,
``L_*``: lowering and the row kind's fold write it, the walker reads it), a blocked
program's outer loops (:data:`OUTER_FIELDS`, the loop table's first columns) and the
block copy's table (:data:`BLOCK_FIELDS`, ``B_*``: planner/block.py and lowering's
copy runs write it, executor/blocked.py reads it) are here too: their writers and
readers all import this module.  Tables made row by row are built by name with
:func:`named_rows`.
Plain constants, no numba: numba freezes them into the code it compiles (the executor's
cache hashes this package, executor/cache.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

# Primitive kinds (the TEIR program's main primitive).
KIND_COPY = 0
KIND_RELU = 1
KIND_GEMM = 2
KIND_BRGEMM = 3

# The slots, in order.  What each holds:
FIELDS: tuple[str, ...] = (
    "kind",  # KIND_*
    "first_zero",  # the program's first-access primitive is Zero
    "last_relu",  # its last-access primitive is ReLU
    "m", "n", "k", "br",  # extents (unary: the tile's two axes as m, n)
    "a_m",  # in0 stride along M (unary: input stride along the tile's first axis)
    "a_k",  # in0 stride along K (unary: input stride along the tile's second axis)
    "b_k", "b_n",
    "c_m",  # out stride along M (unary: output stride along the tile's first axis)
    "c_n",  # out stride along N (unary: output stride along the tile's second axis)
    "a_br", "b_br",
    "mode",  # the tile kind's MODE (teir_plan.tilekinds: which kernel runs a GEMM tile)
    "swap",  # the kernel's axes swapped: BLAS computes C^T = B^T A^T, the vector axis is N
    "transa",  # ord('N') / ord('T') for BLAS' first operand, 0 = pack it
    "transb",
    "lda", "ldb",
    "ldc",  # 0 = C is not BLAS-addressable: compute into scratch, then add
    "gemm_fn",  # the address of ?gemm
    "blas_int",  # bytes per BLAS integer: 4 (LP64) or 8 (ILP64)
    "origin0", "origin1", "origin2",  # the operands' origins, filled in per call
    "scratch",  # scratch elements each worker needs
    "stream",  # out streams to memory (tiles.streams_out): non-temporal stores
    "ahead",  # vector-kernel tiles prefetch the next tile's lines (lower.prefetch_ahead)
    "row_par",  # row tiles: the folded loop is the innermost parallel loop
    # Vector tiles whose out has its unit stride along the rows: the address of the
    # transposed kernel compiled for the program's dtype, called through it; 0: no.
    "vec_t",
    # Vector tiles whose vector operand has its unit stride along K: the buffer's row
    # stride (each tile first transposes its K x length block into the worker's buffer,
    # rows this many elements apart, and runs the vector kernel on that); 0: no.
    "vec_p",
    # Vector tiles: the address of the vector kernel compiled for the program's dtype.
    "vec_fn",
    # Copy/ReLU, BLAS and packed vector tiles: the address of the tile kind's entry point
    # compiled for the program's dtype, called through it (walker._run_tile).
    "tile_fn",
)


def slots(fields: tuple[str, ...]) -> dict[str, int]:
    """Each field's index in a schema's row."""
    return {name: i for i, name in enumerate(fields)}


SLOT = slots(FIELDS)
TILE_LEN = len(FIELDS)

T_KIND = SLOT["kind"]
T_FIRST_ZERO = SLOT["first_zero"]
T_LAST_RELU = SLOT["last_relu"]
T_M = SLOT["m"]
T_N = SLOT["n"]
T_K = SLOT["k"]
T_BR = SLOT["br"]
T_A_M = SLOT["a_m"]
T_A_K = SLOT["a_k"]
T_B_K = SLOT["b_k"]
T_B_N = SLOT["b_n"]
T_C_M = SLOT["c_m"]
T_C_N = SLOT["c_n"]
T_A_BR = SLOT["a_br"]
T_B_BR = SLOT["b_br"]
T_MODE = SLOT["mode"]
T_SWAP = SLOT["swap"]
T_TRANSA = SLOT["transa"]
T_TRANSB = SLOT["transb"]
T_LDA = SLOT["lda"]
T_LDB = SLOT["ldb"]
T_LDC = SLOT["ldc"]
T_GEMM_FN = SLOT["gemm_fn"]
T_BLAS_INT = SLOT["blas_int"]
T_ORIGIN0 = SLOT["origin0"]
T_ORIGIN1 = SLOT["origin1"]
T_ORIGIN2 = SLOT["origin2"]
T_SCRATCH = SLOT["scratch"]
T_STREAM = SLOT["stream"]
T_AHEAD = SLOT["ahead"]
T_ROW_PAR = SLOT["row_par"]
T_VEC_T = SLOT["vec_t"]
T_VEC_P = SLOT["vec_p"]
T_VEC_FN = SLOT["vec_fn"]
T_TILE_FN = SLOT["tile_fn"]


def set_fields(tile: np.ndarray, **fields: int) -> None:
    """Write named fields of a tile table.

    >>> t = np.zeros(TILE_LEN, np.int64)
    >>> set_fields(t, m=4, swap=True)
    >>> int(t[T_M]), int(t[T_SWAP])
    (4, 1)
    """
    for name, value in fields.items():
        tile[SLOT[name]] = int(value)


def field(tile: np.ndarray, name: str) -> int:
    """One named field of a tile table."""
    return int(tile[SLOT[name]])


def named_rows(fields: tuple[str, ...], rows: Iterable[Mapping[str, int]]) -> np.ndarray:
    """An int64 table with a column per name of ``fields`` (in their order) and a row per
    mapping of ``rows``, which names every field and nothing else.

    >>> named_rows(("size", "out"), [{"out": 1, "size": 3}, {"size": 4, "out": 0}]).tolist()
    [[3, 1], [4, 0]]
    """
    given = list(rows)
    table = np.zeros((len(given), len(fields)), np.int64)
    for r, row in enumerate(given):
        if row.keys() != set(fields):
            raise KeyError(f"a row of {fields} named {sorted(row)}")
        for j, name in enumerate(fields):
            table[r, j] = row[name]
    return table


# --- The loop table (executor/lower.py: Lowered.loops) ---------------------------------
# One row per loop axis of a lowered program: the first ``npar`` rows its parallel axes,
# the rest its sequential axes in schedule order (a row tile's folded loop removed:
# row.fold).  The walker (executor/walker.py) walks them as an odometer.
LOOP_FIELDS: tuple[str, ...] = (
    "size",  # the axis' extent
    "in0",  # in0's stride along it (elements)
    "in1",  # in1's stride along it (0 in a unary program, which has no in1)
    "out",  # out's stride along it
    "is_k",  # 1: a K axis (the tile's first and last visits are told apart along it)
)
LOOP_SLOT = slots(LOOP_FIELDS)
LOOP_LEN = len(LOOP_FIELDS)

L_SIZE = LOOP_SLOT["size"]
L_IN0 = LOOP_SLOT["in0"]
L_IN1 = LOOP_SLOT["in1"]
L_OUT = LOOP_SLOT["out"]
L_IS_K = LOOP_SLOT["is_k"]

# --- A blocked program's outer loops (planner/block.py: Blocking.outer_table) ----------
# One row per loop around the blocks, outermost first: the loop table's columns without
# ``is_k`` (no K axis goes around the blocks), read by the same helpers
# (walker.collapsed_offsets, loop_iterations) through the ``L_*`` indices.
OUTER_FIELDS: tuple[str, ...] = LOOP_FIELDS[:L_IS_K]
OUTER_LEN = len(OUTER_FIELDS)

# --- The block copy's table (planner/block.py: Blocking.block_table; lower.copy_runs) --
# One row per axis of a block copied into out, outermost in out first
# (blocked._copy_block).
BLOCK_FIELDS: tuple[str, ...] = (
    "size",  # the axis' extent in the block
    "in",  # the stride of what is copied: the stage's (a blocked program), in0's (copy runs)
    "out",  # out's stride
)
BLOCK_SLOT = slots(BLOCK_FIELDS)
BLOCK_LEN = len(BLOCK_FIELDS)

B_SIZE = BLOCK_SLOT["size"]
B_IN = BLOCK_SLOT["in"]
B_OUT = BLOCK_SLOT["out"]
