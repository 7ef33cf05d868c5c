"""The vector kernel's rate, K steps and set-up, as both calibrations read them."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from teir_plan.calibration.timing import best_seconds, calibration_program
from teir_plan.executor.execute import run_lowered
from teir_plan.executor.lower import lower
from teir_plan.isa import target
from teir_plan.tilekinds.vec import vec_overhead_seconds, vec_strips
from teir_plan.tiles import VEC_ROWS

# The vector kernel's calibration tile: one of efbad,cf->abcde's blocks (432 long along
# the vector axis, 24 rows, K 36), its operands in cache; read at other K too
# (VEC_K_POINTS, up to 192: its vector operand, 324 KiB, within every L2 the kernels run
# on, its 24 x 192 block within L1), whose rates give the K steps its outputs' loads and
# stores cost.
VEC_TILE = (432, 24, 36)
MAX_K_STEPS = 16.0  # (a fit beyond is noise: 0-2.7 on the machines measured)


def vector_tile_seconds(rng: np.random.Generator, repeats: int = 5,
                         tile: tuple[int, int, int] = VEC_TILE) -> float:
    """Seconds per ``tile`` on the vector kernel (float32, one thread), the loop nest's
    bookkeeping per tile included (reps of it along a sequential N loop, about 80 MFLOP
    in all), best of ``repeats``."""
    m, n, k = tile
    reps = max(1, min(4000, int(8e7 / (2 * m * n * k))))
    prog = calibration_program(m, n, k, "float32", reps)
    arrs = [rng.random(m * k).astype(np.float32), rng.random(k * n * reps).astype(np.float32),
            np.zeros(m * n * reps, np.float32)]
    lowered = lower(prog, True)
    run_lowered(lowered, arrs)
    return best_seconds(lambda: run_lowered(lowered, arrs), repeats) / reps


def vec_tile_overhead(tile_seconds: float, strip_seconds: float) -> float:
    """The set-up of a VEC_TILE tile (at any of VEC_K_POINTS: the same length)."""
    return vec_overhead_seconds(VEC_TILE[0], 4, tile_seconds, strip_seconds)


# The K of the tiles the rate and the K steps are read from (VEC_TILE's length and
# rows).  A tile's time is linear in K, its set-up plus c (K + steps) (vec_efficiency),
# so the K steps are the intercept over the slope, less the set-up: read from two tiles
# of K 36 and 192, the intercept was extrapolated from afar, and a 3 % drift of one
# reading moved the K steps by 1.4 (first-use and calibrated readings of one Xeon: 0.9
# and 9.2, where eight in a row read 1.8-4.0).  A least-squares line through five K,
# two of them short, and the median of three such fits.
VEC_K_POINTS = (12, 24, 36, 96, 192)
FITS = 3


def vector_fit(seconds: Mapping[int, float], fixed: float) -> tuple[float, float]:
    """(MachineParams.vec_flops_f32, vec_k_steps) from the seconds per VEC_TILE-shaped
    tile at each K of ``seconds``: the least-squares line ``fixed + c (K + steps)``, the
    rate the tile's flops per K step over ``c``, the K steps within [0, MAX_K_STEPS].

    >>> m, n, _ = VEC_TILE
    >>> c = 2 * m * n / 200e9
    >>> rate, steps = vector_fit({k: 15e-9 + c * (k + 2.5) for k in VEC_K_POINTS}, 15e-9)
    >>> round(rate / 1e9, 6), round(steps, 6)
    (200.0, 2.5)
    """
    ks = sorted(seconds)
    m, n, _ = VEC_TILE
    slope, intercept = np.polyfit(np.array(ks, float), np.array([seconds[k] for k in ks]), 1)
    if not slope > 0:  # (readings no longer with K: noise; the longest tile's rate)
        k = ks[-1]
        return 2 * m * n * k / max(seconds[k] - fixed, 1e-12), MAX_K_STEPS
    steps = min(MAX_K_STEPS, max(0.0, float((intercept - fixed) / slope)))
    return float(2 * m * n / slope), steps


class VectorKernel(NamedTuple):
    """What both calibrations measure of the vector kernel (MachineParams' fields)."""

    vec_flops_f32: float
    vec_k_steps: float
    vec_tile_seconds: float
    vec_strip_seconds: float


def measure_vector_kernel(rng: np.random.Generator, tile_seconds: float, spent: float = math.inf
                          ) -> VectorKernel:
    """The vector kernel's set-up (measure_vector_overheads), then its rate and K steps
    (vector_fit): VEC_TILE's length and rows at each of VEC_K_POINTS, in turns, best of 3
    each; FITS such fits, the median one's K steps and rate kept (about 0.1 s in all).
    ``spent``, an earlier reading of VEC_TILE, is one more reading of its K.  (Without
    vector kernels no set-up is read: no tile pays it.)"""
    per_tile, per_strip = (measure_vector_overheads(rng, tile_seconds) if target().vector_bytes
                           else (0.0, 0.0))
    fixed = tile_seconds + vec_tile_overhead(per_tile, per_strip)
    m, n, k0 = VEC_TILE
    fits = []
    for _ in range(FITS):
        seconds = {k: vector_tile_seconds(rng, 3, (m, n, k)) for k in VEC_K_POINTS}
        seconds[k0] = min(seconds.get(k0, math.inf), spent)
        fits.append(vector_fit(seconds, fixed))
    rate, steps = sorted(fits, key=lambda f: f[1])[FITS // 2]
    return VectorKernel(rate, steps, per_tile, per_strip)


# The tiles the vector kernel's set-up is read from: (length, K, rows as a multiple of
# a micro-tile's), each against one row block of the same length and K.  Their
# difference in rows leaves what a tile costs whatever its rows; two lengths part that
# into a cost per tile and one per strip of micro-tiles.
VEC_OVERHEAD_TILES = ((64, 64, 12), (432, 36, 3))


def vector_overheads(fixed: tuple[float, float], strips: tuple[int, int],
                     tile_seconds: float) -> tuple[float, float]:
    """(MachineParams.vec_tile_seconds, vec_strip_seconds) from the fixed seconds of a
    tile of each VEC_OVERHEAD_TILES length and its strips: a line through the two, the
    walker's own ``tile_seconds`` taken off the part per tile, neither below 0.

    >>> [round(x * 1e9, 1) for x in vector_overheads((48e-9, 90e-9), (2, 9), 15e-9)]
    [21.0, 6.0]
    """
    strip = max(0.0, (fixed[1] - fixed[0]) / (strips[1] - strips[0]))
    return max(0.0, fixed[0] - strip * strips[0] - tile_seconds), strip


def measure_vector_overheads(rng: np.random.Generator, tile_seconds: float) -> tuple[float, float]:
    """The vector kernel's set-up per tile and per strip (vector_overheads), on one
    thread: each VEC_OVERHEAD_TILES tile with one row block and with many, in turns,
    best of two rounds (about 25 ms)."""
    fixed = []
    for length, k, times in VEC_OVERHEAD_TILES:
        few = many = math.inf
        for _ in range(2):
            few = min(few, vector_tile_seconds(rng, 3, (length, VEC_ROWS, k)))
            many = min(many, vector_tile_seconds(rng, 3, (length, VEC_ROWS * times, k)))
        fixed.append((times * few - many) / (times - 1))
    strips = tuple(vec_strips(length, 4) for length, _, _ in VEC_OVERHEAD_TILES)
    return vector_overheads((fixed[0], fixed[1]), (strips[0], strips[1]), tile_seconds)
