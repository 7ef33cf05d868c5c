"""Packing an operand into a contiguous buffer laid out for the contraction
(teir_plan/planner/pack.py).  The packed order follows the module's rule, worked out by
hand for each case below: batch (C) axes outermost in out's order, then the operand's
free axes that out does not hold contiguously, then the K axes in the other input's
order, then the free axes that run contiguously in out.  The pack's own Copy program,
run by the test-only reference interpreter (tests/reference.py), must write exactly
numpy's transpose of the operand into that order, and the packed contraction must then
compute numpy.einsum in float64.

(tests/test_broadcast_pack.py covers the packs of a broadcast operand; here the packs
the search offers every contraction.)"""

from __future__ import annotations

import numpy as np
import pytest

import teir_plan as tp
from teir_plan.frontend.contraction import Contraction, describe, layout_of, with_dtype
from teir_plan.machine import MachineParams
from teir_plan.planner.candidates import choices_for, prim_choices, to_teir
from teir_plan.planner.pack import pack_variant, packed_order
from tests.reference import run_reference

RNG = np.random.default_rng(5)
PARAMS = MachineParams.reference()


def _operands(expr: str, ext: dict[str, int]) -> list[np.ndarray]:
    return [RNG.standard_normal([ext[ch] for ch in t]) for t in expr.split("->")[0].split(",")]


def _contraction(expr: str, ops: list[np.ndarray], out: np.ndarray) -> Contraction:
    ins, res = expr.split("->")
    ext = {ch: n for t, a in zip(ins.split(","), ops) for ch, n in zip(t, a.shape)}
    lays = [layout_of(t, a, ext) for t, a in zip([*ins.split(","), res], [*ops, out])]
    return with_dtype(describe(*lays), np.dtype(np.float64))


def _order(expr: str, j: int, ext: dict[str, int]) -> str:
    ops = _operands(expr, ext)
    out = np.empty([ext[ch] for ch in expr.split("->")[1]])
    c = _contraction(expr, ops, out)
    return "".join(c.axes[i].name for i in packed_order(c, j))


@pytest.mark.parametrize(("expr", "j", "order"), [
    # The README's example: in0's M axes r s run contiguously in out (s unit, r = |s|),
    # so they go innermost; the K axes t u go outside them in in1's order (t before u).
    ("trus,pqtu->pqrs", 0, "turs"),
    # in1: N axes p q contiguous in out (q = |r||s|, p = |q||r||s|), K in in0's order.
    ("trus,pqtu->pqrs", 1, "tupq"),
    # out a c b: in0's M axes a and b are not contiguous in out (c between them): b (the
    # run ending at out's unit stride) innermost, a outside the K axis.
    ("abk,kc->acb", 0, "akb"),
    # A batch axis first, in out's order; then K; then the free axis.
    ("bik,bkj->bij", 0, "bki"),
    ("bik,bkj->bij", 1, "bkj"),
    # Two batch axes, out's order (y before x), whatever the operand's.
    ("xyik,yxkj->yxij", 0, "yxki"),
])
def test_the_packed_order_by_hand(expr: str, j: int, order: str) -> None:
    ext = {ch: 2 + i for i, ch in enumerate(sorted(set(expr) - set(",->")))}
    assert _order(expr, j, ext) == order


@pytest.mark.parametrize(("expr", "j"), [
    ("trus,pqtu->pqrs", 0), ("trus,pqtu->pqrs", 1), ("abk,kc->acb", 0),
    ("bik,bkj->bij", 0), ("xyik,yxkj->yxij", 0),  # (bkj is in1's packed order already)
])
def test_the_pack_copies_the_operand_into_that_order_and_the_contraction_holds(
        expr: str, j: int) -> None:
    ext = {ch: 2 + i % 3 for i, ch in enumerate(sorted(set(expr) - set(",->")))}
    ops = _operands(expr, ext)
    ops[1 - j] = ops[1 - j][::-1]  # the other operand read in place, reversed
    res = expr.split("->")[1]
    out0 = RNG.standard_normal([ext[ch] for ch in res])
    c = _contraction(expr, ops, out0)
    found = pack_variant(c, j, PARAMS, threads=1)
    assert found is not None
    packed, pack = found
    term = expr.split("->")[0].split(",")[j]
    names = "".join(pack.names)
    assert sorted(names) == sorted(term) and pack.tensor == j
    assert pack.shape == tuple(ext[ch] for ch in names)
    # The pack's Copy program writes numpy's transpose of the operand, contiguous.
    buf = np.full(ops[j].size, np.nan)
    run_reference(pack.copy.teir, [ops[j].reshape(-1).copy(), buf], [0, 0])
    want = np.transpose(ops[j], [term.index(ch) for ch in names])
    np.testing.assert_array_equal(buf, want.reshape(-1))
    # In the packed contraction only operand j's strides change: row-major in that order.
    for old, new in zip(c.axes, packed.axes):
        assert (new.name, new.role, new.extent) == (old.name, old.role, old.extent)
        assert new.strides[1 - j] == old.strides[1 - j] and new.strides[2] == old.strides[2]
        if new.name in names:
            after = names[names.index(new.name) + 1:]
            assert new.strides[j] == int(np.prod([ext[ch] for ch in after]))
        else:  # an axis operand j does not take part in
            assert new.strides[j] == old.strides[j] == 0
    # Every candidate program of the packed contraction, run on the packed buffer,
    # computes the contraction.
    other = ops[1 - j]
    base = other.base if other.base is not None else other
    origin = (other.ctypes.data - base.ctypes.data) // 8
    bufs = [buf, base.reshape(-1)] if j == 0 else [base.reshape(-1), buf]
    origins = [0, origin] if j == 0 else [origin, 0]
    want = np.einsum(expr, *ops)
    for prim in prim_choices(packed):
        ch = next(iter(choices_for(packed, prim, threads=1)))
        got = out0.copy()
        run_reference(to_teir(packed, ch), [*bufs, got.reshape(-1)], [*origins, 0])
        np.testing.assert_allclose(got, want, atol=1e-12)


def test_an_operand_already_in_the_packed_order_is_not_packed() -> None:
    ext = dict(p=2, q=3, r=4, s=2, t=3, u=2)
    x = RNG.standard_normal([ext[ch] for ch in "turs"])  # t u r s: the packed order
    y = RNG.standard_normal([ext[ch] for ch in "pqtu"])
    out = np.empty([ext[ch] for ch in "pqrs"])
    tr = x.transpose(0, 2, 1, 3)  # indexed t r u s, stored t u r s
    c = _contraction("trus,pqtu->pqrs", [tr, y], out)
    assert pack_variant(c, 0, PARAMS, threads=1) is None
    # An explicit order of the same memory is no pack either; another order is one.
    order = packed_order(c, 0)
    assert pack_variant(c, 0, PARAMS, 1, order=order) is None
    assert pack_variant(c, 0, PARAMS, 1, order=order[::-1]) is not None


def test_a_pack_describes_itself_in_the_users_letters() -> None:
    ext = dict(p=2, q=3, r=4, s=5, t=6, u=7)
    ops = _operands("trus,pqtu->pqrs", ext)
    c = _contraction("trus,pqtu->pqrs", ops, np.empty((2, 3, 4, 5)))
    found = pack_variant(c, 0, PARAMS, threads=1)
    assert found is not None
    pack = found[1]
    # t u r s: extents 6 7 4 5
    assert pack.describe() == "pack in0 into a contiguous 6x7x4x5 buffer ordered t u r s"
    assert pack.seconds == pack.copy.cost.seconds > 0
    assert isinstance(pack.copy.teir, tp.TEIR)
