"""The search's pruning is exact: branch and bound keeps the same candidates, in the
same order and at the same predicted cost, as costing every candidate; its bounds are
lower bounds, and a ceiling drops only candidates at or above it."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from teir_plan.frontend.contraction import describe, layout_of, with_dtype
from teir_plan.planner.candidates import choices_for
from teir_plan.planner.cost import estimate
from teir_plan.planner.machine import MachineParams
from teir_plan.planner.search import prim_floors, prim_options, rank, variants

CASES = [
    line.split()
    for line in (Path(__file__).parents[1] / "benchmarks" / "tccg24.txt").read_text().splitlines()
    if line.strip() and not line.startswith("#")
]

# Beyond TCCG: nothing fuses (eight indices), a missing K, a dot, an elementwise product
# and a matrix-vector product (row, dot and BLAS tiles' floors).
FLOOR_CASES = [
    ["aebfcg,dgeh->abcdfh", "a=8,b=8,c=8,d=8,e=8,f=8,g=8,h=8"],
    ["ij,jk->ik", "i=1000,j=1,k=1000"],
    ["i,i->", "i=100000"],
    ["ij,ij->ij", "i=64,j=64"],
    ["ik,k->i", "i=4096,k=4096"],
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


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_every_schedule_costs_at_least_its_prim_choice_bound(case: list[str],
                                                             threads: int) -> None:
    """The bound the search prunes by is a lower bound on every schedule it stands for,
    including tiles whose output streams to memory (written once: a bound counting it
    twice pruned ebad,ce->abcd's best schedule once a ceiling was given)."""
    params = MachineParams()
    for v, packs in variants(_contraction(case[0], case[1], 1), params, threads):
        pack_seconds = sum(p.seconds for p in packs)
        for opt in prim_options(v, params, threads):
            for ch in choices_for(v, opt.prim, threads, opt.blas):
                cost = estimate(v, ch, params, threads, opt.tile, pack_seconds=pack_seconds)
                assert cost.seconds >= (opt.bound + pack_seconds) * (1 - 1e-12), (opt.prim, ch)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("scale", [1, 8])
@pytest.mark.parametrize("case", [*CASES, *FLOOR_CASES], ids=[c[0] for c in CASES + FLOOR_CASES])
def test_every_prim_choice_costs_at_least_its_floor(case: list[str], scale: int,
                                                    threads: int) -> None:
    """The floor the search orders prim choices by before costing them (from their
    extents alone) is at most the bound costing gives, for every prim choice of every
    variant: otherwise the best-first search could cost and expand in the wrong order,
    or never cost a prim choice that belonged in the result."""
    params = MachineParams()
    for v, _ in variants(_contraction(case[0], case[1], scale), params, threads):
        floors = {p: f for f, _, p in prim_floors(v, params, threads)}
        options = prim_options(v, params, threads)
        assert len(floors) == len(options)
        for opt in options:
            assert floors[opt.prim] <= opt.bound * (1 + 1e-12), opt


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_a_ceiling_keeps_every_candidate_under_it(case: list[str]) -> None:
    """A search given a ceiling (another result layout's best) finds every candidate
    the full search finds below it, at the same cost, and may skip the others."""
    c = _contraction(case[0], case[1], 4)
    params = MachineParams()
    full = rank(c, params, 2, top=8, prune=False)
    for ceiling in (full[0].predicted_seconds * 0.99, full[3].predicted_seconds,
                    full[-1].predicted_seconds * 1.01):
        capped = rank(c, params, 2, top=8, ceiling=ceiling)
        below = [(r.teir, r.predicted_seconds) for r in full if r.predicted_seconds < ceiling]
        assert [(r.teir, r.predicted_seconds) for r in capped][:len(below)] == below
