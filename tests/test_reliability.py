"""Inputs nobody tuned for, by class: planning that must not hang, errors that must be the
library's own (the same on numpy and dask operands), numbers that must be numpy's, and
process state that must come back as it was.

Each class has fast representatives here and a ``slow`` property (``make fuzz``) that
draws many more members of it.
"""

from __future__ import annotations

import itertools
import math
import time

import numpy as np
import opt_einsum as oe
import pytest
from hypothesis import given
from hypothesis import strategies as st

import teir_plan as tp
from teir_plan.divisors import divisors, factor, largest_divisor, smallest_divisor
from teir_plan.planner import tree as tree_search
from teir_plan.schedule.steps import PartsStep
from teir_plan.teir.validate import check_iterations, iteration_ceiling
from tests.strategies import fuzz_settings

da = pytest.importorskip("dask.array")

PRIME = 2**31 - 1  # a Mersenne prime: no divisor to split an axis at


# ---- 1. planning and running bounded in time ---------------------------------------------


def test_divisors_match_a_scan() -> None:
    for n in [1, 2, 12, 97, 360, 1024, 9973 * 2, 65537 * 3, 720720]:
        assert divisors(n) == tuple(d for d in range(1, n + 1) if n % d == 0), n
        assert math.prod(p**e for p, e in factor(n)) == n
    assert largest_divisor(360, 7, 50) == 45 and smallest_divisor(360, 7, 50) == 8
    assert largest_divisor(PRIME, 2, PRIME - 1) is None
    start = time.perf_counter()
    assert divisors(2**61 - 1) == (1, 2**61 - 1)  # trial division stops at 2**16
    assert len(divisors(963761198400)) == 6720  # a highly composite extent
    assert time.perf_counter() - start < 1.0


@pytest.mark.parametrize("sub,shapes,order", [
    ("ij,jk->ik", [(PRIME, 2), (2, 3)], "K"),
    ("ij,jk->ik", [(PRIME, 2), (2, 3)], "F"),
    ("ij->ji", [(PRIME, 3)], "C"),
    ("abc,cd,de->abe", [(PRIME, 2, 3), (3, 4), (4, 5)], "C"),
])
def test_a_prime_extent_plans_at_once(sub, shapes, order) -> None:
    tp.plan("ij,jk->ik", (8, 8), (8, 8))  # (the planner's first use, out of the timing)
    start = time.perf_counter()
    tp.plan(sub, *shapes, order=order)  # shapes only: nothing of that size is allocated
    assert time.perf_counter() - start < 2.0


def test_autotune_on_shapes_too_large_to_fill_is_refused() -> None:
    with pytest.raises(tp.PlanError, match="optimize: 'autotune' on shapes"):
        tp.plan("ij,jk->ik", (PRIME, 2**20), (2**20, 3), optimize="autotune")


def _complete_network(n: int) -> tuple[str, list[tuple[int, ...]]]:
    """n operands, every pair sharing an index of extent 2 (the dynamic programming's
    worst case)."""
    terms: list[str] = ["" for _ in range(n)]
    for k, (i, j) in enumerate(itertools.combinations(range(n), 2)):
        terms[i] += oe.get_symbol(k)
        terms[j] += oe.get_symbol(k)
    return ",".join(terms) + "->", [(2,) * len(t) for t in terms]


def test_an_unmeetable_memory_limit_on_a_dense_network_is_refused_in_time(monkeypatch) -> None:
    monkeypatch.setattr(tree_search, "SIZE_SEARCH_SECONDS", 0.2)
    sub, shapes = _complete_network(16)
    start = time.perf_counter()
    with pytest.raises(tp.PlanError, match="memory_limit of 4 elements cannot be met"):
        tp.plan(sub, *shapes, optimize=("greedy", 4))
    assert time.perf_counter() - start < 10.0


def _gemm(k: int, k_stride: int = 0) -> tp.TEIR:
    return tp.TEIR(tp.Primitives("float64", "zero", "gemm", "none"),
                   tp.Schedule(["m", "n", "k"], ["prim", "prim", "seq"], [2, 2, k],
                               [[1, 0, k_stride], [0, 1, 0], [2, 1, 0]]))


