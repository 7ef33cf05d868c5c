"""Reductions: one pass over an operand, summing some of its axes (``ij->j``, ``ij->i``,
``ijk->ik``, ``ij->``), optionally weighted by a vector along the summed axes
(``ki,k->i``, ``ik,k->i``) or, on the inner kernel, by weights that vary along kept
axes too (``ij,ij->i``: each output's run times a run of weights of its own).

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
the operand, outer axes first): ``kept`` rows of :data:`teir_plan.tiles.KEPT_FIELDS`
(extent, x's stride, out's, the weights'), ``vec`` one row of them (``KIND_ROWS``
only), ``summed``
rows of :data:`teir_plan.tiles.SUMMED_FIELDS` (extent, x's stride, the weights'), the
innermost summed axis last.  Every address is ``origin + sum(index *
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
from teir_plan.executor.blas_control import blas_threads
from teir_plan.executor.checks import as_type, flat_view
from teir_plan.executor.half_bits import ACCUMULATOR, bits_dtype
from teir_plan.executor.reduce_rows import (
    gemv_rows,
    plain_into,
    plain_segment,
    plain_units,
    rows_unit,
    store_block,
    weighted_into,
    weighted_segment,
    weighted_units,
)
from teir_plan.executor.reduce_runs import SUM_MATH, span_sum, table_offset, whole_runs
from teir_plan.executor.tables import C_ONE, CONST_LEN, GEMV_FN, GEMV_INT_BYTES, GEMV_LEN
from teir_plan.executor.threads import (
    get_num_threads,
    parallel_threads,
    parallel_usable,
)
from teir_plan.teir.enums import is_half
from teir_plan.tiles import (
    CHUNKS_PER_THREAD,
    DIRECT_MAX_ROWS,
    FLAT_MAX_NB,
    FLAT_MIN_WINDOWS,
    FLAT_WINDOW,
    KEPT_N,
    KEPT_OUT,
    KEPT_PARTIAL,
    KEPT_W,
    KEPT_X,
    KIND_ROWS,
    ROW_BLOCK_BYTES,
    ROW_GROUP,
    SPLIT_KEPT_LEN,
    SPLIT_OUTPUTS,
    SPLIT_SUMMED,
    SUMMED_LEN,
    SUMMED_N,
    SUMMED_W,
    SUMMED_X,
    output_chunks,
    uses_gemv,
)


@njit(cache=True, nogil=True)
def units(kind, kept, vec, itemsize):  # type: ignore[no-untyped-def]
    """The independent output units: output elements (KIND_INNER) or blocks of the
    vector axis (KIND_ROWS), over every kept index."""
    total = 1
    for a in range(kept.shape[0]):
        total *= kept[a, KEPT_N]
    if kind == KIND_ROWS:
        rb = ROW_BLOCK_BYTES // itemsize
        total *= (vec[KEPT_N] + rb - 1) // rb
    return total


@njit(cache=True, nogil=True, fastmath=SUM_MATH)
def reduce_chunk(x, xo, w, wo, kept, vec, summed, weighted, u0, u1, s0, s1,  # type: ignore[no-untyped-def]
                 dst, do, dcol, dvec, zero, gemv):
    """Units u0 <= u < u1 summed over their summed range [s0, s1), written over
    dst[do + ...] by ``kept[:, dcol]`` and ``dvec`` strides (out's, KEPT_OUT, or a
    partial's, KEPT_PARTIAL).  Sums are in dst's type (``zero``'s): x's and w's own, or
    float32 for 16-bit operands read as their bits (half_bits.value).  ``vec`` is None
    for KIND_INNER, the vector axis' row for KIND_ROWS (see :func:`kernel_vec`)."""
    nk = kept.shape[0]
    kidx = np.zeros(max(nk, 1), np.int64)
    sidx = np.zeros(max(summed.shape[0], 1), np.int64)
    if vec is None:  # KIND_INNER
        ns = summed.shape[0]
        run_sx, run_sw = summed[ns - 1, SUMMED_X], summed[ns - 1, SUMMED_W]
        whole = ns == 1  # one run per output: its [s0, s1) summed directly
        # Outputs along the last kept axis by its strides: an odometer stored in memory
        # inside this loop kept LLVM from vectorizing the sums (65 against 10 ns a run
        # of 300 float32).
        n_last = kept[nk - 1, KEPT_N] if nk else 1
        sx_last = kept[nk - 1, KEPT_X] if nk else 0
        sd_last = kept[nk - 1, dcol] if nk else 0
        # The weights move with the kept index as x does where they vary along it
        # (tiles.KEPT_FIELDS' w; 0 for one run of weights for every output).
        sw_last = kept[nk - 1, KEPT_W] if nk else 0
        u = u0
        while u < u1:
            db = do + table_offset(kept, dcol, u, kidx)
            wb = wo + table_offset(kept, KEPT_W, u, kidx)
            xb = xo + table_offset(kept, KEPT_X, u, kidx)
            cnt = min(n_last - (kidx[nk - 1] if nk else 0), u1 - u)
            if whole:
                whole_runs(x, xb, sx_last, cnt, w, wb, sw_last, s0, s1, run_sx, run_sw,
                            weighted, dst, db, sd_last, zero)
            else:
                for t in range(cnt):
                    dst[db + t * sd_last] = span_sum(x, xb + t * sx_last, w,
                                                      wb + t * sw_last, summed, weighted,
                                                      s0, s1, sidx, zero)
            u += cnt
        return
    rb = ROW_BLOCK_BYTES // dst.itemsize  # (blocks of the accumulator: units)
    vn, vs = vec[KEPT_N], vec[KEPT_X]
    nblocks = (vn + rb - 1) // rb
    acc = np.empty(rb, dst.dtype)
    blk = np.empty(rb, dst.dtype)
    iparams = np.zeros(6, np.int64)
    consts = np.zeros(CONST_LEN, dst.dtype)
    consts[C_ONE] = 1  # ?gemv's alpha and beta (gemv_rows): it adds into acc
    # At most ROW_GROUP rows of one summed axis: one pass of the segment kernel straight
    # into acc (tiles.uses_flat_rows and uses_gemv, which ask the same of the whole
    # axis, leave them to it; docs/decisions.md: narrow rows).
    one_segment = summed.shape[0] == 1 and summed[0, SUMMED_N] <= ROW_GROUP
    flat = (not weighted and vs == 1 and vn < FLAT_MAX_NB and summed.shape[0] == 1
            and summed[0, SUMMED_X] == vn and not one_segment
            and summed[0, SUMMED_N] >= FLAT_MIN_WINDOWS * max(1, FLAT_WINDOW // vn))  # (tiles)
    if one_segment and nblocks == 1 and nk > 0:
        # Whole rows of one segment each: the units along the last kept axis in one loop.
        st, wst = summed[0, SUMMED_X], summed[0, SUMMED_W]
        n_last, sx_last = kept[nk - 1, KEPT_N], kept[nk - 1, KEPT_X]
        sd_last = kept[nk - 1, dcol]
        u = u0
        while u < u1:
            db = do + table_offset(kept, dcol, u, kidx)
            xb = xo + table_offset(kept, KEPT_X, u, kidx) + s0 * st
            cnt = min(n_last - kidx[nk - 1], u1 - u)
            direct = vs == 1 and dvec == 1 and s1 > s0  # (tiles.sums_into_out)
            if direct and weighted:
                weighted_into(x, xb, sx_last, cnt, st, s1 - s0, vn, w, wo + s0 * wst, wst,
                               dst, db, sd_last)
            elif direct and s1 - s0 <= DIRECT_MAX_ROWS:
                plain_into(x, xb, sx_last, cnt, st, s1 - s0, vn, w, wo + s0 * wst, wst,
                            dst, db, sd_last)
            elif weighted:
                weighted_units(x, xb, sx_last, cnt, st, s1 - s0, vs, vn, w, wo + s0 * wst,
                                wst, acc, dst, db, sd_last, dvec)
            else:
                plain_units(x, xb, sx_last, cnt, st, s1 - s0, vs, vn, w, wo + s0 * wst, wst,
                             acc, dst, db, sd_last, dvec)
            u += cnt
        return
    wide = np.empty(rb if flat else 1, dst.dtype)  # a window's sums
    # The windows as the rows kernel's summed axis (one row of SUMMED_FIELDS).
    windows = np.zeros((1, SUMMED_LEN), np.int64)
    for u in range(u0, u1):
        o = u // nblocks
        b = u - o * nblocks
        start = b * rb
        nb = min(rb, vn - start)
        xb = xo + table_offset(kept, KEPT_X, o, kidx) + start * vs
        if flat:
            # Windows of g whole rows as rows of the rows kernel, then folded.
            g = max(1, FLAT_WINDOW // nb)
            windows[0, SUMMED_N] = (s1 - s0) // g
            windows[0, SUMMED_X] = g * nb
            for t in range(nb):
                acc[t] = 0
            if windows[0, SUMMED_N] > 0:
                # (int64 and bool values, not literals: the call below, with variables,
                # then shares their compile; see run_parallel)
                rows_unit(x, xb + s0 * nb, np.int64(1), g * nb, w, wo, windows,
                           np.bool_(False), np.int64(0), windows[0, SUMMED_N], sidx, wide, blk)
                for j in range(g):
                    for t in range(nb):
                        acc[t] += wide[j * nb + t]
            r = s0 + windows[0, SUMMED_N] * g  # the rows short of a window, ROW_GROUP a pass
            while r < s1:
                c = min(ROW_GROUP, s1 - r)
                plain_segment(x, xb + r * nb, nb, c, np.int64(1), nb, w, np.int64(0),
                               np.int64(0), blk)
                for t in range(nb):
                    acc[t] += blk[t]
                r += c
        elif gemv[GEMV_FN] != 0:
            gemv_rows(x, xb, summed[0, SUMMED_X], nb, vs, w, wo, summed[0, SUMMED_W], s0, s1,
                      acc, gemv, iparams, consts)
        elif one_segment:  # (not through rows_unit: its call costs some 75 ns a unit)
            st, wst = summed[0, SUMMED_X], summed[0, SUMMED_W]
            sa = xb + s0 * st
            wa = wo + s0 * wst
            if weighted:
                weighted_segment(x, sa, st, s1 - s0, vs, nb, w, wa, wst, acc)
            else:
                plain_segment(x, sa, st, s1 - s0, vs, nb, w, wa, wst, acc)
        else:
            rows_unit(x, xb, vs, nb, w, wo, summed, weighted, s0, s1, sidx, acc, blk)
        store_block(acc, nb, dst, do + table_offset(kept, dcol, o, kidx) + start * dvec,
                    dvec)


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


def kernel_vec(kind: int, vec: np.ndarray) -> np.ndarray | None:
    """The kernels' ``vec``: None for KIND_INNER.  numba compiles only the branch of
    :func:`reduce_chunk` a None or an array selects (it prunes ``vec is None`` by the
    argument's type), so a first reduction compiles one kind's kernel, not both: the
    first ``ij->i`` of a process compiled run_parallel in 24 s with both, 7.4 s with one
    (2-core Xeon, beside another job)."""
    return vec if kind == KIND_ROWS else None


@njit(cache=True, nogil=True, parallel=True)
def run_parallel(x, xo, w, wo, kept, vec, summed, weighted, total_s, total_u, y, yo,  # type: ignore[no-untyped-def]
                 nchunks, zero, gemv, split, workers):
    """``nchunks`` chunks over ``workers`` threads, each its own share of them first and
    then any another has not claimed (:func:`_fetch_add`).  SPLIT_OUTPUTS: each a
    contiguous share of the output units, summed whole, into out.  SPLIT_SUMMED: each
    a contiguous share of the summed range, for every output, into a private partial
    result (out's elements in C order over kept, then the vector axis); the partials
    are then added in chunk order and written into out.  (One parallel loop for both:
    each costs seconds to compile.)"""
    nk = kept.shape[0]
    vn = np.int64(1) if vec is None else vec[KEPT_N]
    dvec = np.int64(0) if vec is None else vec[KEPT_OUT]
    nout = vn
    for a in range(nk):
        nout *= kept[a, KEPT_N]
    # kept with a column more, the partials' own strides (tiles.SPLIT_KEPT_FIELDS).
    tab = np.empty((nk, SPLIT_KEPT_LEN), np.int64)
    step = vn
    for a in range(nk - 1, -1, -1):
        tab[a, KEPT_N], tab[a, KEPT_X], tab[a, KEPT_OUT], tab[a, KEPT_W] = (
            kept[a, KEPT_N], kept[a, KEPT_X], kept[a, KEPT_OUT], kept[a, KEPT_W])
        tab[a, KEPT_PARTIAL] = step
        step *= kept[a, KEPT_N]
    by_outputs = split == SPLIT_OUTPUTS
    partial = np.empty((1, 1) if by_outputs else (nchunks, nout), y.dtype)
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
    i0, i1 = np.int64(0), np.int64(1)
    c_out, c_partial = np.int64(KEPT_OUT), np.int64(KEPT_PARTIAL)  # (dcol)
    for t in prange(nw):
        lo, hi = _chunk(t, nchunks, nw)
        for k in range(nchunks):
            c = chunk_to_try(k, lo, hi, nchunks)
            if _fetch_add(claimed[c:], 1) != 0:
                continue
            if by_outputs:
                u0, u1 = _chunk(c, total_u, nchunks)
                if u0 < u1:
                    reduce_chunk(x, xo, w, wo, tab, vec, summed, weighted, u0, u1, i0,
                                 total_s, y, yo, c_out, dvec, zero, gemv)
            else:
                s0, s1 = _chunk(c, total_s, nchunks)
                reduce_chunk(x, xo, w, wo, tab, vec, summed, weighted, i0, total_u, s0,
                             s1, partial[c], i0, c_partial, i1, zero, gemv)
    if by_outputs:
        return
    kidx = np.zeros(max(nk, 1), np.int64)
    for o in range(nout // vn):
        yb = yo + table_offset(tab, KEPT_OUT, o, kidx)
        for t in range(vn):
            acc = partial[0, o * vn + t]
            for c in range(1, nchunks):
                acc += partial[c, o * vn + t]
            y[yb + t * dvec] = acc


_NO_GEMV = np.zeros(GEMV_LEN, np.int64)  # the kernels' ``gemv`` when the rows do not take it
_NOTHING = nullcontext()  # in place of blas_threads without ?gemv (reusable; a new one
# each call cost 0.2 us)


@cache
def gemv_table(dtype: np.dtype) -> np.ndarray:
    """The kernels' ``gemv`` (tables.GEMV_FIELDS: the address of ?gemv, its integer width
    in bytes): the same library as the GEMM tiles' (executor/blas.py)."""
    fn, int_bytes = _gemv_address(np.dtype(dtype))
    table = np.zeros(GEMV_LEN, np.int64)
    table[GEMV_FN], table[GEMV_INT_BYTES] = fn, int_bytes
    return table


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
            weighted: bool, dtype: np.dtype, cached: bool = False,
            operand: np.dtype | None = None) -> Prepared:
    """The :class:`Prepared` of a reduction's tables summed in ``dtype``; ``cached``:
    the operand is no larger than the last-level cache (tiles.uses_gemv); ``operand``:
    the operands' dtype when not ``dtype`` (16-bit, read in place: never on ?gemv)."""
    isz = np.dtype(dtype).itemsize
    half = operand is not None and is_half(np.dtype(operand))
    own = weighted and bool(kept[:, KEPT_W].any() or vec[KEPT_W])
    # Weights of each output's own are read by the inner kernel alone (reduce_chunk's
    # first branch); the planner plans no rows of them (planner/reduce.py).
    assert not (own and kind == KIND_ROWS), "weights along a kept axis: KIND_INNER only"
    return Prepared(total_s=math.prod(int(n) for n in summed[:, SUMMED_N]),
                    total_u=int(units(kind, kept, vec, isz)),
                    gemv=not half and uses_gemv(kind, vec, summed, weighted, isz, cached,
                                                own))


def run_reduction(kind: int, kept: np.ndarray, vec: np.ndarray, summed: np.ndarray,
                  origins: tuple[int, int, int], weighted: bool, split: int,
                  x: np.ndarray, w: np.ndarray | None, y: np.ndarray,
                  dtype: np.dtype | None = None, prepared: Prepared | None = None) -> None:
    """Run a reduction planned by :mod:`teir_plan.planner.reduce` on ``x`` (and the
    weights ``w``) into ``y``: arrays of the layouts its tables were proven for.
    ``origins``: element offsets of the first element each table addresses, from each
    array's first element (x, w, out), in elements of ``dtype`` (the arrays' own when
    None; the real type of complex arrays summed as their parts).  ``prepared``: the
    tables' :func:`prepare` in that dtype, when the caller keeps it.

    16-bit operands (float16, bfloat16; x and w of the same type) are read in place as
    their bits (half_bits.bits_dtype) and summed in float32, ``dtype`` and y's type."""
    dt = x.dtype if dtype is None else dtype
    half = is_half(x.dtype)
    if half:
        dt = y.dtype if dtype is None else dtype
        assert dt == ACCUMULATOR == y.dtype and (w is None or w.dtype == x.dtype)
    src = bits_dtype(x.dtype) if half else dt  # (x's and w's elements as the kernels read them)
    xf, xo = as_type(_flat(x), src)
    yf, yo = as_type(flat_view(y), dt)
    if w is not None:
        wf, wo = as_type(_flat(w), src)
    else:
        wf, wo = xf, 0
    xo, wo, yo = xo + origins[0], wo + origins[1], yo + origins[2]
    zero = yf.dtype.type(0)
    pre = prepared if prepared is not None else prepare(kind, kept, vec, summed, weighted,
                                                        dt, operand=x.dtype)
    total_s = pre.total_s
    gemv = gemv_table(xf.dtype) if pre.gemv else _NO_GEMV
    threads = get_num_threads() if parallel_usable() else 1
    if split == SPLIT_OUTPUTS and threads > 1:
        nchunks = output_chunks(pre.total_u, threads)
    elif split == SPLIT_SUMMED and threads > 1:
        nchunks = min(CHUNKS_PER_THREAD * threads, total_s)
    else:
        nchunks = 1
    narrow = blas_threads(1) if gemv[GEMV_FN] else _NOTHING
    kvec = kernel_vec(kind, vec)
    if nchunks <= 1:
        with narrow:
            reduce_chunk(xf, xo, wf, wo, kept, kvec, summed, weighted, 0, pre.total_u,
                         0, total_s, yf, yo, KEPT_OUT, vec[KEPT_OUT], zero, gemv)
        return
    with narrow, parallel_threads(threads):
        run_parallel(xf, xo, wf, wo, kept, kvec, summed, weighted, total_s, pre.total_u, yf,
                     yo, nchunks, zero, gemv, split, threads)
