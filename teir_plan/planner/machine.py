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


@dataclass(frozen=True)
class MachineParams:
    """Parameters of the cost model (all per core unless stated)."""

    gemm_flops_f32: float = 160e9  # BLAS sgemm peak on large tiles, one core
    gemm_flops_f64: float = 75e9
    gemm_half_m: float = 7.0  # tile extent at which BLAS reaches half its peak along M
    gemm_half_n: float = 1.0
    gemm_half_k: float = 9.0
    gemm_call_seconds: float = 0.2e-6  # fixed cost of one BLAS call from the executor
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
        return MachineParams(**{k: v for k, v in entry.items() if k in fields})
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
        reps = max(1, min(2000, int(4e7 / (2 * m * n * k))))
        prog, arrs = gemm_tiles(m, n, k, "float32", reps)
        lowered = lower(prog)
        run_lowered(lowered, arrs)
        return _best(lambda: run_lowered(lowered, arrs), 3) / reps  # noqa: B023

    saved_threads = tp.get_num_threads()
    try:
        tp.set_num_threads(1)
        peaks = {}
        for dtype in ("float32", "float64"):
            prog, arrs = gemm_tiles(768, 768, 768, dtype)
            tp.execute(prog, *arrs)
            peaks[dtype] = 2 * 768**3 / _best(lambda: tp.execute(prog, *arrs), 3)  # noqa: B023
        # Tile shapes small along one or more of m, n, k (down to a few thousand flops):
        # the seconds each takes fix the half-saturation extents and the fixed cost of a
        # call (a least-squares fit of the model, with the large-tile peak held fixed).
        shapes = [(m, n, k) for m in (8, 32, 128, 1024) for n in (8, 64) for k in (8, 64)]
        seconds = np.array([tile_seconds(*shape) for shape in shapes])
        *half, gemm_call = _fit_tile_model(np.array(shapes, dtype=float), seconds,
                                           peaks["float32"], p.tile_seconds)
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
            gemm_half_m=half[0],
            gemm_half_n=half[1],
            gemm_half_k=half[2],
            gemm_call_seconds=gemm_call,
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


def _fit_tile_model(shapes: np.ndarray, seconds: np.ndarray, peak: float, per_tile: float
                    ) -> tuple[float, float, float, float]:
    """Half-saturation extents (m, n, k) and the fixed seconds of a BLAS call that best
    explain the measured ``seconds`` per tile of ``shapes`` (rows m, n, k) as the cost
    model computes them: ``call + 2mnk / (peak x prod(x / (x + half_x))) + per_tile``
    (a least-squares fit in log space)."""
    from scipy.optimize import least_squares

    flops = 2 * np.prod(shapes, axis=1)

    def residual(logp: np.ndarray) -> np.ndarray:
        h, call = np.exp(logp[:3]), np.exp(logp[3])
        model = call + flops / (peak * np.prod(shapes / (shapes + h), axis=1)) + per_tile
        return np.log(model) - np.log(seconds)

    start = np.log([12.0, 6.0, 24.0, 1e-7])
    fit = least_squares(residual, start, bounds=(np.log([0.5, 0.5, 0.5, 1e-9]),
                                                 np.log([1e4, 1e4, 1e4, 1e-4])))
    m, n, k, call = (float(v) for v in np.exp(fit.x))
    return m, n, k, call


def set_machine_params(params: MachineParams | None) -> None:
    """Use ``params`` for planning (None: reload the cached calibration or defaults)."""
    global _current
    with _lock:
        _current = params
