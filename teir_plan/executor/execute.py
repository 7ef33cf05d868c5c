"""``tp.execute``: run a TEIR program on numpy arrays."""

from __future__ import annotations

import numbers
from contextlib import AbstractContextManager, nullcontext

import numpy as np

from teir_plan.errors import PlanError
from teir_plan.executor.blas_control import blas_threads
from teir_plan.executor.blocked import (
    blocked_address,
    blocked_chunk_at,
    copy_runs_chunk,
    run_copy_runs,
)
from teir_plan.executor.blocked import run_blocked as run_blocks_parallel
from teir_plan.executor.cache import first_call, runners_called
from teir_plan.executor.checks import as_type, check_arrays, flat_view
from teir_plan.executor.lower import Lowered, Partials, lower, prefetch_ahead
from teir_plan.executor.partials import add_partials, block_pitch, run_partials, workers_for
from teir_plan.executor.tables import constants
from teir_plan.executor.threads import (
    get_num_threads,
    parallel_threads,
    parallel_usable,
)
from teir_plan.executor.walker import (
    blas_tiles_chunk,
    chunk_address,
    run_blas_tiles,
    run_chunk_at,
    run_dot_split,
    run_parallel,
    run_split,
)
from teir_plan.isa import LINE_BYTES
from teir_plan.schedule.workspace import workspace
from teir_plan.teir.records import TEIR
from teir_plan.teir.validate import check_iterations
from teir_plan.tilekinds import table as K
from teir_plan.tiles import BLAS_THREADED_TILE_FLOPS

_CONSTS = {np.dtype(t): constants(t)
           for t in (np.float32, np.float64, np.complex64, np.complex128)}


def execute(teir: TEIR, *arrays: np.ndarray, max_iterations: int | None = None) -> None:
    """Run ``teir`` on ``(in0, out)`` (unary) or ``(in0, in1, out)`` (binary), in place.

    Strides are in elements, relative to each array's first element.  The program
    is validated and every address it can touch is proven to lie on an element of
    its array before anything runs; on any error nothing is written.

    ``max_iterations``: the most iterations (the product of ``dim_sizes``) the program
    may run; by default 65,536 per element its strides address, at least 2^32
    (:func:`teir_plan.teir.validate.iteration_ceiling`), which refuses a program whose
    axes revisit a few elements without end.

    >>> import numpy as np, teir_plan as tp
    >>> a = np.arange(6, dtype=np.float32).reshape(2, 3)
    >>> out = np.empty((3, 2), np.float32)
    >>> prog = tp.TEIR(tp.Primitives("float32", "none", "copy", "none"),
    ...                tp.Schedule(["c", "c"], ["prim", "prim"], [2, 3], [[3, 1], [1, 2]]))
    >>> tp.execute(prog, a, out)
    >>> bool((out == a.T).all())
    True
    """
    if not isinstance(teir, TEIR):
        from teir_plan.errors import TEIRError

        raise TEIRError(f"execute: expected a tp.TEIR program, got {type(teir).__name__}")
    teir.validate()
    if max_iterations is not None and (isinstance(max_iterations, bool)
                                       or not isinstance(max_iterations, numbers.Integral)
                                       or max_iterations < 1):
        raise PlanError(f"max_iterations: expected a positive integer or None, got "
                        f"{max_iterations!r}")
    check_iterations(teir, None if max_iterations is None else int(max_iterations))
    # A subclass (numpy.matrix, whose reshape stays 2-D) is run through its plain view.
    arrays = tuple(a.view(np.ndarray) if isinstance(a, np.ndarray) and type(a) is not np.ndarray
                   else a for a in arrays)
    check_arrays(teir, arrays)
    run_lowered(lower(teir), arrays)


def _runner(run):  # type: ignore[no-untyped-def]
    """``run``, announced before its first compile (see cache.first_call)."""
    if id(run) not in runners_called:
        first_call(run)
    return run


