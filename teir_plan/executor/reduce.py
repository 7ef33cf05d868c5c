"""Reductions: one pass over an operand, summing some of its axes (``ij->j``, ``ij->i``,
``ijk->ik``, ``ij->``), optionally weighted by a vector along the summed axes
(``ki,k->i``, ``ik,k->i``).

Memory-bound work: the kernels read each element once, in memory order, with the loop
along the operand's unit stride vectorized.  Two kernels, by where that unit stride is:

* ``KIND_INNER``: along a summed axis.  Each output element is a horizontal sum of runs
  (``ij->i``, ``ik,k->i``, ``ij->``).
* ``KIND_ROWS``: along a kept axis (the vector axis).  Whole rows are accumulated into
  an output vector (``ij->j``, ``ki,k->i``), a block of at most ``ROW_BLOCK_BYTES`` at
  a time so that the accumulator stays in L1.

Work is split over the threads either by outputs (``SPLIT_OUTPUTS``: disjoint output
elements, no partial sums) or, when the outputs are too few to share, by the summed
elements (``SPLIT_SUMMED``): each chunk of the summed range (``CHUNKS_PER_THREAD`` a
thread) is summed into a private partial result, and the partials are then added in
chunk order, so a result depends only on the thread count, never on which worker ran
which chunk.

Tables (int64, built by :mod:`teir_plan.planner.reduce`; every stride non-negative in
the operand, outer axes first): ``kept`` rows ``(n, stride x, stride out)``, ``vec``
``(n, stride x, stride out)`` (``KIND_ROWS`` only), ``summed`` rows ``(n, stride x,
stride w)``, the innermost summed axis last.  Every address is ``origin + sum(index *
stride)`` into a flat 1-D view; the planner proves those sums stay on elements.

Rounding: sums are reassociated (fastmath "reassoc", "contract" only: NaN and infinity
propagate as in numpy).  A run is summed in blocks of ``RUN_BLOCK`` elements, each by
LLVM's vectorized reduction (V = lanes x interleaved accumulators partial sums), the
block sums added in order; rows are accumulated ``ROW_GROUP`` at a time into a block
accumulator, then into the total.  The error of a sum of n terms is thus bounded by
about ``(RUN_BLOCK / V + n / RUN_BLOCK) eps sum|terms|`` (rows: ``(ROW_GROUP / 4 + n /
ROW_GROUP) eps``), plus ``nchunks`` for the partials: O(n / B) eps, well inside the
classic ``n eps`` bound of a sequential sum.  Short weighted rows on BLAS' ``?gemv``
(``uses_gemv``) are summed in BLAS' order, within that classic bound.
"""

from __future__ import annotations

import ctypes
import math
import os
from contextlib import nullcontext
from dataclasses import dataclass
from functools import cache

import numpy as np
from numba import njit, prange, types
from numba.extending import get_cython_function_address, intrinsic

from teir_plan.blaslib import numpy_openblas
from teir_plan.executor.blas import call_gemv
from teir_plan.executor.checks import as_type, flat_view
from teir_plan.executor.intrinsics import prefetch_element
from teir_plan.executor.threads import (
    blas_threads,
    get_num_threads,
    parallel_threads,
    parallel_usable,
)
from teir_plan.isa import LINE_BYTES
from teir_plan.tiles import (
    CHUNKS_PER_THREAD,
    DIRECT_MAX_ROWS,
    DOT_FOUR_MIN_BYTES,
    FLAT_MAX_NB,
    FLAT_MIN_WINDOWS,
    FLAT_WINDOW,
    KIND_INNER,
    KIND_ROWS,
    PREFETCH_MAX_ROW_BYTES,
    PREFETCH_MIN_ROW_BYTES,
    ROW_BLOCK_BYTES,
    ROW_GROUP,
    ROWS_PREFETCH_BYTES,
    SPLIT_OUTPUTS,
    SPLIT_SUMMED,
    output_chunks,
    uses_gemv,
)

RUN_BLOCK = 4096  # elements of a run summed by one vectorized reduction
GEMV_MAX_ROWS = 1 << 30  # rows per ?gemv call (LP64 BLAS: 32-bit integers)

# Reductions may be reassociated (vectorized, several partial sums) and a multiply-add
# fused; no other fast-math assumption (NaN and infinity propagate as in numpy).
_SUM_MATH = {"reassoc", "contract"}


@njit(cache=True, nogil=True, fastmath=_SUM_MATH, inline="always")
def _run_sum(x, o, s, n, w, ow, sw, weighted, zero):  # type: ignore[no-untyped-def]
    """sum_{p < n} x[o + p*s] (times w[ow + p*sw] when ``weighted``); unit strides are
    sliced from 0 so that LLVM loads whole vectors."""
    acc = zero
    if s == 1 and not weighted:
        a = x[o:o + n]
        for p in range(n):
            acc += a[p]
    elif s == 1 and sw == 1:
        a = x[o:o + n]
        b = w[ow:ow + n]
        for p in range(n):
            acc += a[p] * b[p]
    elif weighted:
        for p in range(n):
            acc += x[o + p * s] * w[ow + p * sw]
    else:
        for p in range(n):
            acc += x[o + p * s]
    return acc


