"""Small plans on one thread when the worker threads sleep, short plans on the cores
other threads leave free (schedule/idle.py): which plans get the rule, that a call after
the threads slept runs on one thread, a call that finds a core busy on the cores left,
and a call right after another on the plan's threads, with the same results as
numpy."""

from __future__ import annotations

import importlib
import os
import threading
import time
from dataclasses import replace

import numba
import numpy as np
import pytest

import teir_plan as tp
import teir_plan.schedule.plan as plan_module
from teir_plan.calibration import QuickMeasurements, params_from_quick
from teir_plan.calibration import cores as calibrate
from teir_plan.executor import threads
from teir_plan.machine import MachineParams, set_machine_params
from teir_plan.schedule.idle import BUSY_HORIZON_SECONDS, serial_when_idle
from teir_plan.schedule.in_force import machine_params

# (the package's ``execute`` is the function: the modules by name)
execute_module = importlib.import_module("teir_plan.executor.execute")
reduce_module = importlib.import_module("teir_plan.executor.reduce")

pytestmark = pytest.mark.skipif(int(numba.config.NUMBA_NUM_THREADS) < 2,
                                reason="needs two threads")


@pytest.fixture
def two_threads():  # type: ignore[no-untyped-def]
    n = tp.get_num_threads()
    tp.set_num_threads(2)
    tp.plan_cache.clear()
    yield
    tp.set_num_threads(n)
    tp.plan_cache.clear()


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The thread counts the executor's calls run with (TEIR programs and reductions)."""
    counts: list[int] = []
    lowered_threads = execute_module._threads
    reduce_threads = reduce_module.get_num_threads

    def spy_lowered() -> int:
        counts.append(lowered_threads())
        return counts[-1]

    def spy_reduce() -> int:
        counts.append(reduce_threads())
        return counts[-1]

    monkeypatch.setattr(execute_module, "_threads", spy_lowered)
    monkeypatch.setattr(reduce_module, "get_num_threads", spy_reduce)
    return counts


def _operands(shapes: list[tuple[int, ...]], seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s) for s in shapes]


def test_small_plans_get_the_rule_large_ones_do_not(two_threads: None) -> None:
    small = tp.plan("ij,jk->ik", (128, 128), (128, 128), dtype=np.float32)
    assert small.idle is not None and small.main_step.chosen.cost.threads == 2
    assert small.idle.serial_seconds < small.idle.parallel_seconds + small.idle.wake_seconds
    assert small.idle.wake_seconds == MachineParams.reference().wake_seconds
    assert "runs on the calling thread alone" in str(small.explain())
    assert small.idle.when_asleep and not small.idle.when_busy  # under BUSY_LEAST_SECONDS
    # Faster on its threads even after waking them, but short: the busy-cores rule alone.
    large = tp.plan("ij,jk->ik", (1024, 1024), (1024, 1024), dtype=np.float32)
    assert large.idle is not None and large.predicted_seconds < BUSY_HORIZON_SECONDS
    assert not large.idle.when_asleep and large.idle.when_busy
    text = str(large.explain())
    assert "asleep" not in text and "other threads leave free" in text
    # Longer than a spinner lasts: no rule.
    longest = tp.plan("ij,jk->ik", (4096, 4096), (4096, 1024), dtype=np.float32)
    assert longest.idle is None and longest.predicted_seconds > BUSY_HORIZON_SECONDS
    # Free wake-ups: the busy-cores rule alone, which a plan this short does not get;
    # one thread planned: no rule.
    params = machine_params()
    assert serial_when_idle(small.steps, replace(params, wake_seconds=0.0), 2) is None
    free_wake = serial_when_idle(large.steps, replace(params, wake_seconds=0.0), 2)
    assert free_wake is not None and not free_wake.when_asleep and free_wake.when_busy
    assert serial_when_idle(small.steps, params, 1) is None
    with threads.thread_count(1):
        assert tp.plan("ij,jk->ik", (128, 128), (128, 128), dtype=np.float32).idle is None


def test_a_reduction_gets_the_rule(two_threads: None) -> None:
    p = tp.plan("ij->j", (1000, 300), dtype=np.float32)
    assert p.idle is not None
    assert p.idle.serial_seconds > p.idle.parallel_seconds  # planned in parallel
    longer = tp.plan("ij->j", (30000, 300), dtype=np.float32).idle
    assert longer is not None and not longer.when_asleep and longer.when_busy


