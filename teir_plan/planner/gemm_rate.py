"""BLAS' rate on one call, from the calibrated efficiency table (MachineParams'
``gemm_efficiency``: BLAS' fraction of its peak over a grid of m, n, k per operand
form), interpolated linearly in log extent and log efficiency.  The BLAS tile kind's
price (teir_plan/tilekinds/blas.py) and the search's floors read it."""

from __future__ import annotations

import math
from functools import lru_cache

from teir_plan.machine.params import MachineParams
from teir_plan.machine.tables import GEMM_FORMS, GEMM_GRID


# Bounded: a plan's tiles have a few dozen distinct extents.
@lru_cache(maxsize=1024)
def _grid_position(x: int) -> tuple[int, float, float]:
    """(segment, weight of its upper end, scale) of extent ``x`` on GEMM_GRID's log
    scale.  Beyond the grid's largest extent BLAS is saturated; below its smallest a
    call costs what the smallest does (scale < 1: the micro-kernel pads the tile)."""
    g = GEMM_GRID
    if x <= g[0]:
        return 0, 0.0, max(x, 1) / g[0]
    if x >= g[-1]:
        return len(g) - 2, 1.0, 1.0
    i = next(j for j in range(len(g) - 1) if x <= g[j + 1])
    return i, math.log(x / g[i]) / math.log(g[i + 1] / g[i]), 1.0


# Bounded: one plan looks up at most a few hundred tiles, and a memo of 65536 entries
# grew a process by 32 MB over 9,000 distinct problems (tests/test_memory.py).
@lru_cache(maxsize=4096)
def _interpolate(params: MachineParams, m: int, n: int, k: int, form: int = 0) -> float:
    return _interpolate_table(_log_table(params), m, n, k, form)


@lru_cache(maxsize=16)
def _log_table(params: MachineParams) -> tuple[float, ...]:
    """The efficiency table's logarithms, as the interpolation weighs them."""
    return tuple(math.log(max(v, 1e-4)) for v in params.gemm_efficiency)


@lru_cache(maxsize=16)
def _best_table(params: MachineParams) -> tuple[float, ...]:
    """Per grid point, the best efficiency of any form in either orientation (m and n
    swapped): interpolated, an upper bound on every form's and orientation's own."""
    g = len(GEMM_GRID)
    t = params.gemm_efficiency
    return tuple(
        max(t[((f * g + a) * g + b) * g + c] for f in range(len(GEMM_FORMS))
            for a, b in ((i, j), (j, i)))
        for i in range(g) for j in range(g) for c in range(g))


@lru_cache(maxsize=4096)
def best_gemm_efficiency(params: MachineParams, m: int, n: int, k: int) -> float:
    """At least :func:`gemm_efficiency` of an m x n x k tile in any form and of an
    n x m x k one (the search's floors: a weighted geometric mean of table entries
    grows with each entry)."""
    return _interpolate_table(_best_log_table(params), m, n, k, 0)


@lru_cache(maxsize=16)
def _best_log_table(params: MachineParams) -> tuple[float, ...]:
    return tuple(math.log(max(v, 1e-4)) for v in _best_table(params))


def _interpolate_table(logs: tuple[float, ...], m: int, n: int, k: int, form: int
                       ) -> float:
    """The efficiency at (m, n, k) in ``form`` from a table's logarithms (each entry
    at least 1e-4: :func:`_log_table`)."""
    size = len(GEMM_GRID)
    base = form * size
    (im, wm, sm), (in_, wn, sn), (ik, wk, sk) = map(_grid_position, (m, n, k))
    log_eff = 0.0
    for dm, fm in ((0, 1 - wm), (1, wm)):
        for dn, fn in ((0, 1 - wn), (1, wn)):
            for dk, fk in ((0, 1 - wk), (1, wk)):
                w = fm * fn * fk
                if w > 0:
                    log_eff += w * logs[((base + im + dm) * size + in_ + dn) * size + ik + dk]
    return math.exp(log_eff) * sm * sn * sk


def gemm_efficiency(params: MachineParams, m: int, n: int, k: int, form: int = 0) -> float:
    """BLAS' fraction of its peak on one m x n x k call (BLAS' own m and n) with its
    operands in ``form`` (an index in GEMM_FORMS: 0 is N,N), from the calibrated
    table: interpolated linearly in log extent and log efficiency.

    >>> from teir_plan.machine.params import MachineParams
    >>> p = MachineParams()
    >>> gemm_efficiency(p, 512, 512, 512) > gemm_efficiency(p, 512, 24, 512)
    True
    """
    return _interpolate(params, m, n, k, form)


def forget_tile_rates() -> None:
    """Forget the memoized rates of tile shapes (search.forget_memos); the best-of-forms
    table and the floors' memo are per machine parameters and stay."""
    _interpolate.cache_clear()
    _grid_position.cache_clear()
