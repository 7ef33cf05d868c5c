"""The tile rules shared by the tile kinds: the vector target, the limits every vector
kernel keeps, whether an output streams to memory, and the reductions' rules.

Each tile kind's own rule, price and encoding are in its module of
:mod:`teir_plan.tilekinds`; what several kinds, the planner's candidates and the
executor's kernels all read lives here, once.  This module
imports neither numba nor the executor: the planner can be imported, and plans made,
without them.  The executor's kernels import the constants they compile in from here
(the numba cache hashes this file with the executor's own, executor/cache.py).  Only
:func:`teir_plan.isa.target`, called at import, reads the vector target (llvmlite's host
CPU query).
"""

from __future__ import annotations

import numpy as np

from teir_plan.isa import blocking, target

VEC_TARGET = target()
# The vector kernels' shapes and limits (teir_plan.isa.Blocking).  float64's record has
# the same shapes and limits as float32's: the kernels compile one set for both.
BLOCKING = blocking("float32")

VEC_MAX_ROWS_TIMES_K = BLOCKING.max_rows_times_k
VEC_MAX_SPAN = BLOCKING.max_span_bytes
# An output at least this large is not read again from cache: written once (no K loop
# around the tiles), it is written with non-temporal stores.
STREAM_MIN_BYTES = 32 * 1024 * 1024
# The main micro-tile is VEC_LINES vector registers of VEC_BYTES long and VEC_ROWS rows;
# without a vector ISA (VEC_BYTES 0) every GEMM tile runs on BLAS or loops.
VEC_BYTES = BLOCKING.vector_bytes
VEC_LINES = BLOCKING.shapes.vectors
VEC_ROWS = BLOCKING.shapes.rows
VEC_MIN_ROWS = BLOCKING.min_rows
# A micro-tile's output loads and stores, in K steps (vec.k_share): the reference's
# (MachineParams.vec_k_steps, which the calibrations measure), and below VEC_SHORT_K on
# every machine (docs/decisions.md).
VEC_K_STEPS = 8
VEC_SHORT_K = 8
VEC_LONG_K = 16  # from here on, the machine's K steps alone
VEC_STREAM_K = BLOCKING.stream_k


def gather_bytes(strides: tuple[int, int], itemsize: int) -> int:
    """Bytes a strided gather effectively moves per element: the element itself when one
    axis is unit-stride, else most of a cache line.

    >>> gather_bytes((1, 96), 4), gather_bytes((96, 24), 4)
    (4, 32)
    """
    return itemsize if 1 in (abs(strides[0]), abs(strides[1])) else 8 * itemsize
# BLAS' GEMM per element type (the executor calls it, the explain report names it).
GEMM_NAMES = {"float32": "sgemm", "float64": "dgemm", "complex64": "cgemm",
              "complex128": "zgemm"}


def vector_kernel_dtype(dtype: np.dtype) -> bool:
    """Whether the vector kernels (and the copy kernels' line transposes) take elements of
    ``dtype``: real floats only, their lanes are float lanes.  Complex tiles run on BLAS'
    cgemm/zgemm, dot, row and loop tiles."""
    return np.dtype(dtype).kind == "f"


def flop_factor(dtype: np.dtype) -> int:
    """Real multiply-adds per multiply-add of ``dtype``: 1, or 4 for complex ((a + bi)(c +
    di) is four real products and their sums, 8 flops).  The cost model counts a
    contraction's multiply-adds and prices each at the real type's rates times this.

    >>> flop_factor(np.float32), flop_factor(np.complex128)
    (1, 4)
    """
    return 4 if np.dtype(dtype).kind == "c" else 1


def real_dtype(dtype: np.dtype) -> np.dtype:
    """The type of ``dtype``'s parts: itself for a real type, float32 for complex64,
    float64 for complex128 (the machine's rates are the real types')."""
    dt = np.dtype(dtype)
    return np.dtype(f"f{dt.itemsize // 2}") if dt.kind == "c" else dt


def streams_out(out_bytes: int, k_loop: bool, zero_first: bool) -> bool:
    """Whether a program's output streams to memory: it spans ``out_bytes`` bytes, at
    least STREAM_MIN_BYTES, and each tile is written once (no K loop around the tiles,
    ``k_loop`` False; zeroed first, not accumulated into).

    >>> streams_out(227 * 2**20, False, True), streams_out(227 * 2**20, True, True)
    (True, False)
    """
    return zero_first and not k_loop and out_bytes >= STREAM_MIN_BYTES