CASES = [
    ("ij,jk->ik", [(128, 128), (128, 128)], None),
    ("ij,jk->ik", [(128, 128), (128, 128)], "relu"),
    ("bij,bjk->bik", [(8, 48, 40), (8, 40, 56)], None),
    ("ij->j", [(1000, 300)], None),
    ("ki,k->i", [(12000, 24), (12000,)], None),
]


@pytest.mark.parametrize("expr,shapes,epilogue", CASES)
@pytest.mark.parametrize("asleep", [True, False], ids=["asleep", "awake"])
def test_asleep_runs_on_one_thread_awake_on_the_plans(
        two_threads: None, seen: list[int], monkeypatch: pytest.MonkeyPatch, expr: str,
        shapes: list[tuple[int, ...]], epilogue: str | None, asleep: bool) -> None:
    ops = [x.astype(np.float32) for x in _operands(shapes)]
    p = tp.plan(expr, *ops, epilogue=epilogue)
    assert p.idle is not None, f"{expr}: no rule for this small plan"
    monkeypatch.setattr(plan_module, "idle_seconds",
                        lambda: p.idle.spin_seconds * 2 if asleep else 0.0)  # type: ignore[union-attr]
    want = np.einsum(expr, *[x.astype(np.float64) for x in ops])
    if epilogue == "relu":
        want = np.maximum(want, 0)
    out = p.empty_out()
    out.fill(np.nan)
    for got in (p(*ops), p(*ops, out=out)):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())
    assert seen and set(seen) == ({1} if asleep else {2}), seen


