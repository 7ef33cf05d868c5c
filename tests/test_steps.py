"""The steps of a plan (teir_plan/schedule/steps.py): each reads and writes a table of
buffers by index (operands, then out, then temporaries), and says what it does in one
line.  Each step is built here by hand, run on its buffers, and checked against numpy
(numpy.einsum in float64 for the contractions, numpy's casts and fills, the complex
product's real 2 x 2 form written out), and its description against the words it must
say.

(The planned steps of tp.plan are exercised by every einsum test; here each kind of step
on its own, including the paths a plan rarely takes: more indices than numpy's 52
letters, bool operands, packs carved from one borrowed buffer.)"""

from __future__ import annotations

import numpy as np
import opt_einsum as oe
import pytest

import teir_plan as tp
from teir_plan.frontend.contraction import describe, layout_of, with_dtype
from teir_plan.frontend.convention import check_numpy_indices
from teir_plan.machine import MachineParams
from teir_plan.planner.candidates import choices_for, prim_choices, to_teir
from teir_plan.planner.cost import Cost
from teir_plan.planner.pack import Pack, pack_variant
from teir_plan.schedule.steps import (
    BufferSpec,
    Candidate,
    CastStep,
    CopyStep,
    ExpandStep,
    FillStep,
    NumpyStep,
    TEIRStep,
    ViewStep,
    buffer_names,
    step_seconds,
)
from teir_plan.schedule.view import View
from teir_plan.schedule.workspace import workspace
from teir_plan.teir.axes import NO_AXIS

RNG = np.random.default_rng(23)
COST = Cost(1.5e-6, 1.0e-6, 0.0, 0.0, 1, 0.0, 0.0, 1, 1, 1, 1.0, 1, 0)


def test_a_cast_converts_as_numpy_does() -> None:
    x = RNG.standard_normal((3, 4))
    bufs: list[np.ndarray] = [x, np.empty((3, 4), np.float32)]
    step = CastStep(0, 1, "operand 0 (float64)", np.dtype(np.float32), 2.5e-6)
    step.run(bufs)
    np.testing.assert_array_equal(bufs[1], x.astype(np.float32))
    assert step.describe() == "cast operand 0 (float64) to float32 (predicted 2.5 us)"
    assert CastStep(0, 1, "operand 0", np.dtype(np.float32)).describe() == (
        "cast operand 0 to float32")  # no prediction, no words for one
    assert step.kind == "cast" and step_seconds(step) == 2.5e-6


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_an_expanded_complex_operand_multiplies_as_numpy(dtype: type) -> None:
    # e[..., s, p]: row s = 0 is (re, im) of z, row s = 1 is (-im, re), so that
    # sum_s x[..., s] e[..., s, p] over x's parts (xr, xi) is (xr zr - xi zi, xr zi + xi zr).
    z: np.ndarray = (RNG.standard_normal(5) + 1j * RNG.standard_normal(5)).astype(dtype)
    real: np.dtype = np.empty(0, dtype).real.dtype
    e = np.empty((5, 2, 2), real)
    step = ExpandStep(0, 1, "operand 1", real)
    step.run([z, e])
    np.testing.assert_array_equal(e[:, 0, 0], z.real)
    np.testing.assert_array_equal(e[:, 0, 1], z.imag)
    np.testing.assert_array_equal(e[:, 1, 0], -z.imag)
    np.testing.assert_array_equal(e[:, 1, 1], z.real)
    x: np.ndarray = (RNG.standard_normal(5) + 1j * RNG.standard_normal(5)).astype(dtype)
    parts = np.stack([x.real, x.imag], axis=-1)  # x[..., s]
    prod = np.einsum("is,isp->ip", parts.astype(float), e.astype(float))
    np.testing.assert_allclose(prod[:, 0] + 1j * prod[:, 1], x.astype(complex) * z,
                               rtol=1e-6)
    assert step.describe().startswith("expand operand 1 into its elements' 2 x 2 real "
                                      f"matrices ({real})")
    assert step.kind == "expand"


