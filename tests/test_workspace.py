"""The scratch pool: reuse, its bound, one owner per buffer, and plans that use it."""

from __future__ import annotations

import gc
import math

import numpy as np

import teir_plan as tp
from teir_plan.executor.threads import get_num_threads
from teir_plan.frontend.expression import parse
from teir_plan.schedule.build import _build, result_layouts
from teir_plan.schedule.in_force import machine_params
from teir_plan.schedule.operands import OperandSpec
from teir_plan.schedule.workspace import POOL_MIN_BYTES, Workspace, workspace


def test_reuses_an_idle_buffer_of_similar_size() -> None:
    ws = Workspace(limit_bytes=1 << 30)
    a = ws.borrow((1 << 20,), np.float32)
    ws.give_back(a)
    b = ws.borrow((1 << 18, 3), np.float32)  # 3/4 of the idle buffer: reused
    assert np.shares_memory(a, b)
    assert b.flags.c_contiguous and b.ctypes.data % 64 == 0 and b.shape == (1 << 18, 3)
    c = ws.borrow((1 << 20,), np.float32)  # a is taken: new memory
    assert not np.shares_memory(b, c)
    ws.give_back(b)
    tiny = ws.borrow((1 << 16,), np.float32)  # a quarter of the idle buffer: not reused
    assert not np.shares_memory(tiny, b)