def run_lowered(low: Lowered, arrays: tuple[np.ndarray, ...] | list[np.ndarray]) -> None:
    """Run an already lowered program on arrays that have passed :func:`check_arrays`."""
    if low.serial:
        _run_serial(low, arrays)
        return
    if low.partials is not None and _run_partials(low.partials, arrays):
        return
    x0, o0 = as_type(flat_view(arrays[0]), low.dtype)
    if low.num_tensors == 3:
        x1, o1 = as_type(flat_view(arrays[1]), low.dtype)
    else:
        x1, o1 = x0, 0
    y, o2 = as_type(flat_view(arrays[-1]), low.dtype)
    tile = low.tile  # shared by every call of the program: the kernels only read it
    if o0 or o1 or o2:
        tile = tile.copy()
        tile[K.T_ORIGIN0], tile[K.T_ORIGIN1], tile[K.T_ORIGIN2] = o0, o1, o2
    consts = _CONSTS[low.dtype]
    threads = _threads()
    nchunks = min(low.parallel_iterations, threads) if low.has_parallel else 1
    if low.copy_runs is not None:
        if nchunks > 1:
            with parallel_threads(threads):
                _runner(run_copy_runs)(x0, y, low.loops, low.npar, tile, low.copy_runs, nchunks)
        else:
            _runner(copy_runs_chunk)(x0, y, low.loops, low.npar, tile, low.copy_runs, 0,
                              int(np.prod(low.loops[:low.npar, K.L_SIZE])))
    elif nchunks > 1:
        with _blas_limit(low), parallel_threads(threads):
            if low.plain_blas:
                _runner(run_blas_tiles)(x0, x1, y, low.loops, low.npar, tile, consts,
                                          nchunks)
            else:
                _runner(run_parallel)(chunk_address(low.dtype, low.kind), x0, x1, y, low.loops,
                                        low.npar, tile, consts, nchunks)
    elif low.calls_blas:
        # Splitting a tile across workers pays off only on large tiles; on small ones
        # the parallel region costs more than it saves.  BLAS itself always runs on one
        # thread: its own threads would compete with the executor's (see run_split).
        t = low.tile
        tile_flops = 2 * int(t[K.T_M]) * int(t[K.T_N]) * int(t[K.T_K]) * int(t[K.T_BR])
        workers = min(threads, max(int(t[K.T_M]), int(t[K.T_N])))
        if workers > 1 and tile_flops >= BLAS_THREADED_TILE_FLOPS:
            with blas_threads(1), parallel_threads(threads):
                _runner(run_split)(chunk_address(low.dtype, low.kind), x0, x1, y, low.loops, tile,
                                     consts, workers)
        else:
            with _blas_limit(low, serial=True):
                if low.plain_blas:
                    _runner(blas_tiles_chunk)(x0, x1, y, low.loops, 0, tile, consts, 0, 1)
                else:
                    _runner(run_chunk_at)(chunk_address(low.dtype, low.kind), x0, x1, y, low.loops,
                                            0, tile, consts, 0, 1)
    elif threads > 1 and dot_split(low):
        with parallel_threads(threads):
            _runner(run_dot_split)(x0, x1, y, tile, consts, threads)
    elif low.tile[K.T_ROW_PAR]:  # only parallel loops, walked in runs on this thread
        _runner(run_chunk_at)(chunk_address(low.dtype, low.kind), x0, x1, y, low.loops, low.npar,
                                tile, consts, 0, low.parallel_iterations)
    else:
        _runner(run_chunk_at)(chunk_address(low.dtype, low.kind), x0, x1, y, low.loops, 0, tile,
                                consts, 0, 1)


def _run_partials(p: Partials, arrays: tuple[np.ndarray, ...] | list[np.ndarray]) -> bool:
    """Run a program with parallel K axes on its workers, each into a private block, and
    add the blocks into the output (teir/parallel_k.py, executor/partials.py).  False,
    having run nothing, when one worker would run it all: the caller then runs the
    serial program."""
    low = p.block
    threads = _threads()
    dtype = low.dtype
    workers = workers_for(p.layout, low.parallel_iterations, threads, dtype.itemsize)
    if workers < 2 or low.npar == 0:
        return False
    x0, o0 = as_type(flat_view(arrays[0]), dtype)
    x1, o1 = as_type(flat_view(arrays[1]), dtype)
    y, o2 = as_type(flat_view(arrays[-1]), dtype)
    tile = low.tile.copy()
    tile[K.T_ORIGIN0], tile[K.T_ORIGIN1], tile[K.T_ORIGIN2] = o0, o1, 0
    pitch = block_pitch(p.layout.elements, dtype.itemsize)
    # The blocks start on a cache line (each worker's own lines; see partials._LINE).
    lanes = LINE_BYTES // dtype.itemsize
    raw = workspace.borrow((workers * pitch + lanes,), dtype)
    try:
        skip = (-raw.ctypes.data % LINE_BYTES) // dtype.itemsize
        parts = raw[skip:skip + workers * pitch]
        with _blas_limit(low), parallel_threads(threads):
            _runner(run_partials)(chunk_address(dtype, low.kind), x0, x1, parts, pitch, low.loops,
                                  low.npar, tile, _CONSTS[dtype], workers)
        _runner(add_partials)(y, o2, parts, pitch, workers, p.rows, p.layout.zero,
                              p.layout.relu)
    finally:
        workspace.give_back(raw)
    return True


