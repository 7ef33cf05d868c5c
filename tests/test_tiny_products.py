"""Tiny products on numpy's dot (schedule/tiny.py) and the two-operand hot paths
(api.einsum's pair lookup, Plan.__call__'s last layouts): every answer is numpy's in
float64, whatever arrays of the same shape but other strides, dtypes or byte orders come
between cached calls, and bad input is refused with the same errors as the full path."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import teir_plan as tp
from teir_plan.errors import DTypeError, EinsumError, PlanError

RNG = np.random.default_rng(37)


def _ref(expr: str, *ops: np.ndarray) -> np.ndarray:
    return np.einsum(expr, *[np.asarray(o, np.float64) for o in ops])


def _layouts(shape: tuple[int, int], dtype: object = np.float64) -> list[np.ndarray]:
    """Arrays of one shape in many layouts: C, F, a strided slice, reversed axes, a
    broadcast row (zero stride), an unaligned copy and a big-endian one."""
    base = RNG.standard_normal(shape).astype(dtype)
    big = RNG.standard_normal((shape[0] * 2, shape[1] * 3)).astype(dtype)
    raw = np.zeros(base.nbytes + 1, np.uint8)[1:].view(base.dtype).reshape(shape)
    raw[...] = base
    return [base, np.asfortranarray(base), big[::2, 1::3], base[::-1, ::-1],
            np.broadcast_to(base[0], shape), raw, base.astype(base.dtype.newbyteorder(">"))]


EXPRS = ["ij,jk->ik", "ji,jk->ik", "ij,kj->ik", "ji,kj->ik", "ij,jk->ki", "jk,ij->ik",
         "kj,ji->ki"]


@pytest.mark.parametrize("expr", EXPRS)
def test_tiny_products_take_dot_and_agree_with_numpy(expr: str) -> None:
    (t0, t1) = expr.split("->")[0].split(",")
    ext = {"i": 8, "j": 6, "k": 7}
    a = RNG.standard_normal(tuple(ext[c] for c in t0))
    b = RNG.standard_normal(tuple(ext[c] for c in t1))
    p = tp.plan(expr, a, b)
    assert p._route is not None, p.explain()
    for _ in range(3):  # the first call checks, the next ones take the hot path
        np.testing.assert_allclose(p(a, b), _ref(expr, a, b), atol=1e-12)
        np.testing.assert_allclose(tp.einsum(expr, a, b), _ref(expr, a, b), atol=1e-12)
        out = np.empty_like(p.empty_out())
        assert p(a, b, out=out) is out
        np.testing.assert_allclose(out, _ref(expr, a, b), atol=1e-12)


def test_a_result_planned_column_major_is_written_column_major() -> None:
    a, b = RNG.standard_normal((2, 8, 8))
    p = tp.plan("ij,jk->ik", a, b, out=np.empty((8, 8), order="F"))
    assert p._route is not None
    for _ in range(2):
        got = p(a, b)
        assert got.strides == (8, 64)
        np.testing.assert_allclose(got, a @ b, atol=1e-12)


def test_changed_layouts_and_dtypes_between_cached_calls_get_right_answers() -> None:
    """Alternating operands of one shape in every layout and dtype through tp.einsum
    and a plan's own call: the hot paths must never reuse a plan made for another
    layout, and a call they cannot take goes the checked way."""
    a_all = _layouts((8, 5)) + [RNG.standard_normal((8, 5)).astype(np.float32)]
    b_all = _layouts((5, 8)) + [RNG.standard_normal((5, 8)).astype(np.float32)]
    tp.plan_cache.clear()
    for _ in range(2):
        for a, b in itertools.product(a_all, b_all):
            tol = 1e-4 if np.float32 in (a.dtype, b.dtype) else 1e-12
            np.testing.assert_allclose(tp.einsum("ij,jk->ik", a, b), _ref("ij,jk->ik", a, b),
                                       rtol=tol, atol=tol)
    c, d = RNG.standard_normal((8, 5)), RNG.standard_normal((5, 8))
    p = tp.plan("ij,jk->ik", c, d)
    for a, b in itertools.product(a_all, b_all):
        np.testing.assert_allclose(p(c, d), c @ d, atol=1e-12)  # the plan's own layout
        same = (a.dtype == np.float64 and a.dtype.isnative and a.strides == c.strides
                and b.dtype == np.float64 and b.dtype.isnative and b.strides == d.strides)
        if same:
            np.testing.assert_allclose(p(a, b), _ref("ij,jk->ik", a, b), atol=1e-12)
        else:
            with pytest.raises(PlanError, match="this plan was made for"):
                p(a, b)


def test_an_array_changed_in_place_is_not_taken_for_its_old_layout() -> None:
    a = RNG.standard_normal((8, 8))
    b = RNG.standard_normal((8, 8))
    p = tp.plan("ij,jk->ik", a, b)
    for _ in range(2):
        np.testing.assert_allclose(tp.einsum("ij,jk->ik", a, b), a @ b, atol=1e-12)
        np.testing.assert_allclose(p(a, b), a @ b, atol=1e-12)
    a.shape = (4, 16)
    with pytest.raises(EinsumError):
        tp.einsum("ij,jk->ik", a, b)
    with pytest.raises(PlanError, match="shape differs"):
        p(a, b)
    a.shape = (8, 8)
    b.dtype = np.int64  # the same bytes read as integers: numpy's answer for those
    np.testing.assert_allclose(tp.einsum("ij,jk->ik", a, b), np.einsum("ij,jk->ik", a, b),
                               rtol=1e-12)
    with pytest.raises(PlanError, match="dtype differs"):
        p(a, b)


def test_mismatched_inputs_are_refused_after_cached_calls() -> None:
    a, b = RNG.standard_normal((2, 8, 8))
    p = tp.plan("ij,jk->ik", a, b)
    for _ in range(2):
        tp.einsum("ij,jk->ik", a, b)
        p(a, b)
    with pytest.raises(EinsumError):
        tp.einsum("ij,jk->ik", a, RNG.standard_normal((7, 8)))
    with pytest.raises(PlanError, match="operand 1"):
        p(a, RNG.standard_normal((7, 8)))
    with pytest.raises(PlanError, match="takes 2 operand"):
        p(a)
    with pytest.raises(PlanError, match="overlaps"):
        p(a, b, out=a)
    with pytest.raises(DTypeError):
        p(a, b, out=np.empty((8, 8), np.float32))
    frozen = np.empty((8, 8))
    frozen.flags.writeable = False
    with pytest.raises(PlanError, match="read-only"):
        tp.einsum("ij,jk->ik", a, b, out=frozen)
    with pytest.raises(PlanError, match="element strides"):
        p(a, b, out=np.empty((8, 8), order="F"))


@pytest.mark.parametrize("expr, shapes", [
    ("abc,cd->abd", [(3, 4, 5), (5, 6)]),
    ("bij,bjk->bik", [(3, 8, 8), (3, 8, 8)]),  # a batch of tiny products
    ("ii,ij->ij", [(8, 8), (8, 8)]),  # a diagonal
    ("ijk,jkl->il", [(6, 6, 6), (6, 6, 6)]),
])
def test_small_products_of_any_form_run_numpys_loop(expr: str, shapes) -> None:  # type: ignore[no-untyped-def]
    """Up to TINY_EINSUM_FLOPS a product the executor would run as one program runs as
    numpy.einsum's C loop (the executor's call costs more than the whole loop), into the
    layout the plan chose, with out= too."""
    from teir_plan.schedule.tiny import TINY_EINSUM_FLOPS

    for dtype in (np.float32, np.float64):
        ops = [RNG.standard_normal(s).astype(dtype) for s in shapes]
        p = tp.plan(expr, *ops)
        assert p.numpy_call == "einsum"
        assert p.main_step is not None and p.main_step.chosen.cost.flops <= TINY_EINSUM_FLOPS
        ref = _ref(expr, *ops)
        tol = 1e-5 if dtype == np.float32 else 1e-12
        for _ in range(2):
            got = tp.einsum(expr, *ops)
            np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)
            # in the layout the plan chose (numpy allocates it when that is C order)
            assert tuple(n // got.itemsize for n in got.strides) == p.out_spec.strides
        out = np.full(p.shape, np.nan, dtype)
        assert tp.einsum(expr, *ops, out=out) is out
        np.testing.assert_allclose(out, ref, rtol=tol, atol=tol)
        assert tp.plan(expr, *ops, epilogue="relu").numpy_call is None


@pytest.mark.parametrize("expr, shapes", [
    ("ij,jk->ik", [(8, 8), (8, 8)]),  # with ReLU, below
    ("bij,bjk->bik", [(3, 16, 16), (3, 16, 16)]),  # a batch: no single GEMM, not tiny
    ("ij,j->i", [(400, 400), (400,)]),  # a matrix-vector product beyond TINY_MV_BYTES
    ("i,i->", [(20000,), (20000,)]),  # a dot product beyond TINY_DOT_BYTES
    ("ij,jk->ik", [(300, 300), (300, 300)]),  # large: the executor, BLAS held to 1 thread
])
def test_other_products_keep_the_executor(expr: str, shapes: list[tuple[int, ...]]) -> None:
    ops = [RNG.standard_normal(s) for s in shapes]
    relu = shapes == [(8, 8), (8, 8)]
    p = tp.plan(expr, *ops, epilogue="relu" if relu else None)
    assert p._route is None
    ref = _ref(expr, *ops)
    for _ in range(2):
        got = p(*ops)
        np.testing.assert_allclose(got, np.maximum(ref, 0) if relu else ref, atol=1e-9)
        if not relu:
            np.testing.assert_allclose(tp.einsum(expr, *ops), ref, atol=1e-9)


@pytest.mark.parametrize("expr, shapes, call", [
    ("ij,jk->ik", [(8, 8), (8, 8)], "dot"),
    ("abc,cd->abd", [(3, 4, 5), (5, 6)], "einsum"),
    ("ijk,jk->i", [(6, 5, 4), (5, 4)], "einsum"),
])
def test_floating_point_errors_are_ignored_as_numpy_einsum_ignores_them(
        expr: str, shapes: list, call: str) -> None:
    """inf * 0 is nan with no RuntimeWarning or FloatingPointError (numpy.einsum's and
    the executor's behaviour), and numpy's error state is the caller's again after."""
    a = np.full(shapes[0], np.inf)
    b = np.zeros(shapes[1])
    p = tp.plan(expr, a, b)
    assert p.numpy_call == call
    out = p.empty_out()
    with np.errstate(all="raise"):
        for _ in range(2):
            assert np.isnan(tp.einsum(expr, a, b)).all()
            assert np.isnan(p(a, b)).all()
            p(a, b, out=out)
            assert np.isnan(out).all()
        with pytest.raises(FloatingPointError):
            np.multiply(a, 0.0)  # the state is raise again
    assert np.geterr()["invalid"] == "warn"


@pytest.mark.parametrize("shape", [(8, 8), (40, 40)])  # on dot; on the executor
def test_out_is_checked_on_every_call_of_the_hot_paths(shape: tuple[int, int]) -> None:
    """An out of a layout accepted before is still checked for what differs between
    arrays of one layout: writability, overlap with the operands, alignment."""
    a, b = RNG.standard_normal((2, *shape))
    p = tp.plan("ij,jk->ik", a, b)
    out = np.empty(shape)
    for _ in range(3):
        for call in (lambda o: tp.einsum("ij,jk->ik", a, b, out=o), lambda o: p(a, b, out=o)):
            out[...] = np.nan
            assert call(out) is out
            np.testing.assert_allclose(out, a @ b, atol=1e-12)
            with pytest.raises(PlanError, match="overlaps operand 0"):
                call(a)
            with pytest.raises(PlanError, match="overlaps operand 1"):
                call(b)
            frozen = np.empty(shape)
            frozen.flags.writeable = False
            with pytest.raises(PlanError, match="read-only"):
                call(frozen)
            raw = np.zeros(out.nbytes + 1, np.uint8)[1:].view(np.float64).reshape(shape)
            assert call(raw) is raw  # unaligned: written through a copy
            np.testing.assert_allclose(raw, a @ b, atol=1e-12)
        with pytest.raises(PlanError, match="element strides"):
            p(a, b, out=np.empty(shape, order="F"))  # (tp.einsum plans for that layout)
        f = np.empty(shape, order="F")
        np.testing.assert_allclose(tp.einsum("ij,jk->ik", a, b, out=f), a @ b, atol=1e-12)


@pytest.mark.parametrize("expr", ["ij,j->i", "ji,j->i", "j,ij->i", "j,ji->i"])
@pytest.mark.parametrize("n", [8, 16, 40])
def test_tiny_matrix_vector_products_take_dot_and_agree_with_numpy(expr: str, n: int) -> None:
    t0, t1 = expr.split("->")[0].split(",")
    ext = {"i": n, "j": n + 3}
    vec = RNG.standard_normal(n + 3)
    ops = [RNG.standard_normal(tuple(ext[c] for c in t)) if len(t) == 2 else vec
           for t in (t0, t1)]
    p = tp.plan(expr, *ops)
    assert p._route is not None, p.steps[0].describe()
    out = np.empty(n)
    for _ in range(3):
        np.testing.assert_allclose(p(*ops), _ref(expr, *ops), atol=1e-12)
        np.testing.assert_allclose(tp.einsum(expr, *ops), _ref(expr, *ops), atol=1e-12)
        assert p(*ops, out=out) is out
        np.testing.assert_allclose(out, _ref(expr, *ops), atol=1e-12)
    strided = np.empty(2 * n)[::2]  # an out of another layout: its own plan, written
    np.testing.assert_allclose(tp.einsum(expr, *ops, out=strided), _ref(expr, *ops),
                               atol=1e-12)
    for mat in _layouts(ops[0].shape if len(t0) == 2 else ops[1].shape):
        args = [mat, vec] if len(t0) == 2 else [vec, mat]
        np.testing.assert_allclose(tp.einsum(expr, *args), _ref(expr, *args), atol=1e-12)


def test_tiny_dot_products_take_dot_into_a_0d_array() -> None:
    v, w = RNG.standard_normal((2, 40))
    p = tp.plan("i,i->", v, w)
    assert p._route is not None, p.steps[0].describe()
    out = np.empty(())
    for x, y in [(v, w), (v[::-1], w), (np.broadcast_to(v[:1], (40,)), w), (v, w)]:
        got = tp.einsum("i,i->", x, y)
        assert type(got) is np.ndarray and got.shape == ()
        np.testing.assert_allclose(got, np.dot(x, y), atol=1e-12)
        assert tp.einsum("i,i->", x, y, out=out) is out
        np.testing.assert_allclose(out, np.dot(x, y), atol=1e-12)
    got = p(v, w)
    assert type(got) is np.ndarray and got.shape == ()
    np.testing.assert_allclose(got, np.dot(v, w), atol=1e-12)
    with pytest.raises(PlanError, match="operand 0"):
        p(v[::-1], w)


@pytest.mark.parametrize("expr", ["ij->ji", "ii->i", "ij->i", "ij->", "ij->ij"])
def test_one_operand_hot_paths_agree_with_numpy_for_every_layout(expr: str) -> None:
    """tp.einsum's and a plan's one-operand hot paths: views stay views of the array
    passed (writing them writes it), sums are numpy's, other layouts are planned apart
    or refused by the plan."""
    layouts = _layouts((6, 6))
    p = tp.plan(expr, layouts[0])
    for _ in range(2):
        for x in layouts:
            got = tp.einsum(expr, x)
            np.testing.assert_allclose(got, _ref(expr, x), atol=1e-12)
            if p.view is not None and x.flags.aligned and x.dtype.isnative:
                assert np.shares_memory(got, x)
            if x.strides == layouts[0].strides and x.dtype == np.float64 and x.dtype.isnative:
                np.testing.assert_allclose(p(x), _ref(expr, x), atol=1e-12)
            else:
                with pytest.raises(PlanError, match="operand 0"):
                    p(x)
    if p.view is not None:
        x = layouts[0].copy()
        tp.einsum(expr, x)[...] = 7.0
        assert (np.einsum(expr, x) == 7.0).all()


def test_alternatives_and_autotune_time_the_programs_themselves() -> None:
    """A plan's alternatives (autotune's and explain(measure=True)'s) run their
    candidates' programs on the executor, not dot; the answers are numpy's either way."""
    a, b = RNG.standard_normal((2, 8, 8))
    p = tp.plan("ij,jk->ik", a, b)
    assert p._route is not None
    for alt in p.alternatives:
        assert alt._route is None
        np.testing.assert_allclose(alt(a, b), a @ b, atol=1e-12)
    for _ in range(2):
        np.testing.assert_allclose(tp.einsum("ij,jk->ik", a, b, optimize="autotune"), a @ b,
                                   atol=1e-12)
    assert p.explain(measure=True).measured_seconds is not None


def test_explain_says_when_calls_run_on_dot() -> None:
    small = np.ones((8, 8))
    assert "numpy's dot" in str(tp.explain("ij,jk->ik", small, small))
    assert "numpy's dot" in str(tp.explain("ij,j->i", small, small[0]))
    large = np.ones((300, 300))
    assert "numpy's dot" not in str(tp.explain("ij,jk->ik", large, large))


SUMS = ["ij->j", "ij->i", "ij->", "ijk->ki", "ijk->j", "ijk->"]


@pytest.mark.parametrize("expr", SUMS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tiny_sums_take_numpys_einsum_and_agree_with_numpy(expr: str, dtype: type) -> None:
    """One-operand sums of tiny operands run as numpy.einsum's loop, for every layout of
    the operand and into every out= (C, F, strided, 0-d)."""
    term = expr.split("->")[0]
    shape = (6, 7, 5)[:len(term)]
    x = RNG.standard_normal(shape).astype(dtype)
    p = tp.plan(expr, x)
    assert p.numpy_call == "einsum", p.steps[0].describe()
    tol = 1e-5 if dtype == np.float32 else 1e-12
    ref = _ref(expr, x)
    (own,) = p.alternatives  # the reduction kernel itself, as the properties check it
    assert own.numpy_call is None
    np.testing.assert_allclose(own(x), ref, rtol=tol, atol=tol)
    for _ in range(3):  # the first call checks, the next ones take the hot path
        np.testing.assert_allclose(p(x), ref, rtol=tol, atol=tol)
        np.testing.assert_allclose(tp.einsum(expr, x), ref, rtol=tol, atol=tol)
        out = p.empty_out()
        assert p(x, out=out) is out
        np.testing.assert_allclose(out, ref, rtol=tol, atol=tol)
    outs = [np.empty(ref.shape, dtype)]
    if ref.ndim == 2:
        outs += [np.empty(ref.shape, dtype, order="F"),
                 np.empty((ref.shape[0] * 2, ref.shape[1]), dtype)[::2]]
    for out in outs:
        assert tp.einsum(expr, x, out=out) is out
        np.testing.assert_allclose(out, ref, rtol=tol, atol=tol)
    for y in (x[::-1], np.asfortranarray(x), np.swapaxes(x, 0, -1).copy().swapaxes(0, -1)):
        np.testing.assert_allclose(tp.einsum(expr, y), _ref(expr, y), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
def test_tiny_sums_propagate_nan_and_inf_without_warnings(dtype: type) -> None:
    x = RNG.standard_normal((6, 7)).astype(dtype)
    x[1, 2] = np.nan
    x[3, 4] = np.inf
    x[4, 4] = -np.inf  # column 4: inf - inf = nan
    big = np.full((6, 7), np.finfo(np.dtype(dtype).type(0).real.dtype).max / 2, dtype)
    with np.errstate(all="raise"):
        for _ in range(2):
            for arr in (x, big):
                for expr in ("ij->j", "ij->i", "ij->"):
                    got = tp.einsum(expr, arr)
                    ref = np.einsum(expr, arr.astype(np.complex128 if np.iscomplexobj(arr)
                                                     else np.float64))
                    # big: the float64 reference is finite where the dtype's sum is inf
                    if arr is x:
                        np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
                        np.testing.assert_array_equal(np.isinf(got), np.isinf(ref))
    assert np.geterr()["over"] == "warn"


PRODUCTS = ["ij,ij->ij", "ij,j->ij", "j,ij->ij", "i,j->ij", "ij,ji->ij", "ij,jk->ijk",
            "ij,ij->ji"]


@pytest.mark.parametrize("expr", PRODUCTS)
def test_tiny_products_without_a_summed_index_take_multiply(expr: str) -> None:
    t0, t1 = expr.split("->")[0].split(",")
    ext = {"i": 6, "j": 6, "k": 5}
    a = RNG.standard_normal(tuple(ext[c] for c in t0))
    b = RNG.standard_normal(tuple(ext[c] for c in t1))
    p = tp.plan(expr, a, b)
    assert p.numpy_call == "multiply", p.steps[0].describe()
    ref = _ref(expr, a, b)
    for _ in range(3):
        np.testing.assert_array_equal(p(a, b), ref)  # one product per element: exact
        np.testing.assert_array_equal(tp.einsum(expr, a, b), ref)
        out = p.empty_out()
        assert p(a, b, out=out) is out
        np.testing.assert_array_equal(out, ref)
        f = np.empty(ref.shape, order="F")
        assert tp.einsum(expr, a, b, out=f) is f
        np.testing.assert_array_equal(f, ref)
    relu = tp.plan(expr, a, b, epilogue="relu")
    assert relu.numpy_call is None
    np.testing.assert_array_equal(relu(a, b), np.maximum(ref, 0))
    with np.errstate(all="raise"):
        inf = np.full_like(a, np.inf)
        zero = np.zeros_like(b)
        assert np.isnan(tp.einsum(expr, inf, zero)).all()


@pytest.mark.parametrize("expr, shapes", [
    ("ij->j", [(200, 200)]),  # beyond TINY_UFUNC_BYTES: the reduction kernel
    ("ij,ij->ij", [(200, 200), (200, 200)]),
    ("ij,jk->ijk", [(40, 40), (40, 40)]),
])
def test_larger_sums_and_products_keep_the_executor(expr: str, shapes: list) -> None:
    ops = [RNG.standard_normal(s) for s in shapes]
    p = tp.plan(expr, *ops)
    assert p.numpy_call is None
    np.testing.assert_allclose(p(*ops), _ref(expr, *ops), atol=1e-9)


def test_explain_names_the_numpy_call() -> None:
    small = np.ones((8, 8))
    assert "numpy's einsum" in str(tp.explain("ij->j", small))
    assert "numpy's multiply" in str(tp.explain("ij,j->ij", small, small[0]))


@pytest.mark.parametrize("expr, shapes, call", [
    ("ii->", [(7, 7)], "einsum"),
    ("iij->j", [(6, 6, 5)], "einsum"),
    ("iji->ij", [(6, 5, 6)], None),  # a diagonal without a sum: a view
    ("ij,ij->", [(6, 7), (6, 7)], "einsum"),
    ("ijk,jk->i", [(6, 5, 4), (5, 4)], "einsum"),
    ("jk,ijk->i", [(5, 4), (6, 5, 4)], "einsum"),
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
def test_tiny_diagonal_and_weighted_sums_take_numpys_einsum(expr: str, shapes: list,
                                                            call: str | None,
                                                            dtype: type) -> None:
    ops = [RNG.standard_normal(s).astype(dtype) for s in shapes]
    if np.dtype(dtype).kind == "c":
        ops = [o + 1j * RNG.standard_normal(o.shape) for o in ops]
    p = tp.plan(expr, *ops)
    if np.dtype(dtype).kind == "f" or len(ops) == 1:  # (complex weighted sums: TEIR)
        assert p.numpy_call == call, [s.describe() for s in p.steps]
    ref = np.einsum(expr, *[o.astype(np.complex128) for o in ops])
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for _ in range(3):
        np.testing.assert_allclose(p(*ops), ref, rtol=tol, atol=tol)
        np.testing.assert_allclose(tp.einsum(expr, *ops), ref, rtol=tol, atol=tol)
        out = p.empty_out()
        assert p(*ops, out=out) is out
        np.testing.assert_allclose(out, ref, rtol=tol, atol=tol)
    if ref.ndim:
        strided = np.empty((ref.shape[0] * 2, *ref.shape[1:]), ops[0].dtype)[::2]
        assert tp.einsum(expr, *ops, out=strided) is strided
        np.testing.assert_allclose(strided, ref, rtol=tol, atol=tol)
    flipped = [o[::-1] for o in ops]
    np.testing.assert_allclose(tp.einsum(expr, *flipped),
                               np.einsum(expr, *[o.astype(np.complex128) for o in flipped]),
                               rtol=tol, atol=tol)
