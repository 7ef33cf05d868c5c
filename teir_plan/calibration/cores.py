"""The cores' readings: the idle worker threads' wake cost and spin time, and the wait
for a cache line another core just wrote."""

from __future__ import annotations

import math
import os
import queue
import threading
import time

import numpy as np
from numba import njit

from teir_plan.executor.threads import region_seconds
from teir_plan.machine.params import MachineParams

# Idle times after which a parallel region is timed, the caller busy meanwhile (as with
# its own work between calls): the wake cost is the median rise after the WAKE_GAPS
# (one gap alone once read 0.47 ms in a busy spell, against 0.03 in the runs around
# it), and the spin time the longest gap before the first after which the region costs
# more than half of it (doubling gaps measured 0.4 ms where the threads slept after
# 0.2-0.25).
IDLE_GAPS = (5e-5, 1e-4, 1.5e-4, 2e-4, 2.5e-4, 3e-4, 4e-4, 6e-4, 8e-4, 1.2e-3, 1.6e-3,
             3.2e-3)
WAKE_GAPS = (1.2e-3, 1.6e-3, 3.2e-3)
NEVER_SLEEPS = 1.0  # spin_seconds of threads that never sleep (OMP_WAIT_POLICY=active)


def idle_measurements(threads: int) -> tuple[float, float]:
    """(wake_seconds, spin_seconds) of the executor's worker threads: the median parallel
    region (threads.region_seconds) run right after another, against the medians run
    after each of IDLE_GAPS (about 0.15 s in all).  On one thread, the reference's."""
    if threads < 2:
        ref = MachineParams.reference()
        return ref.wake_seconds, ref.spin_seconds
    x = np.zeros(threads)

    def after(gap: float) -> float:
        start = time.perf_counter()
        while time.perf_counter() - start < gap:
            pass
        return region_seconds(threads, x)

    for _ in range(20):  # compiled, the threads started
        region_seconds(threads, x)
    hot = float(np.median([after(0.0) for _ in range(31)]))
    rise = {gap: float(np.median([after(gap) for _ in range(7)])) - hot for gap in IDLE_GAPS}
    wake = max(float(np.median([rise[gap] for gap in WAKE_GAPS])), 0.0)
    asleep = [i for i, gap in enumerate(IDLE_GAPS) if wake > 0 and rise[gap] > wake / 2]
    users = "GOMP_SPINCOUNT" in os.environ or "OMP_WAIT_POLICY" in os.environ
    if not users and (not asleep or asleep[0] == 0):
        # No rise, or one after the shortest wait, under teir_plan's own spin limit (0.2
        # ms and more): the measurement was lost in other processes' noise.  A first use
        # on a busy host read no rise, which would have turned the one-thread rule off
        # until the next calibration; a spin time of 0 would send every small call of a
        # tight loop to one thread.
        ref = MachineParams.reference()
        return ref.wake_seconds, ref.spin_seconds
    if not asleep:
        return wake, NEVER_SLEEPS  # the user's spin policy: its threads may never sleep
    return wake, IDLE_GAPS[asleep[0] - 1] if asleep[0] else 0.0


# The lines of a buffer one core writes and another then reads, chased in a random order
# so that no prefetcher helps: 128 KiB, within the writer's L2 on every x86 core.
HANDOFF_BYTES = 128 * 1024


@njit(cache=True, nogil=True)
def _link(chain: np.ndarray, order: np.ndarray) -> None:  # pragma: no cover - jitted
    """Write a cycle through the lines ``order`` names (each line's first slot holds the
    next line's)."""
    n = order.size
    for i in range(n):
        chain[order[i] * 8] = order[(i + 1) % n] * 8


@njit(cache=True, nogil=True)
def _chase(chain: np.ndarray, steps: int) -> int:  # pragma: no cover - jitted
    """Follow the cycle ``steps`` lines on: each load waits for the one before."""
    p = 0
    for _ in range(steps):
        p = chain[p]
    return p


class _Pinned(threading.Thread):
    """A thread on one CPU that runs what it is given and hands back the result (the
    caller's own affinity is never changed: threads it creates later would inherit it).
    ``placed`` says whether the CPU took it, once ``ready`` is set; what a call raises
    is raised again in the caller, so that a failure never leaves the caller waiting."""

    def __init__(self, cpu: int) -> None:
        super().__init__(daemon=True)
        self.cpu = cpu
        self.placed = False
        self.ready = threading.Event()
        self.todo: queue.Queue = queue.Queue()
        self.done: queue.Queue = queue.Queue()
        self.start()

    def run(self) -> None:
        try:
            os.sched_setaffinity(0, {self.cpu})
            self.placed = True
        except OSError:
            pass
        finally:
            self.ready.set()
        while True:
            fn = self.todo.get()
            if fn is None:
                return
            try:
                self.done.put((True, fn()))
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                self.done.put((False, e))

    def call(self, fn):  # type: ignore[no-untyped-def]
        self.todo.put(fn)
        ok, value = self.done.get()
        if not ok:
            raise value
        return value

    def stop(self) -> None:
        self.todo.put(None)
        self.join()


def handoff_latency(rounds: int = 5) -> float:
    """Seconds a core waits for a line that another core just wrote
    (``MachineParams.handoff_seconds``, see planner/handoff.py): one thread on each of
    two CPUs, the first writing a cycle through HANDOFF_BYTES of lines in a random
    order, the second following it, best of ``rounds``.  0 with fewer than two CPUs
    (nothing is handed between cores) or where threads cannot be placed on CPUs."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return 0.0
    if len(cpus) < 2:
        return 0.0
    lines = HANDOFF_BYTES // 64
    chain = np.zeros(lines * 8, np.int64)
    order = np.random.default_rng(0).permutation(lines).astype(np.int64)
    try:
        writer = _Pinned(cpus[0])
    except RuntimeError:  # (no thread could be started)
        return 0.0
    try:
        reader = _Pinned(cpus[1])
    except RuntimeError:
        writer.stop()
        return 0.0
    try:
        if not (writer.ready.wait(5) and reader.ready.wait(5)
                and writer.placed and reader.placed):
            return 0.0

        def chase() -> float:
            start = time.perf_counter()
            _chase(chain, lines)
            return time.perf_counter() - start

        writer.call(lambda: _link(chain, order))
        writer.call(chase)  # compiled
        best = math.inf
        for _ in range(rounds):
            writer.call(lambda: _link(chain, order))
            best = min(best, reader.call(chase))
    finally:
        writer.stop()
        reader.stop()
    return best / lines