@njit(cache=True, nogil=True, fastmath=_SUM_MATH, inline="always")
def _place(table, col, i, idx):  # type: ignore[no-untyped-def]
    """Set the odometer ``idx`` over ``table``'s rows to flat position ``i`` (last row
    fastest); return the offset sum(idx * table[:, col])."""
    off = 0
    for a in range(table.shape[0] - 1, -1, -1):
        n = table[a, 0]
        q = i // n
        idx[a] = i - q * n
        off += idx[a] * table[a, col]
        i = q
    return off


@njit(cache=True, nogil=True, fastmath=_SUM_MATH, inline="always")
def _whole_run(x, xb, w, wb, n, sx, sw, weighted, zero):  # type: ignore[no-untyped-def]
    """One run of n elements summed, RUN_BLOCK at a time."""
    total = zero
    q = 0
    while q < n:
        qe = min(n, q + RUN_BLOCK)
        total += _run_sum(x, xb + q * sx, sx, qe - q, w, wb + q * sw, sw, weighted, zero)
        q = qe
    return total


@njit(cache=True, nogil=True, fastmath=_SUM_MATH, inline="always")
def _four_block(x, p, sx, m, w, wq, weighted, zero):  # type: ignore[no-untyped-def]
    """The sums of m elements of four runs from x[p], x[p + sx], ... (times w[wq:])."""
    r0 = x[p:p + m]
    r1 = x[p + sx:p + sx + m]
    r2 = x[p + 2 * sx:p + 2 * sx + m]
    r3 = x[p + 3 * sx:p + 3 * sx + m]
    b0 = zero
    b1 = zero
    b2 = zero
    b3 = zero
    if weighted:
        v = w[wq:wq + m]
        for e in range(m):
            b0 += r0[e] * v[e]
            b1 += r1[e] * v[e]
            b2 += r2[e] * v[e]
            b3 += r3[e] * v[e]
    else:
        for e in range(m):
            b0 += r0[e]
            b1 += r1[e]
            b2 += r2[e]
            b3 += r3[e]
    return b0, b1, b2, b3


@njit(cache=True, nogil=True, fastmath=_SUM_MATH)
def _short_sums(x, xb, sx, cnt, n, dst, db, sd, zero):  # type: ignore[no-untyped-def]
    """dst[db + t*sd] = sum(x[xb + t*sx : + n]) for t < cnt, unit-stride runs of at most
    RUN_BLOCK: one output at a time, each run one loop (LLVM's vectorized reduction and
    its vector epilogue), in a function of its own (docs/decisions.md)."""
    for t in range(cnt):
        p = xb + t * sx
        a = x[p:p + n]
        acc = zero
        for e in range(n):
            acc += a[e]
        dst[db + t * sd] = acc


@njit(cache=True, nogil=True, fastmath=_SUM_MATH)
def _short_dots(x, xb, sx, cnt, n, w, wb, dst, db, sd, zero):  # type: ignore[no-untyped-def]
    """:func:`_short_sums` weighted by w[wb : + n] (at most RUN_BLOCK: in L1)."""
    v = w[wb:wb + n]
    for t in range(cnt):
        p = xb + t * sx
        a = x[p:p + n]
        acc = zero
        for e in range(n):
            acc += a[e] * v[e]
        dst[db + t * sd] = acc


@njit(cache=True, nogil=True, fastmath=_SUM_MATH)
def _whole_runs(x, xb, sx, cnt, w, wb, q0, q1, run_sx, run_sw, weighted, dst, db, sd, zero):  # type: ignore[no-untyped-def]
    """dst[db + t*sd] = the sum of elements q0 <= q < q1 of the run from x[xb + t*sx],
    for t < cnt.  A function of its own: inside reduce_chunk's loop LLVM left the sums
    4-6x slower."""
    # Unit strides: four outputs per pass, their sums independent chains (one output's
    # horizontal sum waits on its last loads: docs/decisions.md).  Weighted, the block
    # of weights is the outer loop and every four runs read it from L1: a weight vector
    # longer than the caches is then read from memory once a call, not once per four
    # outputs.  Unit-stride runs of at most RUN_BLOCK are summed one output at a time
    # instead (_short_sums: LLVM vectorizes four sums only from longer runs), but for
    # weighted runs of at least DOT_FOUR_MIN_BYTES (tiles.dot_four_min_bytes).
    n = q1 - q0
    t = 0
    four_dots = weighted and cnt >= 4 and n * x.itemsize >= DOT_FOUR_MIN_BYTES
    if run_sx == 1 and (run_sw == 1 or not weighted) and n <= RUN_BLOCK and not four_dots:
        if weighted:
            _short_dots(x, xb + q0, sx, cnt, n, w, wb + q0, dst, db, sd, zero)
        else:
            _short_sums(x, xb + q0, sx, cnt, n, dst, db, sd, zero)
        return
    if run_sx == 1 and (run_sw == 1 or not weighted):  # (runs longer than RUN_BLOCK)
        four = cnt - cnt % 4
        if weighted:
            for u in range(four):
                dst[db + u * sd] = zero
            q = q0
            while q < q1:
                m = min(q1 - q, RUN_BLOCK)
                t = 0
                while t < four:
                    b0, b1, b2, b3 = _four_block(x, xb + t * sx + q, sx, m, w, wb + q,
                                                 weighted, zero)
                    dst[db + t * sd] += b0
                    dst[db + (t + 1) * sd] += b1
                    dst[db + (t + 2) * sd] += b2
                    dst[db + (t + 3) * sd] += b3
                    t += 4
                q += m
        else:
            while t < four:
                a0 = zero
                a1 = zero
                a2 = zero
                a3 = zero
                q = q0
                while q < q1:
                    m = min(q1 - q, RUN_BLOCK)
                    b0, b1, b2, b3 = _four_block(x, xb + t * sx + q, sx, m, w, wb + q,
                                                 weighted, zero)
                    a0 += b0
                    a1 += b1
                    a2 += b2
                    a3 += b3
                    q += m
                dst[db + t * sd] = a0
                dst[db + (t + 1) * sd] = a1
                dst[db + (t + 2) * sd] = a2
                dst[db + (t + 3) * sd] = a3
                t += 4
        t = four
    for u in range(t, cnt):
        dst[db + u * sd] = _whole_run(x, xb + u * sx + q0 * run_sx, w, wb + q0 * run_sw, n,
                                      run_sx, run_sw, weighted, zero)


