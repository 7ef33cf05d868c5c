"""16-bit floats (numpy's float16, ml_dtypes' bfloat16): TEIR's two 16-bit data types,
and tp.einsum on 16-bit arrays, which reads the operands of a reduction in place
(the reduction kernels widen each element to float32 in registers) and converts every
other operand to float32 once, runs the float32 plan and rounds the result once
(teir_plan/schedule/half.py).

**The error bound.**  Every result is compared with ``ref``, numpy.einsum in float64 on
the inputs converted to float32 (exactly), and ``S``, the same einsum over their absolute
values.  A 16-bit result of teir_plan satisfies, elementwise,

    |got - ref| <= u16 * (|ref| + E) + tiny16 / 2 + E,   E = K * 2^-24 * S + K * 2^-126

* ``u16``: half an ulp of the 16-bit type, relative (2^-11 for float16, 2^-8 for
  bfloat16), and ``tiny16 / 2``: half its smallest subnormal, absolute: the one rounding
  of the float32 accumulator to the 16-bit result;
* ``K * 2^-24 * S``: the float32 accumulation of ``K`` terms per output element.  A
  product of two 16-bit values is exact in float32 (22 and 16 significant bits); each
  addition rounds by at most 2^-24 of the partial sum, in any order.  ``K`` is the
  number of terms of one output element, the product of the summed extents, which also
  bounds a tree's sum over its steps (each at least 2 terms);
* ``K * 2^-126``: products below float32's normal range (bfloat16 subnormals), which
  may lose up to float32's smallest normal each.

A float32 result (``dtype=np.float32``, a float32 ``out=``, mixed promotion) is the
accumulator itself: the same bound with ``u16 = tiny16 = 0``.

Small shapes (but for the reductions read in place: up to 8 MiB, for their splits over
the threads and every bit pattern), and float32 kernels but for the reduction kernels'
16-bit variants (one per 16-bit type, serial and parallel), which only this module
compiles.
"""

from __future__ import annotations

import math
import warnings

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import teir_plan as tp
from teir_plan.machine.params import MachineParams
from teir_plan.schedule.half import RoundStep, WidenStep, convert_seconds
from teir_plan.schedule.steps import CastStep, ReduceStep, TEIRStep
from teir_plan.teir.enums import is_half
from tests.strategies import counted, fuzz_settings

BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
HALVES = [F16, BF16]
UNIT = {F16: 2.0**-11, BF16: 2.0**-8}  # half an ulp, relative
SUBNORMAL = {F16: 2.0**-24, BF16: 2.0**-133}  # the smallest subnormal


def _ids(dt: np.dtype) -> str:
    return dt.name


def _values(rng: np.random.Generator, shape: tuple[int, ...], dtype: object) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


def _terms(subscripts: str, ops: list[np.ndarray]) -> int:
    """K: the terms summed into one output element (1 when nothing is summed)."""
    ins, out = subscripts.split("->")
    extent: dict[str, int] = {}
    for term, op in zip(ins.split(","), ops):
        extent.update(zip(term, op.shape))
    return max(1, math.prod(n for c, n in extent.items() if c not in out))


def assert_within_bound(got: np.ndarray, subscripts: str, ops: list[np.ndarray]) -> None:
    """``got`` against numpy's float64 einsum of the float32-upcast inputs, within the
    bound of the module's text; NaN and infinite elements exactly where numpy's are."""
    wide = [np.asarray(o).astype(np.float32).astype(np.float64) for o in ops]
    ref = np.asarray(np.einsum(subscripts, *wide))
    size = np.asarray(np.einsum(subscripts, *[np.abs(w) for w in wide]))
    k = _terms(subscripts, ops)
    e = k * 2.0**-24 * np.nan_to_num(size, posinf=0.0) + k * 2.0**-126
    dt = np.asarray(got).dtype
    u, tiny = (UNIT[dt], SUBNORMAL[dt]) if is_half(dt) else (0.0, 0.0)
    bound = u * (np.abs(ref) + e) + tiny / 2 + e
    g = np.asarray(got).astype(np.float64)
    assert g.shape == ref.shape
    np.testing.assert_array_equal(np.isnan(g), np.isnan(ref), err_msg="NaN positions")
    np.testing.assert_array_equal(np.isinf(g), np.isinf(ref), err_msg="infinite positions")
    inf = np.isinf(ref)
    np.testing.assert_array_equal(g[inf], ref[inf], err_msg="infinities' signs")
    fin = np.isfinite(ref)
    err, bound = np.abs(g[fin] - ref[fin]), bound[fin]
    assert (err <= bound).all(), (
        f"{subscripts} in {dt}: error {err.max():.3e} over the bound "
        f"({bound[np.argmax(err - bound)]:.3e} where it is exceeded most)")


# ---- products, reductions, permutations ----------------------------------------------------


