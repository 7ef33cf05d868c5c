"""Search: generate candidate schedules, rank them with the cost model, keep the best.

The space is the product of: packing (none, in0, in1, both), a split of one large
free axis (when loops alone cannot feed the threads), prim choices, loop orders
and parallel sets.  Prim choices are ranked on an optimistic bound (their compute
spread over all threads, each tensor moved once) and expanded in that order, most
promising first; a prim choice whose bound cannot beat the candidates already
kept is not expanded at all (branch and bound: the result is the same as costing
everything, in a fraction of the time).  Costing a prim choice's tile for its bound is
itself most of a large search, so prim choices wait in a heap under a cheaper floor
(from their extents alone, ``cost.floor_bounds``) and are costed only when that floor
comes up: an 8-index contraction costs 74 of its 478 tiles.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from itertools import islice
from typing import NamedTuple

import numpy as np

from teir_plan.frontend.contraction import Contraction
from teir_plan.machine.params import MachineParams
from teir_plan.planner.candidates import (
    MAX_PRIM_CHOICES,
    Choice,
    axis_names,
    cache_parts,
    choices_for,
    fuse_axes,
    parallel_part,
    prim_choices,
    prim_tuple,
    split_axis,
    split_inner,
    split_variants,
    tile_call,
    to_teir,
)
from teir_plan.planner.copy import ranked_copies
from teir_plan.planner.cost import (
    Cost,
    Schedules,
    TileCost,
    compute_bound,
    estimate,
    fastest_rate,
    floor_bounds,
    forget_tile_prices,
    tile_runs,
    tile_seconds,
)
from teir_plan.planner.gemm_rate import forget_tile_rates
from teir_plan.planner.handoff import forget_handoffs
from teir_plan.planner.pack import Pack, pack_variant
from teir_plan.planner.parallel_k import k_parallel_choices, k_parallel_variants
from teir_plan.teir.axes import NO_AXIS, extent_table
from teir_plan.teir.enums import DimType
from teir_plan.teir.records import TEIR
from teir_plan.tilekinds import (
    LibraryCall,
    Reshapes,
    VariantArgs,
    forget_library_calls,
    wanted_packs,
    wanted_splits,
)


@dataclass(frozen=True)
class Ranked:
    """A candidate with its program, the packs it needs first, and its predicted cost."""

    contraction: Contraction  # the (fused, maybe packed or split) contraction it indexes
    choice: Choice
    cost: Cost  # includes the packs' seconds
    teir: TEIR
    names: tuple[str, ...]  # index name(s) of each TEIR axis
    packs: tuple[Pack, ...] = ()

    @property
    def predicted_seconds(self) -> float:
        return self.cost.seconds


# The planner's reshapes, with which the tile kinds build the variants they want.
RESHAPES = Reshapes(split_axis, parallel_part, cache_parts, pack_variant)


# Planning a result layout that wins is repeated in full (schedule/build.py: the losing
# layouts' searches keep fewer candidates); these memos let the repeat reuse the variants
# and the per-prim-choice tile costs of the first search.  Keyed by the machine
# parameters, bounded, and cleared by forget_memos.
@lru_cache(maxsize=256)
def variants(c: Contraction, params: MachineParams, threads: int,
             allow_pack: bool = True) -> tuple[tuple[Contraction, tuple[Pack, ...]], ...]:
    """The contractions the search schedules: as given (fused), with each input or both
    packed, and with a large free axis split for parallelism; among them, after the
    planner's own packs and after its own splits, those the tile kinds want
    (tilekinds.wanted_packs, wanted_splits)."""
    base = fuse_axes(c)
    args = VariantArgs(base, params, threads, RESHAPES)
    out: list[tuple[Contraction, tuple[Pack, ...]]] = [(base, ())]
    if allow_pack:
        p0 = pack_variant(base, 0, params, threads)
        p1 = pack_variant(base, 1, params, threads)
        if p0:
            out.append((fuse_axes(p0[0]), (p0[1],)))
        if p1:
            out.append((fuse_axes(p1[0]), (p1[1],)))
        if p0 and p1:
            both = pack_variant(p0[0], 1, params, threads)
            if both:
                out.append((fuse_axes(both[0]), (p0[1], both[1])))
        out += [(v, (p,)) for v, p in wanted_packs(args)]
    out += [(s, ()) for s in split_variants(base, threads)]
    out += [(s, ()) for s in wanted_splits(args)]
    out += [(s, ()) for s in k_parallel_variants(base, threads)]
    return tuple(out)


class PrimOption(NamedTuple):
    """One prim choice of a variant: its BLAS call, its tile's cost, and the lower bound
    on every schedule of it (without packs)."""

    bound: float
    prim: tuple[int, int, int, int]
    tile: TileCost
    call: LibraryCall | None


@lru_cache(maxsize=4096)
def prim_option(v: Contraction, prim: tuple[int, int, int, int], params: MachineParams,
                threads: int) -> PrimOption:
    """One prim choice of ``v``, costed."""
    call = tile_call(v, *prim[:3])
    t = tile_seconds(v, *prim, call, params)
    return PrimOption(compute_bound(v, prim, call, params, threads, t), prim, t, call)


def prim_options(v: Contraction, params: MachineParams, threads: int) -> tuple[PrimOption, ...]:
    """Every prim choice of ``v``, costed, most promising (lowest bound) first."""
    return tuple(sorted((prim_option(v, p, params, threads) for p in prim_choices(v)),
                        key=lambda o: o.bound))


def prim_floors(v: Contraction, params: MachineParams, threads: int
                ) -> tuple[tuple[float, int, tuple[int, int, int, int]], ...]:
    """Every prim choice of ``v`` as (floor_bound, its position, prim axes), cheapest
    floor first (ties in position order)."""
    floors, order = floor_order(v, params, threads)
    prims = prim_tuple(v)
    return tuple((floors[i], i, prims[i]) for i in order)


class _FloorStructure:
    """What :func:`floor_order` depends on, as a memo key: each axis' role, extent and
    whether each tensor has it (not its strides), the split axes and the dtype.  So the
    layouts of one contraction (a tree step's candidate orders, a plan's result layouts,
    its packed variants) share their floors.  Keeps the first contraction of the
    structure, to compute them from."""

    __slots__ = ("key", "contraction", "_hash")

    def __init__(self, c: Contraction) -> None:
        self.key = (tuple((ax.role, ax.extent, ax.strides[0] != 0, ax.strides[1] != 0,
                           ax.strides[2] != 0) for ax in c.axes),
                    tuple(split_inner(c).items()), c.dtype)
        self.contraction = c
        self._hash = hash(self.key)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _FloorStructure) and self.key == other.key


def floor_order(v: Contraction, params: MachineParams, threads: int
                ) -> tuple[tuple[float, ...], tuple[int, ...]]:
    """(each prim choice's floor bound, in :func:`prim_tuple`'s order; the positions
    sorted by floor, ties in position order).  The search takes prim choices from the
    front of this order only while their floors can make its cut, so the prim choices
    themselves are looked up for those alone.  Memoized per structure
    (:class:`_FloorStructure`): the floors (``cost.floor_bounds``) read the tiles'
    extents, the tensors' sizes and the flops, never a stride."""
    return _floor_order(_FloorStructure(v), params, threads)


