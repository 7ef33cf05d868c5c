"""What the cost model knows about the machine, and the calibration that measures it.

Before calibration the documented defaults below are used (measured by
``tp.calibrate()`` on a 2-core Intel Xeon, AVX-512; other CPUs, such as the 2-core AMD
EPYC the project also runs on, should calibrate once).  ``tp.calibrate()`` measures them
in about eight seconds and caches the result on disk (``$TEIR_PLAN_CACHE_DIR`` or
``~/.cache/teir_plan``), keyed by the
CPU model and the thread count; later processes load it.  Set
``TEIR_PLAN_AUTOCALIBRATE=1`` to calibrate automatically on first use.
"""

from __future__ import annotations

import itertools
import json
import os
import platform
import sys
import threading
import time
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import numpy as np

from teir_plan.executor.threads import renew_after_fork

# Tile extents (per axis) at which calibration measures BLAS on one core.  A product
# of per-axis saturation curves missed by 1.6x on tiles with one short axis
# (384 x 24 x 384 ran at 57% of peak, the fit said 92%), so the model reads a table.
GEMM_GRID = (8, 24, 64, 192, 512, 4096)
# Tiles of more flops than this are not measured (seconds each); they take the value
# of the same tile with its 4096s cut to 512, where BLAS is near its peak anyway.
GRID_MAX_FLOPS = 4e9

# This machine's table (2-core Xeon, AVX-512, OpenBLAS 0.3.30 through scipy): one
# row per (m, n), the six k of GEMM_GRID across.
DEFAULT_GEMM_EFFICIENCY: tuple[float, ...] = (
    0.032, 0.079, 0.132, 0.217, 0.277, 0.266,  # m=8, n=8
    0.082, 0.171, 0.255, 0.342, 0.374, 0.365,  # m=8, n=24
    0.150, 0.249, 0.356, 0.394, 0.399, 0.336,  # m=8, n=64
    0.206, 0.283, 0.353, 0.427, 0.454, 0.339,  # m=8, n=192
    0.245, 0.300, 0.361, 0.432, 0.327, 0.320,  # m=8, n=512
    0.270, 0.352, 0.301, 0.337, 0.305, 0.240,  # m=8, n=4096
    0.086, 0.202, 0.298, 0.478, 0.443, 0.459,  # m=24, n=8
    0.209, 0.372, 0.512, 0.634, 0.622, 0.538,  # m=24, n=24
    0.284, 0.463, 0.611, 0.676, 0.678, 0.579,  # m=24, n=64
    0.309, 0.537, 0.661, 0.743, 0.631, 0.624,  # m=24, n=192
    0.319, 0.551, 0.672, 0.624, 0.638, 0.626,  # m=24, n=512
    0.340, 0.504, 0.646, 0.634, 0.602, 0.468,  # m=24, n=4096
    0.210, 0.472, 0.698, 0.761, 0.845, 0.411,  # m=64, n=8
    0.372, 0.697, 0.922, 0.865, 0.853, 0.678,  # m=64, n=24
    0.556, 0.870, 1.000, 0.901, 0.812, 0.756,  # m=64, n=64
    0.625, 0.930, 1.000, 0.870, 0.883, 0.852,  # m=64, n=192
    0.671, 0.970, 0.789, 0.876, 0.926, 0.888,  # m=64, n=512
    0.340, 0.623, 0.804, 0.919, 0.898, 0.712,  # m=64, n=4096
    0.311, 0.663, 0.786, 0.804, 0.833, 0.302,  # m=192, n=8
    0.381, 0.811, 0.930, 0.840, 0.773, 0.628,  # m=192, n=24
    0.424, 0.852, 0.992, 0.872, 0.911, 0.830,  # m=192, n=64
    0.420, 0.890, 0.861, 1.000, 1.000, 1.000,  # m=192, n=192
    0.433, 0.653, 0.881, 1.000, 1.000, 1.000,  # m=192, n=512
    0.329, 0.636, 0.873, 1.000, 1.000, 1.000,  # m=192, n=4096
    0.388, 0.643, 0.734, 0.787, 0.454, 0.256,  # m=512, n=8
    0.453, 0.740, 0.770, 0.790, 0.797, 0.535,  # m=512, n=24
    0.489, 0.774, 0.824, 0.971, 0.958, 0.836,  # m=512, n=64
    0.464, 0.638, 0.895, 1.000, 1.000, 0.975,  # m=512, n=192
    0.311, 0.641, 0.916, 1.000, 1.000, 1.000,  # m=512, n=512
    0.286, 0.631, 0.954, 1.000, 1.000, 1.000,  # m=512, n=4096
    0.542, 0.673, 0.420, 0.274, 0.252, 0.145,  # m=4096, n=8
    0.468, 0.493, 0.648, 0.564, 0.475, 0.344,  # m=4096, n=24
    0.217, 0.551, 0.713, 0.764, 0.770, 0.544,  # m=4096, n=64
    0.213, 0.521, 0.817, 0.948, 1.000, 1.000,  # m=4096, n=192
    0.210, 0.539, 0.911, 1.000, 1.000, 1.000,  # m=4096, n=512
    0.146, 0.471, 0.730, 1.000, 1.000, 1.000,  # m=4096, n=4096
)


