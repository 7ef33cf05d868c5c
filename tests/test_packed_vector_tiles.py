"""Vector-kernel tiles whose vector operand has unit stride along K (executor
gemm_tiles.gemm_vec_packed): each tile transposes its operand's K x length block into the
worker's buffer, then runs the vector kernel on it.

Checked through TEIR programs whose tiles the executor gives this mode (along M with
A^T, along N with B^T; K split over a loop so that later visits accumulate, ReLU last,
an output accumulated into, a parallel loop, partial last lines, float32 and float64),
against numpy.einsum in float64; the rule's edges; and through the planner, where an
attention-style product (bhqd,bhkd->bhqk) now runs without packing its K operand first.
"""

from __future__ import annotations

import numpy as np
import pytest

import teir_plan as tp
from teir_plan.executor.lower import lower
from teir_plan.tilekinds import table as K
from teir_plan.tilekinds.vec import vec_axis
from teir_plan.tilekinds.vec_p import VEC_P_MIN_LINES, vec_p_axis
from teir_plan.tilekinds.vec_t import vec_t_axis
from tests.gemm_programs import assert_program_matches, gemm_program, kernel_cases


def _program(dtype: str, m: int, n: int, k: int, ksplit: int, along: str,
             first: str, last: str, parallel: bool
             ) -> tuple[tp.TEIR, list[np.ndarray], str]:
    """out = in0 . in1 with the vector operand stored K-innermost: ``along`` "m": in0
    is (m, k) row-major (unit stride along K), out (n, m); "n": in1 is (n, k), out
    (m, n).  The other operand is K-innermost too (its rows x K block contiguous)."""
    rng = np.random.default_rng(m * 7 + n * 3 + k)
    a = rng.standard_normal((m, k)).astype(dtype)  # in0[m, k]
    b = rng.standard_normal((n, k)).astype(dtype)  # in1[n, k]
    if along == "m":  # out[n, m]: unit stride along M
        strides, expr = ((k, 1), (1, k), (1, m)), "mk,nk->nm"
    else:  # out[m, n]: unit stride along N
        strides, expr = ((k, 1), (1, k), (n, 1)), "mk,nk->mn"
    row_dim = 2 if along == "m" else 1
    teir = gemm_program(dtype, m, n, k, ksplit, *strides, first, last,
                        row_dim if parallel else None)
    return teir, [a, b], expr


@pytest.mark.parametrize("length", [32, 64, 100, 128])
def test_packed_vector_tiles_match_numpy(length: int) -> None:
    # Every schedule of the kernel tests, both axes, both dtypes; vector axes of whole
    # lines (2, 4 and 8 float32 lines: 2-line strips, the 4-line strip, 3-line ones) and
    # one that ends in a partial line; 20 rows (a parallel loop halves them: 10, with row blocks
    # left over); K of 48 or 60 steps, split or not.
    ran = 0
    for dtype, along, ksplit, first, last, parallel in kernel_cases():
        lanes = 64 // np.dtype(dtype).itemsize
        if length < VEC_P_MIN_LINES * lanes:
            continue
        m, n = (length, 20) if along == "m" else (20, length)
        k = 60 if length == 100 else 48  # K (and its splits) ending inside a line too
        teir, (a, b), expr = _program(dtype, m, n, k, ksplit, along, first, last, parallel)
        teir.validate()
        low = lower(teir)
        tile = low.tile
        assert low.kind.name == "vec_p" and tile[K.T_VEC_P] >= length
        assert tile[K.T_VEC_T] == 0 and tile[K.T_SWAP] == int(along == "n")
        assert_program_matches(teir, a, b, expr, first, last,
                               f"{dtype} {along} {length} {ksplit} {first} {last} {parallel}")
        ran += 1
    assert ran == 16