@lru_cache(maxsize=1024)
def _floor_order(s: _FloorStructure, params: MachineParams, threads: int
                 ) -> tuple[tuple[float, ...], tuple[int, ...]]:
    v = s.contraction
    prims = prim_tuple(v)
    if len(prims) < _ARRAY_FLOORS:
        ext = extent_table(v.extents)
        tiles = [(ext[m], ext[n], ext[k], ext[br]) for m, n, k, br in prims]
        floors = tuple(floor_bounds(v, tiles, params, threads))
        return floors, tuple(sorted(range(len(prims)), key=floors.__getitem__))
    # Many prim choices (a tree step's many small axes: hundreds to thousands) share a
    # few tile shapes: each distinct shape's floor is priced once, the order found on
    # arrays.  A tile is coded by its extents' ranks among the distinct extents.
    values = sorted({*v.extents, 1})
    rank_of = {x: i for i, x in enumerate(values)}
    d = len(values)
    codes = np.array([*(rank_of[x] for x in v.extents), rank_of[1]], dtype=np.int64)
    t = codes[_prim_array(prims)]  # (NO_AXIS is -1: the last code, extent 1)
    keys = ((t[:, 0] * d + t[:, 1]) * d + t[:, 2]) * d + t[:, 3]
    distinct, inverse = np.unique(keys, return_inverse=True)
    tiles = []
    for key in distinct.tolist():
        key, br = divmod(key, d)
        key, k = divmod(key, d)
        m, n = divmod(key, d)
        tiles.append((values[m], values[n], values[k], values[br]))
    arr = np.array(floor_bounds(v, tiles, params, threads))[inverse.reshape(-1)]
    order = np.argsort(arr, kind="stable")  # (stable: ties in position order)
    return tuple(arr.tolist()), tuple(order.tolist())


