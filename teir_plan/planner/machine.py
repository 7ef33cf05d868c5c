"""What the cost model knows about the machine, and the calibration that measures it.

Before calibration the documented defaults below are used (a 2-core AVX2
server).  ``tp.calibrate()`` measures them in well under 30 s and caches the
result on disk (``$TEIR_PLAN_CACHE_DIR`` or ``~/.cache/teir_plan``), keyed by the
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

    gemm_flops_f32: float = 60e9  # BLAS sgemm peak on large tiles, one core
    gemm_flops_f64: float = 30e9
    gemm_half_m: float = 12.0  # tile extent at which BLAS reaches half its peak along M
    gemm_half_n: float = 6.0
    gemm_half_k: float = 24.0
    gemm_call_seconds: float = 0.4e-6  # fixed cost of one BLAS call from the executor
    loop_flops: float = 1.5e9  # strided jitted loops (BLAS-illegal or tiny tiles)
    tile_seconds: float = 15e-9  # loop-nest bookkeeping per tile
    pack_bytes_per_second: float = 6e9  # packing a strided operand into scratch
    copy_bytes_per_second: float = 8e9  # Copy/ReLU tiles, one core
    dram_bytes_per_second: float = 20e9  # aggregate, both cores
    llc_bytes_per_second: float = 60e9  # aggregate
    l2_bytes: int = 512 * 1024  # per core
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
    """Measure the cost model's parameters on this machine (about 10 s) and use them.

    >>> import teir_plan as tp
    >>> params = tp.calibrate(save=False)  # doctest: +SKIP
    """
    global _current
    import teir_plan as tp
    from teir_plan.executor.execute import run_lowered
    from teir_plan.executor.lower import lower
    from teir_plan.executor.threads import set_blas_threads

    p = MachineParams()
    rng = np.random.default_rng(0)

    def gemm_prog(m: int, n: int, k: int, dtype: str) -> tuple[tp.TEIR, list[np.ndarray]]:
        prog = tp.TEIR.from_fields(
            data_type=dtype, prim_first="zero", prim_main="gemm", prim_last="none",
            dim_types=["m", "n", "k"], exec_types=["prim"] * 3, dim_sizes=[m, n, k],
            strides=[[1, 0, m], [0, k, 1], [1, m, 0]],
        )
        arrs = [rng.random(m * k).astype(dtype), rng.random(k * n).astype(dtype),
                np.zeros(m * n, dtype)]
        return prog, arrs

    saved_threads = tp.get_num_threads()
    try:
        tp.set_num_threads(1)
        set_blas_threads(1)
        peaks = {}
        for dtype in ("float32", "float64"):
            prog, arrs = gemm_prog(768, 768, 768, dtype)
            tp.execute(prog, *arrs)
            peaks[dtype] = 2 * 768**3 / _best(lambda: tp.execute(prog, *arrs), 3)  # noqa: B023
        # Small tiles: the fraction of peak they reach fixes the half-saturation extents.
        prog, arrs = gemm_prog(32, 32, 32, "float32")
        small = lower(prog)
        calls = 400

        def many() -> None:
            for _ in range(calls):
                run_lowered(small, arrs)

        many()
        t_small = _best(many, 3) / calls
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
        flops_small = 2 * 32**3
        eff_small = min(0.95, flops_small / max(t_small - t_call, 1e-9) / peaks["float32"])
        # eff = (32 / (32 + h))^3 for a common half extent h.
        h = 32 * (eff_small ** (-1 / 3) - 1)
        # Memory: a large copy, read plus write.
        a = rng.random(16 * 1024 * 1024 // 8 * 4)
        b = np.empty_like(a)
        dram = 2 * a.nbytes / _best(lambda: np.copyto(b, a), 3)
        p = replace(
            p,
            gemm_flops_f32=peaks["float32"],
            gemm_flops_f64=peaks["float64"],
            gemm_half_m=max(1.0, h),
            gemm_half_n=max(1.0, h / 2),
            gemm_half_k=max(1.0, 2 * h),
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


def set_machine_params(params: MachineParams | None) -> None:
    """Use ``params`` for planning (None: reload the cached calibration or defaults)."""
    global _current
    with _lock:
        _current = params
