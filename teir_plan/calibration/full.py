"""The full calibration (``tp.calibrate()``): every parameter that matters most, BLAS'
efficiency table included, in 15-40 seconds."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np

from teir_plan.calibration.cores import handoff_latency, idle_measurements
from teir_plan.calibration.timing import (
    bandwidth_threads,
    best_seconds,
    calibration_program,
    call_seconds,
    copy_rate,
    dram_rate,
    now,
    peak_flops,
)
from teir_plan.calibration.vector import measure_vector_kernel, vector_tile_seconds
from teir_plan.executor.execute import run_lowered
from teir_plan.executor.lower import lower
from teir_plan.executor.threads import get_num_threads, set_num_threads
from teir_plan.machine import store
from teir_plan.machine.defaults import host_l2_bytes, host_llc_bytes
from teir_plan.machine.params import MachineParams
from teir_plan.machine.tables import GEMM_FORMS, GEMM_GRID, GRID_MAX_FLOPS
from teir_plan.teir.records import TEIR


def measure_full() -> MachineParams:
    """Measure the cost model's parameters on this machine (15-40 seconds): what
    ``tp.calibrate()`` (:func:`teir_plan.schedule.calibrate.calibrate`) checks against
    the parameters in force before it saves and uses them."""
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
    key = store.machine_key()
    try:
        set_num_threads(1)
        peaks = {dtype: peak_flops(dtype, rng) for dtype in ("float32", "float64")}
        # The vector kernel on a tile it takes (one of efbad,cf->abcde's blocks), timed
        # before the grid and again after it, the shorter kept, as the peak is: the
        # planner weighs the two rates against each other, and a single reading in a busy
        # spell (135 GFLOP/s against a peak of 157, where the calibrations around it read
        # 0.95-1.0 of the peak) tilts its choices toward BLAS tiles.
        vec_spent = vector_tile_seconds(rng)
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
            peaks[dtype] = max(peaks[dtype], peak_flops(dtype, rng))
        peaks["float32"] = max(peaks["float32"], *rates.values())
        eff = {key: min(1.0, rate / peaks["float32"]) for key, rate in rates.items()}
        # The vector kernel at full efficiency: its rate on that tile divided by the
        # tile's modelled efficiency.
        vec = measure_vector_kernel(rng, p.tile_seconds, vec_spent)
        t_call = call_seconds()
        copy_bytes = copy_rate(rng)
        # 256 MiB: large enough for the kernel to use huge pages.
        dram = dram_rate(256, 3, bandwidth_threads(saved_threads))
        wake, spin = idle_measurements(saved_threads)
        handoff = handoff_latency()
        p = replace(
            p,
            l2_bytes=host_l2_bytes() or p.l2_bytes,
            llc_bytes=host_llc_bytes() or p.llc_bytes,
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
            copy_bytes_per_second=copy_bytes,
            dram_bytes_per_second=dram,
            calibrated=True,
            source="calibrated",
            measured_at=now(),
            machine=key,
        )
    finally:
        set_num_threads(saved_threads)
    return p
