"""Bad inputs, numerics, concurrency and memory: never a crash, a hang or a wrong answer."""

from __future__ import annotations

import subprocess
import sys
import threading

import numpy as np
import pytest

import teir_plan as tp

A = np.ones((3, 4), np.float32)
B = np.ones((4, 5), np.float32)

BAD_EXPRESSIONS = [
    ("ij,jk->i%k", (A, B), "invalid character"),
    ("ij,jk->->ik", (A, B), "'->'"),
    ("ij,jk->l", (A, B), "'l'"),
    ("ij,jk->ii", (A, B), "more than once"),
    ("ij,jk,kl->il", (A, B), "operand"),
    ("ij->i", (A, B), "operand"),
    ("i..j,jk->ik", (A, B), "'...'"),
    ("ijk,jk->ik", (A, B), "operand 0"),
    ("ij,jk->ik", (A, np.ones((5, 5), np.float32)), "index 'j'"),
    ("ii->i", (np.ones((3, 4)),), "index 'i'"),
]


@pytest.mark.parametrize("sub,ops,needle", BAD_EXPRESSIONS, ids=[b[0] for b in BAD_EXPRESSIONS])
def test_malformed_expressions(sub, ops, needle):
    with pytest.raises(tp.EinsumError, match=needle) as info:
        tp.einsum(sub, *ops)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("bad", [None, "abc", np.array([object(), object()])])
def test_non_array_operands(bad):
    with pytest.raises(tp.OperandTypeError, match="operand 1") as info:
        tp.einsum("i,i", np.ones(2), bad)
    assert isinstance(info.value, TypeError)


def test_out_errors_leave_out_untouched():
    out = np.full((3, 5), 7.0, np.float32)
    for bad_out, err in [
        (np.full((3, 6), 7.0, np.float32), tp.EinsumError),
        (np.full((3, 5), 7, np.int32), tp.DTypeError),
    ]:
        with pytest.raises(err):
            tp.einsum("ij,jk->ik", A, B, out=bad_out)
    ro = out.copy()
    ro.flags.writeable = False
    with pytest.raises(tp.PlanError, match="read-only"):
        tp.einsum("ij,jk->ik", A, B, out=ro)
    buf = np.ones(40, np.float32)
    a = buf[:12].reshape(3, 4)
    with pytest.raises(tp.PlanError, match="overlaps"):
        tp.einsum("ij,jk->ik", a, B, out=buf[5:20].reshape(3, 5))
    assert (out == 7.0).all()


def test_invalid_options():
    with pytest.raises(tp.PlanError, match="optimize"):
        tp.einsum("ij,jk->ik", A, B, optimize="fast")
    with pytest.raises(tp.PlanError, match="epilogue"):
        tp.einsum("ij,jk->ik", A, B, epilogue="gelu")


def _run_isolated(code: str) -> subprocess.CompletedProcess:
    """Run code that would crash the interpreter if a bounds check failed."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("strides", [[[1, 0, 1000], [0, 4, 1], [1, 3, 0]],
                                     [[1, 0, -5], [0, 4, 1], [1, 3, 0]],
                                     [[1, 0, 3], [0, 4, 1], [1, 2**61, 0]]])
def test_out_of_bounds_strides_are_refused(strides):
    code = f"""
import numpy as np, teir_plan as tp
prog = tp.TEIR.from_fields(data_type="float32", prim_first="zero", prim_main="gemm",
    prim_last="none", dim_types="mnk", exec_types=["prim"] * 3, dim_sizes=[3, 5, 4],
    strides={strides})
out = np.full(15, 7.0, np.float32)
try:
    tp.execute(prog, np.ones(12, np.float32), np.ones(20, np.float32), out)
except tp.TEIRError as exc:
    assert (out == 7.0).all()
    print("refused:", exc)
"""
    r = _run_isolated(code)
    assert r.returncode == 0, r.stderr
    assert "refused: strides[" in r.stdout


def test_sizes_that_overflow_are_refused():
    prog = tp.TEIR.from_fields(
        data_type="float32", prim_first="none", prim_main="copy", prim_last="none",
        dim_types="cc", exec_types=["seq", "seq"], dim_sizes=[2**40, 2**40],
        strides=[[2**40, 1], [1, 2**40]])
    with pytest.raises(tp.TEIRError):
        tp.execute(prog, np.ones(4, np.float32), np.ones(4, np.float32))


def test_nan_inf_and_relu_semantics():
    a = np.array([[np.nan, 1.0], [np.inf, -1.0]], np.float64)
    b = np.array([[1.0, 0.0], [0.0, 1.0]])
    np.testing.assert_array_equal(tp.einsum("ij,jk->ik", a, b), np.einsum("ij,jk->ik", a, b))
    x = np.array([[-0.0, np.nan, -2.0, 3.0]])
    one = np.ones((1, 1))
    got = tp.einsum("ij,ik->kj", x, one, epilogue="relu")[0]
    want = np.maximum(x[0], 0)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.array_equal(np.signbit(got), np.signbit(want))
    np.testing.assert_array_equal(got[~np.isnan(got)], want[~np.isnan(want)])


def test_float32_accuracy_matches_numpy():
    rng = np.random.default_rng(0)
    a = (rng.standard_normal((64, 4096)) * 1e3).astype(np.float32)
    b = rng.standard_normal((4096, 32)).astype(np.float32)
    a[:, ::2] += 1e4  # large cancelling terms: ill-conditioned sums
    b[::2] *= -1
    ref = a.astype(np.float64) @ b.astype(np.float64)
    err_tp = np.abs(tp.einsum("ij,jk->ik", a, b) - ref).max()
    err_np = np.abs(np.einsum("ij,jk->ik", a, b, optimize=True) - ref).max()
    assert err_tp <= 2 * err_np  # at least as accurate as numpy, with 2x slack for BLAS order


def test_concurrent_calls():
    exprs = [("ij,jk->ik", [(5, 6), (6, 7)]), ("ijk->kji", [(3, 4, 5)]),
             ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("i,i", [(9,), (9,)])]
    errors: list[str] = []

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for n in range(200):
            sub, shapes = exprs[(seed + n) % len(exprs)]
            grow = 1 + n % 3
            ops = [rng.standard_normal(tuple(d * grow for d in s)) for s in shapes]
            if not np.allclose(tp.einsum(sub, *ops), np.einsum(sub, *ops), atol=1e-10):
                errors.append(f"{sub} wrong in thread {seed}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not errors
    assert len(tp.plan_cache) <= tp.plan_cache.maxsize


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def test_plan_cache_bounds_memory():
    for n in range(1, 2 * tp.plan_cache.maxsize + 50):
        tp.einsum("i,i", np.ones(n), np.ones(n))
    assert len(tp.plan_cache) <= tp.plan_cache.maxsize
    before = _rss_bytes()
    for n in range(2000, 2000 + 3 * tp.plan_cache.maxsize):
        tp.einsum("i,i", np.ones(n % 97 + 1), np.ones(n % 97 + 1), dtype=np.float64)
        tp.einsum("i->", np.ones(n))
    assert _rss_bytes() - before < 200 * 2**20
    p = tp.plan("ij,jk->ik", (30, 40), (40, 20))
    a, b = np.ones((30, 40)), np.ones((40, 20))
    p(a, b)
    before = _rss_bytes()
    for _ in range(3000):
        p(a, b)
    assert _rss_bytes() - before < 20 * 2**20
