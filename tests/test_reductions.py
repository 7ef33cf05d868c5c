"""The reduction kernels (executor/reduce.py, planned by planner/reduce.py): one-operand
sums and operand-times-vector products, in every layout, dtype and thread count,
against numpy.einsum in float64."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from contextlib import contextmanager

import numba
import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import teir_plan as tp
from teir_plan import tiles
from teir_plan.executor.checks import check_reach
from teir_plan.executor.reduce import _fetch_add, chunk_to_try
from teir_plan.frontend.contraction import Layout
from teir_plan.frontend.expression import parse
from teir_plan.machine import MachineParams
from teir_plan.planner import reduce as reduce_cost
from teir_plan.planner.reduce import plan_reduction, summed_table, vector_row
from teir_plan.schedule.contract import _offset_range, layout_from
from teir_plan.schedule.operands import OperandSpec, as_operand
from teir_plan.schedule.reduce_run import RunnableReduction, runnable
from tests.strategies import assert_einsum_close, counted, fuzz_settings, operand_recipes

MAX_THREADS = min(4, int(getattr(numba.config, "NUMBA_NUM_THREADS")))  # noqa: B009


@contextmanager
def using_threads(n: int) -> Iterator[None]:
    """``n`` threads for tp's calls inside the block; the setting is restored."""
    old = tp.get_num_threads()
    tp.set_num_threads(n)
    try:
        yield
    finally:
        tp.set_num_threads(old)


def reduce_directly(sub: str, ops: list[np.ndarray], out: np.ndarray, split: int,
                    nthreads: int, params: MachineParams | None = None) -> RunnableReduction | None:
    """Plan ``sub`` as a reduction (whatever the TEIR programs would cost; with
    ``params``, else the defaults), prove its reach as the planner does, and run it with
    ``split`` on ``nthreads`` threads (None: nothing of extent > 1 is summed, not a
    reduction)."""
    ops = [as_operand(o, i) for i, o in enumerate(ops)]
    expr = parse(sub, [o.shape for o in ops])
    ext = expr.extent_map
    lays = [layout_from(t, OperandSpec.of(o), ext) for t, o in zip(expr.inputs, ops)]
    out_lay = layout_from(expr.output, OperandSpec.of(out), ext)
    red = plan_reduction(lays[0], out_lay, lays[1] if len(lays) > 1 else None,
                         out.dtype, params or MachineParams(), nthreads)
    if red is None:
        return None
    for j, (arr, lay) in zip((0, 1, 2)[:len(ops)] + (2,), zip([*ops, out], [*lays, out_lay])):
        check_reach("tensor", j, arr, lay.extents, lay.strides)
        assert red.reach(j) == _offset_range(lay.extents, lay.strides)
    red = runnable(dataclasses.replace(red, split=split))
    with using_threads(nthreads):
        red.run(ops[0], ops[1] if len(ops) > 1 else None, out)
    return red


@st.composite
def sums(draw: st.DrawFn) -> tuple[str, tuple[int, ...], list[str]]:
    """(subscripts, shape, kept indices) of a one-operand sum: some indices kept, in any
    order, the others summed; extents 0 and 1 among them."""
    nd = draw(st.integers(1, 4))
    letters = "ijkl"[:nd]
    shape = tuple(draw(st.sampled_from([0, 1, 2, 3, 5, 8, 17, 40, 130])) for _ in range(nd))
    # At most 2^20 elements: a strided recipe's buffer is up to 3^nd times the shape's,
    # and under make fuzz the largest shapes (10^8 elements and more) took a worker past
    # 23 GiB, where the kernel killed it.
    assume(math.prod(shape) <= 1 << 20)
    kept = draw(st.lists(st.sampled_from(letters), unique=True, max_size=nd - 1))
    return f"{letters}->{''.join(kept)}", shape, kept


