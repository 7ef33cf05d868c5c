"""The executor against numpy (spec examples) and the reference interpreter (random
programs of any roles, orders, exec types, primitives, sizes and stride signs)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given

import teir_plan as tp
from tests import spec_examples
from tests.reference import run_reference
from tests.strategies import counted, fuzz_settings, program_cases


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("build", spec_examples.ALL, ids=lambda f: f.__name__)
def test_spec_examples_match_numpy(build, dtype):
    prog, expr, shapes, out_shape = build(dtype)
    prog.validate()
    rng = np.random.default_rng(1)
    ins = [rng.standard_normal(s) for s in shapes]
    out = np.full(out_shape, np.nan, dtype=dtype)
    if prog.primitives.prim_first is tp.Prim.NONE and not prog.is_unary:
        out[...] = 0  # the scalar examples accumulate into a zeroed output
    tp.execute(prog, *[x.astype(dtype) for x in ins], out)
    ref = np.einsum(expr, *ins)
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(out, ref, rtol=tol, atol=tol)


@fuzz_settings(default=80)
@given(program_cases())
@counted
def test_random_programs_match_reference(case):
    teir = case.teir
    teir.validate()
    bases = [b.astype(teir.primitives.data_type.numpy).astype(np.float64) for b in case.bases]
    run_reference(teir, bases, case.origins)
    tp.execute(teir, *case.views)
    dt = teir.primitives.data_type.numpy
    # Compare every element of the output's memory (untouched ones must be unchanged).
    tol = 1e-4 if dt == np.float32 else 1e-10
    np.testing.assert_allclose(case.typed[-1].astype(np.float64), bases[-1], rtol=tol, atol=tol)


def test_blas_and_fallback_paths_agree():
    """A GEMM tile with every operand orientation, and one BLAS cannot address."""
    rng = np.random.default_rng(3)
    m, n, k = 33, 29, 31
    for a_order in "CF":
        for b_order in "CF":
            for c_order in "CF":
                a = np.asarray(rng.standard_normal((m, k)), order=a_order)
                b = np.asarray(rng.standard_normal((k, n)), order=b_order)
                c = np.zeros((m, n), order=c_order)
                isz = 8
                prog = tp.TEIR.from_fields(
                    data_type="float64", prim_first="zero", prim_main="gemm", prim_last="none",
                    dim_types="mnk", exec_types=["prim"] * 3, dim_sizes=[m, n, k],
                    strides=[[a.strides[0] // isz, 0, a.strides[1] // isz],
                             [0, b.strides[1] // isz, b.strides[0] // isz],
                             [c.strides[0] // isz, c.strides[1] // isz, 0]],
                )
                tp.execute(prog, a, b, c)
                np.testing.assert_allclose(c, a @ b, rtol=1e-12, atol=1e-12)
    # Strided everywhere (step slices): packing path.
    a = rng.standard_normal((2 * m, 3 * k))[::2, ::3]
    b = rng.standard_normal((k, 2 * n))[:, ::2]
    c = np.zeros((m, 2 * n))[:, ::2]
    prog = tp.TEIR.from_fields(
        data_type="float64", prim_first="zero", prim_main="gemm", prim_last="relu",
        dim_types="mnk", exec_types=["prim"] * 3, dim_sizes=[m, n, k],
        strides=[[a.strides[0] // 8, 0, a.strides[1] // 8],
                 [0, b.strides[1] // 8, b.strides[0] // 8],
                 [c.strides[0] // 8, c.strides[1] // 8, 0]],
    )
    tp.execute(prog, a, b, c)
    np.testing.assert_allclose(c, np.maximum(a @ b, 0), rtol=1e-12, atol=1e-12)


def test_nothing_written_on_error():
    prog, _, shapes, out_shape = spec_examples.gemm_contraction("float32")
    ins = [np.ones(s, np.float32) for s in shapes]
    out = np.full(out_shape, 7.0, np.float32)
    with pytest.raises(tp.TEIRError, match="in1"):
        tp.execute(prog, ins[0], ins[1][:, :, :1], out)  # in1 too small
    with pytest.raises(tp.DTypeError, match="in0"):
        tp.execute(prog, ins[0].astype(np.float64), ins[1], out)
    assert (out == 7.0).all()


def test_output_overlapping_input_is_refused():
    prog, _, shapes, out_shape = spec_examples.tiled_permutation("float64")
    buf = np.zeros(np.prod(shapes[0]))
    a = buf.reshape(shapes[0])
    out = buf.reshape(out_shape)
    with pytest.raises(tp.TEIRError, match="overlaps"):
        tp.execute(prog, a, out)


def test_threads_setting():
    n = tp.get_num_threads()
    tp.set_num_threads(1)
    try:
        prog, expr, shapes, out_shape = spec_examples.brgemm_contraction("float64")
        ins = [np.random.default_rng(0).standard_normal(s) for s in shapes]
        out = np.empty(out_shape)
        tp.execute(prog, *ins, out)
        np.testing.assert_allclose(out, np.einsum(expr, *ins), atol=1e-12)
    finally:
        tp.set_num_threads(n)
    with pytest.raises(tp.PlanError):
        tp.set_num_threads(0)


def test_both_blas_libraries_give_numpys_answers():
    """GEMM tiles call numpy's ILP64 OpenBLAS when numpy bundles one, else scipy's LP64
    BLAS: both integer widths, every BLAS shape (transposes, swap, packing, BRGEMM)."""
    import subprocess
    import sys

    code = """
