"""BLAS' rate on one call (teir_plan/planner/gemm_rate.py): the calibrated efficiency
table interpolated linearly in log extent and log efficiency, checked against the same
interpolation written out independently on a random table."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest

from teir_plan.machine.params import MachineParams
from teir_plan.machine.tables import GEMM_FORMS, GEMM_GRID
from teir_plan.planner.gemm_rate import best_gemm_efficiency, gemm_efficiency

G = len(GEMM_GRID)


def random_params(seed: int) -> MachineParams:
    rng = np.random.default_rng(seed)
    table = tuple(float(v) for v in rng.uniform(0.05, 0.95, len(GEMM_FORMS) * G ** 3))
    return dataclasses.replace(MachineParams.reference(), gemm_efficiency=table)


def entry(p: MachineParams, form: int, i: int, j: int, k: int) -> float:
    return p.gemm_efficiency[((form * G + i) * G + j) * G + k]


def reference(p: MachineParams, m: int, n: int, k: int, form: int) -> float:
    """The interpolation as the docstring states it, one extent at a time: the two grid
    points around each extent weighted by its log distance to them; beyond the grid the
    last point; below it the first, scaled by the extent's share of it."""
    def around(x: int) -> list[tuple[int, float, float]]:
        if x >= GEMM_GRID[-1]:
            return [(G - 1, 1.0, 1.0)]
        if x <= GEMM_GRID[0]:
            return [(0, 1.0, max(x, 1) / GEMM_GRID[0])]
        hi = next(i for i, g in enumerate(GEMM_GRID) if g >= x)
        if GEMM_GRID[hi] == x:
            return [(hi, 1.0, 1.0)]
        w = math.log(x / GEMM_GRID[hi - 1]) / math.log(GEMM_GRID[hi] / GEMM_GRID[hi - 1])
        return [(hi - 1, 1 - w, 1.0), (hi, w, 1.0)]

    log_eff, scale = 0.0, 1.0
    for (a, wa, _), (b, wb, _), (c, wc, _) in itertools.product(
            around(m), around(n), around(k)):
        log_eff += wa * wb * wc * math.log(entry(p, form, a, b, c))
    for x in (m, n, k):
        scale *= around(x)[0][2]
    return math.exp(log_eff) * scale


SHAPES = [(8, 8, 8), (24, 64, 192), (4096, 4096, 4096), (10000, 3, 700), (100, 30, 50),
          (1, 513, 4095), (7, 200, 24), (512, 24, 36)]


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_every_form_interpolates_as_stated(seed: int, shape: tuple[int, int, int]) -> None:
    p = random_params(seed)
    for form in range(len(GEMM_FORMS)):
        assert gemm_efficiency(p, *shape, form) == pytest.approx(
            reference(p, *shape, form), rel=1e-12)


def test_grid_points_read_the_table() -> None:
    p = random_params(2)
    for (i, m), (j, n), (c, k) in itertools.product(enumerate(GEMM_GRID), repeat=3):
        assert gemm_efficiency(p, m, n, k, 3) == pytest.approx(entry(p, 3, i, j, c))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_the_best_form_bounds_every_form_and_orientation(shape: tuple[int, int, int]) -> None:
    p = random_params(3)
    m, n, k = shape
    best = best_gemm_efficiency(p, m, n, k)
    for form in range(len(GEMM_FORMS)):
        assert best >= gemm_efficiency(p, m, n, k, form) * (1 - 1e-12)
        assert best >= gemm_efficiency(p, n, m, k, form) * (1 - 1e-12)


def test_beyond_the_grid_blas_is_saturated_and_below_it_pads() -> None:
    p = random_params(4)
    top = GEMM_GRID[-1]
    assert gemm_efficiency(p, 10 * top, top, top) == pytest.approx(
        gemm_efficiency(p, top, top, top))
    low = GEMM_GRID[0]
    assert gemm_efficiency(p, low // 2, low, low) == pytest.approx(
        gemm_efficiency(p, low, low, low) / 2)
