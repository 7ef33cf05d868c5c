"""Shared helpers for the benchmark scripts: timing, machine description, results files."""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from benchmarks import peers

RESULTS = Path(__file__).parent / "results"


# A pause before each system's timings where systems take turns: OpenBLAS' threads spin
# about 0.1 s after a multi-threaded call, on the cores the next system needs (tp's
# ik,k->i right after numpy's ki,k->i took 9.5 ms, after a pause 6.0; tp's Tucker step
# after a peer's BLAS calls 4-8x its time alone).
PAUSE_SECONDS = 0.25


def timeit(fn: Callable[[], object], repeats: int = 5, warmup: int = 1) -> tuple[float, float]:
    """(best, median) seconds over ``repeats`` runs after ``warmup`` runs.

    The benchmarks time each system's calls back to back, not in turns with the other
    systems' (only tp's own variants, one thread pool, take turns: tccg.timeit_in_turns):
    a runtime's threads keep spinning for a while after its call returns, so
    in turns each system pays for the one before (tried: numpy's ij,jk->ik at 256 went
    from 167 to 2736 us, and tp's bij,bjk->bik 64x128x128 from 1.1 to 6.8 ms)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times), float(np.median(times))


def machine(with_peers: bool = False) -> dict:
    """The machine, the library versions and the threads a run measured with;
    ``with_peers``: also TBLIS's and JAX's versions and threads (benchmarks/peers.py) and
    which optional peers are not installed, for the benchmarks that run them."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    import numba
    import scipy

    import teir_plan as tp
    from teir_plan.blaslib import numpy_openblas_kernels
    from teir_plan.isa import target

    vec = target()
    # The machine class a results file belongs to (docs/scripts/generate.py keeps one
    # table per class): the CPU, the vector ISA the kernels were generated for and the
    # threads, and where the cost model's parameters came from (a full calibration, a
    # first-use estimate, ISA-derived defaults or the reference machine's): plans ranked
    # with another machine's numbers are not this machine's best.
    params = tp.machine_params()
    info = {
        "cpu": cpu,
        "isa": vec.name,
        "vector target": vec.key,
        "params": params.source,
        "cores": os.cpu_count(),
        "threads": tp.get_num_threads(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "numba": numba.__version__,
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }
    for mod in ("opt_einsum", "torch", "etops") + (("cotengra",) if with_peers else ()):
        try:
            info[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001 - an optional peer
            info[mod] = None
    if with_peers:
        info |= peers.describe()
        # Said in the header, so that a missing column reads as a peer absent from the run.
        absent = [m for m in ("torch", "etops", "cotengra", "pytblis", "jax")
                  if info[m] is None]
        if absent:
            info["not installed"] = " ".join(absent)
    # The kernels numpy's OpenBLAS runs (the BLAS of numpy, opt_einsum, cotengra and of
    # tp's BLAS tiles): OPENBLAS_CORETYPE can hold it below the CPU (Haswell's AVX2
    # kernels on an AVX-512 CPU run at half its rate), and a comparison is then with a
    # slower numpy than users of that CPU have.
    info["openblas kernels"] = numpy_openblas_kernels()
    # Variables that narrow what the libraries run (a run at AVX2 width on a wider CPU):
    # the numbers are then that width's, and the results say so.
    narrowed = [f"{k}={os.environ[k]}" for k in _NARROWING if k in os.environ]
    if narrowed:
        info["narrowed by"] = " ".join(narrowed)
        if "OPENBLAS_CORETYPE" in os.environ and vec.name == "avx512":
            sys.stderr.write(
                "warning: OPENBLAS_CORETYPE holds numpy's OpenBLAS at "
                f"{info['openblas kernels']} kernels while tp runs AVX-512 ones: the peers "
                "are slower than for users of this CPU (unset OPENBLAS_CORETYPE and "
                "OPENBLAS_L2_SIZE for this command, as make bench does)\n")
    return info


_NARROWING = ("NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES", "TEIR_PLAN_VECTOR_BYTES",
              "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "ATEN_CPU_CAPABILITY",
              "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")


def progress(i: int, n: int, label: str) -> None:
    width = 30
    done = int(width * i / max(n, 1))
    sys.stderr.write(f"\r[{'#' * done}{'.' * (width - done)}] {i}/{n} {label[:40]:40s}")
    if i == n:
        sys.stderr.write("\n")
    sys.stderr.flush()


def write_results(name: str, data: dict, markdown: str, complete: bool = True) -> Path:
    """Write ``name``'s results as ``{name}-latest.json`` and ``.md``, the files the docs
    are generated from; a run of a subset of the cases, or one still in progress
    (``complete=False``), goes to ``{name}-partial.*`` (not tracked) instead, so that it
    never replaces a full table."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = f"{name}-latest" if complete else f"{name}-partial"
    (RESULTS / f"{stem}.json").write_text(json.dumps(data, indent=2, default=str))
    path = RESULTS / f"{stem}.md"
    path.write_text(markdown)
    return path


def md_table(header: list[str], rows: list[list[object]]) -> str:
    def fmt(v: object) -> str:
        return f"{v:.2f}" if isinstance(v, float) else ("-" if v is None else str(v))

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(fmt(v) for v in r) + " |" for r in rows]
    return "\n".join(lines)


def machine_md(info: dict) -> str:
    return "Machine: " + ", ".join(f"{k} {v}" for k, v in info.items() if v is not None)
