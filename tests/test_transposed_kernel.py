"""The transposed vector kernel (executor/transposed_kernel.py) and the tiles that run on it.

The kernel is checked on its own against float64 products computed by numpy: every
micro-tile size (4 to 24 rows, and more rows in several micro-tiles), vector axes ending
in a partial line, S rows one element apart or not (then copied, padded), accumulating
or not, streaming through its buffer or not, at every offset of the output within a
line, with the ReLU or not, with nothing written outside its tile; then through TEIR
programs the executor gives it (along M and along N, K split over a loop so that later
visits accumulate, threads, a streamed output into numpy's own ``out``), and through
the planner on the contraction it was built for, against numpy.einsum in float64.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numba import njit

import teir_plan as tp
from teir_plan.executor import entries as E
from teir_plan.executor import transposed_kernel as T
from teir_plan.executor.intrinsics import store_fence
from teir_plan.executor.lower import lower
from teir_plan.executor.microkernel import LINES, VECTOR_BYTES
from teir_plan.executor.transposed_kernel import gemm_vec_t
from teir_plan.tilekinds import table as K
from teir_plan.tilekinds.vec import vec_axis
from teir_plan.tilekinds.vec_t import scratch_elements, vec_t_axis
from tests.gemm_programs import assert_program_matches, gemm_program, kernel_cases, line_aligned
from tests.strategies import counted, fuzz_settings


@njit(cache=True)
def _run_and_fence(V, vo, vk, S, so, sk, sn, C, co, cv, mv, n, k, first, stream, relu,
                   buf):  # type: ignore[no-untyped-def]
    """The kernel as the executor calls it: non-temporal stores are fenced after the
    tile (the chunk's end), before anyone reads the result."""
    gemm_vec_t(V, vo, vk, S, so, sk, sn, C, co, cv, mv, n, k, first, stream, relu, buf)
    store_fence()


@fuzz_settings(default=150, fuzz=20_000)
@given(data=st.data())
@counted
def test_the_kernel_computes_its_tile_and_nothing_else(data: st.DataObject) -> None:
    dtype = data.draw(st.sampled_from([np.float32, np.float64]), label="dtype")
    lanes = 64 // np.dtype(dtype).itemsize
    mv = data.draw(st.integers(1, 70), label="vector length")
    n = data.draw(st.integers(1, 53), label="rows")
    k = data.draw(st.integers(0, 30), label="K")
    first = data.draw(st.booleans(), label="first")
    stream = data.draw(st.booleans(), label="stream")
    relu = data.draw(st.booleans(), label="relu")
    # S's rows one element apart (the micro-tiles read them in place) or not (copied).
    s_unit = data.draw(st.booleans(), label="S rows unit stride")
    # out's stride along the vector axis: the rows' extent (one contiguous block, which
    # streams through the buffer) or more.
    cv = n + data.draw(st.sampled_from([0, 0, 1, 5]), label="C run padding")
    co = data.draw(st.integers(0, 2 * lanes), label="C offset")  # every offset in a line
    vo, so = (data.draw(st.integers(0, 7), label=f"{t} offset") for t in "VS")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16), label="seed"))
    vk = mv + data.draw(st.integers(0, 5), label="V row padding")
    V = rng.standard_normal(vo + max(k, 1) * vk + 3).astype(dtype)
    sk, sn = (n + 2, 1) if s_unit else (1, k + 2)
    S = rng.standard_normal(so + max(k, 1) * sk + n * sn + 3).astype(dtype)
    C = line_aligned(co + mv * cv + 7, dtype)
    C[:] = rng.standard_normal(C.size)
    before = C.copy()
    buf = np.full(scratch_elements(n, k, np.dtype(dtype).itemsize), np.nan, dtype)
    _run_and_fence(V, vo, vk, S, so, sk, sn, C, co, cv, mv, n, k, first, stream, relu, buf)

    vm = np.array([[V[vo + p * vk + v] for v in range(mv)] for p in range(k)],
                  np.float64).reshape(k, mv)
    sm = np.array([[S[so + p * sk + r * sn] for r in range(n)] for p in range(k)],
                  np.float64).reshape(k, n)
    idx = co + np.arange(mv)[:, None] * cv + np.arange(n)[None, :]
    expected = before.astype(np.float64)
    val = vm.T @ sm if first else expected[idx] + vm.T @ sm
    expected[idx] = np.maximum(val, 0.0) if relu else val
    tol = 1e-4 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(C, expected, rtol=tol, atol=tol * max(1, k))
    inside = np.zeros(C.size, bool)
    inside[idx.ravel()] = True
    np.testing.assert_array_equal(C[~inside], before[~inside])


