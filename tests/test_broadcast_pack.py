"""The broadcast operand packed into rows x K blocks for the vector kernel
(teir_plan/tilekinds/broadcast_pack.py): offered only where the machine's kernel is
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
from hypothesis import assume, given
from hypothesis import strategies as st

import teir_plan as tp
from teir_plan.executor.lower import lower
from teir_plan.frontend.contraction import Contraction, Layout, describe, with_dtype
from teir_plan.machine import set_machine_params
from teir_plan.machine.params import MachineParams
from teir_plan.planner.pack import Pack
from teir_plan.planner.search import RESHAPES
from teir_plan.schedule.in_force import machine_params
from teir_plan.tilekinds.broadcast_pack import BROADCAST_PACK_MIN_ADVANTAGE
from teir_plan.tilekinds.broadcast_pack import broadcast_pack_variants as kind_variants
from teir_plan.tilekinds.kind import VariantArgs
from teir_plan.tiles import VEC_BYTES
from tests.strategies import assert_einsum_close, counted, fuzz_settings

MAX_THREADS = min(3, int(numba.config.NUMBA_NUM_THREADS))

pytestmark = pytest.mark.skipif(not VEC_BYTES, reason="no vector kernel on this host")


def broadcast_pack_variants(c: Contraction, params: MachineParams,
                            threads: int) -> list[tuple[Contraction, Pack]]:
    """The vec kind's packs of ``c``'s broadcast operand, with the planner's reshapes."""
    return kind_variants(VariantArgs(c, params, threads, RESHAPES))


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
    with _KernelAhead():
        tp.set_num_threads(1)
        assert _packs_blocks(tp.plan("ij,jk->ik", a, b))
        assert_einsum_close(tp.einsum("ij,jk->ik", a, b), "ij,jk->ik", [a, b], np.float32)


# Products with a vector axis (out and one input at unit stride along it) in every
# position, batch and extra axes; ``ij,kj->ik`` has none (its tiles transpose B instead).
_PRODUCTS = ["ij,jk->ik", "ji,jk->ik", "jk,ij->ik", "ij,jk->ki", "bij,bjk->bik",
             "ibj,bjk->bik", "ijx,jk->ixk", "iajb,jbk->iak"]
_LAYOUTS = ["c", "f", "reversed", "padded", "step2"]


def _laid_out(x: np.ndarray, kind: str) -> np.ndarray:
    """``x``'s values in another layout: Fortran order, every axis reversed (negative
    strides), rows padded, or every other element of a larger buffer."""
    if kind == "f":
        return np.asfortranarray(x)
    if kind == "reversed":
        flip = tuple(slice(None, None, -1) for _ in x.shape)
        return np.ascontiguousarray(x[flip])[flip]
    if kind in ("padded", "step2"):
        wide = x.shape[-1] + 5 if kind == "padded" else 2 * x.shape[-1]
        big = np.zeros((*x.shape[:-1], wide), x.dtype)
        view = big[..., 3:3 + x.shape[-1]] if kind == "padded" else big[..., ::2]
        view[...] = x
        return view
    return x


def _packs_blocks(plan: tp.Plan) -> bool:
    step = plan.main_step
    return step is not None and any(any(n.endswith("^") for n in p.names)
                                    for p in step.chosen.packs)


@fuzz_settings(default=10)
@given(expr=st.sampled_from(_PRODUCTS), m=st.integers(4, 8), k=st.integers(16, 24),
       n=st.integers(256, 520), dtype=st.sampled_from(["float32", "float64"]),
       layout=st.sampled_from(_LAYOUTS), vector_padded=st.booleans(),
       threads=st.integers(1, MAX_THREADS), relu=st.booleans(), seed=st.integers(0, 2**16))
