"""The seven example configurations of spec section 10.3, table for table.

Sizes differ per axis and are not powers of two.  Each builder returns the
program, the numpy.einsum expression it computes, and the operand and output
shapes (row-major, as in the spec's tables).
"""

from __future__ import annotations

import teir_plan as tp

A, B, C, D = 3, 5, 7, 4  # |a| |b| |c| |d| for the permutations and batched GEMMs
P, Q, R, S, T, U = 4, 6, 3, 5, 2, 7  # trus,pqtu->pqrs


def _prog(dtype, first, main, dims, execs, sizes, strides):  # type: ignore[no-untyped-def]
    return tp.TEIR.from_fields(
        data_type=dtype, prim_first=first, prim_main=main, prim_last="none",
        dim_types=dims, exec_types=execs, dim_sizes=sizes, strides=strides,
    )


def scalar_permutation(dtype="float32"):  # type: ignore[no-untyped-def]  # 10.3.1
    prog = _prog(dtype, "none", "copy", ["c"] * 4, ["seq"] * 4, [A, B, C, D],
                 [[B * C * D, C * D, D, 1], [B, 1, D * A * B, A * B]])
    return prog, "abcd->cdab", [(A, B, C, D)], (C, D, A, B)


def tiled_permutation(dtype="float32"):  # type: ignore[no-untyped-def]  # 10.3.2
    prog = _prog(dtype, "none", "copy", ["c"] * 4, ["seq", "seq", "prim", "prim"],
                 [A, C, D, B], [[B * C * D, D, 1, C * D], [B, D * A * B, A * B, 1]])
    return prog, "abcd->cdab", [(A, B, C, D)], (C, D, A, B)


def scalar_batched_gemm(dtype="float32"):  # type: ignore[no-untyped-def]  # 10.3.3
    prog = _prog(dtype, "none", "gemm", ["k", "m", "n", "c"], ["seq"] * 4, [A, B, C, D],
                 [[1, A, 0, B * A], [C, 0, 1, A * C], [0, C, 1, B * C]])
    return prog, "dba,dac->dbc", [(D, B, A), (D, A, C)], (D, B, C)


def scalar_batched_gemm_reordered(dtype="float32"):  # type: ignore[no-untyped-def]  # 10.3.4
    prog = _prog(dtype, "none", "gemm", ["m", "n", "c", "k"], ["seq"] * 4, [B, C, D, A],
                 [[A, 0, B * A, 1], [0, 1, A * C, C], [C, 1, B * C, 0]])
    return prog, "dba,dac->dbc", [(D, B, A), (D, A, C)], (D, B, C)


_IN0 = [0, 0, U * S, 1, R * U * S, S]  # p q r s t u
_IN1 = [Q * T * U, T * U, 0, 0, U, 1]
_OUT = [Q * R * S, R * S, S, 1, 0, 0]


def scalar_contraction(dtype="float32"):  # type: ignore[no-untyped-def]  # 10.3.5
    prog = _prog(dtype, "none", "gemm", ["n", "n", "m", "m", "k", "k"], ["seq"] * 6,
                 [P, Q, R, S, T, U], [_IN0, _IN1, _OUT])
    return prog, "trus,pqtu->pqrs", [(T, R, U, S), (P, Q, T, U)], (P, Q, R, S)


def _reorder(row, order):  # type: ignore[no-untyped-def]
    return [row[i] for i in order]


_GEMM_ORDER = [0, 2, 4, 3, 1, 5]  # p r t s q u


def gemm_contraction(dtype="float32"):  # type: ignore[no-untyped-def]  # 10.3.6
    prog = _prog(dtype, "zero", "gemm", ["n", "m", "k", "m", "n", "k"],
                 ["seq", "seq", "seq", "prim", "prim", "prim"], [P, R, T, S, Q, U],
                 [_reorder(r, _GEMM_ORDER) for r in (_IN0, _IN1, _OUT)])
    return prog, "trus,pqtu->pqrs", [(T, R, U, S), (P, Q, T, U)], (P, Q, R, S)


def brgemm_contraction(dtype="float32"):  # type: ignore[no-untyped-def]  # 10.3.7
    prog = _prog(dtype, "zero", "brgemm", ["n", "m", "k", "m", "n", "k"],
                 ["parallel", "parallel", "prim", "prim", "prim", "prim"], [P, R, T, S, Q, U],
                 [_reorder(r, _GEMM_ORDER) for r in (_IN0, _IN1, _OUT)])
    return prog, "trus,pqtu->pqrs", [(T, R, U, S), (P, Q, T, U)], (P, Q, R, S)


ALL = [
    scalar_permutation,
    tiled_permutation,
    scalar_batched_gemm,
    scalar_batched_gemm_reordered,
    scalar_contraction,
    gemm_contraction,
    brgemm_contraction,
]