import numpy as np, teir_plan as tp
from teir_plan.executor.blas import blas_name
rng = np.random.default_rng(0)
cases = [("ij,jk->ik", (37, 29), (29, 41)), ("ji,jk->ki", (29, 37), (29, 41)),
         ("bij,bjk->ik", (3, 37, 29), (3, 29, 41)), ("iaj,kj->aki", (20, 3, 30), (25, 30)),
         ("trus,pqtu->pqrs", (4, 6, 12, 12), (4, 12, 4, 12))]
for dt in (np.float32, np.float64):
    for sub, sa, sb in cases:
        a, b = rng.standard_normal(sa).astype(dt), rng.standard_normal(sb).astype(dt)
        for alt in tp.plan(sub, a, b).alternatives:
            got = alt(a, b)
            ref = np.einsum(sub, a.astype(float), b.astype(float))
            assert np.allclose(got, ref, rtol=1e-4, atol=1e-4), (sub, dt)
print(blas_name())
"""
    for choice, expect in (("scipy", "scipy"), ("", "")):
        env = {**os.environ, "TEIR_PLAN_BLAS": choice}
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=600, env=env)
        assert r.returncode == 0, r.stderr[-2000:]
        assert expect in r.stdout


@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("flip", [False, True])
@pytest.mark.parametrize("shape", [(517, 300), (300, 517), (1, 700), (700, 1), (9, 8)])
def test_copy_tiles_of_every_kind_match_numpy(shape, flip, relu):
    """Copy/ReLU tiles: contiguous, gathered in blocks (a transpose longer than the
    kernel's block), one-axis tiles written either way, negative input strides."""
    rng = np.random.default_rng(5)
    base = rng.standard_normal(shape).astype(np.float32)
    x = base[::-1, ::-1] if flip else base
    for out_order in "CF":
        out = np.full(shape, np.nan, np.float32, order=out_order)
        isz = 4
        prog = tp.TEIR.from_fields(
            data_type="float32", prim_first="none", prim_main="relu" if relu else "copy",
            prim_last="none", dim_types=["c", "c"], exec_types=["prim", "prim"],
            dim_sizes=list(shape),
            strides=[[s // isz for s in x.strides], [s // isz for s in out.strides]],
        )
        tp.execute(prog, x, out)
        np.testing.assert_array_equal(out, np.maximum(x, 0) if relu else x)


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
def test_execute_runs_ndarray_subclasses_through_their_plain_views() -> None:
    """numpy.matrix stays 2-D when reshaped: execute reads and writes it as an ndarray."""
    a = np.asmatrix(np.arange(6, dtype=np.float32).reshape(2, 3))
    out = np.asmatrix(np.full((3, 2), -1, np.float32))
    prog = tp.TEIR(tp.Primitives("float32", "none", "copy", "none"),
                   tp.Schedule(["c", "c"], ["prim", "prim"], [2, 3], [[3, 1], [1, 2]]))
    tp.execute(prog, a, out)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(a).T)


def test_a_fused_axis_over_a_gapped_view_is_proven_by_its_parts() -> None:
    """The proof of reach takes an axis that walks none of a gapped view's dims
    uniformly as an outer and an inner axis: offsets 0, 2, 4, 6 of a view with element
    strides (8, -4, 2) are elements (the diagonal of the first two dims, then the
    third), 0, 3, 6, 9 are not.  ('b b a' on such a view: every alternative plan runs.)"""
    base = np.random.default_rng(4).standard_normal((2, 2, 4)).astype(np.float32)
    x = base[:, ::-1, ::2]
    assert [s // 4 for s in x.strides] == [8, -4, 2]

    def copy(stride: int) -> tp.TEIR:
        return tp.TEIR(tp.Primitives("float32", "none", "copy", "none"),
                       tp.Schedule(["c", "c"], ["prim", "prim"], [4, 1], [[stride, 0], [1, 0]]))

    out = np.full((4, 1), -1, np.float32)
    tp.execute(copy(2), x, out)
    np.testing.assert_array_equal(out[:, 0], [x[0, 0, 0], x[0, 0, 1], x[1, 1, 0], x[1, 1, 1]])
    out[...] = -1
    with pytest.raises(tp.TEIRError, match="does not stay on elements"):
        tp.execute(copy(3), x, out)
    assert (out == -1).all()
    plan = tp.plan("b b a", x)
    ref = np.einsum("bba", x.astype(np.float64))
    for alt in plan.alternatives:
        np.testing.assert_allclose(alt(x), ref, atol=1e-6)


@pytest.mark.parametrize("m, n", [(200, 136), (136, 200)], ids=["split along M", "along N"])
@pytest.mark.parametrize("layout", ["C", "F", "strided"])
@pytest.mark.parametrize("first, last", [("zero", "none"), ("none", "relu")])
@pytest.mark.parametrize("threads", [1, 2])
def test_large_blas_tiles_split_across_workers(m, n, layout, first, last, threads):
    """A program with no parallel loop and a BLAS tile of millions of flops runs the tile
    in parts on all workers (executor.walker.run_split), each part under the program's
    sequential K loop: every orientation BLAS is called in (plain, transposed, C^T =
    B^T A^T), operands it must pack and an output it cannot address, Zero first or
    accumulation, ReLU last."""
    from teir_plan.executor.lower import lower

    rng = np.random.default_rng(7)
    kl, k = 3, 144
    if layout == "strided":  # every other element: BLAS cannot address any operand
        a = rng.standard_normal((kl, 2 * m, 2 * k))[:, ::2, ::2]
        b = rng.standard_normal((kl, 2 * k, 2 * n))[:, ::2, ::2]
        c = rng.standard_normal((2 * m, 2 * n))[::2, ::2]
    else:
        a = np.asarray(rng.standard_normal((kl, m, k)), order=layout)
        b = np.asarray(rng.standard_normal((kl, k, n)), order=layout)
        c = np.asarray(rng.standard_normal((m, n)), order=layout)
    c0 = c.copy()

    def st(x: np.ndarray) -> list[int]:
        return [s // 8 for s in x.strides]

    sa, sb, sc = st(a), st(b), st(c)
    prog = tp.TEIR.from_fields(
        data_type="float64", prim_first=first, prim_main="gemm", prim_last=last,
        dim_types="kmnk", exec_types=["seq", "prim", "prim", "prim"], dim_sizes=[kl, m, n, k],
        strides=[[sa[0], sa[1], 0, sa[2]], [sb[0], 0, sb[2], sb[1]], [0, sc[0], sc[1], 0]],
    )
    assert lower(prog).kind.name == "blas"
    want = np.einsum("lik,lkj->ij", a, b) + (c0 if first == "none" else 0)
    if last == "relu":
        want = np.maximum(want, 0)
    saved = tp.get_num_threads()
    tp.set_num_threads(threads)
    try:
        tp.execute(prog, a, b, c)
    finally:
        tp.set_num_threads(saved)
    np.testing.assert_allclose(c, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("exec_types", [("parallel", "seq", "seq"), ("seq", "seq", "seq"),
                                        ("parallel", "parallel", "seq")])
@pytest.mark.parametrize("out_unit", ["n", "m"])
@pytest.mark.parametrize("first", ["zero", "none"])
@pytest.mark.parametrize("threads", [1, 2])
def test_plain_blas_tiles_match_the_reference(exec_types, out_unit, first, threads):
    """Programs whose tiles are each one BLAS call on the operands in place, visited once
    (walker.run_blas_tiles): loops of every kind around them, nested sequential loops that
    wrap, BLAS called as C = A B and as C^T = B^T A^T, the output written over or added
    to; every element of the output's memory against the reference interpreter."""
    from teir_plan.executor.lower import lower

    rng = np.random.default_rng(11)
    # K under a float64 line: with out along M and in0 along K, a longer K would give the
    # tiles to the vector kernel on a per-tile transposed in0 (lower.vec_p_axis).
    nc, mo, no, m, n, k = 3, 2, 3, 16, 12, 6
    mm, nn = mo * m, no * n
    # in0 (c, M, k), in1 (c, k, N), out (c, M, N) or (c, N, M): element strides.
    a_st = {"c": mm * k, "mo": m * k, "m": k, "k": 1}
    b_st = {"c": k * nn, "no": n, "n": 1, "k": nn}
    if out_unit == "n":
        c_st = {"c": mm * nn, "mo": m * nn, "m": nn, "no": n, "n": 1}
    else:
        c_st = {"c": mm * nn, "no": n * mm, "n": mm, "mo": m, "m": 1}
    dims = ["c", "mo", "no", "m", "n", "k"]
    roles = {"c": "c", "mo": "m", "no": "n", "m": "m", "n": "n", "k": "k"}
    sizes = {"c": nc, "mo": mo, "no": no, "m": m, "n": n, "k": k}
    prog = tp.TEIR.from_fields(
        data_type="float64", prim_first=first, prim_main="gemm", prim_last="none",
        dim_types=[roles[d] for d in dims], exec_types=[*exec_types, "prim", "prim", "prim"],
        dim_sizes=[sizes[d] for d in dims],
        strides=[[st.get(d, 0) for d in dims] for st in (a_st, b_st, c_st)],
    )
    low = lower(prog)
    assert low.plain_blas  # the path under test (walker.run_blas_tiles)
    bufs = [rng.standard_normal(nc * mm * k), rng.standard_normal(nc * k * nn),
            rng.standard_normal(nc * mm * nn)]
    want = [b.copy() for b in bufs]
    run_reference(prog, want, [0, 0, 0])
    saved = tp.get_num_threads()
    tp.set_num_threads(threads)
    try:
        tp.execute(prog, *bufs)
    finally:
        tp.set_num_threads(saved)
    np.testing.assert_allclose(bufs[2], want[2], rtol=1e-12, atol=1e-12)
