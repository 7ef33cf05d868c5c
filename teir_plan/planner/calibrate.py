"""The calibrations: measuring the cost model's parameters on this machine.

``tp.calibrate()`` measures fully (15-40 seconds, the BLAS efficiency table included); the
first-use calibration (:func:`quick_calibrate`, about a second) measures what plans depend
on most when nothing is cached (see :mod:`teir_plan.planner.machine` for the sources of
parameters, the cache and the parameters in force, which both set).  They time programs
on the executor, so this module imports it; the rest of the planner does not.
"""

from __future__ import annotations

import itertools
import math
import os
import queue
import sys
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple

import numpy as np
from numba import njit

from teir_plan.errors import CalibrationWarning
from teir_plan.executor import blas
from teir_plan.executor.execute import execute, run_lowered
from teir_plan.executor.lower import lower
from teir_plan.executor.threads import get_num_threads, region_seconds, set_num_threads
from teir_plan.isa import target
from teir_plan.planner import machine
from teir_plan.planner.machine import (
    GEMM_FORMS,
    GEMM_GRID,
    GRID_MAX_FLOPS,
    MachineParams,
    _l2_bytes,
    _llc_bytes,
    blas_efficiency_table,
)
from teir_plan.teir.records import TEIR
from teir_plan.tilekinds.vec import vec_efficiency, vec_overhead_seconds, vec_strips
from teir_plan.tiles import VEC_ROWS