@pytest.mark.parametrize("dtype", HALVES, ids=_ids)
@pytest.mark.parametrize("subscripts,shapes", [
    ("ij,jk->ik", [(9, 12), (12, 7)]),
    ("ij,kj->ik", [(9, 12), (7, 12)]),
    ("bij,bjk->bik", [(3, 5, 8), (3, 8, 4)]),
    ("ij,ij->i", [(6, 40), (6, 40)]),
    ("ij,j->i", [(10, 33), (33,)]),
    ("i,i->", [(70,), (70,)]),
])
def test_binary_contractions_within_the_bound(dtype, subscripts, shapes) -> None:
    rng = np.random.default_rng(1)
    ops = [_values(rng, s, dtype) for s in shapes]
    got = tp.einsum(subscripts, *ops)
    assert got.dtype == dtype == np.result_type(*ops)
    assert_within_bound(got, subscripts, ops)
    plan = tp.plan(subscripts, *ops)
    kinds = [s.kind for s in plan.steps]
    if subscripts in ("ij,j->i", "i,i->", "ij,ij->i"):
        # A vector weighting a sum, or a dot product per output: the reduction kernel
        # reads both operands in place.
        assert kinds == ["reduce", "round"], kinds
    else:
        # Each operand converted once, the float32 plan, one rounding at the end.
        assert kinds[:2] == ["widen", "widen"] and kinds[-1] == "round", kinds
    assert all(s.teir.primitives.data_type is tp.DataType.FLOAT32
               for s in plan.steps if isinstance(s, TEIRStep))


def test_operands_read_through_strided_and_transposed_views() -> None:
    rng = np.random.default_rng(2)
    a = _values(rng, (12, 18), BF16)[:, ::2]  # a gap between elements
    b = _values(rng, (7, 9), BF16).T  # transposed
    got = tp.einsum("ij,jk->ik", a, b)
    assert got.dtype == BF16
    assert_within_bound(got, "ij,jk->ik", [a, b])


@pytest.mark.parametrize("dtype", HALVES, ids=_ids)
@pytest.mark.parametrize("subscripts,shape", [
    ("ij->i", (20, 30)), ("ij->j", (20, 30)), ("ijk->", (4, 5, 6)), ("ii->", (9, 9)),
    ("ijk->ik", (5, 64, 3)),
])
def test_reductions_within_the_bound(dtype, subscripts, shape) -> None:
    x = _values(np.random.default_rng(3), shape, dtype)
    got = tp.einsum(subscripts, x)
    assert got.dtype == dtype
    assert_within_bound(got, subscripts, [x])


@pytest.mark.parametrize("dtype", HALVES, ids=_ids)
def test_permutations_are_exact(dtype) -> None:
    x = _values(np.random.default_rng(4), (3, 4, 5), dtype)
    view = tp.einsum("ijk->kji", x)
    assert view.dtype == dtype and np.shares_memory(view, x)  # numpy's view
    np.testing.assert_array_equal(view, x.transpose(2, 1, 0))
    copied = tp.einsum("ijk->kji", x, order="C")  # widened, permuted, rounded: exact
    assert copied.dtype == dtype and copied.flags.c_contiguous
    np.testing.assert_array_equal(copied, x.transpose(2, 1, 0))
    diagonal = tp.einsum("ii->i", x[0, :4, :4])
    np.testing.assert_array_equal(diagonal, np.diagonal(x[0, :4, :4]))
    wide = tp.einsum("ijk->kji", x, dtype=np.float32)
    assert wide.dtype == F32
    np.testing.assert_array_equal(wide, x.transpose(2, 1, 0).astype(np.float32))


# ---- reductions read in place -----------------------------------------------------------------


def _laid_out(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype,
              how: str) -> np.ndarray:
    """Values of ``shape`` in a view of a NaN-filled parent: contiguous, with gaps
    (every other element of each axis), transposed (the parent's axes reversed) or
    reversed (negative strides).  A kernel reading any element outside the view brings
    a NaN into the result."""
    values = _values(rng, shape, dtype)
    if how == "transposed":
        parent = np.full(tuple(n + 2 for n in shape[::-1]), np.nan, dtype)
        view = parent[tuple(slice(1, n + 1) for n in shape[::-1])].T
    elif how == "gaps":
        parent = np.full(tuple(2 * n + 1 for n in shape), np.nan, dtype)
        view = parent[tuple(slice(1, 2 * n + 1, 2) for n in shape)]
    else:
        parent = np.full(tuple(n + 2 for n in shape), np.nan, dtype)
        view = parent[tuple(slice(1, n + 1) for n in shape)]
        if how == "reversed":
            view = view[::-1]
    view[...] = values
    assert view.shape == shape and not np.isnan(view.astype(np.float32)).any()
    return view


def _in_place_step(plan: tp.Plan, dtype: np.dtype) -> ReduceStep:
    """The plan's one reduction step, which reads its 16-bit operands in place: no
    operand converted first (no cast step but the result's rounding)."""
    assert not any(isinstance(s, WidenStep) for s in plan.steps), plan.steps
    assert all(isinstance(s, RoundStep) for s in plan.steps if isinstance(s, CastStep))
    (step,) = [s for s in plan.steps if isinstance(s, ReduceStep)]
    assert step.reduction.operand == dtype and step.reduction.dtype == F32
    assert all(plan.operands[i].dtype == dtype for i in step.inputs)
    return step


