"""Parallel programs under numba's threading layers' limits (executor/threads.py).

Each test runs a child Python process, because numba picks its threading layer once per
process and the failures are the process's: under the workqueue layer two threads
starting parallel regions together terminate it, and a child forked after GNU OpenMP
started is terminated when it starts one (a ``multiprocessing`` pool then waits for
ever).  The workload covers the three parallel kernels: a contraction with parallel
loops, a permutation through the block copy and a blocked write-back; each is checked
to take its parallel route in the parent, and every result against numpy.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numba
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 600  # seconds: a hang is a failure, not a stuck test run

Check = Callable[[], None]


def _workload() -> list[tuple[str, Check]]:
    """(name, run-and-check) for each parallel kernel; asserts that each plan runs in
    parallel when two threads are set."""
    import teir_plan as tp
    from teir_plan.executor import lower as lowering
    from tests.test_block_copy import _every_output_streams
    from tests.test_blocked import _blocked_plans

    rng = np.random.default_rng(3)
    checks: list[tuple[str, Check]] = []

    a = rng.standard_normal((256, 192)).astype(np.float32)
    b = rng.standard_normal((192, 320)).astype(np.float32)
    # The best-ranked candidate with a parallel loop (the plan itself may be one BLAS
    # tile that the executor splits).
    gemm = next(alt for alt in tp.plan("ij,jk->ik", a, b).alternatives
                if lowering.lower(alt.teir).has_parallel)
    low = lowering.lower(gemm.teir)
    assert low.has_parallel and low.parallel_iterations >= 2
    ref = a.astype(np.float64) @ b

    def run_gemm() -> None:
        np.testing.assert_allclose(gemm(a, b), ref, rtol=1e-4, atol=1e-3)

    checks.append(("parallel loops", run_gemm))

    shape, strides = (4, 20, 20, 6, 20, 20), (48000, 1, 2400, 400, 192000, 20)
    base = rng.standard_normal(4 * 20 * 20 * 6 * 20 * 20).astype(np.float32)
    x = np.lib.stride_tricks.as_strided(base, shape, [s * 4 for s in strides])
    with _every_output_streams():
        perm = tp.plan("abcdef->abcdef", x, out=np.empty(shape, np.float32))
        low = lowering.lower(perm.teir)
        assert low.copy_runs is not None and low.parallel_iterations >= 2

    def run_copy() -> None:
        out = np.empty(shape, np.float32)
        perm(x, out=out)
        np.testing.assert_array_equal(out, x)

    checks.append(("block copy", run_copy))

    expr = "efbad,cf->abcde"
    ext = {"a": 8, "b": 6, "c": 5, "d": 12, "e": 16, "f": 6}
    ops = [rng.standard_normal([ext[c] for c in t]).astype(np.float32)
           for t in expr.split("->")[0].split(",")]
    out_shape = [ext[c] for c in "abcde"]
    blocked = _blocked_plans(expr, ops, np.empty(out_shape, np.float32), l2_bytes=16 << 10)
    assert blocked and blocked[0].main_step.blocking.blocks >= 2  # type: ignore[union-attr]
    ref_b = np.einsum(expr, *[o.astype(np.float64) for o in ops])

    def run_blocked() -> None:
        out = np.empty(out_shape, np.float32)
        blocked[0](*ops, out=out)
        np.testing.assert_allclose(out, ref_b, rtol=1e-4, atol=1e-4)

    checks.append(("blocked write-back", run_blocked))
    return checks


def _child(mode: str) -> None:
    """The child process: ``threads`` runs the workload from 4 threads at once,
    ``fork`` runs it, then in a pool of 2 forked processes."""
    import teir_plan as tp

    tp.set_num_threads(2)
    checks = _workload()
    for _, check in checks:  # compiles the parallel kernels; starts the threading layer
        check()
    if mode == "threads":
        import threading

        errors: list[BaseException] = []
        barrier = threading.Barrier(4)

        def work() -> None:
            barrier.wait()
            try:
                for _ in range(10):
                    for _, check in checks:
                        check()
            except BaseException as e:  # noqa: BLE001 - reported by the parent
                errors.append(e)

        workers = [threading.Thread(target=work) for _ in range(4)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert not errors, errors
    else:
        import multiprocessing

        tp.set_num_threads(1)  # the serial kernels, compiled once here for the children
        for _, check in checks:
            check()
        tp.set_num_threads(2)
        with multiprocessing.get_context("fork").Pool(2) as pool:
            names = pool.map_async(_run_in_forked_child, range(4)).get(timeout=120)
        assert names == [[n for n, _ in checks]] * 4, names
    print("layer", numba.threading_layer())


def _fork_while_locked() -> None:
    """The child process of the lock test: a thread holds every lock of the library
    (as a call in progress would) while the main thread forks; the forked process
    plans and runs new problems, a parallel one among them, and exits 0."""
    import threading

    import teir_plan as tp
    from teir_plan import api
    from teir_plan.executor import blas_control as blas
    from teir_plan.executor import threads as thr
    from teir_plan.machine import store as machine
    from teir_plan.schedule import workspace as ws

    tp.set_num_threads(2)
    checks = _workload()
    for _, check in checks:
        check()
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with (api.plan_cache._lock, ws.workspace._lock, machine._lock, blas._lock,
              thr._launch_lock, thr._region_lock):
            held.set()
            release.wait()

    holder = threading.Thread(target=hold)
    holder.start()
    if not held.wait(60):  # the holder failed: say so rather than wait for ever
        raise SystemExit("the holder thread did not take the library's locks")
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            a = np.ones((600, 600), np.float32)  # a new plan; a 1.4 MB pooled result
            np.testing.assert_allclose(tp.einsum("ij,kj->ik", a, a), 600.0)
            for _, check in checks:
                check()
            code = 0
        finally:
            os._exit(code)
    release.set()
    holder.join()
    for _ in range(600):  # 60 s
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0, status
            print("forked child done")
            return
        time.sleep(0.1)
    os.kill(pid, 9)
    raise AssertionError("the forked child hung")


_forked_checks: list[tuple[str, Check]] = []


def _run_in_forked_child(_: int) -> list[str]:
    if not _forked_checks:
        _forked_checks.extend(_workload())
    for _, check in _forked_checks:
        check()
    return [n for n, _ in _forked_checks]


def _run_child(mode: str, layer: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, NUMBA_THREADING_LAYER=layer, NUMBA_NUM_THREADS="2")
    return subprocess.run([sys.executable, "-m", "tests.test_threading_layers", mode],
                          cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT)


def _layer_loads(layer: str) -> bool:
    probe = ("import numpy as np\nfrom numba import njit, prange\n"
             "@njit(parallel=True)\ndef f(x):\n    for i in prange(x.size):\n        x[i] = i\n"
             "f(np.zeros(4))\n")
    env = dict(os.environ, NUMBA_THREADING_LAYER=layer)
    return subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True,
                          timeout=TIMEOUT).returncode == 0


def _check_child(mode: str, layer: str, says: str) -> None:
    done = _run_child(mode, layer)
    assert done.returncode == 0, done.stdout + done.stderr
    assert says in done.stdout


TWO_THREADS = pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2,
                                 reason="needs 2 numba threads")
FORK = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")


@TWO_THREADS
def test_parallel_programs_from_many_threads_under_the_workqueue_layer() -> None:
    """numba's workqueue layer terminates a process whose threads start parallel regions
    together; the executor starts them one at a time there."""
    _check_child("threads", "workqueue", "layer workqueue")


@TWO_THREADS
@FORK
def test_parallel_programs_in_processes_forked_after_gnu_openmp() -> None:
    """A child forked after GNU OpenMP's threads started runs every program on its own
    thread instead of being terminated by numba (the pool would wait for ever)."""
    if not _layer_loads("omp"):
        pytest.skip("numba's OpenMP layer does not load here")
    _check_child("fork", "omp", "layer omp")


@TWO_THREADS
@FORK
def test_a_process_forked_while_another_thread_holds_the_librarys_locks() -> None:
    """Locks held by another thread at a fork stay held in the child unless made anew:
    the child's calls would wait for ever."""
    _check_child("locks", "workqueue", "forked child done")