# A Copy tile whose rows along out's unit stride are shorter than this many lines
# cannot stream them on its own (copy_kernels.copy_transposed).
COPY_RUN_MIN_LINES = 3


NEXT_TILE_PREFETCH_BYTES = BLOCKING.next_tile_prefetch_bytes


PAGE_BYTES = BLOCKING.page_bytes


# A program without parallel loops whose BLAS tile has at least this many flops runs the
# tile split across all threads (walker.run_split; the cost model's threshold).
BLAS_THREADED_TILE_FLOPS = 4_000_000


# A dot product at least this long is split over the threads: below, the parallel
# region's start costs more than half the product (docs/decisions.md).
DOT_SPLIT_MIN_K = 1 << 16
# OpenBLAS runs a real GEMM call with m * n * k at most this on the calling thread alone
# (its interface/gemm.c: SMP_THRESHOLD_MIN 65536 x GEMM_MULTITHREAD_THRESHOLD, 4 unless
# built otherwise), so a serial program of such tiles leaves BLAS' thread count alone
# (setting it and back costs about 3 us, a third of a 16 x 16 product's call).  A build
# with another threshold would only run such a call on its own threads: the same result.
# Not complex calls: OpenBLAS threads cgemm/zgemm well below it (16384 x 4 x 4 and
# 4096 x 4 x 8 ran on two threads, 26 against 42 us), and its threads then spin on the
# cores the next parallel region needs: a 16-qubit circuit of 407 small complex steps
# took 285-290 ms on one tp thread so, 69 ms with BLAS limited to one thread.
BLAS_SERIAL_MNK = 65536 * 4


# --- Reductions (executor/reduce.py, planner/reduce.py) --------------------------------
KIND_INNER = 0  # the unit stride along a summed axis: each output a horizontal sum
KIND_ROWS = 1  # the unit stride along a kept axis: whole rows added into the output
SPLIT_NONE = 0
SPLIT_OUTPUTS = 1  # the threads take shares of the outputs
SPLIT_SUMMED = 2  # ... of the summed axis, into private partial sums
# Parallel reductions take this many chunks per thread, handed out as workers come free:
# on a machine shared with other processes, a static split waits for the slowest worker.
CHUNKS_PER_THREAD = 4

# The reductions' tables (int64; planner/reduce.py's Reduction.tables writes them, the
# rules below and executor/reduce*.py read them): one row per axis, outer axes first,
# every stride non-negative in x (the operand).  ``vec``, the kept axis along x's
# smallest stride (KIND_ROWS; (1, 0, 0, 0) otherwise), is one row of ``kept``'s fields.
KEPT_FIELDS: tuple[str, ...] = (
    "n",  # the axis' extent
    "x",  # x's stride along it
    "out",  # out's stride along it
    # The weights' stride along it (0: one run of weights for every output, ``ij,j->i``;
    # else each output weighted by a run of its own, ``ij,ij->i``: KIND_INNER only, the
    # planner offers no other kind such weights; any sign, x's flips it).
    "w",
)
# executor/reduce.py's run_parallel copies ``kept`` with a column more:
SPLIT_KEPT_FIELDS: tuple[str, ...] = (
    *KEPT_FIELDS,
    "partial",  # a chunk's private partial result's stride (C order over kept, then vec)
)
SUMMED_FIELDS: tuple[str, ...] = (
    "n",  # the axis' extent
    "x",  # x's stride along it
    "w",  # the weights' stride along it (0 unweighted); the innermost summed axis last
)
KEPT_LEN = len(KEPT_FIELDS)
SPLIT_KEPT_LEN = len(SPLIT_KEPT_FIELDS)
SUMMED_LEN = len(SUMMED_FIELDS)
KEPT_N = SPLIT_KEPT_FIELDS.index("n")
KEPT_X = SPLIT_KEPT_FIELDS.index("x")
KEPT_OUT = SPLIT_KEPT_FIELDS.index("out")
KEPT_W = SPLIT_KEPT_FIELDS.index("w")
KEPT_PARTIAL = SPLIT_KEPT_FIELDS.index("partial")
SUMMED_N = SUMMED_FIELDS.index("n")
SUMMED_X = SUMMED_FIELDS.index("x")
SUMMED_W = SUMMED_FIELDS.index("w")