def best_seconds(fn, repeats: int = 5, warmup: int = 0) -> float:  # type: ignore[no-untyped-def]
    """The best of ``repeats`` timed calls of ``fn`` after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())


def calibration_program(m: int, n: int, k: int, dtype: str, reps: int = 1, form: int = 0
                        ) -> TEIR:
    """The TEIR program calibration times: ``reps`` m x n x k tiles along a sequential
    N loop (in0's tile stays in cache while in1 and out stream, as in the loop nests the
    planner builds), in0 of m * k, in1 of k * n * reps and out of m * n * reps elements.
    out is column-major, so BLAS runs each tile unswapped with its operands in ``form``
    (an index in GEMM_FORMS)."""
    a = [0, k, 0, 1] if form & 1 else [0, 1, 0, m]  # A: m x k, T or N
    b = [k * n, 0, 1, n] if form & 2 else [k * n, 0, k, 1]  # B: k x n, T or N
    return TEIR.from_fields(
        data_type=dtype, prim_first="zero", prim_main="gemm", prim_last="none",
        dim_types=["n", "m", "n", "k"], exec_types=["seq", "prim", "prim", "prim"],
        dim_sizes=[reps, m, n, k], strides=[a, b, [m * n, 1, m, 0]],
    )


# ---- measurements shared by the quick and the full calibration (one thread) ----------
PEAK_SIDE = 768  # the large tile BLAS' peak is read on: about 5 ms at 188 GFLOP/s


def _peak_flops(dtype: str, rng: np.random.Generator, repeats: int = 5) -> float:
    """BLAS through the executor on one PEAK_SIDE^3 tile, best of ``repeats``."""
    s = PEAK_SIDE
    prog = calibration_program(s, s, s, dtype)
    arrs = [rng.random(s * s).astype(dtype), rng.random(s * s).astype(dtype),
            np.zeros(s * s, dtype)]
    execute(prog, *arrs)
    return 2 * s**3 / best_seconds(lambda: execute(prog, *arrs), repeats)


# The vector kernel's calibration tile: one of efbad,cf->abcde's blocks (432 long along
# the vector axis, 24 rows, K 36), its operands in cache; and the same with K 192, whose
# rate against it gives the K steps its outputs' loads and stores cost (VEC_LONG_K_TILE:
# its vector operand, 324 KiB, within every L2 the kernels run on, its 24 x 192 block
# within L1).
VEC_TILE = (432, 24, 36)
VEC_LONG_K_TILE = (432, 24, 192)
MAX_K_STEPS = 16.0  # (a fit beyond is noise: 0-2.7 on the machines measured)


def _vector_tile_seconds(rng: np.random.Generator, repeats: int = 5,
                         tile: tuple[int, int, int] = VEC_TILE) -> float:
    """Seconds per ``tile`` on the vector kernel (float32, one thread), the loop nest's
    bookkeeping per tile included (reps of it along a sequential N loop, about 80 MFLOP
    in all), best of ``repeats``."""
    m, n, k = tile
    reps = max(1, min(4000, int(8e7 / (2 * m * n * k))))
    prog = calibration_program(m, n, k, "float32", reps)
    arrs = [rng.random(m * k).astype(np.float32), rng.random(k * n * reps).astype(np.float32),
            np.zeros(m * n * reps, np.float32)]
    lowered = lower(prog, True)
    run_lowered(lowered, arrs)
    return best_seconds(lambda: run_lowered(lowered, arrs), repeats) / reps


def _vec_tile_overhead(tile_seconds: float, strip_seconds: float) -> float:
    """The set-up of a VEC_TILE tile (and a VEC_LONG_K_TILE one: the same length)."""
    return vec_overhead_seconds(VEC_TILE[0], 4, tile_seconds, strip_seconds)


def vector_k_steps(spent: float, long_spent: float, tile_seconds: float) -> float:
    """MachineParams.vec_k_steps from the seconds per VEC_TILE and per VEC_LONG_K_TILE:
    the ``s`` for which K / (K + s) rates the two as measured, within [0, MAX_K_STEPS].

    >>> k1, k2 = VEC_TILE[2], VEC_LONG_K_TILE[2]
    >>> round(vector_k_steps(k1 * (k1 + 2.5) / k1, k2 * (k2 + 2.5) / k2, 0), 6)
    2.5
    """
    k1, k2 = VEC_TILE[2], VEC_LONG_K_TILE[2]
    q = (k1 / max(spent - tile_seconds, 1e-12)) / (k2 / max(long_spent - tile_seconds, 1e-12))
    if q >= 1 or q * k2 <= k1:
        return 0.0 if q >= 1 else MAX_K_STEPS
    return min(MAX_K_STEPS, k1 * k2 * (1 - q) / (q * k2 - k1))


def vector_rate(spent: float, tile_seconds: float, k_steps: float) -> float:
    """The vector kernel's float32 rate at full efficiency (MachineParams.vec_flops_f32)
    from ``spent`` seconds per VEC_TILE tile: the tile's rate, its bookkeeping
    (``tile_seconds``) taken off, over the tile's modelled efficiency with ``k_steps``."""
    m, n, k = VEC_TILE
    return (2 * m * n * k / max(spent - tile_seconds, 1e-9)
            / vec_efficiency(m, n, k, 4, k_steps))


class VectorKernel(NamedTuple):
    """What both calibrations measure of the vector kernel (MachineParams' fields)."""

    vec_flops_f32: float
    vec_k_steps: float
    vec_tile_seconds: float
    vec_strip_seconds: float


def _vector_kernel(rng: np.random.Generator, tile_seconds: float, spent: float = math.inf
                   ) -> VectorKernel:
    """The vector kernel's set-up (_vector_overheads), then its rate and K steps: both
    calibration tiles in turns, three rounds of best of 3 each (about 10 ms), the best of
    all kept (VEC_TILE's with ``spent``, an earlier reading), the set-up and the walker's
    ``tile_seconds`` taken off each tile.  Read once each, back to back, the K steps came
    out anywhere in 0.2-2.8 on one machine: a 3% drift between the two readings moves the
    fit by 1.4.  (Without vector kernels no set-up is read: no tile pays it.)"""
    per_tile, per_strip = (_vector_overheads(rng, tile_seconds) if target().vector_bytes
                           else (0.0, 0.0))
    fixed = tile_seconds + _vec_tile_overhead(per_tile, per_strip)
    long_spent = math.inf
    for _ in range(3):
        spent = min(spent, _vector_tile_seconds(rng, 3))
        long_spent = min(long_spent, _vector_tile_seconds(rng, 3, VEC_LONG_K_TILE))
    steps = vector_k_steps(spent, long_spent, fixed)
    return VectorKernel(vector_rate(spent, fixed, steps), steps, per_tile, per_strip)