@njit(cache=True, nogil=True, inline="always")
def _seek_run(summed, idx, r, xo, wo):  # type: ignore[no-untyped-def]
    """The odometer over ``summed``'s rows but the last (the runs), set to run ``r``:
    ``idx`` and the offsets xo, wo moved there."""
    for a in range(summed.shape[0] - 2, -1, -1):
        n = summed[a, 0]
        q = r // n
        idx[a] = r - q * n
        xo += idx[a] * summed[a, 1]
        wo += idx[a] * summed[a, 2]
        r = q
    return xo, wo


@njit(cache=True, nogil=True, inline="always")
def _next_run(summed, idx, xo, wo):  # type: ignore[no-untyped-def]
    """The odometer's step to the next run, innermost row fastest: the new xo, wo."""
    for a in range(summed.shape[0] - 2, -1, -1):
        idx[a] += 1
        xo += summed[a, 1]
        wo += summed[a, 2]
        if idx[a] < summed[a, 0]:
            break
        idx[a] = 0
        xo -= summed[a, 0] * summed[a, 1]
        wo -= summed[a, 0] * summed[a, 2]
    return xo, wo


@njit(cache=True, nogil=True, fastmath=_SUM_MATH, inline="always")
def _span_sum(x, xb, w, wb, summed, weighted, e0, e1, idx, zero):  # type: ignore[no-untyped-def]
    """KIND_INNER: the sum of summed elements e0 <= e < e1 (flat over ``summed``, its
    last row the run) of one output, whose first element is x[xb]."""
    ns = summed.shape[0]
    run_n, run_sx, run_sw = summed[ns - 1, 0], summed[ns - 1, 1], summed[ns - 1, 2]
    xo = xb
    wo = wb
    p = 0
    if e0 == 0:  # (no divisions: this runs once per output)
        for a in range(ns - 1):
            idx[a] = 0
    else:
        r = e0 // run_n
        p = e0 - r * run_n
        xo, wo = _seek_run(summed, idx, r, xo, wo)
    total = zero
    e = e0
    while e < e1:
        stop = min(run_n, p + (e1 - e))
        q = p
        while q < stop:
            qe = min(stop, q + RUN_BLOCK)
            total += _run_sum(x, xo + q * run_sx, run_sx, qe - q, w, wo + q * run_sw,
                              run_sw, weighted, zero)
            q = qe
        e += stop - p
        p = 0
        xo, wo = _next_run(summed, idx, xo, wo)
    return total


@njit(cache=True, nogil=True, fastmath=_SUM_MATH, inline="always")
def _rows_segment(x, a, st, cnt, vs, nb, w, wa, wst, weighted, blk):  # type: ignore[no-untyped-def]
    """blk[:nb] = sum_{r < cnt} x[a + r*st + t*vs] (times w[wa + r*wst]), four rows per
    pass over blk (one load and store of blk per four rows read)."""
    b = blk[:nb]
    for t in range(nb):
        b[t] = 0
    r = 0
    if vs == 1:
        lim = x.size - 1
        ahead = ROWS_PREFETCH_BYTES // x.itemsize  # (elements)
        fetch = (weighted and st == nb
                 and PREFETCH_MIN_ROW_BYTES <= nb * x.itemsize <= PREFETCH_MAX_ROW_BYTES)
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
                c0, c1, c2, c3 = w[q], w[q + wst], w[q + 2 * wst], w[q + 3 * wst]
                for t in range(nb):
                    b[t] += (c0 * r0[t] + c1 * r1[t]) + (c2 * r2[t] + c3 * r3[t])
            else:
                for t in range(nb):
                    b[t] += (r0[t] + r1[t]) + (r2[t] + r3[t])
            r += 4
        while r < cnt:
            p = a + r * st
            r0 = x[p:p + nb]
            if weighted:
                c0 = w[wa + r * wst]
                for t in range(nb):
                    b[t] += c0 * r0[t]
            else:
                for t in range(nb):
                    b[t] += r0[t]
            r += 1
    else:
        for r in range(cnt):
            p = a + r * st
            if weighted:
                c0 = w[wa + r * wst]
                for t in range(nb):
                    b[t] += c0 * x[p + t * vs]
            else:
                for t in range(nb):
                    b[t] += x[p + t * vs]


