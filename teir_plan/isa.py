"""The vector ISA the executor's kernels are generated for, read from the compile target.

numba compiles for the host CPU (llvmlite's host CPU name and features), or for the CPU
that ``NUMBA_CPU_NAME`` and ``NUMBA_CPU_FEATURES`` name; its disk cache is keyed on the
same pair.  The vector kernels are generated for that target's vector registers: their
width (64 bytes with AVX-512, 32 with AVX2 + FMA, 16 with NEON) and their number (32 zmm,
16 ymm, 32 NEON q), which bound the micro-tile: accumulators, the lines loaded per K
step and one broadcast must all fit in registers, or the K loop spills on every step.
A CPU with none of these (x86 without FMA) runs BLAS and loop tiles only.

``TEIR_PLAN_VECTOR_BYTES`` (64, 32, 16 or 0) narrows the vector width below the target's:
the tests use it to run every variant a host can execute, so that an AVX-512 machine also
checks the code an AVX2 or NEON machine runs.  It can only narrow: a width the target
cannot execute is refused.

This module imports neither numba nor llvmlite until :func:`target` is first called, and
then only llvmlite's host queries: the planner reads the micro-tile shape from here.
"""

from __future__ import annotations

import functools
import os
import platform
from dataclasses import dataclass

import numpy as np

from teir_plan.errors import PlanError

LINE_BYTES = 64  # a cache line on every CPU teir_plan targets (x86-64, ARMv8)

# CPU names numba may be told (NUMBA_CPU_NAME) with an empty feature string, mapped to
# their widest vector ISA; any other name with no features is treated as baseline.
_AVX512_CPUS = ("skylake-avx512", "cascadelake", "cooperlake", "cannonlake", "icelake",
                "tigerlake", "sapphirerapids", "alderlake-avx512", "rocketlake",
                "graniterapids", "emeraldrapids", "znver4", "znver5", "x86-64-v4")
_AVX2_CPUS = ("haswell", "broadwell", "skylake", "alderlake", "raptorlake", "meteorlake",
              "arrowlake", "lunarlake", "gracemont", "znver1", "znver2", "znver3",
              "x86-64-v3", "bdver4")


@dataclass(frozen=True)
class Shapes:
    """The vector kernels' micro-tile shapes one register file holds: the accumulators,
    the vectors loaded per K step and one broadcast must all fit, or the K loop spills
    on every step (BLIS' rule)."""

    rows: int  # output rows of the main micro-tile
    vectors: int  # vector registers along the vector axis of the main micro-tile
    # Rows of the (vectors + 1)-register micro-tile: as many accumulators as the main
    # one has, in an even number of rows.
    wide_rows: int
    # Rows of the transposed kernel's largest micro-tile (one vector wide): its
    # accumulators, the vector of V and a broadcast.
    transposed_rows: int


# By vector registers.  32: 8 x 3 = 24 accumulators + 3 loaded lines + 1 broadcast
# (measured the fastest of 6x4, 8x3, 12x2 and 24x1 on AVX-512's skinny TCCG tiles), 6 x 4
# wide, a transposed tile of 24 rows (26 registers).  16: BLIS' Haswell shape, 6 x 2 =
# 12 + 2 + 1, 4 x 3 wide, 12 transposed rows (14 registers).
_SHAPES = {32: Shapes(8, 3, 6, 24), 16: Shapes(6, 2, 4, 12)}


@dataclass(frozen=True)
class VectorTarget:
    """One vector register file and the micro-tile shapes generated for it.

    ``rows`` x ``vectors`` is the main micro-tile of the vector GEMM kernel (output rows
    by registers along the vector axis), ``wide_rows`` x (``vectors`` + 1) the one for a
    vector axis exactly ``vectors`` + 1 registers long.  Both keep the accumulators,
    the loaded vectors and one broadcast within the register file."""

    name: str  # "avx512", "avx2", "neon", "sse" (16-byte vectors on an x86 with FMA), "none"
    vector_bytes: int  # bytes of one vector register (0: no vector kernel)
    registers: int  # vector registers the compiler may allocate
    cpu: str  # the compile target's CPU name

    @property
    def enabled(self) -> bool:
        """Whether the vector kernels run at all (else BLAS and loop tiles only)."""
        return self.vector_bytes > 0

    @property
    def rows(self) -> int:
        return _SHAPES[self.registers].rows

    @property
    def vectors(self) -> int:
        return _SHAPES[self.registers].vectors

    @property
    def wide_rows(self) -> int:
        return _SHAPES[self.registers].wide_rows

    def lanes(self, itemsize: int) -> int:
        """Elements of ``itemsize`` bytes in one vector register."""
        return self.vector_bytes // itemsize

    def describe(self) -> str:
        if not self.enabled:
            return f"no vector kernel ({self.cpu}: no FMA vector ISA)"
        return (f"{self.name}, {self.vector_bytes}-byte vectors, {self.rows}x{self.vectors} "
                f"micro-tiles")

    @property
    def key(self) -> str:
        """What compiled kernels and calibrations depend on: CPU and vector shape."""
        return f"{self.cpu}-{self.name}-{self.vector_bytes}b-{self.registers}r"


