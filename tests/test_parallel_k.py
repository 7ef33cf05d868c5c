"""Parallel K axes in TEIR programs (executor/partials.py): validation, JSON, etops'
refusal, execution into private partial blocks against numpy and the reference
interpreter, at every thread count from 1 to 4."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import numba
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import teir_plan as tp
from teir_plan.executor.lower import lower
from tests.reference import run_reference
from tests.strategies import (
    assert_einsum_close,
    counted,
    fuzz_settings,
    program_cases,
)

# Thread counts this process can run (numba's pool was sized at start-up); the test
# below runs the rest in a child with a larger pool.
execute_mod = importlib.import_module("teir_plan.executor.execute")
MAX_THREADS = min(4, int(numba.config.NUMBA_NUM_THREADS))
THREADS = list(range(1, MAX_THREADS + 1))


def gram_program(dtype: str, ko: int, ki: int, m: int, n: int, first: str = "zero",
                 last: str = "none", exec_ko: str = "parallel") -> tp.TEIR:
    """out[n][m] (+)= sum_k in0[k][m] * in1[k][n], K split as (ko: exec_ko, ki: prim):
    ``ki,kj->ji``'s Gram matrix, as the planner splits it."""
    return tp.TEIR.from_fields(
        data_type=dtype, prim_first=first, prim_main="gemm", prim_last=last,
        dim_types=["k", "m", "n", "k"], exec_types=[exec_ko, "prim", "prim", "prim"],
        dim_sizes=[ko, m, n, ki],
        strides=[[ki * m, 1, 0, m], [ki * n, 0, 1, n], [0, 1, m, 0]],
    )


def _with_threads(n: int):  # type: ignore[no-untyped-def]
    class _Ctx:
        def __enter__(self) -> None:
            self.saved = tp.get_num_threads()
            tp.set_num_threads(n)

        def __exit__(self, *exc: object) -> None:
            tp.set_num_threads(self.saved)

    return _Ctx()


# ---- validation, JSON, etops ---------------------------------------------------------

def test_parallel_k_validates_and_round_trips():
    prog = gram_program("float32", 4, 8, 3, 5)
    prog.validate()
    assert tp.TEIR.from_json(prog.to_json()) == prog
    assert json.loads(prog.to_json())["exec_types"][0] == "parallel"
    with pytest.raises(tp.TEIRError, match=r"exec_types\[0\]: etops has no parallel k"):
        prog.to_etops_json()
    # etops' own spelling of parallel, on a K axis, reads as a parallel K axis.
    data = json.loads(prog.with_exec_types(["seq", "prim", "prim", "prim"]).to_etops_json())
    data["exec_types"][0] = "shared"
    assert tp.TEIR.from_json(json.dumps(data)) == prog
    # A parallel K axis of one step is no split: etops may have it.
    one = gram_program("float32", 1, 8, 3, 5)
    assert tp.TEIR.from_json(one.to_etops_json()) == one


RACING = {
    # Two workers of a parallel M axis would write one output element.
    "parallel axis, output stride 0": (
        dict(dim_types=["m", "k", "n", "k"], exec_types=["parallel", "parallel", "prim", "prim"],
             dim_sizes=[3, 4, 2, 5], strides=[[20, 5, 0, 1], [0, 10, 5, 1], [0, 0, 1, 0]]),
        r"strides\[2\]\[0\]"),
    # Two parallel output axes landing on the same addresses.
    "parallel axes alias": (
        dict(dim_types=["m", "k", "n", "k"], exec_types=["parallel", "parallel", "prim", "prim"],
             dim_sizes=[3, 4, 2, 5], strides=[[20, 5, 0, 1], [0, 10, 5, 1], [1, 0, 1, 0]]),
        r"strides\[2\]"),
    # A K axis that moves the output is no K axis (the output takes no part in it).
    "parallel k moves the output": (
        dict(dim_types=["k", "m", "n", "k"], exec_types=["parallel", "prim", "prim", "prim"],
             dim_sizes=[4, 3, 2, 5], strides=[[15, 5, 0, 1], [10, 0, 5, 1], [6, 1, 3, 0]]),
        r"strides\[2\]\[0\]"),
}


