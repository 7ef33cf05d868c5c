"""Search: generate candidate schedules, rank them with the cost model, keep the best.

Exhaustive over prim choices, loop orders (all orders up to four loops, stride
orders beyond) and parallel sets; pruned by first ranking prim choices on an
optimistic bound and expanding only the most promising.
"""

from __future__ import annotations

from dataclasses import dataclass

from teir_plan.frontend.contraction import Contraction
from teir_plan.planner.candidates import (
    MAX_PRIM_CHOICES,
    NO_AXIS,
    Choice,
    axis_names,
    choices,
    fuse_axes,
    prim_choices,
    split_variants,
    tile_blas,
    to_teir,
)
from teir_plan.planner.cost import Cost, estimate
from teir_plan.planner.machine import MachineParams
from teir_plan.teir.enums import DimType
from teir_plan.teir.records import TEIR


@dataclass(frozen=True)
class Ranked:
    """A candidate with its program and predicted cost."""

    contraction: Contraction  # the (fused, maybe split) contraction the choice indexes
    choice: Choice
    cost: Cost
    teir: TEIR
    names: tuple[str, ...]  # index name(s) of each TEIR axis

    @property
    def predicted_seconds(self) -> float:
        return self.cost.seconds


def _bound(c: Contraction, m: int, n: int, k: int, br: int, params: MachineParams,
           threads: int) -> float:
    """Optimistic cost of a prim choice: best case of loops in given order, all parallel."""
    blas = tile_blas(c, m, n, k)
    prim = {a for a in (m, n, k, br) if a != NO_AXIS}
    loops = tuple(a for a in range(len(c.axes)) if a not in prim)
    ch = Choice(loops, 0, m, n, k, br, blas)
    cost = estimate(c, ch, params, 1)
    return cost.compute_seconds / max(1, threads) + cost.overhead_seconds


def rank(
    c: Contraction,
    params: MachineParams,
    threads: int,
    *,
    relu_last: bool = False,
    top: int = 8,
) -> list[Ranked]:
    """The ``top`` best candidates for ``c``, cheapest first."""
    variants = [fuse_axes(c)]
    variants += split_variants(variants[0], threads)
    scored: list[tuple[float, int, Contraction, Choice, Cost]] = []
    serial = 0
    for v in variants:
        prims = sorted(
            prim_choices(v),
            key=lambda p: _bound(v, *p, params, threads),
        )[:MAX_PRIM_CHOICES]
        keep = set(prims)
        for ch in choices(v, threads):
            if (ch.m, ch.n, ch.k, ch.br) not in keep:
                continue
            cost = estimate(v, ch, params, threads)
            scored.append((cost.seconds, serial, v, ch, cost))
            serial += 1
    scored.sort(key=lambda s: (s[0], s[1]))
    out: list[Ranked] = []
    seen: set[TEIR] = set()
    for _, _, v, ch, cost in scored:
        teir = to_teir(v, ch, relu_last=relu_last)
        if teir in seen:
            continue
        seen.add(teir)
        out.append(Ranked(v, ch, cost, teir, axis_names(v, ch)))
        if len(out) >= top:
            break
    return out


def plain(c: Contraction, params: MachineParams, *, relu_last: bool = False) -> Ranked:
    """A valid schedule without search (``optimize=False``): GEMM over the first M, N
    and K axes, the rest sequential loops in the contraction's order."""
    m = next(iter(c.by_role(DimType.M)), NO_AXIS)
    n = next(iter(c.by_role(DimType.N)), NO_AXIS)
    k = next(iter(c.by_role(DimType.K)), NO_AXIS)
    prim = {a for a in (m, n, k) if a != NO_AXIS}
    loops = tuple(a for a in range(len(c.axes)) if a not in prim)
    ch = Choice(loops, 0, m, n, k, NO_AXIS, tile_blas(c, m, n, k))
    return Ranked(c, ch, estimate(c, ch, params, 1), to_teir(c, ch, relu_last=relu_last),
                  axis_names(c, ch))