if __name__ == "__main__":
    if sys.argv[1] == "locks":
        _fork_while_locked()
    else:
        _child(sys.argv[1])


_SPIN_PROBE = """
import os, numba, numpy as np, teir_plan as tp
from teir_plan.executor import threads
seen = []
real = threads.limit_openmp_spinning
def spy(environ=os.environ):
    done = real(environ)
    seen.append(("gomp loaded" if threads.openmp_loaded() else "gomp not loaded",
                 environ.get("GOMP_SPINCOUNT")))
    return done
threads.limit_openmp_spinning = spy
assert not threads.openmp_loaded(), "OpenMP loaded at import: the limit would come too late"
a = np.ones((256, 256), np.float32)
tp.einsum("ij,jk->ik", a, a)  # the first parallel region: numba loads its OpenMP runtime
tp.einsum("ij,jk->ik", a, a)
assert numba.threading_layer() != "omp" or threads.openmp_loaded()
print(seen, os.environ.get("GOMP_SPINCOUNT"))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
@pytest.mark.parametrize("preset, during, after", [
    ({}, "'10000'", "None"),
    ({"GOMP_SPINCOUNT": "500"}, "'500'", "500"),
    ({"OMP_WAIT_POLICY": "ACTIVE"}, "None", "None"),
])
def test_openmp_loads_with_the_spin_limit_unless_the_user_chose(
        preset: dict, during: str, after: str) -> None:
    """The limit is in the environment when the first parallel region loads numba's
    OpenMP runtime (checked once, before it is loaded), and gone after it; a user's own
    GOMP_SPINCOUNT or OMP_WAIT_POLICY is kept."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    r = subprocess.run([sys.executable, "-c", _SPIN_PROBE], env={**env, **preset},
                       capture_output=True, text=True, timeout=TIMEOUT, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    line = r.stdout.strip().splitlines()[-1]
    assert line == f"[('gomp not loaded', {during})] {after}"


def test_limit_openmp_spinning_in_a_given_environment() -> None:
    from teir_plan.executor.threads import OMP_SPIN_COUNT, limit_openmp_spinning

    env: dict[str, str] = {}
    assert limit_openmp_spinning(env) and env == {"GOMP_SPINCOUNT": str(OMP_SPIN_COUNT)}
    assert not limit_openmp_spinning(env)
    assert not limit_openmp_spinning({"OMP_WAIT_POLICY": "PASSIVE"})