def _program(dtype: str, m: int, n: int, k: int, ksplit: int, along: str,
             first: str = "zero", last: str = "none", parallel: bool = False
             ) -> tuple[tp.TEIR, list[np.ndarray], str]:
    """out = in0 . in1 as a TEIR program whose tile runs on the transposed kernel:
    ``along`` "m" (in0 unit-stride along m, out along n: out[m, n]) or "n" (in1 along
    n, out along m: out[n, m]); K split into an outer loop of ``ksplit``; with
    ``parallel`` the vector axis split into a parallel loop of 2."""
    # The broadcast operand has its unit stride along K, so that the plain vector kernel
    # (out and an operand unit-stride along one axis) cannot take the tile on any target.
    rng = np.random.default_rng(m + n + k)
    if along == "m":
        a = rng.standard_normal((k, m)).astype(dtype)  # in0[k, m]
        b = rng.standard_normal((n, k)).astype(dtype)  # in1[n, k]
        a_mk, b_kn, c_mn, expr, vec_dim = (1, m), (1, k), (n, 1), "km,nk->mn", 1
    else:
        a = rng.standard_normal((m, k)).astype(dtype)  # in0[m, k]
        b = rng.standard_normal((k, n)).astype(dtype)  # in1[k, n]
        a_mk, b_kn, c_mn, expr, vec_dim = (k, 1), (n, 1), (1, m), "mk,kn->nm", 2
    teir = gemm_program(dtype, m, n, k, ksplit, a_mk, b_kn, c_mn, first, last,
                        vec_dim if parallel else None)
    return teir, [a, b], expr


def test_programs_on_the_kernel_match_numpy() -> None:
    for dtype, along, ksplit, first, last, parallel in kernel_cases():
        m, n, k = (200, 20, 36) if along == "m" else (12, 180, 24)
        teir, (a, b), expr = _program(dtype, m, n, k, ksplit, along, first, last,
                                      parallel)
        teir.validate()
        low = lower(teir)
        assert low.kind.name == "vec_t" and low.tile[K.T_VEC_T] != 0
        assert low.tile[K.T_SWAP] == int(along == "n")
        assert_program_matches(teir, a, b, expr, first, last,
                               f"{dtype} {along} {ksplit} {first}")


def test_the_rule() -> None:
    # degc,gfab->abcdef's packed tiles: cde long and unit-stride in in0, f (20 rows)
    # unit-stride in out; and the same tile the other way round.
    assert vec_t_axis(9600, 20, 24, 1, (1, 9600), (20, 1), (20, 1), 4) == 1
    assert vec_t_axis(20, 9600, 24, 1, (1, 20), (9600, 1), (1, 20), 4) == 2
    # The vector kernel's own tiles are not asked (out unit-stride along the long axis),
    # and the rule says no to them.
    assert vec_axis(9600, 20, 24, 1, (1, 9600), (20, 1), (1, 9600), 4) == 1
    assert vec_t_axis(9600, 20, 24, 1, (1, 9600), (20, 1), (1, 9600), 4) == 0
    # Too short a vector axis, one row, too many rows, BRGEMM, rows x K too large,
    # out's stride along the vector axis 0, the S block too spread for L1: no.
    assert vec_t_axis(48, 20, 24, 1, (1, 48), (20, 1), (20, 1), 4) == 0
    assert vec_t_axis(9600, 1, 24, 1, (1, 9600), (1, 1), (1, 1), 4) == 0
    assert vec_t_axis(9600, 65, 24, 1, (1, 9600), (65, 1), (65, 1), 4) == 0
    assert vec_t_axis(9600, 20, 24, 2, (1, 9600), (20, 1), (20, 1), 4) == 0
    assert vec_t_axis(9600, 40, 384, 1, (1, 9600), (40, 1), (40, 1), 4) == 0
    assert vec_t_axis(9600, 20, 24, 1, (1, 9600), (20, 1), (0, 1), 4) == 0
    assert vec_t_axis(9600, 20, 24, 1, (1, 9600), (1, 4096), (20, 1), 4) == 0


