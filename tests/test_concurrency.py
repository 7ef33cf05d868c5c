"""Concurrency (GitHub issue 5): 8 threads, each making 200 tp.einsum calls on
different expressions and shapes; every result is right and the plan cache stays
consistent (at most maxsize entries; every call counted once as a hit or a miss)."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

import teir_plan as tp
from teir_plan.machine import machine_key, set_machine_params

THREADS = 8
CALLS = 200

EXPRESSIONS = [
    ("ij,jk->ik", "ab,bc"),
    ("ij->ji", "ab"),
    ("ij->i", "ab"),
    ("i,i->", "a,a"),
    ("bij,bjk->bik", "cab,cbd"),
    ("ij,jk,kl->il", "ab,bc,cd"),
    ("ii->i", "aa"),
    ("...ij,jk->...ik", "cab,bd"),
    ("ij,ij->ij", "ab,ab"),
    ("i,j->ij", "a,b"),
]


def _problems(count: int, seed: int) -> list[tuple[str, list[np.ndarray], np.ndarray]]:
    """``count`` small problems; extents from a per-thread seed, so threads share some
    plans (cache hits, including concurrent ones) and make others of their own."""
    rng = np.random.default_rng(seed)
    out = []
    for n in range(count):
        sub, dims = EXPRESSIONS[n % len(EXPRESSIONS)]
        ext = {c: int(rng.integers(1, 7)) for c in "abcd"}
        dtype = np.float32 if rng.integers(2) else np.float64
        ops = [rng.standard_normal([ext[c] for c in term]).astype(dtype)
               for term in dims.split(",")]
        if rng.integers(3) == 0:
            ops[0] = np.asfortranarray(ops[0])
        ref = np.einsum(sub, *[o.astype(np.float64) for o in ops])
        out.append((sub, ops, ref))
    return out


def test_threads_get_right_answers_and_a_consistent_cache():
    work = [_problems(CALLS, seed=t % 4) for t in range(THREADS)]  # pairs share problems
    tp.plan_cache.clear()
    before = tp.plan_cache.hits + tp.plan_cache.misses
    errors: list[str] = []
    sizes: list[int] = []
    barrier = threading.Barrier(THREADS)

    def run(t: int) -> None:
        barrier.wait()
        for i, (sub, ops, ref) in enumerate(work[t]):
            try:
                got = tp.einsum(sub, *ops)
                tol = 1e-4 if got.dtype == np.float32 else 1e-10
                if got.shape != ref.shape or not np.allclose(got, ref, rtol=tol, atol=tol):
                    errors.append(f"thread {t} call {i} {sub}: wrong result")
            except Exception as exc:  # reported below
                errors.append(f"thread {t} call {i} {sub}: {type(exc).__name__}: {exc}")
            if i % 20 == 0:
                sizes.append(len(tp.plan_cache))

    threads = [threading.Thread(target=run, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=300)
    assert not any(th.is_alive() for th in threads), "a thread hung"
    assert not errors, errors[:10]
    cache = tp.plan_cache
    assert tp.plan_cache.hits + tp.plan_cache.misses - before == THREADS * CALLS
    assert cache.hits > 0, "threads sharing problems hit the cache"
    assert 0 < len(cache) <= cache.maxsize
    assert max(sizes) <= cache.maxsize
    distinct = {
        (sub, tuple((o.shape, o.dtype.str, o.strides) for o in ops))
        for w in work for sub, ops, _ in w
    }
    assert len(cache) <= len(distinct)


def test_threads_sharing_one_plan():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((20, 30))
    b = rng.standard_normal((30, 10))
    p = tp.plan("ij,jk->ik", a, b)
    errors: list[str] = []

    def run(t: int) -> None:
        r = np.random.default_rng(t)
        for _ in range(CALLS):
            x = r.standard_normal((20, 30))
            if not np.allclose(p(x, b), x @ b, atol=1e-10):
                errors.append(f"thread {t}")

    threads = [threading.Thread(target=run, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=300)
    assert not errors


def test_blas_keeps_the_callers_thread_count() -> None:
    """The executor narrows BLAS to one thread inside parallel loops (and widens it for
    large serial tiles); the caller's numpy.matmul, on the same OpenBLAS, must find the
    count it had before, whatever ran in between."""
    import scipy.linalg.cython_blas  # noqa: F401  (the executor loads it: count it too)
    from threadpoolctl import threadpool_info, threadpool_limits

    def counts() -> list[int]:
        return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]

    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 48, 40), dtype=np.float32)
    b = rng.standard_normal((40, 48, 96), dtype=np.float32)
    before = counts()
    from teir_plan.calibration import quick_calibrate

    # The full calibration under the caller's count, the first-use measurement under a
    # limit of one (both set BLAS' threads for their timings; the full one twice took
    # a minute of the suite's ten).
    for limit, measure in ((None, lambda: tp.calibrate(save=False, check=False)),
                           (1, lambda: quick_calibrate(save=False))):
        with threadpool_limits(limits=limit, user_api="blas"):
            inside = counts()
            p = measure()  # (the calibration's check is tested apart)
            # (what explain names: the threads of the calls, not the measurement's one)
            assert p.machine == machine_key()
            tp.einsum("ij,jk->ik", a.reshape(-1, 40), b.reshape(40, -1))  # one BLAS call
            assert counts() == inside
            assert "parallel" in str(tp.plan("abk,kbc->abc", a, b).teir)
            tp.einsum("abk,kbc->abc", a, b)  # parallel loops: BLAS narrowed to 1 inside
            assert counts() == inside
    assert counts() == before
    set_machine_params(None)  # back to the cached calibration or the defaults


def test_new_machine_parameters_drop_the_cached_plans() -> None:
    # A plan cached under one cost model is not served once the parameters change
    # (tp.calibrate(), set_machine_params): the problem is planned again with the new ones.
    from dataclasses import replace

    a = np.ones((30, 40), np.float32)
    b = np.ones((40, 50), np.float32)
    first = tp.plan("ij,jk->ik", a, b)
    assert tp.plan("ij,jk->ik", a, b) is first  # cached
    try:
        set_machine_params(replace(tp.machine_params(), call_seconds=1e-3))
        again = tp.plan("ij,jk->ik", a, b)
        assert again is not first
        assert again.predicted_seconds > first.predicted_seconds  # the new model's cost
        assert tp.plan("ij,jk->ik", a, b) is again
    finally:
        set_machine_params(None)
    assert tp.plan("ij,jk->ik", a, b) is not again


def test_blas_narrowed_from_any_thread() -> None:
    """The BLAS library the executor calls is narrowed to one thread for an executor
    call made from any Python thread, not only from the first one that narrowed it
    (OpenBLAS' count is process-wide), and given back its count afterwards; another
    BLAS library in the process keeps its count throughout."""
    import scipy.linalg.cython_blas  # noqa: F401  (the executor loads it)
    from threadpoolctl import threadpool_info

    from teir_plan.blaslib import numpy_openblas, uses_numpy_openblas
    from teir_plan.executor.blas_control import blas_threads, scipy_blas_file

    called = numpy_openblas()._name if uses_numpy_openblas() else scipy_blas_file()  # type: ignore[union-attr]
    assert called is not None

    def counts() -> list[tuple[bool, int]]:  # (the executor's library, its count)
        return [(os.path.samefile(lib["filepath"], called), lib["num_threads"])
                for lib in threadpool_info() if lib["user_api"] == "blas"]

    before = counts()
    assert sum(mine for mine, _ in before) == 1
    narrowed = [(mine, 1 if mine else n) for mine, n in before]
    with blas_threads(1):  # the main thread first
        assert counts() == narrowed
    seen: list[list[tuple[bool, int]]] = []

    def run() -> None:
        with blas_threads(1):
            seen.append(counts())
        seen.append(counts())

    worker = threading.Thread(target=run)
    worker.start()
    worker.join(timeout=60)
    assert seen == [narrowed, before]
    assert counts() == before


def test_a_parallel_call_that_raises_gives_back_the_thread_count_and_the_lock() -> None:
    """parallel_threads around a kernel that raises: numba's thread count for the
    calling thread is what it was, the regions' lock is free (the threading layer not
    yet known threadsafe: the lock is taken), and the region's end is recorded."""
    import numba

    from teir_plan.executor import threads as thr

    limit: int = getattr(numba.config, "NUMBA_NUM_THREADS")  # noqa: B009
    before = numba.get_num_threads()
    want = 1 if before != 1 else limit
    saved_layer = thr._layer
    try:
        for _ in range(2):
            thr._layer = None  # as before the first region: regions take the lock
            with pytest.raises(ZeroDivisionError), thr.parallel_threads(want):
                assert numba.get_num_threads() == want
                assert thr._region_lock.locked()
                _ = 1 // 0
            assert numba.get_num_threads() == before
            assert not thr._region_lock.locked()
            assert thr._region_threads == want
            assert thr.idle_seconds() < 1.0
    finally:
        thr._layer = saved_layer
