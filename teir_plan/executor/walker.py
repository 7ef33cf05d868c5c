"""The jitted executor's loop walker: one loop nest that runs any lowered TEIR program.

Nothing here knows about TEIR records.  :mod:`teir_plan.executor.lower` turns a
program into integer tables, and these kernels only walk them:

* ``loops``: one row per loop axis, indexed by the ``L_*`` columns of
  :mod:`teir_plan.tilekinds.table` (size, in0's, in1's and out's strides, is_k); the
  first ``npar`` rows are the parallel axes, the rest the sequential axes in schedule
  order.
* ``tile``: the primitive's parameters, indexed by the ``T_*`` slots of
  :mod:`teir_plan.tilekinds.table`.

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

The tile kinds it runs are in copy_kernels.py and gemm_tiles.py (and the vector kernels'
own modules); those compiled on demand are called through their entry points' addresses
(the end of this module).  The blocked runners are in blocked.py.
"""

from __future__ import annotations

import numpy as np
from numba import carray, njit, prange

from teir_plan.executor.blas import call_gemm
from teir_plan.executor.complex_tiles import copy_elements_entry
from teir_plan.executor.copy_kernels import (
    copy_tile,
    relu_tile,
)
from teir_plan.executor.elements import relu_value
from teir_plan.executor.entries import (
    call_chunk,
    call_entry,
    call_tile,
    compiled_address,
)
from teir_plan.executor.gemm_tiles import (
    dot_strided,
    dot_tile_kernel,
    gemm_blas,
    gemm_loops,
    gemm_vec_packed,
    row_tile_kernel,
    set_int,
)
from teir_plan.executor.intrinsics import store_fence
from teir_plan.executor.tables import C_ONE, C_ZERO
from teir_plan.tilekinds.blas import MODE as MODE_BLAS
from teir_plan.tilekinds.dot import MODE as MODE_DOT
from teir_plan.tilekinds.kind import TileKind
from teir_plan.tilekinds.row import MODE as MODE_ROW
from teir_plan.tilekinds.table import (
    KIND_COPY,
    KIND_RELU,
    L_IN0,
    L_IN1,
    L_IS_K,
    L_OUT,
    L_SIZE,
    LOOP_LEN,
    T_A_K,
    T_A_M,
    T_AHEAD,
    T_B_K,
    T_B_N,
    T_BLAS_INT,
    T_BR,
    T_C_M,
    T_C_N,
    T_FIRST_ZERO,
    T_GEMM_FN,
    T_K,
    T_KIND,
    T_LAST_RELU,
    T_LDA,
    T_LDB,
    T_LDC,
    T_M,
    T_MODE,
    T_N,
    T_ORIGIN0,
    T_ORIGIN1,
    T_ORIGIN2,
    T_ROW_PAR,
    T_SCRATCH,
    T_STREAM,
    T_SWAP,
    T_TILE_FN,
    T_TRANSA,
    T_TRANSB,
    T_VEC_FN,
    T_VEC_P,
    T_VEC_T,
)
from teir_plan.tilekinds.vec import MODE as MODE_VEC

# _run_tile and walk_seq are inlined into the runners that call them: numba compiles
# each function apart and then optimizes it again with all of its callees linked in, so
# every layer of calls costs its whole subtree once more on a cold cache; inlined, a
# first call compiles faster and runs as fast (docs/decisions.md).
# The walker is compiled twice: with the tile kinds whose kernels it contains
# (TileKind.in_walker: rows, dot products, loops) and without them, for programs whose
# tiles all run through an address (BLAS, the vector kernels, copies).  ``in_walker``,
# passed down as one of these two module constants, lets numba prune the other kinds'
# branches before it types them, so a first vector-kernel product compiles none of
# them: 7.6-8.0 s against 11.7 for a 256^2 float64 product's first call (2-core Xeon).
WITH_IN_WALKER = True
WITHOUT_IN_WALKER = False


