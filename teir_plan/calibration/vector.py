"""The vector kernel's rate, K steps and set-up, as both calibrations read them."""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from teir_plan.calibration.timing import best_seconds, calibration_program
from teir_plan.executor.execute import run_lowered
from teir_plan.executor.lower import lower
from teir_plan.isa import target
from teir_plan.tilekinds.vec import vec_efficiency, vec_overhead_seconds, vec_strips
from teir_plan.tiles import VEC_ROWS

# The vector kernel's calibration tile: one of efbad,cf->abcde's blocks (432 long along
# the vector axis, 24 rows, K 36), its operands in cache; and the same with K 192, whose
# rate against it gives the K steps its outputs' loads and stores cost (VEC_LONG_K_TILE:
# its vector operand, 324 KiB, within every L2 the kernels run on, its 24 x 192 block
# within L1).
VEC_TILE = (432, 24, 36)
VEC_LONG_K_TILE = (432, 24, 192)
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
    """The set-up of a VEC_TILE tile (and a VEC_LONG_K_TILE one: the same length)."""
    return vec_overhead_seconds(VEC_TILE[0], 4, tile_seconds, strip_seconds)


def vector_k_steps(spent: float, long_spent: float, tile_seconds: float) -> float:
    """MachineParams.vec_k_steps from the seconds per VEC_TILE and per VEC_LONG_K_TILE:
    the ``s`` for which K / (K + s) rates the two as measured, within [0, MAX_K_STEPS].

    >>> k1, k2 = VEC_TILE[2], VEC_LONG_K_TILE[2]
    >>> round(vector_k_steps(k1 * (k1 + 2.5) / k1, k2 * (k2 + 2.5) / k2, 0), 6)
    2.5
    """
    k1, k2 = VEC_TILE[2], VEC_LONG_K_TILE[2]
    q = (k1 / max(spent - tile_seconds, 1e-12)) / (k2 / max(long_spent - tile_seconds, 1e-12))
    if q >= 1 or q * k2 <= k1:
        return 0.0 if q >= 1 else MAX_K_STEPS
    return min(MAX_K_STEPS, k1 * k2 * (1 - q) / (q * k2 - k1))


def vector_rate(spent: float, tile_seconds: float, k_steps: float) -> float:
    """The vector kernel's float32 rate at full efficiency (MachineParams.vec_flops_f32)
    from ``spent`` seconds per VEC_TILE tile: the tile's rate, its bookkeeping
    (``tile_seconds``) taken off, over the tile's modelled efficiency with ``k_steps``."""
    m, n, k = VEC_TILE
    return (2 * m * n * k / max(spent - tile_seconds, 1e-9)
            / vec_efficiency(m, n, k, 4, k_steps))


class VectorKernel(NamedTuple):
    """What both calibrations measure of the vector kernel (MachineParams' fields)."""

    vec_flops_f32: float
    vec_k_steps: float
    vec_tile_seconds: float
    vec_strip_seconds: float


def measure_vector_kernel(rng: np.random.Generator, tile_seconds: float, spent: float = math.inf
                   ) -> VectorKernel:
    """The vector kernel's set-up (measure_vector_overheads), then its rate and K steps: both
    calibration tiles in turns, three rounds of best of 3 each (about 10 ms), the best of
    all kept (VEC_TILE's with ``spent``, an earlier reading), the set-up and the walker's
    ``tile_seconds`` taken off each tile.  Read once each, back to back, the K steps came
    out anywhere in 0.2-2.8 on one machine: a 3% drift between the two readings moves the
    fit by 1.4.  (Without vector kernels no set-up is read: no tile pays it.)"""
    per_tile, per_strip = (measure_vector_overheads(rng, tile_seconds) if target().vector_bytes
                           else (0.0, 0.0))
    fixed = tile_seconds + vec_tile_overhead(per_tile, per_strip)
    long_spent = math.inf
    for _ in range(3):
        spent = min(spent, vector_tile_seconds(rng, 3))
        long_spent = min(long_spent, vector_tile_seconds(rng, 3, VEC_LONG_K_TILE))
    steps = vector_k_steps(spent, long_spent, fixed)
    return VectorKernel(vector_rate(spent, fixed, steps), steps, per_tile, per_strip)


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