def test_a_program_that_revisits_a_few_elements_without_end_is_refused() -> None:
    a, b, out = np.ones(2), np.ones(2), np.full((2, 2), -1.0)
    with pytest.raises(tp.TEIRError, match=r"dim_sizes: .*max_iterations=") as info:
        tp.execute(_gemm(2**40), a, b, out)
    assert isinstance(info.value, ValueError)
    assert (out == -1).all()  # refused before anything ran
    tp.execute(_gemm(4096), a, b, out)  # within the default ceiling
    np.testing.assert_array_equal(out, np.full((2, 2), 4096.0))
    with pytest.raises(tp.TEIRError, match="max_iterations=1000"):
        tp.execute(_gemm(4096), a, b, out, max_iterations=1000)
    for bad in (1.5, 0, True, "many"):
        with pytest.raises(tp.PlanError, match="max_iterations"):
            tp.execute(_gemm(4096), a, b, out, max_iterations=bad)


def test_the_iteration_ceiling_grows_with_the_elements_addressed() -> None:
    small = _gemm(2**40)
    assert iteration_ceiling(small) == 2**32  # 2 + 2 + 4 elements: the floor
    moving = _gemm(2**20, k_stride=1)  # in0 moves along M and K: 2 x 2**20 elements
    assert iteration_ceiling(moving) == 2**16 * (2 * 2**20 + 2 + 4)
    check_iterations(moving)


# ---- 2. errors of the library's own, the same on numpy and dask operands -------------------

A = np.arange(12.0).reshape(3, 4)
B = np.arange(20.0).reshape(4, 5)


def _dask(x: np.ndarray) -> object:
    return da.from_array(x, chunks=2)


BAD_CALLS = {
    "a NaN memory limit": (lambda X, Y: tp.einsum("ij,jk->ik", X, Y,
                                                  optimize=("greedy", float("nan"))),
                           tp.PlanError, ValueError, "memory limit"),
    "a negative memory limit": (lambda X, Y: tp.einsum("ij,jk->ik", X, Y,
                                                       optimize=("greedy", -1)),
                                tp.PlanError, ValueError, "memory limit"),
    "a memory limit of a string": (lambda X, Y: tp.einsum("ij,jk->ik", X, Y,
                                                          optimize=("greedy", "5")),
                                   tp.OptionTypeError, TypeError, "memory limit"),
    "optimize of an int": (lambda X, Y: tp.einsum("ij,jk->ik", X, Y, optimize=3),
                           tp.OptionTypeError, TypeError, "optimize"),
    "an unknown strategy": (lambda X, Y: tp.einsum("ij,jk->ik", X, Y, optimize="fastest"),
                            tp.PlanError, ValueError, "optimize"),
    "a path step out of range": (lambda X, Y: tp.einsum("ij,jk->ik", X, Y,
                                                        optimize=["einsum_path", (0, 9)]),
                                 tp.PlanError, ValueError, "path step 0"),
    "a label of 2**40": (lambda X, Y: tp.einsum(X, [0, 2**40], Y, [2**40, 1], [0, 1]),
                         tp.EinsumError, ValueError, "sublist entry 1099511627776"),
    "a dtype of strings": (lambda X, Y: tp.einsum("ij,jk->ik", X, Y, dtype=str),
                           tp.DTypeError, TypeError, "dtype"),
    "an unknown dtype": (lambda X, Y: tp.einsum("ij,jk->ik", X, Y, dtype="foo"),
                         tp.DTypeError, TypeError, "dtype"),
    "an unknown epilogue": (lambda X, Y: tp.einsum("ij,jk->ik", X, Y, epilogue="gelu"),
                            tp.PlanError, ValueError, "epilogue"),
    "an unknown order": (lambda X, Y: tp.einsum("ij,jk->ik", X, Y, order="Z"),
                         tp.PlanError, ValueError, "order"),
    "a relu of integers": (lambda X, Y: tp.einsum("ij,jk->ik", X, Y, dtype=np.int64,
                                                  casting="unsafe", epilogue="relu"),
                           tp.DTypeError, TypeError, "epilogue"),
}


@pytest.mark.parametrize("name", list(BAD_CALLS))
def test_bad_arguments_raise_the_same_error_on_numpy_and_dask(name) -> None:
    call, cls, kind, needle = BAD_CALLS[name]
    messages = []
    for x, y in ((A, B), (_dask(A), _dask(B))):
        with pytest.raises(cls, match=needle) as info:
            call(x, y)
        assert isinstance(info.value, tp.TEIRPlanError) and isinstance(info.value, kind)
        messages.append(str(info.value))
    assert messages[0] == messages[1]


