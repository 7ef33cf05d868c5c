"""The reductions' kernels along a kept unit stride (KIND_ROWS, see reduce.py): rows
accumulated four at a time into a block of the output vector that stays in L1, and short
weighted rows handed to BLAS' ?gemv."""

from __future__ import annotations

import numpy as np
from numba import njit

from teir_plan.executor.blas import call_gemv
from teir_plan.executor.half_bits import value
from teir_plan.executor.intrinsics import prefetch_element
from teir_plan.executor.reduce_runs import SUM_MATH, next_run, seek_run
from teir_plan.executor.tables import C_ONE, GEMV_FN, GEMV_INT_BYTES
from teir_plan.isa import LINE_BYTES
from teir_plan.tiles import (
    HALF_PREFETCH_MAX_ROW_BYTES,
    PREFETCH_MAX_ROW_BYTES,
    PREFETCH_MIN_ROW_BYTES,
    ROW_BLOCK_BYTES,
    ROW_GROUP,
    ROWS_PREFETCH_BYTES,
    SUMMED_N,
    SUMMED_W,
    SUMMED_X,
)

GEMV_MAX_ROWS = 1 << 30  # rows per ?gemv call (LP64 BLAS: 32-bit integers)


@njit(cache=True, nogil=True, fastmath=SUM_MATH, inline="always")
def _rows_segment(x, a, st, cnt, vs, nb, w, wa, wst, weighted, blk):  # type: ignore[no-untyped-def]
    """blk[:nb] = sum_{r < cnt} x[a + r*st + t*vs] (times w[wa + r*wst]), four rows per
    pass over blk (one load and store of blk per four rows read).  Elements are read
    through half_bits.value (16-bit operands widened to float32, blk's type)."""
    b = blk[:nb]
    for t in range(nb):
        b[t] = 0
    r = 0
    if vs == 1:
        lim = x.size - 1
        ahead = ROWS_PREFETCH_BYTES // x.itemsize  # (elements)
        fetch = st == nb and (
            (weighted and PREFETCH_MIN_ROW_BYTES <= nb * x.itemsize <= PREFETCH_MAX_ROW_BYTES)
            or (x.itemsize == 2 and nb * x.itemsize < HALF_PREFETCH_MAX_ROW_BYTES))
        while r + 4 <= cnt:
            p = a + r * st
            if fetch:  # the four rows' lines ROWS_PREFETCH_BYTES on
                for k in range(0, 4 * nb, LINE_BYTES // x.itemsize):
                    prefetch_element(x, min(p + ahead + k, lim))
            r0 = x[p:p + nb]
            r1 = x[p + st:p + st + nb]
            r2 = x[p + 2 * st:p + 2 * st + nb]
            r3 = x[p + 3 * st:p + 3 * st + nb]
            if weighted:
                q = wa + r * wst
                c0, c1, c2, c3 = (value(w[q]), value(w[q + wst]), value(w[q + 2 * wst]),
                                  value(w[q + 3 * wst]))
                for t in range(nb):
                    b[t] += ((c0 * value(r0[t]) + c1 * value(r1[t]))
                             + (c2 * value(r2[t]) + c3 * value(r3[t])))
            else:
                for t in range(nb):
                    b[t] += ((value(r0[t]) + value(r1[t]))
                             + (value(r2[t]) + value(r3[t])))
            r += 4
        while r < cnt:
            p = a + r * st
            r0 = x[p:p + nb]
            if weighted:
                c0 = value(w[wa + r * wst])
                for t in range(nb):
                    b[t] += c0 * value(r0[t])
            else:
                for t in range(nb):
                    b[t] += value(r0[t])
            r += 1
    else:
        for r in range(cnt):
            p = a + r * st
            if weighted:
                c0 = value(w[wa + r * wst])
                for t in range(nb):
                    b[t] += c0 * value(x[p + t * vs])
            else:
                for t in range(nb):
                    b[t] += value(x[p + t * vs])


# _rows_segment compiled once per value of ``weighted``, each a function of its own: a
# runtime ``weighted``, or both forms inlined in one caller, left LLVM's code for rows of
# 24 float32 2.6-5.5x slower (docs/decisions.md: narrow rows).
@njit(cache=True, nogil=True, fastmath=SUM_MATH)
def weighted_segment(x, a, st, cnt, vs, nb, w, wa, wst, blk):  # type: ignore[no-untyped-def]
    _rows_segment(x, a, st, cnt, vs, nb, w, wa, wst, True, blk)


@njit(cache=True, nogil=True, fastmath=SUM_MATH)
def plain_segment(x, a, st, cnt, vs, nb, w, wa, wst, blk):  # type: ignore[no-untyped-def]
    _rows_segment(x, a, st, cnt, vs, nb, w, wa, wst, False, blk)


@njit(cache=True, nogil=True, fastmath=SUM_MATH, inline="always")
def store_block(acc, nb, dst, db, dvec):  # type: ignore[no-untyped-def]
    """dst[db + t*dvec] = acc[t] for t < nb."""
    if dvec == 1:
        d = dst[db:db + nb]
        for t in range(nb):
            d[t] = acc[t]
    else:
        for t in range(nb):
            dst[db + t * dvec] = acc[t]


# Units of one segment each along the last kept axis, in one compiled loop per value of
# ``weighted`` (as the segments above): ``bkd->bd`` on 1e6 x 4 x 24 float32 spent some
# 15 ns a unit in reduce_chunk's per-unit placing and calls (docs/decisions.md).
@njit(cache=True, nogil=True, fastmath=SUM_MATH)
def weighted_units(x, xb, sx, cnt, st, c, vs, nb, w, wa, wst, acc, dst, db, sd, dvec):  # type: ignore[no-untyped-def]
    for t in range(cnt):
        _rows_segment(x, xb + t * sx, st, c, vs, nb, w, wa, wst, True, acc)
        store_block(acc, nb, dst, db + t * sd, dvec)


@njit(cache=True, nogil=True, fastmath=SUM_MATH)
def plain_units(x, xb, sx, cnt, st, c, vs, nb, w, wa, wst, acc, dst, db, sd, dvec):  # type: ignore[no-untyped-def]
    for t in range(cnt):
        _rows_segment(x, xb + t * sx, st, c, vs, nb, w, wa, wst, False, acc)
        store_block(acc, nb, dst, db + t * sd, dvec)


@njit(cache=True, nogil=True, fastmath=SUM_MATH, inline="always")
def _first_rows(x, xb, sx, cnt, st, g, nb, w, wa, wst, weighted, dst, db, sd):  # type: ignore[no-untyped-def]
    """dst[db + u*sd + t] = the sum of the first g (1 to 4) rows of unit u (times their
    weights), for u < cnt and t < nb: stored, so that out needs no zeroing pass."""
    # (unweighted: c0 unused, read where x has one)
    c0 = value(w[wa]) if weighted else value(x[xb])
    c1 = value(w[wa + wst]) if weighted and g > 1 else c0
    c2 = value(w[wa + 2 * wst]) if weighted and g > 2 else c0
    if g == 1:
        for u in range(cnt):
            p = xb + u * sx
            q = db + u * sd
            r0 = x[p:p + nb]
            d = dst[q:q + nb]
            for t in range(nb):
                d[t] = c0 * value(r0[t]) if weighted else value(r0[t])
    elif g == 2:
        for u in range(cnt):
            p = xb + u * sx
            q = db + u * sd
            r0 = x[p:p + nb]
            r1 = x[p + st:p + st + nb]
            d = dst[q:q + nb]
            for t in range(nb):
                d[t] = (c0 * value(r0[t]) + c1 * value(r1[t]) if weighted
                        else value(r0[t]) + value(r1[t]))
    elif g == 3:
        for u in range(cnt):
            p = xb + u * sx
            q = db + u * sd
            r0 = x[p:p + nb]
            r1 = x[p + st:p + st + nb]
            r2 = x[p + 2 * st:p + 2 * st + nb]
            d = dst[q:q + nb]
            for t in range(nb):
                d[t] = ((c0 * value(r0[t]) + c1 * value(r1[t])) + c2 * value(r2[t])
                        if weighted else (value(r0[t]) + value(r1[t])) + value(r2[t]))
    else:
        _four_rows(x, xb, sx, cnt, st, 0, nb, w, wa, wst, weighted, False, dst, db, sd)


@njit(cache=True, nogil=True, fastmath=SUM_MATH, inline="always")
def _four_rows(x, xb, sx, cnt, st, r, nb, w, wa, wst, weighted, add, dst, db, sd):  # type: ignore[no-untyped-def]
    """dst[db + u*sd + t] (+)= the sum of rows r to r + 3 of unit u (times their
    weights): added when ``add``, else stored (a constant at each call)."""
    k = wa + r * wst
    # (unweighted: c0 unused, read where x has one)
    c0 = value(w[k]) if weighted else value(x[xb])
    c1 = value(w[k + wst]) if weighted else c0
    c2 = value(w[k + 2 * wst]) if weighted else c0
    c3 = value(w[k + 3 * wst]) if weighted else c0
    for u in range(cnt):
        p = xb + u * sx + r * st
        q = db + u * sd
        r0 = x[p:p + nb]
        r1 = x[p + st:p + st + nb]
        r2 = x[p + 2 * st:p + 2 * st + nb]
        r3 = x[p + 3 * st:p + 3 * st + nb]
        d = dst[q:q + nb]
        for t in range(nb):
            v0, v1, v2, v3 = value(r0[t]), value(r1[t]), value(r2[t]), value(r3[t])
            v = ((c0 * v0 + c1 * v1) + (c2 * v2 + c3 * v3) if weighted
                 else (v0 + v1) + (v2 + v3))
            d[t] = d[t] + v if add else v


@njit(cache=True, nogil=True, fastmath=SUM_MATH, inline="always")
def _units_into(x, xb, sx, cnt, st, c, nb, w, wa, wst, weighted, dst, db, sd):  # type: ignore[no-untyped-def]
    """Units of c rows of nb unit-stride elements each, summed straight into their
    unit-stride output rows: the first 1-4 rows stored, then four rows a pass added, over
    blocks of units whose outputs stay in L1 (ROW_BLOCK_BYTES)."""
    g = c - 4 * ((c - 1) // 4)
    per = cnt if c <= 4 else max(1, ROW_BLOCK_BYTES // (dst.itemsize * nb))
    u = 0
    while u < cnt:
        m = min(per, cnt - u)
        _first_rows(x, xb + u * sx, sx, m, st, g, nb, w, wa, wst, weighted, dst,
                    db + u * sd, sd)
        r = g
        while r < c:
            _four_rows(x, xb + u * sx, sx, m, st, r, nb, w, wa, wst, weighted, True, dst,
                       db + u * sd, sd)
            r += 4
        u += m


# ... and straight into unit-stride outputs, a pass over a run of units per group of
# rows: no accumulator to zero and copy, and no per-unit call.  bkd->bd with rows of
# 24 float32 in L2, one core: 2.0-2.5x the units above with four rows, 3-4x with two or
# three; weighted 1.0-1.5x with 5 to 64 rows, unweighted 0.9-1.1x with 16 to 64
# (tiles.DIRECT_MAX_ROWS; docs/decisions.md: units straight into out).
@njit(cache=True, nogil=True, fastmath=SUM_MATH)
def weighted_into(x, xb, sx, cnt, st, c, nb, w, wa, wst, dst, db, sd):  # type: ignore[no-untyped-def]
    _units_into(x, xb, sx, cnt, st, c, nb, w, wa, wst, True, dst, db, sd)


@njit(cache=True, nogil=True, fastmath=SUM_MATH)
def plain_into(x, xb, sx, cnt, st, c, nb, w, wa, wst, dst, db, sd):  # type: ignore[no-untyped-def]
    _units_into(x, xb, sx, cnt, st, c, nb, w, wa, wst, False, dst, db, sd)


@njit(cache=True, nogil=True, fastmath=SUM_MATH)
def rows_unit(x, xb, vs, nb, w, wb, summed, weighted, s0, s1, idx, acc, blk):  # type: ignore[no-untyped-def]
    """KIND_ROWS: acc[:nb] = the sum of summed rows s0 <= s < s1 (flat over ``summed``)
    of nb elements along the vector axis, the first at x[xb]."""
    ns = summed.shape[0]
    n_in, st, wst = (summed[ns - 1, SUMMED_N], summed[ns - 1, SUMMED_X],
                     summed[ns - 1, SUMMED_W])
    for t in range(nb):
        acc[t] = 0
    outer = s0 // n_in
    r = s0 - outer * n_in
    xo = xb
    wo = wb
    xo, wo = seek_run(summed, idx, outer, xo, wo)
    s = s0
    while s < s1:
        left = min(n_in - r, s1 - s)
        while left > 0:
            c = min(ROW_GROUP, left)
            if weighted:
                weighted_segment(x, xo + r * st, st, c, vs, nb, w, wo + r * wst, wst, blk)
            else:
                plain_segment(x, xo + r * st, st, c, vs, nb, w, wo + r * wst, wst, blk)
            for t in range(nb):
                acc[t] += blk[t]
            r += c
            s += c
            left -= c
        r = 0
        xo, wo = next_run(summed, idx, xo, wo)


@njit(cache=True, nogil=True)
def gemv_rows(x, xb, st, nb, vs, w, wb, wst, s0, s1, acc, gemv, iparams, consts):  # type: ignore[no-untyped-def]
    """acc[:nb] = sum_{s0 <= r < s1} w[wb + r*wst] x[xb + r*st + t*vs] (t < nb) by BLAS
    ?gemv: with vs = 1 the rows are the columns of an nb x (s1 - s0) column-major matrix
    (rows too short for LLVM's vectorized loop: OpenBLAS' kernel keeps the sums in
    registers); else (st = 1, the summed runs no longer than vs) the runs are the
    columns of an (s1 - s0) x nb one, transposed (tiles.uses_gemv)."""
    for t in range(nb):
        acc[t] = 0
    width = gemv[GEMV_INT_BYTES]
    ip32 = iparams.view(np.int32)
    isz = np.int64(x.itemsize)
    ip = np.int64(iparams.ctypes.data)
    one = np.int64(consts.ctypes.data) + C_ONE * isz  # ?gemv's alpha and beta
    r = s0
    while r < s1:
        cnt = min(s1 - r, GEMV_MAX_ROWS)
        shape = (nb, cnt, st, wst, 1, ord("N")) if vs == 1 else (cnt, nb, vs, wst, 1, ord("T"))
        for i, v in enumerate(shape):
            if width == 8:
                iparams[i] = v
            else:
                ip32[i] = v
        call_gemv(gemv[GEMV_FN], ip + 5 * width, ip, ip + width, one,
                   np.int64(x.ctypes.data) + (xb + r * st) * isz, ip + 2 * width,
                   np.int64(w.ctypes.data) + (wb + r * wst) * isz, ip + 3 * width, one,
                   np.int64(acc.ctypes.data), ip + 4 * width)
        r += cnt