@njit(cache=True, nogil=True, inline="always")
def _run_tile(x0, o0, x1, o1, y, o2, tile, first, last, scratch, iparams, consts, n0, n1,  # type: ignore[no-untyped-def]
              p2, in_walker):
    """Run one tile at offsets o0, o1, o2; ``n0``, ``n1``: the in0 and in1 offsets of
    the tile that runs next on this worker (-1: none), for the vector kernel's prefetch;
    for a Copy tile, its in0 and out offsets, and ``p2`` the out offset of the tile that
    ran before it (see copy_transposed).  ``in_walker``: WITH_IN_WALKER or
    WITHOUT_IN_WALKER (above)."""
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
        if tile[T_VEC_P]:  # gemm_vec_packed, through _packed_entry: ``last`` is relu
            call_tile(tile[T_TILE_FN], x0, o0, x1, o1, y, o2, tile, zero_first, relu, scratch,
                      iparams, consts, n0, n1, p2)
            return
        # The transposed kernel (out has its unit stride along the rows) is given out's
        # stride along the vector axis, the vector kernel out's stride along the rows.
        transposed = tile[T_VEC_T] != 0
        fn = tile[T_VEC_T] if transposed else tile[T_VEC_FN]
        # The next tile's offsets in V and in S, from this tile's (0: none, or the same
        # lines), for the vector kernel's prefetch of the next tile.
        if tile[T_SWAP]:  # along N: B has unit stride along N, A is broadcast
            nxt = n1 - o1 if n1 >= 0 else 0
            nxs = n0 - o0 if n0 >= 0 else 0
            cv = tile[T_C_N] if transposed else tile[T_C_M]
            call_entry(fn, x1, o1, tile[T_B_K], x0, o0, tile[T_A_K], tile[T_A_M], y, o2, cv,
                       tile[T_N], tile[T_M], tile[T_K], zero_first, stream, relu, scratch, nxt,
                       nxs)
        else:  # along M: A has unit stride along M, B is broadcast
            nxt = n0 - o0 if n0 >= 0 else 0
            nxs = n1 - o1 if n1 >= 0 else 0
            cv = tile[T_C_M] if transposed else tile[T_C_N]
            call_entry(fn, x0, o0, tile[T_A_K], x1, o1, tile[T_B_K], tile[T_B_N], y, o2, cv,
                       tile[T_M], tile[T_N], tile[T_K], zero_first, stream, relu, scratch, nxt,
                       nxs)
        return
    elif in_walker:
        if tile[T_MODE] == MODE_ROW:
            row_tile_kernel(x0, o0, x1, o1, y, o2, tile, tile[T_M], zero_first,
                            last and tile[T_LAST_RELU] != 0, consts[C_ZERO])
            return
        elif tile[T_MODE] == MODE_DOT:
            dot_tile_kernel(x0, o0, x1, o1, y, o2, tile, zero_first, consts[C_ZERO])
        elif tile[T_M] == 1 and tile[T_N] == 1 and tile[T_K] == 1 and tile[T_BR] == 1:
            # Scalar multiply-add: the scalar schedules of spec examples 10.3.3 to 10.3.5.
            v = x0[o0] * x1[o1]
            y[o2] = v if zero_first else y[o2] + v
        else:
            gemm_loops(x0, o0, x1, o1, y, o2, tile, zero_first)
    if last and tile[T_LAST_RELU] != 0:
        relu_tile(y, o2, tile[T_M], tile[T_N], tile[T_C_M], tile[T_C_N])


