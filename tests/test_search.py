"""The search's pruning is exact: branch and bound keeps the same candidates, in the
same order and at the same predicted cost, as costing every candidate."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from teir_plan.frontend.contraction import describe, layout_of, with_dtype
from teir_plan.planner.machine import MachineParams
from teir_plan.planner.search import rank

CASES = [
    line.split()
    for line in (Path(__file__).parents[1] / "benchmarks" / "tccg24.txt").read_text().splitlines()
    if line.strip() and not line.startswith("#")
]


def _c_order_view(shape: tuple[int, ...]) -> np.ndarray:
    """A float32 view with C-order strides over one element: only shapes and strides
    matter to the planner, and this needs no memory."""
    strides = tuple(4 * math.prod(shape[i + 1:]) for i in range(len(shape)))
    return np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), shape, strides)


def _contraction(expr: str, sizes: str, scale: int):  # type: ignore[no-untyped-def]
    ext = {kv.split("=")[0]: max(1, int(kv.split("=")[1]) // scale) for kv in sizes.split(",")}
    ins, out = expr.split("->")
    terms = ins.split(",")
    arrays = [_c_order_view(tuple(ext[c] for c in t)) for t in [*terms, out]]
    lays = [layout_of(t, a, ext) for t, a in zip([*terms, out], arrays)]
    return with_dtype(describe(*lays), np.dtype(np.float32))


@pytest.mark.parametrize("threads", [1, 2, 8])
@pytest.mark.parametrize("scale", [1, 4])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_pruned_search_equals_exhaustive(case: list[str], scale: int, threads: int) -> None:
    c = _contraction(case[0], case[1], scale)
    params = MachineParams()
    pruned = rank(c, params, threads, top=8)
    full = rank(c, params, threads, top=8, prune=False)
    assert [r.teir for r in pruned] == [r.teir for r in full]
    assert [r.predicted_seconds for r in pruned] == [r.predicted_seconds for r in full]