def test_small_buffers_are_not_pooled() -> None:
    ws = Workspace()
    a = ws.borrow((POOL_MIN_BYTES // 8,), np.float32)
    ws.give_back(a)
    assert ws.idle_bytes() == 0


def test_idle_bytes_stay_under_the_limit() -> None:
    ws = Workspace(limit_bytes=8 << 20)
    bufs = [ws.borrow((n << 18,), np.float32) for n in (1, 2, 3, 4)]  # 1, 2, 3, 4 MiB
    for b in bufs:
        ws.give_back(b)
    assert ws.idle_bytes() <= 8 << 20
    ws.give_back(bufs[0])  # a second give-back of the same buffer is ignored
    assert ws.idle_bytes() <= 8 << 20


def test_no_two_borrowers_share_memory() -> None:
    ws = Workspace()
    held = [ws.borrow((1 << 20,), np.float32) for _ in range(4)]
    for i, x in enumerate(held):
        for y in held[i + 1:]:
            assert not np.shares_memory(x, y)


def test_a_plan_reuses_its_large_buffers_and_stays_correct() -> None:
    rng = np.random.default_rng(1)
    # In C order no BLAS tile reads the first operand in place: this plan stages the
    # result in the operand's order and permutes it (a buffer > 1 MiB).
    a = rng.standard_normal((40, 36, 12, 40, 36), dtype=np.float32)
    b = rng.standard_normal((20, 36), dtype=np.float32)
    expr = "efbad,cf->abcde"
    specs = [OperandSpec.of(a), OperandSpec.of(b)]
    e = parse(expr, [s.shape for s in specs])
    out_spec = OperandSpec.of(np.empty((40, 12, 20, 36, 40), np.float32))
    plan = _build(e, expr, specs, out_spec, None, True, None, get_num_threads(),
                  machine_params(), None, result_layouts(e, specs, "K")[1][1])
    packs = [p for s in plan.steps if hasattr(s, "chosen") for p in s.chosen.packs]
    temps = [t for t in plan.buffers if t.kind == "temp"]
    borrowed = [math.prod(x.shape) * 4 for x in [*packs, *temps]]
    assert borrowed and max(borrowed) >= 1 << 20
    ref = np.einsum(expr, a.astype(np.float64), b.astype(np.float64))
    workspace.clear()
    for _ in range(3):
        np.testing.assert_allclose(plan(a, b), ref, rtol=1e-4, atol=1e-3)
        a = a[::-1].copy()  # new data, same layout
        ref = np.einsum(expr, a.astype(np.float64), b.astype(np.float64))
    assert workspace.idle_bytes() >= max(borrowed)


def test_a_lent_array_returns_its_memory_only_when_every_view_is_gone() -> None:
    ws = Workspace()
    a = ws.lend((512, 1024), np.float32)  # 2 MiB: pooled
    assert a.flags.writeable and a.flags.c_contiguous and a.ctypes.data % 64 == 0
    view = a.T[3:]
    del a
    gc.collect()
    assert ws.idle_bytes() == 0  # the view still holds it
    b = ws.lend((512, 1024), np.float32)
    assert not np.shares_memory(b, view)
    del view
    gc.collect()
    assert ws.idle_bytes() >= 2 << 20
    c = ws.lend((500, 1000), np.float32)  # fits in the returned buffer: reused
    assert ws.idle_bytes() == 0 and not np.shares_memory(b, c)
    small = ws.lend((4, 4), np.float32)  # small: plain numpy memory
    assert small.base is None


def test_results_held_by_the_caller_never_share_memory() -> None:
    rng = np.random.default_rng(3)
    a = rng.standard_normal((300, 200), dtype=np.float32)
    b = rng.standard_normal((200, 400), dtype=np.float32)
    ref = a.astype(np.float64) @ b
    held = [tp.einsum("ij,jk->ik", a, b) for _ in range(3)]  # 480 KB each
    big = [tp.einsum("ij,jk->ikj", a, b) for _ in range(3)]  # 96 MB each: lent
    for i, x in enumerate(big):
        for y in big[i + 1:]:
            assert not np.shares_memory(x, y)
    for x in held:
        np.testing.assert_allclose(x, ref, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(big[0], big[2])
    del big, held
    workspace.clear()
    first = tp.einsum("ij,jk->ikj", a, b)
    ptr = first.ctypes.data
    del first  # the caller drops the result: its memory goes back to the pool
    assert workspace.idle_bytes() >= 300 * 400 * 200 * 4
    again = tp.einsum("ij,jk->ikj", a, b)
    assert again.ctypes.data == ptr  # written into the already-mapped memory
    np.testing.assert_allclose(again, np.einsum("ij,jk->ikj", a, b), rtol=1e-6)


def test_the_buffer_given_back_last_stays_when_the_pool_is_full() -> None:
    """Over the limit, the buffers given back longest ago go first: the one just given
    back (the next call's likeliest want) is kept even when it is the largest."""
    ws = Workspace(limit_bytes=5 << 20)
    small = [ws.borrow((1 << 20,), np.uint8) for _ in range(3)]
    for buf in small:
        ws.give_back(buf)
    big = ws.borrow((3 << 20,), np.uint8)
    ws.give_back(big)
    again = ws.borrow((3 << 20,), np.uint8)
    assert np.shares_memory(big, again)
    assert ws.idle_bytes() <= 5 << 20


def test_the_buffer_given_back_last_stays_beyond_the_limit() -> None:
    """One buffer larger than the limit (a 1.5 GB complex128 result over a 1 GiB pool),
    up to ``last_limit_bytes``, is kept besides the others, also when smaller buffers
    are given back after it (a plan's temporaries): a loop over such a result would
    otherwise fault its pages in on every call."""
    ws = Workspace(limit_bytes=2 << 20, last_limit_bytes=8 << 20)
    small = ws.borrow((1 << 20,), np.uint8)
    big = ws.lend((6 << 20,), np.uint8)
    ptr = big.ctypes.data
    del big
    ws.give_back(small)
    assert ws.idle_bytes() == ws._idle[0].nbytes + ws._idle[1].nbytes >= 7 << 20
    again = ws.lend((6 << 20,), np.uint8)
    assert again.ctypes.data == ptr
    del again
    huge = ws.borrow((9 << 20,), np.uint8)  # beyond last_limit_bytes: not kept
    ws.give_back(huge)
    assert ws.idle_bytes() <= 8 << 20
    ws.limit_bytes = ws.last_limit_bytes = 0  # as a dask worker sets it: nothing kept
    ws.trim()
    assert ws.idle_bytes() == 0


def test_a_result_larger_than_the_pool_limit_reuses_its_memory(monkeypatch) -> None:
    monkeypatch.setattr(workspace, "limit_bytes", 2 << 20)
    monkeypatch.setattr(workspace, "last_limit_bytes", 64 << 20)
    workspace.clear()
    rng = np.random.default_rng(3)
    a = rng.standard_normal((300, 40)) + 1j * rng.standard_normal((300, 40))
    b = rng.standard_normal((40, 200)) + 1j * rng.standard_normal((40, 200))
    c = tp.einsum("ij,jk->ikj", a, b)  # 38 MB of complex128
    ptr = c.ctypes.data
    del c
    again = tp.einsum("ij,jk->ikj", a, b)
    assert again.ctypes.data == ptr  # written into the already-mapped memory
    np.testing.assert_allclose(again, np.einsum("ij,jk->ikj", a, b), rtol=1e-12)
    del again
    workspace.clear()