# (subscripts, shapes): one operand summed; an operand weighted by a vector, either
# first.  The larger ones read over 256 KiB: split over the threads
# (planner/reduce.py's PARALLEL_MIN_BYTES).
IN_PLACE = [
    ("ij->i", [(37, 300)]), ("ij->j", [(37, 300)]), ("ijk->k", [(6, 7, 40)]),
    ("ij->", [(37, 300)]), ("ijk->ik", [(5, 64, 3)]),
    ("ij,j->i", [(37, 300), (300,)]), ("ji,j->i", [(300, 37), (300,)]),
    ("j,ij->i", [(300,), (37, 300)]), ("i,i->", [(5000,), (5000,)]),
    ("ij->i", [(600, 300)]), ("ij->j", [(600, 300)]), ("ij->", [(600, 300)]),
    ("ijk->k", [(40, 50, 80)]), ("ij,j->i", [(600, 300), (300,)]),
    ("ji,j->i", [(600, 300), (600,)]), ("i,i->", [(200_000,), (200_000,)]),
    # Short weighted rows, which float32 runs on BLAS' ?gemv (no 16-bit type): the rows
    # kernel.
    ("ki,k->i", [(3000, 24), (3000,)]),
]


@pytest.mark.parametrize("how", ["contiguous", "gaps", "transposed", "reversed"])
@pytest.mark.parametrize("dtype", HALVES, ids=_ids)
@pytest.mark.parametrize("subscripts,shapes", IN_PLACE,
                         ids=[f"{s}-{'x'.join(map(str, sh[0]))}" for s, sh in IN_PLACE])
def test_reductions_read_16_bit_operands_in_place(subscripts, shapes, dtype, how) -> None:
    rng = np.random.default_rng(20)
    ops = [_laid_out(rng, shape, dtype, how) for shape in shapes]
    got = tp.einsum(subscripts, *ops)
    assert got.dtype == dtype
    assert_within_bound(got, subscripts, ops)
    plan = tp.plan(subscripts, *ops)
    assert [s.kind for s in plan.steps] == ["reduce", "round"]
    _in_place_step(plan, dtype)
    assert f"{dtype} read in place, summed in float32" in str(plan.explain())
    # dtype=float32: the accumulator itself, written by the same kernel into the result.
    wide = tp.einsum(subscripts, *ops, dtype=np.float32)
    assert wide.dtype == F32
    assert_within_bound(wide, subscripts, ops)
    np.testing.assert_array_equal(np.asarray(wide).astype(dtype), got)
    plan32 = tp.plan(subscripts, *ops, dtype=np.float32)
    assert [s.kind for s in plan32.steps] == ["reduce"]
    _in_place_step(plan32, dtype)


@pytest.mark.parametrize("dtype", HALVES, ids=_ids)
def test_short_weighted_rows_run_on_the_rows_kernel_not_gemv(dtype) -> None:
    rng = np.random.default_rng(22)
    x, v = _values(rng, (3000, 24), dtype), _values(rng, (3000,), dtype)
    wide = tp.plan("ki,k->i", x.astype(F32), v.astype(F32)).steps[0]
    assert isinstance(wide, ReduceStep) and wide.reduction.prepared.gemv  # float32: ?gemv
    red = _in_place_step(tp.plan("ki,k->i", x, v), dtype).reduction
    assert not red.prepared.gemv
    assert_within_bound(tp.einsum("ki,k->i", x, v), "ki,k->i", [x, v])


@pytest.mark.parametrize("dtype", HALVES, ids=_ids)
def test_every_16_bit_value_is_widened_exactly_in_place(dtype) -> None:
    """Every bit pattern of the type (NaN, infinities, subnormals, -0.0) summed with
    zeros, or weighted by a one-hot vector, through the inner kernel (``ij->i``) and
    the rows kernel (``ji->i``): exactly its float32 value, the NaNs NaN."""
    values = np.arange(1 << 16, dtype=np.uint16).view(dtype)
    want = values.astype(np.float32)
    x = np.zeros((1 << 16, 64), dtype)
    x[:, 5] = values
    hot = np.zeros(64, dtype)
    hot[5] = 1
    for subscripts, ops in (("ij->i", [x]), ("ij,j->i", [x, hot]),
                            ("ji->i", [x.T.copy()]), ("ji,j->i", [x.T.copy(), hot])):
        plan = tp.plan(subscripts, *ops, dtype=np.float32)
        _in_place_step(plan, dtype)
        np.testing.assert_array_equal(plan(*ops), want, err_msg=subscripts)
        # ... and rounded back to the 16-bit type: the value itself.
        np.testing.assert_array_equal(tp.einsum(subscripts, *ops).astype(np.float32), want,
                                      err_msg=subscripts)


@pytest.mark.parametrize("dtype", HALVES, ids=_ids)
def test_nan_and_infinities_in_place_as_numpy(dtype) -> None:
    rng = np.random.default_rng(21)
    x = _values(rng, (40, 300), dtype)
    x[3, 7] = np.nan
    x[5, 0], x[5, 299] = np.inf, -np.inf  # inf - inf: NaN
    x[9, 100] = -np.inf
    x[20, 3], x[21, 3] = np.inf, np.inf
    w = _values(rng, (300,), dtype)
    w[250] = 0.0  # inf * 0: NaN where a row has an infinity there
    x[30, 250] = np.inf
    for subscripts, ops in (("ij->i", [x]), ("ij->j", [x]), ("ij->", [x]),
                            ("ij,j->i", [x, w]), ("ij,i->j", [x, x[:, 0].copy()])):
        got = tp.einsum(subscripts, *ops)
        _in_place_step(tp.plan(subscripts, *ops), dtype)
        assert_within_bound(got, subscripts, ops)


