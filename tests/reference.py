"""A small, obviously correct TEIR interpreter (test-only): plain Python loops.

Arrays are flat 1-D float64 buffers; ``origins[j]`` is the index of tensor j's
first element in its buffer.  Semantics of spec 10.1: loops over non-prim axes
in schedule order, the primitive over every element of its tile, Zero on an
output tile's first access and ReLU after its last (first/last decided by the
K loops outside the primitive).
"""

from __future__ import annotations

import itertools

import numpy as np

import teir_plan as tp


def _relu(v: float) -> float:
    return float(np.maximum(v, 0.0))


def run_reference(teir: tp.TEIR, buffers: list[np.ndarray], origins: list[int]) -> None:
    s, p = teir.schedule, teir.primitives
    loops = s.loop_axes()
    prims = s.prim_axes()
    out = len(buffers) - 1
    k_loops = [i for i in loops if s.dim_types[i] is tp.DimType.K]
    for idx in itertools.product(*[range(s.dim_sizes[i]) for i in loops]):
        at = dict(zip(loops, idx))
        first = all(at[i] == 0 for i in k_loops)
        last = all(at[i] == s.dim_sizes[i] - 1 for i in k_loops)
        base = [origins[j] + sum(at[i] * s.strides[j][i] for i in loops)
                for j in range(len(buffers))]
        tile = list(itertools.product(*[range(s.dim_sizes[i]) for i in prims]))

        def addr(j: int, t: tuple[int, ...], base: list[int] = base) -> int:
            return base[j] + sum(v * s.strides[j][i] for v, i in zip(t, prims))

        if teir.is_unary:
            for t in tile:
                v = buffers[0][addr(0, t)]
                buffers[1][addr(1, t)] = _relu(v) if p.prim_main is tp.Prim.RELU else v
            continue
        out_cells = sorted({addr(out, t) for t in tile})
        if first and p.prim_first is tp.Prim.ZERO:
            for a in out_cells:
                buffers[out][a] = 0.0
        for t in tile:
            buffers[out][addr(out, t)] += buffers[0][addr(0, t)] * buffers[1][addr(1, t)]
        if last and p.prim_last is tp.Prim.RELU:
            for a in out_cells:
                buffers[out][a] = _relu(buffers[out][a])
