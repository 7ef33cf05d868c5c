"""The blocked write-back: a program whose output tiles cannot be written along the
output's own strides runs block by block through a stage in cache, each block then
copied into the output (and the block copy of Copy programs that assemble out's runs).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import carray, njit, prange, types
from numba.extending import intrinsic

from teir_plan.executor.copy_kernels import (
    copy_tile,
    transpose_line_tile,
)
from teir_plan.executor.entries import (
    call_blocked,
    compiled_address,
)
from teir_plan.executor.intrinsics import (
    element_address,
    store_fence,
    store_nontemporal,
    to_next_line,
)
from teir_plan.executor.intrinsics import store_line_nt as _store_line_nt
from teir_plan.executor.tables import CB_IN, CB_OUT, COMBO_LEN
from teir_plan.executor.walker import (
    WITH_IN_WALKER,
    collapsed_offsets,
    loop_iterations,
    next_offsets,
    thread_chunk,
    walk_seq,
)
from teir_plan.isa import LINE_BYTES
from teir_plan.tilekinds.table import (
    B_IN,
    B_OUT,
    B_SIZE,
    BLOCK_LEN,
    LOOP_LEN,
    OUTER_LEN,
    T_SCRATCH,
)

# A blocked write-back's rows of non-temporal stores at least this long may be written
# in any order (see _copy_block).
_STREAM_ROW_BYTES = 256

# Each worker of a blocked program assembles out's runs in a buffer of this size before
# writing them (see _copy_block_streamed): the runs of a block, or a line's worth of
# rows of them, fit beside the stage in L2.
_RUN_BUFFER_BYTES = 256 * 1024
_RUN_L1_BYTES = 32 * 1024


# --- Blocked write-back -------------------------------------------------------------
# A program whose output tiles cannot be written along the output's own strides runs
# block by block: the block's loops write a small stage buffer in cache (in a layout
# whose tiles BLAS can address), then one copy moves the block into the output.  The
# output is written once, by whole runs along its unit stride; no transposed operand
# and no full-size staging buffer goes through memory.
#
# ``outer``: one row per loop around the blocks (tilekinds.table.OUTER_FIELDS, the loop
# table's first columns); ``block``: one row per output axis of a block
# (tilekinds.table.BLOCK_FIELDS: size, the stage's stride as ``in``, out's stride).
# ``inner`` and ``tile`` are the block program's tables (its output is the stage, so
# their out strides are stage strides).


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
    """The offsets (tables.COMBO_FIELDS: along the stage's strides, along out's) of every
    combination of the given block rows' indices, the last row fastest."""
    count = 1
    for t in range(nrows):
        count *= block[rows[t], B_SIZE]
    offs = np.zeros((count, COMBO_LEN), np.int64)
    idx = np.zeros(max(nrows, 1), np.int64)
    so = 0
    yo = 0
    for c in range(count):
        offs[c, CB_IN] = so
        offs[c, CB_OUT] = yo
        t = nrows - 1
        while t >= 0:
            r = rows[t]
            idx[t] += 1
            so += block[r, B_IN]
            yo += block[r, B_OUT]
            if idx[t] < block[r, B_SIZE]:
                break
            so -= block[r, B_IN] * block[r, B_SIZE]
            yo -= block[r, B_OUT] * block[r, B_SIZE]
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
    through registers a line at a time (:func:`transpose_line_tile`).

    All of it is in this one function on purpose: a call to a compiled function that
    passes an array updates reference counts with locked instructions, and a locked
    instruction drains the write-combining buffers (a run per call measured 3-20x
    slower)."""
    lanes = LINE_BYTES // y.itemsize
    nrows = block.shape[0]
    q = block[ri, B_SIZE]
    x_q = block[ri, B_IN]
    if rp >= 0:
        npj, y_p = block[rp, B_SIZE], block[rp, B_OUT]
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
            if not in_run[r] and block[r, B_SIZE] > 1 and block[r, B_OUT] == run:
                nxt = r
        if nxt < 0:
            break
        longer = run * block[nxt, B_SIZE]
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
        so = xo + rests[t, CB_IN]
        yb = yo + rests[t, CB_OUT]
        done = 0  # rp's values already written to out (when rp is not in the run)
        for jt in range(nj):
            j0 = min(jt * lanes, npj - lanes) if full else jt * lanes
            rows = lanes if full else min(lanes, npj - j0)
            for u in range(subs.shape[0]):
                xs = so + subs[u, CB_IN] + j0
                bb = subs[u, CB_OUT] + (j0 * y_p if p_in else 0)
                if full:
                    for it in range(ni):
                        i0 = min(it * lanes, q - lanes)
                        transpose_line_tile(stage, xs + i0 * x_q, x_q, buf, bb + i0, ld, False)
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
        if abs(block[r, B_OUT]) < abs(block[ri, B_OUT]):
            ri = r
    streaming = block[ri, B_OUT] == 1
    if streaming:
        rp = -1
        if block[ri, B_IN] != 1:
            for r in range(nrows):
                if r != ri and block[r, B_IN] == 1 and block[r, B_SIZE] > 1:
                    rp = r
        lanes = LINE_BYTES // y.itemsize
        if (block[ri, B_IN] == 1 or rp >= 0) and block[ri, B_SIZE] * lanes <= buf.shape[0]:
            _copy_block_streamed(stage, y, yo, block, ri, rp, buf, xo)
            return
    # Otherwise a 2-D copy tile.  Streaming stores (out's unit stride along i) need no
    # locality between rows once each row is a few whole lines, so the tile's second
    # axis is then the stage's own unit stride: the lines the rows gather stay in L1
    # for the next row.  Shorter rows are continued by the next row along out (else the
    # write-combining buffers would send half-written lines to memory).
    col = B_IN if streaming and block[ri, B_SIZE] * y.itemsize >= _STREAM_ROW_BYTES else B_OUT
    rj = -1
    for r in range(nrows):
        if r != ri and (rj < 0 or abs(block[r, col]) < abs(block[rj, col])):
            rj = r
    m = block[ri, B_SIZE]
    if rj >= 0:
        n, s_n, y_n = block[rj, B_SIZE], block[rj, B_IN], block[rj, B_OUT]
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
        so, yt = xo + rests[t, CB_IN], yo + rests[t, CB_OUT]
        if streaming:
            _copy_rows_nt(stage, so, y, yt, m, n, block[ri, B_IN], s_n, y_n)
        else:
            copy_tile(stage, so, y, yt, m, n, block[ri, B_IN], s_n, block[ri, B_OUT], y_n, False)


@njit(cache=True, nogil=True)
def copy_runs_chunk(x, y, loops, npar, tile, block, start, stop):  # type: ignore[no-untyped-def]
    """Iterations [start, stop) of a Copy program run through the block copy (see
    run_copy_runs, which calls this once per worker)."""
    buf = np.empty(_RUN_BUFFER_BYTES // y.itemsize, y.dtype)
    for it in range(start, stop):
        o0, _o1, o2 = collapsed_offsets(loops, npar, tile, it)
        _copy_block(x, y, o2, block, buf, o0)
    store_fence()


@njit(cache=True, nogil=True, parallel=True)
def run_copy_runs(x, y, loops, npar, tile, block, nchunks):  # type: ignore[no-untyped-def]
    """Run a Copy program whose tiles write rows too short to stream on their own
    (lower.copy_runs): each iteration of its parallel loops copies the block of its
    sequential and primitive axes (``block``: size, x's stride as ``in``, y's; outermost
    in y first) with the block copy, which assembles y's runs in ``buf`` and streams them
    whole.  The addresses are the program's own, proven by checks.py."""
    total = loop_iterations(loops, npar)
    for c in prange(nchunks):
        start, stop = thread_chunk(c, total, nchunks)
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
    o0, o1, o2 = collapsed_offsets(outer, outer.shape[0], tile, start)
    for it in range(start, stop):
        n0, n1, n2 = next_offsets(outer, outer.shape[0], tile, it, stop)
        walk_seq(x0, x1, stage, inner, 0, tile, o0, o1, 0, scratch, iparams, consts,
                  n0, n1, idx, WITH_IN_WALKER)
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
    total = loop_iterations(outer, outer.shape[0])
    for c in prange(nchunks):
        start, stop = thread_chunk(c, total, nchunks)
        if start < stop:
            call_blocked(fn, x0, x1, y, outer, inner, tile, block, stage_elements, consts,
                         start, stop)


def _blocked_entry(x0p, x0n, x1p, x1n, yp, yn, op, on, ip, i_n, tp, tn, bp, bn,  # type: ignore[no-untyped-def]
                   stage_elements, cp, cn, start, stop):
    """blocked_chunk on arrays given as (pointer, size or rows)."""
    blocked_chunk(carray(x0p, (x0n,)), carray(x1p, (x1n,)), carray(yp, (yn,)),
                  carray(op, (on, OUTER_LEN)), carray(ip, (i_n, LOOP_LEN)), carray(tp, (tn,)),
                  carray(bp, (bn, BLOCK_LEN)), stage_elements, carray(cp, (cn,)), start, stop)


def blocked_address(dtype: np.dtype) -> int:
    """The address of :func:`blocked_chunk` compiled for arrays of ``dtype``."""
    return compiled_address(_blocked_entry, dtype, abi="blocked")
