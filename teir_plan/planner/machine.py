"""What the cost model knows about the machine, and the calibration that measures it.

Before calibration the documented defaults below are used (measured by
``tp.calibrate()`` on a 2-core AVX-512 server).  ``tp.calibrate()`` measures them
in about a second and caches the result on disk (``$TEIR_PLAN_CACHE_DIR`` or
``~/.cache/teir_plan``), keyed by the
CPU model and the thread count; later processes load it.  Set
``TEIR_PLAN_AUTOCALIBRATE=1`` to calibrate automatically on first use.
"""

from __future__ import annotations

import json
import os
import platform
import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

# Tile extents (per axis) at which calibration measures BLAS on one core.  A product
# of per-axis saturation curves missed by 1.6x on tiles with one short axis
# (384 x 24 x 384 ran at 57% of peak, the fit said 92%), so the model reads a table.
GEMM_GRID = (8, 24, 64, 192, 512)

# This machine's table (2-core Xeon, AVX-512, OpenBLAS 0.3.30 through scipy): one
# row per (m, n), the five k of GEMM_GRID across.
DEFAULT_GEMM_EFFICIENCY: tuple[float, ...] = (
    0.033, 0.082, 0.138, 0.216, 0.293,  # m=8, n=8
    0.086, 0.182, 0.255, 0.360, 0.397,  # m=8, n=24
    0.161, 0.243, 0.342, 0.390, 0.437,  # m=8, n=64
    0.222, 0.299, 0.375, 0.434, 0.469,  # m=8, n=192
    0.253, 0.310, 0.399, 0.433, 0.329,  # m=8, n=512
    0.092, 0.207, 0.329, 0.473, 0.453,  # m=24, n=8
    0.206, 0.370, 0.493, 0.608, 0.614,  # m=24, n=24
    0.273, 0.453, 0.582, 0.606, 0.623,  # m=24, n=64
    0.316, 0.536, 0.588, 0.661, 0.588,  # m=24, n=192
    0.319, 0.533, 0.608, 0.614, 0.596,  # m=24, n=512
    0.205, 0.505, 0.730, 0.784, 0.861,  # m=64, n=8
    0.395, 0.725, 0.937, 0.883, 0.856,  # m=64, n=24
    0.514, 0.858, 1.000, 0.876, 0.787,  # m=64, n=64
    0.617, 0.944, 1.000, 0.847, 0.871,  # m=64, n=192
    0.650, 0.945, 0.757, 0.848, 0.912,  # m=64, n=512
    0.309, 0.666, 0.777, 0.800, 0.836,  # m=192, n=8
    0.397, 0.811, 0.921, 0.822, 0.754,  # m=192, n=24
    0.419, 0.854, 1.000, 0.882, 0.914,  # m=192, n=64
    0.423, 0.883, 0.824, 0.985, 1.000,  # m=192, n=192
    0.414, 0.632, 0.847, 1.000, 1.000,  # m=192, n=512
    0.424, 0.662, 0.719, 0.792, 0.431,  # m=512, n=8
    0.488, 0.791, 0.776, 0.818, 0.830,  # m=512, n=24
    0.520, 0.807, 0.814, 0.997, 0.952,  # m=512, n=64
    0.564, 0.656, 0.909, 1.000, 1.000,  # m=512, n=192
    0.326, 0.677, 0.933, 1.000, 1.000,  # m=512, n=512
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

    def gemm_flops(self, dtype: np.dtype) -> float:
        return self.gemm_flops_f32 if np.dtype(dtype).itemsize == 4 else self.gemm_flops_f64


_lock = threading.Lock()
_current: MachineParams | None = None


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
                return None  # a calibration from another grid: measure again
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
    """Measure the cost model's parameters on this machine (about a second) and use them.

    >>> import teir_plan as tp
    >>> params = tp.calibrate(save=False)  # doctest: +SKIP
    """
    global _current
    import teir_plan as tp
    from teir_plan.executor.execute import run_lowered
    from teir_plan.executor.lower import lower

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

    def tile_seconds(m: int, n: int, k: int) -> float:
        reps = max(1, min(4000, int(8e7 / (2 * m * n * k))))
        prog, arrs = gemm_tiles(m, n, k, "float32", reps)
        lowered = lower(prog)
        run_lowered(lowered, arrs)
        return _best(lambda: run_lowered(lowered, arrs), 5) / reps  # noqa: B023

    saved_threads = tp.get_num_threads()
    try:
        tp.set_num_threads(1)
        peaks = {}
        for dtype in ("float32", "float64"):
            prog, arrs = gemm_tiles(768, 768, 768, dtype)
            tp.execute(prog, *arrs)
            peaks[dtype] = 2 * 768**3 / _best(lambda: tp.execute(prog, *arrs), 3)  # noqa: B023
        # BLAS on every tile shape of the grid, as a fraction of the large-tile peak
        # with the call's fixed cost included (the loop nest's own cost per tile,
        # ``tile_seconds``, is the model's separate term).
        eff = []
        for m in GEMM_GRID:
            for n in GEMM_GRID:
                for k in GEMM_GRID:
                    spent = max(tile_seconds(m, n, k) - p.tile_seconds, 1e-9)
                    eff.append(min(1.0, 2 * m * n * k / (peaks["float32"] * spent)))
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
        # Memory: a large copy, read plus write.
        a = np.ones(32 * 1024 * 1024)  # 256 MiB: large enough for the kernel to use huge pages
        b = np.empty_like(a)
        dram = 2 * a.nbytes / _best(lambda: np.copyto(b, a), 3)
        p = replace(
            p,
            l2_bytes=_l2_bytes() or p.l2_bytes,
            gemm_flops_f32=peaks["float32"],
            gemm_flops_f64=peaks["float64"],
            gemm_efficiency=tuple(eff),
            call_seconds=t_call,
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