def run_blocked(low: Lowered, outer: np.ndarray, block: np.ndarray, stage_elements: int,
                arrays: tuple[np.ndarray, ...] | list[np.ndarray], l2_room: int = 0) -> None:
    """Run a blocked program (see :func:`teir_plan.executor.blocked.run_blocked`) on
    ``(in0, in1, out)``:
    ``low`` is the block program (its output is the stage), ``outer`` the loops around
    the blocks, ``block`` the copy of each block into ``out``; ``l2_room``: the bytes of
    L2 beside the stage.  The arrays must have passed the plan's proofs of reach for
    exactly these tables."""
    (x0, o0), (x1, o1), (y, o2) = (flat_view(a) for a in arrays)
    tile = low.tile.copy()
    tile[K.T_ORIGIN0], tile[K.T_ORIGIN1], tile[K.T_ORIGIN2] = o0, o1, o2
    tile[K.T_AHEAD] = int(prefetch_ahead(low, l2_room))
    total = int(np.prod(outer[:, K.L_SIZE])) if len(outer) else 1
    threads = _threads()
    nchunks = max(1, min(total, threads))
    consts = _CONSTS[low.dtype]
    if nchunks > 1:
        with _blas_limit(low), parallel_threads(threads):
            _runner(run_blocks_parallel)(blocked_address(low.dtype), x0, x1, y, outer, low.loops,
                                   tile, block, stage_elements, consts, nchunks)
    else:
        with _blas_limit(low):
            _runner(blocked_chunk_at)(blocked_address(low.dtype), x0, x1, y, outer,
                                        low.loops, tile, block, stage_elements, consts, 0,
                                        total)


def _blas_limit(low: Lowered, serial: bool = False) -> AbstractContextManager[None]:
    """BLAS on one thread while a program whose tiles call it runs (see
    threads.blas_threads); nothing for the others, nor for a ``serial`` run (no
    parallel region) of tiles OpenBLAS keeps on the calling thread
    (Lowered.limits_blas)."""
    if not low.calls_blas or (serial and not low.limits_blas):
        return nullcontext()
    return blas_threads(1)


def dot_split(low: Lowered) -> bool:
    """Whether a program is one dot product long enough to split over the threads
    (run_dot_split)."""
    return low.splits_dot


def _run_serial(low: Lowered, arrays: tuple[np.ndarray, ...] | list[np.ndarray]) -> None:
    """run_lowered's path for a program that runs on the calling thread with nothing set
    around it (Lowered.serial): the branches above decided once, at lowering, and the
    views taken without a call per array where the types agree (a tiny product's
    whole call is a few microseconds: each call here counts)."""
    dtype = low.dtype
    x0, o0 = flat_view(arrays[0])
    if x0.dtype != dtype:
        x0, o0 = as_type((x0, o0), dtype)
    if low.num_tensors == 3:
        x1, o1 = flat_view(arrays[1])
        if x1.dtype != dtype:
            x1, o1 = as_type((x1, o1), dtype)
    else:
        x1, o1 = x0, 0
    y, o2 = flat_view(arrays[-1])
    if y.dtype != dtype:
        y, o2 = as_type((y, o2), dtype)
    tile = low.tile
    if o0 or o1 or o2:
        tile = tile.copy()
        tile[K.T_ORIGIN0], tile[K.T_ORIGIN1], tile[K.T_ORIGIN2] = o0, o1, o2
    if low.plain_blas:
        if low.limits_blas:
            with blas_threads(1):
                _runner(blas_tiles_chunk)(x0, x1, y, low.loops, 0, tile, _CONSTS[dtype], 0, 1)
        else:
            _runner(blas_tiles_chunk)(x0, x1, y, low.loops, 0, tile, _CONSTS[dtype], 0, 1)
    elif low.limits_blas:
        with blas_threads(1):
            _runner(run_chunk_at)(chunk_address(dtype, low.kind), x0, x1, y, low.loops, 0, tile,
                                  _CONSTS[dtype], 0, 1)
    elif low.tile[K.T_ROW_PAR]:
        _runner(run_chunk_at)(chunk_address(dtype, low.kind), x0, x1, y, low.loops, low.npar, tile,
                              _CONSTS[dtype], 0, low.parallel_iterations)
    else:
        _runner(run_chunk_at)(chunk_address(dtype, low.kind), x0, x1, y, low.loops, 0, tile,
                              _CONSTS[dtype], 0, 1)


def _threads() -> int:
    """The threads a program runs on: the setting, or 1 where numba's parallel
    regions cannot run (see threads.parallel_usable)."""
    return get_num_threads() if parallel_usable() else 1
