"""Candidate schedules for a binary contraction.

The space: which axes the primitive consumes (GEMM over one M, N and K axis, or
BRGEMM with a second K axis as batch-reduce), after fusing axes whose strides
compose and optionally splitting a large prim axis into an outer loop and an
inner tile; the order of the remaining loop axes; and which loop axes run in
parallel.  A :class:`Choice` is a light description that the cost model can
rank cheaply; :func:`to_teir` turns the ones worth keeping into TEIR programs.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from teir_plan.divisors import divisor_near
from teir_plan.frontend.contraction import Axis, Contraction
from teir_plan.teir.axes import NO_AXIS
from teir_plan.teir.enums import DimType, ExecType, Prim
from teir_plan.teir.records import TEIR, Primitives, Schedule
from teir_plan.tilekinds import GemmTile, LibraryCall, library_call, wanted_axis_splits

MAX_PRIM_CHOICES = 6
MAX_EXHAUSTIVE_LOOPS = 3
MAX_PARALLEL_SETS = 3


@dataclass(frozen=True, init=False)
class Choice:
    """One schedule: loop axes outermost first (the first ``npar`` run in parallel) and
    the prim axes (indices into the contraction's axes, NO_AXIS when absent)."""

    loops: tuple[int, ...]
    npar: int
    m: int
    n: int
    k: int
    br: int  # BRGEMM batch-reduce axis, NO_AXIS for GEMM
    call: LibraryCall | None  # the tile's library call (None: the kernels run it)
    # Derived, set once here: the search builds thousands of choices per plan, and a
    # cached_property's first access costs more than computing these.
    prim_axes: tuple[int, ...] = field(init=False, compare=False, repr=False)
    parallel: tuple[int, ...] = field(init=False, compare=False, repr=False)

    def __init__(self, loops: tuple[int, ...], npar: int, m: int, n: int, k: int, br: int,
                 call: LibraryCall | None) -> None:
        # (one update of the instance's dict: a frozen dataclass' own __init__ sets each
        # field through object.__setattr__, a sixth of building the search's schedules)
        self.__dict__.update(
            loops=loops, npar=npar, m=m, n=n, k=k, br=br, call=call,
            prim_axes=tuple([a for a in (br, m, n, k) if a != NO_AXIS]),
            parallel=loops[:npar])


def fuse_axes(c: Contraction) -> Contraction:
    """Merge axes of one role whose strides compose in every tensor (outer stride =
    inner stride x inner extent): one longer axis, fewer loops, bigger tiles.

    Fusing an outer axis into its inner one leaves the pair's links to other axes as
    they were (the fused axis continues what the outer did, and into what the inner
    did), so where every axis continues into at most one other and at most one
    continues into it, the links form chains and the result is each chain fused into
    one axis, at the place of its first member, found in one pass.  Otherwise
    (:func:`_fuse_pairwise`) pairs fuse one at a time, the first in (outer, inner)
    order first."""
    axes = c.axes
    # outer strides that continue axis j -> the axes j, in order (keyed by strides
    # alone: hashing the roles, enum members, cost more than comparing them after)
    inner_of: dict[tuple[int, ...], list[int]] = {}
    for j, inner in enumerate(axes):
        s0, s1, s2 = inner.strides
        e = inner.extent
        if e <= 1 or not (s0 or s1 or s2):
            return _fuse_pairwise(c)  # (links that can loop)
        inner_of.setdefault((s0 * e, s1 * e, s2 * e), []).append(j)
    into: dict[int, int] = {}  # outer -> the inner it continues into
    for i, outer in enumerate(axes):
        js = inner_of.get(outer.strides)
        if js:
            found = [j for j in js if j != i and axes[j].role is outer.role]
            if len(found) > 1:
                return _fuse_pairwise(c)
            if found:
                into[i] = found[0]
    if not into:
        return Contraction(tuple(axes), c.dtype)
    if len(set(into.values())) < len(into):
        return _fuse_pairwise(c)  # (an axis two others continue into)
    has_outer = set(into.values())
    fused: dict[int, Axis] = {}  # the place of each chain's first member -> the chain
    covered = 0
    for head in range(len(axes)):
        if head in has_outer:
            continue
        chain = [head]
        while chain[-1] in into:
            chain.append(into[chain[-1]])
        covered += len(chain)
        extent = 1
        for i in chain:
            extent *= axes[i].extent
        first = axes[head]
        fused[min(chain)] = first if len(chain) == 1 else Axis(
            "".join(axes[i].name for i in chain), first.role, extent, axes[chain[-1]].strides)
    assert covered == len(axes)  # (no loops: strides grow along a chain)
    return Contraction(tuple(fused[i] for i in sorted(fused)), c.dtype)


def _fuse_pairwise(c: Contraction) -> Contraction:
    """:func:`fuse_axes` one pair at a time: the first pair in (outer, inner) order
    fuses, then the search starts again; each round looks the outer axes up in a table
    of what every inner axis continues into, instead of trying every pair."""
    axes = list(c.axes)
    while True:
        inner_of: dict[tuple[int, ...], list[int]] = {}
        for j, inner in enumerate(axes):
            s0, s1, s2 = inner.strides
            e = inner.extent
            inner_of.setdefault((s0 * e, s1 * e, s2 * e), []).append(j)
        pair = None
        for i, outer in enumerate(axes):
            js = inner_of.get(outer.strides)
            if js:
                found = next((j for j in js if j != i and axes[j].role is outer.role), None)
                if found is not None:
                    pair = (i, found)
                    break
        if pair is None:
            return Contraction(tuple(axes), c.dtype)
        i, j = pair
        outer, inner = axes[i], axes[j]
        fused = Axis(outer.name + inner.name, outer.role, outer.extent * inner.extent,
                     inner.strides)
        axes = [a for t, a in enumerate(axes) if t not in (i, j)]
        axes.insert(min(i, j), fused)


def split_axis(c: Contraction, index: int, inner: int) -> Contraction:
    """Split axis ``index`` into (outer, inner) with ``inner`` dividing its extent."""
    ax = c.axes[index]
    outer_extent = ax.extent // inner
    outer = Axis(
        ax.name + "^", ax.role, outer_extent, tuple(s * inner for s in ax.strides)  # type: ignore[arg-type]
    )
    inner_ax = Axis(ax.name, ax.role, inner, ax.strides)
    axes = list(c.axes)
    axes[index : index + 1] = [outer, inner_ax]
    return Contraction(tuple(axes), c.dtype)


# Inner extents tried when splitting a long M or N axis into cache-sized tiles: a BLAS
# output tile larger than L2 goes to memory and back once per block of K, and once more
# for beta (see cost.py); a few thousand elements keep it in cache for most tile shapes.
CACHE_SPLIT_TARGETS = (512, 4096)


def split_variants(c: Contraction, threads: int) -> list[Contraction]:
    """Contractions with one large M or N axis split: into tiles the kinds want
    (tilekinds.wanted_axis_splits), into a few parts, so that the outer part can feed
    the parallel loops, and into cache-sized inner tiles."""
    out = []
    for i, ax in enumerate(c.axes):
        if ax.role not in (DimType.M, DimType.N):
            continue
        inners = wanted_axis_splits(c, i)
        part = parallel_part(ax.extent, threads)
        if part is not None:
            inners.append(part)
        inners += cache_parts(ax.extent)
        out += [split_axis(c, i, inner) for inner in dict.fromkeys(inners)]  # no repeats
    return out


def cache_parts(extent: int) -> list[int]:
    """The inner extents of an M or N axis of ``extent`` split into cache-sized tiles
    (about each of CACHE_SPLIT_TARGETS, for an axis at least four times as long).

    >>> cache_parts(1000), cache_parts(4096), cache_parts(65536)
    ([], [512], [512, 4096])
    """
    out = []
    for target in CACHE_SPLIT_TARGETS:
        if extent >= 4 * target:
            d = divisor_near(extent, target)
            if d is not None:
                out.append(d)
    return out


def parallel_part(extent: int, threads: int) -> int | None:
    """The inner extent of an M or N axis split into a few parts that feed the parallel
    loops (threads, twice or four times as many, whichever divides it first), or None:
    one thread, an axis shorter than 64 a thread, or no such divisor.

    >>> parallel_part(512, 2), parallel_part(100, 2), parallel_part(520, 8)
    (256, None, 65)
    """
    if threads < 2 or extent < 64 * threads:
        return None
    parts = next((p for p in (threads, 2 * threads, 4 * threads) if extent % p == 0), None)
    return extent // parts if parts is not None else None


def tile_call(c: Contraction, m: int, n: int, k: int) -> LibraryCall | None:
    """The library call of one GEMM tile over these prim axes (NO_AXIS where absent),
    if the mapped kind can make it (tilekinds.library_call)."""
    return library_call(GemmTile.of_axes(c.extents, c.tensor_strides, m, n, k, NO_AXIS,
                                         c.dtype.itemsize))


def prim_choices(c: Contraction, allow_brgemm: bool = True) -> Iterator[tuple[int, int, int, int]]:
    """(m, n, k, br) axis choices: every GEMM and BRGEMM shape the roles allow.

    A BRGEMM needs a K axis of its own: without one it is a batch of rank-1 products,
    one BLAS call per step of ``br`` at a few percent of BLAS' peak, where the GEMM over
    ``br`` does the same work in one call (packing an operand if it must).  Leaving them
    out changed no plan among the TCCG and overhead cases and saves the search a quarter
    of its prim choices.
    """
    yield from prim_tuple(c, allow_brgemm)


def prim_tuple(c: Contraction, allow_brgemm: bool = True) -> tuple[tuple[int, int, int, int], ...]:
    """:func:`prim_choices` as a tuple, remembered per structure (:func:`_prim_skeleton`)."""
    return _prim_skeleton(tuple(ax.role for ax in c.axes), tuple(split_inner(c).items()),
                          allow_brgemm)


# Distinct (roles, splits) structures whose prim choices are remembered (least recently
# used dropped first): a sweep over extents, or a tree's steps, repeat a few structures.
# An entry is (M + 1)(N + 1)(K + K(K - 1) + 1) tuples of 4 small ints: about 10 KB for 8
# indices, 300 KB for a step of 20 small axes (5 M, 5 N, 10 K): under 80 MB if every entry
# were such a step, well under 1 MB for the binary contractions of a sweep.
PRIM_SKELETONS = 256


def forget_structures() -> None:
    """Drop the prim choices remembered per structure (timing a problem whose structure
    was never seen: benchmarks/planning.py)."""
    _prim_skeleton.cache_clear()


@lru_cache(maxsize=PRIM_SKELETONS)
def _prim_skeleton(roles: tuple[DimType, ...], splits: tuple[tuple[int, int], ...],
                   allow_brgemm: bool) -> tuple[tuple[int, int, int, int], ...]:
    """:func:`prim_choices` of a contraction whose axes have these roles and split axes
    (outer index, inner index): they depend on nothing else."""
    ms = [*(i for i, r in enumerate(roles) if r is DimType.M), NO_AXIS]
    ns = [*(i for i, r in enumerate(roles) if r is DimType.N), NO_AXIS]
    ks = [i for i, r in enumerate(roles) if r is DimType.K]
    inner = dict(splits)
    out = []
    for m in ms:
        for n in ns:
            for k in [*ks, NO_AXIS]:
                if not inner or _blocked(inner, (m, n, k, NO_AXIS)):
                    out.append((m, n, k, NO_AXIS))
                if allow_brgemm and k != NO_AXIS:
                    for br in ks:
                        if br != k and (not inner or _blocked(inner, (m, n, k, br))):
                            out.append((m, n, k, br))
    return tuple(out)


def split_inner(c: Contraction) -> dict[int, int]:
    """The axes :func:`split_axis` made: each outer part's index, mapped to its inner
    part's (the outer is named after the inner, with ``^``)."""
    index = {a.name: i for i, a in enumerate(c.axes)}
    return {i: index[a.name[:-1]] for i, a in enumerate(c.axes)
            if a.name.endswith("^") and a.name[:-1] in index}


def _blocked(inner: dict[int, int], prim: tuple[int, int, int, int]) -> bool:
    """Whether a tile over ``prim`` (m, n, k, br) takes split axes as blocks: an outer
    part only with its inner part, and a K split's inner part as the tile's K, its outer
    as the batch.  The other way round the tile strides through memory the inner
    extent times further for the same flops (a K split 32 x 32 with the outer part as
    the tile's K: its K rows 32 KiB apart instead of one run), which the cost model,
    pricing a tile by its shape and its operands' unit strides, does not see: on
    cdeh,defg->chfg (K 1024 split 32 x 32; 16 x 256 x 32 vector tiles, float32) 459 us
    against 356 on 2 threads of an AMD EPYC Zen 5, priced alike (docs/decisions.md)."""
    for axis in prim:
        if axis in inner:
            part = inner[axis]
            if part not in prim or (axis == prim[2] and part == prim[3]):
                return False
    return True


def loop_orders(c: Contraction, loops: Sequence[int]) -> list[tuple[int, ...]]:
    """Orders of the loop axes worth costing: all of them for few loops, else orders by
    each tensor's strides (outermost = largest stride), with K loops inside or outside.

    All of them come in the order of out's strides, largest first: the model prices a
    loop order by its traffic, not by where each worker's writes fall, so orders it
    prices alike keep the first, whose workers then write contiguous parts of out.
    dgij,cfhj->dgicfh (FCTN's first step, 2 threads, AMD EPYC Zen 5), priced alike:
    parallel over d (out's rows 5 KiB apart) 178-183 us, over f (800 KiB apart) 149-152."""
    loops = list(loops)
    ax = c.axes
    if len(loops) <= MAX_EXHAUSTIVE_LOOPS:
        return sorted((tuple(p) for p in itertools.permutations(loops)),
                      key=lambda p: [-abs(ax[a].strides[2]) for a in p])

    def by(j: int) -> list[int]:
        return sorted(loops, key=lambda a: -abs(ax[a].strides[j]))

    non_k = [a for a in by(2) if ax[a].role is not DimType.K]
    k_in = sorted(
        (a for a in loops if ax[a].role is DimType.K),
        key=lambda a: -(abs(ax[a].strides[0]) + abs(ax[a].strides[1])),
    )
    orders = [tuple(non_k + k_in), tuple(k_in + non_k), tuple(by(0)), tuple(by(1))]
    unique: list[tuple[int, ...]] = []
    for o in orders:
        if o not in unique:
            unique.append(o)
    return unique


def parallel_sets(c: Contraction, order: Sequence[int], threads: int) -> list[tuple[int, ...]]:
    """Subsets of the non-K loop axes to run in parallel (collapsed): none, and the best
    balanced single axes and pairs with at least ``threads`` iterations."""
    return ParallelRanking(c, order, threads).sets(order)


class ParallelRanking:
    """:func:`parallel_sets` of one set of loops in any order: the sets' balance does not
    depend on the order, only the last tie-break (outer axes first) does, so the sets
    are ranked once per prim choice and each loop order only orders the ties that can
    make the cut."""

    __slots__ = ("threads", "groups")

    def __init__(self, c: Contraction, loops: Sequence[int], threads: int) -> None:
        self.threads = threads
        ax = c.axes
        cands = [a for a in loops if ax[a].role is not DimType.K and ax[a].extent > 1
                 ] if threads > 1 else []
        by_rank: dict[tuple[float, int], list[tuple[int, ...]]] = {}
        for r in (1, 2):
            for combo in itertools.combinations(cands, r):
                iters = 1
                for a in combo:
                    iters *= ax[a].extent
                if iters >= threads:
                    balance = iters / (threads * -(-iters // threads))
                    # Prefer balance, then fewer axes, then outer axes (contiguous blocks).
                    by_rank.setdefault((-balance, r), []).append(combo)
        self.groups = [by_rank[k] for k in sorted(by_rank)]

    def sets(self, order: Sequence[int]) -> list[tuple[int, ...]]:
        """The parallel sets for the loops in ``order`` (outermost first)."""
        if self.threads <= 1:
            return [()]
        want = MAX_PARALLEL_SETS - 1
        pos = {a: i for i, a in enumerate(order)}
        picked: list[tuple[int, ...]] = []
        for group in self.groups:
            if len(picked) >= want:
                break
            ranked = sorted((sorted(pos[a] for a in combo), combo) for combo in group)
            picked += [tuple(order[i] for i in p) for p, _ in ranked]
        return [(), *picked[:want]]


def choices_for(c: Contraction, prim: tuple[int, int, int, int], threads: int,
                call: LibraryCall | None | bool = True) -> Iterator[Choice]:
    """Every loop order and parallel set for one prim choice, parallel axes outermost
    (the executor collapses them into one parallel range).  ``call``: the prim axes'
    :func:`tile_call`, when the caller has it already."""
    m, n, k, br = prim
    if isinstance(call, bool):
        call = tile_call(c, m, n, k)
    taken = {a for a in prim if a != NO_AXIS}
    loops = [a for a in range(len(c.axes)) if a not in taken]
    ranking = ParallelRanking(c, loops, threads)
    for order in loop_orders(c, loops):
        for par in ranking.sets(order):
            rest = tuple(a for a in order if a not in par)
            yield Choice(tuple(par) + rest, len(par), m, n, k, br, call)


def to_teir(c: Contraction, ch: Choice, zero_first: bool = True, relu_last: bool = False) -> TEIR:
    """The TEIR program of a choice: loop axes in order, then prim axes (br, m, n, k)."""
    order = list(ch.loops) + list(ch.prim_axes)
    exec_types = (
        [ExecType.PARALLEL] * ch.npar
        + [ExecType.SEQ] * (len(ch.loops) - ch.npar)
        + [ExecType.PRIM] * len(ch.prim_axes)
    )
    ax = c.axes
    main = Prim.BRGEMM if ch.br != NO_AXIS else Prim.GEMM
    return TEIR(
        Primitives(
            str(c.dtype),
            Prim.ZERO if zero_first else Prim.NONE,
            main,
            Prim.RELU if relu_last else Prim.NONE,
        ),
        Schedule(
            [ax[a].role for a in order],
            exec_types,
            [ax[a].extent for a in order],
            [[ax[a].strides[j] for a in order] for j in range(3)],
        ),
    )


def axis_names(c: Contraction, ch: Choice) -> tuple[str, ...]:
    return tuple(c.axes[a].name for a in list(ch.loops) + list(ch.prim_axes))