@pytest.mark.parametrize("name", list(RACING))
def test_racing_programs_are_rejected(name):
    fields, match = RACING[name]
    prog = tp.TEIR.from_fields(data_type="float64", prim_first="zero", prim_main="gemm",
                               prim_last="none", **fields)
    with pytest.raises(tp.TEIRError, match=match):
        prog.validate()


# ---- execution -------------------------------------------------------------------------

@pytest.mark.parametrize("first", ["zero", "none"])
@pytest.mark.parametrize("last", ["none", "relu"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gram_program_every_thread_count(first, last, dtype):
    """Tiles of every kind the block program can run (BLAS, loops), Zero/None first,
    ReLU last, against numpy.einsum in float64, and the partial path actually taken."""
    rng = np.random.default_rng(5)
    for ko, ki, m, n in [(4, 64, 24, 20), (7, 3, 2, 3), (3, 100, 1, 33)]:
        prog = gram_program(dtype, ko, ki, m, n, first, last)
        assert lower(prog).partials is not None
        a = rng.standard_normal((ko * ki, m))
        b = rng.standard_normal((ko * ki, n))
        c0 = rng.standard_normal((n, m))
        want = np.einsum("km,kn->nm", a, b) + (0 if first == "zero" else c0)
        if last == "relu":
            want = np.maximum(want, 0)
        for threads in THREADS:
            out = c0.astype(dtype)
            with _with_threads(threads):
                tp.execute(prog, a.astype(dtype), b.astype(dtype), out)
            tol = 2e-4 * np.sqrt(ko * ki) if dtype == "float32" else 1e-11
            np.testing.assert_allclose(out, want, rtol=tol, atol=tol)


def test_partials_are_used_and_summed_once(monkeypatch):
    """With two threads the workers' blocks are summed (the partial path returns True);
    with one the serial program runs: both give numpy's result."""
    if MAX_THREADS < 2:
        pytest.skip("needs two threads")
    taken = []
    real = execute_mod._run_partials

    def spy(p, arrays):  # type: ignore[no-untyped-def]
        taken.append(real(p, arrays))
        return taken[-1]

    monkeypatch.setattr(execute_mod, "_run_partials", spy)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((512, 8)), rng.standard_normal((512, 6))
    prog = gram_program("float64", 8, 64, 8, 6)
    for threads, used in [(2, True), (1, False)]:
        out = np.full((6, 8), np.nan)
        with _with_threads(threads):
            tp.execute(prog, a, b, out)
        assert taken[-1] is used
        np.testing.assert_allclose(out, b.T @ a, rtol=1e-12, atol=1e-12)


def test_nan_and_inf_propagate_as_in_numpy():
    """An infinity in one worker's share stays infinite; infinities of both signs in
    different workers' shares give NaN, as they do in numpy; a NaN anywhere is NaN,
    and ReLU keeps it."""
    ko, ki, m, n = 4, 16, 3, 2
    a = np.ones((ko * ki, m))
    b = np.ones((ko * ki, n))
    a[0, 0] = np.inf
    a[-1, 1] = np.inf
    a[0, 1] = -np.inf  # column 1: +inf in the last share, -inf in the first
    a[5, 2] = np.nan
    want = np.einsum("km,kn->nm", a, b)
    for last in ("none", "relu"):
        prog = gram_program("float64", ko, ki, m, n, "zero", last)
        for threads in THREADS:
            out = np.zeros((n, m))
            with _with_threads(threads):
                tp.execute(prog, a, b, out)
            expect = np.maximum(want, 0) if last == "relu" else want
            np.testing.assert_array_equal(out, expect)


def test_bad_arrays_are_refused_before_anything_is_written():
    prog = gram_program("float64", 4, 8, 3, 5)
    out = np.full((5, 3), 7.0)
    with pytest.raises(tp.TEIRError, match="in0"):
        tp.execute(prog, np.ones((31, 3)), np.ones((32, 5)), out)
    with pytest.raises(tp.TEIRError, match="overlaps"):
        buf = np.ones(32 * 5)
        tp.execute(prog, np.ones((32, 3)), buf.reshape(32, 5), buf[:15].reshape(5, 3))
    assert (out == 7.0).all()


def test_strided_and_negative_output_strides():
    """An output written through a view with gaps and a reversed axis: the blocks are
    dense, the reduction walks the output's own strides."""
    rng = np.random.default_rng(2)
    ko, ki, m, n = 6, 10, 4, 5
    a = rng.standard_normal((ko * ki, m))
    b = rng.standard_normal((ko * ki, n))
    base = np.zeros((n, 3 * m))
    out = base[:, ::-3]  # strides (3m, -3) elements
    prog = tp.TEIR.from_fields(
        data_type="float64", prim_first="zero", prim_main="gemm", prim_last="none",
        dim_types=["n", "k", "m", "k"], exec_types=["seq", "parallel", "prim", "prim"],
        dim_sizes=[n, ko, m, ki],
        strides=[[0, ki * m, 1, m], [1, ki * n, 0, n], [3 * m, 0, -3, 0]])
    for threads in THREADS:
        base[...] = 5.0
        with _with_threads(threads):
            tp.execute(prog, a, b, out)
        np.testing.assert_allclose(out, b.T @ a, rtol=1e-12, atol=1e-12)
        untouched = np.ones_like(base, bool)
        untouched[:, ::-3] = False
        assert (base[untouched] == 5.0).all()


# ---- properties ------------------------------------------------------------------------

@fuzz_settings(default=60)
@given(case=program_cases(binary=True, parallel_k=True), threads=st.sampled_from(THREADS))
@counted
def test_random_parallel_k_programs_match_reference(case, threads):
    """Random programs of any roles, orders, primitives, sizes and stride signs, every K
    loop axis parallel, against the reference interpreter (every element of the output's
    memory: untouched ones must stay)."""
    teir = case.teir
    teir.validate()
    bases = [b.astype(teir.primitives.data_type.numpy).astype(np.float64) for b in case.bases]
    run_reference(teir, bases, case.origins)
    with _with_threads(threads):
        tp.execute(teir, *case.views)
    tol = 1e-4 if teir.primitives.data_type is tp.DataType.FLOAT32 else 1e-10
    np.testing.assert_allclose(case.typed[-1].astype(np.float64), bases[-1], rtol=tol, atol=tol)


# ---- the planner ------------------------------------------------------------------------

# Short outputs over a long summed range: Gram matrices, weight gradients, a transposed
# matrix-vector product and a column sum (the last two on the reduction kernels, whose
# summed axis is split across the threads the same way), and a K of two axes.
SHORT_OUTPUT = ["ki,kj->ij", "ki,kj->ji", "bi,bj->ij", "ik,jk->ij", "kij,kj->i", "ki,k->i",
                "ij->j"]


def _operands(subscripts: str, k: int, i: int, j: int, dtype: str,
              rng: np.random.Generator) -> list[np.ndarray]:
    extent = {"k": k, "b": k, "i": i, "j": j}
    if subscripts == "kij,kj->i":
        extent = {"k": k // 8 or 1, "i": i, "j": 8}
    ins = subscripts.split("->")[0].split(",")
    return [rng.standard_normal([extent[c] for c in term]).astype(dtype) for term in ins]


def test_the_planner_splits_k_for_a_short_output():
    """With two threads (the reference parameters' machine), a Gram matrix over many
    samples is planned with a parallel K loop, and its explanation shows the blocks."""
    if MAX_THREADS < 2:
        pytest.skip("needs two threads")
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((20000, 32)).astype(np.float32) for _ in range(2))
    with _with_threads(2):
        plan = tp.plan("ki,kj->ij", a, b)
        s = plan.teir.schedule
        par = [i for i, e in enumerate(s.exec_types) if e is tp.ExecType.PARALLEL]
        assert par and all(s.dim_types[i] is tp.DimType.K for i in par)
        assert "part[w]" in plan.explain().text(rich=False)
        assert_einsum_close(plan(a, b), "ki,kj->ij", [a, b], np.float32)
    with _with_threads(1):  # one thread: nothing to split
        s = tp.plan("ki,kj->ij", a, b).teir.schedule
        assert tp.ExecType.PARALLEL not in s.exec_types


def test_vector_k_blocks_only_over_contiguous_k_rows():
    """The longest vector-kernel K block is offered where the vector operand's K rows
    follow one another (rows x K within the kernel's bound), and not where they are
    padded apart; the Gram matrix it serves agrees with numpy."""
    from teir_plan.frontend.contraction import Layout, describe
    from teir_plan.tilekinds.vec_variants import vec_k_block

    def gram(rows: int, ld: int):  # type: ignore[no-untyped-def]
        return describe(Layout("ki", (60000, rows), (ld, 1)),
                        Layout("kj", (60000, rows), (ld, 1)),
                        Layout("ij", (rows, rows), (rows, 1)))

    k_of = lambda c: [a.name for a in c.axes].index("k")  # noqa: E731
    assert vec_k_block(gram(32, 32), k_of(gram(32, 32))) == 125  # at most 128 K steps
    assert vec_k_block(gram(64, 64), k_of(gram(64, 64))) == 125
    assert vec_k_block(gram(64, 80), k_of(gram(64, 80))) is None  # rows padded apart
    if MAX_THREADS < 2:
        return
    rng = np.random.default_rng(1)
    for rows in (32, 64):
        a, b = (rng.standard_normal((60000, rows)).astype(np.float32) for _ in range(2))
        with _with_threads(2):
            plan = tp.plan("ki,kj->ij", a, b)
            s = plan.teir.schedule
            # The workers share the K blocks; each tile takes one whole block.
            assert s.exec_types[0] is tp.ExecType.PARALLEL and s.dim_types[0] is tp.DimType.K
            assert s.dim_sizes[-1] == 125
            assert_einsum_close(plan(a, b), "ki,kj->ij", [a, b], np.float32)


@fuzz_settings(default=25)
@given(subscripts=st.sampled_from(SHORT_OUTPUT), k=st.integers(2000, 40000),
       i=st.integers(1, 40), j=st.integers(1, 40), dtype=st.sampled_from(["float32", "float64"]),
       threads=st.sampled_from(THREADS), with_out=st.booleans(), relu=st.booleans(),
       seed=st.integers(0, 2**16))
@counted
def test_short_outputs_match_numpy(subscripts, k, i, j, dtype, threads, with_out, relu, seed):
    """tp.einsum on short outputs with a long summed range, at every thread count, with
    and without out= and epilogue="relu", against numpy.einsum in float64."""
    rng = np.random.default_rng(seed)
    ops = _operands(subscripts, k, i, j, dtype, rng)
    kw: dict = {"epilogue": "relu"} if relu else {}
    with _with_threads(threads):
        if with_out:
            shape = np.einsum(subscripts, *ops).shape
            out = np.full(shape, np.nan, dtype)
            got = tp.einsum(subscripts, *ops, out=out, **kw)
            assert got is out
        else:
            got = tp.einsum(subscripts, *ops, **kw)
    assert_einsum_close(got, subscripts, ops, dtype, relu=relu)


def test_three_and_four_threads():
    """Thread counts beyond this process' pool: the tests above, in a child whose numba
    pool has four threads."""
    if MAX_THREADS >= 4:
        pytest.skip("this process runs four threads already")
    env = dict(os.environ, NUMBA_NUM_THREADS="4")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", __file__,
         "-k", "every_thread_count or nan_and_inf or random_parallel_k or strided or "
               "short_outputs"],
        env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.mark.parametrize("first,last", [("zero", "relu"), ("none", "none")])
def test_pseudocode_shows_the_blocks_and_their_sum(first, last):
    from teir_plan.render.pseudocode import pseudocode

    text = pseudocode(gram_program("float32", 4, 64, 24, 20, first, last), "oijk")
    lines = text.splitlines()
    assert "part[w] = 0" in lines
    assert any("C = part[w]" in ln for ln in lines)
    op = "=" if first == "zero" else "+="
    total = next(i for i, ln in enumerate(lines)
                 if ln.startswith(f"out {op} part[0] + part[1]"))
    assert ("out = max(out, 0)" in text) == (last == "relu")
    if last == "relu":  # the ReLU after the sum, never on a worker's block
        assert lines.index(next(ln for ln in lines if ln.startswith("out = max"))) > total
        assert "ReLU( C = part" not in text


# Short outputs over long K, as the planner's search sees them.
SEARCH_CASES = [("ki,kj->ij", "k=2000000,i=32,j=32"), ("ki,kj->ij", "k=100000,i=256,j=256"),
                ("bi,bj->ij", "b=1000000,i=64,j=64"), ("kij,kj->i", "k=300000,i=16,j=8"),
                ("ik,jk->ij", "k=65536,i=24,j=40")]


@pytest.mark.parametrize("threads", [2, 4])
@pytest.mark.parametrize("case", SEARCH_CASES, ids=[c[0] + " " + c[1] for c in SEARCH_CASES])
def test_parallel_k_search_is_exact_and_bounded(case, threads):
    """The parallel K schedules are costed at or above their prim choice's bound (the
    branch and bound's premise), the pruned search keeps what the exhaustive one keeps,
    and the best schedule of each case splits K."""
    from teir_plan.machine import MachineParams
    from teir_plan.planner.cost import estimate
    from teir_plan.planner.parallel_k import k_parallel_choices, partial_sums_seconds
    from teir_plan.planner.search import prim_options, rank, variants
    from tests.test_search import _contraction

    c = _contraction(case[0], case[1], 1)
    params = MachineParams()
    seen = 0
    for v, packs in variants(c, params, threads):
        pack_seconds = sum(p.seconds for p in packs)
        for opt in prim_options(v, params, threads)[:4]:
            for ch in k_parallel_choices(v, opt.prim, threads, opt.call):
                seen += 1
                assert partial_sums_seconds(v, ch, params, threads) > 0
                cost = estimate(v, ch, params, threads, opt.tile, pack_seconds=pack_seconds)
                assert cost.seconds >= (opt.bound + pack_seconds) * (1 - 1e-12), (opt.prim, ch)
    assert seen
    pruned = rank(c, params, threads, top=8)
    full = rank(c, params, threads, top=8, prune=False)
    assert [r.teir for r in pruned] == [r.teir for r in full]
    if case[0] == "kij,kj->i":
        # Its parallel K schedules fold k into row tiles that gather both operands
        # (strides 128 and 8): priced as gathers they lose to one long tile, and the
        # plan runs the reduction kernel (measured: 11 ms, against 137 ms for the row
        # schedule once ranked first at 10.6 ms predicted).
        return
    s = pruned[0].teir.schedule
    assert any(d is tp.DimType.K and e is tp.ExecType.PARALLEL
               for d, e in zip(s.dim_types, s.exec_types)), pruned[0].teir


def test_the_blocks_reach_is_proven():
    """checks.prove_partials accepts the split of a program and refuses a layout whose
    block program, or reduction, would reach outside a block or off the output's axes."""
    import dataclasses

    from teir_plan.executor.checks import prove_partials
    from teir_plan.teir.parallel_k import split

    prog = gram_program("float64", 4, 8, 3, 5)
    lay = split(prog)
    assert lay is not None
    prove_partials(prog, lay)
    wide = dataclasses.replace(lay, elements=lay.elements - 1)
    with pytest.raises(tp.TEIRError, match="outside a block"):
        prove_partials(prog, wide)
    (n0, so0, sb0), (n1, so1, sb1) = lay.rows
    off_axes = dataclasses.replace(lay, rows=((n0, so0 + 1, sb0), (n1, so1, sb1)))
    with pytest.raises(tp.TEIRError, match="own axes"):
        prove_partials(prog, off_axes)
    strided = dataclasses.replace(lay, rows=((n0, so0, 1), (n1, so1, n0)))
    with pytest.raises(tp.TEIRError, match="unit stride"):
        prove_partials(prog, strided)
    other_reads = dataclasses.replace(lay, block=gram_program("float64", 4, 8, 3, 6))
    with pytest.raises(tp.TEIRError, match="in1"):
        prove_partials(prog, other_reads)


def test_the_sum_is_deterministic_for_a_thread_count():
    """The blocks are added in worker order: the same program on the same arrays and
    threads gives the same bits every time."""
    rng = np.random.default_rng(9)
    a = rng.standard_normal((4096, 24)).astype(np.float32)
    b = rng.standard_normal((4096, 20)).astype(np.float32)
    prog = gram_program("float32", 16, 256, 24, 20)
    for threads in THREADS:
        with _with_threads(threads):
            runs = []
            for _ in range(3):
                out = np.empty((20, 24), np.float32)
                tp.execute(prog, a, b, out)
                runs.append(out)
        assert all(np.array_equal(runs[0], r) for r in runs[1:])