def test_a_call_right_after_another_runs_on_the_threads(two_threads: None, seen: list[int],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The real clock: with a spin time of 10 s every call but the first follows the one
    before within it; with 0 s, none does."""
    monkeypatch.setattr(plan_module, "idle_seconds", threads.idle_seconds)
    a, b = (x.astype(np.float32) for x in _operands([(128, 128), (128, 128)]))
    p = tp.plan("ij,jk->ik", a, b)
    assert p.idle is not None
    p.idle = replace(p.idle, spin_seconds=10.0)
    p(a, b)
    seen.clear()
    p(a, b)
    p(a, b)
    assert seen == [2, 2]
    p.idle = replace(p.idle, spin_seconds=0.0)
    seen.clear()
    p(a, b)
    p(a, b)
    assert seen == [1, 1]


def test_alternatives_run_as_they_are_ranked(two_threads: None) -> None:
    """autotune and explain(measure=True) time each candidate on its own threads."""
    p = tp.plan("ij,jk->ik", (128, 128), (128, 128), dtype=np.float32)
    assert p.idle is not None
    assert all(alt.idle is None for alt in p.alternatives)


def test_idle_measurements(two_threads: None) -> None:
    ref = MachineParams.reference()
    assert calibrate.idle_measurements(1) == (ref.wake_seconds, ref.spin_seconds)
    wake, spin = calibrate.idle_measurements(2)
    assert 0.0 <= wake < 0.05
    assert spin in (*calibrate.IDLE_GAPS, calibrate.NEVER_SLEEPS, ref.spin_seconds)
    assert threads.idle_seconds() < 1.0  # the probe's regions were recorded
    quick = QuickMeasurements(1e11, 5e10, 2e10, 2e10, 2e-6, None, 64, 64,
                                        wake, spin)
    p = params_from_quick(quick)
    assert (p.wake_seconds, p.spin_seconds) == (wake, spin)


def test_the_plan_takes_the_parameters_wake_cost(two_threads: None) -> None:
    old = machine_params()
    try:
        set_machine_params(replace(old, wake_seconds=1.0))
        tp.plan_cache.clear()
        p = tp.plan("ij,jk->ik", (128, 128), (128, 128), dtype=np.float32)
        assert p.idle is not None and p.idle.wake_seconds == 1.0
    finally:
        set_machine_params(old)


@pytest.mark.parametrize("free,want", [(None, 2), (2, 2), (1, 1), (0, 1), (-1, 1)])
def test_busy_cores_run_on_the_cores_left(two_threads: None, seen: list[int],
                                          monkeypatch: pytest.MonkeyPatch,
                                          free: int | None, want: int) -> None:
    """A plan faster on its threads even after waking them, called after its threads
    went idle, runs on the cores other threads leave free; in a tight loop it does not
    ask, and a small plan never asks (after a pause it runs alone anyway)."""
    a, b = (x.astype(np.float32) for x in _operands([(384, 384), (384, 384)]))
    want_ab = a.astype(np.float64) @ b.astype(np.float64)
    p = tp.plan("ij,jk->ik", a, b)
    assert p.idle is not None and not p.idle.when_asleep
    asked: list[float] = []
    monkeypatch.setattr(plan_module, "free_cores", lambda spin: asked.append(spin) or free)
    for idle, threads_seen in ((1.0, want), (0.0, 2)):
        monkeypatch.setattr(plan_module, "idle_seconds", lambda idle=idle: idle)
        seen.clear()
        got = p(a, b)
        np.testing.assert_allclose(got, want_ab, rtol=2e-5, atol=2e-5 * np.abs(want_ab).max())
        assert set(seen) == {threads_seen}, (idle, seen)
    assert asked == [p.idle.spin_seconds]
    small = tp.plan("ij,jk->ik", a[:128, :128], b[:128, :128])
    assert small.idle is not None and small.idle.when_asleep
    asked.clear()
    for idle, threads_seen in ((1.0, 1), (0.0, 2)):
        monkeypatch.setattr(plan_module, "idle_seconds", lambda idle=idle: idle)
        seen.clear()
        small(a[:128, :128], b[:128, :128])
        assert set(seen) == {threads_seen} and asked == []


def test_free_cores_counts_the_kernels_runnable_tasks(monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The CPUs less the runnable tasks but the caller, and less the executor's own
    workers only while a region that ended within the spin time may keep them spinning;
    others count only when the reading before, within BUSY_CONFIRM_SECONDS, showed
    others too."""
    import os

    path = tmp_path / "loadavg"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        monkeypatch.setattr(threads, "_loadavg_fd", fd)
        monkeypatch.setattr(threads.os, "cpu_count", lambda: 4)
        monkeypatch.setattr(threads, "_region_threads", 3)
        pool_running = [0]  # numba's workers the kernel counts as runnable
        monkeypatch.setattr(threads, "_running_pool_threads", lambda: pool_running[0])
        monkeypatch.setattr(threads, "_pool_thread_ids", lambda: ())

        def free(running: int, region_age: float) -> int | None:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"0.52 0.58 0.59 {running}/467 1234\n".encode(), 0)
            monkeypatch.setattr(threads, "_region_end", threads.time.perf_counter()
                                - region_age)
            return threads.free_cores(0.5)

        assert free(1, 10.0) == 4  # the caller alone
        assert free(3, 10.0) is None  # two others, in this reading alone
        assert free(3, 10.0) == 2  # and in the one before
        assert free(4, 0.0) == 3  # of three others two are the region's spinning workers
        assert free(7, 10.0) == -2
        pool_running[0] = 2  # two of six others: workers spinning after the user's region
        assert free(7, 10.0) == 0
        pool_running[0] = 0
        assert free(1, 10.0) == 4 and free(2, 10.0) is None  # others once more: unconfirmed
        monkeypatch.setattr(threads, "_last_busy", threads.time.perf_counter()
                            - 2 * threads.BUSY_CONFIRM_SECONDS)
        assert free(2, 10.0) is None  # the reading before, too long ago
        os.ftruncate(fd, 0)
        os.pwrite(fd, b"garbage", 0)
        assert threads.free_cores(0.5) is None
        monkeypatch.setattr(threads, "_loadavg_fd", None)
        assert threads.free_cores(0.5) is None
    finally:
        os.close(fd)
    monkeypatch.setenv("TEIR_PLAN_CHECK_CORES", "0")  # (as tests/conftest.py sets it)
    assert threads._open_loadavg() is None
    monkeypatch.delenv("TEIR_PLAN_CHECK_CORES")
    fd = threads._open_loadavg()
    if os.path.exists("/proc/loadavg") and len(os.sched_getaffinity(0)) == os.cpu_count():
        assert fd is not None
        os.close(fd)


_USERS_REGION = """
import numba, numpy as np
from teir_plan.executor.threads import _pool_thread_ids, _running_pool_threads

@numba.njit(parallel=True)
def users_region(x):
    s = 0.0
    for i in numba.prange(x.shape[0]):
        s += x[i]
    return s

x = np.ones(1 << 16)
numba.set_num_threads(2)
users_region(x)
print(len(_pool_thread_ids()), numba.threading_layer())
seen = []
for _ in range(50):  # (a read the scheduler delays past the workers' spin sees none:
    # with the suite's three workers on two cores, all of five reads once did)
    users_region(x)
    seen.append(_running_pool_threads())
print(max(seen))
"""