# _rows_segment compiled once per value of ``weighted``, each a function of its own: a
# runtime ``weighted``, or both forms inlined in one caller, left LLVM's code for rows of
# 24 float32 2.6-5.5x slower (docs/decisions.md: narrow rows).
@njit(cache=True, nogil=True, fastmath=_SUM_MATH)
def _weighted_segment(x, a, st, cnt, vs, nb, w, wa, wst, blk):  # type: ignore[no-untyped-def]
    _rows_segment(x, a, st, cnt, vs, nb, w, wa, wst, True, blk)


@njit(cache=True, nogil=True, fastmath=_SUM_MATH)
def _plain_segment(x, a, st, cnt, vs, nb, w, wa, wst, blk):  # type: ignore[no-untyped-def]
    _rows_segment(x, a, st, cnt, vs, nb, w, wa, wst, False, blk)


@njit(cache=True, nogil=True, fastmath=_SUM_MATH, inline="always")
def _store_block(acc, nb, dst, db, dvec):  # type: ignore[no-untyped-def]
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
@njit(cache=True, nogil=True, fastmath=_SUM_MATH)
def _weighted_units(x, xb, sx, cnt, st, c, vs, nb, w, wa, wst, acc, dst, db, sd, dvec):  # type: ignore[no-untyped-def]
    for t in range(cnt):
        _rows_segment(x, xb + t * sx, st, c, vs, nb, w, wa, wst, True, acc)
        _store_block(acc, nb, dst, db + t * sd, dvec)


@njit(cache=True, nogil=True, fastmath=_SUM_MATH)
def _plain_units(x, xb, sx, cnt, st, c, vs, nb, w, wa, wst, acc, dst, db, sd, dvec):  # type: ignore[no-untyped-def]
    for t in range(cnt):
        _rows_segment(x, xb + t * sx, st, c, vs, nb, w, wa, wst, False, acc)
        _store_block(acc, nb, dst, db + t * sd, dvec)


@njit(cache=True, nogil=True, fastmath=_SUM_MATH, inline="always")
def _first_rows(x, xb, sx, cnt, st, g, nb, w, wa, wst, weighted, dst, db, sd):  # type: ignore[no-untyped-def]
    """dst[db + u*sd + t] = the sum of the first g (1 to 4) rows of unit u (times their
    weights), for u < cnt and t < nb: stored, so that out needs no zeroing pass."""
    c0 = w[wa] if weighted else x[xb]  # (unweighted: unused, read where x has one)
    c1 = w[wa + wst] if weighted and g > 1 else c0
    c2 = w[wa + 2 * wst] if weighted and g > 2 else c0
    if g == 1:
        for u in range(cnt):
            p = xb + u * sx
            q = db + u * sd
            r0 = x[p:p + nb]
            d = dst[q:q + nb]
            for t in range(nb):
                d[t] = c0 * r0[t] if weighted else r0[t]
    elif g == 2:
        for u in range(cnt):
            p = xb + u * sx
            q = db + u * sd
            r0 = x[p:p + nb]
            r1 = x[p + st:p + st + nb]
            d = dst[q:q + nb]
            for t in range(nb):
                d[t] = c0 * r0[t] + c1 * r1[t] if weighted else r0[t] + r1[t]
    elif g == 3:
        for u in range(cnt):
            p = xb + u * sx
            q = db + u * sd
            r0 = x[p:p + nb]
            r1 = x[p + st:p + st + nb]
            r2 = x[p + 2 * st:p + 2 * st + nb]
            d = dst[q:q + nb]
            for t in range(nb):
                d[t] = ((c0 * r0[t] + c1 * r1[t]) + c2 * r2[t] if weighted
                        else (r0[t] + r1[t]) + r2[t])
    else:
        _four_rows(x, xb, sx, cnt, st, 0, nb, w, wa, wst, weighted, False, dst, db, sd)


@njit(cache=True, nogil=True, fastmath=_SUM_MATH, inline="always")
def _four_rows(x, xb, sx, cnt, st, r, nb, w, wa, wst, weighted, add, dst, db, sd):  # type: ignore[no-untyped-def]
    """dst[db + u*sd + t] (+)= the sum of rows r to r + 3 of unit u (times their
    weights): added when ``add``, else stored (a constant at each call)."""
    k = wa + r * wst
    c0 = w[k] if weighted else x[xb]  # (unweighted: unused, read where x has one)
    c1 = w[k + wst] if weighted else c0
    c2 = w[k + 2 * wst] if weighted else c0
    c3 = w[k + 3 * wst] if weighted else c0
    for u in range(cnt):
        p = xb + u * sx + r * st
        q = db + u * sd
        r0 = x[p:p + nb]
        r1 = x[p + st:p + st + nb]
        r2 = x[p + 2 * st:p + 2 * st + nb]
        r3 = x[p + 3 * st:p + 3 * st + nb]
        d = dst[q:q + nb]
        for t in range(nb):
            v = ((c0 * r0[t] + c1 * r1[t]) + (c2 * r2[t] + c3 * r3[t]) if weighted
                 else (r0[t] + r1[t]) + (r2[t] + r3[t]))
            d[t] = d[t] + v if add else v


