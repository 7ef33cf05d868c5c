"""The broadcast operand packed into rows x K blocks for the vector kernel
(teir_plan/planner/broadcast_pack.py): offered only where the machine's kernel is
measured well ahead of BLAS, planned and run correctly wherever it is offered.

The suite plans with the reference parameters (kernel and BLAS at the same rate: never
offered), so these tests set parameters with the kernel at twice BLAS' rate, as a host
whose BLAS lacks its vector ISA measures; every host runs them (the vector kernel is
compiled for the host's own ISA)."""

from __future__ import annotations

from dataclasses import replace

import numba
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import teir_plan as tp
from teir_plan.executor.lower import lower
from teir_plan.frontend.contraction import Layout, describe, with_dtype
from teir_plan.planner.broadcast_pack import (
    BROADCAST_PACK_MIN_ADVANTAGE,
    broadcast_pack_variants,
)
from teir_plan.planner.machine import machine_params, set_machine_params
from teir_plan.tiles import VEC_BYTES
from tests.strategies import assert_einsum_close, counted, fuzz_settings

MAX_THREADS = min(3, int(numba.config.NUMBA_NUM_THREADS))

pytestmark = pytest.mark.skipif(not VEC_BYTES, reason="no vector kernel on this host")


class _KernelAhead:
    """Plan with the vector kernel at twice BLAS' rate (and restore afterwards)."""

    def __enter__(self) -> None:
        self.saved = machine_params()
        self.threads = tp.get_num_threads()
        p = self.saved
        set_machine_params(replace(p, vec_flops_f32=2 * p.gemm_flops_f32,
                                   vec_flops_f64=2 * p.gemm_flops_f64))

    def __exit__(self, *exc: object) -> None:
        set_machine_params(self.saved)
        tp.set_num_threads(self.threads)


def _matmul(m: int, k: int, n: int, dtype: str = "float32"):  # type: ignore[no-untyped-def]
    return with_dtype(describe(Layout("ij", (m, k), (k, 1)), Layout("jk", (k, n), (n, 1)),
                               Layout("ik", (m, n), (n, 1))), np.dtype(dtype))


def test_offered_only_where_the_kernel_is_well_ahead_of_blas():
    p = machine_params()
    c = _matmul(512, 512, 512)
    even = replace(p, vec_flops_f32=p.gemm_flops_f32)
    assert broadcast_pack_variants(c, even, 2) == []
    near = replace(p, vec_flops_f32=0.99 * BROADCAST_PACK_MIN_ADVANTAGE * p.gemm_flops_f32)
    assert broadcast_pack_variants(c, near, 2) == []
    ahead = replace(p, vec_flops_f32=2 * p.gemm_flops_f32)
    (variant, pack), = broadcast_pack_variants(c, ahead, 2)
    # in0 (the broadcast operand of a tile along k) in blocks of 64 rows x 128 of K.
    assert pack.tensor == 0 and pack.names == ("i^", "j^", "i", "j")
    assert pack.shape == (8, 4, 64, 128)
    strides = {a.name: a.strides[0] for a in variant.axes}
    assert strides == {"i^": 32768, "j^": 8192, "i": 128, "j": 1, "k": 0}
    # A vector axis shorter than MIN_VECTOR_LENGTH: the copy would not pay.
    assert broadcast_pack_variants(_matmul(512, 512, 128), ahead, 2) == []
    # Complex products keep their own plans.
    assert broadcast_pack_variants(_matmul(512, 512, 512, "complex64"), ahead, 2) == []


def test_a_large_product_runs_on_the_kernel_over_packed_blocks():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((512, 384)).astype(np.float32)
    b = rng.standard_normal((384, 640)).astype(np.float32)
    with _KernelAhead():
        plan = tp.plan("ij,jk->ik", a, b)
        step = plan.steps[0]
        assert [p.names for p in step.chosen.packs] == [("i^", "j^", "i", "j")]
        assert lower(step.chosen.teir).kind.name == "vec"
        assert "pack in0 into a contiguous" in plan.explain().text(rich=False)
        assert_einsum_close(plan(a, b), "ij,jk->ik", [a, b], np.float32)
    with _KernelAhead():  # the same plan cached? no: new parameters, planned again
        tp.set_num_threads(1)
        assert_einsum_close(tp.einsum("ij,jk->ik", a, b), "ij,jk->ik", [a, b], np.float32)


_PRODUCTS = ["ij,jk->ik", "ji,jk->ik", "ij,kj->ik", "bij,bjk->bik", "jk,ij->ki",
             "ijx,jk->ixk", "ij,jk->ki"]


@fuzz_settings(default=12)
@given(expr=st.sampled_from(_PRODUCTS), m=st.integers(40, 200), k=st.integers(40, 300),
       n=st.integers(256, 520), dtype=st.sampled_from(["float32", "float64"]),
       threads=st.integers(1, MAX_THREADS), with_out=st.booleans(), relu=st.booleans(),
       seed=st.integers(0, 2**16))
@counted
def test_products_match_numpy(expr, m, k, n, dtype, threads, with_out, relu, seed):
    """Products whose vector axis is long enough for the variant, in several layouts, on
    every thread count, into out= or not, with ReLU or not, agree with numpy."""
    rng = np.random.default_rng(seed)
    ext = {"i": m, "j": k, "k": n, "b": 2, "x": 3}
    ins, out_term = expr.split("->")
    ops = [rng.standard_normal([ext[c] for c in t]).astype(dtype) for t in ins.split(",")]
    with _KernelAhead():
        tp.set_num_threads(threads)
        kw = {"epilogue": "relu"} if relu else {}
        if with_out:
            out = np.full([ext[c] for c in out_term], np.nan, dtype)
            res = tp.einsum(expr, *ops, out=out, **kw)
            assert res is out
        else:
            res = tp.einsum(expr, *ops, **kw)
        assert_einsum_close(res, expr, ops, np.dtype(dtype), relu=relu)


def test_a_chain_over_packed_blocks_allocates_what_its_plan_reports():
    """A matrix chain whose steps pack their broadcast operands: the tree plan's peak
    scratch memory (packs included) is what the executor borrows, and the result is
    numpy's."""
    from tests.test_trees import tracked_borrows

    rng = np.random.default_rng(2)
    ops = [rng.standard_normal(s).astype(np.float32)
           for s in ((320, 384), (384, 448), (448, 512), (512, 300))]
    expr = "ab,bc,cd,de->ae"
    with _KernelAhead():
        tp.plan_cache.clear()
        plan = tp.plan(expr, *ops, optimize=[(0, 1), (0, 1), (0, 1)])
        packs = [p for s in plan.steps if getattr(s, "chosen", None) for p in s.chosen.packs]
        assert packs, "no step packed its broadcast operand"
        with tracked_borrows() as seen:
            got = plan(*ops)
    assert seen["now"] == 0 and seen["peak"] == plan.peak_bytes
    # (numpy.einsum without a path would take minutes: the product in float64 instead;
    # float32 sums of at most 512 terms per step, three steps.)
    ref = np.linalg.multi_dot([o.astype(np.float64) for o in ops])
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-4 * np.abs(ref).max())
