"""BLAS' own thread count around the executor's calls.

The executor runs its threads itself and calls BLAS single-threaded inside them
(threads.py says why); ``blas_threads(1)`` narrows every BLAS library that would compete
for the cores for the duration of a call and gives each back the count it had, so the
caller's own numpy.matmul (the same OpenBLAS) keeps its threads."""

from __future__ import annotations

import ctypes
import itertools
import os
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import NamedTuple

_lock = threading.Lock()  # guards the counts below across the caller's threads


class _BlasLib(NamedTuple):
    """One loaded BLAS library's thread-count getter and setter."""

    get: Callable[[], int]
    set: Callable[[int], object]


# OpenBLAS' exported names: scipy's and numpy's wheels add a prefix and a suffix.
_OPENBLAS_AFFIXES = tuple(itertools.product(("", "scipy_"), ("", "64_", "_64")))


def _openblas_functions(dynlib: object) -> _BlasLib | None:
    """OpenBLAS' own openblas_get/set_num_threads in ``dynlib`` (a ctypes library)."""
    for prefix, suffix in _OPENBLAS_AFFIXES:
        get = getattr(dynlib, f"{prefix}openblas_get_num_threads{suffix}", None)
        put = getattr(dynlib, f"{prefix}openblas_set_num_threads{suffix}", None)
        if get is not None and put is not None:
            get.restype, get.argtypes = ctypes.c_int, []
            put.restype, put.argtypes = None, [ctypes.c_int]
            return _BlasLib(get, put)
    return None


def _blas_libs() -> list[_BlasLib]:
    """The BLAS library the executor calls (numpy's OpenBLAS, or scipy's: blaslib), found
    by threadpoolctl once; every BLAS library loaded where that one is not told apart.
    Only its threads would compete with the executor's: setting the other's too made
    each executor call that narrows BLAS 0.5 us dearer (2.4 against 1.9 us).  A pthreads
    OpenBLAS is driven through its own functions: a process-wide setting, which
    threadpoolctl changes only from the first Python thread that changed it (calls from
    the caller's other threads would leave BLAS' threads competing with the
    executor's), and at a third of the cost."""
    global _libs
    if _libs is None:
        import scipy.linalg.cython_blas  # noqa: F401  (loads scipy's BLAS: numpy's is loaded)
        from threadpoolctl import ThreadpoolController

        from teir_plan.blaslib import numpy_openblas, uses_numpy_openblas

        called = (getattr(numpy_openblas(), "_name", None) if uses_numpy_openblas()
                  else scipy_blas_file())  # the executor's library's file
        controllers = ThreadpoolController().select(user_api="blas").lib_controllers
        if called is not None:
            mine = [lib for lib in controllers if _same_file(lib.filepath, called)]
            controllers = mine or controllers
        libs = []
        for lib in controllers:
            own = None
            if (lib.internal_api == "openblas"
                    and getattr(lib, "threading_layer", None) != "openmp"):
                own = _openblas_functions(getattr(lib, "dynlib", None))
            libs.append(own or _BlasLib(partial(getattr, lib, "num_threads"),
                                        lib.set_num_threads))
        _libs = libs
    return _libs


_libs: list[_BlasLib] | None = None


def _same_file(a: str | None, b: str) -> bool:
    try:
        return a is not None and os.path.samefile(a, b)
    except OSError:
        return False


def scipy_blas_file() -> str | None:
    """The file of the BLAS library scipy's wheel bundles (cython_blas calls it), or None
    (a scipy built against a system BLAS)."""
    import scipy

    libs = sorted((Path(scipy.__file__).resolve().parent.parent / "scipy.libs").glob(
        "*openblas*.so*"))
    return str(libs[0]) if libs else None


_active = 0  # executor calls inside blas_threads() right now
_baseline: list[int] = []  # each BLAS library's thread count outside those calls
_current: list[int] = []  # ... and the count the executor set inside them


class blas_threads:  # noqa: N801  (used as a function: ``with blas_threads(1):``)
    """BLAS uses ``n`` threads inside the block.  When the last concurrent block ends,
    every BLAS library gets back the thread count it had before the first began, so
    the caller's own numpy.matmul (the same OpenBLAS) keeps the threads it had."""

    __slots__ = ("n",)

    def __init__(self, n: int) -> None:
        self.n = n

    def __enter__(self) -> None:
        global _active, _baseline, _current
        libs = _blas_libs()
        with _lock:
            if _active == 0:
                _baseline = [lib.get() for lib in libs]
                _current = list(_baseline)
            _active += 1
            for i, lib in enumerate(libs):
                if _current[i] != self.n:
                    lib.set(self.n)
                    _current[i] = self.n

    def __exit__(self, *exc: object) -> None:
        global _active
        with _lock:
            _active -= 1
            if _active == 0:
                for lib, now, count in zip(_libs or (), _current, _baseline):
                    if now != count:
                        lib.set(count)


def _after_fork_in_child() -> None:
    """A forked child has only the thread that forked: a lock another thread held stays
    held for ever there, and its executor calls in progress never end."""
    global _lock, _active
    _lock = threading.Lock()
    _active = 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
