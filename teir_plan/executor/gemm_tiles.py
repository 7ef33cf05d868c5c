"""GEMM tiles other than the vector kernels' own: strided loops (small or BLAS-illegal
tiles), dot products and rows (one output row or column), BLAS ``?gemm`` on the operands
in place (packing those it cannot address) and the packed vector tile (the vector
operand's block transposed into the worker's buffer, then the vector kernel).  The walker
picks one per tile by the table's T_MODE (walker._run_tile).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from teir_plan.executor.blas import call_gemm
from teir_plan.executor.copy_kernels import (
    copy_transposed,
)
from teir_plan.executor.elements import accumulator_zero, relu_value, widen
from teir_plan.executor.entries import (
    call_entry,
)
from teir_plan.executor.intrinsics import element_address, to_next_line
from teir_plan.executor.tables import C_ONE, C_ZERO
from teir_plan.tilekinds.table import (
    T_A_BR,
    T_A_K,
    T_A_M,
    T_B_BR,
    T_B_K,
    T_B_N,
    T_BLAS_INT,
    T_BR,
    T_C_M,
    T_C_N,
    T_GEMM_FN,
    T_K,
    T_LDA,
    T_LDB,
    T_LDC,
    T_M,
    T_N,
    T_SWAP,
    T_TRANSA,
    T_TRANSB,
    T_VEC_FN,
    T_VEC_P,
)

_ORD_N = 78

@njit(cache=True, nogil=True)
def gemm_loops(x0, ao, x1, bo, y, co, tile, zero_first):  # type: ignore[no-untyped-def]
    """C (+)= sum_br A_br B_br with plain strided loops, accumulating in float64 (or
    complex128 for complex elements)."""
    m, n, k, br = tile[T_M], tile[T_N], tile[T_K], tile[T_BR]
    a_m, a_k, b_k, b_n = tile[T_A_M], tile[T_A_K], tile[T_B_K], tile[T_B_N]
    c_m, c_n, a_br, b_br = tile[T_C_M], tile[T_C_N], tile[T_A_BR], tile[T_B_BR]
    for j in range(n):
        for i in range(m):
            acc = accumulator_zero(y)
            for r in range(br):
                pa = ao + r * a_br + i * a_m
                pb = bo + r * b_br + j * b_n
                for p in range(k):
                    acc += widen(x0[pa + p * a_k]) * widen(x1[pb + p * b_k])
            pc = co + i * c_m + j * c_n
            if zero_first:
                y[pc] = acc
            else:
                y[pc] = y[pc] + acc


# Row and dot tiles: reductions may be reassociated (LLVM then vectorizes them, with
# several partial sums, as BLAS' dot does) and a multiply-add fused; no other fast-math
# assumption (NaN and infinity propagate as in numpy).
SUM_MATH = {"reassoc", "contract"}


@njit(cache=True, nogil=True, fastmath=SUM_MATH)
def dot_strided(x0, o0, s0, x1, o1, s1, n, zero):  # type: ignore[no-untyped-def]
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
    if s0 == 1 and s1 == 1 and s2 == 1:  # slices: see dot_strided
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
def row_tile_kernel(x0, o0, x1, o1, y, o2, tile, n, zero_first, relu, zero):  # type: ignore[no-untyped-def]
    """A MODE_ROW tile of ``n`` elements (see MODE_ROW), then max(., 0) with ``relu``."""
    s2 = tile[T_C_M]
    if s2 == 0:  # a K loop: one output element
        acc = dot_strided(x0, o0, tile[T_A_M], x1, o1, tile[T_B_N], n, zero)
        v = acc if zero_first else y[o2] + acc
        y[o2] = relu_value(v) if relu else v
    else:
        _mul_row(x0, o0, tile[T_A_M], x1, o1, tile[T_B_N], y, o2, s2, n, not zero_first)
        if relu:
            for i in range(n):
                y[o2 + i * s2] = relu_value(y[o2 + i * s2])


@njit(cache=True, nogil=True)
def dot_tile_kernel(x0, ao, x1, bo, y, co, tile, zero_first, zero):  # type: ignore[no-untyped-def]
    """A MODE_DOT tile: C[i] (+)= sum_p A[i, p] B[p] for i < m (with T_SWAP the roles of
    in0 and in1 exchanged: C[j] (+)= sum_p A[p] B[p, j]).  Two loops rather than one
    over exchanged names: in0 and in1 may have different numba types (a read-only
    view), which one variable could not hold."""
    if tile[T_SWAP]:
        m, s_row, s_y, s0, s1 = tile[T_N], tile[T_B_N], tile[T_C_N], tile[T_B_K], tile[T_A_K]
        for j in range(m):
            acc = dot_strided(x1, bo + j * s_row, s0, x0, ao, s1, tile[T_K], zero)
            p = co + j * s_y
            y[p] = acc if zero_first else y[p] + acc
    else:
        m, s_row, s_y, s0, s1 = tile[T_M], tile[T_A_M], tile[T_C_M], tile[T_A_K], tile[T_B_K]
        for i in range(m):
            acc = dot_strided(x0, ao + i * s_row, s0, x1, bo, s1, tile[T_K], zero)
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
def set_int(i64, i32, width, q, v):  # type: ignore[no-untyped-def]
    """Store BLAS integer argument ``q`` as ``width`` bytes (i32 views i64's memory)."""
    if width == 8:
        i64[q] = v
    else:
        i32[q] = v


@njit(cache=True, nogil=True, inline="always")  # compiled once, in its entry
def gemm_blas(x0, ao, x1, bo, y, co, tile, zero_first, scratch, iparams, consts):  # type: ignore[no-untyped-def]
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
    set_int(iparams, ip32, w, 0, mm)
    set_int(iparams, ip32, w, 1, nn)
    set_int(iparams, ip32, w, 2, k)
    set_int(iparams, ip32, w, 3, lda)
    set_int(iparams, ip32, w, 4, ldb)
    set_int(iparams, ip32, w, 5, ldc if ldc != 0 else mm)
    set_int(iparams, ip32, w, 6, _ORD_N if transa == 0 else transa)
    set_int(iparams, ip32, w, 7, _ORD_N if transb == 0 else transb)
    ip = np.int64(iparams.ctypes.data)
    cp = np.int64(consts.ctypes.data)  # the constants (tables.CONST_FIELDS), by address
    isz = np.int64(consts.itemsize)
    alpha = cp + C_ONE * isz
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
            fn, ip + 6 * w, ip + 7 * w, ip, ip + w, ip + 2 * w, alpha, a_ptr, ip + 3 * w,
            b_ptr, ip + 4 * w, cp + (C_ZERO if beta_zero else C_ONE) * isz, c_ptr, ip + 5 * w,
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
def gemm_vec_packed(x0, o0, x1, o1, y, o2, tile, zero_first, stream, relu, scratch, iparams):  # type: ignore[no-untyped-def]
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
    # and its whole subtree on a cold cache (docs/decisions.md).
    plain = tile[T_K] < 0  # False
    none = np.int64(-1)
    # iparams[0]: 1 + the block's offset the buffer holds (0: none yet; BLAS tiles use
    # iparams, and a program's tiles are all of one mode): the tile before on this
    # worker may have read the same block (a loop over the rows around the tiles).
    fn = tile[T_VEC_FN]
    if tile[T_SWAP]:  # along N: in1's K x n block, in0 broadcast
        if iparams[0] != o1 + 1:
            copy_transposed(x1, o1, scratch, base, tile[T_N], k, tile[T_B_N], ld, plain,
                             scratch, none, none, none)
            iparams[0] = o1 + 1
        call_entry(fn, scratch, base, ld, x0, o0, tile[T_A_K], tile[T_A_M], y, o2,
                   tile[T_C_M], tile[T_N], tile[T_M], k, zero_first, stream, relu, scratch,
                   none + 1, none + 1)
    else:  # along M: in0's m x K block, in1 broadcast
        if iparams[0] != o0 + 1:
            copy_transposed(x0, o0, scratch, base, tile[T_M], k, tile[T_A_M], ld, plain,
                             scratch, none, none, none)
            iparams[0] = o0 + 1
        call_entry(fn, scratch, base, ld, x1, o1, tile[T_B_K], tile[T_B_N], y, o2,
                   tile[T_C_N], tile[T_M], tile[T_N], k, zero_first, stream, relu, scratch,
                   none + 1, none + 1)