def _out_like(shape: tuple[int, ...], dtype: object, kind: str) -> np.ndarray:
    """An out= array: C order, F order, or every axis reversed (negative strides)."""
    if kind == "F":
        return np.empty(shape, dtype, order="F")
    out = np.empty(shape, dtype)
    if not shape:  # (indexing a 0-d array with () would give a scalar)
        return out
    return out[tuple(slice(None, None, -1) for _ in shape)] if kind == "reversed" else out


@fuzz_settings(default=80, fuzz=5_000)
@given(problem=sums(), dtype=st.sampled_from(["float32", "float64"]), data=st.data(),
       threads=st.integers(1, MAX_THREADS), out=st.sampled_from(["", "C", "F", "reversed"]))
@counted
def test_one_operand_sums_match_numpy(problem, dtype, data, threads, out) -> None:  # type: ignore[no-untyped-def]
    sub, shape, _ = problem
    recipe = data.draw(operand_recipes(shape, dtype))
    x = np.asarray(recipe.build(np.random.default_rng(len(shape))))
    with using_threads(threads):
        if out:
            res_shape = np.einsum(sub, np.empty(shape)).shape
            target = _out_like(res_shape, dtype, out)
            got = tp.einsum(sub, x, out=target)
            assert got is target
        else:
            got = tp.einsum(sub, x)
    assert got.dtype == np.dtype(dtype)
    assert_einsum_close(got, sub, [x], dtype)


@st.composite
def products(draw: st.DrawFn) -> tuple[str, list[tuple[int, ...]]]:
    """An operand times a vector (or a matrix) along summed indices."""
    sub = draw(st.sampled_from(["ki,k->i", "ik,k->i", "k,ki->i", "i,i->", "ijk,jk->i",
                                "ijk,k->ij", "kij,k->ji"]))
    ext = {c: draw(st.sampled_from([1, 2, 3, 7, 16, 33, 200])) for c in "ijk"}
    ins = sub.split("->")[0].split(",")
    return sub, [tuple(ext[c] for c in t) for t in ins]


@fuzz_settings(default=60, fuzz=5_000)
@given(problem=products(), dtype=st.sampled_from(["float32", "float64"]), data=st.data(),
       threads=st.integers(1, MAX_THREADS))
@counted
def test_operand_times_vector_matches_numpy(problem, dtype, data, threads) -> None:  # type: ignore[no-untyped-def]
    sub, shapes = problem
    rng = np.random.default_rng(len(sub))
    ops = [np.asarray(data.draw(operand_recipes(s, dtype)).build(rng)) for s in shapes]
    with using_threads(threads):
        got = tp.einsum(sub, *ops)
    assert_einsum_close(got, sub, ops, dtype)


SPLITS = [tiles.SPLIT_NONE, tiles.SPLIT_OUTPUTS, tiles.SPLIT_SUMMED]


@fuzz_settings(default=200, fuzz=10_000)
@given(problem=st.one_of(sums(), products()), dtype=st.sampled_from(["float32", "float64"]),
       data=st.data(), nthreads=st.integers(1, MAX_THREADS), split=st.sampled_from(SPLITS),
       out=st.sampled_from(["C", "F", "reversed"]))