@njit(cache=True, nogil=True, inline="always")
def walk_seq(  # type: ignore[no-untyped-def]
    x0, x1, y, loops, npar, tile, o0, o1, o2, scratch, iparams, consts, n0, n1, idx,
    in_walker,
):
    """Run the sequential loops (rows npar.. of ``loops``) from base offsets o0, o1, o2.
    ``n0``, ``n1``: the in0 and in1 offsets of the tile that runs after this walk's last
    one (-1: none).  With ``tile[T_AHEAD]`` each tile is told where the next one reads
    (see _run_tile)."""
    nloops = loops.shape[0]
    nseq = nloops - npar
    # One call of _run_tile, with typed arguments: each call site with other argument
    # types (a literal True or -1) compiles another copy of it and all it calls on a
    # cold cache (docs/decisions.md).  Without sequential loops the
    # odometer below runs the one tile and stops.
    none = np.int64(-1)
    ahead = tile[T_AHEAD] != 0
    copy = tile[T_KIND] == KIND_COPY and tile[T_STREAM] != 0
    prev2 = none
    for r in range(npar, nloops):
        if loops[r, L_SIZE] == 0:
            return
    # The odometer: the caller's buffer (at least nseq long), allocated once per worker,
    # not once per walk (512 x 32^3 batched products on one thread: 428-440 us with an
    # allocation per parallel iteration, 404-420 without).
    for q in range(nseq):
        idx[q] = 0
    has_k = False
    for r in range(npar, nloops):
        if loops[r, L_IS_K] != 0 and loops[r, L_SIZE] > 1:
            has_k = True
    while True:
        # True unless a K loop says otherwise, written as a comparison (always true) so
        # that numba types it bool, not Literal[True]: one _run_tile (see above).
        first = nseq >= 0
        last = first
        if has_k:
            for q in range(nseq):
                row = npar + q
                if loops[row, L_IS_K] != 0:
                    if idx[q] != 0:
                        first = False
                    if idx[q] != loops[row, L_SIZE] - 1:
                        last = False
        p0 = o0
        p1 = o1
        p2 = o2
        # Odometer step to the next tile: innermost axis fastest.
        q = nseq - 1
        while q >= 0:
            row = npar + q
            idx[q] += 1
            o0 += loops[row, L_IN0]
            o1 += loops[row, L_IN1]
            o2 += loops[row, L_OUT]
            if idx[q] < loops[row, L_SIZE]:
                break
            o0 -= loops[row, L_IN0] * loops[row, L_SIZE]
            o1 -= loops[row, L_IN1] * loops[row, L_SIZE]
            o2 -= loops[row, L_OUT] * loops[row, L_SIZE]
            idx[q] = 0
            q -= 1
        # The next tile's offsets: the odometer's, or after the last one the walk's
        # successor.
        nx0, nx1 = (n0, n1) if q < 0 else (o0, o1)
        if not ahead:
            nx0, nx1 = none, none
        if copy:
            # A Copy tile is told where the next tile of this walk reads and writes, and
            # where the one before it wrote (its rows may continue; see copy_transposed).
            nx0, nx1 = (o0, o2) if q >= 0 else (none, none)
        _run_tile(x0, p0, x1, p1, y, p2, tile, first, last, scratch, iparams, consts, nx0, nx1,
                  prev2, in_walker)
        prev2 = p2
        if q < 0:
            return


@njit(cache=True, nogil=True, inline="always")
def collapsed_offsets(rows, nrows, tile, it):  # type: ignore[no-untyped-def]
    """The three tensors' offsets at iteration ``it`` of the first ``nrows`` rows of
    ``rows`` (the loop table's columns, or a blocked program's outer table's) collapsed
    into one range, last row fastest, from the tile's origins."""
    o0 = tile[T_ORIGIN0]
    o1 = tile[T_ORIGIN1]
    o2 = tile[T_ORIGIN2]
    rem = it
    for r in range(nrows - 1, -1, -1):
        i = rem % rows[r, L_SIZE]
        rem //= rows[r, L_SIZE]
        o0 += i * rows[r, L_IN0]
        o1 += i * rows[r, L_IN1]
        o2 += i * rows[r, L_OUT]
    return o0, o1, o2


@njit(cache=True, nogil=True, inline="always")
def next_offsets(rows, nrows, tile, it, stop):  # type: ignore[no-untyped-def]
    """The offsets of iteration ``it + 1`` (see collapsed_offsets), or -1 for each when
    ``it`` is the last of the worker's iterations (``stop``)."""
    if it + 1 < stop:
        return collapsed_offsets(rows, nrows, tile, it + 1)
    none = np.int64(-1)
    return none, none, none


