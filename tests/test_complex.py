"""complex64 and complex128 as TEIR data types (GitHub issue 38): records, validation,
JSON, the executor's tiles (BLAS cgemm/zgemm, loops, dot, rows, copies), planning and
tp.einsum, against numpy.einsum in complex128.

Tolerances: complex64 results follow float32's (``rtol = atol = 1e-5`` on the spec's
examples and the hand-written tiles, whose operands are standard normal in both parts),
complex128 float64's (1e-12); the einsum properties use tests/strategies.py's bound,
eps of the parts' type.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import teir_plan as tp
from teir_plan import blaslib
from teir_plan.executor.complex_tiles import expand_parts
from teir_plan.executor.lower import lower
from tests import spec_examples
from tests.gemm_programs import gemm_program
from tests.strategies import (
    EinsumProblem,
    assert_einsum_close,
    counted,
    einsum_problems,
    einsum_reference,
    fuzz_settings,
    operand_recipes,
)

COMPLEX = ("complex64", "complex128")
TOL = {"complex64": 1e-5, "complex128": 1e-12}
SENTINEL = -12345.0 + 678.0j


def _values(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Standard normal in both parts (no part zero)."""
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


def _ref(expr: str, *ops: np.ndarray) -> np.ndarray:
    return np.einsum(expr, *[np.asarray(o, np.complex128) for o in ops])


# ---- TEIR records -------------------------------------------------------------------


@pytest.mark.parametrize("dtype", COMPLEX)
def test_complex_programs_validate_print_and_round_trip(dtype):
    prog, *_ = spec_examples.brgemm_contraction(dtype)
    prog.validate()
    assert prog.primitives.data_type is tp.DataType.coerce(dtype)
    assert prog.primitives.data_type.numpy == np.dtype(dtype)
    assert f"data_type={dtype}" in prog.format()
    assert tp.TEIR.from_json(prog.to_json()) == prog
    alias = {"complex64": "c64", "complex128": "C128"}[dtype]
    assert tp.DataType.coerce(alias) is prog.primitives.data_type


@pytest.mark.parametrize("dtype", COMPLEX)
def test_etops_json_refuses_complex_and_its_reader_is_unchanged(dtype):
    prog, *_ = spec_examples.gemm_contraction(dtype)
    with pytest.raises(tp.TEIRError, match=f"data_type: .*{dtype}") as info:
        prog.to_etops_json()
    assert isinstance(info.value, ValueError)
    # etops' nested form ([level][tensor][dim], 'shared') read as before, any data type.
    real = json.loads(spec_examples.gemm_contraction("float32")[0].to_etops_json())
    real["data_type"] = dtype
    assert tp.TEIR.from_json(json.dumps(real)) == prog


@pytest.mark.parametrize("dtype", COMPLEX)
def test_relu_is_refused_for_complex_programs(dtype):
    prog, *_ = spec_examples.gemm_contraction(dtype)
    p, s = prog.primitives, prog.schedule
    last = tp.TEIR(tp.Primitives(dtype, p.prim_first, p.prim_main, "relu"), s)
    with pytest.raises(tp.TEIRError, match="prim_last: relu is not defined for data_type="
                       + dtype):
        last.validate()
    copy, *_ = spec_examples.tiled_permutation(dtype)
    unary = tp.TEIR(tp.Primitives(dtype, "none", "relu", "none"), copy.schedule)
    with pytest.raises(tp.TEIRError, match="prim_main: relu"):
        unary.validate()
    a = np.ones((3, 5, 7, 4), dtype)
    out = np.full((7, 4, 3, 5), SENTINEL, dtype)
    with pytest.raises(tp.TEIRError):
        tp.execute(unary, a, out)
    assert (out == SENTINEL).all()


# ---- the executor ---------------------------------------------------------------------


@pytest.mark.parametrize("dtype", COMPLEX)
@pytest.mark.parametrize("build", spec_examples.ALL, ids=lambda f: f.__name__)
def test_spec_examples_run_in_complex(build, dtype):
    prog, expr, shapes, out_shape = build(dtype)
    prog.validate()
    rng = np.random.default_rng(1)
    ins = [_values(rng, s, dtype) for s in shapes]
    out = np.full(out_shape, np.nan, dtype=dtype)
    if prog.primitives.prim_first is tp.Prim.NONE and not prog.is_unary:
        out[...] = 0  # the scalar examples accumulate into a zeroed output
    tp.execute(prog, *ins, out)
    np.testing.assert_allclose(out, _ref(expr, *ins), rtol=TOL[dtype], atol=TOL[dtype])


