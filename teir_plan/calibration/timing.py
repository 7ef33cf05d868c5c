"""Timing on the executor, and the machine readings both calibrations share that are not
the vector kernel's or the cores' (BLAS' peak, the call overhead, the copy and memory
rates, BLAS' kernel width)."""

from __future__ import annotations

import ctypes
import os
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from teir_plan.executor import blas
from teir_plan.executor.execute import execute, run_lowered
from teir_plan.executor.lower import lower
from teir_plan.teir.records import TEIR


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


def now() -> str:
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


PEAK_SIDE = 768  # the large tile BLAS' peak is read on: about 5 ms at 188 GFLOP/s


def peak_flops(dtype: str, rng: np.random.Generator, repeats: int = 5) -> float:
    """BLAS through the executor on one PEAK_SIDE^3 tile, best of ``repeats``."""
    s = PEAK_SIDE
    prog = calibration_program(s, s, s, dtype)
    arrs = [rng.random(s * s).astype(dtype), rng.random(s * s).astype(dtype),
            np.zeros(s * s, dtype)]
    execute(prog, *arrs)
    return 2 * s**3 / best_seconds(lambda: execute(prog, *arrs), repeats)


def blas_peak_flops(dtype: str, rng: np.random.Generator, repeats: int = 5) -> float:
    """BLAS' rate on one PEAK_SIDE^3 product, called directly (ctypes) at the address the
    executor's tiles call, BLAS on one thread, best of ``repeats``: what
    :func:`peak_flops` reads through the executor (its call overhead is a few
    microseconds of a 3-5 ms product) without compiling the executor's BLAS runner for
    ``dtype``, which a first call on the other dtype would not use (1-3 s a dtype)."""
    from teir_plan.executor.blas_control import blas_threads

    s = PEAK_SIDE
    address, width = blas.gemm_address(np.dtype(dtype))
    integer = ctypes.c_int64 if width == 8 else ctypes.c_int32
    real = ctypes.c_float if np.dtype(dtype).itemsize == 4 else ctypes.c_double
    ptr = ctypes.c_void_p
    gemm = ctypes.CFUNCTYPE(None, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr,
                            ptr, ptr)(address)
    a, b = (np.asfortranarray(rng.random((s, s)).astype(dtype)) for _ in range(2))
    c = np.zeros((s, s), dtype, order="F")
    no, side, one, zero = ctypes.c_char(b"N"), integer(s), real(1.0), real(0.0)
    args = [ctypes.byref(no), ctypes.byref(no), ctypes.byref(side), ctypes.byref(side),
            ctypes.byref(side), ctypes.byref(one), a.ctypes.data_as(ptr), ctypes.byref(side),
            b.ctypes.data_as(ptr), ctypes.byref(side), ctypes.byref(zero),
            c.ctypes.data_as(ptr), ctypes.byref(side)]
    with blas_threads(1):
        gemm(*args)
        seconds = best_seconds(lambda: gemm(*args), repeats)
    if not np.allclose(c[:4, :4], a[:4] @ b[:, :4], rtol=1e-3):  # (not a GEMM as called)
        return peak_flops(dtype, rng, repeats)
    return 2 * s**3 / seconds


def call_seconds() -> float:
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


def copy_rate(rng: np.random.Generator) -> float:
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


def dram_rate(mib: int, repeats: int, threads: int) -> float:
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


def call_seconds_gemm(dtype: str = "float32") -> float:
    """The executor's call overhead as the first-use calibration reads it, from programs
    of 8 x 8 x 8 BLAS tiles of ``dtype`` (that of the first call, whose BLAS runner this
    compiles) (the kernel the peak was just measured with, already
    compiled; the one-element copy the full calibration times compiles the copy kernel,
    12 s on a fresh install): one tile a call against 33, so that the tiles' own cost
    drops out of the difference."""
    def per_call(reps: int) -> float:
        lowered = lower(calibration_program(8, 8, 8, dtype, reps), False)
        arrs = [np.ones(64, dtype), np.ones(64 * reps, dtype), np.zeros(64 * reps, dtype)]

        def run200() -> None:
            for _ in range(200):
                run_lowered(lowered, arrs)  # noqa: B023

        run200()
        return best_seconds(run200, 3) / 200

    one, many = per_call(1), per_call(33)
    return max(one - (many - one) / 32, 1e-7)


def numpy_copy_rate(rng: np.random.Generator) -> float:
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


def blas_vector_bytes() -> int | None:
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