def output_chunks(units: int, threads: int) -> int:
    """Chunks of a SPLIT_OUTPUTS reduction over ``threads``: at least four units each
    (the inner kernel sums four outputs per pass)."""
    return min(CHUNKS_PER_THREAD * threads, max(threads, units // 4))


# Weighted rows shorter than this (one summed axis, unit stride along them), more than
# ROW_GROUP of them, run on BLAS' ?gemv, as fast as the rows kernel there (``ki,k->i``
# with rows of 24 float32); up to ROW_GROUP of them the rows kernel, which needs no
# call, is 2-4x faster (``akj,k->aj`` with k = 4 or 16; docs/decisions.md: narrow
# rows).  Longer rows the rows kernel reads faster from memory, prefetched (one core:
# float32 rows of 63 32 against 22 GB/s, float64 rows of 24 35 against 25; float32
# rows of 48 34 against 36, and on two cores 48 against 47: docs/decisions.md).  Rows
# with gaps between them are not prefetched, and run on ?gemv up to GEMV_MAX_NB.
GEMV_MAX_ROW_BYTES = 192
GEMV_MAX_NB = 64  # ... in elements, for rows with gaps between them (not prefetched)
# Back-to-back rows up to this long run on ?gemv too when the reduction reads no more
# than the last-level cache holds: from the caches ?gemv reads them 1.2-2x as fast as
# the rows kernel, whose prefetches there only cost (2 threads, in a loop: 64000 x 64
# float32 114 against 220 us, 16000 x 128 64 against 92, float64 10000 x 128 69
# against 84; rows of 1 KiB float32 even), and from memory it is within 15% of it at
# these sizes (the same operands evicted before each call: 494 against 429 us, 438
# against 404, 322 against 324; AMD EPYC Zen 5; docs/decisions.md).
GEMV_CACHED_MAX_ROW_BYTES = 1024
# Rows a segment of the rows kernel sums (four a pass) before its block is added to the
# unit's total: the summation error's bound (executor/reduce.py); more than this many
# summed rows are worth a ?gemv call or flat windows.
ROW_GROUP = 64
# Units of at most ROW_GROUP unweighted rows (unit stride along them and in out) are
# summed straight into out up to this many rows: bkd->bd with rows of 24 float32 in L2,
# one core, 1.1-4x the accumulator's pass with 2-8 rows, 0.9-1.1x with 16-64 at either
# vector width (weighted rows: 1.0-1.5x, always straight; docs/decisions.md).
DIRECT_MAX_ROWS = 8


def sums_into_out(x_stride: int, out_stride: int, rows: int, weighted: bool) -> bool:
    """Whether the rows kernel sums units of one segment (one summed axis of ``rows``
    rows, at most ROW_GROUP, each unit's row within the row block) straight into out's
    rows rather than through an accumulator (see DIRECT_MAX_ROWS).  The executor asks
    the same inline (executor/reduce.py: reduce_chunk; a private partial has unit
    stride)."""
    return (x_stride == 1 and out_stride == 1 and 0 < rows <= ROW_GROUP
            and (weighted or rows <= DIRECT_MAX_ROWS))


def dot_four_min_bytes(vector_bytes: int) -> int:
    """The shortest weighted unit-stride run (in bytes) the inner reduction kernel sums
    four outputs a pass on a target of ``vector_bytes`` vectors; shorter ones are summed
    one output at a time (runs longer than the kernel's RUN_BLOCK are always four a
    pass).  Four rows are read as four streams at once; one row at a time, its
    horizontal sum waits on its last loads.  On a Zen 5, 64 MB of float32 rows (from
    memory, one core), one at a time against four a pass: with 64-byte vectors rows of
    1024 (4 KiB) 36 against 40 GB/s, 4096 33-36 against 45-46 (float64 rows of 4096
    37 against 54), rows of 256 35 against 33; with 32-byte vectors four a pass was
    slower up to 16 KiB (rows of 1024 float32 44 against 35 GB/s, 4096 40 against 39)
    and faster only at 32 KiB (float64 rows of 4096, 33 against 46): docs/decisions.md.

    >>> dot_four_min_bytes(64), dot_four_min_bytes(32)
    (4096, 32768)
    """
    return 4096 if vector_bytes >= 64 else 32768


DOT_FOUR_MIN_BYTES = dot_four_min_bytes(VEC_BYTES)
# Unweighted rows shorter than this, back to back in memory (ij->j with j = 3 or 24),
# are summed as windows of whole rows, FLAT_WINDOW elements or so, each window one long
# row of the rows kernel: ij->j on one core, float32, rows of 3, 24 and 300 (1e6, 1e6
# and 1e5 of them) 0.14, 2.4 and 3.0 ms against 1.0, 3.0 and 3.7 on the segment loop.
FLAT_MAX_NB = 512
FLAT_WINDOW = 1024
# ... and only over this many windows or more: a few windows are each a long row of the
# rows kernel's general loop plus a fold, for rows the segment loop sums as well
# (``akj->aj`` with j = 24 and k = 65, one window and 23 rows a unit: 0.78 us a unit,
# numpy 0.25).
FLAT_MIN_WINDOWS = 8
ROW_BLOCK_BYTES = 8192  # the accumulator's share of the vector axis (in L1 with its pair)
# Weighted rows of the rows kernel, back to back in memory, are prefetched this far
# ahead when a row is PREFETCH_MIN_ROW_BYTES to PREFETCH_MAX_ROW_BYTES long: from memory
# such rows read at a fraction of a plain read's rate, which the hardware prefetcher
# leaves to the loads (docs/decisions.md: prefetching the rows kernel).
ROWS_PREFETCH_BYTES = 8192
PREFETCH_MIN_ROW_BYTES = 128
PREFETCH_MAX_ROW_BYTES = 512
# 16-bit rows (read in place, executor/half_bits.py), weighted or not, are prefetched so
# when shorter than this: from memory, one core of the AMD EPYC Zen 4, rows of 256 to
# 1024 back to back read at 0.19-0.22 ns an element (9-11 GB/s) without, 0.07-0.13 with,
# and rows of 2048 (4 KiB) at 0.12 without and 0.14 with.
HALF_PREFETCH_MAX_ROW_BYTES = 4096


def row_block(itemsize: int) -> int:
    """Elements of the vector axis one ``KIND_ROWS`` unit accumulates."""
    return ROW_BLOCK_BYTES // itemsize


def uses_gemv(kind: int, vec: np.ndarray, summed: np.ndarray, weighted: bool,
              itemsize: int, cached: bool = False, weights_kept: bool = False) -> bool:
    """Whether a weighted reduction's rows run on BLAS' ?gemv: one summed axis whose
    weights step forward, and either rows of unit stride, short and many (see
    GEMV_MAX_ROW_BYTES and GEMV_MAX_NB; GEMV_CACHED_MAX_ROW_BYTES where ``cached``, the
    reduction reading no more than the last-level cache holds), that do not overlap
    (BLAS' lda >= m), or a strided vector axis whose elements each sum a unit-stride
    run of the summed axis no longer than that stride (``abu,u->ab`` with u short,
    ``?gemv`` transposed: the rows kernel would read each line once per summed element,
    ``u,abefkmu->abefkm`` with u = 8 in 177k rows 480 us against sgemv's 198).
    The executor calls it transposed when the vector axis is strided.  Never weights
    that vary along a kept axis (``weights_kept``, or a vector axis with a weights'
    stride): ?gemv weights every row by the one vector."""
    if not (kind == KIND_ROWS and weighted and summed.shape[0] == 1
            and summed[0, SUMMED_W] > 0 and not weights_kept and vec[KEPT_W] == 0):
        return False
    vn, sn, sx = vec[KEPT_N], summed[0, SUMMED_N], summed[0, SUMMED_X]
    if vec[KEPT_X] == 1:
        row_bytes = vn * itemsize
        if sx == vn:  # back to back
            short = row_bytes < GEMV_MAX_ROW_BYTES or (
                cached and row_bytes <= GEMV_CACHED_MAX_ROW_BYTES)
        else:
            short = vn < GEMV_MAX_NB
        return bool(short and sx >= vn and sn > ROW_GROUP)
    return bool(sx == 1 and vec[KEPT_X] >= sn)


def uses_flat_rows(kind: int, vec: np.ndarray, summed: np.ndarray, weighted: bool) -> bool:
    """Whether a reduction's rows are summed as flat windows (see FLAT_MAX_NB)."""
    vn = vec[KEPT_N]
    return bool(kind == KIND_ROWS and not weighted and vec[KEPT_X] == 1 and vn < FLAT_MAX_NB
                and summed.shape[0] == 1 and summed[0, SUMMED_X] == vn
                and summed[0, SUMMED_N] > ROW_GROUP
                and summed[0, SUMMED_N] >= FLAT_MIN_WINDOWS * max(1, FLAT_WINDOW // vn))