# (m, n, k, strides of in0 along (m, k), in1 along (k, n), out along (m, n)) and the tile
# mode the executor must pick: every BLAS form (N/T for each operand, out either way
# round), operands BLAS cannot address (packed), an output it cannot (scratch), the
# strided loops, dot products and rows.
_TILES = [
    ((24, 20, 36), (1, 24), (1, 36), (1, 24), "blas"),     # NN, column-major C
    ((24, 20, 36), (36, 1), (20, 1), (20, 1), "blas"),     # row-major: swapped
    ((24, 20, 36), (36, 1), (1, 36), (1, 24), "blas"),     # A transposed
    ((24, 20, 36), (1, 24), (20, 1), (1, 24), "blas"),     # B transposed
    ((24, 20, 36), (2, 48), (2, 72), (1, 24), "blas"),     # both operands packed
    ((24, 20, 36), (1, 24), (1, 36), (2, 48), "blas"),     # out through scratch
    ((3, 4, 5), (1, 3), (1, 5), (1, 3), "loops"),          # too small for BLAS
    ((40, 1, 64), (64, 1), (1, 0), (1, 0), "dot"),         # one column: dots
]


@pytest.mark.parametrize("dtype", COMPLEX)
@pytest.mark.parametrize("case", _TILES, ids=lambda c: f"{c[0]}-{c[1]}-{c[2]}-{c[3]}")
@pytest.mark.parametrize("schedule", [(1, "zero", None), (3, "zero", 1), (2, "none", 2)])
def test_gemm_tiles_on_complex_elements(dtype, case, schedule):
    (m, n, k), a_mk, b_kn, c_mn, mode = case
    ksplit, first, par = schedule
    if par == 2 and n % 2 or par == 1 and m % 2 or k % ksplit:
        pytest.skip("the split must divide the axis")
    prog = gemm_program(dtype, m, n, k, ksplit, a_mk, b_kn, c_mn, first, "none", par)
    low = lower(prog)
    assert low.kind.name == mode
    if mode == "blas":
        assert low.calls_blas
    rng = np.random.default_rng(2)
    span = lambda st, ext: 1 + sum(s * (e - 1) for s, e in zip(st, ext))  # noqa: E731
    a = _values(rng, (span(a_mk, (m, k)),), dtype)
    b = _values(rng, (span(b_kn, (k, n)),), dtype)
    c0 = _values(rng, (span(c_mn, (m, n)),), dtype)
    out = c0.copy()
    tp.execute(prog, a, b, out)
    view = lambda x, st, ext: np.lib.stride_tricks.as_strided(  # noqa: E731
        x, ext, [s * x.itemsize for s in st])
    want = c0.astype(np.complex128)
    got_view = view(out, c_mn, (m, n))
    ref = view(a, a_mk, (m, k)).astype(np.complex128) @ view(b, b_kn, (k, n)).astype(
        np.complex128)
    if first == "none":
        ref = ref + view(want, c_mn, (m, n))
    np.testing.assert_allclose(got_view, ref, rtol=TOL[dtype] * 10, atol=TOL[dtype] * 10)
    # Elements of out outside the tile's addresses are untouched.
    touched = np.zeros(out.shape, bool)
    view(touched, c_mn, (m, n))[...] = True
    assert (out[~touched] == c0[~touched]).all()


@pytest.mark.parametrize("dtype", COMPLEX)
def test_copy_programs_move_complex_elements_bit_for_bit(dtype):
    """Copies (a permutation, with parallel loops, streamed-size outputs included) move
    elements whole: NaN payloads, signed zeros and infinities in either part survive."""
    rng = np.random.default_rng(3)
    for shape, perm in [((37, 41), (1, 0)), ((6, 40, 33), (2, 0, 1)),
                        ((512, 1100), (1, 0))]:
        x = _values(rng, shape, dtype)
        flat = x.reshape(-1)
        flat[::7] = complex(np.nan, -0.0)
        flat[3::11] = complex(-np.inf, np.nan)
        flat[5::13] = complex(-0.0, np.inf)
        got = tp.einsum(f"{'abc'[:len(shape)]}->{''.join('abc'[i] for i in perm)}", x,
                        order="C")
        want = np.ascontiguousarray(x.transpose(perm))
        assert got.dtype == want.dtype
        assert got.tobytes() == want.tobytes()