def test_fill_and_copy_steps() -> None:
    out = np.ones((2, 3))
    fill = FillStep(0, 0.0, "the summed index k has extent 0")
    fill.run([out])
    assert (out == 0).all()
    assert fill.describe() == "fill output with 0.0 (the summed index k has extent 0)"
    assert step_seconds(fill) == 0.0
    src = RNG.standard_normal((2, 3))
    dst = np.empty((2, 3), np.float32)
    copy = CopyStep(0, 1, "out is float32")
    copy.run([src, dst])
    np.testing.assert_array_equal(dst, src.astype(np.float32))
    assert copy.describe() == "copy result into output (out is float32)"


def test_a_view_step_copies_the_view_into_out() -> None:
    x = RNG.standard_normal((3, 3, 4))
    out = np.empty((3, 4))
    # iij->ij: output axis 0 walks operand axes 0 and 1 together, axis 1 operand axis 2.
    ViewStep(0, 1, View(0, ((0, 1), (2,)), (3, 4))).run([x, out])
    np.testing.assert_array_equal(out, np.einsum("iij->ij", x))
    out = np.empty((4, 3, 3))
    ViewStep(0, 1, View(0, ((2,), (0,), (1,)), (4, 3, 3))).run([x, out])
    np.testing.assert_array_equal(out, x.transpose(2, 0, 1))


def test_numpy_steps_compute_in_the_result_dtype() -> None:
    a = np.ones((2, 3), bool)
    out = np.empty(2, np.int64)
    step = NumpyStep("ij->i", (0,), 1, "bool is not a TEIR data type")
    step.run([a, out])
    # Counted as int64 (3 each), not or-ed as bool (True), then cast.
    np.testing.assert_array_equal(out, [3, 3])
    assert step.describe() == "numpy.einsum('ij->i') (bool is not a TEIR data type)"
    assert step.kind == "numpy"
    x = RNG.integers(-5, 5, (3, 4)).astype(np.int32)
    y = RNG.integers(-5, 5, (4, 2)).astype(np.int32)
    out = np.empty((3, 2), np.int32)
    NumpyStep("ij,jk->ik", (0, 1), 2, "int32").run([x, y, out])
    np.testing.assert_array_equal(out, x @ y)


def test_more_indices_than_numpys_letters_go_through_opt_einsum() -> None:
    # 54 indices: A over symbols 0..26, B over 26 and 27, C over 27..53; only 0 (2),
    # 26 (3), 27 (4) and 53 (2) longer than 1: A2 @ B @ C2, the rest summed away.  Each
    # pairwise step names at most 29 of them (what the planner admits for numpy).
    sym = [oe.get_symbol(i) for i in range(54)]
    sub = ("".join(sym[:27]) + "," + sym[26] + sym[27] + "," + "".join(sym[27:]) + "->"
           + sym[0] + sym[53])
    check_numpy_indices(sub.split("->")[0].split(","), sym[0] + sym[53],
                        dict.fromkeys(sym, 1) | {sym[0]: 2, sym[26]: 3, sym[27]: 4,
                                                 sym[53]: 2}, np.dtype(np.int64))
    a2, b, c2 = (RNG.integers(-3, 4, sh) for sh in ((2, 3), (3, 4), (4, 2)))
    a = a2.reshape((2,) + (1,) * 25 + (3,))
    c = c2.reshape((4,) + (1,) * 25 + (2,))
    out = np.empty((2, 2), np.int64)
    NumpyStep(sub, (0, 1, 2), 3, "int64 is not a TEIR data type").run([a, b, c, out])
    np.testing.assert_array_equal(out, a2 @ b @ c2)