def test_numbas_own_spinning_workers_are_not_others(two_threads: None) -> None:
    """The workers of a numba region the executor did not run (the user's own numba
    code) spin after it, and the kernel counts them as runnable: they are found by their
    ids, and count as the executor's own, not as other tasks (free_cores)."""
    import subprocess
    import sys

    from teir_plan.executor.threads import (
        _gettid_address,
        _pool_thread_ids,
        _running_pool_threads,
    )

    ids = _pool_thread_ids()
    if (_gettid_address() is None or not os.path.exists("/proc/self/task")
            or numba.config.NUMBA_NUM_THREADS < 2):
        assert _running_pool_threads() == 0
        return
    assert ids and threading.get_native_id() not in ids
    assert all(os.path.exists(f"/proc/self/task/{t}") for t in ids)
    time.sleep(0.2)  # the workers have gone to sleep
    assert _running_pool_threads() == 0
    # Spinning, in a process of its own: GNU OpenMP spins only 100 times where it
    # manages more threads than there are CPUs (here, the pools of other tests' threads).
    env = dict(os.environ, NUMBA_NUM_THREADS="2")
    got = subprocess.run([sys.executable, "-c", _USERS_REGION], capture_output=True,
                         text=True, env=env, timeout=300, check=True).stdout.split()
    assert int(got[0]) >= 1
    if got[1] == "omp":  # (GNU OpenMP's workers spin after a region; TBB's need not)
        assert int(got[2]) >= 1


def test_a_lost_idle_measurement_falls_back_to_the_reference(
        two_threads: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """No rise after any wait, or one after the shortest: the reference's values under
    teir_plan's own spin limit; under the user's spin policy the threads may never
    sleep, or sleep at once."""
    monkeypatch.setattr(calibrate, "region_seconds", lambda threads, x: 1e-5)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    ref = MachineParams.reference()
    assert calibrate.idle_measurements(2) == (ref.wake_seconds, ref.spin_seconds)
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert calibrate.idle_measurements(2) == (0.0, calibrate.NEVER_SLEEPS)
    # A rise after every wait, the shortest included: asleep at once.
    monkeypatch.setattr(calibrate, "IDLE_GAPS", (0.0, *calibrate.IDLE_GAPS[1:]))
    slow = iter([1e-5] * 51 + [1e-3] * 1000)
    monkeypatch.setattr(calibrate, "region_seconds", lambda threads, x: next(slow))
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    wake, spin = calibrate.idle_measurements(2)
    assert spin == 0.0 and wake > 0
    monkeypatch.delenv("OMP_WAIT_POLICY")
    slow = iter([1e-5] * 51 + [1e-3] * 1000)
    assert calibrate.idle_measurements(2) == (ref.wake_seconds, ref.spin_seconds)


def test_workers_are_kept_off_the_callers_cpu(two_threads: None,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """After a pause, a parallel region's workers may use every CPU the caller may use
    except the caller's own (keep_workers_off_caller), and follow the caller when it
    moves; with no CPU left for them, their affinity is not touched."""
    a = np.random.default_rng(0).random((192, 192))
    tp.einsum("ij,jk->ik", a, a)  # (numba's layer started: the first region runs as is)
    allowed = os.sched_getaffinity(0)
    ids = threads._pool_thread_ids()
    if (threads._getcpu is None or threads._layer != "omp" or len(allowed) < 2
            or not ids or len(ids) > len(allowed) - 1):
        pytest.skip("needs GNU OpenMP workers, sched_getcpu and two CPUs or more")
    time.sleep(2 * threads.WAKE_PLACEMENT_SECONDS)
    with threads.parallel_threads(2):
        away = threads._pool.away
    assert away in allowed
    for tid in ids:
        assert os.sched_getaffinity(tid) == allowed - {away}
    # The caller moves: the workers follow (the CPU reported is the only thing faked).
    moved = next(c for c in sorted(allowed) if c != away)
    monkeypatch.setattr(threads, "_getcpu", lambda: moved)
    threads.keep_workers_off_caller()
    assert threads._pool.away == moved
    for tid in ids:
        assert os.sched_getaffinity(tid) == allowed - {moved}
    # No CPU left besides the caller's: nothing changes.
    threads._pool.away = -1
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {moved})
    threads.keep_workers_off_caller()
    monkeypatch.undo()
    for tid in ids:
        assert os.sched_getaffinity(tid) == allowed - {moved}
    # The result is still right with the workers placed so.
    np.testing.assert_allclose(tp.einsum("ij,jk->ik", a, a), a @ a, rtol=1e-12)