@counted
def test_every_kernel_and_split_matches_numpy(problem, dtype, data, nthreads, split,  # type: ignore[no-untyped-def]
                                             out) -> None:
    """Each problem on the reduction kernels, however small, in each of the three
    splits (the planner would choose one, or a TEIR program)."""
    sub, shapes = problem[:2]
    if isinstance(shapes[0], int):  # sums() gives one shape
        shapes = [shapes]
    assume(all(n > 0 for s in shapes for n in s))  # (extent 0: a fill, planned apart)
    rng = np.random.default_rng(len(sub))
    ops = [np.asarray(data.draw(operand_recipes(s, dtype)).build(rng)) for s in shapes]
    res = _out_like(np.einsum(sub, *[np.empty(s) for s in shapes]).shape, dtype, out)
    res[...] = np.nan  # every element must be written
    assume(reduce_directly(sub, ops, res, split, nthreads) is not None)
    assert_einsum_close(res, sub, ops, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("sub", ["ij->j", "ij->i", "ji->i", "ij->", "ki,k->i", "ik,k->i"])
def test_nan_and_inf_propagate_as_in_numpy(sub, dtype) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(1)
    shapes = [(64, 48)] + ([(dict(zip(sub[:2], (64, 48)))["k"],)] if "," in sub else [])
    ops = [rng.standard_normal(s).astype(dtype) for s in shapes]
    x = ops[0]
    x[3, 5] = np.nan  # a NaN: its sums are NaN
    x[10, 7] = np.inf  # +inf alone in its row and column: inf
    x[20, 9], x[30, 9] = np.inf, -np.inf  # both signs in column 9: NaN
    x[40, 11], x[40, 12] = -np.inf, np.inf  # both signs in row 40: NaN
    if "," in sub:  # NaN times a zero weight is NaN (a BLAS that skipped zeros would lose it)
        ops[1][(3, 5)[sub.index("k")]] = 0
    with np.errstate(invalid="ignore"):
        want = np.einsum(sub, *[o.astype(np.float64) for o in ops])
        results = [tp.einsum(sub, *ops)]  # whichever the planner chose
        for split in SPLITS:  # and each split of the reduction kernels
            res = np.empty(want.shape, dtype)
            reduce_directly(sub, ops, res, split, MAX_THREADS)
            results.append(res)
    for got in results:
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
        np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("shape", [(5000, 3), (4999, 24), (700, 63)])
def test_short_rows_back_to_back_in_windows(shape, split) -> None:  # type: ignore[no-untyped-def]
    """ij->j with rows too short to vectorize: windows of whole rows (and the rows left
    over after the last window) folded into the result."""
    x = np.random.default_rng(6).standard_normal(shape).astype(np.float32)
    res = np.full(shape[1], np.nan, np.float32)
    red = reduce_directly("ij->j", [x], res, split, MAX_THREADS)
    assert red is not None and tiles.uses_flat_rows(red.kind, *red.tables[1:], False)
    assert_einsum_close(res, "ij->j", [x], np.float32)


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("sub", ["ik,k->i", "ik->i"])
@pytest.mark.parametrize("shape", [(4, 256), (7, 9000), (24, 4097), (9, 300)])
def test_long_runs_four_outputs_a_pass(sub, shape, split) -> None:  # type: ignore[no-untyped-def]
    """Runs short and long (the inner kernel's one-output and four-outputs-a-pass
    paths), the outputs not a multiple of four, and split along the runs: every output
    summed over exactly its share of each run, once."""
    rng = np.random.default_rng(shape[0])
    ops = [rng.standard_normal(shape).astype(np.float32)]
    if "," in sub:
        ops.append(rng.standard_normal(shape[1]).astype(np.float32))
    for nthreads in range(1, MAX_THREADS + 1):
        res = np.full(shape[0], np.nan, np.float32)
        red = reduce_directly(sub, ops, res, split, nthreads)
        assert red is not None and red.kind == tiles.KIND_INNER
        assert_einsum_close(res, sub, ops, np.float32)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(4, 4096), (7, 1024), (13, 2048), (30, 513)])
def test_weighted_runs_four_a_pass_below_the_run_block(shape, dtype) -> None:  # type: ignore[no-untyped-def]
    """ij,j->i (and its rows strided, a row gap after each) with rows of at most RUN_BLOCK
    elements: four outputs a pass from DOT_FOUR_MIN_BYTES on, one at a time below, every
    output written once, on one thread and split over several."""
    rng = np.random.default_rng(shape[1])
    x = rng.standard_normal((shape[0], shape[1] + 3)).astype(dtype)
    v = rng.standard_normal(shape[1]).astype(dtype)
    for ops in ([np.ascontiguousarray(x[:, :shape[1]]), v], [x[:, :shape[1]], v]):
        for nthreads in range(1, MAX_THREADS + 1):
            res = np.full(shape[0], np.nan, dtype)
            red = reduce_directly("ij,j->i", ops, res, tiles.SPLIT_OUTPUTS, nthreads)
            assert red is not None and red.kind == tiles.KIND_INNER
            assert_einsum_close(res, "ij,j->i", ops, dtype)