@counted
def test_every_packed_alternative_matches_numpy(expr, m, k, n, dtype, layout,
                                                vector_padded, threads, relu, seed):
    """Every candidate of the main step that packs its broadcast operand into blocks
    (rows and K multiples of 16: extents with divisors in range; K from 256, so that
    the unpacked operand's rows are too far apart for the kernel and the packed
    candidates rank among the kept ones), over operands in several layouts, on every
    thread count, with ReLU or not, agrees with numpy.  The vector operand (the one
    indexed last by k) keeps unit stride along k, rows padded or not; the broadcast
    operand takes any layout."""
    rng = np.random.default_rng(seed)
    ext = {"i": 16 * m, "j": 16 * k, "k": n, "b": 2, "x": 3, "a": 2}
    terms = expr.split("->")[0].split(",")
    kinds = [("padded" if vector_padded else "c") if t.endswith("k") else layout
             for t in terms]
    ops = [_laid_out(rng.standard_normal([ext[c] for c in t]).astype(dtype), kind)
           for t, kind in zip(terms, kinds, strict=True)]
    with _KernelAhead():
        tp.set_num_threads(threads)
        plan = tp.plan(expr, *ops, epilogue="relu" if relu else None)
        packed = [a for a in plan.alternatives if _packs_blocks(a)]
        # float64 products of 64-128 rows with K = 272 or 384 can rank the transposed
        # kernel (in a staged layout) above every packed candidate; that packing is
        # offered and chosen is asserted by the tests above.
        assume(packed)
        for alt in packed:
            out = alt.empty_out()
            alt.run(ops, out)
            assert_einsum_close(out, expr, ops, np.dtype(dtype), relu=relu)


def test_into_out_views_and_a_long_vector_axis_in_parts():
    """An out= view with gaps and a vector axis long enough to be cut into parts: every
    packed candidate the plan keeps (the vector axis in parts among them) writes the
    view's elements and nothing else, and agrees with numpy."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((128, 256)).astype(np.float32)
    b = rng.standard_normal((256, 4096)).astype(np.float32)
    big = np.full((128, 4096 + 32), np.nan, np.float32)
    out = big[:, 16:16 + 4096]
    with _KernelAhead():
        variants = broadcast_pack_variants(
            _matmul(128, 256, 4096), machine_params(), 2)
        assert len(variants) == 2  # the vector axis whole, and in parts of 512
        plan = tp.plan("ij,jk->ik", a, b, out=out)
        assert tp.einsum("ij,jk->ik", a, b, out=out) is out
    assert_einsum_close(out, "ij,jk->ik", [a, b], np.float32)
    # (Whether packing is chosen depends on the vector width: with 32-byte vectors the
    # packed tiles run at 0.64 of the kernel's rate, and a K of 256 keeps BLAS.)
    packed = [p for p in (plan, *plan.alternatives) if _packs_blocks(p)]
    # Among them the vector axis in parts of 512 (8 of them: an axis of its own).
    assert any({8, 512} <= set(p.main_step.chosen.teir.schedule.dim_sizes) for p in packed)
    for p in packed:
        big[...] = np.nan
        p.run([a, b], out)
        assert_einsum_close(out, "ij,jk->ik", [a, b], np.float32)
        assert np.isnan(big[:, :16]).all() and np.isnan(big[:, 16 + 4096:]).all()


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


@pytest.mark.skipif(MAX_THREADS < 2, reason="needs two threads")
def test_a_short_batch_shares_the_vector_axis_out_to_the_threads():
    """A batch of one row block (``bi,ij->bj``, b = 64) is also offered with the vector
    axis in a part per thread (else only K could feed the threads); a batch of as many
    row blocks as threads is not.  The parts' candidates agree with numpy."""
    ahead = machine_params()
    ahead = replace(ahead, vec_flops_f32=2 * ahead.gemm_flops_f32)

    def vector_parts(m: int, threads: int) -> list[int]:
        return [a.extent for v, _ in broadcast_pack_variants(_matmul(m, 512, 512), ahead,
                                                             threads)
                for a in v.axes if a.name == "k^"]

    assert vector_parts(64, 2) == [2] and vector_parts(64, 1) == []
    assert vector_parts(128, 2) == []  # two row blocks of 64 for two threads
    rng = np.random.default_rng(5)
    a = rng.standard_normal((64, 512)).astype(np.float32)
    b = rng.standard_normal((512, 512)).astype(np.float32)
    with _KernelAhead():
        tp.set_num_threads(2)
        tp.plan_cache.clear()
        plan = tp.plan("ij,jk->ik", a, b)
        parts = [alt for alt in plan.alternatives if _packs_blocks(alt)
                 and "k^" in alt.main_step.chosen.names]
        assert parts, "no candidate runs the vector axis in parts"
        for alt in parts:
            out = alt.empty_out()
            alt.run([a, b], out)
            assert_einsum_close(out, "ij,jk->ik", [a, b], np.float32)
    tp.plan_cache.clear()
