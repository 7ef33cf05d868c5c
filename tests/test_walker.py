"""The executor's loop walker (teir_plan/executor/walker.py): the parallel loops collapsed
into one range and shared out in contiguous chunks, the sequential loops walked as an
odometer (innermost fastest) in schedule order, and each tile told whether it is the
output tile's first access (Zero) and its last (ReLU), which the K loops around the
primitive decide.

The range arithmetic is checked through the helpers' Python functions (``py_func``: no
compilation) against enumerating the iterations; the walk itself through ``tp.execute``
on programs that put the K loop outermost, between and innermost, with Zero first and
ReLU last over an output that holds other values, and parallel loops whose iterations
do not divide among the threads, against numpy.einsum in float64.

(tests/test_execute.py runs random programs against the reference interpreter; here the
cases where a wrong first or last access, or a wrong chunk, changes the answer.)"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import teir_plan as tp
from teir_plan.executor.walker import (
    collapsed_offsets,
    loop_iterations,
    next_offsets,
    thread_chunk,
)
from teir_plan.tilekinds.table import T_ORIGIN0, T_ORIGIN1, T_ORIGIN2, TILE_LEN
from tests import spec_examples as ex

RNG = np.random.default_rng(17)


# ---- the collapsed parallel range ------------------------------------------------------

@pytest.mark.parametrize("nchunks", [1, 2, 3, 5])
def test_the_chunks_are_contiguous_in_order_and_even(nchunks: int) -> None:
    for total in range(0, 23):
        chunks = [thread_chunk.py_func(c, total, nchunks) for c in range(nchunks)]
        assert chunks[0][0] == 0 and chunks[-1][1] == total
        assert all(a[1] == b[0] for a, b in zip(chunks, chunks[1:]))  # no gap, no overlap
        sizes = [stop - start for start, stop in chunks]
        assert min(sizes) >= 0 and max(sizes) - min(sizes) <= 1


def _rows(sizes: list[int], strides: list[tuple[int, int, int]]) -> np.ndarray:
    """A loop table (size, stride in0, in1, out, is_k) of int64."""
    return np.array([[n, *st, 0] for n, st in zip(sizes, strides)], np.int64)


def test_collapsed_offsets_enumerate_the_loops_last_fastest() -> None:
    sizes = [3, 2, 4]
    strides = [(8, -1, 100), (1, 5, 10), (2, 0, 1)]
    rows = _rows(sizes + [7], strides + [(9, 9, 9)])  # a fourth row, not collapsed
    tile = np.zeros(TILE_LEN, np.int64)
    tile[T_ORIGIN0], tile[T_ORIGIN1], tile[T_ORIGIN2] = 40, 50, 60
    assert loop_iterations.py_func(rows, 3) == 3 * 2 * 4
    assert loop_iterations.py_func(rows, 0) == 1
    # itertools.product runs the last index fastest, as the odometer does.
    for it, idx in enumerate(itertools.product(*(range(n) for n in sizes))):
        want = tuple(o + sum(i * st[t] for i, st in zip(idx, strides))
                     for t, o in enumerate((40, 50, 60)))
        assert collapsed_offsets.py_func(rows, 3, tile, it) == want
        stop = 3 * 2 * 4
        nxt = next_offsets.py_func(rows, 3, tile, it, stop)
        assert nxt == (collapsed_offsets.py_func(rows, 3, tile, it + 1) if it + 1 < stop
                       else (-1, -1, -1))
    # A worker's range ends early: its last iteration has no next one.
    assert next_offsets.py_func(rows, 3, tile, 4, 5) == (-1, -1, -1)


# ---- the walk, through tp.execute --------------------------------------------------------

NAMES = "prtsqu"  # spec example 10.3.6's axes: loops p (N), r (M), t (K); GEMM over s q u


def _program(order: str, execs: dict[str, str], first: str, last: str) -> tp.TEIR:
    """10.3.6 (float64) with its loop axes in ``order`` and exec types ``execs`` (seq
    where not given), then the GEMM over s, q, u."""
    s = ex.gemm_contraction("float64")[0].schedule
    axes = [NAMES.index(ch) for ch in order + "squ"]
    return tp.TEIR.from_fields(
        data_type="float64", prim_first=first, prim_main="gemm", prim_last=last,
        dim_types=[str(s.dim_types[i]) for i in axes],
        exec_types=[execs.get(NAMES[i], "seq") if NAMES[i] not in "squ" else "prim"
                    for i in axes],
        dim_sizes=[s.dim_sizes[i] for i in axes],
        strides=[[row[i] for i in axes] for row in s.strides])


def _run(prog: tp.TEIR) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    _, expr, shapes, out_shape = ex.gemm_contraction("float64")
    a, b = (RNG.standard_normal(sh) for sh in shapes)
    out0 = 1e3 * RNG.standard_normal(out_shape)  # what Zero must clear, or the sum add to
    out = out0.copy()
    tp.execute(prog, a, b, out)
    return out, out0, np.einsum(expr, a, b)


@pytest.mark.parametrize("order", ["tpr", "ptr", "prt"],
                         ids=["K outermost", "K between", "K innermost"])
@pytest.mark.parametrize(("first", "last"), [("zero", "relu"), ("none", "relu"),
                                             ("zero", "none")])
def test_first_and_last_access_follow_the_k_loop(order: str, first: str, last: str,
                                                 threads: int) -> None:
    # Zero on an output tile's first access (t == 0) only: zeroing again at a later t
    # drops the terms summed before; ReLU on its last (t == |t| - 1) only: earlier, it
    # clips partial sums (about half of them negative here).
    out, out0, want = _run(_program(order, {}, first, last))
    want = want if first == "zero" else out0 + want
    want = np.maximum(want, 0) if last == "relu" else want
    np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("execs", [
    {"r": "parallel"},  # 3 iterations for the threads, then p and t sequential
    {"p": "parallel", "r": "parallel"},  # 4 x 3 collapsed
    {"p": "parallel"},
], ids=["r", "p r", "p"])
def test_parallel_loops_share_the_iterations_out(execs: dict[str, str], threads: int) -> None:
    out, _, want = _run(_program("ptr", execs, "zero", "relu"))
    np.testing.assert_allclose(out, np.maximum(want, 0), rtol=1e-12, atol=1e-9)


def test_a_program_of_one_tile_without_loops() -> None:
    # The walk with no loop at all runs the tile once: first and last access both.
    prog = tp.TEIR.from_fields(
        data_type="float64", prim_first="zero", prim_main="gemm", prim_last="relu",
        dim_types=["m", "n", "k"], exec_types=["prim"] * 3, dim_sizes=[5, 6, 7],
        strides=[[1, 0, 5], [0, 7, 1], [1, 5, 0]])
    a, b = RNG.standard_normal(35), RNG.standard_normal(42)
    out = np.full(30, 1e3)
    tp.execute(prog, a, b, out)
    want = np.maximum(a.reshape(7, 5).T @ b.reshape(6, 7).T, 0)  # column-major m x n
    np.testing.assert_allclose(out.reshape(6, 5).T, want, rtol=1e-12, atol=1e-12)


# ---- the two walkers -------------------------------------------------------------------

def test_the_kinds_flagged_in_walker_are_the_ones_its_own_code_runs() -> None:
    """A program runs on the walker compiled with the in-walker kinds only when its kind
    says so (walker.chunk_address); the walker compiled without them skips their tiles,
    so a kind whose kernel sits in the walker's in-walker branch and is not flagged
    would run nothing.  The modes that branch names are exactly the flagged kinds'."""
    import inspect
    import re

    from teir_plan.executor import walker
    from teir_plan.tilekinds import GEMM_KINDS, KINDS

    source = inspect.getsource(walker._run_tile.py_func)
    branch = source[source.index("elif in_walker:"):source.index("if last and tile[T_LAST_RELU]")]
    named = {getattr(walker, m) for m in re.findall(r"MODE_[A-Z]+", branch)}
    flagged = {k.mode for k in KINDS if k.in_walker}
    # The branch's last case (gemm_loops) runs the one flagged GEMM kind it names no mode
    # of: the loops kind, which takes every tile the others leave.
    loops = [k for k in GEMM_KINDS if k.in_walker and k.mode not in named]
    assert [k.name for k in loops] == ["loops"]
    assert flagged == named | {loops[0].mode}
    assert "else:\n            gemm_loops" in branch