def _llvm_host() -> tuple[str, set[str]]:
    import llvmlite.binding as llvm

    feats = llvm.get_host_cpu_features()
    return llvm.get_host_cpu_name(), {k for k, on in feats.items() if on}


def _parse_features(text: str) -> set[str]:
    return {f[1:] for f in text.split(",") if f.startswith("+")}


def compile_target() -> tuple[str, set[str], str]:
    """The CPU name, enabled features and architecture numba compiles for (numba's own
    rule: NUMBA_CPU_NAME / NUMBA_CPU_FEATURES when set, else the host's; a CPU name of
    ``generic`` with no features is the baseline)."""
    arch = platform.machine().lower()
    name = os.environ.get("NUMBA_CPU_NAME")
    feats_env = os.environ.get("NUMBA_CPU_FEATURES")
    if name is None and feats_env is None:
        host, feats = _llvm_host()
        return host, feats, arch
    cpu = name or _llvm_host()[0]
    if feats_env is None:
        feats_env = "" if cpu.lower() == "generic" else None
    if feats_env is None:
        return cpu, _llvm_host()[1], arch
    feats = _parse_features(feats_env)
    if not feats_env.strip():
        # (every CPU of these lists converts float16 in hardware, F16C: executor/half_bits.py)
        low = cpu.lower()
        if low in _AVX512_CPUS:
            feats = {"avx512f", "avx2", "fma", "f16c"}
        elif low in _AVX2_CPUS:
            feats = {"avx2", "fma", "f16c"}
    return cpu, feats, arch


def _widest(cpu: str, feats: set[str], arch: str) -> VectorTarget:
    if arch in ("aarch64", "arm64"):
        return VectorTarget("neon", 16, 32, cpu)
    if "avx512f" in feats:  # AVX-512F has FMA of its own
        return VectorTarget("avx512", 64, 32, cpu)
    if "avx2" in feats and "fma" in feats:
        return VectorTarget("avx2", 32, 16, cpu)
    return VectorTarget("none", 0, 16, cpu)


def _narrowed(widest: VectorTarget, width: int) -> VectorTarget:
    if width == widest.vector_bytes:
        return widest
    if width == 0:
        return VectorTarget("none", 0, widest.registers, widest.cpu)
    if width not in (16, 32) or width > widest.vector_bytes:
        raise PlanError(
            f"TEIR_PLAN_VECTOR_BYTES={width}: the compile target ({widest.describe()}) "
            f"runs vector widths {variant_widths(widest)}")
    if width == 32:  # AVX2's register file, also on an AVX-512 CPU (ymm0-15 under VEX)
        return VectorTarget("avx2", 32, 16, widest.cpu)
    # 16 bytes: NEON's shape on ARM; on x86 an xmm kernel with FMA (16 registers, or 32
    # with AVX-512's EVEX encoding).
    return VectorTarget("sse", 16, widest.registers if widest.name == "avx512" else 16,
                        widest.cpu)


def variant_widths(widest: VectorTarget) -> tuple[int, ...]:
    """Every vector width the compile target can execute, widest first (0, no vector
    kernel, is always possible)."""
    return tuple(w for w in (64, 32, 16) if 0 < w <= widest.vector_bytes) + (0,)


@functools.lru_cache(maxsize=1)
def widest_target() -> VectorTarget:
    """The widest vector target the compile target supports."""
    return _widest(*compile_target())


@functools.lru_cache(maxsize=1)
def target() -> VectorTarget:
    """The vector target the kernels are generated for in this process (the widest the
    compile target supports, narrowed by ``TEIR_PLAN_VECTOR_BYTES``)."""
    widest = widest_target()
    env = os.environ.get("TEIR_PLAN_VECTOR_BYTES")
    if env is None or env.strip() == "":
        return widest
    try:
        width = int(env)
    except ValueError:
        raise PlanError(f"TEIR_PLAN_VECTOR_BYTES must be 64, 32, 16 or 0, got {env!r}"
                        ) from None
    return _narrowed(widest, width)