# ---- NaN and infinity in either part ---------------------------------------------------


def _assert_same_classes(got: np.ndarray, ref: np.ndarray, tol: float,
                         blas: bool) -> None:
    """Each part: NaN where numpy.einsum's is, the same infinity where numpy.einsum's
    is, else close.  ``blas``: an output numpy.einsum makes infinite may be NaN in both
    parts, as numpy.matmul's is: BLAS' cgemm/zgemm scale the products by alpha = 1 + 0i,
    and 0 times an infinite part is NaN."""
    inf_elem = np.isinf(ref.real) | np.isinf(ref.imag)
    excused = (blas & inf_elem & np.isnan(got.real) & np.isnan(got.imag))
    for part in (np.real, np.imag):
        g, r = part(got).astype(np.float64), part(ref)
        np.testing.assert_array_equal(np.isnan(g) & ~excused, np.isnan(r) & ~excused)
        np.testing.assert_array_equal(np.isinf(g) & ~excused, np.isinf(r) & ~excused)
        inf = np.isinf(r) & ~excused
        np.testing.assert_array_equal(g[inf], r[inf])
        fin = np.isfinite(r)
        np.testing.assert_allclose(g[fin], r[fin], rtol=tol, atol=tol)
    if not blas:
        assert not excused.any()


@pytest.mark.parametrize("dtype", COMPLEX)
@pytest.mark.parametrize("expr,shapes,blas", [
    ("ij,jk->ik", [(40, 30), (30, 50)], True),
    ("ij,jk->ki", [(3, 4), (4, 5)], False),          # loops
    ("ij,j->i", [(30, 64), (64,)], False),           # dot products
    ("ij,ij->ij", [(20, 30), (20, 30)], False),      # rows
    ("bij,bjk->bik", [(4, 24, 20), (4, 20, 28)], True),
])
def test_nan_and_inf_in_either_part_propagate_as_in_numpy(dtype, expr, shapes, blas):
    rng = np.random.default_rng(4)
    a, b = (_values(rng, s, dtype) for s in shapes)
    a.reshape(-1)[0] = complex(np.nan, a.reshape(-1)[0].imag)  # NaN real part
    b.reshape(-1)[-1] = complex(b.reshape(-1)[-1].real, np.inf)  # infinite imaginary part
    a.reshape(-1)[-1] = complex(-np.inf, 1.0)
    got = tp.einsum(expr, a, b)
    assert lower(tp.plan(expr, a, b).teir).calls_blas == blas
    _assert_same_classes(got, _ref(expr, a, b), 1e-3 if dtype == "complex64" else 1e-10,
                         blas)
    if blas:  # the same as numpy.matmul, the same BLAS
        with np.errstate(invalid="ignore"):
            want = np.matmul(a, b)
        same = np.isnan(want) == np.isnan(got)
        assert same.all()