@pytest.mark.parametrize("sub,ops", [
    ("ij,->ij", (A, 2.5)),  # a Python scalar operand
    ("ij,j->i", (A, [1.0, 2.0, 3.0, 4.0])),  # a nested list
    ("ij,jk->ik", (A[:, :1], B)),  # a summed index broadcast from extent 1
    ("ij,jk,kl->il", (A[:, :1], B, np.ones((1, 2)))),
    ("ij,jk->ik", (A[:, :0], B[:0])),  # a summed index of extent 0: zeros
    ("ij->j", (A[:0],)),
])
def test_dask_accepts_what_numpy_accepts(sub, ops) -> None:
    want = np.einsum(sub, *[np.asarray(x, dtype=float) for x in ops])
    for i in range(len(ops)):
        if isinstance(ops[i], np.ndarray) and ops[i].ndim:
            mixed = [_dask(x) if j == i else x for j, x in enumerate(ops)]
            got = tp.einsum(sub, *mixed).compute()
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want)
    np.testing.assert_allclose(tp.einsum(sub, *ops), want)


def test_optimize_is_checked_on_two_dask_operands_too() -> None:
    with pytest.raises(tp.OptionTypeError, match="optimize"):
        tp.einsum("ij,jk->ik", _dask(A), _dask(B), optimize={"path": 1})
    # +inf is no limit, as opt_einsum reads it; a huge integer one too
    for limit in (float("inf"), 10**400):
        np.testing.assert_allclose(
            tp.einsum("ij,jk->ik", _dask(A), _dask(B), optimize=("greedy", limit)).compute(),
            A @ B)


def test_dask_arrays_of_unknown_chunks_are_named() -> None:
    x = _dask(np.arange(10.0))
    unknown = x[x > 3]
    with pytest.raises(tp.EinsumError, match="operand 1: a dask array of unknown chunk"):
        tp.einsum("i,j->ij", x, unknown)


def test_shapes_past_64_bit_offsets_are_refused_by_name() -> None:
    with pytest.raises(tp.EinsumError, match="output: .* overflow 64-bit offsets"):
        tp.plan("i,j->ij", (2**40,), (2**40,))
    with pytest.raises(tp.DTypeError, match="dtype: 'foo' is not a numpy dtype"):
        tp.plan("ij->j", (3, 4), dtype="foo")


# ---- 3. numpy's numbers ---------------------------------------------------------------------


def test_a_wider_out_sets_the_computation_type() -> None:
    rng = np.random.default_rng(0)
    a = rng.random((50, 400)).astype(np.float32)
    b = rng.random((400, 30)).astype(np.float32)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    for out in (np.empty((50, 30)), np.empty((50, 30), np.complex128)):
        tp.einsum("ij,jk->ik", a, b, out=out)
        ref = np.einsum("ij,jk->ik", a, b, out=np.empty_like(out))
        assert np.abs(out - exact).max() < 1e-11 and np.abs(ref - exact).max() < 1e-11
    small = np.full((1, 3), 200, np.uint8)
    out = np.empty((1, 1), np.int64)  # numpy sums in int64: no wrap-around at 256
    tp.einsum("ij,jk->ik", small, np.ones((3, 1), np.uint8), out=out)
    assert out[0, 0] == 600


def test_a_real_operand_times_a_complex_one_with_special_values_is_numpys() -> None:
    rng = np.random.default_rng(1)
    x = rng.random((3, 4))
    z = rng.random((4, 5)) + 1j * rng.random((4, 5))
    assert any(isinstance(s, PartsStep) for s in tp.plan("ij,jk->ik", x, z).steps)
    np.testing.assert_allclose(tp.einsum("ij,jk->ik", x, z), np.einsum("ij,jk->ik", x, z))
    for special in (1 + np.inf * 1j, np.inf + 1j, np.nan + 0j, complex(1, np.nan)):
        z[0, 0] = special
        got, want = tp.einsum("ij,jk->ik", x, z), np.einsum("ij,jk->ik", x, z)
        for part in (np.real, np.imag):
            np.testing.assert_array_equal(np.isnan(part(got)), np.isnan(part(want)))
            np.testing.assert_allclose(np.nan_to_num(part(got)), np.nan_to_num(part(want)))