@pytest.mark.parametrize("dtype", HALVES, ids=_ids)
def test_the_cost_model_counts_two_bytes_an_element_read_in_place(dtype) -> None:
    m, n = 3000, 2000
    red16 = _in_place_step(tp.plan("ij->i", np.ones((m, n), dtype)), dtype).reduction
    (step32,) = tp.plan("ij->i", np.ones((m, n), F32)).steps
    assert isinstance(step32, ReduceStep)
    red32 = step32.reduction
    # The operand's bytes, and out's lines read for ownership and written (float32 sums).
    assert red16.cost.dram_bytes + red16.cost.llc_bytes == m * n * 2 + 2 * m * 4
    assert red32.cost.dram_bytes + red32.cost.llc_bytes == m * n * 4 + 2 * m * 4
    assert red16.cost.memory_seconds < 0.6 * red32.cost.memory_seconds
    # Weighted: the vector's bytes at 2 each too.
    red16w = _in_place_step(tp.plan("ij,j->i", np.ones((m, n), dtype), np.ones(n, dtype)),
                            dtype).reduction
    assert red16w.cost.dram_bytes + red16w.cost.llc_bytes >= m * n * 2 + n * 2 + 2 * m * 4
    assert red16w.cost.dram_bytes + red16w.cost.llc_bytes < m * n * 4


# ---- two operands read in place: each output a dot product of a run of each -------------