@njit(cache=True, nogil=True, inline="always")
def loop_iterations(rows, nrows):  # type: ignore[no-untyped-def]
    """The iterations of the first ``nrows`` loop rows collapsed into one range."""
    total = 1
    for r in range(nrows):
        total *= rows[r, L_SIZE]
    return total


@njit(cache=True, nogil=True, inline="always")
def thread_chunk(c, total, nchunks):  # type: ignore[no-untyped-def]
    """Worker ``c``'s contiguous share [start, stop) of ``total`` iterations."""
    return c * total // nchunks, (c + 1) * total // nchunks


@njit(cache=True, nogil=True)
def _par_rows(x0, x1, y, loops, npar, tile, consts, start, stop):  # type: ignore[no-untyped-def]
    """Iterations [start, stop) of a scalar-tile program with only parallel loops, in
    runs along its innermost loop (MODE_ROW with T_ROW_PAR): each iteration is one
    element, written once (parallel loops carry no K), so each run is one row tile."""
    n_last = loops[npar - 1, L_SIZE]
    zero_first = tile[T_FIRST_ZERO] != 0
    relu = tile[T_LAST_RELU] != 0
    it = start
    while it < stop:
        o0, o1, o2 = collapsed_offsets(loops, npar, tile, it)
        run = min(n_last - it % n_last, stop - it)
        row_tile_kernel(x0, o0, x1, o1, y, o2, tile, run, zero_first, relu, consts[C_ZERO])
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
        if loops[r, L_SIZE] == 0:
            return
    swap = tile[T_SWAP] != 0
    mm, nn = (tile[T_N], tile[T_M]) if swap else (tile[T_M], tile[T_N])
    w = tile[T_BLAS_INT]
    iparams = np.zeros(8, np.int64)
    ip32 = iparams.view(np.int32)
    set_int(iparams, ip32, w, 0, mm)
    set_int(iparams, ip32, w, 1, nn)
    set_int(iparams, ip32, w, 2, tile[T_K])
    set_int(iparams, ip32, w, 3, tile[T_LDA])
    set_int(iparams, ip32, w, 4, tile[T_LDB])
    set_int(iparams, ip32, w, 5, tile[T_LDC])
    set_int(iparams, ip32, w, 6, tile[T_TRANSA])
    set_int(iparams, ip32, w, 7, tile[T_TRANSB])
    ip = np.int64(iparams.ctypes.data)
    cp = np.int64(consts.ctypes.data)
    isz = np.int64(consts.itemsize)
    alpha = cp + C_ONE * isz
    beta = cp + (C_ZERO if tile[T_FIRST_ZERO] != 0 else C_ONE) * isz  # written over; added to
    # BLAS' A and B: in0 and in1, or in1 and in0 (C^T = B^T A^T) when swapped.
    base0, base1 = np.int64(x0.ctypes.data), np.int64(x1.ctypes.data)
    c_base = np.int64(y.ctypes.data)
    fn = tile[T_GEMM_FN]
    idx = np.zeros(max(nseq, 1), np.int64)
    for it in range(start, stop):
        o0, o1, o2 = collapsed_offsets(loops, npar, tile, it)
        for q in range(nseq):
            idx[q] = 0
        while True:
            a_ptr, b_ptr = base0 + o0 * isz, base1 + o1 * isz
            if swap:
                a_ptr, b_ptr = b_ptr, a_ptr
            call_gemm(fn, ip + 6 * w, ip + 7 * w, ip, ip + w, ip + 2 * w, alpha, a_ptr,
                      ip + 3 * w, b_ptr, ip + 4 * w, beta, c_base + o2 * isz, ip + 5 * w)
            # The odometer over the sequential loops, innermost fastest: walk_seq's step,
            # written out again on purpose (one inlined helper for both made 4096 batched
            # 16^3 products 10% slower on one thread: 595-671 us against 532-580).
            q = nseq - 1
            while q >= 0:
                row = npar + q
                idx[q] += 1
                o0 += loops[row, L_IN0]
                o1 += loops[row, L_IN1]
                o2 += loops[row, L_OUT]
                if idx[q] < loops[row, L_SIZE]:
                    break
                o0 -= loops[row, L_IN0] * loops[row, L_SIZE]
                o1 -= loops[row, L_IN1] * loops[row, L_SIZE]
                o2 -= loops[row, L_OUT] * loops[row, L_SIZE]
                idx[q] = 0
                q -= 1
            if q < 0:
                break


