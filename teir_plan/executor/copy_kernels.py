"""Copy and ReLU tiles: strided copies, transposes a 64-byte line at a time in
registers (with non-temporal stores when the output streams), and the zero/ReLU passes
over an output tile.  The walker runs them through their entry point (walker.py), the
blocked write-back (blocked.py) and the packed vector tiles (gemm_tiles.py) call the
transposes directly.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from teir_plan.executor.elements import relu_value
from teir_plan.executor.intrinsics import (
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
from teir_plan.executor.intrinsics import as_intp as _as_intp
from teir_plan.executor.intrinsics import store_line_nt as _store_line_nt
from teir_plan.isa import LINE_BYTES

# A copy whose reads along the written axis are gathered (a transpose) runs in
# blocks of this many written elements: the block's input lines (one per element)
# stay in L1 while the outer index sweeps them, so each line is read from memory
# once and the writes still stream (measured on 3008 x 5008 float32: 2.8 GB/s
# unblocked, 16 GB/s in blocks of 256; 8x8 micro-block transposes gave 3.3).
_GATHER_BLOCK = 256

# A transpose tile by tile in registers (copy_transposed) reads a whole line of each of
# its rows per tile, so no line needs to stay in cache: its blocks only group rows that
# are read side by side, each row a stream along the other index.  Sixteen rows (one
# tile) are streams the prefetchers follow; 256 were too many, and rows a multiple of
# 4 KiB apart evicted each other's prefetched lines (AMD EPYC, GB/s read + written,
# 16 against 256 rows: ijk->kji 256^3 18-20 against 12-13, ij->ji 3008 x 5008 37-41
# against 24-29, 4096^2 25-30 against 23-26, 240^3 19 against 16-20).
_TRANSPOSE_BLOCK = 16


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
def transpose_line_tile(typingctx, x, xo, x_ld, b, bo, b_ld, nt):  # type: ignore[no-untyped-def]
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
                    store_nontemporal(builder, row, ptr, LINE_BYTES)
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
    """transpose_line_tile with non-temporal stores, its first ``t`` lines read from
    x[xo + r*x_ld] and the other L - t from x[xo2 + (r - t)*x_ld]: row c of the result
    (b[bo + c*b_ld], a whole 64-byte line) joins the end of one tile's row to the start
    of the next tile's (see copy_transposed).  Only those L lines are read."""
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
            store_nontemporal(builder, row, _row_pointer(context, builder, args, tys, c),
                              LINE_BYTES)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def _transpose_line_tile_part(typingctx, x, xo, x_ld, b, bo, b_ld, lo, hi):  # type: ignore[no-untyped-def]
    """b[bo + c*b_ld + r] = x[xo + r*x_ld + c] for lo <= r < hi and c < L: the transpose
    of :func:`transpose_line_tile` with ordinary masked stores of rows lo..hi-1 only
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
    lanes = LINE_BYTES // y.itemsize
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
                y[yb + i * y_m] = relu_value(x[xb + i * x_m])
        else:
            for i in range(m):
                y[yb + i * y_m] = x[xb + i * x_m]


@njit(cache=True, nogil=True)
def _copy_transposed_run(x, xo, y, yo, m, n, x_m, buf, h):  # type: ignore[no-untyped-def]
    """copy_transposed's streamed tile when y's rows follow one another (y_n == m) and
    start ``h`` > 0 elements before a line boundary: the tile's output is one run of
    m x n elements, transposed into ``buf`` at the same offset within a line as y[yo],
    then written to y as whole lines with non-temporal stores; only the run's first and
    last partial lines take ordinary stores.  Row by row, each row's head and tail would
    be partial lines written element by element and read for ownership (a permute into
    numpy.empty's out, 16 bytes into a line, rows of 48 float32: 1.3-1.4x the time of a
    line-aligned out)."""
    lanes = LINE_BYTES // y.itemsize
    isz = y.itemsize
    total = m * n
    b0 = ((lanes - h) * isz - element_address(buf, 0) % LINE_BYTES) // isz % lanes
    for jt in range((n + lanes - 1) // lanes):
        j0 = min(jt * lanes, n - lanes)
        for it in range((m + lanes - 1) // lanes):
            i0 = min(it * lanes, m - lanes)
            transpose_line_tile(x, xo + i0 * x_m + j0, x_m, buf, b0 + i0 + j0 * m, m, False)
    e = h + (total - h) // lanes * lanes
    for i in range(h):
        y[np.uint64(yo + i)] = buf[b0 + i]
    for i in range(h, e, lanes):
        _store_line_nt(y, yo + i, buf, b0 + i)
    for i in range(e, total):
        y[np.uint64(yo + i)] = buf[b0 + i]


@njit(cache=True, nogil=True)
def copy_transposed(x, xo, y, yo, m, n, x_m, y_n, stream=False, buf=None, prev=-1,  # type: ignore[no-untyped-def]
                     nxt_x=-1, nxt_y=-1):
    """y[yo + i + j*y_n] = x[xo + i*x_m + j] for i < m, j < n (both at least a line's
    worth of elements): a transpose between x's unit stride and y's, a line by a line
    in registers (:func:`transpose_line_tile`).  In blocks of _TRANSPOSE_BLOCK values of
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
    lanes = LINE_BYTES // y.itemsize
    nj = (n + lanes - 1) // lanes
    addr = element_address(y, yo)
    if (stream and m >= 3 * lanes and (y_n * y.itemsize) % LINE_BYTES == 0
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
                        transpose_line_tile(x, xo + i0 * x_m + j0, x_m, y, yo + i0 + j0 * y_n,
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
                transpose_line_tile(x, xo + i0 * x_m + j0, x_m, y, yo + i0 + j0 * y_n, y_n,
                                     False)
                i += lanes
        ib = ie


@njit(cache=True, nogil=True)
def copy_tile(x, xo, y, yo, m, n, x_m, x_n, y_m, y_n, relu, stream=False, buf=None, prev=-1,  # type: ignore[no-untyped-def]
               nxt_x=-1, nxt_y=-1):
    """y[yo + i*y_m + j*y_n] = f(x[xo + i*x_m + j*x_n]) over an m x n tile.  ``stream``
    (the program's output streams to memory, lower.streams_out): whole lines of y are
    written with non-temporal stores where the tile writes them along y's unit stride.
    ``buf``: the worker's scratch, for _copy_transposed_run (None: not used); ``prev``,
    ``nxt_x``, ``nxt_y``: see copy_transposed."""
    if _swap_for_writes(m, n, y_m, y_n):
        m, n = n, m
        x_m, x_n = x_n, x_m
        y_m, y_n = y_n, y_m
    lanes = LINE_BYTES // y.itemsize
    if not relu and y_m == 1 and x_n == 1 and m >= lanes and n >= lanes:
        copy_transposed(x, xo, y, yo, m, n, x_m, y_n, stream, buf, prev, nxt_x, nxt_y)
        if stream:
            store_fence()
        return
    if abs(x_m) * y.itemsize < LINE_BYTES or m <= _GATHER_BLOCK:
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
def relu_tile(y, yo, m, n, y_m, y_n):  # type: ignore[no-untyped-def]
    if _swap_for_writes(m, n, y_m, y_n):
        m, n = n, m
        y_m, y_n = y_n, y_m
    for j in range(n):
        for i in range(m):
            p = yo + j * y_n + i * y_m
            y[p] = relu_value(y[p])