@pytest.mark.parametrize("dtype", COMPLEX)
@pytest.mark.parametrize("expr,shape", [
    ("ij->i", (6, 7)),            # tiny: numpy.einsum
    ("ij->", (6, 7)),
    ("ij->i", (300, 70)),         # the reduction kernel on the parts
    ("ij->j", (300, 70)),
    ("ij->", (300, 70)),
    ("ijk->k", (40, 30, 20)),     # a TEIR program on the parts
    ("ijk->ki", (40, 30, 20)),
])
def test_complex_sums_keep_an_infinite_part_as_numpy_adds_it(dtype, expr, shape):
    """A complex sum adds parts: an element inf + 1j sums to inf + (finite)j, not to the
    NaN imaginary part a product with complex ones (inf * 0) would give."""
    rng = np.random.default_rng(8)
    x = _values(rng, shape, dtype)
    flat = x.reshape(-1)
    flat[3] = complex(np.inf, 1.0)
    flat[-2] = complex(2.0, -np.inf)
    flat[len(flat) // 2] = complex(np.nan, 0.5)
    for arr in (x, x[::-1], np.asfortranarray(x)):
        got = tp.einsum(expr, arr)
        want = np.einsum(expr, arr.astype(np.complex128))
        for part in ("real", "imag"):
            g, w = getattr(got, part), getattr(want, part)
            np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
            np.testing.assert_array_equal(np.isposinf(g), np.isposinf(w))
            np.testing.assert_array_equal(np.isneginf(g), np.isneginf(w))
            fin = np.isfinite(w)
            tol = 1e-4 if dtype == "complex64" else 1e-10
            np.testing.assert_allclose(g[fin], w[fin], rtol=tol, atol=tol)


# ---- planning and tp.einsum ------------------------------------------------------------

_EXPRS = [("ij,jk->ik", [(64, 48), (48, 80)]), ("trus,pqtu->pqrs", [(4, 6, 8, 10), (3, 5, 4, 8)]),
          ("ij,ij->ij", [(30, 40), (30, 40)]), ("ij,j->i", [(30, 50), (50,)]),
          ("ij->", [(30, 40)]), ("ij->i", [(30, 40)]), ("i,i->", [(1000,), (1000,)]),
          ("bij,bkj->bik", [(8, 16, 12), (8, 20, 12)]), ("ij,jk,kl->il",
                                                         [(5, 6), (6, 7), (7, 8)]),
          ("ii->i", [(9, 9)]), ("ijk->kij", [(4, 5, 6)])]


@pytest.mark.parametrize("dtype", COMPLEX)
@pytest.mark.parametrize("expr,shapes", _EXPRS, ids=[e for e, _ in _EXPRS])
def test_complex_einsum_runs_teir_steps(dtype, expr, shapes):
    rng = np.random.default_rng(5)
    ops = [_values(rng, s, dtype) for s in shapes]
    got = tp.einsum(expr, *ops)
    assert got.dtype == np.dtype(dtype)
    assert_einsum_close(got, expr, ops, dtype)
    plan = tp.plan(expr, *ops)
    assert all(step.kind != "numpy" for step in plan.steps), plan.describe()


@pytest.mark.parametrize("dtype,gemm", [("complex64", "cgemm"), ("complex128", "zgemm")])
def test_explain_shows_the_complex_type_and_its_blas_call(dtype, gemm):
    rng = np.random.default_rng(6)
    a, b = _values(rng, (64, 48), dtype), _values(rng, (48, 80), dtype)
    text = str(tp.plan("ij,jk->ik", a, b).explain())
    assert f"data_type = {dtype}" in text
    assert f"{gemm}(" in text
    assert "numpy" not in text.split("== Step 0")[1].split("\n")[1]


def test_a_complex_multiply_add_costs_four_real_ones():
    """Same shapes: complex64 is predicted at 4x float32's flops (and counts 8 per
    multiply-add), complex128 at 4x float64's, on BLAS' rate of the real type; a tile
    that runs on OpenBLAS' 3M form (three real products for four, blaslib) at that
    rate times GEMM3M_SPEEDUP."""
    costs = {}
    for dt in ("float32", "complex64", "float64", "complex128"):
        p = tp.plan("ij,jk->ik", (512, 512), (512, 512), dtype=dt, optimize="plain")
        costs[dt] = p.steps[0].chosen.cost
    assert costs["complex64"].flops == 4 * costs["float32"].flops == 8 * 512**3
    assert costs["complex128"].flops == 4 * costs["float64"].flops
    for real, cplx in (("float32", "complex64"), ("float64", "complex128")):
        expected = 4 / (blaslib.GEMM3M_SPEEDUP if blaslib.gemm3m_available(cplx) else 1)
        ratio = costs[cplx].compute_seconds / costs[real].compute_seconds
        assert 0.9 * expected < ratio < 1.1 * expected, (real, ratio, expected)


@pytest.mark.parametrize("dtype,gemm", [("complex64", "cgemm3m"), ("complex128", "zgemm3m")])
def test_large_complex_tiles_run_on_the_3m_gemm_and_agree(dtype, gemm):
    """A tile past blaslib's rule calls ?gemm3m (where numpy's OpenBLAS has it), named
    by explain, and agrees with numpy in complex128 to the type's tolerance; a thin one
    (k = 8) stays on ?gemm."""
    if not blaslib.gemm3m_available(dtype):
        pytest.skip("no ?gemm3m in the BLAS the tiles call")
    rng = np.random.default_rng(9)
    a, b = _values(rng, (96, 160), dtype), _values(rng, (160, 72), dtype)
    assert f"{gemm}(" in str(tp.plan("ij,jk->ik", a, b).explain())
    assert_einsum_close(tp.einsum("ij,jk->ik", a, b), "ij,jk->ik", [a, b], dtype)
    thin = _values(rng, (96, 8), dtype), _values(rng, (8, 300), dtype)
    assert f"{gemm}(" not in str(tp.plan("ij,jk->ik", *thin).explain())
    assert_einsum_close(tp.einsum("ij,jk->ik", *thin), "ij,jk->ik", list(thin), dtype)


def test_relu_epilogue_is_refused_for_complex_results():
    a = np.ones((3, 4), np.complex64)
    with pytest.raises(tp.DTypeError, match="epilogue: relu .* complex64"):
        tp.einsum("ij,jk->ik", a, a.T, epilogue="relu")


@pytest.mark.parametrize("real,cplx,result", [
    ("float32", "complex64", "complex64"), ("float64", "complex64", "complex128"),
    ("float32", "complex128", "complex128"), ("float64", "complex128", "complex128")])
def test_mixed_real_and_complex_operands_follow_numpys_result_type(real, cplx, result):
    rng = np.random.default_rng(7)
    h = rng.standard_normal((48, 48)).astype(real)   # a real Hamiltonian
    psi = _values(rng, (48, 20), cplx)                 # complex states
    direct = np.dtype(real) == np.finfo(np.dtype(cplx)).dtype
    for expr, ops in (("ij,jk->ik", (h, psi)), ("jk,ij->ik", (psi, h))):
        got = tp.einsum(expr, *ops)
        assert got.dtype == np.result_type(*ops) == np.dtype(result)
        assert_einsum_close(got, expr, list(ops), result)
        plan = tp.plan(expr, *ops)
        assert all(s.kind != "numpy" for s in plan.steps)
        casts = [s for s in plan.steps if s.kind == "cast"]
        if direct:
            # The real operand taken as it is: a real program over the complex operand's
            # parts (schedule/parts.py), no cast.
            assert not casts
            assert plan.teir.primitives.data_type.numpy == np.dtype(real)
            assert "the parts of complex operand" in plan.main_step.describe()
        else:
            # The operands not of the result type are cast once each, as named, costed
            # steps.
            assert len(casts) == sum(o.dtype != got.dtype for o in ops)
            assert all("predicted" in s.describe() for s in casts)


@pytest.mark.parametrize("dtype", COMPLEX)
def test_a_real_operand_taken_directly_halves_the_work(dtype):
    """Predicted: the real operand times the complex one's parts does half the real
    multiply-adds of the promoted product, and needs no cast."""
    real = np.finfo(np.dtype(dtype)).dtype
    h, psi = (512, 512), (512, 512)
    direct = tp.plan("ij,jk->ik", np.empty(h, real), np.empty(psi, dtype))
    promoted = tp.plan("ij,jk->ik", np.empty(h, dtype), np.empty(psi, dtype))
    assert direct.main_step.chosen.cost.flops * 2 == promoted.main_step.chosen.cost.flops
    assert direct.predicted_seconds < promoted.predicted_seconds


def test_complex_out_and_a_real_out_refused_before_writing():
    rng = np.random.default_rng(8)
    a, b = _values(rng, (6, 7), "complex64"), _values(rng, (7, 5), "complex64")
    ref = _ref("ij,jk->ik", a, b)
    for dt in ("complex64", "complex128"):
        out = np.full((6, 5), SENTINEL, dt)
        assert tp.einsum("ij,jk->ik", a, b, out=out) is out
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    out = np.full((5, 6), SENTINEL, "complex64").T  # a transposed out
    assert tp.einsum("ij,jk->ik", a, b, out=out) is out
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    for dt in ("float32", "float64"):
        for casting in ("safe", "same_kind"):
            out = np.full((6, 5), -1.0, dt)
            # (the computation type is numpy's: the operands' and out's result type)
            wide = np.result_type(a.dtype, dt)
            with pytest.raises(tp.DTypeError, match=f"out: cannot store the {wide} "
                               f"result in an array of dtype {dt}") as info:
                tp.einsum("ij,jk->ik", a, b, out=out, casting=casting)
            assert isinstance(info.value, TypeError)
            assert (out == -1.0).all()
            with pytest.raises(TypeError):  # numpy refuses it too
                np.einsum("ij,jk->ik", a, b, out=out, casting=casting)


# ---- TCCG-shaped contractions ------------------------------------------------------------

_TCCG = [line.split() for line in (Path(__file__).parents[1] / "benchmarks" /
                                     "tccg24.txt").read_text().splitlines()
         if line.strip() and not line.startswith("#")]


@pytest.mark.parametrize("dtype", COMPLEX)
@pytest.mark.parametrize("case", _TCCG[::3], ids=lambda c: c[0])
def test_tccg_shaped_contractions(dtype, case):
    """Every third TCCG case, its extents shrunk to at most 12 (the shapes and layouts,
    not the sizes, decide the programs' forms)."""
    expr, sizes = case
    ext = {k: min(int(v), 12) for k, v in (s.split("=") for s in sizes.split(","))}
    ins, out = expr.split("->")
    rng = np.random.default_rng(9)
    ops = [_values(rng, tuple(ext[c] for c in t), dtype) for t in ins.split(",")]
    got = tp.einsum(expr, *ops)
    assert_einsum_close(got, expr, ops, dtype)
    c_out = tp.einsum(expr, *ops, order="C")
    assert c_out.flags.c_contiguous
    assert_einsum_close(c_out, expr, ops, dtype)


# ---- properties (tests/strategies.py), complex and mixed --------------------------------

_MIXED = ("float32", "float64", "complex64", "complex128")


def _refused(problem: EinsumProblem) -> bool:
    try:
        einsum_reference(problem.subscripts, problem.operands)
    except ValueError:
        return True
    return False


@fuzz_settings(default=40, fuzz=20_000)
@given(problem=einsum_problems(dtypes=COMPLEX), data=st.data())
@counted
def test_complex_einsum_matches_numpy_complex128(problem: EinsumProblem,
                                                 data: st.DataObject) -> None:
    if _refused(problem):
        with pytest.raises(tp.TEIRPlanError):
            tp.einsum(problem.subscripts, *problem.operands)
        return
    rdt = np.result_type(*problem.arrays())
    out = None
    if data.draw(st.integers(0, 2), label="use out") == 0:
        shape = einsum_reference(problem.subscripts, problem.operands).shape
        out_dt = "complex128" if data.draw(st.booleans()) else str(rdt)
        out = data.draw(operand_recipes(shape, out_dt, allow_broadcast=False)).build(
            np.random.default_rng(0))
        # (real where every operand is an empty list: numpy makes it float64)
        out[...] = SENTINEL if out.dtype.kind == "c" else SENTINEL.real
    optimize = data.draw(st.sampled_from([True, True, False, "plain"]), label="optimize")
    res = tp.einsum(problem.subscripts, *problem.operands, out=out, optimize=optimize)
    if out is not None:
        assert res is out
    else:
        assert res.dtype == rdt
    assert_einsum_close(res, problem.subscripts, problem.operands, rdt)


@fuzz_settings(default=40, fuzz=20_000)
@given(problem=einsum_problems(dtypes=_MIXED), data=st.data())
@counted
def test_mixed_real_and_complex_einsum_matches_numpy(problem: EinsumProblem,
                                                     data: st.DataObject) -> None:
    """Mixed operands (a real one taken directly or cast), into a new array or an out of
    any layout (gaps, reversed, transposed, a record field, an odd address)."""
    assume(not _refused(problem))
    rdt = np.result_type(*problem.arrays())
    out = None
    if data.draw(st.booleans(), label="use out"):
        shape = einsum_reference(problem.subscripts, problem.operands).shape
        out = data.draw(operand_recipes(shape, str(rdt), allow_broadcast=False)).build(
            np.random.default_rng(0))
        out[...] = SENTINEL if rdt.kind == "c" else SENTINEL.real
    res = tp.einsum(problem.subscripts, *problem.operands, out=out)
    assert res.dtype == rdt
    assert_einsum_close(res, problem.subscripts, problem.operands, rdt)


@fuzz_settings(default=25, fuzz=10_000)
@given(problem=einsum_problems(dtypes=COMPLEX))
@counted
def test_every_complex_alternative_validates_and_agrees(problem: EinsumProblem) -> None:
    assume(not _refused(problem))
    rdt = np.result_type(*problem.arrays())
    p = tp.plan(problem.subscripts, *problem.operands)
    assert all(step.kind != "numpy" for step in p.steps)
    for alt in p.alternatives:
        for step in alt.steps:
            teir = getattr(step, "teir", None)
            if teir is not None:
                teir.validate()
                # Real programs on complex data: a product expanded into a real one, a
                # complex sum as the sum of its parts, a product with a real operand.
                assert teir.primitives.data_type.is_complex or "the parts" in getattr(
                    step, "subscripts", "") or any(s.kind == "expand" for s in alt.steps)
        assert_einsum_close(alt(*problem.operands), problem.subscripts, problem.operands, rdt)
    fresh = problem.fresh(problem.seed + 1)
    assert_einsum_close(p(*fresh), problem.subscripts, fresh, rdt)


_OTHERS = ["bool", "int8", "uint8", "int32", "int64", "float16", "float32", "float64",
           "complex64", "complex128"]


@pytest.mark.parametrize("cplx", COMPLEX)
@pytest.mark.parametrize("other", _OTHERS)
def test_no_complex_result_of_teirs_types_reaches_the_numpy_step(cplx, other):
    """Whatever the other operand (integers, bool, float16 and the real and complex
    types, either side), a complex64 or complex128 result runs TEIR steps (casts are
    named steps of their own) and agrees with numpy; so does a real pair asked for a
    complex dtype=."""
    rng = np.random.default_rng(10)
    z = _values(rng, (12, 9), cplx)
    x = (rng.standard_normal((9, 7)) * 3).astype(other)
    for expr, ops in (("ij,jk->ik", (z, x)), ("jk,ij->ik", (x, z)), ("ij,kj->ik", (z, x.T))):
        plan = tp.plan(expr, *ops)
        result = np.result_type(*ops)
        assert result.kind == "c" and plan.dtype == result
        assert all(s.kind != "numpy" for s in plan.steps), plan.describe()
        assert_einsum_close(tp.einsum(expr, *ops), expr, list(ops), result.name)
    real = (rng.standard_normal((12, 9)).astype(np.float32),
            rng.standard_normal((9, 7)).astype(np.float32))
    plan = tp.plan("ij,jk->ik", *real, dtype=cplx)
    assert plan.dtype == np.dtype(cplx)
    assert all(s.kind != "numpy" for s in plan.steps), plan.describe()


def test_clongdouble_is_computed_by_numpy_and_says_so():
    """numpy's extended-precision complex (clongdouble) is the one complex type TEIR does
    not compute: BLAS has no GEMM for it and a cast to complex128 would drop the
    precision the caller chose, so it is a numpy step, named as such in the plan."""
    if np.dtype(np.clongdouble) == np.dtype(np.complex128):
        pytest.skip("clongdouble is complex128 on this platform")
    rng = np.random.default_rng(11)
    a = _values(rng, (5, 6), "complex128").astype(np.clongdouble)
    b = _values(rng, (6, 4), "complex64")
    plan = tp.plan("ij,jk->ik", a, b)
    assert [s.kind for s in plan.steps] == ["numpy"]
    assert "not a TEIR data type: computed by numpy" in plan.steps[0].describe()
    got = tp.einsum("ij,jk->ik", a, b)
    assert got.dtype == np.clongdouble
    np.testing.assert_allclose(got, np.einsum("ij,jk->ik", a, b), rtol=1e-15)


@pytest.mark.parametrize("dtype", COMPLEX)
def test_a_parallel_k_gram_matrix_sums_complex_blocks(dtype):
    """A short complex output over a long K runs as private blocks per worker, summed at
    the end (executor/partials.py), whose kernel types for complex elements too."""
    from tests.test_parallel_k import _with_threads, gram_program

    rng = np.random.default_rng(5)
    ko, ki, m, n = 4, 96, 12, 10
    a = _values(rng, (ko * ki, m), dtype)
    b = _values(rng, (ko * ki, n), dtype)
    prog = gram_program(dtype, ko, ki, m, n)
    out = np.empty((n, m), dtype)
    with _with_threads(2):
        tp.execute(prog, a, b, out)
        got = tp.einsum("ki,kj->ij", a, b)
    want = _ref("ki,kj->ji", a, b)
    np.testing.assert_allclose(out, want, rtol=TOL[dtype] * 10, atol=TOL[dtype] * 10)
    np.testing.assert_allclose(got, want.T, rtol=TOL[dtype] * 10, atol=TOL[dtype] * 10)


# ---- a complex product expanded into a real one (schedule/contract._contract_expanded) ---


@pytest.mark.parametrize("dtype", COMPLEX)
def test_expand_parts_writes_each_element_as_its_real_matrix(dtype):
    """Row 0 (re, im), row 1 (-im, re): bit for bit, infinities and NaNs included (no
    product by 0 or 1 that would turn an infinity into a NaN)."""
    rng = np.random.default_rng(12)
    z = _values(rng, (5, 7), dtype)[:, ::2]  # not contiguous
    z[0, 0] = complex(np.inf, 2.0)
    z[1, 1] = complex(1.0, np.nan)
    z[2, 2] = complex(-0.0, -np.inf)
    e = np.empty((*z.shape, 2, 2), np.finfo(np.dtype(dtype)).dtype)
    expand_parts(z, e)
    want = np.stack([np.stack([z.real, z.imag], -1), np.stack([-z.imag, z.real], -1)], -2)
    assert e.tobytes() == want.astype(e.dtype).tobytes()


@pytest.mark.parametrize("dtype", COMPLEX)
def test_a_short_k_complex_product_runs_expanded_and_agrees(dtype):
    """A short summed index and a large result (cgemm's tiles of k = 4 are slow, the real
    kernels stream the result): planned as one operand expanded, the other and the
    result as their parts, a real program; into a new array, C order, or out= of any
    order."""
    rng = np.random.default_rng(13)
    a, b = _values(rng, (4, 1000), dtype), _values(rng, (4, 1000), dtype)
    plan = tp.plan("ga,gb->ab", a, b)
    assert [s.kind for s in plan.steps] == ["expand", "teir"], plan.describe()
    assert plan.teir.primitives.data_type.numpy == np.finfo(np.dtype(dtype)).dtype
    assert "2 x 2 real matrices" in plan.steps[0].describe()
    assert "predicted" in plan.steps[0].describe()
    assert_einsum_close(tp.einsum("ga,gb->ab", a, b), "ga,gb->ab", [a, b], dtype)
    assert_einsum_close(tp.einsum("ga,gb->ab", a, b, order="C"), "ga,gb->ab", [a, b], dtype)
    for order in "CF":
        out = np.full((1000, 1000), SENTINEL, dtype, order=order)
        assert tp.einsum("ga,gb->ab", a, b, out=out) is out
        assert_einsum_close(out, "ga,gb->ab", [a, b], dtype)
    text = str(plan.explain())
    assert "expand operand" in text


@pytest.fixture
def always_expand(monkeypatch):
    """Every product of two complex operands that can be expanded is: the planner's
    choice taken out of the comparison, to check the expanded programs themselves."""
    from teir_plan import api
    from teir_plan.schedule import contract

    monkeypatch.setattr(contract, "EXPAND_MARGIN", 1e-12)
    api.plan_cache.clear()
    yield
    api.plan_cache.clear()


_EXPANDED = [("ij,jk->ik", [(40, 30), (30, 50)]), ("ij,jk->ki", [(3, 4), (4, 5)]),
             ("ij,j->i", [(30, 64), (64,)]), ("ij,ij->ij", [(20, 30), (20, 30)]),
             ("bij,bjk->bik", [(4, 24, 20), (4, 20, 28)]), ("i,j->ij", [(7,), (9,)]),
             ("ij,ij->", [(20, 30), (20, 30)])]


@pytest.mark.parametrize("dtype", COMPLEX)
@pytest.mark.parametrize("expr,shapes", _EXPANDED + [
    (c[0], [tuple(min(int(v), 12) for k, v in (s.split("=") for s in c[1].split(","))
                  if k in t) for t in c[0].split("->")[0].split(",")]) for c in _TCCG[1::3]],
    ids=lambda x: x if isinstance(x, str) else "")
def test_expanded_products_agree_with_numpy(always_expand, dtype, expr, shapes):
    """The expanded form on every kind of tile, with a NaN and infinities in either part:
    numpy's formula, so numpy's NaNs and infinities."""
    rng = np.random.default_rng(14)
    ins = expr.split("->")[0].split(",")
    ext: dict[str, int] = {}
    for t, s in zip(ins, shapes):
        ext.update(zip(t, s))
    ops = [_values(rng, tuple(ext[c] for c in t), dtype) for t in ins]
    plan = tp.plan(expr, *ops)
    assert [s.kind for s in plan.steps] == ["expand", "teir"], plan.describe()
    assert_einsum_close(plan(*ops), expr, ops, dtype)
    a, b = ops
    a.reshape(-1)[0] = complex(np.nan, a.reshape(-1)[0].imag)
    b.reshape(-1)[-1] = complex(b.reshape(-1)[-1].real, np.inf)
    a.reshape(-1)[-1] = complex(-np.inf, 1.0)
    _assert_same_classes(plan(a, b), _ref(expr, a, b),
                         1e-3 if dtype == "complex64" else 1e-10, False)
