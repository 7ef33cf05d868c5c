"""The vector GEMM kernel: GEMM tiles that are long along one axis and short along the
others, computed as outer products in registers.

BLAS is at its best on large square-ish tiles; on a tile such as m = 432, n = 24,
k = 36 (a block of ``efbad,cf->abcde``) it spends as long packing and unpacking as
computing (92 GFLOP/s on a 2-core AVX-512 Xeon).  When one operand and the output
share a unit-stride axis (the *vector axis*, M or N), no packing is needed at all:
each step of the K loop loads a few vector registers of that operand along the vector axis,
broadcasts one element of the other operand per output row, and adds their products
into accumulators that stay in registers for the whole K loop; the output tile is
written once at the end (measured: the same blocks at 149 GFLOP/s).

:func:`gemm_vec` walks a tile in micro-tiles of ``rows x (lines x L)`` output elements
(``L`` elements per vector register: 16 float32 with AVX-512, 8 with AVX2, 4 with NEON;
the shape ``rows x lines`` is the target's, :mod:`teir_plan.isa`); each micro-tile is one call of
an intrinsic that emits the K loop as LLVM IR with the accumulators as loop-carried
vector values (numba has no SIMD types of its own).  A vector axis that ends in a
partial line ends in a micro-tile whose last line is read and written with masked loads
and stores (the elements past the tile are not touched).  The lines of the next
micro-tile along the vector axis are prefetched while the first row block computes (the
K rows are far apart in memory, too many streams for the hardware prefetchers); when the
executor says where the next tile reads and the tile is small, the next tile's lines are
prefetched into L2 over the whole of this one, so that its reads from memory overlap this
tile's arithmetic.

Every element read or written is one the tile's own loops would touch: the same proofs
of reach as for any GEMM tile cover it.
"""

from __future__ import annotations

import numpy as np
from numba import carray, njit

from teir_plan.executor.entries import compiled_address
from teir_plan.executor.intrinsics import (
    element_address,
    store_fence,
    to_next_line,
)
from teir_plan.executor.micro_ir import (
    LINES,
    QUAD_LINES,
    QUAD_ROWS,
    ROWS,
    VECTOR_BYTES,
    micro_tile_ir,
)
from teir_plan.isa import LINE_BYTES

# Tile rules' constants the planner also reads (its prefetch and 4K-aliasing rules).
from teir_plan.tiles import BLOCKING, NEXT_TILE_PREFETCH_BYTES, PAGE_BYTES

# The row steps of the main and the wide micro-tiles, from the blocking record.
ROW_STEPS = BLOCKING.row_steps
QUAD_ROW_STEPS = BLOCKING.wide_row_steps


@njit(cache=True, nogil=True, inline="always")
def _row_step(n):  # type: ignore[no-untyped-def]
    """The rows of the next main micro-tile when ``n`` rows are left (the blocking
    record's row steps, largest first: ROWS, then 4, 2, 1)."""
    for rows in ROW_STEPS:
        if n >= rows:
            return rows
    return 1


@njit(cache=True, nogil=True, inline="always")
def _row_calls(n):  # type: ignore[no-untyped-def]
    """How many micro-tiles of :func:`_row_step` rows cover ``n`` rows."""
    calls = 0
    r = 0
    while r < n:
        r += _row_step(n - r)
        calls += 1
    return calls


@njit(cache=True, nogil=True, inline="always")
def _quad_rows(n):  # type: ignore[no-untyped-def]
    """The rows of the next QUAD_LINES-vector micro-tile when ``n`` rows are left."""
    for rows in QUAD_ROW_STEPS:
        if n >= rows:
            return rows
    return 1