def test_weighted_runs_four_a_pass_from_a_width_dependent_length() -> None:
    """Rows of 4 KiB and more four a pass with 64-byte vectors, only rows of 32 KiB with
    32-byte ones (measured: docs/decisions.md); the compiled kernels read the target's."""
    assert tiles.dot_four_min_bytes(64) == 4096
    assert tiles.dot_four_min_bytes(32) == tiles.dot_four_min_bytes(16) == 32768
    assert tiles.dot_four_min_bytes(tiles.VEC_BYTES) == tiles.DOT_FOUR_MIN_BYTES


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(("rows", "run", "stride"), [(5001, 7, 7), (777, 3, 3), (4096, 5, 11),
                                                     (300, 6, 6)])
def test_short_weighted_runs_of_a_strided_axis_run_on_gemv_transposed(rows, run, stride,
                                                                      dtype, split) -> None:  # type: ignore[no-untyped-def]
    """``iu,u->i`` with u a unit-stride run shorter than a line (longer ones run on the
    inner kernel) and i strided (gaps when the stride is longer than the run): each
    output one dot product, on BLAS' ?gemv transposed, in
    every split; NaN times a zero weight stays NaN and an infinity propagates."""
    rng = np.random.default_rng(rows)
    x = rng.standard_normal((rows, stride)).astype(dtype)[:, :run]
    w = rng.standard_normal(run).astype(dtype)
    w[1] = 0
    x[7, 1] = np.nan
    x[9, 0] = np.inf
    res = np.full(rows, -1.0, dtype)
    red = reduce_directly("iu,u->i", [x, w], res, split, MAX_THREADS)
    assert red is not None and red.kind == tiles.KIND_ROWS
    assert tiles.uses_gemv(red.kind, *red.tables[1:], True, x.itemsize)
    with np.errstate(invalid="ignore"):
        want = np.einsum("iu,u->i", x.astype(np.float64), w.astype(np.float64))
    np.testing.assert_array_equal(np.isnan(res), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(res), np.isinf(want))
    ok = np.isfinite(want)
    np.testing.assert_allclose(res[ok], want[ok], rtol=1e-5 if dtype == "float32" else 1e-12,
                               atol=1e-5 if dtype == "float32" else 1e-12)


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize(("rows", "width", "dtype"), [
    (3000, 64, "float32"), (2000, 128, "float64"), (3000, 256, "float32"),
    (3000, 300, "float32"), (3000, 24, "float32")])
def test_rows_up_to_1_kib_run_on_gemv_when_the_operand_fits_the_cache(rows, width, dtype,  # type: ignore[no-untyped-def]
                                                                      split) -> None:
    """Back-to-back weighted rows (``ki,k->i``) take ?gemv up to 1 KiB when the operand
    is no larger than the last-level cache, below 192 bytes whatever its size; the rows
    kernel otherwise; the same sums either way."""
    rng = np.random.default_rng(width)
    x = rng.standard_normal((rows, width)).astype(dtype)
    w = rng.standard_normal(rows).astype(dtype)
    row_bytes = width * x.itemsize
    for llc, cached in ((32 << 20, True), (64 << 10, False)):
        res = np.full(width, np.nan, dtype)
        red = reduce_directly("ki,k->i", [x, w], res, split, MAX_THREADS,
                              dataclasses.replace(MachineParams(), llc_bytes=llc))
        assert red is not None and red.cached == cached
        assert red.prepared.gemv == (row_bytes < 192 or (cached and row_bytes <= 1024))
        assert_einsum_close(res, "ki,k->i", [x, w], dtype)


