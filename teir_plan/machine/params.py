"""The cost model's machine parameters: one frozen record (:class:`MachineParams`), whose
field defaults are the reference machine's.

Four sources of parameters, recorded in every plan (``MachineParams.source``) and named by
``plan.explain()``:

* ``"calibrated"``: ``tp.calibrate()`` measured them (15-40 seconds, every field below
  that matters most, the BLAS efficiency table included).
* ``"first-use"``: nothing was cached for this machine, so the first planning call
  measured what plans depend on most in about a second (:mod:`teir_plan.calibration`:
  BLAS' float32/float64 peak, memory bandwidth, the copy rate, the call overhead, the
  idle threads' wake cost, the cross-core handoff, L2 from sysfs), scaled the rest from
  the reference machine, cached it and warned once.  The vector kernel's rate and K
  steps are measured when the first float32 plan that runs on it is made (its compile,
  5-25 s on a fresh install, is then paid by that plan, not by every first call).
* ``"isa"``: nothing measured (``TEIR_PLAN_AUTOCALIBRATE=0``): rates derived from the
  vector ISA (:func:`teir_plan.machine.defaults.default_params`: vector width, FMA,
  threads).
* ``"reference"``: ``MachineParams.reference()``, one 2-core Intel Xeon's calibration
  (AVX-512), fixed: the test suite and the docs' example plan against these so that their
  outcomes do not depend on the machine (``TEIR_PLAN_AUTOCALIBRATE=reference``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np

from teir_plan.errors import PlanError
from teir_plan.machine.tables import (
    GEMM_FORMS,
    GEMM_GRID,
    default_gemm_efficiency,
    with_default_forms,
)
from teir_plan.tiles import real_dtype

# Where a MachineParams' values come from (see the module docstring).
SOURCES = ("reference", "isa", "first-use", "calibrated")


@dataclass(frozen=True)
class MachineParams:
    """Parameters of the cost model (all per core unless stated).

    The field defaults are the reference parameters (``MachineParams.reference()``): the
    median of three ``tp.calibrate()`` runs on a 2-core Intel Xeon (Emerald Rapids,
    AVX-512, numpy's OpenBLAS 0.3.31), not a description of any other machine."""

    gemm_flops_f32: float = 188e9  # BLAS sgemm peak on large tiles, one core
    gemm_flops_f64: float = 89e9
    # BLAS' measured fraction of peak on tiles of GEMM_GRID extents in each of the
    # GEMM_FORMS, call included (index ((form * G + i_m) * G + i_n) * G + i_k for
    # G = len(GEMM_GRID)); see cost.gemm_efficiency.
    # (The reference table, package data read on first use.)
    gemm_efficiency: tuple[float, ...] = field(default_factory=default_gemm_efficiency)
    loop_flops: float = 1.5e9  # strided jitted loops (BLAS-illegal or tiny tiles)
    # The vector kernel (executor/microkernel.py) on full micro-tiles and a long K, one
    # core (calibration: a 432 x 24 x 36 tile's rate over its modelled efficiency,
    # executor.lower.vec_efficiency; float64 at half the float32 rate, not measured).
    vec_flops_f32: float = 185e9
    vec_flops_f64: float = 92e9
    # The vector kernel's micro-tile output loads and stores, in K steps (vec.k_share):
    # measured by both calibrations from its rates at K 36 and 192 (0.2-2.7 on an AMD
    # EPYC Zen 5 virtual machine with AVX-512 code, by the hour; 0 with AVX2 code); the
    # reference's fitted value.
    vec_k_steps: float = 8.0
    # The vector kernel's set-up per tile and per strip of micro-tiles along its vector
    # axis (vec.vec_overhead_seconds), beyond tile_seconds: measured by both
    # calibrations from tiles of few and many rows (26-51 ns and 2-3 ns on an AMD EPYC
    # Zen 5 with AVX-512 code); 0 on the reference, which did not measure them.
    vec_tile_seconds: float = 0.0
    vec_strip_seconds: float = 0.0
    tile_seconds: float = 15e-9  # loop-nest bookkeeping per tile
    pack_bytes_per_second: float = 6e9  # packing a strided operand into scratch
    copy_bytes_per_second: float = 24e9  # Copy/ReLU tiles and packs in cache, one core
    dram_bytes_per_second: float = 20e9  # aggregate, both cores
    llc_bytes_per_second: float = 60e9  # aggregate
    l2_bytes: int = 2 * 1024 * 1024  # per core
    llc_bytes: int = 32 * 1024 * 1024
    call_seconds: float = 1.9e-6  # Python-side cost of one executor call
    parallel_seconds: float = 6e-6  # starting a parallel region
    # The executor's worker threads spin for ``spin_seconds`` after a parallel region
    # (executor/threads.py: OMP_SPIN_COUNT), then sleep; a region that must wake them
    # costs ``wake_seconds`` more (a call after a millisecond or two of other work: more
    # after longer).  Both calibrations measure them; these defaults are a 2-core AMD
    # EPYC (Zen 5) virtual machine's, 20-50 us and 0.2-0.25 ms, not the reference Xeon's.
    wake_seconds: float = 3e-5
    spin_seconds: float = 2e-4
    # A core's wait for a cache line another core just wrote (planner/handoff.py: a tree
    # step reading what the step before wrote on other workers).  Both calibrations
    # measure it; the default is the same AMD EPYC virtual machine's, 136-141 ns (a line
    # in its own L3: 87), not the reference Xeon's.
    handoff_seconds: float = 1.4e-7
    calibrated: bool = False  # measured by the full tp.calibrate()
    # False: a first-use estimate whose vector-kernel fields (vec_*) are still scaled from
    # the BLAS peak; the first plan made for a float32 call that runs on the loop walker
    # measures them (calibration.quick.measure_vector_now).
    vector_measured: bool = True
    # Where the values come from (one of SOURCES), when they were measured (UTC, "" if
    # not), and for which machine (CPU / vector ISA / threads): recorded in every plan,
    # so that explain() says which parameters ranked it.
    source: str = "reference"
    measured_at: str = ""
    machine: str = ""
    # The file they were read from (TEIR_PLAN_MACHINE), "" if not from a file: named by
    # explain() beside the source.
    loaded_from: str = ""

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise PlanError(f"MachineParams: source must be one of {SOURCES}, "
                            f"got {self.source!r}")
        table = tuple(float(v) for v in self.gemm_efficiency)
        size = len(GEMM_GRID) ** 3
        if len(table) == size:  # an N,N table alone (a calibration from before the forms)
            table = with_default_forms(table)
        if len(table) != len(GEMM_FORMS) * size:
            raise PlanError(
                f"MachineParams: gemm_efficiency must have {len(GEMM_FORMS) * size} entries "
                f"({len(GEMM_FORMS)} forms x {size} tile shapes), or {size} (N,N alone), "
                f"got {len(table)}")
        object.__setattr__(self, "gemm_efficiency", table)

    @classmethod
    def reference(cls) -> MachineParams:
        """The reference parameters: one 2-core Intel Xeon's calibration (AVX-512), the
        same on every machine (what the test suite and the docs' example plan against)."""
        return cls()

    def __hash__(self) -> int:
        # The planner's memos are keyed by the parameters; hashing every field (the
        # efficiency table is 864 floats) on each lookup cost more than some lookups save.
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash(tuple(getattr(self, f.name) for f in fields(self)))
            object.__setattr__(self, "_hash", h)
        return h

    def describe_source(self) -> str:
        """One line: which parameters these are (what explain() prints)."""
        if self.loaded_from:
            return (f"{self._describe_measurement()}, loaded from {self.loaded_from} "
                    f"(TEIR_PLAN_MACHINE)")
        return self._describe_measurement()

    def _describe_measurement(self) -> str:
        where = f" for {self.machine}" if self.machine else ""
        when = f" at {self.measured_at}" if self.measured_at else ""
        if self.source == "calibrated":
            return f"calibrated by tp.calibrate(){when}{where} (full measurement)"
        if self.source == "first-use":
            vector = ("" if self.vector_measured else "; the vector kernel's rate scaled "
                      "from BLAS' until a float32 plan runs on it")
            return (f"first-use estimate measured{when}{where} (BLAS peak, memory, copy "
                    f"rate, call overhead; the rest scaled from the reference{vector}; "
                    f"tp.calibrate() measures fully)")
        if self.source == "isa":
            return (f"defaults derived from the vector ISA{where} (nothing measured; "
                    f"TEIR_PLAN_AUTOCALIBRATE=0)")
        return ("reference parameters (a 2-core Intel Xeon's calibration, AVX-512; fixed, "
                "not measured on this machine)")

    def first_read_rate(self, nbytes: float) -> float:
        """Bytes per second of the first reads of ``nbytes`` that a call runs on again and
        again (a loop, a layer run every step, a benchmark): from the LLC if they fit
        there, else from DRAM."""
        return self.llc_bytes_per_second if nbytes <= self.llc_bytes else (
            self.dram_bytes_per_second)

    def gemm_flops(self, dtype: np.dtype) -> float:
        """BLAS' rate in real flops: complex64's cgemm runs at about sgemm's, complex128's
        zgemm at dgemm's (tiles.flop_factor prices the complex multiply-add)."""
        return self.gemm_flops_f32 if real_dtype(dtype).itemsize == 4 else self.gemm_flops_f64

    def vec_flops(self, dtype: np.dtype) -> float:
        return self.vec_flops_f32 if real_dtype(dtype).itemsize == 4 else self.vec_flops_f64