@dataclass(frozen=True)
class Blocking:
    """Everything the vector kernels and their tile rules know of one vector target and
    dtype, in one record (BLIS' context): the micro-tile shapes, the load and aliasing
    policy, and the cache blocking limits of a tile.  The kernels compile these in as
    constants, their dispatch is generated from its lists of micro-tiles
    (:attr:`micro_tiles`, :attr:`transposed_row_steps`), and the planner's rules read
    the same record (:func:`blocking`); a new ISA is a register file in ``_SHAPES`` and
    a target in :func:`compile_target`'s table.
    The defaults are the measured values of docs/decisions.md, the same on every target
    measured so far."""

    isa: str  # VectorTarget.name
    dtype: str  # numpy's name of the element type
    vector_bytes: int  # bytes of one vector register (0: no vector kernel)
    itemsize: int
    shapes: Shapes
    # A masked load of a whole vector costs where the mask takes a vector register (AVX2,
    # NEON, SSE: no mask registers): at AVX2 width a 64-wide Gram tile in L2 ran at 91
    # GFLOP/s with its strips' last lines masked, 111 loaded whole.  With AVX-512's mask
    # registers the two ran alike, and one loop body fewer compiles faster.
    full_line_loads: bool
    # A tile's rows (across the vector axis) times K at most this; beyond, BLAS' packed
    # kernels win.
    max_rows_times_k: int = 9216
    # The bytes the broadcast operand's block of a tile may span: it is read again for
    # every micro-tile along the vector axis, so it must stay in L1.
    max_span_bytes: int = 64 * 1024
    # With fewer rows each K step loads nearly as many lines as it multiplies.
    min_rows: int = 4
    # A vector operand of more K rows than this, far apart, is more streams at once than
    # the hardware prefetchers follow.
    stream_k: int = 128
    # The next tile is prefetched when its vector operand spans at most this many bytes
    # of lines (K x lines); more evicts what the tile itself reads.
    next_tile_prefetch_bytes: int = 144 * 1024
    # Cache lines of the next tile one micro-tile call prefetches at most.
    next_tile_lines: int = 3
    # Loads whose address matches an in-flight store's in its low 12 bits wait for that
    # store ("4K aliasing"): the kernel alternates two strips when V's and C's rows fall
    # on the same offsets within a page.
    page_bytes: int = 4096

    @property
    def lanes(self) -> int:
        """Elements in one vector register."""
        return self.vector_bytes // self.itemsize

    @property
    def row_steps(self) -> tuple[int, ...]:
        """The rows of the main micro-tiles a strip takes, largest first (the main rows,
        then 4, 2 and 1)."""
        return tuple(sorted({self.shapes.rows, 4, 2, 1}, reverse=True))

    @property
    def wide_row_steps(self) -> tuple[int, ...]:
        """The rows of the wide ((vectors + 1)-register) micro-tiles, largest first."""
        return tuple(sorted({self.shapes.wide_rows, 4, 2, 1}, reverse=True))

    @property
    def micro_tiles(self) -> tuple[tuple[int, int], ...]:
        """Every (rows, vector registers) micro-tile the vector kernel runs: the main
        rows' steps by 1 to ``vectors`` registers (a strip's last lines), and the wide
        ones.  The kernel's dispatch is generated from this list (executor/micro_ir.py)."""
        main = [(r, v) for r in self.row_steps for v in range(self.shapes.vectors, 0, -1)]
        return (*main, *((r, self.shapes.vectors + 1) for r in self.wide_row_steps))

    @property
    def transposed_row_steps(self) -> tuple[int, ...]:
        """The rows of the transposed kernel's micro-tiles, largest first: multiples of
        4 up to ``transposed_rows`` (rows computed and not stored cost their share of the
        multiply-adds, so a tile takes the next multiple of 4 above its rows)."""
        return tuple(range(self.shapes.transposed_rows, 0, -4))

    def registers_used(self) -> tuple[int, int, int]:
        """Vector registers the main, the wide and the transposed micro-tiles hold at
        once: accumulators, loaded vectors and one broadcast (two for the transposed
        tile's V vector and broadcast)."""
        sh = self.shapes
        return (sh.rows * sh.vectors + sh.vectors + 1,
                sh.wide_rows * (sh.vectors + 1) + sh.vectors + 2,
                sh.transposed_rows + 2)


# The element types the vector kernels take: their lanes are float lanes.
BLOCKING_DTYPES = ("float32", "float64")


@functools.lru_cache(maxsize=16)
def blocking(dtype: str = "float32", tgt: VectorTarget | None = None) -> Blocking:
    """The blocking record of ``dtype`` on ``tgt`` (the kernels' target by default).

    >>> b = blocking("float32", VectorTarget("avx2", 32, 16, "znver3"))
    >>> (b.shapes.rows, b.shapes.vectors, b.lanes, b.full_line_loads)
    (6, 2, 8, True)
    """
    if dtype not in BLOCKING_DTYPES:
        raise PlanError(f"no vector kernel takes {dtype} elements (they take "
                        f"{', '.join(BLOCKING_DTYPES)})")
    t = target() if tgt is None else tgt
    return Blocking(isa=t.name, dtype=dtype, vector_bytes=t.vector_bytes,
                    itemsize=np.dtype(dtype).itemsize, shapes=_SHAPES[t.registers],
                    full_line_loads=t.name != "avx512")