# (subscripts, shapes): both operands' unit stride along the innermost summed index.
# Runs of 300 (one output at a time), of 3000 (four a pass: at least 4 KiB), longer than
# RUN_BLOCK, a few long ones (split over the summed axis on 2 threads), the weights
# without a kept index (b), two summed axes (with gaps between rows: not fused), and
# attention's shape.
KEPT_WEIGHTS = [
    ("ij,ij->i", [(37, 300), (37, 300)]),
    ("ij,ij->i", [(64, 3000), (64, 3000)]),
    ("ij,ij->i", [(8, 9000), (8, 9000)]),
    ("ij,ij->i", [(3, 100_000), (3, 100_000)]),
    ("bij,bij->bi", [(3, 7, 300), (3, 7, 300)]),
    ("bij,ij->bi", [(4, 9, 200), (9, 200)]),
    ("ijk,ijk->i", [(5, 7, 40), (5, 7, 40)]),
    ("bhqd,bhqd->bhq", [(2, 3, 16, 64), (2, 3, 16, 64)]),
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("hows", [("contiguous", "contiguous"), ("reversed", "reversed"),
                                  ("reversed", "contiguous")], ids="-".join)
@pytest.mark.parametrize("dtype", HALVES, ids=_ids)
@pytest.mark.parametrize("subscripts,shapes", KEPT_WEIGHTS,
                         ids=[f"{s}-{'x'.join(map(str, sh[0]))}" for s, sh in KEPT_WEIGHTS])
def test_dot_products_per_output_read_both_operands_in_place(subscripts, shapes, dtype,
                                                             hows, threads) -> None:
    """Views inside NaN-filled parents (rows apart; the first index reversed, in one
    operand or both): a read outside either view brings a NaN into the result."""
    rng = np.random.default_rng(23)
    ops = [_laid_out(rng, shape, dtype, how) for shape, how in zip(shapes, hows)]
    old = tp.get_num_threads()
    tp.set_num_threads(threads)
    try:
        got = tp.einsum(subscripts, *ops)
        assert got.dtype == dtype
        assert_within_bound(got, subscripts, ops)
        plan = tp.plan(subscripts, *ops)
        assert [s.kind for s in plan.steps] == ["reduce", "round"]
        red = _in_place_step(plan, dtype).reduction
        assert red.weights_kept and red.kind == 0  # (tiles.KIND_INNER)
        assert "a run of its own for each output" in str(plan.explain())
        # A float32 out: the accumulator itself, the same kernel; a 16-bit out with
        # gaps: that accumulator rounded once.
        out_shape = got.shape
        wide = np.full(out_shape, np.nan, F32)
        assert tp.einsum(subscripts, *ops, out=wide) is wide
        assert_within_bound(wide, subscripts, ops)
        _in_place_step(tp.plan(subscripts, *ops, out=wide), dtype)
        np.testing.assert_array_equal(wide.astype(dtype), got)
        narrow = np.full((*out_shape[:-1], 2 * out_shape[-1]), np.nan, dtype)[..., ::2]
        assert tp.einsum(subscripts, *ops, out=narrow) is narrow
        np.testing.assert_array_equal(narrow, got)
    finally:
        tp.set_num_threads(old)


@pytest.mark.parametrize("dtype", HALVES, ids=_ids)
@pytest.mark.parametrize("hows", [("contiguous", "transposed"), ("transposed", "transposed"),
                                  ("gaps", "gaps")], ids="-".join)
def test_dot_products_per_output_in_other_layouts_are_converted(dtype, hows) -> None:
    """Layouts the route refuses (a transposed operand, whose unit stride is along the
    kept index: ``ji,ji->i`` for both; every other element): converted first, right."""
    rng = np.random.default_rng(24)
    ops = [_laid_out(rng, (40, 300), dtype, how) for how in hows]
    got = tp.einsum("ij,ij->i", *ops)
    assert got.dtype == dtype
    assert_within_bound(got, "ij,ij->i", ops)
    plan = tp.plan("ij,ij->i", *ops)
    assert sum(isinstance(s, WidenStep) for s in plan.steps) == 2
    assert not any(isinstance(s, ReduceStep) and s.reduction.operand is not None
                   for s in plan.steps)


def test_float32_dot_products_per_output_keep_their_plan() -> None:
    """float32 and float64 ``ij,ij->i`` are not offered the route (their plans stay as
    the snapshot has them): a TEIR program, or a reduction weighted by a vector only."""
    for dtype in (F32, F64):
        plan = tp.plan("ij,ij->i", np.ones((600, 3000), dtype), np.ones((600, 3000), dtype))
        assert not any(isinstance(s, ReduceStep) and s.reduction.weights_kept
                       for s in plan.steps)


@pytest.mark.parametrize("dtype", HALVES, ids=_ids)
def test_the_cost_model_counts_both_operands_of_a_dot_product_per_output(dtype) -> None:
    m, n = 3000, 2000
    ops = [np.ones((m, n), dtype), np.ones((m, n), dtype)]
    red = _in_place_step(tp.plan("ij,ij->i", *ops), dtype).reduction
    # Both operands at 2 bytes an element, and out's lines read for ownership and
    # written (float32 sums).
    assert red.cost.dram_bytes + red.cost.llc_bytes == 2 * m * n * 2 + 2 * m * 4
    assert red.cost.flops == 2 * m * n


@pytest.mark.parametrize("ops", [
    [np.ones((30, 40), BF16), np.ones(40, F16)],  # two 16-bit types: float32 result
    [np.ones((30, 40), F16), np.ones(40, F32)],  # a float32 vector
    [np.ones((30, 40), np.dtype(">f2"))],  # not in native byte order
    # ij,ij->i with the second operand's unit stride along i: its runs are not the
    # first's (the reduction kernels read no such weights in place).
    [np.ones((30, 40), F16), np.ones((40, 30), F16).T],
], ids=["bfloat16-float16", "float16-float32", "big-endian", "transposed-weights"])
def test_other_operands_are_converted_first(ops) -> None:
    subscripts = ("ij->i" if len(ops) == 1 else
                  "ij,ij->i" if ops[1].ndim == 2 else "ij,j->i")
    got = tp.einsum(subscripts, *ops)
    assert got.dtype == np.result_type(*ops)
    assert_within_bound(got, subscripts, ops)
    plan = tp.plan(subscripts, *ops)
    assert any(isinstance(s, WidenStep) for s in plan.steps)
    assert not any(isinstance(s, ReduceStep) and s.reduction.operand is not None
                   for s in plan.steps)


@pytest.mark.parametrize("hardware", [True, False], ids=["hardware", "software"])
def test_the_kernels_widen_every_bit_pattern_exactly(monkeypatch: pytest.MonkeyPatch,
                                                     hardware: bool) -> None:
    """executor/half_bits.py's widening, float16 through F16C's instruction where the
    compile target has it and through integer operations where it does not (the
    software path compiled here on any host), and bfloat16's shift."""
    from numba import njit

    from teir_plan.executor import half_bits

    if hardware and not half_bits.hardware_float16():
        pytest.skip("the compile target has no float16 conversion instruction")
    monkeypatch.setattr(half_bits, "hardware_float16", lambda: hardware)

    @njit
    def widen_all(bits, out):  # type: ignore[no-untyped-def]
        for i in range(bits.size):
            out[i] = half_bits.value(bits[i])

    bits = np.arange(1 << 16, dtype=np.uint16)
    for dtype in HALVES:
        out = np.empty(1 << 16, F32)
        widen_all(bits.view(half_bits.bits_dtype(dtype)), out)
        want = bits.view(dtype).astype(F32)
        same = out.view(np.uint32) == want.view(np.uint32)
        assert (same | (np.isnan(out) & np.isnan(want))).all(), dtype
        assert np.isnan(out).sum() == np.isnan(want).sum()


# ---- trees --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", HALVES, ids=_ids)
def test_a_three_operand_tree_keeps_float32_intermediates(dtype) -> None:
    rng = np.random.default_rng(5)
    ops = [_values(rng, s, dtype) for s in [(6, 9), (9, 11), (11, 4)]]
    got = tp.einsum("ij,jk,kl->il", *ops)
    assert got.dtype == dtype
    assert_within_bound(got, "ij,jk,kl->il", ops)
    plan = tp.plan("ij,jk,kl->il", *ops)
    assert [s.kind for s in plan.steps].count("teir") == 2
    assert [s.kind for s in plan.steps][-1] == "round"
    # Every temporary (the converted operands, the intermediate, the accumulator) is
    # float32, and the plan's scratch memory counts it at 4 bytes an element.
    assert {b.dtype for b in plan.buffers} == {F32}
    largest = max(math.prod(b.shape) for b in plan.buffers)
    assert plan.peak_bytes >= 4 * largest
    assert plan.memory.naive_bytes >= sum(4 * math.prod(b.shape) for b in plan.buffers)


def test_memory_limit_counts_the_float32_intermediates_in_elements() -> None:
    rng = np.random.default_rng(6)
    ops = [_values(rng, s, F16) for s in [(2, 30), (30, 30), (30, 2)]]
    limit = 60  # elements: the 2 x 30 intermediates fit, a 30 x 30 one would not
    plan = tp.plan("ab,bc,cd->ad", *ops, optimize=("greedy", limit))
    inter = [b for b in plan.buffers if b.name.startswith("intermediate")]
    assert inter and all(math.prod(b.shape) <= limit and b.dtype == F32 for b in inter)
    assert_within_bound(plan(*ops), "ab,bc,cd->ad", ops)


# ---- out= and dtype= ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", HALVES, ids=_ids)
def test_float32_dtype_or_out_gives_the_unrounded_accumulator(dtype) -> None:
    rng = np.random.default_rng(7)
    a, b = _values(rng, (9, 40), dtype), _values(rng, (40, 6), dtype)
    got = tp.einsum("ij,jk->ik", a, b, dtype=np.float32)
    assert got.dtype == F32
    assert_within_bound(got, "ij,jk->ik", [a, b])
    plan = tp.plan("ij,jk->ik", a, b, dtype=np.float32)
    assert "round" not in [s.kind for s in plan.steps]
    out = np.full((9, 6), np.nan, np.float32)
    assert tp.einsum("ij,jk->ik", a, b, out=out) is out
    assert_within_bound(out, "ij,jk->ik", [a, b])
    np.testing.assert_array_equal(out, got)  # the same float32 plan
    # The 16-bit result is that accumulator rounded once.
    np.testing.assert_array_equal(tp.einsum("ij,jk->ik", a, b), got.astype(dtype))


@pytest.mark.parametrize("dtype", HALVES, ids=_ids)
def test_a_16_bit_out_of_any_layout(dtype) -> None:
    rng = np.random.default_rng(8)
    a, b = _values(rng, (8, 20), dtype), _values(rng, (20, 5), dtype)
    want = tp.einsum("ij,jk->ik", a, b)
    for out in (np.empty((8, 5), dtype), np.empty((5, 8), dtype).T,
                np.empty((8, 10), dtype)[:, ::2]):
        assert tp.einsum("ij,jk->ik", a, b, out=out) is out
        np.testing.assert_array_equal(out, want)
    with pytest.raises(tp.DTypeError, match="out"):  # numpy's 'safe' rule, as numpy
        tp.einsum("ij,jk->ik", a.astype(np.float32), b, out=np.empty((8, 5), dtype))


def test_dtype_bfloat16_is_accepted_and_rounds_once() -> None:
    rng = np.random.default_rng(9)
    a, b = _values(rng, (6, 30), F16), _values(rng, (30, 4), F16)
    got = tp.einsum("ij,jk->ik", a, b, dtype=ml_dtypes.bfloat16, casting="same_kind")
    assert got.dtype == BF16
    assert_within_bound(got, "ij,jk->ik", [a, b])
    with pytest.raises(tp.DTypeError, match="operand 0.*'safe'"):  # float16 -> bfloat16
        tp.einsum("ij,jk->ik", a, b, dtype=ml_dtypes.bfloat16)


@pytest.mark.parametrize("x,y", [
    (BF16, F16), (BF16, F32), (F16, F32), (F16, F64), (BF16, F64),
    (BF16, np.dtype(np.int8)), (F16, np.dtype(np.int8)), (BF16, np.dtype(np.int16)),
    (F16, np.dtype(np.bool_)),
], ids=lambda d: np.dtype(d).name)
def test_mixed_operands_promote_as_numpy(x, y) -> None:
    rng = np.random.default_rng(10)
    a = _values(rng, (7, 16), x)
    b = (rng.integers(-3, 4, (16, 5)) if y.kind in "biu" else rng.standard_normal((16, 5)))
    b = b.astype(y)
    want = np.result_type(a, b)
    for sub, ops in (("ij,jk->ik", [a, b]), ("kj,ij->ik", [b.T, a])):
        got = tp.einsum(sub, *ops)
        assert got.dtype == want, (x, y, got.dtype, want)
        assert_within_bound(got, sub, ops)


def test_a_complex_result_with_a_16_bit_operand() -> None:
    rng = np.random.default_rng(11)
    a = _values(rng, (5, 8), BF16)
    z = (rng.standard_normal((8, 3)) + 1j * rng.standard_normal((8, 3))).astype(np.complex64)
    got = tp.einsum("ij,jk->ik", a, z)
    assert got.dtype == np.result_type(a, z) == np.complex64
    want = np.einsum("ij,jk->ik", a.astype(np.float64), z.astype(np.complex128))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_relu_epilogue_on_a_16_bit_result() -> None:
    rng = np.random.default_rng(12)
    a, b = _values(rng, (6, 10), BF16), _values(rng, (10, 5), BF16)
    got = tp.einsum("ij,jk->ik", a, b, epilogue="relu")
    assert got.dtype == BF16
    np.testing.assert_array_equal(got, np.maximum(tp.einsum("ij,jk->ik", a, b), 0))


def test_overflow_rounds_to_infinity_without_a_warning() -> None:
    a = np.full((2, 4), 200.0, np.float16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = tp.einsum("ij,jk->ik", a, a.T.copy())  # 4 * 40000: beyond float16's 65504
    assert got.dtype == F16 and np.isposinf(got).all()
    wide = tp.einsum("ij,jk->ik", a, a.T.copy(), dtype=np.float32)
    np.testing.assert_array_equal(wide, np.full((2, 2), 160000.0, np.float32))


def test_extent_zero_and_empty_results() -> None:
    a, b = np.ones((3, 0), BF16), np.ones((0, 2), BF16)
    got = tp.einsum("ij,jk->ik", a, b)
    assert got.dtype == BF16 and (got == 0).all() and got.shape == (3, 2)
    assert tp.einsum("ij,jk->ik", np.ones((0, 4), F16), np.ones((4, 2), F16)).shape == (0, 2)


# ---- the conversion as steps of the plan, priced ----------------------------------------


def test_the_conversions_are_priced_steps_the_report_shows() -> None:
    rng = np.random.default_rng(13)
    a, b = _values(rng, (64, 48), BF16), _values(rng, (48, 32), BF16)
    plan = tp.plan("ij,jk->ik", a, b)
    widen = [s for s in plan.steps if isinstance(s, WidenStep)]
    rounding = [s for s in plan.steps if isinstance(s, RoundStep)]
    assert len(widen) == 2 and len(rounding) == 1
    ref = MachineParams.reference()  # what the tests plan with (tests/conftest.py)
    assert widen[0].seconds == convert_seconds(64 * 48, BF16, F32, "widen", ref)
    assert rounding[0].seconds == convert_seconds(64 * 32, BF16, F32, "round", ref)
    # At least the bytes moved (2 read and 4 written per element) at the copy rate.
    assert widen[0].seconds >= 64 * 48 * 6 / ref.copy_bytes_per_second
    # The plan's predicted time includes them.
    teir_seconds = sum(s.chosen.cost.seconds for s in plan.steps if isinstance(s, TEIRStep))
    assert plan.predicted_seconds == pytest.approx(
        teir_seconds + sum(s.seconds for s in (*widen, *rounding)))
    text = str(plan.explain())
    assert "Step 0: widen" in text and "Step 3: round" in text
    assert "convert operand 0 (bfloat16, 64 x 48) to float32 once" in text
    assert "round the result (float32, 64 x 32) to bfloat16 once (predicted" in text
    assert "after the contraction" in text  # the frontend's note on the rounding


def test_float16_conversions_cost_more_than_their_bytes() -> None:
    """numpy's float16 casts are per-element loops: priced above the copy rate."""
    ref = MachineParams.reference()
    n = 1 << 16
    assert convert_seconds(n, F16, F32, "widen", ref) > n * 6 / ref.copy_bytes_per_second
    assert convert_seconds(n, F16, F32, "round", ref) > convert_seconds(
        n, F16, F32, "widen", ref) > convert_seconds(n, BF16, F32, "widen", ref)


def test_16_bit_plans_take_trials_without_numpy(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A 16-bit plan's trials time its runners-up, not numpy.einsum (which has no
    bfloat16 loop and sums float16 in float16), and every call's result is right."""
    from teir_plan import api
    from teir_plan.schedule import choices, trials

    monkeypatch.setenv("TEIR_PLAN_SELF_CORRECT", "1")
    monkeypatch.setenv("TEIR_PLAN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(trials, "TRIAL_BUDGET", 1.0)  # settle within the test's calls
    monkeypatch.setattr(trials, "expand_seconds", [0.0])  # contenders at the 2nd call
    api.plan_cache.clear()
    choices.forget()
    rng = np.random.default_rng(14)
    a, b = _values(rng, (224, 200), np.float32), _values(rng, (200, 216), np.float32)
    try:
        for dtype in HALVES:
            x, y = a.astype(dtype), b.astype(dtype)
            plan = tp.plan("ij,jk->ik", x, y)
            assert plan.predicted_seconds >= 50e-6 and plan.trials is not None
            for i in range(12):
                got = tp.einsum("ij,jk->ik", x, y)
                assert got.dtype == dtype
                assert_within_bound(got, "ij,jk->ik", [x, y])
                if i == 1:
                    names = [c.name for c in plan.trials.contenders]
                    assert "numpy.einsum" not in names and len(names) > 1
    finally:
        api.plan_cache.clear()
        choices.forget()


# ---- a property over 16-bit values, NaN, infinities and subnormals -------------------------

EXPRESSIONS = {  # (subscripts, the indices of each operand); every summed index in both
    "ij,jk->ik": ("ij", "jk"), "ij,ij->i": ("ij", "ij"), "ij,j->i": ("ij", "j"),
    "bij,bjk->bik": ("bij", "bjk"), "i,i->": ("i", "i"), "ij->i": ("ij",),
    "ij->j": ("ij",), "ijk->": ("ijk",), "ij->ji": ("ij",),
}
# Finite values up to these magnitudes keep every sum of the property's shapes (at most
# 36 terms) inside float32's range and the 16-bit result's: numpy's NaN and infinities
# are then the inputs' own.
LARGEST = {F16: 8.0, BF16: 2.0**40}


def _special(dtype: np.dtype) -> list[float]:
    tiny = SUBNORMAL[dtype]
    normal = float(np.finfo(dtype).smallest_normal)
    return [np.nan, np.inf, -np.inf, 0.0, -0.0, tiny, -tiny, 5 * tiny, normal / 2, normal]


@fuzz_settings(default=60, fuzz=20_000)
@given(data=st.data())
@counted
def test_16_bit_values_with_nan_inf_and_subnormals(data: st.DataObject) -> None:
    dtype = data.draw(st.sampled_from(HALVES), label="dtype")
    subscripts = data.draw(st.sampled_from(sorted(EXPRESSIONS)), label="subscripts")
    extent = {c: data.draw(st.integers(1, 6), label=f"|{c}|")
              for c in sorted(set("".join(EXPRESSIONS[subscripts])))}
    element = st.one_of(
        st.sampled_from(_special(dtype)),
        st.floats(-LARGEST[dtype], LARGEST[dtype], width=32),
    )
    specials = data.draw(st.booleans(), label="specials")
    ops = []
    for term in EXPRESSIONS[subscripts]:
        shape = tuple(extent[c] for c in term)
        n = math.prod(shape)
        values = data.draw(st.lists(element if specials else st.floats(
            -LARGEST[dtype], LARGEST[dtype], width=32), min_size=n, max_size=n))
        ops.append(np.array(values, np.float32).astype(dtype).reshape(shape))
    got = tp.einsum(subscripts, *ops)
    assert got.dtype == dtype
    assert_within_bound(got, subscripts, ops)


# ---- TEIR: the data types, their text and JSON -----------------------------------------------


def test_the_16_bit_data_types() -> None:
    assert tp.DataType.coerce("bfloat16") is tp.DataType.BFLOAT16
    assert tp.DataType.coerce("BF16") is tp.DataType.BFLOAT16
    assert tp.DataType.coerce("Float16") is tp.DataType.FLOAT16
    assert tp.DataType.coerce("f16") is tp.DataType.FLOAT16
    assert tp.DataType.BFLOAT16.numpy == BF16 and tp.DataType.FLOAT16.numpy == F16
    assert tp.DataType.from_numpy(BF16) is tp.DataType.BFLOAT16
    assert tp.DataType.from_numpy(F16) is tp.DataType.FLOAT16
    assert tp.DataType.BFLOAT16.is_half and not tp.DataType.FLOAT32.is_half
    assert not tp.DataType.FLOAT16.is_complex
    assert is_half(np.dtype(">f2")) and not is_half(np.dtype("V2"))
    with pytest.raises(tp.TEIRError, match="data_type: 'float8' is not a DataType"):
        tp.Primitives("float8", "zero", "gemm", "none")


def _gemm(data_type: str) -> tp.TEIR:
    return tp.TEIR.from_fields(
        data_type=data_type, prim_first="zero", prim_main="gemm", prim_last="relu",
        dim_types=["m", "n", "k"], exec_types=["seq", "prim", "prim"], dim_sizes=[4, 3, 5],
        strides=[[5, 0, 1], [0, 1, 3], [3, 1, 0]])


@pytest.mark.parametrize("data_type", ["bfloat16", "float16"])
def test_teir_programs_in_16_bit_validate_print_and_round_trip(data_type) -> None:
    prog = _gemm(data_type)
    prog.validate()
    assert prog.format().splitlines()[-1] == (
        f"primitives: data_type={data_type} prim_first=zero prim_main=gemm prim_last=relu")
    text = prog.to_json()
    assert '"data_type": "' + data_type + '"' in text
    assert tp.TEIR.from_json(text) == prog
    unary = tp.TEIR.from_fields(
        data_type=data_type, prim_first="none", prim_main="copy", prim_last="none",
        dim_types=["c", "c"], exec_types=["seq", "prim"], dim_sizes=[2, 3],
        strides=[[3, 1], [1, 2]])
    assert tp.TEIR.from_json(unary.to_json()) == unary


@pytest.mark.parametrize("data_type", ["bfloat16", "float16"])
def test_etops_writer_and_the_executor_refuse_16_bit_programs(data_type) -> None:
    prog = _gemm(data_type)
    with pytest.raises(tp.TEIRError, match=f"data_type: etops has no 16-bit .* {data_type}"):
        prog.to_etops_json()
    _gemm("float32").to_etops_json()  # the same schedule in float32 exports
    dt = tp.DataType.coerce(data_type).numpy
    arrays = [np.zeros(20, dt), np.zeros(15, dt), np.zeros(12, dt)]
    with pytest.raises(tp.DTypeError, match=f"data_type: the executor's TEIR kernels have "
                                            f"no 16-bit type yet, so a {data_type} program"):
        tp.execute(prog, *arrays)


def test_bfloat16_operands_are_numbers_other_void_dtypes_are_not() -> None:
    assert tp.einsum("i->", np.ones(3, BF16)) == 3
    with pytest.raises(tp.OperandTypeError, match="operand 1: dtype \\|V2 is not numeric"):
        tp.einsum("i,i->", np.ones(2, BF16), np.zeros(2, "V2"))
    with pytest.raises(tp.DTypeError, match="dtype: \\|V2 is not numeric"):
        tp.einsum("i->", np.ones(2, BF16), dtype="V2")
