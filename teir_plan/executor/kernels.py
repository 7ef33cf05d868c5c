"""The jitted executor: one loop nest that runs any lowered TEIR program.

Nothing here knows about TEIR records.  :mod:`teir_plan.executor.lower` turns a
program into integer tables, and these kernels only walk them:

* ``loops``: one row per loop axis, ``(size, stride_in0, stride_in1, stride_out, is_k)``;
  the first ``npar`` rows are the parallel axes, the rest the sequential axes in
  schedule order.
* ``tile``: the primitive's parameters, indexed by the ``T_*`` constants below.

The same compiled runners serve every program of a dtype, whatever its number of axes,
sizes or strides, so a new program never triggers a compilation: ``run_chunk`` for any
program, and for the two routes through the block copy ``copy_runs_chunk`` and
``blocked_chunk``.  Each runs a range of a program's parallel iterations on the calling
thread (all of them for one worker: no parallel region, see
:mod:`teir_plan.executor.threads` for when none may start), and each has a parallel
runner that calls it once per worker: ``run_parallel``, ``run_copy_runs``,
``run_blocked``.
Every address is ``origin + sum(index * stride)`` into a flat 1-D view of each array;
the bounds of those sums are proven by :mod:`teir_plan.executor.checks` before anything
runs.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import carray, njit, prange, types
from numba.extending import intrinsic

from teir_plan.executor.blas import call_gemm
from teir_plan.executor.entries import (
    call_blocked,
    call_chunk,
    call_entry,
    call_tile,
    compiled_address,
)
from teir_plan.executor.microkernel import (
    array_data,
    element_address,
    line_vector,
    splat,
    store_fence,
    store_nontemporal,
    to_next_line,
    transpose_lines,
    vector_ops,
)
from teir_plan.executor.microkernel import as_intp as _as_intp
from teir_plan.executor.microkernel import store_line_nt as _store_line_nt

# Primitive kinds.
KIND_COPY = 0
KIND_RELU = 1
KIND_GEMM = 2
KIND_BRGEMM = 3

# How a GEMM tile runs.
MODE_LOOPS = 0  # strided loops in the kernel (small or BLAS-illegal tiles)
MODE_BLAS = 1  # BLAS ?gemm on the operands in place, packing those it cannot address
# The vector kernel (microkernel.py); T_SWAP: its vector axis is N, not M; T_VEC_T: out
# has its unit stride along the other axis, the rows (transposed_kernel.py).
MODE_VEC = 2
# A scalar tile (m = n = k = 1) with one loop of the program folded in (lower._fold_row):
# T_M elements along strides T_A_M (in0), T_B_N (in1), T_C_M (out; 0: the loop is a K
# loop, summed into one element).  With T_ROW_PAR the folded loop is the innermost
# parallel one, still in the loop table, and T_M is 1: run_chunk walks its iterations
# in runs (any other walker runs the tile one element at a time, the same products).
MODE_ROW = 3
# A GEMM tile with one output column (n 1, and br 1): T_M dot products along K.
MODE_DOT = 4

# Indices into the ``tile`` table.
T_KIND = 0
T_FIRST_ZERO = 1
T_LAST_RELU = 2
T_M = 3
T_N = 4
T_K = 5
T_BR = 6
T_A_M = 7  # in0 stride along M (unary: input stride along the tile's first axis)
T_A_K = 8  # in0 stride along K (unary: input stride along the tile's second axis)
T_B_K = 9
T_B_N = 10
T_C_M = 11  # out stride along M (unary: output stride along the tile's first axis)
T_C_N = 12  # out stride along N (unary: output stride along the tile's second axis)
T_A_BR = 13
T_B_BR = 14
T_MODE = 15
T_SWAP = 16  # BLAS computes C^T = B^T A^T (out has its unit stride along N)
T_TRANSA = 17  # ord('N') / ord('T') for BLAS' first operand, 0 = pack it
T_TRANSB = 18
T_LDA = 19
T_LDB = 20
T_LDC = 21  # 0 = C is not BLAS-addressable: compute into scratch, then add
T_GEMM_FN = 22
T_BLAS_INT = 27  # bytes per BLAS integer: 4 (LP64) or 8 (ILP64)
T_ORIGIN0 = 23
T_ORIGIN1 = 24
T_ORIGIN2 = 25
T_SCRATCH = 26  # scratch elements each worker needs
T_STREAM = 28  # out streams to memory (lower.streams_out): non-temporal stores
T_AHEAD = 29  # vector-kernel tiles prefetch the next tile's lines (lower.prefetch_ahead)
T_ROW_PAR = 30  # MODE_ROW: the folded loop is the innermost parallel loop
# MODE_VEC: out's unit stride is along the rows; the address of the transposed kernel
# compiled for the program's dtype (transposed_kernel.py), called through it; 0: no.
T_VEC_T = 31
# MODE_VEC: the vector operand has its unit stride along K, not along the vector axis;
# each tile first transposes its K x length block into the worker's buffer (rows T_VEC_P
# elements apart) and runs the vector kernel on that; 0: no.
T_VEC_P = 32
# MODE_VEC, not transposed: the address of the vector kernel compiled for the program's
# dtype (microkernel.entry_address), called through it.
T_VEC_FN = 33
# Copy/ReLU, BLAS and packed vector tiles: the address of the tile kind's entry point
# compiled for the program's dtype (tile_entry_address), called through it (_run_tile).
T_TILE_FN = 34
TILE_LEN = 35

_ORD_N = 78
_ORD_T = 84

# A copy whose reads along the written axis are gathered (a transpose) runs in
# blocks of this many written elements: the block's input lines (one per element)
# stay in L1 while the outer index sweeps them, so each line is read from memory
# once and the writes still stream (measured on 3008 x 5008 float32: 2.8 GB/s
# unblocked, 16 GB/s in blocks of 256; 8x8 micro-block transposes gave 3.3).
_GATHER_BLOCK = 256

# A transpose tile by tile in registers (_copy_transposed) reads a whole line of each of
# its rows per tile, so no line needs to stay in cache: its blocks only group rows that
# are read side by side, each row a stream along the other index.  Sixteen rows (one
# tile) are streams the prefetchers follow; 256 were too many, and rows a multiple of
# 4 KiB apart evicted each other's prefetched lines (AMD EPYC, GB/s read + written,
# 16 against 256 rows: ijk->kji 256^3 18-20 against 12-13, ij->ji 3008 x 5008 37-41
# against 24-29, 4096^2 25-30 against 23-26, 240^3 19 against 16-20).
_TRANSPOSE_BLOCK = 16

# A blocked write-back's rows of non-temporal stores at least this long may be written
# in any order (see _copy_block).
_STREAM_ROW_BYTES = 256

# Each worker of a blocked program assembles out's runs in a buffer of this size before
# writing them (see _copy_block_streamed): the runs of a block, or a line's worth of
# rows of them, fit beside the stage in L2.
_RUN_BUFFER_BYTES = 256 * 1024
_RUN_L1_BYTES = 32 * 1024


@njit(cache=True, nogil=True)
def _relu(v):  # type: ignore[no-untyped-def]
    # numpy.maximum(v, 0): NaN propagates, -0.0 and 0.0 give +0.0.
    if v > 0 or v != v:
        return v
    return 0.0


@njit(cache=True, nogil=True, inline="always")
def _swap_for_writes(m, n, y_m, y_n):  # type: ignore[no-untyped-def]
    """Whether an m x n tile's loops should swap so that i (innermost) runs along the
    output's smaller stride and writes stream; a one-axis tile runs along its axis,
    whatever the unused axis's stride says."""
    return n > 1 and (m == 1 or abs(y_n) < abs(y_m))


def _load_transposed(context, builder, args, tys):  # type: ignore[no-untyped-def]
    """The L lines x[xo + r*x_ld : + L] (r < L, L elements per line) transposed in
    registers: L vector loads, then log2 L rounds of two-input shuffles, each swapping
    the off-diagonal blocks of every 2h x 2h block.  Returns the L transposed rows."""
    xo_ = _as_intp(context, builder, args[1], tys[1])
    xld = _as_intp(context, builder, args[2], tys[2])
    lanes = line_vector(context, tys[0].dtype).lanes
    return _lines_transposed(context, builder, args, tys, [
        builder.add(xo_, builder.mul(xld, ir.Constant(xld.type, r))) for r in range(lanes)])


def _lines_transposed(context, builder, args, tys, offsets):  # type: ignore[no-untyped-def]
    """The L lines of x (args[0]) at element ``offsets`` (LLVM intp values), transposed in
    registers (see _load_transposed)."""
    line = line_vector(context, tys[0].dtype)
    xa = array_data(context, builder, tys[0], args[0])
    rows = [builder.load(builder.bitcast(builder.gep(xa, [off]), line.vty.as_pointer()),
                         align=line.size) for off in offsets]
    return transpose_lines(builder, rows)


def _row_pointer(context, builder, args, tys, c):  # type: ignore[no-untyped-def]
    """The vector pointer to b[bo + c*b_ld] (args 3-5 of the transpose intrinsics)."""
    bty = tys[3]
    vptr = line_vector(context, bty.dtype).vty.as_pointer()
    ba = array_data(context, builder, bty, args[3])
    bo_ = _as_intp(context, builder, args[4], tys[4])
    bld = _as_intp(context, builder, args[5], tys[5])
    off = builder.add(bo_, builder.mul(bld, ir.Constant(bld.type, c)))
    return builder.bitcast(builder.gep(ba, [off]), vptr)


