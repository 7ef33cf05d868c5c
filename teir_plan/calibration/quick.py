"""The first-use calibration: what plans depend on most, measured in about a second when
nothing is cached for this machine, the rest scaled from the reference."""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, replace

import numpy as np

from teir_plan.calibration.cores import handoff_latency, idle_measurements
from teir_plan.calibration.timing import (
    bandwidth_threads,
    blas_peak_flops,
    blas_vector_bytes,
    call_seconds_gemm,
    dram_rate,
    now,
    numpy_copy_rate,
)
from teir_plan.calibration.vector import (
    VectorKernel,
    measure_vector_kernel,
    vector_tile_seconds,
)
from teir_plan.errors import CalibrationWarning
from teir_plan.executor.threads import get_num_threads, set_num_threads
from teir_plan.isa import target
from teir_plan.machine import store
from teir_plan.machine.defaults import host_l2_bytes, host_llc_bytes
from teir_plan.machine.params import MachineParams
from teir_plan.machine.store import caller_stacklevel
from teir_plan.machine.tables import blas_efficiency_table
from teir_plan.progress import working


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
    # Whether the four above were measured (False: left to measure_vector_now; a host
    # without vector kernels has nothing to measure).
    vector_measured: bool = True


def measure_quick(vector: bool = True, dtype: str = "float32") -> QuickMeasurements:
    """The first-use measurements, on one thread: about 0.3 s here once the kernels are
    compiled (numba's disk cache), plus the first compile of what they run.  BLAS' peaks
    are read calling BLAS directly, so that only the BLAS runner of ``dtype`` (float32 or
    float64: the first call's) is compiled, to read the call overhead on it (a product of
    that dtype compiles it anyway).  The vector
    kernel's rate (``vector``) needs the general loop walker compiled (5-25 s on a fresh
    install): the first-use trigger leaves it to :func:`measure_vector_now`, run when the
    first plan that runs on that walker is made, which compiles it anyway."""
    rng = np.random.default_rng(0)
    saved_threads = get_num_threads()
    try:
        set_num_threads(1)
        # Best of 7, float32 measured before and after float64: one reading in a busy
        # spell of a shared machine priced every BLAS tile twice too dear (see calibrate).
        f32 = blas_peak_flops("float32", rng, 7)
        vec_spent = vector_tile_seconds(rng) if vector and target().vector_bytes else 0.0
        f64 = blas_peak_flops("float64", rng, 5)
        f32 = max(f32, blas_peak_flops("float32", rng, 3))
        vec = VectorKernel(0.0, MachineParams.vec_k_steps, 0.0, 0.0)
        if vec_spent:  # (the kernel's rate is weighed against BLAS': both read twice)
            vec = measure_vector_kernel(rng, MachineParams.tile_seconds, vec_spent)
        call = call_seconds_gemm(dtype)
        copy = numpy_copy_rate(rng)
        # 128 MiB: past any last-level cache of the machines teir_plan runs on, and
        # about 15 ms a copy at 20 GB/s (the full calibration copies 256 MiB).
        dram = dram_rate(128, 3, bandwidth_threads(saved_threads))
        wake, spin = idle_measurements(saved_threads)
        handoff = handoff_latency()
    finally:
        set_num_threads(saved_threads)
    return QuickMeasurements(f32, f64, dram, copy, call, host_l2_bytes(),
                             target().vector_bytes, blas_vector_bytes(), wake, spin,
                             host_llc_bytes(), handoff, *vec,
                             vector_measured=bool(vec_spent) or not target().vector_bytes)