@dataclass(frozen=True)
class MachineParams:
    """Parameters of the cost model (all per core unless stated)."""

    gemm_flops_f32: float = 145e9  # BLAS sgemm peak on large tiles, one core
    gemm_flops_f64: float = 75e9
    # BLAS' measured fraction of peak on tiles of GEMM_GRID extents, call included
    # (index ((i_m * G) + i_n) * G + i_k for G = len(GEMM_GRID)); see gemm_efficiency.
    gemm_efficiency: tuple[float, ...] = DEFAULT_GEMM_EFFICIENCY
    loop_flops: float = 1.5e9  # strided jitted loops (BLAS-illegal or tiny tiles)
    # The vector kernel (executor/microkernel.py) on full micro-tiles and a long K, one
    # core (calibration: a 432 x 24 x 36 tile's rate over its modelled efficiency,
    # executor.lower.vec_efficiency; float64 at half the float32 rate, not measured).
    vec_flops_f32: float = 165e9
    vec_flops_f64: float = 82e9
    tile_seconds: float = 15e-9  # loop-nest bookkeeping per tile
    pack_bytes_per_second: float = 6e9  # packing a strided operand into scratch
    copy_bytes_per_second: float = 8e9  # Copy/ReLU tiles, one core
    dram_bytes_per_second: float = 25e9  # aggregate, both cores
    llc_bytes_per_second: float = 60e9  # aggregate
    l2_bytes: int = 2 * 1024 * 1024  # per core
    llc_bytes: int = 32 * 1024 * 1024
    call_seconds: float = 8e-6  # Python-side cost of one executor call
    parallel_seconds: float = 6e-6  # starting a parallel region
    calibrated: bool = False

    def __hash__(self) -> int:
        # The planner's memos are keyed by the parameters; hashing every field (the
        # efficiency table is 216 floats) on each lookup cost more than some lookups save.
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash(tuple(getattr(self, f.name) for f in fields(self)))
            object.__setattr__(self, "_hash", h)
        return h

    def gemm_flops(self, dtype: np.dtype) -> float:
        return self.gemm_flops_f32 if np.dtype(dtype).itemsize == 4 else self.gemm_flops_f64

    def vec_flops(self, dtype: np.dtype) -> float:
        return self.vec_flops_f32 if np.dtype(dtype).itemsize == 4 else self.vec_flops_f64


_lock = threading.Lock()
_current: MachineParams | None = None
renew_after_fork(sys.modules[__name__], "_lock", threading.Lock)


def cache_dir() -> Path:
    return Path(os.environ.get("TEIR_PLAN_CACHE_DIR", Path.home() / ".cache" / "teir_plan"))


def _machine_key() -> str:
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    from teir_plan.executor.threads import get_num_threads

    return f"{model} / {get_num_threads()} threads"


def _cache_file() -> Path:
    return cache_dir() / "machine.json"