def _contraction_step(packed: bool) -> tuple[TEIRStep, list[np.ndarray], np.ndarray]:
    """ik,kj->ij (float64, 6 x 5 by 5 x 4) as a TEIR step over a row-major in0, first
    packed into k i order (the packed layout's M axis innermost) if ``packed``."""
    a = RNG.standard_normal((6, 5))
    b = RNG.standard_normal((5, 4))
    out = np.full((6, 4), 1e3)
    ext = {"i": 6, "k": 5, "j": 4}
    c = with_dtype(describe(*(layout_of(t, v, ext) for t, v in
                              (("ik", a), ("kj", b), ("ij", out)))), np.dtype(np.float64))
    packs: tuple[Pack, ...] = ()
    if packed:
        found = pack_variant(c, 0, MachineParams.reference(), 1)
        assert found is not None
        c, pack = found
        packs = (pack,)
    prim = next(p for p in prim_choices(c) if NO_AXIS not in p[:3])  # a full GEMM
    ch = next(iter(choices_for(c, prim, threads=1)))
    cand = Candidate(to_teir(c, ch), tuple(ax.name for ax in c.axes), COST, packs=packs)
    return TEIRStep("ik,kj->ij", (0, 1), 2, cand), [a, b, out], a @ b


@pytest.mark.parametrize("packed", [False, True], ids=["in place", "in0 packed"])
def test_a_teir_step_runs_its_program_and_packs(packed: bool) -> None:
    step, bufs, want = _contraction_step(packed)
    a_before = bufs[0].copy()
    step.run(bufs)
    np.testing.assert_allclose(bufs[2], want, rtol=1e-12)
    np.testing.assert_array_equal(bufs[0], a_before)  # packed into a buffer, not in place
    text = "contract ik,kj->ij with TEIR gemm (predicted 1.5 us)"
    if packed:
        pack = step.chosen.packs[0]
        assert step.describe() == f"{text}; {pack.describe()}"
        assert step.describe(packs=False) == text
        assert step.pack_bytes >= 6 * 5 * 8  # the packed in0, 6 x 5 float64
    else:
        assert step.describe() == text and step.pack_bytes == 0
    assert step.kind == "teir" and step_seconds(step) == 1.5e-6
    again = step.with_choice(step.chosen)
    assert (again.subscripts, again.inputs, again.dst, again.role) == (
        step.subscripts, step.inputs, step.dst, step.role)


def test_a_teir_step_of_one_input() -> None:
    prog = tp.TEIR.from_fields(
        data_type="float64", prim_first="none", prim_main="copy", prim_last="none",
        dim_types=["c", "c"], exec_types=["seq", "prim"], dim_sizes=[3, 4],
        strides=[[4, 1], [1, 3]])
    step = TEIRStep("ij->ji", (0,), 1, Candidate(prog, ("i", "j"), COST), role="permute")
    x = RNG.standard_normal((3, 4))
    out = np.empty((4, 3))
    step.run([x, out])
    np.testing.assert_array_equal(out, x.T)
    assert step.describe().startswith("permute ij->ji with TEIR copy")


def test_buffers_by_name_and_made_by_kind() -> None:
    temp = BufferSpec("intermediate ik", (2, 3, 4), np.dtype(np.float64), "temp",
                      axis_order=(2, 0, 1))
    ones = BufferSpec("ones", (5,), np.dtype(np.float32), "const", fill=1.0)
    assert buffer_names(2, [temp, ones]) == ["operand 0", "operand 1", "out",
                                            "intermediate ik", "ones"]
    c = ones.make()
    assert c.dtype == np.float32 and (c == 1.0).all()
    t = temp.make()
    try:
        # Memory order axis 2, then 0, then 1: strides in elements 1 (axis 1), 3
        # (axis 0), 2 x 3 = 6 (axis 2).
        assert t.shape == (2, 3, 4) and [s // 8 for s in t.strides] == [3, 1, 6]
    finally:
        workspace.give_back(t)