@intrinsic
def _transpose_line_tile(typingctx, x, xo, x_ld, b, bo, b_ld, nt):  # type: ignore[no-untyped-def]
    """b[bo + c*b_ld + r] = x[xo + r*x_ld + c] for r, c < L, L = elements per line:
    L vector loads, an L x L transpose in registers, L vector stores.  A scalar
    transpose moves one element per load and store; this moves L.  With ``nt`` the
    stores are non-temporal: the caller guarantees every b line it writes starts a
    64-byte line."""
    sig = types.void(x, xo, x_ld, b, bo, b_ld, nt)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        tys = signature.args
        size = line_vector(context, tys[0].dtype).size
        rows = _load_transposed(context, builder, args, tys)

        def store_rows(nontemporal: bool) -> None:
            for c, row in enumerate(rows):
                ptr = _row_pointer(context, builder, args, tys, c)
                if nontemporal:
                    store_nontemporal(builder, row, ptr, 64)
                else:
                    builder.store(row, ptr, align=size)

        nt_ = context.cast(builder, args[6], tys[6], types.boolean)
        with builder.if_else(nt_) as (streamed, cached):
            with streamed:
                store_rows(True)
            with cached:
                store_rows(False)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def _transpose_line_tile_joined(typingctx, x, xo, x_ld, b, bo, b_ld, xo2, t):  # type: ignore[no-untyped-def]
    """_transpose_line_tile with non-temporal stores, its first ``t`` lines read from
    x[xo + r*x_ld] and the other L - t from x[xo2 + (r - t)*x_ld]: row c of the result
    (b[bo + c*b_ld], a whole 64-byte line) joins the end of one tile's row to the start
    of the next tile's (see _copy_transposed).  Only those L lines are read."""
    sig = types.void(x, xo, x_ld, b, bo, b_ld, xo2, t)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        tys = signature.args
        xo_, xld, xo2_, t_ = (_as_intp(context, builder, args[i], tys[i]) for i in (1, 2, 6, 7))
        offsets = []
        for r in range(line_vector(context, tys[0].dtype).lanes):
            rc = ir.Constant(xld.type, r)
            own = builder.add(xo_, builder.mul(xld, rc))
            nxt = builder.add(xo2_, builder.mul(xld, builder.sub(rc, t_)))
            offsets.append(builder.select(builder.icmp_signed("<", rc, t_), own, nxt))
        for c, row in enumerate(_lines_transposed(context, builder, args, tys, offsets)):
            store_nontemporal(builder, row, _row_pointer(context, builder, args, tys, c), 64)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def _transpose_line_tile_part(typingctx, x, xo, x_ld, b, bo, b_ld, lo, hi):  # type: ignore[no-untyped-def]
    """b[bo + c*b_ld + r] = x[xo + r*x_ld + c] for lo <= r < hi and c < L: the transpose
    of :func:`_transpose_line_tile` with ordinary masked stores of rows lo..hi-1 only
    (b's other elements are neither read nor written; the loads read all L lines)."""
    sig = types.void(x, xo, x_ld, b, bo, b_ld, lo, hi)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        tys = signature.args
        lanes, _, vty, size = line_vector(context, tys[0].dtype)
        rows = _load_transposed(context, builder, args, tys)
        i32 = ir.IntType(32)
        masked_store = vector_ops(builder, vty, tys[0].dtype.bitwidth).masked_store
        ity = ir.VectorType(i32, lanes)

        def lanes_of(i):  # type: ignore[no-untyped-def]
            return splat(builder, builder.trunc(_as_intp(context, builder, args[i], tys[i]), i32),
                         ity)

        lane_ids = ir.Constant(ity, list(range(lanes)))
        mask = builder.and_(builder.icmp_signed(">=", lane_ids, lanes_of(6)),
                            builder.icmp_signed("<", lane_ids, lanes_of(7)))
        for c, row in enumerate(rows):
            ptr = _row_pointer(context, builder, args, tys, c)
            builder.call(masked_store, [row, ptr, ir.Constant(i32, size), mask])
        return context.get_dummy_value()

    return sig, codegen


@njit(cache=True, nogil=True)
def _copy_plain(x, xo, y, yo, m, n, x_m, x_n, y_m, y_n, relu, stream=False):  # type: ignore[no-untyped-def]
    """y[yo + i*y_m + j*y_n] = f(x[xo + i*x_m + j*x_n]), i innermost.  ``stream``: y's
    whole lines along a unit-stride i are written with non-temporal stores."""
    lanes = 64 // y.itemsize
    if stream and y_m == 1 and x_m == 1 and not relu and m >= 2 * lanes:
        for j in range(n):
            xb = xo + j * x_n
            yb = yo + j * y_n
            addr = element_address(y, yb)
            head = m
            if addr % y.itemsize == 0:
                head = min(m, to_next_line(addr, y.itemsize))
            for i in range(head):
                y[np.uint64(yb + i)] = x[np.uint64(xb + i)]
            i = head
            while i + lanes <= m:
                _store_line_nt(y, yb + i, x, xb + i)
                i += lanes
            while i < m:
                y[np.uint64(yb + i)] = x[np.uint64(xb + i)]
                i += 1
        return
    if y_m == 1 and not relu:
        # Unit-stride writes (the usual case) with the stride known to LLVM.  Offsets
        # are unsigned here: checks.py proved every one of them inside its array, and
        # a signed index would cost a negative-index test on every access (~15%).
        if x_m == 1:
            for j in range(n):
                xb = xo + j * x_n
                yb = yo + j * y_n
                for i in range(m):
                    y[np.uint64(yb + i)] = x[np.uint64(xb + i)]
        else:
            for j in range(n):
                xb = xo + j * x_n
                yb = yo + j * y_n
                for i in range(m):
                    y[np.uint64(yb + i)] = x[np.uint64(xb + i * x_m)]
        return
    for j in range(n):
        xb = xo + j * x_n
        yb = yo + j * y_n
        if relu:
            for i in range(m):
                y[yb + i * y_m] = _relu(x[xb + i * x_m])
        else:
            for i in range(m):
                y[yb + i * y_m] = x[xb + i * x_m]


