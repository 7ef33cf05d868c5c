"""The reductions' kernels along a summed unit stride (KIND_INNER, see reduce.py): runs
summed in blocks of RUN_BLOCK elements, short runs one loop each, whole runs four a pass,
runs each weighted by a run of weights of its own (``ij,ij->i``: :func:`paired_runs`),
and the index walk over the summed axes."""

from __future__ import annotations

from numba import njit

from teir_plan.executor.half_bits import value
from teir_plan.tiles import (
    DOT_FOUR_MIN_BYTES,
    KEPT_N,
    SUMMED_N,
    SUMMED_W,
    SUMMED_X,
)

RUN_BLOCK = 4096  # elements of a run summed by one vectorized reduction

# Reductions may be reassociated (vectorized, several partial sums) and a multiply-add
# fused; no other fast-math assumption (NaN and infinity propagate as in numpy).
SUM_MATH = {"reassoc", "contract"}


@njit(cache=True, nogil=True, fastmath=SUM_MATH, inline="always")
def _run_sum(x, o, s, n, w, ow, sw, weighted, zero):  # type: ignore[no-untyped-def]
    """sum_{p < n} x[o + p*s] (times w[ow + p*sw] when ``weighted``); unit strides are
    sliced from 0 so that LLVM loads whole vectors.  (Every element read through
    half_bits.value: 16-bit operands widened to float32, in ``zero``'s type.)"""
    acc = zero
    if s == 1 and not weighted:
        a = x[o:o + n]
        for p in range(n):
            acc += value(a[p])
    elif s == 1 and sw == 1:
        a = x[o:o + n]
        b = w[ow:ow + n]
        for p in range(n):
            acc += value(a[p]) * value(b[p])
    elif weighted:
        for p in range(n):
            acc += value(x[o + p * s]) * value(w[ow + p * sw])
    else:
        for p in range(n):
            acc += value(x[o + p * s])
    return acc


@njit(cache=True, nogil=True, fastmath=SUM_MATH, inline="always")
def table_offset(table, col, i, idx):  # type: ignore[no-untyped-def]
    """Set the odometer ``idx`` over ``table``'s rows (kept's, tiles.KEPT_FIELDS) to flat
    position ``i`` (last row fastest); return the offset sum(idx * table[:, col])."""
    off = 0
    for a in range(table.shape[0] - 1, -1, -1):
        n = table[a, KEPT_N]
        q = i // n
        idx[a] = i - q * n
        off += idx[a] * table[a, col]
        i = q
    return off


@njit(cache=True, nogil=True, fastmath=SUM_MATH, inline="always")
def _whole_run(x, xb, w, wb, n, sx, sw, weighted, zero):  # type: ignore[no-untyped-def]
    """One run of n elements summed, RUN_BLOCK at a time."""
    total = zero
    q = 0
    while q < n:
        qe = min(n, q + RUN_BLOCK)
        total += _run_sum(x, xb + q * sx, sx, qe - q, w, wb + q * sw, sw, weighted, zero)
        q = qe
    return total


@njit(cache=True, nogil=True, fastmath=SUM_MATH, inline="always")
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
            ve = value(v[e])
            b0 += value(r0[e]) * ve
            b1 += value(r1[e]) * ve
            b2 += value(r2[e]) * ve
            b3 += value(r3[e]) * ve
    else:
        for e in range(m):
            b0 += value(r0[e])
            b1 += value(r1[e])
            b2 += value(r2[e])
            b3 += value(r3[e])
    return b0, b1, b2, b3


@njit(cache=True, nogil=True, fastmath=SUM_MATH)
def _short_sums(x, xb, sx, cnt, n, dst, db, sd, zero):  # type: ignore[no-untyped-def]
    """dst[db + t*sd] = sum(x[xb + t*sx : + n]) for t < cnt, unit-stride runs of at most
    RUN_BLOCK: one output at a time, each run one loop (LLVM's vectorized reduction and
    its vector epilogue), in a function of its own (docs/decisions.md)."""
    for t in range(cnt):
        p = xb + t * sx
        a = x[p:p + n]
        acc = zero
        for e in range(n):
            acc += value(a[e])
        dst[db + t * sd] = acc