@njit(cache=True, nogil=True)
def _rows_alias(V, vo, vk, K, C, co, cn, n):  # type: ignore[no-untyped-def]
    """Whether some K row of V (from V[vo], ``vk`` apart) starts at the same offset
    within a page as some row of C (from C[co], ``cn`` apart), to the cache line."""
    isz = C.itemsize
    lines = PAGE_BYTES // LINE_BYTES
    d = element_address(V, vo) - element_address(C, co)
    if d % LINE_BYTES != 0:
        return False  # the rows' lines straddle each other's: no exact match
    seen = 0  # bit i: a row of V starts in line i of a page (64 lines a page)
    for p in range(min(K, lines)):
        seen |= 1 << (((d + p * vk * isz) % PAGE_BYTES) // LINE_BYTES)
    hit = 0
    for r in range(min(n, lines)):
        hit |= 1 << (((r * cn * isz) % PAGE_BYTES) // LINE_BYTES)
    return (seen & hit) != 0


@njit(cache=True, nogil=True, inline="always")
def _next_tile_share(call, calls, nl, nxt, ns, nxs, line, v, r):  # type: ignore[no-untyped-def]
    """(nf, nfl, sf, sfl) for micro-tile call ``call`` of ``calls`` at vector offset
    ``v`` and row ``r``: an even share of the next tile's lines in each K row, its ``nl``
    lines of V (from V offset ``nxt``) then its ``ns`` lines of S (from S offset
    ``nxs``).  The call prefetches ``nfl`` lines of V from ``nf`` and ``sfl`` of S from
    ``sf``, offsets relative to its own in V and S; (0, 0, 0, 0) without calls."""
    if calls == 0:
        return 0, 0, 0, 0
    total = nl + ns
    l0 = call * total // calls
    l1 = (call + 1) * total // calls
    vl = max(min(l1, nl) - l0, 0)
    s0 = max(l0, nl)
    return nxt + l0 * line - v, vl, nxs + (s0 - nl) * line - r, max(l1 - s0, 0)


@njit(cache=True, nogil=True, inline="always")  # compiled once, in its entry
def gemm_vec(V, vo, vk, S, so, sk, sn, C, co, cn, mv, n, K, first, stream=False, relu=False,  # type: ignore[no-untyped-def]
             nxt=0, nxs=0):
    """C[co + r*cn + v] = (or +=, unless ``first``) sum_{p < K} V[vo + p*vk + v] *
    S[so + p*sk + r*sn] for v < mv (the vector axis: unit stride in V and C) and
    r < n; then max(., 0) if ``relu``.

    ``stream``: the tile is written once and not read again soon (the executor's rule,
    :func:`teir_plan.executor.lower.streams_out`): whole lines go to memory with
    non-temporal stores.  Those need 64-byte aligned lines: a vector axis that starts
    inside a line runs its first partial line with ordinary stores, and a row stride
    that is not a whole number of lines keeps them all ordinary.

    ``nxt``, ``nxs``: the offsets in V and S of the tile that runs next, from ``vo`` and
    ``so`` (0: unknown, or the same lines); its lines are prefetched while this tile
    computes.  The caller passes them only for a tile that really runs next, so every
    prefetched line is one that tile reads."""
    lanes = VECTOR_BYTES // C.itemsize  # elements of one vector register
    line = LINE_BYTES // C.itemsize  # ... of one cache line
    w = LINES * lanes
    nt = False
    v = 0
    # Streaming whole lines needs strips of whole lines (with 16-byte vectors and two
    # of them a strip is half a line: its halves would leave the write-combining buffer
    # apart, as partial writes).
    if stream and first and mv >= line and w * C.itemsize >= LINE_BYTES:
        # Whole lines need every row to start at the same offset within a line.
        addr = element_address(C, co)
        if addr % C.itemsize == 0 and (n == 1 or (cn * C.itemsize) % LINE_BYTES == 0):
            nt = True
            v = to_next_line(addr, C.itemsize)
            pre = 0
            while pre < v:  # the first partial line, up to the next line boundary
                r = 0
                while r < n:
                    rows = _row_step(n - r)
                    micro_tile_ir(rows, 1, V, vo + pre, vk, S, so + r * sn, sk, sn, C,
                                  co + r * cn + pre, cn, K, first, 0, min(lanes, v - pre),
                                  False, relu, 0, 0, 0, 0)
                    r += rows
                pre += lanes
    # Each micro-tile's first row block prefetches the lines of a later micro-tile
    # along the vector axis (the K rows are far apart: too many streams for the hardware
    # prefetchers).  With two full row blocks or more, two on: one on arrives too late
    # when the operand streams from memory (docs/decisions.md); the first column's
    # second row block then fetches the second column.
    ahead = 2 if n >= 2 * ROWS else 1
    start = v
    # The next tile's lines (``nxt``, ``nxs``: its V and S offsets from this one's; 0 =
    # none or the same lines) are prefetched into L2 spread evenly over this tile's
    # micro-tile calls, so that its reads from memory overlap this tile's arithmetic:
    # V's lines, and S's where its rows are contiguous (the broadcast operand of a Gram
    # matrix's K x n rows).  Only for small tiles: two large tiles' lines in L2 at once
    # evict each other.  S's lines, as V's, went from memory or L3 while the tile
    # computed, not at its start: ki,kj->ij over 64,000 x 32 float32 in L3, one thread,
    # 65 -> 88 GFLOP/s at AVX2 width and 147 -> 170 at AVX-512 (docs/decisions.md).
    nl = (mv + line - 1) // line if nxt != 0 else 0
    if K * nl * LINE_BYTES > NEXT_TILE_PREFETCH_BYTES:  # lower.vec_line_bytes
        nl = 0
    ns = (n + line - 1) // line if nxs != 0 and sn == 1 else 0
    if K * (nl + ns) * LINE_BYTES > NEXT_TILE_PREFETCH_BYTES:
        ns = 0
    calls = 0
    if nl + ns > 0:
        calls = ((mv - v + w - 1) // w) * _row_calls(n)
    call = 0
    left_lines = (mv - v + lanes - 1) // lanes
    if n >= QUAD_ROWS and left_lines == QUAD_LINES:
        if calls > 0:
            calls = 0
            r = 0
            while r < n:
                r += _quad_rows(n - r)
                calls += 1
        tail = mv - v - (QUAD_LINES - 1) * lanes
        r = 0
        while r < n:
            rows = _quad_rows(n - r)
            nf, nfl, sf, sfl = _next_tile_share(call, calls, nl, nxt, ns, nxs, line, v, r)
            call += 1
            micro_tile_ir(rows, QUAD_LINES, V, vo + v, vk, S, so + r * sn, sk, sn, C,
                          co + r * cn + v, cn, K, first, 0, tail, nt, relu, nf, nfl, sf, sfl)
            r += rows
        if nt:
            store_fence()
        return
    paired = n >= 2 * ROWS and v + 4 * w <= mv and _rows_alias(V, vo + v, vk, K, C,
                                                                co + v, cn, n)
    while paired and v + 2 * w <= mv:
        # Two full strips at a time, alternating row block by row block: the loads that
        # follow a micro-tile's stores then read the other strip's columns, 192 bytes
        # from the stored ones (see _rows_alias).
        r = 0
        while r < n:
            rows = _row_step(n - r)
            for half in range(2):
                vv = v + half * w
                # The first row block fetches this strip's successor in the next pair.
                pf = 2 * w if r == 0 and vv + 3 * w <= mv else 0
                nf, nfl, sf, sfl = _next_tile_share(call, calls, nl, nxt, ns, nxs, line,
                                                    vv, r)
                call += 1
                micro_tile_ir(rows, LINES, V, vo + vv, vk, S, so + r * sn, sk, sn, C,
                              co + r * cn + vv, cn, K, first, pf, lanes, nt, relu, nf, nfl,
                              sf, sfl)
            r += rows
        v += 2 * w
    while v < mv:
        left = mv - v
        left_lines = (left + lanes - 1) // lanes
        lines = min(LINES, left_lines)
        if left_lines == 4 and LINES == 3:
            # 2 + 2 vectors, not 3 + 1: a 1-vector strip's K steps wait on nine loads for
            # eight products (docs/decisions.md).
            lines = 2
        tail = min(lanes, left - (lines - 1) * lanes)
        far = ahead * w if v + (ahead + 1) * w <= mv else 0
        near = w if v + 2 * w <= mv else 0
        r = 0
        while r < n:
            rows = _row_step(n - r)
            pf = 0
            if rows == ROWS:
                if r == 0:
                    pf = near if v == start else far
                elif r == ROWS and v == start and ahead == 2:
                    pf = far
            nf, nfl, sf, sfl = _next_tile_share(call, calls, nl, nxt, ns, nxs, line, v, r)
            call += 1
            micro_tile_ir(rows, lines, V, vo + v, vk, S, so + r * sn, sk, sn, C,
                          co + r * cn + v, cn, K, first, pf, tail, nt, relu, nf, nfl, sf, sfl)
            r += rows
        v += lines * lanes
    if nt:
        store_fence()


def _entry(vp, vn, vo, vk, sp, sn_, so, sk, sn, cp, cn_, co, cn, mv, n, k, flags, bp, bn,  # type: ignore[no-untyped-def]
           nxt, nxs):
    """gemm_vec on arrays given as (pointer, size); ``flags``: first (1), stream (2),
    relu (4); ``nxt``, ``nxs`` the next tile's offsets in V and S; the buffer unused."""
    gemm_vec(carray(vp, (vn,)), vo, vk, carray(sp, (sn_,)), so, sk, sn, carray(cp, (cn_,)),
             co, cn, mv, n, k, (flags & 1) != 0, (flags & 2) != 0, (flags & 4) != 0, nxt,
             nxs)


def entry_address(dtype: np.dtype) -> int:
    """The address of the compiled :func:`gemm_vec` for arrays of ``dtype`` (float32 or
    float64), for :func:`teir_plan.executor.entries.call_entry` (linked into the walker,
    its micro-tiles were compiled into every runner on a cold first call)."""
    return compiled_address(_entry, dtype)