def test_the_planner_uses_the_kernel_into_a_c_order_out() -> None:
    """degc,gfab->abcdef into C order (out's innermost f from the second operand, then
    e and d from the first) at a small size, written once and large enough to stream:
    the plan's tiles run on the transposed kernel with non-temporal stores, into the
    plan's own result and into numpy's own out= (16 bytes into a line); every
    alternative gives numpy's answer."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((24, 20, 24, 20)).astype(np.float32)  # d e g c
    b = rng.standard_normal((24, 20, 24, 20)).astype(np.float32)  # g f a b
    expr = "degc,gfab->abcdef"
    ref = np.einsum(expr, a.astype(np.float64), b.astype(np.float64), optimize=True)
    plan = tp.plan(expr, a, b, order="C")
    low = lower(plan.teir)
    assert low.kind.name in ("vec", "vec_t") and low.tile[K.T_STREAM] == 1
    if LINES * VECTOR_BYTES // 4 > 20:
        # f (20) is shorter than the plain vector kernel's micro-tile on this target
        # (AVX-512's 48 float32); with narrower vectors that kernel takes f itself.
        assert low.tile[K.T_VEC_T] != 0
        assert "transposed vector kernel" in str(plan.explain())
    np.testing.assert_allclose(plan(a, b), ref, rtol=1e-4, atol=1e-4)
    out = np.empty(ref.shape, np.float32)
    np.testing.assert_allclose(tp.einsum(expr, a, b, out=out), ref, rtol=1e-4, atol=1e-4)
    raw = line_aligned(ref.size + 4, np.float32)
    shifted = raw[4:].reshape(ref.shape)  # 16 bytes past a line boundary
    raw[:4] = 7.0
    np.testing.assert_allclose(tp.einsum(expr, a, b, out=shifted), ref, rtol=1e-4,
                               atol=1e-4)
    assert (raw[:4] == 7.0).all()
    relu = tp.einsum(expr, a, b, order="C", epilogue="relu")
    np.testing.assert_allclose(relu, np.maximum(ref, 0), rtol=1e-4, atol=1e-4)
    for alt in plan.alternatives[:4]:
        np.testing.assert_allclose(alt(a, b), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("expr", ["dega,gfbc->abcdef", "degb,gfac->abcdef",
                                  "degc,gfab->abcdef"])
def test_order_k_keeps_the_layout_the_vector_kernel_serves(expr: str) -> None:
    """At the TCCG sizes the result layout that follows the operands runs on the vector
    kernel at about 1.5x the transposed kernel's rate into C order (measured 291-297
    against 189-200 GFLOP/s on two cores): with order='K' the planner must not trade
    it for the C-order layout (planning only: shapes, nothing runs)."""
    ext = {"a": 24, "b": 20, "c": 20, "d": 24, "e": 20, "f": 20, "g": 24}
    shapes = [tuple(ext[ch] for ch in t) for t in expr.split("->")[0].split(",")]
    plan = tp.plan(expr, *shapes, dtype=np.float32)
    low = lower(plan.teir)
    assert low.kind.name == "vec" and low.tile[K.T_VEC_T] == 0
    if LINES * VECTOR_BYTES // 4 > 20:
        # f (20) is shorter than the vector kernel's micro-tile on this target (AVX-512's
        # 48 float32): C order would need the transposed kernel.  With narrower vectors
        # the vector kernel takes f itself, and C order may be the layout it serves.
        chosen = next(lay for lay in plan.info.result_layouts if lay[2])
        assert chosen[0] != "abcdef"
        c_order = tp.plan(expr, *shapes, dtype=np.float32, order="C")
        assert lower(c_order.teir).tile[K.T_VEC_T] != 0
        assert plan.predicted_seconds < c_order.predicted_seconds


_EARLIER: list[object] = []


def test_concurrent_first_plans_share_one_compiled_kernel() -> None:
    """Plans hold the kernel's address only: every thread must get the same one, the
    code kept alive by the module, however many ask at once."""
    # Plans lowered earlier in this process hold the previous compilation's address:
    # it stays alive here.
    key = (f"{T._entry.__module__}.{T._entry.__qualname__}", np.dtype(np.float64))
    _EARLIER.append(E._COMPILED.pop(key, None))
    for known in [k for k in E._ADDRESSES if k[0] is T._entry]:  # compiled again below
        del E._ADDRESSES[known]
    with ThreadPoolExecutor(4) as pool:
        addresses = set(pool.map(lambda _: T.entry_address(np.dtype(np.float64)), range(8)))
    assert len(addresses) == 1 and addresses.pop() == T.entry_address(np.float64)