def machine_params() -> MachineParams:
    """The parameters in force: calibrated if a calibration is cached, else defaults."""
    global _current
    current = _current  # one reference read: no lock needed on the cached path
    if current is not None:
        return current
    with _lock:
        if _current is not None:
            return _current
        loaded = _load()
    if loaded is None and os.environ.get("TEIR_PLAN_AUTOCALIBRATE") == "1":
        return calibrate()
    with _lock:
        _current = loaded or MachineParams()
        return _current


def _load() -> MachineParams | None:
    try:
        data = json.loads(_cache_file().read_text())
        entry = data.get(_machine_key())
        if entry is None:
            return None
        fields = MachineParams.__dataclass_fields__
        known = {k: v for k, v in entry.items() if k in fields}
        table = known.get("gemm_efficiency")
        if table is not None:
            if len(table) != len(GEMM_GRID) ** 3:
                return None  # a calibration on another grid: not usable
            known["gemm_efficiency"] = tuple(float(v) for v in table)
        return MachineParams(**known)
    except (OSError, ValueError, TypeError):
        return None


def _save(params: MachineParams) -> None:
    path = _cache_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            data = {}
        data[_machine_key()] = asdict(params)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2))
        tmp.replace(path)
    except OSError:
        pass  # a read-only home: calibration still applies to this process