@njit(cache=True, nogil=True, inline="always")  # compiled once, in its entry
def run_chunk(x0, x1, y, loops, npar, tile, consts, start, stop, in_walker):  # type: ignore[no-untyped-def]
    """Run iterations [start, stop) of a program's first ``npar`` loop rows (collapsed
    into one range), each with all of its sequential loops; with ``npar`` 0 and the
    range [0, 1), the whole program with every loop sequential (parallel rows, if any,
    run in order).  ``in_walker``: see _run_tile."""
    if in_walker and tile[T_MODE] == MODE_ROW and tile[T_ROW_PAR] != 0:
        _par_rows(x0, x1, y, loops, npar, tile, consts, start, stop)
        return
    scratch = np.empty(max(tile[T_SCRATCH], 1), y.dtype)
    iparams = np.zeros(8, np.int64)
    idx = np.zeros(max(loops.shape[0], 1), np.int64)
    o0, o1, o2 = collapsed_offsets(loops, npar, tile, start)
    for it in range(start, stop):
        n0, n1, n2 = next_offsets(loops, npar, tile, it, stop)
        walk_seq(x0, x1, y, loops, npar, tile, o0, o1, o2, scratch, iparams, consts, n0, n1,
                  idx, in_walker)
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
    total = loop_iterations(loops, npar)
    for c in prange(nchunks):
        start, stop = thread_chunk(c, total, nchunks)
        if start < stop:
            call_chunk(fn, x0, x1, y, loops, npar, tile, consts, start, stop)


@njit(cache=True, nogil=True, parallel=True)
def run_blas_tiles(x0, x1, y, loops, npar, tile, consts, nchunks):  # type: ignore[no-untyped-def]
    """run_parallel for a program of plain BLAS tiles (lower.plain_blas)."""
    total = loop_iterations(loops, npar)
    for c in prange(nchunks):
        start, stop = thread_chunk(c, total, nchunks)
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
        start, stop = thread_chunk(c, total, nchunks)
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
        start, stop = thread_chunk(c, k, nchunks)
        partial[c] = dot_strided(x0, ao + start * sa, sa, x1, bo + start * sb, sb, stop - start,
                          consts[C_ZERO])
    acc = consts[C_ZERO]
    for c in range(nchunks):
        acc += partial[c]
    o2 = tile[T_ORIGIN2]
    v = acc if tile[T_FIRST_ZERO] != 0 else y[o2] + acc
    y[o2] = relu_value(v) if tile[T_LAST_RELU] != 0 else v


# --- Tile kinds compiled on demand (executor/entries.py) -----------------------------
# Copy/ReLU and BLAS tiles run through their addresses: linked into the walker, each was
# compiled again into every runner on a cold first call, whether its program had such
# tiles or not (a first vector-kernel product: 23-31 s, most of it these).


def _copy_entry(x0p, x0n, o0, x1p, x1n, o1, yp, yn, o2, tp, tn, first, last, sp, sn,  # type: ignore[no-untyped-def]
                ip, i_n, cp, cn, n0, n1, p2):
    """A Copy or ReLU tile (see _run_tile's arguments)."""
    tile = carray(tp, (tn,))
    copy_tile(carray(x0p, (x0n,)), o0, carray(yp, (yn,)), o2, tile[T_M], tile[T_N],
               tile[T_A_M], tile[T_A_K], tile[T_C_M], tile[T_C_N], tile[T_KIND] == KIND_RELU,
               tile[T_STREAM] != 0, carray(sp, (sn,)), p2, n0, n1)