@njit(cache=True, nogil=True, fastmath=_SUM_MATH, inline="always")
def _units_into(x, xb, sx, cnt, st, c, nb, w, wa, wst, weighted, dst, db, sd):  # type: ignore[no-untyped-def]
    """Units of c rows of nb unit-stride elements each, summed straight into their
    unit-stride output rows: the first 1-4 rows stored, then four rows a pass added, over
    blocks of units whose outputs stay in L1 (ROW_BLOCK_BYTES)."""
    g = c - 4 * ((c - 1) // 4)
    per = cnt if c <= 4 else max(1, ROW_BLOCK_BYTES // (x.itemsize * nb))
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
@njit(cache=True, nogil=True, fastmath=_SUM_MATH)
def _weighted_into(x, xb, sx, cnt, st, c, nb, w, wa, wst, dst, db, sd):  # type: ignore[no-untyped-def]
    _units_into(x, xb, sx, cnt, st, c, nb, w, wa, wst, True, dst, db, sd)


@njit(cache=True, nogil=True, fastmath=_SUM_MATH)
def _plain_into(x, xb, sx, cnt, st, c, nb, w, wa, wst, dst, db, sd):  # type: ignore[no-untyped-def]
    _units_into(x, xb, sx, cnt, st, c, nb, w, wa, wst, False, dst, db, sd)


@njit(cache=True, nogil=True, fastmath=_SUM_MATH)
def _rows_unit(x, xb, vs, nb, w, wb, summed, weighted, s0, s1, idx, acc, blk):  # type: ignore[no-untyped-def]
    """KIND_ROWS: acc[:nb] = the sum of summed rows s0 <= s < s1 (flat over ``summed``)
    of nb elements along the vector axis, the first at x[xb]."""
    ns = summed.shape[0]
    n_in, st, wst = summed[ns - 1, 0], summed[ns - 1, 1], summed[ns - 1, 2]
    for t in range(nb):
        acc[t] = 0
    outer = s0 // n_in
    r = s0 - outer * n_in
    xo = xb
    wo = wb
    xo, wo = _seek_run(summed, idx, outer, xo, wo)
    s = s0
    while s < s1:
        left = min(n_in - r, s1 - s)
        while left > 0:
            c = min(ROW_GROUP, left)
            if weighted:
                _weighted_segment(x, xo + r * st, st, c, vs, nb, w, wo + r * wst, wst, blk)
            else:
                _plain_segment(x, xo + r * st, st, c, vs, nb, w, wo + r * wst, wst, blk)
            for t in range(nb):
                acc[t] += blk[t]
            r += c
            s += c
            left -= c
        r = 0
        xo, wo = _next_run(summed, idx, xo, wo)


@njit(cache=True, nogil=True)
def _gemv_rows(x, xb, st, nb, vs, w, wb, wst, s0, s1, acc, gemv, iparams, consts):  # type: ignore[no-untyped-def]
    """acc[:nb] = sum_{s0 <= r < s1} w[wb + r*wst] x[xb + r*st + t*vs] (t < nb) by BLAS
    ?gemv: with vs = 1 the rows are the columns of an nb x (s1 - s0) column-major matrix
    (rows too short for LLVM's vectorized loop: OpenBLAS' kernel keeps the sums in
    registers); else (st = 1, the summed runs no longer than vs) the runs are the
    columns of an (s1 - s0) x nb one, transposed (tiles.uses_gemv)."""
    for t in range(nb):
        acc[t] = 0
    width = gemv[1]
    ip32 = iparams.view(np.int32)
    isz = np.int64(x.itemsize)
    ip = np.int64(iparams.ctypes.data)
    cp = np.int64(consts.ctypes.data)
    r = s0
    while r < s1:
        cnt = min(s1 - r, GEMV_MAX_ROWS)
        shape = (nb, cnt, st, wst, 1, ord("N")) if vs == 1 else (cnt, nb, vs, wst, 1, ord("T"))
        for i, v in enumerate(shape):
            if width == 8:
                iparams[i] = v
            else:
                ip32[i] = v
        call_gemv(gemv[0], ip + 5 * width, ip, ip + width, cp,
                   np.int64(x.ctypes.data) + (xb + r * st) * isz, ip + 2 * width,
                   np.int64(w.ctypes.data) + (wb + r * wst) * isz, ip + 3 * width, cp,
                   np.int64(acc.ctypes.data), ip + 4 * width)
        r += cnt


@njit(cache=True, nogil=True)
def units(kind, kept, vec, itemsize):  # type: ignore[no-untyped-def]
    """The independent output units: output elements (KIND_INNER) or blocks of the
    vector axis (KIND_ROWS), over every kept index."""
    total = 1
    for a in range(kept.shape[0]):
        total *= kept[a, 0]
    if kind == KIND_ROWS:
        rb = ROW_BLOCK_BYTES // itemsize
        total *= (vec[0] + rb - 1) // rb
    return total


@njit(cache=True, nogil=True, fastmath=_SUM_MATH)
def reduce_chunk(kind, x, xo, w, wo, kept, vec, summed, weighted, u0, u1, s0, s1,  # type: ignore[no-untyped-def]
                 dst, do, dcol, dvec, zero, gemv):
    """Units u0 <= u < u1 summed over their summed range [s0, s1), written over
    dst[do + ...] by ``kept[:, dcol]`` and ``dvec`` strides (out's, or a partial's)."""
    nk = kept.shape[0]
    kidx = np.zeros(max(nk, 1), np.int64)
    sidx = np.zeros(max(summed.shape[0], 1), np.int64)
    if kind == KIND_INNER:
        ns = summed.shape[0]
        run_sx, run_sw = summed[ns - 1, 1], summed[ns - 1, 2]
        whole = ns == 1  # one run per output: its [s0, s1) summed directly
        # Outputs along the last kept axis by its strides: an odometer stored in memory
        # inside this loop kept LLVM from vectorizing the sums (65 against 10 ns a run
        # of 300 float32).
        n_last = kept[nk - 1, 0] if nk else 1
        sx_last = kept[nk - 1, 1] if nk else 0
        sd_last = kept[nk - 1, dcol] if nk else 0
        u = u0
        while u < u1:
            db = do + _place(kept, dcol, u, kidx)
            xb = xo + _place(kept, 1, u, kidx)
            cnt = min(n_last - (kidx[nk - 1] if nk else 0), u1 - u)
            if whole:
                _whole_runs(x, xb, sx_last, cnt, w, wo, s0, s1, run_sx, run_sw, weighted,
                            dst, db, sd_last, zero)
            else:
                for t in range(cnt):
                    dst[db + t * sd_last] = _span_sum(x, xb + t * sx_last, w, wo, summed,
                                                      weighted, s0, s1, sidx, zero)
            u += cnt
        return
    rb = ROW_BLOCK_BYTES // x.itemsize
    vn, vs = vec[0], vec[1]
    nblocks = (vn + rb - 1) // rb
    acc = np.empty(rb, x.dtype)
    blk = np.empty(rb, x.dtype)
    iparams = np.zeros(6, np.int64)
    consts = np.zeros(2, x.dtype)
    consts[0] = 1  # alpha 1, beta 1: ?gemv adds into acc
    consts[1] = 1
    # At most ROW_GROUP rows of one summed axis: one pass of the segment kernel straight
    # into acc (tiles.uses_flat_rows and uses_gemv, which ask the same of the whole
    # axis, leave them to it; docs/decisions.md: narrow rows).
    one_segment = summed.shape[0] == 1 and summed[0, 0] <= ROW_GROUP
    flat = (not weighted and vs == 1 and vn < FLAT_MAX_NB and summed.shape[0] == 1
            and summed[0, 1] == vn and not one_segment
            and summed[0, 0] >= FLAT_MIN_WINDOWS * max(1, FLAT_WINDOW // vn))  # (tiles)
    if one_segment and nblocks == 1 and nk > 0:
        # Whole rows of one segment each: the units along the last kept axis in one loop.
        st, wst = summed[0, 1], summed[0, 2]
        n_last, sx_last, sd_last = kept[nk - 1, 0], kept[nk - 1, 1], kept[nk - 1, dcol]
        u = u0
        while u < u1:
            db = do + _place(kept, dcol, u, kidx)
            xb = xo + _place(kept, 1, u, kidx) + s0 * st
            cnt = min(n_last - kidx[nk - 1], u1 - u)
            direct = vs == 1 and dvec == 1 and s1 > s0  # (tiles.sums_into_out)
            if direct and weighted:
                _weighted_into(x, xb, sx_last, cnt, st, s1 - s0, vn, w, wo + s0 * wst, wst,
                               dst, db, sd_last)
            elif direct and s1 - s0 <= DIRECT_MAX_ROWS:
                _plain_into(x, xb, sx_last, cnt, st, s1 - s0, vn, w, wo + s0 * wst, wst,
                            dst, db, sd_last)
            elif weighted:
                _weighted_units(x, xb, sx_last, cnt, st, s1 - s0, vs, vn, w, wo + s0 * wst,
                                wst, acc, dst, db, sd_last, dvec)
            else:
                _plain_units(x, xb, sx_last, cnt, st, s1 - s0, vs, vn, w, wo + s0 * wst, wst,
                             acc, dst, db, sd_last, dvec)
            u += cnt
        return
    wide = np.empty(rb if flat else 1, x.dtype)  # a window's sums
    windows = np.zeros((1, 3), np.int64)  # the windows as the rows kernel's summed axis
    for u in range(u0, u1):
        o = u // nblocks
        b = u - o * nblocks
        start = b * rb
        nb = min(rb, vn - start)
        xb = xo + _place(kept, 1, o, kidx) + start * vs
        if flat:
            # Windows of g whole rows as rows of the rows kernel, then folded.
            g = max(1, FLAT_WINDOW // nb)
            windows[0, 0] = (s1 - s0) // g
            windows[0, 1] = g * nb
            for t in range(nb):
                acc[t] = 0
            if windows[0, 0] > 0:
                # (int64 and bool values, not literals: the call below, with variables,
                # then shares their compile; see run_parallel)
                _rows_unit(x, xb + s0 * nb, np.int64(1), g * nb, w, wo, windows,
                           np.bool_(False), np.int64(0), windows[0, 0], sidx, wide, blk)
                for j in range(g):
                    for t in range(nb):
                        acc[t] += wide[j * nb + t]
            r = s0 + windows[0, 0] * g  # the rows short of a window, ROW_GROUP a pass
            while r < s1:
                c = min(ROW_GROUP, s1 - r)
                _plain_segment(x, xb + r * nb, nb, c, np.int64(1), nb, w, np.int64(0),
                               np.int64(0), blk)
                for t in range(nb):
                    acc[t] += blk[t]
                r += c
        elif gemv[0] != 0:
            _gemv_rows(x, xb, summed[0, 1], nb, vs, w, wo, summed[0, 2], s0, s1, acc, gemv,
                       iparams, consts)
        elif one_segment:  # (not through _rows_unit: its call costs some 75 ns a unit)
            sa = xb + s0 * summed[0, 1]
            wa = wo + s0 * summed[0, 2]
            if weighted:
                _weighted_segment(x, sa, summed[0, 1], s1 - s0, vs, nb, w, wa, summed[0, 2], acc)
            else:
                _plain_segment(x, sa, summed[0, 1], s1 - s0, vs, nb, w, wa, summed[0, 2], acc)
        else:
            _rows_unit(x, xb, vs, nb, w, wo, summed, weighted, s0, s1, sidx, acc, blk)
        _store_block(acc, nb, dst, do + _place(kept, dcol, o, kidx) + start * dvec, dvec)


@njit(cache=True, nogil=True)
def _chunk(c, total, nchunks):  # type: ignore[no-untyped-def]
    return c * total // nchunks, (c + 1) * total // nchunks


@njit(cache=True, nogil=True, inline="always")
def chunk_to_try(k, lo, hi, nchunks):  # type: ignore[no-untyped-def]
    """The k-th of ``nchunks`` chunks a worker that owns chunks lo <= c < hi tries to
    claim: its own in order, then those above from the last back, then those below
    from lo - 1 back (each other owner's far end first); every chunk once over k."""
    j = k - (hi - lo)
    if j < 0:
        return lo + k
    if j < nchunks - hi:
        return nchunks - 1 - j
    return lo - 1 - (j - (nchunks - hi))


@intrinsic
def _fetch_add(typingctx, counter, inc):  # type: ignore[no-untyped-def]
    """counter[0] += inc atomically (counter an int64 array, or a slice of one that
    starts at the element); the old value."""
    sig = types.int64(counter, types.int64)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        return builder.atomic_rmw("add", ary.data, args[1], "seq_cst")

    return sig, codegen


@njit(cache=True, nogil=True, parallel=True)
def run_parallel(kind, x, xo, w, wo, kept, vec, summed, weighted, total_s, y, yo,  # type: ignore[no-untyped-def]
                 nchunks, zero, gemv, split, workers):
    """``nchunks`` chunks over ``workers`` threads, each its own share of them first and
    then any another has not claimed (:func:`_fetch_add`).  SPLIT_OUTPUTS: each a
    contiguous share of the output units, summed whole, into out.  SPLIT_SUMMED: each
    a contiguous share of the summed range, for every output, into a private partial
    result (out's elements in C order over kept, then the vector axis); the partials
    are then added in chunk order and written into out.  (One parallel loop for both:
    each costs seconds to compile.)"""
    nk = kept.shape[0]
    vn = vec[0] if kind == KIND_ROWS else 1
    nout = vn
    for a in range(nk):
        nout *= kept[a, 0]
    # kept with a fourth column, the partials' own strides.
    tab = np.empty((nk, 4), np.int64)
    step = vn
    for a in range(nk - 1, -1, -1):
        tab[a, 0], tab[a, 1], tab[a, 2], tab[a, 3] = kept[a, 0], kept[a, 1], kept[a, 2], step
        step *= kept[a, 0]
    by_outputs = split == SPLIT_OUTPUTS
    partial = np.empty((1, 1) if by_outputs else (nchunks, nout), x.dtype)
    total_u = units(kind, kept, vec, x.itemsize)
    # One prange iteration per worker.  Each owns a contiguous run of the chunks and
    # takes them in order, then helps with the others' from their far ends, each chunk
    # claimed by an atomic counter of its own (_fetch_add): a worker another process
    # holds up leaves its chunks to the others, and otherwise each worker sums the same
    # chunks on every call, so that an operand summed again and again stays in the
    # caches of the cores that read it (1,000 x 300 float32, 2 threads, in a loop: 8.3
    # against 13.2 us when the next chunk went to whichever worker asked first).
    # (numba's OpenMP layer runs a prange statically whatever set_parallel_chunksize
    # says, so a shared queue of chunks has to be built here.)
    claimed = np.zeros(nchunks, np.int64)
    nw = min(workers, nchunks)
    # reduce_chunk's int arguments as int64 values, not literals: numba compiles a callee
    # once per literal pattern, so the two calls below and the serial path's call from
    # Python (all int64) compiled reduce_chunk three times, some 10-12 s each per dtype,
    # on a first reduction of the 2-core AVX2 machine.
    i0, i1, i2, i3 = np.int64(0), np.int64(1), np.int64(2), np.int64(3)
    for t in prange(nw):
        lo, hi = _chunk(t, nchunks, nw)
        for k in range(nchunks):
            c = chunk_to_try(k, lo, hi, nchunks)
            if _fetch_add(claimed[c:], 1) != 0:
                continue
            if by_outputs:
                u0, u1 = _chunk(c, total_u, nchunks)
                if u0 < u1:
                    reduce_chunk(kind, x, xo, w, wo, tab, vec, summed, weighted, u0, u1, i0,
                                 total_s, y, yo, i2, vec[2], zero, gemv)
            else:
                s0, s1 = _chunk(c, total_s, nchunks)
                reduce_chunk(kind, x, xo, w, wo, tab, vec, summed, weighted, i0, total_u, s0,
                             s1, partial[c], i0, i3, i1, zero, gemv)
    if by_outputs:
        return
    kidx = np.zeros(max(nk, 1), np.int64)
    for o in range(nout // vn):
        yb = yo + _place(tab, 2, o, kidx)
        for t in range(vn):
            acc = partial[0, o * vn + t]
            for c in range(1, nchunks):
                acc += partial[c, o * vn + t]
            y[yb + t * vec[2]] = acc


_NO_GEMV = np.zeros(2, np.int64)  # the kernels' ``gemv`` when the rows do not take it
_NOTHING = nullcontext()  # in place of blas_threads without ?gemv (reusable; a new one
# each call cost 0.2 us)


@cache
def _gemv_table(dtype: np.dtype) -> np.ndarray:
    """(address of ?gemv, its integer width in bytes) for the kernels: the same library
    as the GEMM tiles' (executor/blas.py)."""
    return np.array(_gemv_address(np.dtype(dtype)), np.int64)


@cache
def _gemv_address(dtype: np.dtype) -> tuple[int, int]:
    name = {"float32": "sgemv", "float64": "dgemv"}[dtype.name]
    lib = numpy_openblas() if os.environ.get("TEIR_PLAN_BLAS") != "scipy" else None
    if lib is not None:
        fn = getattr(lib, f"scipy_{name}_64_")
        return int(ctypes.cast(fn, ctypes.c_void_p).value or 0), 8
    return int(get_cython_function_address("scipy.linalg.cython_blas", name)), 4


def _flat(arr: np.ndarray) -> tuple[np.ndarray, int]:
    """:func:`flat_view`, typed writable even for a read-only operand (the kernels only
    read it): one compiled specialization per dtype instead of one per combination of
    read-only and writable operands."""
    flat, origin = flat_view(arr)
    if not flat.flags.writeable and flat.size:
        buf = (ctypes.c_char * flat.nbytes).from_address(flat.ctypes.data)
        flat = np.frombuffer(buf, dtype=flat.dtype)  # type: ignore[call-overload]
    return flat, origin


@dataclass(frozen=True)
class Prepared:
    """What every call of one reduction needs besides its arrays, worked out once (the
    plan keeps it): a mid-sized sum (``ij->i`` on 1,000 x 300 float32) is some 15 us,
    and working these out took 3 of them."""

    total_s: int  # summed elements per output
    total_u: int  # output units (units)
    gemv: bool  # the rows run on ?gemv (tiles.uses_gemv); its address is the process's


def prepare(kind: int, kept: np.ndarray, vec: np.ndarray, summed: np.ndarray,
            weighted: bool, dtype: np.dtype, cached: bool = False) -> Prepared:
    """The :class:`Prepared` of a reduction's tables summed in ``dtype``; ``cached``:
    the operand is no larger than the last-level cache (tiles.uses_gemv)."""
    isz = np.dtype(dtype).itemsize
    return Prepared(total_s=math.prod(int(n) for n in summed[:, 0]),
                    total_u=int(units(kind, kept, vec, isz)),
                    gemv=uses_gemv(kind, vec, summed, weighted, isz, cached))


def run_reduction(kind: int, kept: np.ndarray, vec: np.ndarray, summed: np.ndarray,
                  origins: tuple[int, int, int], weighted: bool, split: int,
                  x: np.ndarray, w: np.ndarray | None, y: np.ndarray,
                  dtype: np.dtype | None = None, prepared: Prepared | None = None) -> None:
    """Run a reduction planned by :mod:`teir_plan.planner.reduce` on ``x`` (and the
    weights ``w``) into ``y``: arrays of the layouts its tables were proven for.
    ``origins``: element offsets of the first element each table addresses, from each
    array's first element (x, w, out), in elements of ``dtype`` (the arrays' own when
    None; the real type of complex arrays summed as their parts).  ``prepared``: the
    tables' :func:`prepare` in that dtype, when the caller keeps it."""
    dt = x.dtype if dtype is None else dtype
    xf, xo = as_type(_flat(x), dt)
    yf, yo = as_type(flat_view(y), dt)
    if w is not None:
        wf, wo = as_type(_flat(w), dt)
    else:
        wf, wo = xf, 0
    xo, wo, yo = xo + origins[0], wo + origins[1], yo + origins[2]
    zero = xf.dtype.type(0)
    pre = prepared if prepared is not None else prepare(kind, kept, vec, summed, weighted,
                                                        xf.dtype)
    total_s = pre.total_s
    gemv = _gemv_table(xf.dtype) if pre.gemv else _NO_GEMV
    threads = get_num_threads() if parallel_usable() else 1
    if split == SPLIT_OUTPUTS and threads > 1:
        nchunks = output_chunks(pre.total_u, threads)
    elif split == SPLIT_SUMMED and threads > 1:
        nchunks = min(CHUNKS_PER_THREAD * threads, total_s)
    else:
        nchunks = 1
    narrow = blas_threads(1) if gemv[0] else _NOTHING
    if nchunks <= 1:
        with narrow:
            reduce_chunk(kind, xf, xo, wf, wo, kept, vec, summed, weighted, 0, pre.total_u,
                         0, total_s, yf, yo, 2, vec[2], zero, gemv)
        return
    with narrow, parallel_threads(threads):
        run_parallel(kind, xf, xo, wf, wo, kept, vec, summed, weighted, total_s, yf, yo,
                     nchunks, zero, gemv, split, threads)
