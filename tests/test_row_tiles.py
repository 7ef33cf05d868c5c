"""Scalar-product tiles with a loop folded in (the executor's row tiles) and tiles of one
output column (dot tiles), against the reference interpreter and numpy.einsum.

The programs below are chosen so that the executor lowers them to those modes (each
test asserts it), with every combination the kernels distinguish: a folded K loop or an
elementwise one, unit and other strides, Zero first or accumulation, ReLU last, a
parallel loop walked in runs that cross the chunks of two workers, and one thread.
"""

from __future__ import annotations

import numpy as np
import pytest

import teir_plan as tp
from teir_plan.executor.lower import lower
from teir_plan.tilekinds import table as K
from tests.reference import run_reference


def _program(dtype: str, first: str, last: str, dims: str, execs: list[str],
             sizes: list[int], strides: list[list[int]]) -> tp.TEIR:
    return tp.TEIR.from_fields(data_type=dtype, prim_first=first, prim_main="gemm",
                               prim_last=last, dim_types=list(dims), exec_types=execs,
                               dim_sizes=sizes, strides=strides)


def _run_both(prog: tp.TEIR, lengths: list[int], seed: int) -> None:
    """Run ``prog`` on flat buffers of ``lengths`` (the last is out, pre-filled) with the
    executor and with the reference interpreter, and compare every element of out."""
    rng = np.random.default_rng(seed)
    dt = prog.primitives.data_type.numpy
    bufs = [rng.standard_normal(n).astype(dt) for n in lengths]
    ref = [b.astype(np.float64) for b in bufs]
    run_reference(prog, ref, [0] * len(bufs))
    tp.execute(prog, *bufs)
    tol = 1e-4 if dt == np.float32 else 1e-12
    np.testing.assert_allclose(bufs[-1].astype(np.float64), ref[-1], rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("first", ["zero", "none"])
@pytest.mark.parametrize("last", ["none", "relu"])
@pytest.mark.parametrize("unit", [True, False], ids=["unit strides", "strided"])
def test_folded_k_loop(threads, dtype, first, last, unit):
    """out[i] (=|+=) sum_{p, q} in0[i, p, q] in1[p, q]: the loops are (parallel i, seq p,
    seq q); q, a K loop, is folded: each tile is a dot product of 37 steps."""
    n_i, n_p, n_q = 5, 3, 37
    sq = 1 if unit else 2
    s0 = [n_p * n_q * sq, n_q * sq, sq]
    s1 = [0, n_q * sq, sq]
    prog = _program(dtype, first, last, "mkk", ["parallel", "seq", "seq"],
                    [n_i, n_p, n_q], [s0, s1, [1, 0, 0]])
    low = lower(prog)
    assert low.kind.name == "row" and low.tile[K.T_M] == n_q
    assert len(low.loops) == 2  # q is the tile's now
    _run_both(prog, [n_i * n_p * n_q * sq, n_p * n_q * sq, n_i], seed=1)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("first", ["zero", "none"])
@pytest.mark.parametrize("last", ["none", "relu"])
@pytest.mark.parametrize("unit", [True, False], ids=["unit strides", "strided"])
def test_folded_elementwise_loop_inside_a_k_loop(threads, dtype, first, last, unit):
    """out[i, j] (=|+=) sum_p in0[p, i, j] in1[p, i, j], loops (parallel i, seq p, seq j):
    j is folded, so each tile is an elementwise row, first and last decided by p."""
    n_i, n_p, n_j = 4, 3, 41
    sj = 1 if unit else 3
    s0 = [n_j * sj, n_i * n_j * sj, sj]
    prog = _program(dtype, first, last, "ckc", ["parallel", "seq", "seq"],
                    [n_i, n_p, n_j], [s0, s0, [n_j * sj, 0, sj]])
    low = lower(prog)
    assert low.kind.name == "row" and low.tile[K.T_C_M] == sj
    size = n_p * n_i * n_j * sj
    _run_both(prog, [size, size, n_i * n_j * sj], seed=2)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("first", ["zero", "none"])
@pytest.mark.parametrize("last", ["none", "relu"])
def test_parallel_loops_walked_in_runs(threads, dtype, first, last):
    """Only parallel loops (7 x 13 iterations): runs along the inner one cross the two
    workers' chunks (45 and 46 iterations) in the middle of a row."""
    prog = _program(dtype, first, last, "cc", ["parallel", "parallel"], [7, 13],
                    [[13, 1], [1, 7], [13, 1]])
    low = lower(prog)
    assert low.kind.name == "row" and low.tile[K.T_ROW_PAR] == 1
    _run_both(prog, [91, 91, 91], seed=3)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("first", ["zero", "none"])
@pytest.mark.parametrize("last", ["none", "relu"])
@pytest.mark.parametrize("swap", [False, True], ids=["rows along M", "rows along N"])
def test_dot_tiles(threads, dtype, first, last, swap):
    """A GEMM tile of 9 rows and one column, K 100 with unit strides, under a parallel
    loop of 3: nine dot products per tile."""
    m, k, b = 9, 100, 3
    if swap:  # in0 is the vector (m = 1), in1 the rows (n = 9)
        prog = _program(dtype, first, last, "cnk", ["parallel", "prim", "prim"], [b, m, k],
                        [[k, 0, 1], [m * k, k, 1], [m, 1, 0]])
        lengths = [b * k, b * m * k, b * m]
    else:
        prog = _program(dtype, first, last, "cmk", ["parallel", "prim", "prim"], [b, m, k],
                        [[m * k, k, 1], [k, 0, 1], [m, 1, 0]])
        lengths = [b * m * k, b * k, b * m]
    low = lower(prog)
    assert low.kind.name == "dot" and low.tile[K.T_SWAP] == int(swap)
    _run_both(prog, lengths, seed=4)


@pytest.mark.parametrize(
    "expr, shapes, mode",
    [
        ("ij,ij->ij", [(37, 53), (37, 53)], "row"),
        ("ij,ji->ij", [(37, 53), (53, 37)], "row"),
        ("i,i->", [(1001,), (1001,)], "dot"),
        ("ij,j->i", [(65, 300), (300,)], "dot"),
        ("j,ij->i", [(300,), (65, 300)], "dot"),
        ("bij,bij->b", [(6, 5, 40), (6, 5, 40)], None),
    ],
)
@pytest.mark.parametrize("view", ["plain", "reversed", "every other"])
def test_einsum_through_row_and_dot_tiles(threads, expr, shapes, mode, view):
    """tp.einsum on plain arrays and on views (negative strides, gaps) gives numpy's
    answer; on plain arrays the chosen program runs as the named tile mode."""
    rng = np.random.default_rng(5)
    ops = []
    for s in shapes:
        if view == "plain":
            ops.append(rng.standard_normal(s).astype(np.float32))
        elif view == "reversed":
            ops.append(rng.standard_normal(s).astype(np.float32)[(slice(None, None, -1),) * len(s)])
        else:
            big = rng.standard_normal(tuple(2 * n for n in s)).astype(np.float32)
            ops.append(big[(slice(None, None, 2),) * len(s)])
    p = tp.plan(expr, *ops)
    if p.teir is None:  # it runs on the reduction kernels; with ReLU last it cannot
        assert [s.kind for s in p.steps] == ["reduce"]
        p = tp.plan(expr, *ops, epilogue="relu")
    if view == "plain" and mode is not None:
        assert lower(p.teir).kind.name == mode
    for relu in (False, True):
        got = tp.einsum(expr, *ops, epilogue="relu" if relu else None)
        ref = np.einsum(expr, *(o.astype(np.float64) for o in ops))
        if relu:
            ref = np.maximum(ref, 0)
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_nan_and_infinity_propagate_through_row_and_dot_tiles():
    """The dot products may be reassociated, but NaN and infinity still propagate."""
    a = np.ones(300, np.float32)
    b = np.ones(300, np.float32)
    a[17] = np.nan
    assert np.isnan(tp.einsum("i,i->", a, b))
    a[17] = np.inf
    assert tp.einsum("i,i->", a, b) == np.inf
    x = np.ones((40, 40), np.float32)
    x[3, 5] = np.nan
    got = tp.einsum("ij,ij->ij", x, x)
    assert np.isnan(got[3, 5]) and np.isnan(got).sum() == 1


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("first", ["zero", "none"])
@pytest.mark.parametrize("last", ["none", "relu"])
@pytest.mark.parametrize("k", [(1 << 16) + 3, 1 << 16, 1000], ids=["odd K", "even K", "short K"])
def test_one_long_dot_product_split_over_threads(threads, dtype, first, last, k):
    """A program that is one dot product (no loops): at least 2^16 long it is summed in
    parts on the threads (walker.run_dot_split), then written as the tile would be."""
    from teir_plan.executor.execute import dot_split

    prog = _program(dtype, first, last, "k", ["prim"], [k], [[1], [1], [0]])
    low = lower(prog)
    assert low.kind.name == "dot"
    assert dot_split(low) == (k >= 1 << 16)
    rng = np.random.default_rng(6)
    dt = np.dtype(dtype)
    a, b = (rng.standard_normal(k).astype(dt) for _ in range(2))
    for sign in (1.0, -1.0):  # a positive and a negative sum: ReLU keeps one, zeroes one
        out = np.array([3.0], dt)
        tp.execute(prog, a, sign * b, out)
        want = float(np.dot(a.astype(np.float64), sign * b.astype(np.float64)))
        want += 3.0 if first == "none" else 0.0
        if last == "relu":
            want = max(want, 0.0)
        tol = 1e-3 * np.sqrt(k) if dtype == "float32" else 1e-9 * np.sqrt(k)
        assert abs(float(out[0]) - want) <= tol