def test_the_rule() -> None:
    # bhqd,bhkd->bhqk's tile: B (the keys) has unit stride along K, out along N.
    assert vec_p_axis(128, 128, 64, 1, (64, 1), (1, 64), (128, 1), 4) == 2
    # The same along M: A^T, out with unit stride along M.
    assert vec_p_axis(128, 128, 64, 1, (1, 64), (64, 1), (1, 128), 4) == 0  # A along M
    assert vec_p_axis(128, 128, 64, 1, (64, 1), (64, 1), (1, 128), 4) == 1
    # Operands the plain kernels take are theirs, not this one's.
    assert vec_axis(128, 128, 64, 1, (64, 1), (128, 1), (128, 1), 4) == 2
    assert vec_p_axis(128, 128, 64, 1, (64, 1), (128, 1), (128, 1), 4) == 0
    # Too short a vector axis (1 line; 2 are enough), K under a line, too few rows, rows
    # x K over 9216, a block over 64 KiB, BRGEMM, out without unit stride along the
    # vector axis.
    assert vec_p_axis(128, 16, 64, 1, (64, 1), (1, 64), (16, 1), 4) == 0
    assert vec_p_axis(128, 32, 64, 1, (64, 1), (1, 64), (32, 1), 4) == 2
    assert vec_p_axis(128, 128, 8, 1, (8, 1), (1, 8), (128, 1), 4) == 0
    assert vec_p_axis(2, 128, 64, 1, (64, 1), (1, 64), (128, 1), 4) == 0
    assert vec_p_axis(256, 128, 64, 1, (64, 1), (1, 64), (128, 1), 4) == 0
    assert vec_p_axis(64, 512, 64, 1, (64, 1), (1, 64), (512, 1), 4) == 0
    assert vec_p_axis(128, 128, 64, 2, (64, 1), (1, 64), (128, 1), 4) == 0
    assert vec_p_axis(128, 128, 64, 1, (64, 1), (1, 64), (256, 2), 4) == 0
    # The buffer's rows are whole lines: 100 float32 take 112.
    teir, _, _ = _program("float32", 8, 100, 16, 1, "n", "zero", "none", False)
    assert lower(teir).tile[K.T_VEC_P] == 112
    assert vec_t_axis(128, 128, 64, 1, (64, 1), (1, 64), (128, 1), 4) == 0


def test_attention_scores_run_without_packing_the_keys() -> None:
    # bhqd,bhkd->bhqk: the plan has no packing step (it had one: the keys transposed
    # whole, through memory), its tiles take the packed kernel, the explain report says
    # so, and the plan and every alternative give numpy's answer, on 1 and 2 threads.
    rng = np.random.default_rng(9)
    q = rng.standard_normal((2, 3, 128, 64)).astype(np.float32)
    k = rng.standard_normal((2, 3, 128, 64)).astype(np.float32)
    ref = np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), k.astype(np.float64))
    before = tp.get_num_threads()
    try:
        for threads in (1, 2):
            tp.set_num_threads(threads)
            plan = tp.plan("bhqd,bhkd->bhqk", q, k)
            assert len(plan.steps) == 1 and "pack" not in plan.steps[0].describe()
            assert lower(plan.teir).tile[K.T_VEC_P] > 0
            assert "transposes in1's" in str(plan.explain())
            for alt in (plan, *plan.alternatives):
                np.testing.assert_allclose(alt(q, k), ref, rtol=1e-4, atol=1e-4)
    finally:
        tp.set_num_threads(before)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_views_out_and_relu_through_packed_tiles(dtype: type) -> None:
    # Sliced and reversed operands (negative strides along the vector axis and the
    # rows), an out= array, and the ReLU epilogue: every plan here runs packed tiles, and
    # it and each alternative give numpy's answer.
    rng = np.random.default_rng(11)
    q = rng.standard_normal((3, 70, 72)).astype(dtype)
    k = rng.standard_normal((3, 80, 80)).astype(dtype)
    tol = 1e-4 if dtype == np.float32 else 1e-10
    for qv, kv in ((q[:, 1:65, 3:67], k[:, 5:69, 8:72]),
                   (q[:, ::-1, :][:, 2:66, 4:68], k[:, ::-1, :][:, 5:69, 8:72])):
        for expr in ("bqd,bkd->bqk", "bkd,bqd->bqk", "bqd,bkd->bkq"):
            ref = np.einsum(expr, qv.astype(np.float64), kv.astype(np.float64))
            plan = tp.plan(expr, qv, kv)
            assert any(lower(s.chosen.teir).tile[K.T_VEC_P] for s in plan.steps
                       if hasattr(s, "chosen")), expr
            for alt in (plan, *plan.alternatives):
                np.testing.assert_allclose(alt(qv, kv), ref, rtol=tol, atol=tol)
            out = np.full(ref.shape, 7.0, dtype)
            tp.einsum(expr, qv, kv, out=out)
            np.testing.assert_allclose(out, ref, rtol=tol, atol=tol)
            relu = tp.einsum(expr, qv, kv, epilogue="relu")
            np.testing.assert_allclose(relu, np.maximum(ref, 0), rtol=tol, atol=tol)


