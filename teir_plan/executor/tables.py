"""The executor's own tables: those only the executor writes and its kernels read.

One schema per table, as for the tile and loop tables (:mod:`teir_plan.tilekinds.table`,
which the planner writes too) and the reductions' (:mod:`teir_plan.tiles`): a tuple of
field names, and the int constants derived from it that the kernels index with (numba
freezes them into the code it compiles; the executor's cache hashes this file,
executor/cache.py).  Tables made row by row are built by name
(:func:`teir_plan.tilekinds.table.named_rows`).
"""

from __future__ import annotations

import numpy as np

from teir_plan.tilekinds.table import slots

# --- The constants (execute.py, steps_runner.py) -----------------------------------------
# A program's numbers in its own dtype, passed to every runner: BLAS reads them through
# their address (gemm_tiles.gemm_blas, walker.blas_tiles_chunk), the dot and row tiles
# start their sums from ``zero`` (a zero of the arrays' type).
CONST_FIELDS: tuple[str, ...] = (
    "one",  # 1: BLAS' alpha, and its beta when a product adds into C (reduce.py's ?gemv:
    # both, gemv_rows)
    "zero",  # 0: BLAS' beta when a product writes C over; the sums' starting value
)
CONST_SLOT = slots(CONST_FIELDS)
CONST_LEN = len(CONST_FIELDS)

C_ONE = CONST_SLOT["one"]
C_ZERO = CONST_SLOT["zero"]


def constants(dtype: np.dtype | type) -> np.ndarray:
    """The constants table of a program of ``dtype``.

    >>> constants(np.float32).tolist()
    [1.0, 0.0]
    """
    consts = np.zeros(CONST_LEN, dtype)
    consts[C_ONE] = 1
    consts[C_ZERO] = 0
    return consts


# --- ?gemv for the reductions' rows (reduce.py: gemv_table, reduce_rows.gemv_rows) ------
GEMV_FIELDS: tuple[str, ...] = (
    "fn",  # the address of ?gemv (0: the rows do not take it)
    "int_bytes",  # bytes per BLAS integer: 4 (LP64) or 8 (ILP64)
)
GEMV_SLOT = slots(GEMV_FIELDS)
GEMV_LEN = len(GEMV_FIELDS)

GEMV_FN = GEMV_SLOT["fn"]
GEMV_INT_BYTES = GEMV_SLOT["int_bytes"]


# --- The steps table (steps_runner.py: one row per step of a one-call program) ----------
STEP_FIELDS: tuple[str, ...] = (
    "fn",  # the address of the step's chunk runner (walker.chunk_address, ...)
    "in0",  # its in0 buffer (a row of the buffer map)
    "in1",  # its in1 buffer (= in0 in a unary program)
    "out",  # its out buffer
    "loop0",  # where its loop rows start in the shared loop table
    "nloops",  # how many loop rows it has
    "npar",  # its parallel rows (walked in runs on this thread: see run_lowered)
    "stop",  # the end of its iteration range
)
STEP_SLOT = slots(STEP_FIELDS)
STEP_LEN = len(STEP_FIELDS)

S_FN = STEP_SLOT["fn"]
S_IN0 = STEP_SLOT["in0"]
S_IN1 = STEP_SLOT["in1"]
S_OUT = STEP_SLOT["out"]
S_LOOP0 = STEP_SLOT["loop0"]
S_NLOOPS = STEP_SLOT["nloops"]
S_NPAR = STEP_SLOT["npar"]
S_STOP = STEP_SLOT["stop"]


# --- The buffer map (schedule/one_call.py writes it, steps_runner.run_steps reads it) ---
# One row per buffer of a plan: operands, out, then its temporaries and constants.
BUFFER_FIELDS: tuple[str, ...] = (
    "array",  # the gathered array it is, or lies in
    "elements",  # -1: the whole gathered array; else a temporary of this many elements
    "offset",  # a temporary's bytes after the first cache line of its gathered array
)
BUFFER_SLOT = slots(BUFFER_FIELDS)
BUFFER_LEN = len(BUFFER_FIELDS)

BUF_ARRAY = BUFFER_SLOT["array"]
BUF_ELEMENTS = BUFFER_SLOT["elements"]
BUF_OFFSET = BUFFER_SLOT["offset"]


# --- A parallel K program's reduction table (lower.py: Partials.rows; partials.py) ------
# One row per output axis, from the layout's rows (teir/parallel_k.py), the last row the
# one add_partials sums across the workers' blocks a whole row at a time.
PARTIAL_FIELDS: tuple[str, ...] = (
    "extent",  # the axis' extent
    "out",  # out's stride along it
    "block",  # a worker's block's stride along it (1 along the last row)
)
PARTIAL_SLOT = slots(PARTIAL_FIELDS)
PARTIAL_LEN = len(PARTIAL_FIELDS)

P_EXTENT = PARTIAL_SLOT["extent"]
P_OUT = PARTIAL_SLOT["out"]
P_BLOCK = PARTIAL_SLOT["block"]


# --- The block copy's combinations (blocked._combos, inside the block copy) -------------
# One row per combination of some block rows' indices, the last row fastest.
COMBO_FIELDS: tuple[str, ...] = (
    "in",  # the combination's offset along the block table's ``in`` strides
    "out",  # ... along its ``out`` strides
)
COMBO_SLOT = slots(COMBO_FIELDS)
COMBO_LEN = len(COMBO_FIELDS)

CB_IN = COMBO_SLOT["in"]
CB_OUT = COMBO_SLOT["out"]
