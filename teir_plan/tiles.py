"""The tile rules: which kernel runs a GEMM or Copy tile, and at what rate.

The planner's cost model and candidate generation and the executor's lowering ask the
same questions of a tile (does it run on BLAS, on a dot product, on one of the vector
kernels; does its output stream to memory), so the answers live here, once.  This module
imports neither numba nor the executor: the planner can be imported, and plans made,
without them.  The executor's kernels import the constants they compile in from here
(the numba cache hashes this file with the executor's own, executor/cache.py).  Only
:func:`teir_plan.isa.target`, called at import, reads the vector target (llvmlite's host
CPU query).
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

import numpy as np

from teir_plan.isa import target

# Below this many multiply-adds per product a tile runs as strided loops: a BLAS call
# and its argument set-up cost more than the arithmetic.
SMALL_TILE_FLOPS = 512

VEC_TARGET = target()

# A tile with one output row or column (matrix-vector and dot products) whose K axis
# has unit stride in both operands runs as dot products (table.MODE_DOT) when K has
# at least this many steps: BLAS' ?gemm is made for wide tiles (on this machine
# i,i-> on 10^6 float32 took 988 us through sgemm, 305 through sdot).
DOT_MIN_K = 16

# The vector kernel (executor/microkernel.py) takes a GEMM tile whose rows (the extent
# across the vector axis) times K are at most this (and whose broadcast block stays in
# L1, VEC_MAX_SPAN); beyond, BLAS' packed kernels win.  Measured on both cores, float32,
# the vector operand streaming from memory along tiles 9216 long (kernel / BLAS):
# rows 24-96 x K 96-384 within the span: 1.2-1.6x, rows 24 x K 96 1.0x, and 0.9x for
# rows 24 x K 384 when the K rows are a multiple of 4 KiB apart (they share L1 sets);
# bda,dc->abc 110 -> 160 GFLOP/s, dca,bd->abc 75-85 -> 96-100 (when the limit was
# 2400, from tiles in cache on one core: rows 96 x K 96 0.9-1.0x).  With an output
# that streams (streams_out), BLAS also pays for reading C for ownership: rows 24-192
# x K 24-48 1.4-1.7x, rows 192 x K 256 0.86x.
VEC_MAX_ROWS_TIMES_K = 9216
# The bytes the broadcast operand's block of a tile may span (see vec_axis).
VEC_MAX_SPAN = 64 * 1024
# An output at least this large is not read again from cache: written once (no K loop
# around the tiles), it is written with non-temporal stores.
STREAM_MIN_BYTES = 32 * 1024 * 1024
# The vector kernels' target (teir_plan.isa): the main micro-tile is VEC_LINES vector
# registers of VEC_BYTES long and VEC_ROWS rows; without a vector ISA (VEC_BYTES 0) every
# GEMM tile runs on BLAS or loops.
VEC_BYTES = VEC_TARGET.vector_bytes
VEC_LINES = VEC_TARGET.vectors
VEC_ROWS = VEC_TARGET.rows
# With fewer rows each K step loads nearly as many lines as it multiplies (one row:
# dca,bd->abc tiles of 512 x 1 x 384 measured 36 GFLOP/s against BLAS' 88).
VEC_MIN_ROWS = 4
VEC_K_STEPS = 8  # a micro-tile's output loads and stores, in K steps (vec_efficiency)
# A tile whose vector operand has more K rows than this, far apart (not one contiguous
# run), reads more streams at once than the hardware prefetchers follow: measured on
# both cores, rows 24 along a vector axis streaming from memory, 172-181 GFLOP/s up to
# 128 rows, 152 at 192, 137 at 256, 107 at 384 (dca,bd->abc's tiles); the same 384 rows
# in K blocks of 48 accumulating into an output block in L2: 176-201.
VEC_STREAM_K = 128


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


def vec_axis(m: int, n: int, k: int, br: int, a: tuple[int, int], b: tuple[int, int],
             c: tuple[int, int], itemsize: int) -> int:
    """Whether a GEMM tile runs on the vector kernel, and along which axis: 1 along M
    (A and C have unit stride along M), 2 along N (B and C along N), 0 not at all.

    The vector axis must be at least two micro-tiles long (one when the vector operand's
    K rows follow one another), the tile a plain GEMM (BRGEMM stays with BLAS), with at
    least VEC_MIN_ROWS rows (the other of M and N) and rows x K at most
    VEC_MAX_ROWS_TIMES_K, and the other operand's block of rows x K elements within
    VEC_MAX_SPAN bytes.

    >>> vec_axis(432, 24, 36, 1, (1, 62208), (1, 36), (1, 20736), 4)
    1
    >>> vec_axis(512, 512, 512, 1, (1, 512), (1, 512), (1, 512), 4)
    0
    """
    if br != 1 or itemsize not in (4, 8):
        return 0
    # Two micro-tiles at least: the first prefetches the second's lines (ebad,ce->abcd
    # tiles 84 long, with K rows far apart, measured 48 GFLOP/s against BLAS' 127; 81
    # against 178 when the next tile's lines are prefetched too).  One micro-tile is
    # enough when the tile's K rows follow one another (the tile is one contiguous run
    # of lines, which the next tile's prefetch covers): ecbfa,fd->abcde's 48 x 24 x 48
    # tiles 118 GFLOP/s with BLAS, 160 on the kernel.
    if not VEC_BYTES:
        return 0
    micro = VEC_LINES * VEC_BYTES // itemsize

    def long_enough(length: int, s_k: int) -> bool:
        return length >= 2 * micro or (length >= micro and abs(s_k) == length)

    most = VEC_MAX_ROWS_TIMES_K  # rows x K

    def close(rows: int, s_rows: int, s_k: int) -> bool:
        # The broadcast operand's rows x K block is read again for every micro-tile
        # along the vector axis: it must stay in L1, which a block spread over far-apart
        # rows does not (dega,gfbc->abcdef: 240 rows 576 elements apart, 24 ms against
        # 19 for 24 adjacent rows, predicted alike).
        return ((rows - 1) * abs(s_rows) + (k - 1) * abs(s_k) + 1) * itemsize <= VEC_MAX_SPAN

    if (a[0] == 1 and c[0] == 1 and long_enough(m, a[1]) and n >= VEC_MIN_ROWS and n * k <= most
            and close(n, b[1], b[0])):
        return 1
    if (b[1] == 1 and c[1] == 1 and long_enough(n, b[0]) and m >= VEC_MIN_ROWS and m * k <= most
            and close(m, a[0], a[1])):
        return 2
    return 0


# Rows of the transposed vector kernel's largest micro-tile: its accumulators, the
# vector of V and a broadcast take 26 of 32 vector registers (AVX-512, NEON), 14 of 16 with
# 12 rows (AVX2).
# Measured on one core in L1, AVX-512, float32, K = 24: 20 rows at 138 GFLOP/s, against
# 102 for 16 rows (the epilogue's transposes weigh more).
VEC_T_TILE_ROWS = 24 if VEC_TARGET.registers >= 32 else 12

# The transposed vector kernel (executor/transposed_kernel.py) takes a GEMM tile whose
# output has its unit stride along the short axis (the rows) with at most this many rows;
# beyond, the output's runs are long enough for other tiles.
VEC_T_MAX_ROWS = 64


def vec_t_axis(m: int, n: int, k: int, br: int, a: tuple[int, int], b: tuple[int, int],
               c: tuple[int, int], itemsize: int) -> int:
    """Whether a GEMM tile runs on the transposed vector kernel, and along which axis: 1
    along M (A has unit stride along M, out along N: the rows are N), 2 along N (B along
    N, out along M), 0 not at all.  Asked when :func:`vec_axis` says no.

    The vector axis must be at least VEC_T_MIN_LINES lines long, the tile a plain GEMM with 2 to
    VEC_T_MAX_ROWS rows and rows x K at most VEC_MAX_ROWS_TIMES_K, the other operand's
    block within VEC_MAX_SPAN bytes (as for the vector kernel), and out's stride along the
    vector axis must not be 0.

    >>> vec_t_axis(9600, 20, 24, 1, (1, 9600), (20, 1), (20, 1), 4)  # degc,gfab->abcdef
    1
    >>> vec_t_axis(9600, 20, 24, 1, (1, 9600), (20, 1), (1, 9600), 4)  # out along M
    0
    """
    if br != 1 or itemsize not in (4, 8) or not VEC_BYTES:
        return 0
    lanes = 64 // itemsize

    def fits(length: int, rows: int, s_rows: int, s_k: int, c_vec: int) -> bool:
        return (length >= VEC_T_MIN_LINES * lanes and 2 <= rows <= VEC_T_MAX_ROWS
                and rows * k <= VEC_MAX_ROWS_TIMES_K and c_vec != 0
                and ((rows - 1) * abs(s_rows) + (k - 1) * abs(s_k) + 1) * itemsize
                <= VEC_MAX_SPAN)

    if a[0] == 1 and c[1] == 1 and fits(m, n, b[1], b[0], c[0]):
        return 1
    if b[1] == 1 and c[0] == 1 and fits(n, m, a[0], a[1], c[1]):
        return 2
    return 0


# The packed vector kernel (gemm_tiles._gemm_vec_packed) takes a tile whose vector operand
# has unit stride along K instead (B^T, A^T: bhqd,bhkd->bhqk's K) when that operand's
# K x length block is at most this many bytes: it is transposed into the worker's
# buffer tile by tile and read from cache by every row block.
VEC_P_MAX_BYTES = 64 * 1024
# ... and a vector axis at least this many lines long: batches of 32 x 32 x 32 products
# with B^T (bij,bkj->bik, 512 of them) ran 365 -> 242 us on both cores, 48-wide ones
# 394 -> 289, against BLAS' transposed-operand calls.
VEC_P_MIN_LINES = 2


def vec_p_axis(m: int, n: int, k: int, br: int, a: tuple[int, int], b: tuple[int, int],
               c: tuple[int, int], itemsize: int) -> int:
    """Whether a GEMM tile runs on the vector kernel after transposing its vector
    operand's block into the worker's buffer, and along which axis: 1 along M (out has
    unit stride along M, A along K), 2 along N (out along N, B along K), 0 not at all.
    Asked when :func:`vec_axis` and :func:`vec_t_axis` say no.

    The vector axis must be at least VEC_P_MIN_LINES lines long, K at least a line, the
    block at most VEC_P_MAX_BYTES, and the rest as for :func:`vec_axis`: a plain GEMM,
    at least VEC_MIN_ROWS rows, rows x K at most VEC_MAX_ROWS_TIMES_K, and the other
    operand's block within VEC_MAX_SPAN bytes.

    >>> vec_p_axis(128, 128, 64, 1, (64, 1), (1, 64), (128, 1), 4)  # bhqd,bhkd->bhqk
    2
    >>> vec_p_axis(128, 128, 64, 1, (64, 1), (128, 1), (128, 1), 4)  # B along N: vec_axis'
    0
    """
    if br != 1 or itemsize not in (4, 8) or not VEC_BYTES:
        return 0
    lanes = 64 // itemsize

    def fits(length: int, rows: int, s_rows: int, s_k: int) -> bool:
        return (length >= VEC_P_MIN_LINES * lanes and k >= lanes and rows >= VEC_MIN_ROWS
                and rows * k <= VEC_MAX_ROWS_TIMES_K
                and k * packed_ld(length, itemsize) * itemsize <= VEC_P_MAX_BYTES
                and ((rows - 1) * abs(s_rows) + (k - 1) * abs(s_k) + 1) * itemsize
                <= VEC_MAX_SPAN)

    if c[0] == 1 and a[1] == 1 and a[0] != 1 and fits(m, n, b[1], b[0]):
        return 1
    if c[1] == 1 and b[0] == 1 and b[1] != 1 and fits(n, m, a[0], a[1]):
        return 2
    return 0


def packed_ld(length: int, itemsize: int) -> int:
    """The packed vector kernel's buffer row stride for a vector axis this long: whole
    lines.  (Rows a multiple of 4 KiB apart, which would share L1 sets, would need
    blocks of at least 16 x 4 KiB: over VEC_P_MAX_BYTES.)"""
    lanes = 64 // itemsize
    return -(-length // lanes) * lanes


def dot_tile(m: int, n: int, k: int, br: int, a: tuple[int, int], b: tuple[int, int]) -> bool:
    """Whether a GEMM tile runs as dot products (table.MODE_DOT): one output row or
    column, a plain GEMM, K at least DOT_MIN_K steps with unit stride in A (``a``: its
    M and K strides) and in B (``b``: its K and N strides).

    >>> dot_tile(4096, 1, 4096, 1, (4096, 1), (1, 0)), dot_tile(8, 8, 64, 1, (64, 1), (1, 8))
    (True, False)
    """
    return br == 1 and k >= DOT_MIN_K and (m == 1 or n == 1) and a[1] == 1 and b[0] == 1


def vec_efficiency(length: int, rows: int, k: int, itemsize: int) -> float:
    """The vector kernel's fraction of its rate on a tile ``length`` long along the
    vector axis, of ``rows`` rows and ``k`` K steps.  Full micro-tiles have VEC_ROWS
    rows, and a row costs about as many loads as a micro-tile's products, so short and
    left-over row blocks run at their share of the rows; a partial last line computes
    its whole line; and each micro-tile loads and stores its outputs once, about
    VEC_K_STEPS K steps' worth (a K of 1, a rank-1 update per tile: dca,bd->abc measured
    30 GFLOP/s against BLAS' 88).

    >>> round(vec_efficiency(4096, 24, 1000, 4), 2), round(vec_efficiency(84, 4, 1000, 4), 2)
    (0.99, 0.43)
    """
    lanes = max(VEC_BYTES, 16) // itemsize
    return (rows / (VEC_ROWS * -(-rows // VEC_ROWS)) * length / (lanes * -(-length // lanes))
            * k / (k + VEC_K_STEPS))


# The transposed vector kernel's extra work per micro-tile, in K steps (vec_t_efficiency):
# the transposes of its sums and the masked stores of short runs, on top of the output
# loads and stores the vector kernel also pays (VEC_K_STEPS).  Set so that the two
# kernels' predicted rates stand as they were measured on the same 9600 x 20 x 24
# tiles, both streaming their output on both cores: 189-200 GFLOP/s into the result
# layout the transposed kernel serves (dega/degb/degc,gf..->abcdef into C order) against
# 291-297 into the one the vector kernel serves, 0.66 (the model's 0.41 against 0.625).
# The earlier 8 rated it above the vector kernel on those tiles, and the planner chose
# the C-order layout for these contractions in order='K' (150-200 instead of 290).
VEC_T_K_STEPS = 20
# A micro-tile of fewer rows than this leaves the multiply-add units waiting on their
# own latency (one accumulator per row): measured on one core in L1, float32, K 24, 8
# rows at 0.8 of the rate of 12 to 24, and 0.6-0.65 on both cores in tiles 480 and 2048
# long with the output streaming.
VEC_T_FULL_ROWS = 12
# The transposed kernel's shortest vector axis, in lines: its per-call costs (set-up,
# transposes, the call) outweigh shorter tiles (measured on both cores, 20 rows x K 24:
# 48-49 GFLOP/s 16 and 20 long, 78 at 32, 105-139 at 64, 133-149 at 128 to 480; the
# 20 x 20 x 24 tiles of dfgb,geac->abcdef into C order ran 65 against BLAS' 118).
VEC_T_MIN_LINES = 4


def vec_t_efficiency(length: int, rows: int, k: int, itemsize: int) -> float:
    """The transposed vector kernel's fraction of the vector kernel's rate on a tile
    ``length`` long along its vector axis, of ``rows`` rows and ``k`` K steps: its
    micro-tiles are one line along the vector axis and up to 24 rows (computed in
    multiples of 4, fewer than VEC_T_FULL_ROWS waiting on the multiply-adds' latency),
    and each loads and stores its outputs once after the K loop (K / (K + VEC_K_STEPS),
    as for the vector kernel) and transposes them (K / (K + VEC_T_K_STEPS)).

    >>> round(vec_t_efficiency(9600, 20, 24, 4), 2), round(vec_t_efficiency(100, 8, 24, 4), 2)
    (0.41, 0.24)
    """
    lanes = 64 // itemsize
    if rows <= 0 or length <= 0:
        return 0.0
    # Whole micro-tiles of VEC_T_TILE_ROWS rows, then one of the rest rounded up to 4.
    full, rest = divmod(rows, VEC_T_TILE_ROWS)
    padded = -(-rest // 4) * 4
    computed = full * VEC_T_TILE_ROWS + padded
    latency = (full * VEC_T_TILE_ROWS * min(1.0, VEC_T_TILE_ROWS / VEC_T_FULL_ROWS)
               + rest * min(1.0, padded / VEC_T_FULL_ROWS))
    return (latency / computed * length / (lanes * -(-length // lanes))
            * k / (k + VEC_K_STEPS) * k / (k + VEC_T_K_STEPS))


_INT32_MAX = 2**31 - 1


def vec_line_bytes(k: int, length: int, itemsize: int) -> int:
    """The bytes of lines a vector-kernel tile reads from its vector operand: K rows of
    ``length`` elements, each a whole number of 64-byte lines (the kernel prefetches a
    next tile only up to microkernel.NEXT_TILE_PREFETCH_BYTES of them).

    >>> vec_line_bytes(96, 96, 4)
    36864
    """
    return k * -(-length * itemsize // 64) * 64


# A Copy tile whose rows along out's unit stride are shorter than this many lines
# cannot stream them on its own (copy_kernels._copy_transposed).
COPY_RUN_MIN_LINES = 3


# The next tile is prefetched when its vector operand spans at most this many bytes
# of lines (K x lines).  Measured on tiles streaming from memory, both cores: 36 KiB
# (dbea,ec's 96 x 96) 153 -> 203 GFLOP/s, 144 KiB 162 -> 179, 256 KiB 163 -> 112.
NEXT_TILE_PREFETCH_BYTES = 144 * 1024


# Loads whose address matches an in-flight store's in its low 12 bits wait for that
# store ("4K aliasing").  When V's K rows and C's rows fall on the same offsets within a
# page, every micro-tile's first loads (the next row block, the same strip of V) match
# the stores just issued: ea,ebcd->abcd with its operand and a numpy.empty out (both 16
# bytes into a page, rows 2370816 bytes apart) ran at 211-217 GFLOP/s on both cores
# against 245-258 into an out 64 bytes into a page.  Alternating two strips moves the
# loads 192 bytes away from the stores: 247-264 (one core, 107 -> 138).
PAGE_BYTES = 4096


# A program without parallel loops whose BLAS tile has at least this many flops runs the
# tile split across all threads (walker.run_split; the cost model's threshold).
BLAS_THREADED_TILE_FLOPS = 4_000_000


# A dot product at least this long is split over the threads: below, the parallel
# region's start costs more than half the product (on this machine a float32 dot runs
# at about 10 elements a nanosecond in cache, a region starts in a few microseconds).
DOT_SPLIT_MIN_K = 1 << 16


class BlasPlan(NamedTuple):
    """How one GEMM tile maps onto column-major ``?gemm``.

    ``swap``: BLAS computes C^T = B^T A^T because out's unit stride is along N.
    ``transa``/``transb``: ord('N'), ord('T'), or 0 when the operand must be packed.
    ``ldc`` 0: out's tile is not addressable, so BLAS writes a scratch tile that is
    then added to out.

    A named tuple, not a frozen dataclass: the search maps a few hundred tiles per plan,
    and a dataclass' construction was a fifth of that.
    """

    swap: bool
    transa: int
    lda: int
    transb: int
    ldb: int
    ldc: int

    @property
    def needs_scratch(self) -> bool:
        return self.transa == 0 or self.transb == 0 or self.ldc == 0


def _as_operand(rows: int, cols: int, s_rows: int, s_cols: int) -> tuple[int, int]:
    """(trans, ld) for a rows x cols matrix with these strides, or (0, 0) if BLAS
    cannot address it.  Strides along extent-1 axes are free and normalized."""
    r = 1 if rows == 1 else s_rows
    c = max(1, rows) if cols == 1 else s_cols
    if r == 1 and max(1, rows) <= c <= _INT32_MAX:
        return ord("N"), c
    r = max(1, cols) if rows == 1 else s_rows
    c = 1 if cols == 1 else s_cols
    if c == 1 and max(1, cols) <= r <= _INT32_MAX:
        return ord("T"), r
    return 0, 0


def _as_output(rows: int, cols: int, s_rows: int, s_cols: int) -> int:
    r = 1 if rows == 1 else s_rows
    c = max(1, rows) if cols == 1 else s_cols
    return c if r == 1 and max(1, rows) <= c <= _INT32_MAX else 0


# Bounded: one plan looks up at most a few hundred tiles, and a memo of 65536 entries
# grew a process by 32 MB over 9,000 distinct problems (tests/test_memory.py).
@lru_cache(maxsize=4096)
def blas_plan(
    m: int,
    n: int,
    k: int,
    a: tuple[int, int],
    b: tuple[int, int],
    c: tuple[int, int],
) -> BlasPlan | None:
    """Map C(m x n) += A(m x k) B(k x n), given each operand's (row, col) strides.

    Returns None when the extents do not fit BLAS' 32-bit integers.
    """
    if max(m, n, k) > _INT32_MAX:
        return None
    best: tuple = ()
    for swap in (False, True):
        if swap:
            mm, nn = n, m
            sa, sb, sc = (b[1], b[0]), (a[1], a[0]), (c[1], c[0])
        else:
            mm, nn = m, n
            sa, sb, sc = a, b, c
        ldc = _as_output(mm, nn, *sc)
        ta, lda = _as_operand(mm, k, *sa)
        tb, ldb = _as_operand(k, nn, *sb)
        # Prefer in-place output, then fewer packed operands; unswapped on a tie.
        score = (ldc == 0, (ta == 0) + (tb == 0))
        if not best or score < best[0]:
            best = (score, swap, ta, lda, tb, ldb, ldc)
        if score == (False, 0):
            break  # nothing beats it
    return BlasPlan(*best[1:])


# --- Reductions (executor/reduce.py, planner/reduce.py) --------------------------------
KIND_INNER = 0  # the unit stride along a summed axis: each output a horizontal sum
KIND_ROWS = 1  # the unit stride along a kept axis: whole rows added into the output
SPLIT_NONE = 0
SPLIT_OUTPUTS = 1  # the threads take shares of the outputs
SPLIT_SUMMED = 2  # ... of the summed axis, into private partial sums
# Weighted rows shorter than this (one summed axis, unit stride along them) run on BLAS'
# ?gemv: LLVM's vectorized loop needs more iterations before it runs at all, and left
# ki,k->i's rows of 24 float32 one element at a time (11 ns a row against 1-2 on ?gemv).
GEMV_MAX_NB = 64
# Unweighted rows shorter than this, back to back in memory (ij->j with j = 3 or 24),
# are summed as windows of whole rows, FLAT_WINDOW elements or so, each window one long
# row of the rows kernel: one element at a time they took 11 ns a row of 24, TEIR's
# tiles 60.
FLAT_MAX_NB = 64
FLAT_WINDOW = 1024
ROW_BLOCK_BYTES = 8192  # the accumulator's share of the vector axis (in L1 with its pair)


def row_block(itemsize: int) -> int:
    """Elements of the vector axis one ``KIND_ROWS`` unit accumulates."""
    return ROW_BLOCK_BYTES // itemsize


def uses_gemv(kind: int, vec: np.ndarray, summed: np.ndarray, weighted: bool) -> bool:
    """Whether a reduction's rows run on BLAS' ?gemv (see GEMV_MAX_NB): weighted rows,
    short, of unit stride, one summed axis whose rows do not overlap (BLAS' lda >= m)
    and whose weights step forward."""
    return bool(kind == KIND_ROWS and weighted and vec[1] == 1 and vec[0] < GEMV_MAX_NB
                and summed.shape[0] == 1 and summed[0, 1] >= vec[0] and summed[0, 2] > 0)


def uses_flat_rows(kind: int, vec: np.ndarray, summed: np.ndarray, weighted: bool) -> bool:
    """Whether a reduction's rows are summed as flat windows (see FLAT_MAX_NB)."""
    return bool(kind == KIND_ROWS and not weighted and vec[1] == 1 and vec[0] < FLAT_MAX_NB
                and summed.shape[0] == 1 and summed[0, 1] == vec[0])