# From this many prim choices on, floor_order works on arrays (below, the set-up costs
# more than it saves).
_ARRAY_FLOORS = 160


@lru_cache(maxsize=256)
def _prim_array(prims: tuple[tuple[int, int, int, int], ...]) -> np.ndarray:
    """``prims`` as an (n, 4) array of axis indices (NO_AXIS, -1, indexes the last)."""
    return np.array(prims, dtype=np.int64).reshape(-1, 4)


def _best_first(v: Contraction, params: MachineParams, threads: int, pack_seconds: float,
                cutoff: Callable[[], float]) -> Iterator[PrimOption]:
    """``v``'s prim choices in the order of their bounds (ties in prim_choices' order),
    while their bound plus ``pack_seconds`` is below ``cutoff()`` (which the caller
    lowers as it goes), costing each only when its floor comes up: every prim choice
    still waiting has a floor at most its bound, so a bound no larger than every waiting
    floor is the lowest bound left.  The waiting prim choices are the sorted floors
    from position ``p`` on; the costed ones wait in a heap; the next is the lower of the
    two fronts, by (value, position)."""
    floors, order = floor_order(v, params, threads)
    prims = prim_tuple(v)
    costed: list[tuple[float, int, PrimOption]] = []
    p, n = 0, len(order)
    while True:
        if p < n and (not costed or (floors[order[p]], order[p]) < costed[0][:2]):
            i = order[p]
            if not floors[i] + pack_seconds < cutoff():
                return
            p += 1
            opt = prim_option(v, prims[i], params, threads)
            heapq.heappush(costed, (opt.bound, i, opt))
        elif costed:
            if not costed[0][0] + pack_seconds < cutoff():
                return
            yield heapq.heappop(costed)[2]
        else:
            return


def rank(
    c: Contraction,
    params: MachineParams,
    threads: int,
    *,
    relu_last: bool = False,
    top: int = 8,
    allow_pack: bool = True,
    prune: bool = True,
    expansions: dict | None = None,
    ceiling: float = math.inf,
) -> list[Ranked]:
    """The ``top`` best candidates for ``c``, cheapest first (``prune=False`` costs
    every candidate, for testing that pruning loses nothing).

    ``expansions``: a dict shared by the searches of one plan, which keeps each prim
    choice's schedules (cost.Schedules: bounded, and priced as far as a search needed),
    so that searching a problem again with more candidates kept (schedule/build.py)
    costs only what the first search pruned.

    ``ceiling``: a cost no useful candidate reaches (another result layout's best, when
    schedule/build.py weighs several): prim choices whose lower bound reaches it are not
    costed, so the list may be shorter than ``top``, or empty when no candidate can
    cost less.  Every candidate cheaper than the ceiling is still found."""
    scored: list[tuple[float, int, Contraction, Choice, Cost, tuple[Pack, ...]]] = []
    serial = 0
    # The costs of the best `keep` candidates so far (negated: a max-heap).  Twice
    # `top`, because candidates that lower to the same program are dropped below.
    keep = 2 * top
    kept: list[float] = []

    def cutoff() -> float:
        """What a candidate must cost less than to be kept."""
        return min(-kept[0] if prune and len(kept) >= keep else math.inf, ceiling)

    # Schedules not priced because their lower bound was at the cutoff: (the serial
    # they would have had, contraction, their Schedules, index, packs).  Each sorts after
    # at least `keep` priced ones, so they matter only if the first `keep` hold fewer
    # than `top` distinct programs (then they are priced, below).
    unpriced: list[tuple[int, Contraction, Schedules, int, tuple[Pack, ...]]] = []
    for v, packs in variants(c, params, threads, allow_pack):
        pack_seconds = sum(p.seconds for p in packs)
        if pack_seconds + params.call_seconds >= cutoff():
            continue  # the packs alone cost more than the candidates kept
        # Best first, stopping at the first prim choice whose bound cannot make the cut
        # (nor can the later ones).  Those whose floor (a cheaper, lower bound) is at the
        # cutoff already are never costed at all.
        for opt in islice(_best_first(v, params, threads, pack_seconds, cutoff),
                          MAX_PRIM_CHOICES):
            memo_key = (v, opt.prim, threads, pack_seconds)
            sched = expansions.get(memo_key) if expansions is not None else None
            if sched is None:
                sched = _expand(v, opt, params, threads, pack_seconds)
                if expansions is not None:
                    expansions[memo_key] = sched
            for i in range(len(sched)):
                cost = sched.below(i, cutoff())
                if not isinstance(cost, Cost):
                    if cost < ceiling:
                        unpriced.append((serial, v, sched, i, packs))
                        serial += 1
                    continue
                if cost.seconds >= ceiling:
                    continue  # (at the ceiling it cannot win either: a tie keeps the other)
                scored.append((cost.seconds, serial, v, sched.choices[i], cost, packs))
                serial += 1
                if len(kept) < keep:
                    heapq.heappush(kept, -cost.seconds)
                elif cost.seconds < -kept[0]:
                    heapq.heapreplace(kept, -cost.seconds)
    scored.sort(key=lambda s: (s[0], s[1]))
    out, used = _distinct(scored, top, relu_last)
    if unpriced and (len(out) < top or used > keep):
        for n, v, sched, i, packs in unpriced:
            cost = sched.below(i, math.inf)
            assert isinstance(cost, Cost)
            if cost.seconds < ceiling:
                scored.append((cost.seconds, n, v, sched.choices[i], cost, packs))
        scored.sort(key=lambda s: (s[0], s[1]))
        out, _ = _distinct(scored, top, relu_last)
    return out