@pytest.mark.parametrize("rows_inner", [True, False])
def test_a_transposed_block_is_reused_only_by_tiles_that_read_it(threads: int,
                                                                 rows_inner: bool) -> None:
    # out[i, k] = sum_j a[i, j] b[k, j] in 32-row x 64-wide tiles: with the rows' loop
    # inside the blocks' loop, each worker's consecutive tiles read the same block of b
    # and keep its transpose; with it outside, every tile transposes another block; a
    # K loop around the tiles moves the block on each visit.  Every element of out
    # against numpy in float64 (a kept transpose of the wrong block would show).
    rng = np.random.default_rng(threads + 2 * rows_inner)
    m, n, k = 128, 256, 96
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((n, k)).astype(np.float32)
    ref = a.astype(np.float64) @ b.T.astype(np.float64)
    for ksplit in (1, 2):
        kt = k // ksplit
        loops = [("n", n // 64, [0, 64 * k, 64]), ("m", m // 32, [32 * k, 0, 32 * n])]
        if not rows_inner:
            loops.reverse()
        dims = [d for d, _, _ in loops] + ["k", "m", "n", "k"]
        execs = ["parallel", "seq", "seq", "prim", "prim", "prim"]
        sizes = [s for _, s, _ in loops] + [ksplit, 32, 64, kt]
        strides = [[st[t] for _, _, st in loops] + [[kt, kt, 0][t]] + [[k, 0, n][t]]
                   + [[0, k, 1][t]] + [[1, 1, 0][t]] for t in range(3)]
        teir = tp.TEIR.from_fields(data_type="float32", prim_first="zero", prim_main="gemm",
                                   prim_last="none", dim_types=dims, exec_types=execs,
                                   dim_sizes=sizes, strides=strides)
        assert lower(teir).tile[K.T_VEC_P] == 64
        out = np.full((m, n), 0.5, np.float32)
        tp.execute(teir, a, b, out)
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4, err_msg=f"K split {ksplit}")


def test_the_planner_splits_for_packed_tiles() -> None:
    # ij,kj->ik at 256^2: b's 256 x 256 block is over VEC_P_MAX_BYTES, so the planner
    # offers 64-wide blocks of 32-row tiles, the rows' loop inside (each transpose used
    # 8 times), and picks it; it and every alternative give numpy's answer.
    rng = np.random.default_rng(4)
    a = rng.standard_normal((256, 256)).astype(np.float32)
    b = rng.standard_normal((256, 256)).astype(np.float32)
    plan = tp.plan("ij,kj->ik", a, b)
    s = plan.teir.schedule
    assert lower(plan.teir).tile[K.T_VEC_P] == 64
    assert s.dim_sizes[s.prim_axes()[0]:] == (32, 64, 256)
    ref = a.astype(np.float64) @ b.T.astype(np.float64)
    for alt in (plan, *plan.alternatives):
        np.testing.assert_allclose(alt(a, b), ref, rtol=1e-4, atol=1e-3)


def test_a_long_k_is_offered_in_blocks_for_packed_tiles() -> None:
    # bi,oi->bo with 768 in-features: the weight's K x length block fits only in K
    # blocks (of 128 here, packed_split_variants); among the candidates are packed tiles
    # in K blocks, accumulated in out; the plan and every alternative give numpy's
    # answer.
    rng = np.random.default_rng(6)
    x = rng.standard_normal((64, 768)).astype(np.float32)
    w = rng.standard_normal((768, 768)).astype(np.float32)
    plan = tp.plan("bi,oi->bo", x, w)
    blocked = [alt for alt in plan.alternatives
               if lower(alt.teir).tile[K.T_VEC_P]
               and alt.teir.schedule.dim_sizes[-1] < 768]
    assert blocked, "no packed candidate in K blocks"
    ref = x.astype(np.float64) @ w.T.astype(np.float64)
    for alt in (plan, *plan.alternatives):
        np.testing.assert_allclose(alt(x, w), ref, rtol=1e-4, atol=1e-3)