@pytest.mark.parametrize("dtype", [np.int64, np.int8, np.bool_, np.float16])
def test_numpy_computed_dtypes_take_indices_beyond_numpys_letters(dtype) -> None:
    rng = np.random.default_rng(2)
    a = (rng.random((3, 4)) * 4).astype(dtype)
    b = (rng.random((4, 5)) * 4).astype(dtype)
    want = tp.einsum("ij,jk->ik", a, b)
    np.testing.assert_array_equal(tp.einsum("αβ,βγ->αγ", a, b), want)
    np.testing.assert_array_equal(tp.einsum(a, [60, 61], b, [61, 62], [60, 62]), want)
    s = oe.get_symbol
    np.testing.assert_array_equal(
        tp.einsum(f"{s(100)}{s(101)},{s(101)}{s(102)}->{s(100)}{s(102)}", a, b), want)


def test_an_integer_chain_of_more_than_52_indices_runs_pairwise() -> None:
    n = 60
    sym = [oe.get_symbol(i) for i in range(n + 1)]
    sub = ",".join(sym[i] + sym[i + 1] for i in range(n)) + "->" + sym[0] + sym[n]
    rng = np.random.default_rng(3)
    ops = [rng.integers(0, 2, (2, 2)) for _ in range(n)]
    want = np.linalg.multi_dot(ops)
    np.testing.assert_array_equal(tp.einsum(sub, *ops), want)
    wide = "".join(sym[:30]) + "," + "".join(sym[30:60]) + "->" + "".join(sym[:60])
    one = np.ones((1,) * 30, np.int64)
    with pytest.raises(tp.EinsumError, match="at most 52 indices"):
        tp.einsum(wide, one, one)


# ---- 4. process state restored --------------------------------------------------------------


def _process_state() -> tuple[object, ...]:
    from threadpoolctl import threadpool_info

    from teir_plan.schedule.workspace import workspace

    blas = tuple(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas")
    return tp.get_num_threads(), blas, workspace.limit_bytes, workspace.last_limit_bytes


def test_an_in_process_cluster_leaves_the_process_as_it_found_it() -> None:
    distributed = pytest.importorskip("distributed")
    before = _process_state()
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster):
        got = tp.einsum("ik,kj->ij", _dask(A), _dask(B)).compute()
        np.testing.assert_allclose(got, A @ B)
        assert _process_state()[0] == 1  # the workers' setting, while they run
    assert _process_state() == before


# ---- make fuzz: many members of each class -------------------------------------------------

EXTENTS = st.one_of(
    st.sampled_from([PRIME, 2**61 - 1, 65537 * 65539, 963761198400, 2**40, 3**25]),
    st.integers(1, 2**40))
PLANNED = ["ij,jk->ik", "ij->ji", "ijk,kl->lji", "ij->j", "i,i->", "ij,ij->ij"]


@pytest.mark.slow
@fuzz_settings(default=30, fuzz=300)
@given(st.sampled_from(PLANNED), st.data(), st.sampled_from(["K", "C", "F"]))
def test_planning_time_is_bounded_on_any_extents(sub, data, order) -> None:
    terms = sub.split("->")[0].split(",")
    big = data.draw(st.sampled_from(sorted(set("".join(terms)))))
    ext = {c: data.draw(EXTENTS) if c == big else data.draw(st.integers(1, 9))
           for c in set("".join(terms))}
    start = time.perf_counter()
    try:
        tp.plan(sub, *[tuple(ext[c] for c in t) for t in terms], order=order)
    except tp.TEIRPlanError as exc:  # an extent past 64-bit offsets
        assert "overflow" in str(exc)
    assert time.perf_counter() - start < 2.0


OPTIMIZE_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=5),
    st.sampled_from(["greedy", "optimal", "dp", "autotune", "einsum_path"]),
    st.tuples(st.sampled_from(["greedy", "optimal", "nope"]),
              st.one_of(st.floats(allow_nan=True), st.integers(-5, 10**30), st.text(max_size=3),
                        st.none())),
    st.lists(st.one_of(st.tuples(st.integers(-1, 3), st.integers(-1, 3)), st.integers(),
                       st.text(max_size=2)), max_size=3),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2))


@pytest.mark.slow
@fuzz_settings(default=60, fuzz=2000)
@given(OPTIMIZE_VALUES)
def test_damaged_optimize_values_give_numpys_result_or_one_error(optimize) -> None:
    C = np.ones((5, 2))
    outcomes = []
    for ops in ((A, B, C), (_dask(A), _dask(B), _dask(C))):
        try:
            got = tp.einsum("ij,jk,kl->il", *ops, optimize=optimize)
            got = got.compute() if hasattr(got, "compute") else got
            np.testing.assert_allclose(got, A @ B @ C)
            outcomes.append("ok")
        except tp.TEIRPlanError as exc:
            assert isinstance(exc, (ValueError, TypeError))
            outcomes.append(f"{type(exc).__name__}: {exc}")
    assert outcomes[0] == outcomes[1]