def _distinct(scored: list[tuple[float, int, Contraction, Choice, Cost, tuple[Pack, ...]]],
              top: int, relu_last: bool) -> tuple[list[Ranked], int]:
    """The first ``top`` candidates of ``scored`` (sorted) that lower to distinct
    programs, and how many entries of ``scored`` it took to find them."""
    out: list[Ranked] = []
    seen: set[tuple[TEIR, tuple[int, ...]]] = set()
    used = 0
    for _, _, v, ch, cost, packs in scored:
        used += 1
        teir = to_teir(v, ch, relu_last=relu_last)
        key = (teir, tuple(p.tensor for p in packs))
        if key in seen:
            continue
        seen.add(key)
        out.append(Ranked(v, ch, cost, teir, axis_names(v, ch), packs))
        if len(out) >= top:
            break
    return out, used


def _expand(v: Contraction, opt: PrimOption, params: MachineParams, threads: int,
            pack_seconds: float) -> Schedules:
    """Every schedule of one prim choice (loop orders, parallel sets), to be priced."""
    choices = [*choices_for(v, opt.prim, threads, opt.call),
               *k_parallel_choices(v, opt.prim, threads, opt.call)]
    runs = tile_runs(v, choices[0].prim_axes) if choices else (0, 0, 0)
    return Schedules(v, choices, params, threads, opt.tile, runs, pack_seconds)


def forget_memos() -> None:
    """Drop what the planner remembers across plans (copy schedules, BLAS efficiencies,
    tile prices, fastest rates of tile shapes, the cross-core handoffs counted between
    a tree's programs), so that the next plan is made as for a problem never seen; used
    to time planning.  The memos are keyed by the machine parameters,
    so they never need clearing for correctness."""
    ranked_copies.cache_clear()
    forget_tile_rates()
    fastest_rate.cache_clear()
    forget_tile_prices()
    forget_handoffs()
    forget_library_calls()
    variants.cache_clear()
    prim_option.cache_clear()
    _floor_order.cache_clear()
    _prim_array.cache_clear()


def plain(c: Contraction, params: MachineParams, *, relu_last: bool = False) -> Ranked:
    """A valid schedule without search (``optimize="plain"``): GEMM over the first M, N
    and K axes, the rest sequential loops in the contraction's order."""
    m = next(iter(c.by_role(DimType.M)), NO_AXIS)
    n = next(iter(c.by_role(DimType.N)), NO_AXIS)
    k = next(iter(c.by_role(DimType.K)), NO_AXIS)
    prim = {a for a in (m, n, k) if a != NO_AXIS}
    loops = tuple(a for a in range(len(c.axes)) if a not in prim)
    ch = Choice(loops, 0, m, n, k, NO_AXIS, tile_call(c, m, n, k))
    return Ranked(c, ch, estimate(c, ch, params, 1), to_teir(c, ch, relu_last=relu_last),
                  axis_names(c, ch))
