"""Machine parameters derived from the vector ISA when nothing is measured
(:func:`default_params`), and the host's cache sizes as Linux reports them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from teir_plan.errors import PlanError
from teir_plan.machine.params import MachineParams
from teir_plan.machine.tables import blas_efficiency_table

if TYPE_CHECKING:
    from teir_plan.isa import VectorTarget

# Two FMA pipes per core on the cores teir_plan targets (Intel's AVX-512 server and
# AVX2 client cores, AMD Zen 2-5, Arm Neoverse N1/N2): the lanes are what differ.  (Zen 1
# splits 256-bit FMAs in two, Neoverse V1 and Apple cores have four 128-bit pipes: a
# calibration corrects those.)
FMA_PIPES = 2
# Cycles per second times BLAS' share of the theoretical peak on large tiles, as one
# number: the reference Xeon's 188 GFLOP/s over its 2 pipes x 16 float32 lanes x 2 flops.
# The same assumption gives 94 GFLOP/s a core for AVX2, as calibrated on a 2-core AMD
# EPYC (docs/cost-model.md).
EFFECTIVE_CLOCK_HZ = 188e9 / (FMA_PIPES * 16 * 2)
# Aggregate memory rates grow with the cores that share them, up to what one socket's
# channels give: the reference's 10 GB/s of DRAM and 30 GB/s of LLC per core, up to 16.
BANDWIDTH_CORES_CAP = 16


def _flops_per_cycle(target: VectorTarget, itemsize: int) -> float:
    """Peak flops per cycle of one core for elements of ``itemsize`` bytes: FMA pipes x
    lanes x 2.  Without an FMA vector ISA (``none``) BLAS runs 16-byte SSE vectors on a
    multiply and an add pipe: lanes x 2 flops, one pipe's worth."""
    if not target.enabled:
        return 16 // itemsize * 2
    return FMA_PIPES * target.lanes(itemsize) * 2


def default_params(target: VectorTarget | None = None, threads: int | None = None,
                   l2_bytes: int | None = None, blas_target: VectorTarget | None = None
                   ) -> MachineParams:
    """Parameters derived from the vector ISA when nothing is measured: peak =
    FMA pipes x lanes x 2 x an effective clock; the reference's ratios for what hangs on
    the peak (the vector kernel's rate, float64's), the efficiency table measured with
    BLAS kernels of ``blas_target``'s width (:func:`blas_efficiency_table`), the
    reference's per-core memory rates times the threads.  The
    Python-side, loop and copy costs are the reference's: they depend on the interpreter
    and the caches more than on the vector width.

    ``target`` is the vector kernels' (this process's, narrowed by
    ``TEIR_PLAN_VECTOR_BYTES``, by default), ``blas_target`` BLAS' (the widest the CPU
    runs, by default: ``TEIR_PLAN_VECTOR_BYTES`` narrows teir_plan's kernels, not BLAS;
    ``target`` when that is given); ``threads`` and ``l2_bytes`` default to this
    process's (L2 from sysfs)."""
    from teir_plan.executor.threads import get_num_threads
    from teir_plan.isa import target as host_target
    from teir_plan.isa import widest_target

    ref = MachineParams.reference()
    host = target is None
    tgt = host_target() if target is None else target
    blas = blas_target or (widest_target() if host else tgt)
    n = get_num_threads() if threads is None else threads
    if n < 1:
        raise PlanError(f"default_params: threads must be at least 1, got {n}")
    f64_of_half = ref.gemm_flops_f64 / (ref.gemm_flops_f32 / 2)  # dgemm's share of half
    ref_cores = 2  # the reference machine's
    share = min(n, BANDWIDTH_CORES_CAP) / ref_cores
    l2 = l2_bytes if l2_bytes is not None else ((host_l2_bytes() if host else None) or ref.l2_bytes)
    llc = (host_llc_bytes() if host else None) or ref.llc_bytes
    return replace(
        ref,
        gemm_flops_f32=_flops_per_cycle(blas, 4) * EFFECTIVE_CLOCK_HZ,
        gemm_flops_f64=_flops_per_cycle(blas, 8) * EFFECTIVE_CLOCK_HZ * f64_of_half,
        gemm_efficiency=blas_efficiency_table(blas.vector_bytes),
        vec_flops_f32=_flops_per_cycle(tgt, 4) * EFFECTIVE_CLOCK_HZ * (
            ref.vec_flops_f32 / ref.gemm_flops_f32),
        vec_flops_f64=_flops_per_cycle(tgt, 8) * EFFECTIVE_CLOCK_HZ * f64_of_half * (
            ref.vec_flops_f64 / ref.gemm_flops_f64),
        dram_bytes_per_second=ref.dram_bytes_per_second * share,
        llc_bytes_per_second=ref.llc_bytes_per_second * share,
        l2_bytes=l2,
        llc_bytes=llc,
        source="isa",
        machine=f"{tgt.describe()} ({tgt.cpu}), {n} threads",
    )


def _cache_bytes(level: int) -> int | None:
    """The size of cpu0's cache of ``level`` as Linux reports it (L2: a core's; the last
    level: what cpu0 shares), or None."""
    try:
        for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
            if (index / "level").read_text().strip() == str(level):
                text = (index / "size").read_text().strip().upper()
                scale = {"K": 1024, "M": 1024 * 1024}.get(text[-1:], 1)
                return int(text.rstrip("KM")) * scale
    except (OSError, ValueError):
        pass
    return None


def host_l2_bytes() -> int | None:
    """This CPU's L2 cache per core as Linux reports it, or None."""
    return _cache_bytes(2)


def host_llc_bytes() -> int | None:
    """This CPU's last-level cache (L3, else L2) as Linux reports it, or None."""
    return _cache_bytes(3) or _cache_bytes(2)