# The tiles the vector kernel's set-up is read from: (length, K, rows as a multiple of
# a micro-tile's), each against one row block of the same length and K.  Their
# difference in rows leaves what a tile costs whatever its rows; two lengths part that
# into a cost per tile and one per strip of micro-tiles.
VEC_OVERHEAD_TILES = ((64, 64, 12), (432, 36, 3))


def vector_overheads(fixed: tuple[float, float], strips: tuple[int, int],
                     tile_seconds: float) -> tuple[float, float]:
    """(MachineParams.vec_tile_seconds, vec_strip_seconds) from the fixed seconds of a
    tile of each VEC_OVERHEAD_TILES length and its strips: a line through the two, the
    walker's own ``tile_seconds`` taken off the part per tile, neither below 0.

    >>> [round(x * 1e9, 1) for x in vector_overheads((48e-9, 90e-9), (2, 9), 15e-9)]
    [21.0, 6.0]
    """
    strip = max(0.0, (fixed[1] - fixed[0]) / (strips[1] - strips[0]))
    return max(0.0, fixed[0] - strip * strips[0] - tile_seconds), strip


def _vector_overheads(rng: np.random.Generator, tile_seconds: float) -> tuple[float, float]:
    """The vector kernel's set-up per tile and per strip (vector_overheads), on one
    thread: each VEC_OVERHEAD_TILES tile with one row block and with many, in turns,
    best of two rounds (about 25 ms)."""
    fixed = []
    for length, k, times in VEC_OVERHEAD_TILES:
        few = many = math.inf
        for _ in range(2):
            few = min(few, _vector_tile_seconds(rng, 3, (length, VEC_ROWS, k)))
            many = min(many, _vector_tile_seconds(rng, 3, (length, VEC_ROWS * times, k)))
        fixed.append((times * few - many) / (times - 1))
    strips = tuple(vec_strips(length, 4) for length, _, _ in VEC_OVERHEAD_TILES)
    return vector_overheads((fixed[0], fixed[1]), (strips[0], strips[1]), tile_seconds)


def _call_seconds() -> float:
    """Python-side cost of a plan step (a pre-checked executor call), from 200 runs of a
    one-element copy."""
    one = TEIR.from_fields(
        data_type="float32", prim_first="none", prim_main="copy", prim_last="none",
        dim_types=[], exec_types=[], dim_sizes=[], strides=[[], []],
    )
    x, y = np.ones(1, np.float32), np.zeros(1, np.float32)
    lowered = lower(one)

    def run200() -> None:
        for _ in range(200):
            run_lowered(lowered, [x, y])

    run200()
    return best_seconds(run200, 3) / 200


def _copy_rate(rng: np.random.Generator) -> float:
    """Copy tiles in cache (Copy programs and packs): a 512 x 512 float32 block into rows
    of another stride, one core, bytes copied per second, best of five (the model's
    transposes run at 0.7 of it: measured 0.64 on the reference).  The earlier default
    underestimated the reference's by half and more: packs looked too dear
    (bhqd,bhkd->bhqk's pack of its second operand was predicted 576 us, measured 178)."""
    side = 512
    copy_prog = TEIR.from_fields(
        data_type="float32", prim_first="none", prim_main="copy", prim_last="none",
        dim_types=["c", "c"], exec_types=["prim", "prim"], dim_sizes=[side, side],
        strides=[[side, 1], [side + 16, 1]],
    )
    src = rng.random(side * side).astype(np.float32)
    dst = np.zeros((side + 16) * side, np.float32)
    copy_low = lower(copy_prog)
    run_lowered(copy_low, [src, dst])
    return src.nbytes / best_seconds(lambda: run_lowered(copy_low, [src, dst]), 5)