def test_a_run_longer_than_its_stride_stays_off_gemv() -> None:
    """Overlapping runs (a run longer than the vector axis' stride) would give BLAS an
    lda below m: the rows kernel sums them."""
    vec = vector_row(("a", 100, 4, 1, 0))
    assert not tiles.uses_gemv(tiles.KIND_ROWS, vec, summed_table([("u", 8, 1, 1)]), True, 4)
    assert tiles.uses_gemv(tiles.KIND_ROWS, vec, summed_table([("u", 4, 1, 1)]), True, 4)
    assert not tiles.uses_gemv(tiles.KIND_ROWS, vec, summed_table([("u", 4, 1, 1)]), False, 4)


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("weighted", [True, False])
@pytest.mark.parametrize(("k", "out_order"), [
    (1, "C"), (2, "C"), (3, "C"), (4, "C"), (4, "F"), (5, "C"), (7, "C"),
    (tiles.DIRECT_MAX_ROWS + 1, "C"), (tiles.ROW_GROUP, "C"), (tiles.ROW_GROUP, "F"),
    (tiles.ROW_GROUP + 1, "C"), (83, "C"), (400, "C")])
def test_narrow_rows_over_a_few_summed_rows(k, out_order, weighted, dtype, split) -> None:  # type: ignore[no-untyped-def]
    """``akj,k->aj`` and ``akj->aj`` with rows of 24: up to ROW_GROUP rows one segment of
    the rows kernel (straight into out's rows where they have unit stride: 1-4 rows
    stored, then four a pass added; into an accumulator where out is strided, or over
    more than DIRECT_MAX_ROWS unweighted rows), more on ?gemv (weighted float32 rows,
    shorter than GEMV_MAX_ROW_BYTES) or the rows kernel's general loop (prefetched when
    weighted), or flat windows (unweighted, from FLAT_MIN_WINDOWS windows,
    with the rows short of a window); every split; NaN and infinity propagate."""
    rng = np.random.default_rng(k)
    x = rng.standard_normal((301, k, 24)).astype(dtype)
    x[5, 0, 3] = np.nan
    x[9, k - 1, 0] = np.inf
    ops = [x, rng.standard_normal(k).astype(dtype)] if weighted else [x]
    sub = "akj,k->aj" if weighted else "akj->aj"
    res = np.full((301, 24), -1.0, dtype, order=out_order)
    red = reduce_directly(sub, ops, res, split, MAX_THREADS)
    if k == 1:
        assert red is None  # nothing of extent > 1 summed
        return
    assert red is not None and red.kind == tiles.KIND_ROWS
    _, vec, summed = red.tables
    many = k > tiles.ROW_GROUP
    windows = k >= tiles.FLAT_MIN_WINDOWS * (tiles.FLAT_WINDOW // 24)
    short = 24 * x.itemsize < tiles.GEMV_MAX_ROW_BYTES  # (float64 rows: prefetched)
    assert tiles.uses_gemv(red.kind, vec, summed, weighted, x.itemsize) == (
        weighted and many and short)
    assert tiles.uses_flat_rows(red.kind, vec, summed, weighted) == (windows and not weighted)
    with np.errstate(invalid="ignore"):
        want = np.einsum(sub, *[o.astype(np.float64) for o in ops])
    np.testing.assert_array_equal(np.isnan(res), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(res), np.isinf(want))
    ok = np.isfinite(want)
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(res[ok], want[ok], rtol=tol, atol=tol * np.sqrt(k))


def test_gemv_transposed_is_priced_per_call() -> None:
    """The same weighted sums written into an out whose outermost axis lies between x's
    kept axes take one transposed ?gemv call per kept row (3,696 here) instead of one:
    priced higher (a tree planner that saw both at one price wrote such intermediates
    and ran 1.7x slower)."""
    shape = (6, 8, 7, 11, 48, 8)
    x = Layout("abefku", shape, tuple(int(np.prod(shape[i + 1:])) for i in range(6)))
    w = Layout("u", (8,), (1,))
    in_order = Layout("abefk", shape[:5], tuple(s // 8 for s in x.strides[:5]))
    f_first = Layout("abefk", shape[:5], (8 * 7 * 48, 7 * 48, 48, 6 * 8 * 7 * 48, 1))
    whole, split = (plan_reduction(x, out, w, np.dtype(np.float32), MachineParams(), 1)
                    for out in (in_order, f_first))
    assert whole is not None and split is not None
    assert split.cost.seconds > whole.cost.seconds + 3_000 * reduce_cost.GEMV_CALL_SECONDS


@pytest.mark.parametrize("rows", [100, 300, 1000, 3000, 100_000])
@pytest.mark.parametrize("sub", ["ij->", "ij->i", "ij->j"])
def test_a_split_is_planned_only_where_it_is_predicted_faster(sub, rows) -> None:  # type: ignore[no-untyped-def]
    """A reduction on two threads runs on one where the model finds the parallel
    region's start costs more than the split saves."""
    x = Layout("ij", (rows, 300), (300, 1))
    out = {"ij->": Layout("", (), ()), "ij->i": Layout("i", (rows,), (1,)),
           "ij->j": Layout("j", (300,), (1,))}[sub]
    red = plan_reduction(x, out, None, np.dtype(np.float32), MachineParams(), 2)
    assert red is not None
    assert red.cost.seconds <= red.serial_seconds
    assert (red.split == tiles.SPLIT_NONE) == (red.cost.seconds == red.serial_seconds)
    if rows >= 3000:
        assert red.split != tiles.SPLIT_NONE


@pytest.mark.parametrize(("sub", "shapes", "kernel"), [
    ("ij->j", [(100_000, 300)], "rows kernel"),
    ("ij->i", [(100_000, 300)], "inner kernel"),
    ("ijk->k", [(256, 256, 200)], "rows kernel"),
    ("ij->", [(100_000, 300)], "inner kernel"),
    ("ki,k->i", [(3_000_000, 24), (3_000_000,)], "rows kernel"),
    ("ik,k->i", [(24, 3_000_000), (3_000_000,)], "inner kernel"),
])
def test_large_reductions_plan_the_reduce_step(sub, shapes, kernel) -> None:  # type: ignore[no-untyped-def]
    p = tp.plan(sub, *shapes, dtype=np.float32)
    assert [s.kind for s in p.steps] == ["reduce"]
    assert p.steps[0].describe().startswith(f"reduce {sub} with the {kernel}")
    assert p.predicted_seconds == p.steps[0].cost.seconds > 0


def test_a_pre_reduction_runs_on_the_reduce_step() -> None:
    p = tp.plan("ijx,jk->ik", (64, 64, 4096), (64, 32), dtype=np.float32)
    assert [s.kind for s in p.steps] == ["reduce", "teir"]
    rng = np.random.default_rng(2)
    a = rng.standard_normal((64, 64, 4096), dtype=np.float32)
    b = rng.standard_normal((64, 32), dtype=np.float32)
    assert_einsum_close(p(a, b), "ijx,jk->ik", [a, b], np.float32)


def test_a_tree_s_small_weighted_sums_run_as_teir_steps_in_one_call() -> None:
    """A weighted sum of a few dozen elements inside a tree: the reduction's call from
    Python costs several executor calls (planner/reduce.py: REDUCE_CALLS), so the TEIR
    program, which also runs with the tree's other steps in one compiled call, is
    chosen; priced at one call the kernel tied it and took the step."""
    rng = np.random.default_rng(4)
    ops = [rng.standard_normal(s, dtype=np.float32) for s in ((8, 12), (12,), (8, 7))]
    p = tp.plan("yv,v,yo->o", *ops, optimize=[(0, 1), (0, 1)])
    assert [s.kind for s in p.steps] == ["teir", "teir"]
    assert p._one_call is not None
    assert_einsum_close(p(*ops), "yv,v,yo->o", ops, np.float32)


def test_dtype_and_out_of_another_dtype() -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((300, 200), dtype=np.float32)
    got = tp.einsum("ij->j", x, dtype=np.float64)
    assert got.dtype == np.float64
    assert_einsum_close(got, "ij->j", [x.astype(np.float64)], np.float64)
    out = np.empty(200, np.float64)
    assert tp.einsum("ij->j", x, out=out) is out
    assert_einsum_close(out, "ij->j", [x], np.float32)


def test_empty_and_unit_extents() -> None:
    assert tp.einsum("ij->j", np.ones((0, 5), np.float32)).tolist() == [0.0] * 5
    assert tp.einsum("ij->i", np.ones((0, 5), np.float32)).shape == (0,)
    assert tp.einsum("ij->i", np.ones((4, 1), np.float32)).tolist() == [1.0] * 4
    assert float(tp.einsum("ij->", np.full((1, 1), 2.5))) == 2.5


@pytest.mark.parametrize("sub", ["ij->j", "ij->", "ki,k->i"])
def test_a_result_depends_only_on_the_thread_count(sub) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(4)
    ops = [rng.standard_normal(s, dtype=np.float32)
           for s in ([(20_000, 24), (20_000,)] if "," in sub else [(20_000, 24)])]
    with using_threads(MAX_THREADS):
        first = tp.einsum(sub, *ops)
        for _ in range(3):
            np.testing.assert_array_equal(tp.einsum(sub, *ops), first)


def test_the_explain_report_shows_the_reduce_step() -> None:
    r = tp.explain("ij->j", (100_000, 300), dtype=np.float32)
    (step,) = r.steps
    assert step.kind == "reduce" and "rows kernel" in step.description
    assert "the best TEIR program" in step.description  # what it was chosen over
    assert step.cost is not None and step.cost["seconds"] == pytest.approx(r.predicted_seconds)
    assert r.cost is not None and r.cost["bound"] == "memory"
    assert "reduction kernels" in "\n".join(r.frontend)
    assert "Step 0: reduce" in str(r)


@numba.njit(parallel=True)
def _hand_out(nchunks, workers, taken):  # type: ignore[no-untyped-def]
    """run_parallel's hand-out: each worker tries its own chunks, then the others', and
    runs those it claims."""
    claimed = np.zeros(nchunks, np.int64)
    for t in numba.prange(workers):
        lo, hi = t * nchunks // workers, (t + 1) * nchunks // workers
        for k in range(nchunks):
            c = chunk_to_try(k, lo, hi, nchunks)
            if _fetch_add(claimed[c:], 1) == 0:
                taken[c] += 1


@pytest.mark.parametrize("nchunks", [1, 2, 3, 8, 17])
def test_every_chunk_is_handed_out_exactly_once(nchunks) -> None:  # type: ignore[no-untyped-def]
    for workers in range(1, min(nchunks, MAX_THREADS) + 1):
        for t in range(workers):  # each worker's order tries every chunk once, own first
            lo, hi = t * nchunks // workers, (t + 1) * nchunks // workers
            order = [chunk_to_try(k, lo, hi, nchunks) for k in range(nchunks)]
            assert sorted(order) == list(range(nchunks)) and order[:hi - lo] == [
                *range(lo, hi)]
        taken = np.zeros(nchunks, np.int64)
        _hand_out(nchunks, workers, taken)
        assert taken.tolist() == [1] * nchunks


@pytest.mark.parametrize("sub", ["ij->", "ij->i", "ik,k->i", "ki,k->i"])
def test_more_chunks_than_threads_match_numpy_in_float64(sub) -> None:  # type: ignore[no-untyped-def]
    """Chunks taken by whichever worker is free: each chunk's partial sums (or outputs)
    are still its own, added in chunk order."""
    rng = np.random.default_rng(7)
    shapes = {"ij->": [(3001, 97)], "ij->i": [(3001, 97)], "ik,k->i": [(9, 40_001), (40_001,)],
              "ki,k->i": [(40_001, 9), (40_001,)]}[sub]
    ops = [rng.standard_normal(s) for s in shapes]
    for nthreads in range(1, MAX_THREADS + 1):
        with using_threads(nthreads):
            got = tp.einsum(sub, *ops)
        np.testing.assert_allclose(got, np.einsum(sub, *ops), rtol=1e-12, atol=1e-10)