def _best(fn, repeats: int = 5) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def calibrate(save: bool = True) -> MachineParams:
    """Measure the cost model's parameters on this machine (about eight seconds) and use them.

    >>> import teir_plan as tp
    >>> params = tp.calibrate(save=False)  # doctest: +SKIP
    """
    global _current
    import teir_plan as tp
    from teir_plan.executor.execute import run_lowered
    from teir_plan.executor.lower import lower, vec_efficiency

    p = MachineParams()
    rng = np.random.default_rng(0)

    def gemm_tiles(m: int, n: int, k: int, dtype: str, reps: int = 1
                   ) -> tuple[tp.TEIR, list[np.ndarray]]:
        # ``reps`` tiles along a sequential N loop: in0's tile stays in cache while in1
        # and out stream, as in the loop nests the planner builds.
        prog = tp.TEIR.from_fields(
            data_type=dtype, prim_first="zero", prim_main="gemm", prim_last="none",
            dim_types=["n", "m", "n", "k"], exec_types=["seq", "prim", "prim", "prim"],
            dim_sizes=[reps, m, n, k],
            strides=[[0, 1, 0, m], [k * n, 0, k, 1], [m * n, 1, m, 0]],
        )
        arrs = [rng.random(m * k).astype(dtype), rng.random(k * n * reps).astype(dtype),
                np.zeros(m * n * reps, dtype)]
        return prog, arrs

    def tile_seconds(m: int, n: int, k: int, vector_kernel: bool = False) -> float:
        reps = max(1, min(4000, int(8e7 / (2 * m * n * k))))
        prog, arrs = gemm_tiles(m, n, k, "float32", reps)
        # The grid is BLAS' table: tiles the vector kernel would take run on BLAS here.
        lowered = lower(prog, vector_kernel)
        run_lowered(lowered, arrs)
        return _best(lambda: run_lowered(lowered, arrs), 5) / reps  # noqa: B023

    saved_threads = tp.get_num_threads()
    try:
        tp.set_num_threads(1)

        def peak(dtype: str) -> float:
            prog, arrs = gemm_tiles(768, 768, 768, dtype)
            tp.execute(prog, *arrs)
            return 2 * 768**3 / _best(lambda: tp.execute(prog, *arrs), 5)  # noqa: B023

        peaks = {dtype: peak(dtype) for dtype in ("float32", "float64")}
        # BLAS on every tile shape of the grid, as a fraction of the large-tile peak
        # with the call's fixed cost included (the loop nest's own cost per tile,
        # ``tile_seconds``, is the model's separate term).
        rates: dict[tuple[int, int, int], float] = {}
        for m, n, k in itertools.product(GEMM_GRID, repeat=3):  # the table's order
            if 2 * m * n * k > GRID_MAX_FLOPS:
                rates[m, n, k] = rates[min(m, 512), min(n, 512), min(k, 512)]
            else:
                spent = max(tile_seconds(m, n, k) - p.tile_seconds, 1e-9)
                rates[m, n, k] = 2 * m * n * k / spent
        # The peak is measured again after the grid and the higher kept, and no grid tile
        # may beat it: on a shared machine one measurement can catch a neighbour's load
        # (a 768^3 float32 tile measured at 88 GFLOP/s, 175-186 in the calibrations
        # around it), which priced every BLAS tile twice too dear against the vector
        # kernel, whose rate is measured apart.
        for dtype in peaks:
            peaks[dtype] = max(peaks[dtype], peak(dtype))
        peaks["float32"] = max(peaks["float32"], *rates.values())
        eff = {key: min(1.0, rate / peaks["float32"]) for key, rate in rates.items()}
        # The vector kernel at full efficiency: its rate on a tile it takes (one of
        # efbad,cf->abcde's blocks), divided by the tile's modelled efficiency.
        vm, vn, vk = 432, 24, 36
        vec_spent = max(tile_seconds(vm, vn, vk, True) - p.tile_seconds, 1e-9)
        vec_f32 = 2 * vm * vn * vk / vec_spent / vec_efficiency(vm, vn, vk, 4)
        # Python-side cost of a plan step (a pre-checked executor call), from a
        # one-element copy.
        one = tp.TEIR.from_fields(
            data_type="float32", prim_first="none", prim_main="copy", prim_last="none",
            dim_types=[], exec_types=[], dim_sizes=[], strides=[[], []],
        )
        x, y = np.ones(1, np.float32), np.zeros(1, np.float32)
        lowered = lower(one)

        def run200() -> None:
            for _ in range(200):
                run_lowered(lowered, [x, y])

        run200()
        t_call = _best(run200, 3) / 200
        # Copy tiles in cache (Copy programs and packs): a 512 x 512 block into rows of
        # another stride, one core, bytes copied per second (the model's transposes run at
        # 0.7 of it: measured 0.64 here).  The default underestimated this machine's by
        # half and more: packs looked too dear (bhqd,bhkd->bhqk's pack of its second
        # operand was predicted 576 us, measured 178).
        side = 512
        copy_prog = tp.TEIR.from_fields(
            data_type="float32", prim_first="none", prim_main="copy", prim_last="none",
            dim_types=["c", "c"], exec_types=["prim", "prim"], dim_sizes=[side, side],
            strides=[[side, 1], [side + 16, 1]],
        )
        src = rng.random(side * side).astype(np.float32)
        dst = np.zeros((side + 16) * side, np.float32)
        copy_low = lower(copy_prog)
        run_lowered(copy_low, [src, dst])
        copy_rate = src.nbytes / _best(lambda: run_lowered(copy_low, [src, dst]), 5)
        # Memory: a large copy, read plus write.
        a = np.ones(32 * 1024 * 1024)  # 256 MiB: large enough for the kernel to use huge pages
        b = np.empty_like(a)
        dram = 2 * a.nbytes / _best(lambda: np.copyto(b, a), 3)
        p = replace(
            p,
            l2_bytes=_l2_bytes() or p.l2_bytes,
            gemm_flops_f32=peaks["float32"],
            gemm_flops_f64=peaks["float64"],
            gemm_efficiency=tuple(eff.values()),
            vec_flops_f32=vec_f32,
            vec_flops_f64=vec_f32 * p.vec_flops_f64 / p.vec_flops_f32,
            call_seconds=t_call,
            copy_bytes_per_second=copy_rate,
            dram_bytes_per_second=dram,
            calibrated=True,
        )
    finally:
        tp.set_num_threads(saved_threads)
    if save:
        _save(p)
    with _lock:
        _current = p
    return p


def _l2_bytes() -> int | None:
    """This CPU's L2 cache per core as Linux reports it, or None."""
    try:
        for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
            if (index / "level").read_text().strip() == "2":
                text = (index / "size").read_text().strip().upper()
                scale = {"K": 1024, "M": 1024 * 1024}.get(text[-1:], 1)
                return int(text.rstrip("KM")) * scale
    except (OSError, ValueError):
        pass
    return None


def set_machine_params(params: MachineParams | None) -> None:
    """Use ``params`` for planning (None: reload the cached calibration or defaults)."""
    global _current
    with _lock:
        _current = params