@njit(cache=True, nogil=True, fastmath=SUM_MATH)
def _short_dots(x, xb, sx, cnt, n, w, wb, dst, db, sd, zero):  # type: ignore[no-untyped-def]
    """:func:`_short_sums` weighted by w[wb : + n] (at most RUN_BLOCK: in L1)."""
    v = w[wb:wb + n]
    for t in range(cnt):
        p = xb + t * sx
        a = x[p:p + n]
        acc = zero
        for e in range(n):
            acc += value(a[e]) * value(v[e])
        dst[db + t * sd] = acc


@njit(cache=True, nogil=True, fastmath=SUM_MATH)
def paired_runs(x, xb, sx, cnt, w, wb, sw, q0, q1, run_sx, run_sw, dst, db, sd, zero):  # type: ignore[no-untyped-def]
    """dst[db + t*sd] = the sum over q0 <= q < q1 of x[xb + t*sx + q*run_sx] times
    w[wb + t*sw + q*run_sw], for t < cnt: each run weighted by a run of its own
    (``ij,ij->i``; the planner plans unit-stride runs only, sliced by _run_sum).  One
    output at a time: four a pass (eight streams, as :func:`whole_runs` weights four
    runs by one) was slower from memory on one core, 8192 x 4096 16-bit in 9.5-9.9 ms
    against 8.0-8.3, and the same within noise on two cores and from the caches (256
    and 1024 x 4096 on one; 2-core Xeon, AVX-512, float16 and bfloat16)."""
    n = q1 - q0
    for u in range(cnt):
        dst[db + u * sd] = _whole_run(x, xb + u * sx + q0 * run_sx, w,
                                      wb + u * sw + q0 * run_sw, n, run_sx, run_sw, True,
                                      zero)


@njit(cache=True, nogil=True, fastmath=SUM_MATH)
def whole_runs(x, xb, sx, cnt, w, wb, sw, q0, q1, run_sx, run_sw, weighted, dst, db, sd,  # type: ignore[no-untyped-def]
               zero):
    """dst[db + t*sd] = the sum of elements q0 <= q < q1 of the run from x[xb + t*sx],
    for t < cnt (weighted: times the run from w[wb + t*sw], sw 0 for one run of weights
    for all).  A function of its own: inside reduce_chunk's loop LLVM left the sums
    4-6x slower."""
    if weighted and sw != 0:
        paired_runs(x, xb, sx, cnt, w, wb, sw, q0, q1, run_sx, run_sw, dst, db, sd, zero)
        return
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
def seek_run(summed, idx, r, xo, wo):  # type: ignore[no-untyped-def]
    """The odometer over ``summed``'s rows but the last (the runs), set to run ``r``:
    ``idx`` and the offsets xo, wo moved there."""
    for a in range(summed.shape[0] - 2, -1, -1):
        n = summed[a, SUMMED_N]
        q = r // n
        idx[a] = r - q * n
        xo += idx[a] * summed[a, SUMMED_X]
        wo += idx[a] * summed[a, SUMMED_W]
        r = q
    return xo, wo


@njit(cache=True, nogil=True, inline="always")
def next_run(summed, idx, xo, wo):  # type: ignore[no-untyped-def]
    """The odometer's step to the next run, innermost row fastest: the new xo, wo."""
    for a in range(summed.shape[0] - 2, -1, -1):
        idx[a] += 1
        xo += summed[a, SUMMED_X]
        wo += summed[a, SUMMED_W]
        if idx[a] < summed[a, SUMMED_N]:
            break
        idx[a] = 0
        xo -= summed[a, SUMMED_N] * summed[a, SUMMED_X]
        wo -= summed[a, SUMMED_N] * summed[a, SUMMED_W]
    return xo, wo


@njit(cache=True, nogil=True, fastmath=SUM_MATH, inline="always")
def span_sum(x, xb, w, wb, summed, weighted, e0, e1, idx, zero):  # type: ignore[no-untyped-def]
    """KIND_INNER: the sum of summed elements e0 <= e < e1 (flat over ``summed``, its
    last row the run) of one output, whose first element is x[xb]."""
    ns = summed.shape[0]
    run_n, run_sx, run_sw = (summed[ns - 1, SUMMED_N], summed[ns - 1, SUMMED_X],
                             summed[ns - 1, SUMMED_W])
    xo = xb
    wo = wb
    p = 0
    if e0 == 0:  # (no divisions: this runs once per output)
        for a in range(ns - 1):
            idx[a] = 0
    else:
        r = e0 // run_n
        p = e0 - r * run_n
        xo, wo = seek_run(summed, idx, r, xo, wo)
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
        xo, wo = next_run(summed, idx, xo, wo)
    return total