def _dram_rate(mib: int, repeats: int, threads: int) -> float:
    """Memory bandwidth, read plus write, of a ``mib`` MiB copy in ``threads`` parts at
    once, each a numpy.copyto on a thread of its own (numpy lets go of the GIL while it
    copies; the first copy faults the destination's pages in; the best of the runs is
    kept).  MachineParams' DRAM rate is the cores' aggregate: on a 2-core AMD EPYC
    (Zen 5) one thread copied at 37 GB/s and two at 68-72; measured on one, the rate
    priced the 176 MB of output traffic of a 2048 x 5376 x 288 sgemm at 5 ms, which ran
    in 13.5 ms at 468 GFLOP/s (predicted 17.9)."""
    a = np.ones(mib * 1024 * 1024 // 8)
    b = np.empty_like(a)
    if threads <= 1:
        return 2 * a.nbytes / best_seconds(lambda: np.copyto(b, a), repeats)
    bounds = np.linspace(0, a.size, threads + 1).astype(np.int64)
    parts = [slice(int(lo), int(hi)) for lo, hi in zip(bounds[:-1], bounds[1:])]
    with ThreadPoolExecutor(threads) as pool:
        def copy() -> None:
            for done in [pool.submit(np.copyto, b[s], a[s]) for s in parts]:
                done.result()

        return 2 * a.nbytes / best_seconds(copy, repeats)


def bandwidth_threads(threads: int) -> int:
    """The threads that measure the DRAM rate for plans on ``threads``: at least two
    (a plan on one thread gets cost.memory_seconds' share of the two-core rate, as on
    the reference), at most the CPUs this process may use."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(max(2, threads), cpus))


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


def _idle_measurements(threads: int) -> tuple[float, float]:
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


def _handoff_latency(rounds: int = 5) -> float:
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


def _call_seconds_gemm() -> float:
    """The executor's call overhead as the first-use calibration reads it, from programs
    of 8 x 8 x 8 float32 BLAS tiles (the kernel the peak was just measured with, already
    compiled; the one-element copy the full calibration times compiles the copy kernel,
    12 s on a fresh install): one tile a call against 33, so that the tiles' own cost
    drops out of the difference."""
    def per_call(reps: int) -> float:
        lowered = lower(calibration_program(8, 8, 8, "float32", reps), False)
        arrs = [np.ones(64, np.float32), np.ones(64 * reps, np.float32),
                np.zeros(64 * reps, np.float32)]

        def run200() -> None:
            for _ in range(200):
                run_lowered(lowered, arrs)  # noqa: B023

        run200()
        return best_seconds(run200, 3) / 200

    one, many = per_call(1), per_call(33)
    return max(one - (many - one) / 32, 1e-7)


def _numpy_copy_rate(rng: np.random.Generator) -> float:
    """The copy rate in cache as the first-use calibration reads it: numpy.copyto of a
    512 x 512 float32 block into rows of another stride, the block the full calibration
    copies with a Copy program (51 GB/s with numpy here, 49 with the executor), without
    compiling the executor's copy kernel."""
    side = 512
    src = rng.random((side, side)).astype(np.float32)
    dst = np.zeros((side, side + 16), np.float32)[:, :side]
    np.copyto(dst, src)
    return src.nbytes / best_seconds(lambda: np.copyto(dst, src), 5)


# OpenBLAS' kernel families (its core name, lower case) by the width of the vectors their
# GEMM kernels use; a core not listed is not compared with teir_plan's vector width.
OPENBLAS_CORE_VECTOR_BYTES = {
    "skylakex": 64, "cooperlake": 64, "sapphirerapids": 64, "a64fx": 64,
    "haswell": 32, "zen": 32, "sandybridge": 32, "neoversev1": 32,
    "nehalem": 16, "core2": 16, "penryn": 16, "dunnington": 16, "prescott": 16,
    "atom": 16, "barcelona": 16, "bobcat": 16, "bulldozer": 16, "piledriver": 16,
    "steamroller": 16, "excavator": 16, "armv8": 16, "cortexa53": 16, "cortexa57": 16,
    "cortexa72": 16, "cortexa73": 16, "neoversen1": 16, "neoversen2": 16,
    "thunderx2t99": 16, "thunderx3t110": 16, "vortex": 16, "falkor": 16, "tsv110": 16,
}


def _blas_vector_bytes() -> int | None:
    """The vector width of the GEMM kernels of the BLAS the executor calls, from
    OpenBLAS' core name (threadpoolctl), or None (not OpenBLAS, or a core not listed).
    OpenBLAS 0.3.30-0.3.31 runs its Haswell (AVX2) kernels on AMD's Zen 5, which has
    AVX-512: its peak there says nothing about what teir_plan's AVX-512 kernel does."""
    try:
        import threadpoolctl

        ilp64 = blas.gemm_address(np.dtype(np.float32))[1] == 8  # numpy's OpenBLAS, else scipy's
        where = "numpy.libs" if ilp64 else "scipy.libs"
        for info in threadpoolctl.threadpool_info():
            if info.get("internal_api") == "openblas" and where in str(info.get("filepath")):
                return OPENBLAS_CORE_VECTOR_BYTES.get(str(info.get("architecture")).lower())
    except Exception:  # noqa: BLE001 - an unknown BLAS set-up: no width, no adjustment
        pass
    return None


@dataclass(frozen=True)
class QuickMeasurements:
    """What the first-use calibration measures (rates on one core, DRAM over the copy),
    and the two vector widths that relate BLAS' peak to the vector kernel's."""

    gemm_flops_f32: float
    gemm_flops_f64: float
    dram_bytes_per_second: float
    copy_bytes_per_second: float
    call_seconds: float
    l2_bytes: int | None  # from sysfs; None where Linux does not say
    kernel_vector_bytes: int = 0  # teir_plan's vector kernels' (isa.target())
    blas_vector_bytes: int | None = None  # BLAS' GEMM kernels' (None: not known)
    # The worker threads' wake cost and spin time (the reference's if not measured).
    wake_seconds: float = MachineParams.wake_seconds
    spin_seconds: float = MachineParams.spin_seconds
    llc_bytes: int | None = None  # from sysfs (the last level); None where Linux does not say
    handoff_seconds: float = MachineParams.handoff_seconds  # (the reference's if not measured)
    # The vector kernel's float32 rate at full efficiency (0: not measured, scaled from
    # the BLAS peak instead) and its K steps (the reference's if not measured).
    vec_flops_f32: float = 0.0
    vec_k_steps: float = MachineParams.vec_k_steps
    # Its set-up per tile and per strip (the reference's if not measured).
    vec_tile_seconds: float = MachineParams.vec_tile_seconds
    vec_strip_seconds: float = MachineParams.vec_strip_seconds


def measure_quick() -> QuickMeasurements:
    """The first-use measurements, on one thread: about 0.3 s here once the kernels are
    compiled (numba's disk cache), plus their first compilation on a fresh install
    (which the first einsum would pay anyway: BLAS tiles 8 s, the vector kernel 5 s
    more on an AMD EPYC Zen 5)."""
    rng = np.random.default_rng(0)
    saved_threads = get_num_threads()
    try:
        set_num_threads(1)
        # Best of 7, float32 measured before and after float64: one reading in a busy
        # spell of a shared machine priced every BLAS tile twice too dear (see calibrate).
        f32 = _peak_flops("float32", rng, 7)
        vec_spent = _vector_tile_seconds(rng) if target().vector_bytes else 0.0
        f64 = _peak_flops("float64", rng, 5)
        f32 = max(f32, _peak_flops("float32", rng, 3))
        vec = VectorKernel(0.0, MachineParams.vec_k_steps, 0.0, 0.0)
        if vec_spent:  # (the kernel's rate is weighed against BLAS': both read twice)
            vec = _vector_kernel(rng, MachineParams.tile_seconds, vec_spent)
        call = _call_seconds_gemm()
        copy = _numpy_copy_rate(rng)
        # 128 MiB: past any last-level cache of the machines teir_plan runs on, and
        # about 15 ms a copy at 20 GB/s (the full calibration copies 256 MiB).
        dram = _dram_rate(128, 3, bandwidth_threads(saved_threads))
        wake, spin = _idle_measurements(saved_threads)
        handoff = _handoff_latency()
    finally:
        set_num_threads(saved_threads)
    return QuickMeasurements(f32, f64, dram, copy, call, _l2_bytes(),
                             target().vector_bytes, _blas_vector_bytes(), wake, spin,
                             _llc_bytes(), handoff, *vec)


def params_from_quick(m: QuickMeasurements, machine: str = "", measured_at: str = ""
                      ) -> MachineParams:
    """First-use parameters: the measured fields as measured, and what hangs on them
    scaled by the measured-to-reference ratio: the LLC and packing rates by the in-cache
    copy rate; the vector kernel's rate as measured, or scaled by the BLAS peak when it
    was not (on the reference it runs at 0.98 of BLAS' peak: on an AMD EPYC Zen 5 at
    1.05-1.11, so scaled it was priced a quarter too dear, and a tree's BLAS tiles of
    96 x 32 x 32 took its place on 96 x 96 x 32 tiles that ran faster).  The efficiency
    table is a fraction of the peak: the one measured with BLAS kernels of the width
    this BLAS runs (``machine.blas_efficiency_table``: the kernels' width when BLAS' is
    not known), since the fractions differ between widths; the idle threads' wake cost
    and spin time and the cross-core handoff as measured; the loop, tile and
    parallel-region costs stay the reference's.

    Where BLAS' kernels use narrower vectors than teir_plan's (OpenBLAS' AVX2 kernels on
    AMD's Zen 5: BLAS at 131 GFLOP/s a core, the AVX-512 vector kernel at 288), a scaled
    rate is scaled by the width ratio too: scaled by BLAS' peak alone it read 130, and
    the first-use plans matched the full calibration's on 17 of the 24 TCCG cases (22
    with the measured rate).  A CPU that splits wide vectors in two (Zen 4's
    AVX-512) would be over-rated by this if its BLAS ran narrower kernels there; recent
    OpenBLAS releases run their AVX-512 (SkylakeX/Cooperlake) kernels on Zen 4, so the
    widths agree (not checked on a Zen 4 here)."""
    ref = MachineParams.reference()
    wider = (m.kernel_vector_bytes / m.blas_vector_bytes
             if m.blas_vector_bytes and m.kernel_vector_bytes > m.blas_vector_bytes else 1.0)
    f32 = m.gemm_flops_f32 / ref.gemm_flops_f32
    f64 = m.gemm_flops_f64 / ref.gemm_flops_f64
    copy = m.copy_bytes_per_second / ref.copy_bytes_per_second
    return replace(
        ref,
        gemm_flops_f32=m.gemm_flops_f32,
        gemm_flops_f64=m.gemm_flops_f64,
        gemm_efficiency=blas_efficiency_table(m.blas_vector_bytes or m.kernel_vector_bytes),
        vec_flops_f32=m.vec_flops_f32 or ref.vec_flops_f32 * f32 * wider,
        vec_k_steps=m.vec_k_steps if m.vec_flops_f32 else ref.vec_k_steps,
        vec_tile_seconds=m.vec_tile_seconds,
        vec_strip_seconds=m.vec_strip_seconds,
        vec_flops_f64=(m.vec_flops_f32 * ref.vec_flops_f64 / ref.vec_flops_f32
                       or ref.vec_flops_f64 * f64 * wider),
        dram_bytes_per_second=m.dram_bytes_per_second,
        copy_bytes_per_second=m.copy_bytes_per_second,
        llc_bytes_per_second=ref.llc_bytes_per_second * copy,
        pack_bytes_per_second=ref.pack_bytes_per_second * copy,
        call_seconds=m.call_seconds,
        wake_seconds=m.wake_seconds,
        spin_seconds=m.spin_seconds,
        handoff_seconds=m.handoff_seconds,
        l2_bytes=m.l2_bytes or ref.l2_bytes,
        llc_bytes=m.llc_bytes or ref.llc_bytes,
        source="first-use",
        measured_at=measured_at,
        machine=machine,
    )


def quick_calibrate(save: bool = True) -> MachineParams:
    """Measure what plans depend on most (about a second), use it, cache it, and say so
    once (a :class:`~teir_plan.errors.CalibrationWarning`).  ``tp.calibrate()`` measures
    fully and replaces it.  Another thread that asks for the parameters meanwhile waits
    for this measurement."""
    with machine.first_use_measurement() as current:
        if current is not None:  # measured by the thread this one waited for
            return current
        start = time.perf_counter()
        measured = measure_quick()
        spent = time.perf_counter() - start
        p = params_from_quick(measured, machine.machine_key(), _now())
        saved = save and machine.save_params(p)
        machine.set_machine_params(p)
    where = (f"cached in {machine.cache_file()}" if saved else "not cached (the cache "
             f"{machine.cache_file()} could not be written)")
    warnings.warn(
        f"teir_plan: no calibration for this machine ({p.machine}); measured a first-use "
        f"estimate in {spent:.1f} s, {where}. Run tp.calibrate() (15-40 s) for the full "
        f"measurement; TEIR_PLAN_AUTOCALIBRATE=0 skips measuring.",
        CalibrationWarning, stacklevel=_caller_stacklevel())
    return p


def _caller_stacklevel() -> int:
    """The ``stacklevel`` that attributes a warning to the first frame outside teir_plan
    (the user's einsum or plan call, however deep the planning call that measured)."""
    package = str(Path(__file__).resolve().parents[1])
    frame, level = sys._getframe(1), 1
    while frame is not None and str(Path(frame.f_code.co_filename).resolve()).startswith(
            package):
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    return level


def calibrate(save: bool = True) -> MachineParams:
    """Measure the cost model's parameters on this machine (15-40 seconds) and use them;
    saved, they replace a first-use estimate.

    >>> import teir_plan as tp
    >>> params = tp.calibrate(save=False)  # doctest: +SKIP
    """
    p = MachineParams.reference()
    rng = np.random.default_rng(0)

    def gemm_tiles(m: int, n: int, k: int, dtype: str, reps: int = 1, form: int = 0
                   ) -> tuple[TEIR, list[np.ndarray]]:
        prog = calibration_program(m, n, k, dtype, reps, form)
        arrs = [rng.random(m * k).astype(dtype), rng.random(k * n * reps).astype(dtype),
                np.zeros(m * n * reps, dtype)]
        return prog, arrs

    def tile_seconds(m: int, n: int, k: int, form: int = 0, repeats: int = 5) -> float:
        reps = max(1, min(4000, int(8e7 / (2 * m * n * k))))
        prog, arrs = gemm_tiles(m, n, k, "float32", reps, form)
        # The grid is BLAS' table: tiles the vector kernel would take run on BLAS here.
        lowered = lower(prog, False)
        run_lowered(lowered, arrs)
        return best_seconds(lambda: run_lowered(lowered, arrs), repeats) / reps  # noqa: B023

    saved_threads = get_num_threads()
    # Keyed before the measurements narrow the threads to one: the parameters are for
    # calls on all of them (the key the cache stores them under).
    key = machine.machine_key()
    try:
        set_num_threads(1)
        peaks = {dtype: _peak_flops(dtype, rng) for dtype in ("float32", "float64")}
        # The vector kernel on a tile it takes (one of efbad,cf->abcde's blocks), timed
        # before the grid and again after it, the shorter kept, as the peak is: the
        # planner weighs the two rates against each other, and a single reading in a busy
        # spell (135 GFLOP/s against a peak of 157, where the calibrations around it read
        # 0.95-1.0 of the peak) tilts its choices toward BLAS tiles.
        vec_spent = _vector_tile_seconds(rng)
        # BLAS on every tile shape of the grid, as a fraction of the large-tile peak
        # with the call's fixed cost included (the loop nest's own cost per tile,
        # ``tile_seconds``, is the model's separate term).
        rates: dict[tuple[int, int, int, int], float] = {}
        forms = range(len(GEMM_FORMS))
        for f, m, n, k in itertools.product(forms, GEMM_GRID, GEMM_GRID, GEMM_GRID):
            if 2 * m * n * k > GRID_MAX_FLOPS:  # (the table's order)
                rates[f, m, n, k] = rates[f, min(m, 512), min(n, 512), min(k, 512)]
            else:
                # The transposed forms at best of 3, not 5: calibration stays under 20 s.
                spent = max(tile_seconds(m, n, k, form=f, repeats=3 if f else 5)
                            - p.tile_seconds, 1e-9)
                rates[f, m, n, k] = 2 * m * n * k / spent
        # The peak is measured again after the grid and the higher kept, and no grid tile
        # may beat it: on a shared machine one measurement can catch a neighbour's load
        # (a 768^3 float32 tile measured at 88 GFLOP/s, 175-186 in the calibrations
        # around it), which priced every BLAS tile twice too dear against the vector
        # kernel, whose rate is measured apart.
        for dtype in peaks:
            peaks[dtype] = max(peaks[dtype], _peak_flops(dtype, rng))
        peaks["float32"] = max(peaks["float32"], *rates.values())
        eff = {key: min(1.0, rate / peaks["float32"]) for key, rate in rates.items()}
        # The vector kernel at full efficiency: its rate on that tile divided by the
        # tile's modelled efficiency.
        vec = _vector_kernel(rng, p.tile_seconds, vec_spent)
        t_call = _call_seconds()
        copy_rate = _copy_rate(rng)
        # 256 MiB: large enough for the kernel to use huge pages.
        dram = _dram_rate(256, 3, bandwidth_threads(saved_threads))
        wake, spin = _idle_measurements(saved_threads)
        handoff = _handoff_latency()
        p = replace(
            p,
            l2_bytes=_l2_bytes() or p.l2_bytes,
            llc_bytes=_llc_bytes() or p.llc_bytes,
            gemm_flops_f32=peaks["float32"],
            gemm_flops_f64=peaks["float64"],
            gemm_efficiency=tuple(eff.values()),
            vec_flops_f32=vec.vec_flops_f32,
            vec_flops_f64=vec.vec_flops_f32 * p.vec_flops_f64 / p.vec_flops_f32,
            vec_k_steps=vec.vec_k_steps,
            vec_tile_seconds=vec.vec_tile_seconds,
            vec_strip_seconds=vec.vec_strip_seconds,
            call_seconds=t_call,
            wake_seconds=wake,
            spin_seconds=spin,
            handoff_seconds=handoff,
            copy_bytes_per_second=copy_rate,
            dram_bytes_per_second=dram,
            calibrated=True,
            source="calibrated",
            measured_at=_now(),
            machine=key,
        )
    finally:
        set_num_threads(saved_threads)
    if save:
        machine.save_params(p)
    machine.set_machine_params(p)
    return p