@njit(cache=True, nogil=True)
def _copy_transposed_run(x, xo, y, yo, m, n, x_m, buf, h):  # type: ignore[no-untyped-def]
    """_copy_transposed's streamed tile when y's rows follow one another (y_n == m) and
    start ``h`` > 0 elements before a line boundary: the tile's output is one run of
    m x n elements, transposed into ``buf`` at the same offset within a line as y[yo],
    then written to y as whole lines with non-temporal stores; only the run's first and
    last partial lines take ordinary stores.  Row by row, each row's head and tail would
    be partial lines written element by element and read for ownership (a permute into
    numpy.empty's out, 16 bytes into a line, rows of 48 float32: 1.3-1.4x the time of a
    line-aligned out)."""
    lanes = 64 // y.itemsize
    isz = y.itemsize
    total = m * n
    b0 = ((lanes - h) * isz - element_address(buf, 0) % 64) // isz % lanes
    for jt in range((n + lanes - 1) // lanes):
        j0 = min(jt * lanes, n - lanes)
        for it in range((m + lanes - 1) // lanes):
            i0 = min(it * lanes, m - lanes)
            _transpose_line_tile(x, xo + i0 * x_m + j0, x_m, buf, b0 + i0 + j0 * m, m, False)
    e = h + (total - h) // lanes * lanes
    for i in range(h):
        y[np.uint64(yo + i)] = buf[b0 + i]
    for i in range(h, e, lanes):
        _store_line_nt(y, yo + i, buf, b0 + i)
    for i in range(e, total):
        y[np.uint64(yo + i)] = buf[b0 + i]


@njit(cache=True, nogil=True)
def _copy_transposed(x, xo, y, yo, m, n, x_m, y_n, stream=False, buf=None, prev=-1,  # type: ignore[no-untyped-def]
                     nxt_x=-1, nxt_y=-1):
    """y[yo + i + j*y_n] = x[xo + i*x_m + j] for i < m, j < n (both at least a line's
    worth of elements): a transpose between x's unit stride and y's, a line by a line
    in registers (:func:`_transpose_line_tile`).  In blocks of _TRANSPOSE_BLOCK values of
    i, each swept along j: the block's rows are read as a few streams; an extent that is
    not a multiple of a line takes an overlapping last tile (it writes the same values
    again).

    ``stream``: when every row of y starts at the same offset within a line (and that
    offset is 0, or the rows are contiguous or a multiple of 4 KiB apart), the tiles
    along i start at the first line boundary and store whole lines non-temporally; the
    elements before it and after the last whole line are written with ordinary stores.
    No line is then written both ways: an ordinary store to part of a line just sent to
    memory reads it back for ownership while it is still in the write-combining buffers
    (20 x 20 float32 tiles with an overlapping tile: 6x slower than no streaming).
    ``buf`` (at least m x n + L elements, or None): see _copy_transposed_run.

    ``prev``, ``nxt_x``, ``nxt_y``: y's offset of the tile that ran just before this one
    on this worker, and x's and y's of the one that runs next (-1: none).  When the next
    tile's rows continue this one's (nxt_y = yo + m: an outer loop steps out's rows on
    by m), each row's last partial line is completed with the next tile's first elements
    (read from x at nxt_x) and written whole, non-temporally
    (:func:`_transpose_line_tile_joined`); a tile that the previous one so continued
    into (prev + m = yo) leaves its rows' first partial lines alone.  Otherwise every
    such line would be read for ownership, once by each tile (bdca->abcd into
    numpy.empty's out, rows of 96 float32 4 KiB apart: 8.5 ms, against 3.9-4.4 joined
    and 3.9-5.1 into a line-aligned out)."""
    lanes = 64 // y.itemsize
    nj = (n + lanes - 1) // lanes
    addr = element_address(y, yo)
    if (stream and m >= 3 * lanes and (y_n * y.itemsize) % 64 == 0
            and addr % y.itemsize == 0):
        h = to_next_line(addr, y.itemsize)
        if buf is not None and h > 0 and y_n == m and buf.size >= m * n + lanes:
            _copy_transposed_run(x, xo, y, yo, m, n, x_m, buf, h)
            return
        e = h + (m - h) // lanes * lanes
        # Rows starting inside a line stream when they are contiguous (y_n == m: a
        # row's tail and the next row's head share a line written here), or when they
        # are a multiple of 4 KiB apart.  Other rows far apart leave two partial lines
        # per row for other tiles to finish, read for ownership twice (deca,be's staged
        # result into an out 16 bytes into a line: 10-13 GB/s streamed against 15 not);
        # rows 4 KiB apart share one L1 set, so that not streaming their whole lines
        # costs more than that (the same copy, timed against each other in one session:
        # 11.1-12.6 ms not streamed, 9.3-10.0 streamed with the partial lines written by
        # masked stores after the whole lines; 4.3 into a line-aligned out).
        aliased = h > 0 and y_n != m and (y_n * y.itemsize) % 4096 == 0
        # Rows continued by the next tile's (see above), and rows that the previous
        # tile's continued into: their shared lines are written whole by the earlier tile.
        t = m - e
        joined = t > 0 and y_n != m and nxt_y == yo + m and nxt_x >= 0
        joined_prev = h > 0 and y_n != m and prev >= 0 and prev + m == yo
        if e > h and (h == 0 or y_n == m or aliased or joined or joined_prev):
            for ib in range(h, e, _TRANSPOSE_BLOCK):
                ie = min(e, ib + _TRANSPOSE_BLOCK)
                for jt in range(nj):
                    j0 = min(jt * lanes, n - lanes)
                    for i0 in range(ib, ie, lanes):
                        _transpose_line_tile(x, xo + i0 * x_m + j0, x_m, y, yo + i0 + j0 * y_n,
                                             y_n, True)
            if joined:
                # Each row's last line: its own t elements, then the next tile's first
                # L - t, transposed in registers and written whole.
                for jt in range(nj):
                    j0 = min(jt * lanes, n - lanes)
                    _transpose_line_tile_joined(x, xo + e * x_m + j0, x_m, y, yo + e + j0 * y_n,
                                                y_n, nxt_x + j0, t)
            if aliased:
                # The partial lines at the rows' ends: ordinary masked stores of
                # transposed tiles, after the whole lines (stored element by element
                # every store misses L1: 11.6 ms on deca,be's copy; interleaved with the
                # whole lines they compete with them for the line fill buffers: 10.1).
                for jt in range(nj):
                    j0 = min(jt * lanes, n - lanes)
                    if not joined_prev:
                        _transpose_line_tile_part(x, xo + j0, x_m, y, yo + j0 * y_n, y_n, 0, h)
                    if e < m and not joined:
                        i0 = m - lanes
                        _transpose_line_tile_part(x, xo + i0 * x_m + j0, x_m, y,
                                                  yo + i0 + j0 * y_n, y_n, e - i0, lanes)
                return
            for i in range(h + m - e):  # the head, then the tail
                if (i < h and joined_prev) or (i >= h and joined):
                    continue
                ii = i if i < h else e + i - h
                xb = xo + ii * x_m
                for j in range(n):
                    y[np.uint64(yo + ii + j * y_n)] = x[np.uint64(xb + j)]
            return
    ib = 0
    while ib < m:
        ie = ib + _TRANSPOSE_BLOCK
        if ie + lanes > m:
            # Less than a line's worth is left: it joins this block, so that the
            # overlapping last tile rewrites lines just written, still in cache.
            ie = m
        for jt in range(nj):
            j0 = min(jt * lanes, n - lanes)
            i = ib
            while i < ie:
                i0 = min(i, m - lanes)
                _transpose_line_tile(x, xo + i0 * x_m + j0, x_m, y, yo + i0 + j0 * y_n, y_n,
                                     False)
                i += lanes
        ib = ie


@njit(cache=True, nogil=True)
def _copy_tile(x, xo, y, yo, m, n, x_m, x_n, y_m, y_n, relu, stream=False, buf=None, prev=-1,  # type: ignore[no-untyped-def]
               nxt_x=-1, nxt_y=-1):
    """y[yo + i*y_m + j*y_n] = f(x[xo + i*x_m + j*x_n]) over an m x n tile.  ``stream``
    (the program's output streams to memory, lower.streams_out): whole lines of y are
    written with non-temporal stores where the tile writes them along y's unit stride.
    ``buf``: the worker's scratch, for _copy_transposed_run (None: not used); ``prev``,
    ``nxt_x``, ``nxt_y``: see _copy_transposed."""
    if _swap_for_writes(m, n, y_m, y_n):
        m, n = n, m
        x_m, x_n = x_n, x_m
        y_m, y_n = y_n, y_m
    lanes = 64 // y.itemsize
    if not relu and y_m == 1 and x_n == 1 and m >= lanes and n >= lanes:
        _copy_transposed(x, xo, y, yo, m, n, x_m, y_n, stream, buf, prev, nxt_x, nxt_y)
        if stream:
            store_fence()
        return
    if abs(x_m) * y.itemsize < 64 or m <= _GATHER_BLOCK:
        _copy_plain(x, xo, y, yo, m, n, x_m, x_n, y_m, y_n, relu, stream)
        if stream:
            store_fence()
        return
    # Reads along i each touch their own cache line: sweep j over blocks of i.
    for ib in range(0, m, _GATHER_BLOCK):
        mb = min(_GATHER_BLOCK, m - ib)
        _copy_plain(x, xo + ib * x_m, y, yo + ib * y_m, mb, n, x_m, x_n, y_m, y_n, relu)


@njit(cache=True, nogil=True)
def _zero_tile(y, yo, m, n, y_m, y_n):  # type: ignore[no-untyped-def]
    if _swap_for_writes(m, n, y_m, y_n):
        m, n = n, m
        y_m, y_n = y_n, y_m
    for j in range(n):
        for i in range(m):
            y[yo + j * y_n + i * y_m] = 0


@njit(cache=True, nogil=True)
def _relu_tile(y, yo, m, n, y_m, y_n):  # type: ignore[no-untyped-def]
    if _swap_for_writes(m, n, y_m, y_n):
        m, n = n, m
        y_m, y_n = y_n, y_m
    for j in range(n):
        for i in range(m):
            p = yo + j * y_n + i * y_m
            y[p] = _relu(y[p])


@njit(cache=True, nogil=True)
def _gemm_loops(x0, ao, x1, bo, y, co, tile, zero_first):  # type: ignore[no-untyped-def]
    """C (+)= sum_br A_br B_br with plain strided loops, accumulating in float64."""
    m, n, k, br = tile[T_M], tile[T_N], tile[T_K], tile[T_BR]
    a_m, a_k, b_k, b_n = tile[T_A_M], tile[T_A_K], tile[T_B_K], tile[T_B_N]
    c_m, c_n, a_br, b_br = tile[T_C_M], tile[T_C_N], tile[T_A_BR], tile[T_B_BR]
    for j in range(n):
        for i in range(m):
            acc = 0.0
            for r in range(br):
                pa = ao + r * a_br + i * a_m
                pb = bo + r * b_br + j * b_n
                for p in range(k):
                    acc += float(x0[pa + p * a_k]) * float(x1[pb + p * b_k])
            pc = co + i * c_m + j * c_n
            if zero_first:
                y[pc] = acc
            else:
                y[pc] = y[pc] + acc


# Row and dot tiles: reductions may be reassociated (LLVM then vectorizes them, with
# several partial sums, as BLAS' dot does) and a multiply-add fused; no other fast-math
# assumption (NaN and infinity propagate as in numpy).
_SUM_MATH = {"reassoc", "contract"}


@njit(cache=True, nogil=True, fastmath=_SUM_MATH)
def _dot(x0, o0, s0, x1, o1, s1, n, zero):  # type: ignore[no-untyped-def]
    """sum_{p < n} x0[o0 + p*s0] * x1[o1 + p*s1], from ``zero`` (of the arrays' dtype);
    unit strides get a loop of their own (vectorized)."""
    acc = zero
    if s0 == 1 and s1 == 1:
        # Slices indexed from 0: LLVM sees the indices are not negative (no wraparound
        # test per element) and loads whole vectors instead of gathering.
        a = x0[o0:o0 + n]
        b = x1[o1:o1 + n]
        for p in range(n):
            acc += a[p] * b[p]
    else:
        for p in range(n):
            acc += x0[o0 + p * s0] * x1[o1 + p * s1]
    return acc


@njit(cache=True, nogil=True)
def _mul_row(x0, o0, s0, x1, o1, s1, y, o2, s2, n, accumulate):  # type: ignore[no-untyped-def]
    """y[o2 + i*s2] (=, or += with ``accumulate``) x0[o0 + i*s0] * x1[o1 + i*s1] for
    i < n; unit strides get loops of their own (vectorized)."""
    if s0 == 1 and s1 == 1 and s2 == 1:  # slices: see _dot
        a = x0[o0:o0 + n]
        b = x1[o1:o1 + n]
        c = y[o2:o2 + n]
        if accumulate:
            for i in range(n):
                c[i] += a[i] * b[i]
        else:
            for i in range(n):
                c[i] = a[i] * b[i]
    elif accumulate:
        for i in range(n):
            y[o2 + i * s2] += x0[o0 + i * s0] * x1[o1 + i * s1]
    else:
        for i in range(n):
            y[o2 + i * s2] = x0[o0 + i * s0] * x1[o1 + i * s1]


@njit(cache=True, nogil=True, inline="always")
def _row_tile(x0, o0, x1, o1, y, o2, tile, n, zero_first, relu, zero):  # type: ignore[no-untyped-def]
    """A MODE_ROW tile of ``n`` elements (see MODE_ROW), then max(., 0) with ``relu``."""
    s2 = tile[T_C_M]
    if s2 == 0:  # a K loop: one output element
        acc = _dot(x0, o0, tile[T_A_M], x1, o1, tile[T_B_N], n, zero)
        v = acc if zero_first else y[o2] + acc
        y[o2] = _relu(v) if relu else v
    else:
        _mul_row(x0, o0, tile[T_A_M], x1, o1, tile[T_B_N], y, o2, s2, n, not zero_first)
        if relu:
            for i in range(n):
                y[o2 + i * s2] = _relu(y[o2 + i * s2])


@njit(cache=True, nogil=True)
def _dot_tile(x0, ao, x1, bo, y, co, tile, zero_first, zero):  # type: ignore[no-untyped-def]
    """A MODE_DOT tile: C[i] (+)= sum_p A[i, p] B[p] for i < m (with T_SWAP the roles of
    in0 and in1 exchanged: C[j] (+)= sum_p A[p] B[p, j]).  Two loops rather than one
    over exchanged names: in0 and in1 may have different numba types (a read-only
    view), which one variable could not hold."""
    if tile[T_SWAP]:
        m, s_row, s_y, s0, s1 = tile[T_N], tile[T_B_N], tile[T_C_N], tile[T_B_K], tile[T_A_K]
        for j in range(m):
            acc = _dot(x1, bo + j * s_row, s0, x0, ao, s1, tile[T_K], zero)
            p = co + j * s_y
            y[p] = acc if zero_first else y[p] + acc
    else:
        m, s_row, s_y, s0, s1 = tile[T_M], tile[T_A_M], tile[T_C_M], tile[T_A_K], tile[T_B_K]
        for i in range(m):
            acc = _dot(x0, ao + i * s_row, s0, x1, bo, s1, tile[T_K], zero)
            p = co + i * s_y
            y[p] = acc if zero_first else y[p] + acc


@njit(cache=True, nogil=True)
def _pack(src, so, rows, cols, s_r, s_c, dst, do):  # type: ignore[no-untyped-def]
    """Copy a strided rows x cols matrix into column-major ``dst[do:]``."""
    for c in range(cols):
        sb = so + c * s_c
        db = do + c * rows
        for r in range(rows):
            dst[db + r] = src[sb + r * s_r]


@njit(cache=True, nogil=True)
def _set_int(i64, i32, width, q, v):  # type: ignore[no-untyped-def]
    """Store BLAS integer argument ``q`` as ``width`` bytes (i32 views i64's memory)."""
    if width == 8:
        i64[q] = v
    else:
        i32[q] = v


@njit(cache=True, nogil=True, inline="always")  # compiled once, in its entry
def _gemm_blas(x0, ao, x1, bo, y, co, tile, zero_first, scratch, iparams, consts):  # type: ignore[no-untyped-def]
    """C (+)= sum_br A_br B_br through BLAS, packing the operands BLAS cannot address."""
    m, n, k, br = tile[T_M], tile[T_N], tile[T_K], tile[T_BR]
    swap = tile[T_SWAP] != 0
    # BLAS' view: C' (mm x nn) = A' (mm x k) B' (k x nn); with swap, A' = B^T, B' = A^T.
    if swap:
        mm, nn = n, m
        xa, xb = x1, x0
        pa0, pb0 = bo, ao
        sa_r, sa_c, sb_r, sb_c = tile[T_B_N], tile[T_B_K], tile[T_A_K], tile[T_A_M]
        sa_br, sb_br = tile[T_B_BR], tile[T_A_BR]
        sc_r, sc_c = tile[T_C_N], tile[T_C_M]
    else:
        mm, nn = m, n
        xa, xb = x0, x1
        pa0, pb0 = ao, bo
        sa_r, sa_c, sb_r, sb_c = tile[T_A_M], tile[T_A_K], tile[T_B_K], tile[T_B_N]
        sa_br, sb_br = tile[T_A_BR], tile[T_B_BR]
        sc_r, sc_c = tile[T_C_M], tile[T_C_N]
    transa, transb = tile[T_TRANSA], tile[T_TRANSB]
    lda, ldb, ldc = tile[T_LDA], tile[T_LDB], tile[T_LDC]
    # Scratch layout: [packed A' | packed B' | C' temporary].
    off_b = mm * k
    off_c = off_b + k * nn
    if transa == 0:
        lda = mm
    if transb == 0:
        ldb = k
    # BLAS reads each integer argument through a pointer, as 4 or 8 bytes; the
    # transpose flags are characters, the first byte of a (little-endian) integer.
    w = tile[T_BLAS_INT]
    ip32 = iparams.view(np.int32)
    _set_int(iparams, ip32, w, 0, mm)
    _set_int(iparams, ip32, w, 1, nn)
    _set_int(iparams, ip32, w, 2, k)
    _set_int(iparams, ip32, w, 3, lda)
    _set_int(iparams, ip32, w, 4, ldb)
    _set_int(iparams, ip32, w, 5, ldc if ldc != 0 else mm)
    _set_int(iparams, ip32, w, 6, _ORD_N if transa == 0 else transa)
    _set_int(iparams, ip32, w, 7, _ORD_N if transb == 0 else transb)
    ip = np.int64(iparams.ctypes.data)
    cp = np.int64(consts.ctypes.data)  # consts = [1, 0]: alpha/beta one, beta zero
    isz = np.int64(consts.itemsize)
    sp = np.int64(scratch.ctypes.data)
    ssz = np.int64(scratch.itemsize)
    fn = tile[T_GEMM_FN]
    if ldc != 0:
        c_ptr = np.int64(y.ctypes.data) + co * np.int64(y.itemsize)
    else:
        c_ptr = sp + off_c * ssz
    for r in range(br):
        pa = pa0 + r * sa_br
        pb = pb0 + r * sb_br
        if transa == 0:
            _pack(xa, pa, mm, k, sa_r, sa_c, scratch, 0)
            a_ptr = sp
        else:
            a_ptr = np.int64(xa.ctypes.data) + pa * np.int64(xa.itemsize)
        if transb == 0:
            _pack(xb, pb, k, nn, sb_r, sb_c, scratch, off_b)
            b_ptr = sp + off_b * ssz
        else:
            b_ptr = np.int64(xb.ctypes.data) + pb * np.int64(xb.itemsize)
        # beta = 0 on the first product when the tile is fresh (prim_first = zero, or the
        # C' temporary), so BLAS overwrites instead of reading uninitialized data.
        beta_zero = r == 0 and (zero_first or ldc == 0)
        call_gemm(
            fn, ip + 6 * w, ip + 7 * w, ip, ip + w, ip + 2 * w, cp, a_ptr, ip + 3 * w,
            b_ptr, ip + 4 * w, cp + (isz if beta_zero else 0), c_ptr, ip + 5 * w,
        )
    if ldc == 0:
        # Add (or store) the C' temporary into the strided output tile.
        for j in range(nn):
            for i in range(mm):
                pc = co + i * sc_r + j * sc_c
                v = scratch[off_c + j * mm + i]
                if zero_first:
                    y[pc] = v
                else:
                    y[pc] = y[pc] + v


@njit(cache=True, nogil=True, inline="always")  # compiled once, in its entry
def _gemm_vec_packed(x0, o0, x1, o1, y, o2, tile, zero_first, stream, relu, scratch, iparams):  # type: ignore[no-untyped-def]
    """A vector-kernel tile whose vector operand has unit stride along K (B^T along N,
    A^T along M): its K x length block is transposed into the worker's buffer, rows
    tile[T_VEC_P] elements apart from the buffer's first 64-byte line, then the vector
    kernel runs on the buffer.  The block is read once, in whole lines along K, and the
    kernel reads it again once per row block from cache: no whole-operand packing pass
    through memory (bhqd,bhkd->bhqk's K^T)."""
    ld = tile[T_VEC_P]
    k = tile[T_K]
    base = to_next_line(element_address(scratch, 0), scratch.itemsize)
    # buf[base + p*ld + v] = x[xo + v*x_v + p]: a transpose in registers (lower.vec_p_axis
    # gives this mode only K with unit stride, and both extents a line or more).  The
    # calls pass typed values where others pass variables (no literal False, -1 or 0, no
    # default None): a call with other argument types compiles another copy of the callee
    # and its whole subtree on a cold cache (a first vector-kernel tp.einsum: 16 -> 12 s).
    plain = tile[T_K] < 0  # False
    none = np.int64(-1)
    # iparams[0]: 1 + the block's offset the buffer holds (0: none yet; BLAS tiles use
    # iparams, and a program's tiles are all of one mode): the tile before on this
    # worker may have read the same block (a loop over the rows around the tiles).
    fn = tile[T_VEC_FN]
    if tile[T_SWAP]:  # along N: in1's K x n block, in0 broadcast
        if iparams[0] != o1 + 1:
            _copy_transposed(x1, o1, scratch, base, tile[T_N], k, tile[T_B_N], ld, plain,
                             scratch, none, none, none)
            iparams[0] = o1 + 1
        call_entry(fn, scratch, base, ld, x0, o0, tile[T_A_K], tile[T_A_M], y, o2,
                   tile[T_C_M], tile[T_N], tile[T_M], k, zero_first, stream, relu, scratch,
                   none + 1)
    else:  # along M: in0's m x K block, in1 broadcast
        if iparams[0] != o0 + 1:
            _copy_transposed(x0, o0, scratch, base, tile[T_M], k, tile[T_A_M], ld, plain,
                             scratch, none, none, none)
            iparams[0] = o0 + 1
        call_entry(fn, scratch, base, ld, x1, o1, tile[T_B_K], tile[T_B_N], y, o2,
                   tile[T_C_N], tile[T_M], tile[T_N], k, zero_first, stream, relu, scratch,
                   none + 1)


# _run_tile and _walk_seq are inlined into the runners that call them: numba compiles
# each function apart and then optimizes it again with all of its callees linked in, so
# every layer of calls costs its whole subtree once more on a cold cache (a first 8 x 8
# tp.einsum, serial: 11.8 -> 9.2 s; a parallel one first: 18.2 -> 16.9 s).  TCCG speeds
# were unchanged (geomean 1.04 against the run before, with the GEMM rate 1.03 higher).
@njit(cache=True, nogil=True, inline="always")
def _run_tile(x0, o0, x1, o1, y, o2, tile, first, last, scratch, iparams, consts, n0, n1,  # type: ignore[no-untyped-def]
              p2):
    """Run one tile at offsets o0, o1, o2; ``n0``, ``n1``: the in0 and in1 offsets of
    the tile that runs next on this worker (-1: none), for the vector kernel's prefetch;
    for a Copy tile, its in0 and out offsets, and ``p2`` the out offset of the tile that
    ran before it (see _copy_transposed)."""
    kind = tile[T_KIND]
    if kind in (KIND_COPY, KIND_RELU):
        call_tile(tile[T_TILE_FN], x0, o0, x1, o1, y, o2, tile, first, last, scratch, iparams,
                  consts, n0, n1, p2)
        return
    zero_first = first and tile[T_FIRST_ZERO] != 0
    if tile[T_MODE] == MODE_BLAS:
        call_tile(tile[T_TILE_FN], x0, o0, x1, o1, y, o2, tile, zero_first, last, scratch,
                  iparams, consts, n0, n1, p2)
    elif tile[T_MODE] == MODE_VEC:
        # The kernel applies the ReLU as it stores the last visit's sums.
        relu = last and tile[T_LAST_RELU] != 0
        stream = tile[T_STREAM] != 0
        if tile[T_VEC_P]:  # _gemm_vec_packed, through _packed_entry: ``last`` is relu
            call_tile(tile[T_TILE_FN], x0, o0, x1, o1, y, o2, tile, zero_first, relu, scratch,
                      iparams, consts, n0, n1, p2)
            return
        # The transposed kernel (out has its unit stride along the rows) is given out's
        # stride along the vector axis, the vector kernel out's stride along the rows.
        transposed = tile[T_VEC_T] != 0
        fn = tile[T_VEC_T] if transposed else tile[T_VEC_FN]
        if tile[T_SWAP]:  # along N: B has unit stride along N, A is broadcast
            nxt = n1 - o1 if n1 >= 0 else 0
            cv = tile[T_C_N] if transposed else tile[T_C_M]
            call_entry(fn, x1, o1, tile[T_B_K], x0, o0, tile[T_A_K], tile[T_A_M], y, o2, cv,
                       tile[T_N], tile[T_M], tile[T_K], zero_first, stream, relu, scratch, nxt)
        else:  # along M: A has unit stride along M, B is broadcast
            nxt = n0 - o0 if n0 >= 0 else 0
            cv = tile[T_C_M] if transposed else tile[T_C_N]
            call_entry(fn, x0, o0, tile[T_A_K], x1, o1, tile[T_B_K], tile[T_B_N], y, o2, cv,
                       tile[T_M], tile[T_N], tile[T_K], zero_first, stream, relu, scratch, nxt)
        return
    elif tile[T_MODE] == MODE_ROW:
        _row_tile(x0, o0, x1, o1, y, o2, tile, tile[T_M], zero_first,
                  last and tile[T_LAST_RELU] != 0, consts[1])
        return
    elif tile[T_MODE] == MODE_DOT:
        _dot_tile(x0, o0, x1, o1, y, o2, tile, zero_first, consts[1])
    elif tile[T_M] == 1 and tile[T_N] == 1 and tile[T_K] == 1 and tile[T_BR] == 1:
        # Scalar multiply-add: the scalar schedules of spec examples 10.3.3 to 10.3.5.
        v = x0[o0] * x1[o1]
        y[o2] = v if zero_first else y[o2] + v
    else:
        _gemm_loops(x0, o0, x1, o1, y, o2, tile, zero_first)
    if last and tile[T_LAST_RELU] != 0:
        _relu_tile(y, o2, tile[T_M], tile[T_N], tile[T_C_M], tile[T_C_N])


@njit(cache=True, nogil=True, inline="always")
def _walk_seq(  # type: ignore[no-untyped-def]
    x0, x1, y, loops, npar, tile, o0, o1, o2, scratch, iparams, consts, n0, n1, idx,
):
    """Run the sequential loops (rows npar.. of ``loops``) from base offsets o0, o1, o2.
    ``n0``, ``n1``: the in0 and in1 offsets of the tile that runs after this walk's last
    one (-1: none).  With ``tile[T_AHEAD]`` each tile is told where the next one reads
    (see _run_tile)."""
    nloops = loops.shape[0]
    nseq = nloops - npar
    # One call of _run_tile, with typed arguments: each call site with other argument
    # types (a literal True or -1) compiles another copy of it and all it calls on a
    # cold cache (9.6 -> 15.4 s for a first call).  Without sequential loops the
    # odometer below runs the one tile and stops.
    none = np.int64(-1)
    ahead = tile[T_AHEAD] != 0
    copy = tile[T_KIND] == KIND_COPY and tile[T_STREAM] != 0
    prev2 = none
    for r in range(npar, nloops):
        if loops[r, 0] == 0:
            return
    # The odometer: the caller's buffer (at least nseq long), allocated once per worker,
    # not once per walk (512 x 32^3 batched products on one thread: 428-440 us with an
    # allocation per parallel iteration, 404-420 without).
    for q in range(nseq):
        idx[q] = 0
    has_k = False
    for r in range(npar, nloops):
        if loops[r, 4] != 0 and loops[r, 0] > 1:
            has_k = True
    while True:
        # True unless a K loop says otherwise, written as a comparison (always true) so
        # that numba types it bool, not Literal[True]: one _run_tile (see above).
        first = nseq >= 0
        last = first
        if has_k:
            for q in range(nseq):
                row = npar + q
                if loops[row, 4] != 0:
                    if idx[q] != 0:
                        first = False
                    if idx[q] != loops[row, 0] - 1:
                        last = False
        p0 = o0
        p1 = o1
        p2 = o2
        # Odometer step to the next tile: innermost axis fastest.
        q = nseq - 1
        while q >= 0:
            row = npar + q
            idx[q] += 1
            o0 += loops[row, 1]
            o1 += loops[row, 2]
            o2 += loops[row, 3]
            if idx[q] < loops[row, 0]:
                break
            o0 -= loops[row, 1] * loops[row, 0]
            o1 -= loops[row, 2] * loops[row, 0]
            o2 -= loops[row, 3] * loops[row, 0]
            idx[q] = 0
            q -= 1
        # The next tile's offsets: the odometer's, or after the last one the walk's
        # successor.
        nx0, nx1 = (n0, n1) if q < 0 else (o0, o1)
        if not ahead:
            nx0, nx1 = none, none
        if copy:
            # A Copy tile is told where the next tile of this walk reads and writes, and
            # where the one before it wrote (its rows may continue; see _copy_transposed).
            nx0, nx1 = (o0, o2) if q >= 0 else (none, none)
        _run_tile(x0, p0, x1, p1, y, p2, tile, first, last, scratch, iparams, consts, nx0, nx1,
                  prev2)
        prev2 = p2
        if q < 0:
            return


@njit(cache=True, nogil=True, inline="always")
def _collapsed_offsets(rows, nrows, tile, it):  # type: ignore[no-untyped-def]
    """The three tensors' offsets at iteration ``it`` of the first ``nrows`` rows of
    ``rows`` (size, stride in0, in1, out, ...) collapsed into one range, last row
    fastest, from the tile's origins."""
    o0 = tile[T_ORIGIN0]
    o1 = tile[T_ORIGIN1]
    o2 = tile[T_ORIGIN2]
    rem = it
    for r in range(nrows - 1, -1, -1):
        i = rem % rows[r, 0]
        rem //= rows[r, 0]
        o0 += i * rows[r, 1]
        o1 += i * rows[r, 2]
        o2 += i * rows[r, 3]
    return o0, o1, o2


@njit(cache=True, nogil=True, inline="always")
def _next_offsets(rows, nrows, tile, it, stop):  # type: ignore[no-untyped-def]
    """The offsets of iteration ``it + 1`` (see _collapsed_offsets), or -1 for each when
    ``it`` is the last of the worker's iterations (``stop``)."""
    if it + 1 < stop:
        return _collapsed_offsets(rows, nrows, tile, it + 1)
    none = np.int64(-1)
    return none, none, none


@njit(cache=True, nogil=True, inline="always")
def _iterations(rows, nrows):  # type: ignore[no-untyped-def]
    """The iterations of the first ``nrows`` loop rows collapsed into one range."""
    total = 1
    for r in range(nrows):
        total *= rows[r, 0]
    return total


@njit(cache=True, nogil=True, inline="always")
def _chunk(c, total, nchunks):  # type: ignore[no-untyped-def]
    """Worker ``c``'s contiguous share [start, stop) of ``total`` iterations."""
    return c * total // nchunks, (c + 1) * total // nchunks


@njit(cache=True, nogil=True)
def _par_rows(x0, x1, y, loops, npar, tile, consts, start, stop):  # type: ignore[no-untyped-def]
    """Iterations [start, stop) of a scalar-tile program with only parallel loops, in
    runs along its innermost loop (MODE_ROW with T_ROW_PAR): each iteration is one
    element, written once (parallel loops carry no K), so each run is one row tile."""
    n_last = loops[npar - 1, 0]
    zero_first = tile[T_FIRST_ZERO] != 0
    relu = tile[T_LAST_RELU] != 0
    it = start
    while it < stop:
        o0, o1, o2 = _collapsed_offsets(loops, npar, tile, it)
        run = min(n_last - it % n_last, stop - it)
        _row_tile(x0, o0, x1, o1, y, o2, tile, run, zero_first, relu, consts[1])
        it += run


@njit(cache=True, nogil=True)
def blas_tiles_chunk(x0, x1, y, loops, npar, tile, consts, start, stop):  # type: ignore[no-untyped-def]
    """run_chunk for a program of plain BLAS tiles (lower.plain_blas): the same tiles,
    each one ?gemm call, from a loop that computes three addresses per tile, where the
    general walker passes arrays down three calls and sets BLAS' integer arguments again
    for every tile, though they are the program's constants."""
    nloops = loops.shape[0]
    nseq = nloops - npar
    for r in range(npar, nloops):
        if loops[r, 0] == 0:
            return
    swap = tile[T_SWAP] != 0
    mm, nn = (tile[T_N], tile[T_M]) if swap else (tile[T_M], tile[T_N])
    w = tile[T_BLAS_INT]
    iparams = np.zeros(8, np.int64)
    ip32 = iparams.view(np.int32)
    _set_int(iparams, ip32, w, 0, mm)
    _set_int(iparams, ip32, w, 1, nn)
    _set_int(iparams, ip32, w, 2, tile[T_K])
    _set_int(iparams, ip32, w, 3, tile[T_LDA])
    _set_int(iparams, ip32, w, 4, tile[T_LDB])
    _set_int(iparams, ip32, w, 5, tile[T_LDC])
    _set_int(iparams, ip32, w, 6, tile[T_TRANSA])
    _set_int(iparams, ip32, w, 7, tile[T_TRANSB])
    ip = np.int64(iparams.ctypes.data)
    cp = np.int64(consts.ctypes.data)
    isz = np.int64(consts.itemsize)
    beta = cp + (isz if tile[T_FIRST_ZERO] != 0 else 0)  # 0: written over; 1: added to
    # BLAS' A and B: in0 and in1, or in1 and in0 (C^T = B^T A^T) when swapped.
    base0, base1 = np.int64(x0.ctypes.data), np.int64(x1.ctypes.data)
    c_base = np.int64(y.ctypes.data)
    fn = tile[T_GEMM_FN]
    idx = np.zeros(max(nseq, 1), np.int64)
    for it in range(start, stop):
        o0, o1, o2 = _collapsed_offsets(loops, npar, tile, it)
        for q in range(nseq):
            idx[q] = 0
        while True:
            a_ptr, b_ptr = base0 + o0 * isz, base1 + o1 * isz
            if swap:
                a_ptr, b_ptr = b_ptr, a_ptr
            call_gemm(fn, ip + 6 * w, ip + 7 * w, ip, ip + w, ip + 2 * w, cp, a_ptr,
                      ip + 3 * w, b_ptr, ip + 4 * w, beta, c_base + o2 * isz, ip + 5 * w)
            # The odometer over the sequential loops, innermost fastest: _walk_seq's step,
            # written out again on purpose (one inlined helper for both made 4096 batched
            # 16^3 products 10% slower on one thread: 595-671 us against 532-580).
            q = nseq - 1
            while q >= 0:
                row = npar + q
                idx[q] += 1
                o0 += loops[row, 1]
                o1 += loops[row, 2]
                o2 += loops[row, 3]
                if idx[q] < loops[row, 0]:
                    break
                o0 -= loops[row, 1] * loops[row, 0]
                o1 -= loops[row, 2] * loops[row, 0]
                o2 -= loops[row, 3] * loops[row, 0]
                idx[q] = 0
                q -= 1
            if q < 0:
                break


@njit(cache=True, nogil=True, inline="always")  # compiled once, in its entry
def run_chunk(x0, x1, y, loops, npar, tile, consts, start, stop):  # type: ignore[no-untyped-def]
    """Run iterations [start, stop) of a program's first ``npar`` loop rows (collapsed
    into one range), each with all of its sequential loops; with ``npar`` 0 and the
    range [0, 1), the whole program with every loop sequential (parallel rows, if any,
    run in order)."""
    if tile[T_MODE] == MODE_ROW and tile[T_ROW_PAR] != 0:
        _par_rows(x0, x1, y, loops, npar, tile, consts, start, stop)
        return
    scratch = np.empty(max(tile[T_SCRATCH], 1), y.dtype)
    iparams = np.zeros(8, np.int64)
    idx = np.zeros(max(loops.shape[0], 1), np.int64)
    o0, o1, o2 = _collapsed_offsets(loops, npar, tile, start)
    for it in range(start, stop):
        n0, n1, n2 = _next_offsets(loops, npar, tile, it, stop)
        _walk_seq(x0, x1, y, loops, npar, tile, o0, o1, o2, scratch, iparams, consts, n0, n1,
                  idx)
        o0, o1, o2 = n0, n1, n2
    if tile[T_VEC_T] != 0 and tile[T_STREAM] != 0:
        # The transposed kernel leaves its non-temporal stores unfenced (one fence per
        # chunk, not per tile): they must be visible before another thread reads.
        store_fence()


@njit(cache=True, nogil=True)
def run_chunk_at(fn, x0, x1, y, loops, npar, tile, consts, start, stop):  # type: ignore[no-untyped-def]
    """:func:`run_chunk` through its compiled address ``fn`` (:func:`chunk_address`)."""
    call_chunk(fn, x0, x1, y, loops, npar, tile, consts, start, stop)


@njit(cache=True, nogil=True, parallel=True)
def run_parallel(fn, x0, x1, y, loops, npar, tile, consts, nchunks):  # type: ignore[no-untyped-def]
    """Run a program whose first ``npar`` loop rows are parallel (collapsed into one range).

    The parallel iterations are split into ``nchunks`` contiguous chunks, one
    :func:`run_chunk` per worker, called through its compiled address ``fn``
    (:func:`chunk_address`).  Parallel axes never carry K (validation rejects it),
    so workers write disjoint output tiles, and each tile still sees its K iterations in
    schedule order.  Linked in, run_chunk would be optimized again inside the parallel
    region on a cold first call (about a third of that call's compile time).
    """
    total = _iterations(loops, npar)
    for c in prange(nchunks):
        start, stop = _chunk(c, total, nchunks)
        if start < stop:
            call_chunk(fn, x0, x1, y, loops, npar, tile, consts, start, stop)


@njit(cache=True, nogil=True, parallel=True)
def run_blas_tiles(x0, x1, y, loops, npar, tile, consts, nchunks):  # type: ignore[no-untyped-def]
    """run_parallel for a program of plain BLAS tiles (lower.plain_blas)."""
    total = _iterations(loops, npar)
    for c in prange(nchunks):
        start, stop = _chunk(c, total, nchunks)
        if start < stop:
            blas_tiles_chunk(x0, x1, y, loops, npar, tile, consts, start, stop)


@njit(cache=True, nogil=True, parallel=True)
def run_split(fn, x0, x1, y, loops, tile, consts, nchunks):  # type: ignore[no-untyped-def]
    """Run a program without parallel loops whose BLAS tile is large, on ``nchunks``
    workers: each takes a contiguous share of the tile's longer axis (M or N) and runs
    every loop of the program on that part of the tile, calling BLAS on one thread.
    The parts' outputs are disjoint, each sees the K loops in schedule order, and each
    part reads and writes a subset of the tile's own addresses.  (A BLAS call on its
    own threads instead left them spinning for milliseconds after it returned, on the
    cores the next parallel region needed, and the region's spinning workers slowed
    BLAS in turn: pqrs,tuqs->ptru's pack then GEMM on 24^4 float64 took 5-10 ms, against
    3 with one pool of threads.)"""
    along_n = tile[T_N] >= tile[T_M]
    total = tile[T_N] if along_n else tile[T_M]
    for c in prange(nchunks):
        start, stop = _chunk(c, total, nchunks)
        if start < stop:
            part = tile.copy()
            if along_n:
                part[T_N] = stop - start
                part[T_ORIGIN1] += start * tile[T_B_N]
                part[T_ORIGIN2] += start * tile[T_C_N]
            else:
                part[T_M] = stop - start
                part[T_ORIGIN0] += start * tile[T_A_M]
                part[T_ORIGIN2] += start * tile[T_C_M]
            call_chunk(fn, x0, x1, y, loops, 0, part, consts, 0, 1)


@njit(cache=True, nogil=True, parallel=True)
def run_dot_split(x0, x1, y, tile, consts, nchunks):  # type: ignore[no-untyped-def]
    """A program that is one dot product (a MODE_DOT tile of one row, no loops), its K
    range split over ``nchunks`` workers: each sums its share, then the partial sums
    are added in order (a reassociation, as the vectorized dot already does) and
    written as the tile would: over or added to out, then max(., 0) with ReLU last."""
    k = tile[T_K]
    sa, sb = tile[T_A_K], tile[T_B_K]
    ao, bo = tile[T_ORIGIN0], tile[T_ORIGIN1]
    partial = np.zeros(nchunks, y.dtype)
    for c in prange(nchunks):
        start, stop = _chunk(c, k, nchunks)
        partial[c] = _dot(x0, ao + start * sa, sa, x1, bo + start * sb, sb, stop - start,
                          consts[1])
    acc = consts[1]
    for c in range(nchunks):
        acc += partial[c]
    o2 = tile[T_ORIGIN2]
    v = acc if tile[T_FIRST_ZERO] != 0 else y[o2] + acc
    y[o2] = _relu(v) if tile[T_LAST_RELU] != 0 else v


# --- Blocked write-back -------------------------------------------------------------
# A program whose output tiles cannot be written along the output's own strides runs
# block by block: the block's loops write a small stage buffer in cache (in a layout
# whose tiles BLAS can address), then one copy moves the block into the output.  The
# output is written once, by whole runs along its unit stride; no transposed operand
# and no full-size staging buffer goes through memory.
#
# ``outer``: one row per loop around the blocks, ``(size, stride_in0, stride_in1,
# stride_out)``; ``block``: one row per output axis of a block, ``(size, stride_stage,
# stride_out)``.  ``inner`` and ``tile`` are the block program's tables (its output is
# the stage, so their out strides are stage strides).


@intrinsic
def _store_nt(typingctx, arr, idx, val):  # type: ignore[no-untyped-def]
    """arr[idx] = val as a non-temporal store: the line goes to memory through a
    write-combining buffer, neither read for ownership nor kept in cache."""
    sig = types.void(arr, idx, val)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        ptr = builder.gep(ary.data, [args[1]])
        v = context.cast(builder, args[2], signature.args[2], signature.args[0].dtype)
        # As an integer of the same width: x86 has scalar non-temporal stores (movnti)
        # for integers only; a float store with the hint would be an ordinary one.
        as_int = ir.IntType(v.type.get_abi_size(context.target_data) * 8)
        store_nontemporal(builder, builder.bitcast(v, as_int),
                          builder.bitcast(ptr, as_int.as_pointer()), as_int.width // 8)
        return context.get_dummy_value()

    return sig, codegen


@njit(cache=True, nogil=True)
def _combos(block, rows, nrows):  # type: ignore[no-untyped-def]
    """(stage offset, out offset) of every combination of the given block rows' indices,
    the last row fastest."""
    count = 1
    for t in range(nrows):
        count *= block[rows[t], 0]
    offs = np.zeros((count, 2), np.int64)
    idx = np.zeros(max(nrows, 1), np.int64)
    so = 0
    yo = 0
    for c in range(count):
        offs[c, 0] = so
        offs[c, 1] = yo
        t = nrows - 1
        while t >= 0:
            r = rows[t]
            idx[t] += 1
            so += block[r, 1]
            yo += block[r, 2]
            if idx[t] < block[r, 0]:
                break
            so -= block[r, 1] * block[r, 0]
            yo -= block[r, 2] * block[r, 0]
            idx[t] = 0
            t -= 1
    return offs


@njit(cache=True, nogil=True)
def _copy_block_streamed(stage, y, yo, block, ri, rp, buf, xo):  # type: ignore[no-untyped-def]
    """The block copy when out has a unit stride (row ``ri``) and ``buf`` can hold its
    runs: ``rp`` is the stage's unit-stride row (-1 if that is ``ri`` too); the block
    starts at ``stage[xo]``.

    Out's rows are assembled in ``buf`` (in cache) a whole run at a time, the run being
    ``ri`` and the rows that continue it contiguously in out, and each run is written
    once, in order, with non-temporal stores: whole lines as vector stores, single
    elements only at a run's two ends.  A run written in pieces at different times would
    leave lines half-written in the write-combining buffers, which go to memory as
    partial writes (a read-modify-write each) when out is not line-aligned, as numpy's
    large arrays are not.  The transpose from the stage's unit stride to out's goes
    through registers a line at a time (:func:`_transpose_line_tile`).

    All of it is in this one function on purpose: a call to a compiled function that
    passes an array updates reference counts with locked instructions, and a locked
    instruction drains the write-combining buffers (a run per call measured 3-20x
    slower)."""
    lanes = 64 // y.itemsize
    nrows = block.shape[0]
    q = block[ri, 0]
    x_q = block[ri, 1]
    if rp >= 0:
        npj, y_p = block[rp, 0], block[rp, 2]
    else:
        npj, y_p = 1, 0
    # The run: ri, then each row whose out stride continues it, while buf holds it
    # (once per line of rp's values unless rp itself is part of the run).
    in_run = np.zeros(nrows, np.bool_)
    in_run[ri] = True
    run = q
    p_in = rp < 0
    while True:
        nxt = -1
        for r in range(nrows):
            if not in_run[r] and block[r, 0] > 1 and block[r, 2] == run:
                nxt = r
        if nxt < 0:
            break
        longer = run * block[nxt, 0]
        if p_in or nxt == rp:
            if longer * y.itemsize > _RUN_L1_BYTES or longer > buf.shape[0]:
                break
        elif longer * lanes > buf.shape[0]:
            break
        in_run[nxt] = True
        run = longer
        if nxt == rp:
            p_in = True
    sub = np.zeros(nrows, np.int64)
    nsub = 0
    rest = np.zeros(nrows, np.int64)
    nrest = 0
    for r in range(nrows):
        if r in (ri, rp):
            continue
        if in_run[r]:
            sub[nsub] = r
            nsub += 1
        else:
            rest[nrest] = r
            nrest += 1
    subs = _combos(block, sub, nsub)
    rests = _combos(block, rest, nrest)
    ld = y_p if p_in else run  # buf's stride along rp
    # Tiles of a line's worth of rp's and ri's values; when an extent is not a multiple
    # of a line, the last tile overlaps the one before (it rewrites the same values in
    # buf) rather than falling back to single elements.  Scalar only for extents
    # shorter than a line.
    full = q >= lanes and npj >= lanes
    nj = (npj + lanes - 1) // lanes
    ni = (q + lanes - 1) // lanes
    for t in range(rests.shape[0]):
        so = xo + rests[t, 0]
        yb = yo + rests[t, 1]
        done = 0  # rp's values already written to out (when rp is not in the run)
        for jt in range(nj):
            j0 = min(jt * lanes, npj - lanes) if full else jt * lanes
            rows = lanes if full else min(lanes, npj - j0)
            for u in range(subs.shape[0]):
                xs = so + subs[u, 0] + j0
                bb = subs[u, 1] + (j0 * y_p if p_in else 0)
                if full:
                    for it in range(ni):
                        i0 = min(it * lanes, q - lanes)
                        _transpose_line_tile(stage, xs + i0 * x_q, x_q, buf, bb + i0, ld, False)
                else:
                    for j in range(rows):
                        for i in range(q):
                            buf[bb + j * ld + i] = stage[xs + i * x_q + j]
            if p_in and jt + 1 < nj:
                continue
            first = 0 if p_in else done - j0
            done = j0 + rows
            for f in range(first, 1 if p_in else rows):
                bo = 0 if p_in else f * run
                yr = yb if p_in else yb + (j0 + f) * y_p
                # buf[bo : bo + run] -> y[yr : yr + run]: elements up to out's first
                # line boundary, then whole lines, then the rest.
                addr = element_address(y, yr)
                head = run
                if addr % y.itemsize == 0:
                    head = min(run, to_next_line(addr, y.itemsize))
                for i in range(head):
                    _store_nt(y, np.uint64(yr + i), buf[bo + i])
                i = head
                while i + lanes <= run:
                    _store_line_nt(y, yr + i, buf, bo + i)
                    i += lanes
                while i < run:
                    _store_nt(y, np.uint64(yr + i), buf[bo + i])
                    i += 1


@njit(cache=True, nogil=True)
def _copy_rows_nt(x, xo, y, yo, m, n, x_m, x_n, y_n):  # type: ignore[no-untyped-def]
    """y[yo + i + j*y_n] = x[xo + i*x_m + j*x_n] with non-temporal stores (offsets
    proven inside the arrays, as in _copy_plain)."""
    for j in range(n):
        xb = xo + j * x_n
        yb = yo + j * y_n
        for i in range(m):
            _store_nt(y, np.uint64(yb + i), x[np.uint64(xb + i * x_m)])


@njit(cache=True, nogil=True)
def _copy_block(stage, y, yo, block, buf, xo=0):  # type: ignore[no-untyped-def]
    """y[yo + sum(i_r * out_r)] = stage[xo + sum(i_r * stage_r)] over the block's rows: a 2-D
    copy tile along the output's two smallest strides, looped over the other rows in
    their order (the planner lists them outermost in ``out`` first), so that the writes
    sweep ``out`` in order, a few pages at a time; the gathered reads hit the stage in
    L2."""
    nrows = block.shape[0]
    if nrows == 0:
        y[yo] = stage[xo]
        return
    ri = 0
    for r in range(nrows):
        if abs(block[r, 2]) < abs(block[ri, 2]):
            ri = r
    streaming = block[ri, 2] == 1
    if streaming:
        rp = -1
        if block[ri, 1] != 1:
            for r in range(nrows):
                if r != ri and block[r, 1] == 1 and block[r, 0] > 1:
                    rp = r
        lanes = 64 // y.itemsize
        if (block[ri, 1] == 1 or rp >= 0) and block[ri, 0] * lanes <= buf.shape[0]:
            _copy_block_streamed(stage, y, yo, block, ri, rp, buf, xo)
            return
    # Otherwise a 2-D copy tile.  Streaming stores (out's unit stride along i) need no
    # locality between rows once each row is a few whole lines, so the tile's second
    # axis is then the stage's own unit stride: the lines the rows gather stay in L1
    # for the next row.  Shorter rows are continued by the next row along out (else the
    # write-combining buffers would send half-written lines to memory).
    col = 1 if streaming and block[ri, 0] * y.itemsize >= _STREAM_ROW_BYTES else 2
    rj = -1
    for r in range(nrows):
        if r != ri and (rj < 0 or abs(block[r, col]) < abs(block[rj, col])):
            rj = r
    m = block[ri, 0]
    if rj >= 0:
        n, s_n, y_n = block[rj, 0], block[rj, 1], block[rj, 2]
    else:
        n, s_n, y_n = 1, 0, 0
    rest = np.zeros(nrows, np.int64)
    nrest = 0
    for r in range(nrows):
        if r not in (ri, rj):
            rest[nrest] = r
            nrest += 1
    rests = _combos(block, rest, nrest)
    # The output is written once and not read again by this program: along its unit
    # stride, non-temporal stores skip the read for ownership and leave the cache to
    # the stage and the operands (a 287 MB block copy: 28 ms with plain stores).
    for t in range(rests.shape[0]):
        so, yt = xo + rests[t, 0], yo + rests[t, 1]
        if streaming:
            _copy_rows_nt(stage, so, y, yt, m, n, block[ri, 1], s_n, y_n)
        else:
            _copy_tile(stage, so, y, yt, m, n, block[ri, 1], s_n, block[ri, 2], y_n, False)


@njit(cache=True, nogil=True)
def copy_runs_chunk(x, y, loops, npar, tile, block, start, stop):  # type: ignore[no-untyped-def]
    """Iterations [start, stop) of a Copy program run through the block copy (see
    run_copy_runs, which calls this once per worker)."""
    buf = np.empty(_RUN_BUFFER_BYTES // y.itemsize, y.dtype)
    for it in range(start, stop):
        o0, _o1, o2 = _collapsed_offsets(loops, npar, tile, it)
        _copy_block(x, y, o2, block, buf, o0)
    store_fence()


@njit(cache=True, nogil=True, parallel=True)
def run_copy_runs(x, y, loops, npar, tile, block, nchunks):  # type: ignore[no-untyped-def]
    """Run a Copy program whose tiles write rows too short to stream on their own
    (lower.copy_runs): each iteration of its parallel loops copies the block of its
    sequential and primitive axes (``block``: size, x stride, y stride; outermost in y
    first) with the block copy, which assembles y's runs in ``buf`` and streams them
    whole.  The addresses are the program's own, proven by checks.py."""
    total = _iterations(loops, npar)
    for c in prange(nchunks):
        start, stop = _chunk(c, total, nchunks)
        if start < stop:
            copy_runs_chunk(x, y, loops, npar, tile, block, start, stop)


@njit(cache=True, nogil=True, inline="always")  # compiled once, in its entry
def blocked_chunk(x0, x1, y, outer, inner, tile, block, stage_elements, consts, start, stop):  # type: ignore[no-untyped-def]
    """Blocks [start, stop) of a blocked program (see run_blocked, which calls this once
    per worker), with a stage and a scratch buffer of their own."""
    stage = np.empty(max(stage_elements, 1), y.dtype)
    scratch = np.empty(max(tile[T_SCRATCH], 1), y.dtype)
    iparams = np.zeros(8, np.int64)
    idx = np.zeros(max(inner.shape[0], 1), np.int64)
    buf = np.empty(_RUN_BUFFER_BYTES // y.itemsize, y.dtype)
    o0, o1, o2 = _collapsed_offsets(outer, outer.shape[0], tile, start)
    for it in range(start, stop):
        n0, n1, n2 = _next_offsets(outer, outer.shape[0], tile, it, stop)
        _walk_seq(x0, x1, stage, inner, 0, tile, o0, o1, 0, scratch, iparams, consts,
                  n0, n1, idx)
        _copy_block(stage, y, o2, block, buf)
        o0, o1, o2 = n0, n1, n2
    store_fence()


@njit(cache=True, nogil=True)
def blocked_chunk_at(fn, x0, x1, y, outer, inner, tile, block, stage_elements, consts, start,  # type: ignore[no-untyped-def]
                     stop):
    """:func:`blocked_chunk` through its compiled address ``fn`` (:func:`blocked_address`)."""
    call_blocked(fn, x0, x1, y, outer, inner, tile, block, stage_elements, consts, start, stop)


@njit(cache=True, nogil=True, parallel=True)
def run_blocked(fn, x0, x1, y, outer, inner, tile, block, stage_elements, consts, nchunks):  # type: ignore[no-untyped-def]
    """Run a blocked program: the outer iterations split into ``nchunks`` contiguous
    chunks, one per worker (:func:`blocked_chunk` through its address ``fn``); each
    worker owns a stage buffer and a scratch buffer."""
    total = _iterations(outer, outer.shape[0])
    for c in prange(nchunks):
        start, stop = _chunk(c, total, nchunks)
        if start < stop:
            call_blocked(fn, x0, x1, y, outer, inner, tile, block, stage_elements, consts,
                         start, stop)


# --- Tile kinds compiled on demand (executor/entries.py) -----------------------------
# Copy/ReLU and BLAS tiles run through their addresses: linked into the walker, each was
# compiled again into every runner on a cold first call, whether its program had such
# tiles or not (a first vector-kernel product: 23-31 s, most of it these).


def _copy_entry(x0p, x0n, o0, x1p, x1n, o1, yp, yn, o2, tp, tn, first, last, sp, sn,  # type: ignore[no-untyped-def]
                ip, i_n, cp, cn, n0, n1, p2):
    """A Copy or ReLU tile (see _run_tile's arguments)."""
    tile = carray(tp, (tn,))
    _copy_tile(carray(x0p, (x0n,)), o0, carray(yp, (yn,)), o2, tile[T_M], tile[T_N],
               tile[T_A_M], tile[T_A_K], tile[T_C_M], tile[T_C_N], tile[T_KIND] == KIND_RELU,
               tile[T_STREAM] != 0, carray(sp, (sn,)), p2, n0, n1)


def _blas_entry(x0p, x0n, o0, x1p, x1n, o1, yp, yn, o2, tp, tn, first, last, sp, sn,  # type: ignore[no-untyped-def]
                ip, i_n, cp, cn, n0, n1, p2):
    """A BLAS tile; ``first``: written over rather than added to."""
    _gemm_blas(carray(x0p, (x0n,)), o0, carray(x1p, (x1n,)), o1, carray(yp, (yn,)), o2,
               carray(tp, (tn,)), first != 0, carray(sp, (sn,)), carray(ip, (i_n,)),
               carray(cp, (cn,)))


def _packed_entry(x0p, x0n, o0, x1p, x1n, o1, yp, yn, o2, tp, tn, first, last, sp, sn,  # type: ignore[no-untyped-def]
                  ip, i_n, cp, cn, n0, n1, p2):
    """A packed vector-kernel tile (_gemm_vec_packed); ``first``: written over rather
    than added to; ``last``: ReLU applied."""
    tile = carray(tp, (tn,))
    _gemm_vec_packed(carray(x0p, (x0n,)), o0, carray(x1p, (x1n,)), o1, carray(yp, (yn,)),
                     o2, tile, first != 0, tile[T_STREAM] != 0, last != 0, carray(sp, (sn,)),
                     carray(ip, (i_n,)))


_TILE_ENTRIES = {"copy": _copy_entry, "blas": _blas_entry, "packed": _packed_entry}


def _chunk_entry(x0p, x0n, x1p, x1n, yp, yn, lp, ln, npar, tp, tn, cp, cn, start, stop):  # type: ignore[no-untyped-def]
    """run_chunk on arrays given as (pointer, size or rows)."""
    run_chunk(carray(x0p, (x0n,)), carray(x1p, (x1n,)), carray(yp, (yn,)),
              carray(lp, (ln, 5)), npar, carray(tp, (tn,)), carray(cp, (cn,)), start, stop)


def _blocked_entry(x0p, x0n, x1p, x1n, yp, yn, op, on, ip, i_n, tp, tn, bp, bn,  # type: ignore[no-untyped-def]
                   stage_elements, cp, cn, start, stop):
    """blocked_chunk on arrays given as (pointer, size or rows)."""
    blocked_chunk(carray(x0p, (x0n,)), carray(x1p, (x1n,)), carray(yp, (yn,)),
                  carray(op, (on, 4)), carray(ip, (i_n, 5)), carray(tp, (tn,)),
                  carray(bp, (bn, 3)), stage_elements, carray(cp, (cn,)), start, stop)


def chunk_address(dtype: np.dtype) -> int:
    """The address of :func:`run_chunk` compiled for arrays of ``dtype`` (the loop
    walker with its inline tile kinds), for run_parallel, run_split and run_chunk_at."""
    return compiled_address(_chunk_entry, dtype, abi="chunk")


def blocked_address(dtype: np.dtype) -> int:
    """The address of :func:`blocked_chunk` compiled for arrays of ``dtype``."""
    return compiled_address(_blocked_entry, dtype, abi="blocked")


def tile_entry_address(kind: str, dtype: np.dtype) -> int:
    """The address of tile kind ``kind``'s ("copy", "blas", "packed") entry point for arrays of
    ``dtype``, for :func:`teir_plan.executor.entries.call_tile`."""
    return compiled_address(_TILE_ENTRIES[kind], dtype, abi="tile")