def params_from_quick(m: QuickMeasurements, machine: str = "", measured_at: str = ""
                      ) -> MachineParams:
    """First-use parameters: the measured fields as measured, and what hangs on them
    scaled by the measured-to-reference ratio: the LLC and packing rates by the in-cache
    copy rate; the vector kernel's rate as measured, or scaled by the BLAS peak when it
    was not (on the reference it runs at 0.98 of BLAS' peak: on an AMD EPYC Zen 5 at
    1.05-1.11, so scaled it was priced a quarter too dear, and a tree's BLAS tiles of
    96 x 32 x 32 took its place on 96 x 96 x 32 tiles that ran faster).  The efficiency
    table is a fraction of the peak: the one measured with BLAS kernels of the width
    this BLAS runs (``machine.tables.blas_efficiency_table``: the kernels' width when BLAS' is
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
        vector_measured=m.vector_measured,
        measured_at=measured_at,
        machine=machine,
    )


def quick_calibrate(save: bool = True, vector: bool = True, dtype: str = "float32"
                    ) -> MachineParams:
    """Measure what plans depend on most (about a second), use it, cache it, and say so
    once (a :class:`~teir_plan.errors.CalibrationWarning`).  ``tp.calibrate()`` measures
    fully and replaces it.  Another thread that asks for the parameters meanwhile waits
    for this measurement.  Without ``vector`` (the first-use trigger) the vector kernel is
    not measured (its rate scaled from BLAS' peak) until :func:`measure_vector_now`;
    ``dtype``: the real dtype the first call computes in (whose BLAS runner it compiles)."""
    with store.first_use_measurement() as current:
        if current is not None:  # measured by the thread this one waited for
            return current
        start = time.perf_counter()
        with working("measuring this machine for the cost model, once (cached after)",
                     "about a second, 2-10 s more where the BLAS runner is not compiled "
                     "yet" if not vector else
                     "about a second, 15-60 s more where the kernels are not compiled yet"):
            measured = measure_quick(vector, dtype)
        spent = time.perf_counter() - start
        p = params_from_quick(measured, store.machine_key(), now())
        saved = save and store.save_params(p)
        store.set_machine_params(p)
    where = (f"cached in {store.cache_file()}" if saved else "not cached (the cache "
             f"{store.cache_file()} could not be written)")
    warnings.warn(
        f"teir_plan: no calibration for this machine ({p.machine}); measured a first-use "
        f"estimate in {spent:.1f} s, {where}. Run tp.calibrate() (15-40 s) for the full "
        f"measurement; TEIR_PLAN_AUTOCALIBRATE=0 skips measuring.",
        CalibrationWarning, stacklevel=caller_stacklevel())
    return p


def measure_vector_now(params: MachineParams, save: bool = True) -> MachineParams:
    """``params`` (a first-use estimate without the vector kernel's fields) with the vector
    kernel measured (about 0.1 s once compiled; it compiles the float32 loop walker, which
    the plan that asks for this runs on anyway), put in force and cached.  Called by the
    first-use trigger (schedule/in_force.py); another thread that asks meanwhile waits."""
    with store.first_use_measurement() as current, working(
            "measuring the vector kernel for the cost model, once (cached after)",
            "about 0.1 s, 5-25 s more where the loop walker is not compiled yet"):
        base = current if current is not None else params
        if base.vector_measured or base.source != "first-use":
            return base  # measured (or calibrated) by a thread this one waited for
        rng = np.random.default_rng(0)
        saved_threads = get_num_threads()
        try:
            set_num_threads(1)
            vec = measure_vector_kernel(rng, MachineParams.tile_seconds,
                                        vector_tile_seconds(rng))
        finally:
            set_num_threads(saved_threads)
        ref = MachineParams.reference()
        p = replace(base, vec_flops_f32=vec.vec_flops_f32,
                    vec_flops_f64=vec.vec_flops_f32 * ref.vec_flops_f64 / ref.vec_flops_f32,
                    vec_k_steps=vec.vec_k_steps, vec_tile_seconds=vec.vec_tile_seconds,
                    vec_strip_seconds=vec.vec_strip_seconds, vector_measured=True)
        if save:
            store.save_params(p)
        store.set_machine_params(p)
    return p