SPECIAL = st.sampled_from([0.0, 1.0, -2.5, np.inf, -np.inf, np.nan])


@pytest.mark.slow
@fuzz_settings(default=60, fuzz=3000)
@given(st.data(), st.sampled_from(["ij,jk->ik", "ij,jk->ijk", "ij,ij->i", "i,ij->j"]),
       st.sampled_from([np.complex64, np.complex128]))
def test_real_times_complex_with_special_values_is_numpys(data, sub, ctype) -> None:
    ins = sub.split("->")[0].split(",")
    ext = {"i": 3, "j": 4, "k": 2}
    rtype = np.float32 if ctype == np.complex64 else np.float64
    x = np.array(data.draw(st.lists(SPECIAL, min_size=12, max_size=12)), rtype)
    x = x[: math.prod(ext[c] for c in ins[0])].reshape([ext[c] for c in ins[0]])
    parts = data.draw(st.lists(SPECIAL, min_size=24, max_size=24))
    n = math.prod(ext[c] for c in ins[1])
    z = np.empty([ext[c] for c in ins[1]], ctype)  # (1j * inf would be nan + inf j)
    z.real = np.reshape(parts[:n], z.shape)
    z.imag = np.reshape(parts[12:12 + n], z.shape)
    with np.errstate(all="ignore"):
        want = np.einsum(sub, x.astype(ctype), z)
        got = tp.einsum(sub, x, z)
    for part in (np.real, np.imag):
        np.testing.assert_array_equal(np.isnan(part(got)), np.isnan(part(want)))
        np.testing.assert_allclose(np.nan_to_num(part(got)), np.nan_to_num(part(want)),
                                   rtol=1e-5)


@pytest.mark.slow
@fuzz_settings(default=40, fuzz=1000)
@given(st.lists(st.integers(0, 2000), min_size=3, max_size=3, unique=True),
       st.sampled_from([np.int32, np.int64, np.uint8, np.bool_]))
def test_interleaved_labels_of_any_size_on_numpy_dtypes(labels, dtype) -> None:
    i, j, k = labels
    a = (np.arange(12) % 3).reshape(3, 4).astype(dtype)
    b = (np.arange(20) % 2).reshape(4, 5).astype(dtype)
    np.testing.assert_array_equal(tp.einsum(a, [i, j], b, [j, k], [i, k]),
                                  np.einsum("ij,jk->ik", a, b))


@pytest.mark.slow
@fuzz_settings(default=60, fuzz=3000)
@given(st.lists(st.integers(1, 2**24), min_size=1, max_size=4), st.data())
def test_the_iteration_ceiling_is_refused_before_anything_runs(sizes, data) -> None:
    moves = [data.draw(st.booleans()) for _ in sizes]
    steps, stride = [], 1
    for n, m in zip(sizes, moves):
        steps.append(stride if m else 0)
        stride *= n if m else 1
    prog = tp.TEIR(tp.Primitives("float64", "none", "copy", "none"),
                   tp.Schedule(["c"] * len(sizes), ["seq"] * len(sizes), sizes,
                               [steps, [0] * len(sizes)]))
    total = math.prod(sizes)
    if total > iteration_ceiling(prog):
        with pytest.raises(tp.TEIRError, match="dim_sizes"):
            check_iterations(prog)
    else:
        check_iterations(prog)
    assert iteration_ceiling(prog) >= 2**16 * stride  # the elements in0 addresses


@pytest.mark.slow
@fuzz_settings(default=3, fuzz=10)
@given(st.integers(1, 2), st.sampled_from([0, 1 << 20, 1 << 30]))
def test_in_process_clusters_restore_any_settings(threads, pool) -> None:
    distributed = pytest.importorskip("distributed")
    from teir_plan.schedule.workspace import workspace

    old = tp.get_num_threads(), workspace.limit_bytes
    tp.set_num_threads(min(threads, tp.get_num_threads()))
    workspace.limit_bytes = pool
    try:
        before = _process_state()
        with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                      dashboard_address=None) as cluster, \
                distributed.Client(cluster):
            tp.einsum("ij->j", _dask(A)).compute()
        assert _process_state() == before
    finally:
        tp.set_num_threads(old[0])
        workspace.limit_bytes = old[1]
