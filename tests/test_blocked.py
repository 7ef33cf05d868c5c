"""Blocked write-back (teir_plan/planner/block.py): a contraction into a fixed-layout
``out`` run block by block through a stage in cache.

The plans here are built with a small L2 in the machine parameters, so that small
problems have several blocks; results are compared with numpy.einsum in float64.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import teir_plan as tp
from teir_plan.executor.threads import get_num_threads
from teir_plan.frontend.contraction import Contraction, Layout, describe, with_dtype
from teir_plan.frontend.expression import parse
from teir_plan.planner.block import STAGE_L2_FRACTION, blocking_for
from teir_plan.schedule.build import _build, result_layouts
from teir_plan.schedule.in_force import machine_params
from teir_plan.schedule.operands import OperandSpec
from teir_plan.schedule.steps import BlockedStep
from teir_plan.teir.enums import DimType
from tests.strategies import counted, fuzz_settings

RNG = np.random.default_rng(11)
TCCG_LIKE = [
    ("efbad,cf->abcde", {"a": 8, "b": 6, "c": 5, "d": 12, "e": 16, "f": 6}),
    ("dbea,ec->abcd", {"a": 24, "b": 5, "c": 6, "d": 32, "e": 8}),
    ("ecbfa,fd->abcde", {"a": 12, "b": 4, "c": 5, "d": 6, "e": 32, "f": 7}),
    ("deca,be->abcd", {"a": 24, "b": 6, "c": 5, "d": 32, "e": 7}),
    ("dega,gfbc->abcdef", {"a": 6, "b": 4, "c": 5, "d": 3, "e": 4, "f": 16, "g": 5}),
]


def _params(l2_bytes: int) -> tp.MachineParams:
    return replace(machine_params(), l2_bytes=l2_bytes)


def _operands(expr: str, ext: dict[str, int], dtype: object = np.float32) -> list[np.ndarray]:
    terms = expr.split("->")[0].split(",")
    return [RNG.standard_normal([ext[c] for c in t]).astype(dtype) for t in terms]


def _ref(expr: str, ops: list[np.ndarray]) -> np.ndarray:
    return np.einsum(expr, *[o.astype(np.float64) for o in ops])


def _blocked_plans(expr: str, ops: list[np.ndarray], out: np.ndarray, l2_bytes: int,
                   epilogue: str | None = None) -> list[tp.Plan]:
    """The blocked plan of every staging layout that has a blocking (the planner's own
    choice may be another plan; these force the blocked path)."""
    specs = [OperandSpec.of(o) for o in ops]
    e = parse(expr, [s.shape for s in specs])
    plans = []
    for _, strides in result_layouts(e, specs, "K"):
        p = _build(e, expr, specs, OperandSpec.of(out), None, True, epilogue,
                   get_num_threads(), _params(l2_bytes), None, strides, blocked=True)
        if isinstance(p.main_step, BlockedStep):
            plans.append(p)
    return plans


@pytest.mark.parametrize("expr,ext", TCCG_LIKE, ids=[c[0] for c in TCCG_LIKE])
def test_blocked_plans_and_their_alternatives_match_numpy(expr: str, ext: dict[str, int]) -> None:
    ops = _operands(expr, ext)
    ref = _ref(expr, ops)
    out = np.full(ref.shape, np.nan, np.float32)
    plans = _blocked_plans(expr, ops, out, l2_bytes=16 << 10)
    assert plans, "a small L2 must leave some blocking"
    for p in plans:
        for alt in p.alternatives:
            out[...] = np.nan
            assert alt(*ops, out=out) is out
            np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


def test_the_planner_picks_blocks_for_a_c_order_out() -> None:
    # dbea,ec->abcd into C order: out's unit index d is the first operand's outermost, so
    # a direct plan transposes the 28 MB operand and whole staging moves the result
    # through memory three times; blocks keep the operand's own tiles.
    expr, ext = "dbea,ec->abcd", {"a": 96, "b": 8, "c": 24, "d": 96, "e": 96}
    ops = _operands(expr, ext)
    ref = _ref(expr, ops)
    out = np.empty(ref.shape, np.float32)
    p = tp.plan(expr, *ops, out=out)
    assert [s.kind for s in p.steps] == ["blocked"]
    assert "blocks of" in p.steps[0].describe()
    text = str(p.explain())
    assert "blocks of" in text and "non-temporal" in text and "in the stage" in text
    assert tp.einsum(expr, *ops, out=out) is out
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


def test_blocks_are_not_chosen_below_their_whole_contraction() -> None:
    # adec,ebd->abc at TCCG size into C order (planned from shapes; nothing runs): each
    # block reads all of ebd (2.7 MB, more than L2) once per value of a, re-reads the
    # blocked cost leaves out, so blocks staged in order bac were predicted 1.2x cheaper
    # than the same contraction unblocked into that order, and chosen over writing C
    # order directly, which measured 3-5% faster.  A blocked plan must not win on less
    # than its contraction costs whole.
    expr = "adec,ebd->abc"
    shapes = [(96, 84, 96, 84), (96, 84, 84)]
    out = np.empty((96, 84, 84), np.float32)
    direct = tp.plan(expr, *shapes, dtype=np.float32, order="C")  # no staging options
    p = tp.plan(expr, *shapes, dtype=np.float32, out=out)
    assert [s.kind for s in p.steps] == [s.kind for s in direct.steps] == ["teir"]
    assert p.teir == direct.teir


def test_blocked_relu_and_float64_and_strided_out() -> None:
    expr, ext = TCCG_LIKE[0]
    ops = _operands(expr, ext, np.float64)
    ref = np.maximum(_ref(expr, ops), 0)
    big = np.full(tuple(2 * n for n in ref.shape), np.nan)
    out = big[::2, 1::2, ::-2, ::2, ::2]  # strided, one axis reversed
    plans = _blocked_plans(expr, ops, out, l2_bytes=8 << 10, epilogue="relu")
    assert plans
    for p in plans:
        big[...] = np.nan
        p(*ops, out=out)
        np.testing.assert_allclose(out, ref, rtol=1e-10, atol=1e-10)
        untouched = np.ones(big.shape, bool)
        untouched[::2, 1::2, ::-2, ::2, ::2] = False
        assert np.isnan(big[untouched]).all(), "wrote outside out's elements"


def test_an_output_index_broadcast_in_both_operands() -> None:
    # i varies in out but has stride 0 in both operands (a broadcast view and a
    # scalar): the blocking must still place it (found by make fuzz).
    rng = np.random.default_rng(5)
    row = rng.standard_normal((1, 24)).astype(np.float32)
    a = np.broadcast_to(row, (64, 24))
    b = rng.standard_normal((24, 48)).astype(np.float32)
    ref = _ref("ij,jk->ik", [a, b])
    out = np.full(ref.shape, np.nan, np.float32)
    plans = _blocked_plans("ij,jk->ik", [a, b], out, l2_bytes=2 << 10)
    assert plans
    for p in plans:
        out[...] = np.nan
        p(a, b, out=out)
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
    x = np.float32(0.5)
    b4 = rng.standard_normal((2, 1, 2, 2))
    b4 = np.broadcast_to(b4[..., :1], (2, 1, 2, 2))
    np.testing.assert_allclose(tp.einsum(",...ba", x, b4), np.einsum(",...ba", 0.5, b4))


def _tensor_c(expr: str, ext: dict[str, int]) -> Contraction:
    ins, out = expr.split("->")
    lays = []
    for term in [*ins.split(","), out]:
        strides, step = [], 1
        for ch in reversed(term):
            strides.append(step)
            step *= ext[ch]
        lays.append(Layout(term, tuple(ext[c] for c in term), tuple(reversed(strides))))
    return with_dtype(describe(*lays), np.float32)


@pytest.mark.parametrize("expr,ext", TCCG_LIKE, ids=[c[0] for c in TCCG_LIKE])
@pytest.mark.parametrize("l2_bytes", [2 << 10, 16 << 10, 64 << 10])
def test_a_blocking_writes_every_element_of_out_once(expr: str, ext: dict[str, int],
                                                     l2_bytes: int) -> None:
    c = _tensor_c(expr, ext)
    stage_order = expr.split("->")[0].split(",")[0]
    stage_order += "".join(ch for ch in expr.split("->")[1] if ch not in stage_order)
    b = blocking_for(c, stage_order, l2_bytes)
    if b is None:
        return
    # Every (outer iteration, block position) pair lands on its own element of out, and
    # together they are all of out; the stage offsets of a block are 0..stage-1 once.
    out_size = math.prod(ext[ch] for ch in expr.split("->")[1])
    hits = np.zeros(out_size, np.int64)
    stage_hits = np.zeros(b.stage_elements, np.int64)
    for pos in itertools.product(*[range(r.extent) for r in b.block]):
        stage_hits[sum(i * r.stage_stride for i, r in zip(pos, b.block))] += 1
    assert (stage_hits == 1).all()
    block_offsets = [sum(i * r.out_stride for i, r in zip(pos, b.block))
                     for pos in itertools.product(*[range(r.extent) for r in b.block])]
    for it in itertools.product(*[range(r.extent) for r in b.outer]):
        base = sum(i * r.out_stride for i, r in zip(it, b.outer))
        for off in block_offsets:
            hits[base + off] += 1
    assert (hits == 1).all()
    # The block's contraction keeps every K index whole (a block is final when copied).
    for a in c.axes:
        if a.role is DimType.K:
            assert a in b.inner.axes
    assert b.stage_elements * 4 <= l2_bytes * STAGE_L2_FRACTION


@fuzz_settings(default=40, fuzz=5_000)
@given(data=st.data())
@counted
def test_random_blocked_contractions_match_numpy(data: st.DataObject) -> None:
    letters = "abcdefg"
    n_idx = data.draw(st.integers(3, 6), label="indices")
    idx = letters[:n_idx]
    ext = {ch: data.draw(st.sampled_from([1, 2, 3, 4, 5, 8, 16]), label=f"extent {ch}")
           for ch in idx}
    t0 = "".join(data.draw(st.permutations(idx), label="in0")[: data.draw(st.integers(1, n_idx))])
    t1 = "".join(data.draw(st.permutations(idx), label="in1")[: data.draw(st.integers(1, n_idx))])
    both = [ch for ch in idx if ch in t0 or ch in t1]
    # Output: some of the indices, each of one operand or both; the rest are summed.
    out_t = "".join(ch for ch in data.draw(st.permutations(both), label="out")
                    if data.draw(st.booleans()) or (ch in t0) != (ch in t1))
    expr = f"{t0},{t1}->{out_t}"
    dtype = data.draw(st.sampled_from([np.float32, np.float64]), label="dtype")
    ops = _operands(expr, ext, dtype)
    if data.draw(st.booleans(), label="transposed in0"):
        ops[0] = np.ascontiguousarray(ops[0].T).T
    for j in (0, 1):
        if ops[j].ndim and data.draw(st.integers(0, 3), label=f"broadcast in{j}") == 0:
            ops[j] = np.broadcast_to(ops[j][:1], ops[j].shape)  # stride 0 along axis 0
    ref = _ref(expr, ops)
    out = np.full(ref.shape, np.nan, dtype)
    l2 = data.draw(st.sampled_from([256, 1 << 10, 8 << 10]), label="l2 bytes")
    for p in _blocked_plans(expr, ops, out, l2):
        out[...] = np.nan
        p(*ops, out=out)
        tol = 1e-4 if dtype == np.float32 else 1e-10
        np.testing.assert_allclose(out, ref, rtol=tol, atol=tol * max(1, np.abs(ref).max()))