def _blas_entry(x0p, x0n, o0, x1p, x1n, o1, yp, yn, o2, tp, tn, first, last, sp, sn,  # type: ignore[no-untyped-def]
                ip, i_n, cp, cn, n0, n1, p2):
    """A BLAS tile; ``first``: written over rather than added to."""
    gemm_blas(carray(x0p, (x0n,)), o0, carray(x1p, (x1n,)), o1, carray(yp, (yn,)), o2,
               carray(tp, (tn,)), first != 0, carray(sp, (sn,)), carray(ip, (i_n,)),
               carray(cp, (cn,)))


def _packed_entry(x0p, x0n, o0, x1p, x1n, o1, yp, yn, o2, tp, tn, first, last, sp, sn,  # type: ignore[no-untyped-def]
                  ip, i_n, cp, cn, n0, n1, p2):
    """A packed vector-kernel tile (gemm_vec_packed); ``first``: written over rather
    than added to; ``last``: ReLU applied."""
    tile = carray(tp, (tn,))
    gemm_vec_packed(carray(x0p, (x0n,)), o0, carray(x1p, (x1n,)), o1, carray(yp, (yn,)),
                     o2, tile, first != 0, tile[T_STREAM] != 0, last != 0, carray(sp, (sn,)),
                     carray(ip, (i_n,)))


_TILE_ENTRIES = {"copy": _copy_entry, "blas": _blas_entry, "vec_p": _packed_entry,
                 "copy_elements": copy_elements_entry}


def _chunk_entry(x0p, x0n, x1p, x1n, yp, yn, lp, ln, npar, tp, tn, cp, cn, start, stop):  # type: ignore[no-untyped-def]
    """run_chunk on arrays given as (pointer, size or rows), with the in-walker kinds."""
    run_chunk(carray(x0p, (x0n,)), carray(x1p, (x1n,)), carray(yp, (yn,)),
              carray(lp, (ln, LOOP_LEN)), npar, carray(tp, (tn,)), carray(cp, (cn,)), start, stop,
              WITH_IN_WALKER)


def _address_chunk_entry(x0p, x0n, x1p, x1n, yp, yn, lp, ln, npar, tp, tn, cp, cn, start,  # type: ignore[no-untyped-def]
                         stop):
    """run_chunk on arrays given as (pointer, size or rows), without the in-walker kinds
    (every tile through an address)."""
    run_chunk(carray(x0p, (x0n,)), carray(x1p, (x1n,)), carray(yp, (yn,)),
              carray(lp, (ln, LOOP_LEN)), npar, carray(tp, (tn,)), carray(cp, (cn,)), start, stop,
              WITHOUT_IN_WALKER)


def _blas_chunk_entry(x0p, x0n, x1p, x1n, yp, yn, lp, ln, npar, tp, tn, cp, cn, start, stop):  # type: ignore[no-untyped-def]
    """blas_tiles_chunk on arrays given as (pointer, size or rows)."""
    blas_tiles_chunk(carray(x0p, (x0n,)), carray(x1p, (x1n,)), carray(yp, (yn,)),
                     carray(lp, (ln, LOOP_LEN)), npar, carray(tp, (tn,)), carray(cp, (cn,)), start,
                     stop)


def blas_chunk_address(dtype: np.dtype) -> int:
    """The address of :func:`blas_tiles_chunk` compiled for arrays of ``dtype``, with
    run_chunk's C arguments (for steps_runner)."""
    return compiled_address(_blas_chunk_entry, dtype, abi="chunk")


def chunk_address(dtype: np.dtype, kind: TileKind) -> int:
    """The address of :func:`run_chunk` compiled for arrays of ``dtype``, for a program
    whose tiles run on ``kind``: the loop walker with its in-walker tile kinds
    (TileKind.in_walker) or without them; for run_parallel, run_split and
    run_chunk_at."""
    entry = _chunk_entry if kind.in_walker else _address_chunk_entry
    return compiled_address(entry, dtype, abi="chunk")


def tile_entry_address(kind: str, dtype: np.dtype) -> int:
    """The address of tile kind ``kind``'s ("copy", "blas", "vec_p", "copy_elements")
    entry point for arrays of
    ``dtype``, for :func:`teir_plan.executor.entries.call_tile`."""
    return compiled_address(_TILE_ENTRIES[kind], dtype, abi="tile")
