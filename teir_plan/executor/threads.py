"""Thread counts for the executor's parallel loops and for BLAS.

One setting governs both: parallel TEIR axes run on that many numba threads,
each calling single-threaded BLAS; a program without parallel axes lets BLAS
use that many threads itself.  The cores are never oversubscribed.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import numba

from teir_plan.errors import PlanError

_lock = threading.Lock()
_num_threads: int = getattr(numba.config, "NUMBA_NUM_THREADS")  # noqa: B009
_controller = None


def set_num_threads(n: int) -> None:
    """Use ``n`` threads (1 <= n <= the number numba was started with)."""
    global _num_threads
    limit: int = getattr(numba.config, "NUMBA_NUM_THREADS")  # noqa: B009
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= limit:
        raise PlanError(f"set_num_threads: n must be an integer in 1..{limit}, got {n!r}")
    _num_threads = n


def get_num_threads() -> int:
    return _num_threads


def _blas_controller():  # type: ignore[no-untyped-def]
    global _controller
    if _controller is None:
        import scipy.linalg.cython_blas  # noqa: F401  (loads scipy's BLAS: numpy's is loaded)
        from threadpoolctl import ThreadpoolController

        _controller = ThreadpoolController().select(user_api="blas")
    return _controller


_active = 0  # executor calls inside blas_threads() right now
_baseline: list[int] = []  # each BLAS library's thread count outside those calls


@contextmanager
def blas_threads(n: int) -> Iterator[None]:
    """BLAS uses ``n`` threads inside the block.  When the last concurrent block ends,
    every BLAS library gets back the thread count it had before the first began, so
    the caller's own numpy.matmul (the same OpenBLAS) keeps the threads it had."""
    global _active, _baseline
    libs = _blas_controller().lib_controllers
    with _lock:
        if _active == 0:
            _baseline = [lib.num_threads for lib in libs]
        _active += 1
        for lib in libs:
            if lib.num_threads != n:
                lib.set_num_threads(n)
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0:
                for lib, count in zip(libs, _baseline):
                    if lib.num_threads != count:
                        lib.set_num_threads(count)


@contextmanager
def numba_threads(n: int) -> Iterator[None]:
    """numba's thread count is per calling thread: set it for this call."""
    old = numba.get_num_threads()
    if old != n:
        numba.set_num_threads(n)
    try:
        yield
    finally:
        if old != n:
            numba.set_num_threads(old)
