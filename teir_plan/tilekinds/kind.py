"""What a tile kind is: the record each module of this package registers.

A GEMM tile reaches the tile kinds as a :class:`GemmTile` (its extents and each
operand's strides along its two axes, as the kernels see them); each kind answers
whether it runs the tile (``takes``: along which axis), what a call costs (``price``),
what its tiles cost a schedule beyond their calls (``split``, ``read_factor``,
``out_traffic``, ``fold``, ``read_overlap_loss``: the cost model's terms that differ by
kind, asked through one record, :class:`ScheduleArgs`), which reshaped contractions its
tiles want the search to offer (``pack_variants``, ``split_variants``, ``axis_splits``,
``k_blocks``: built with the planner's reshapes, :class:`Reshapes`), how it fills the
tile table (``encode``), and how the explain report describes it (``describe``).
Nothing here imports numba, the executor or the planner.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, Protocol

import numpy as np

from teir_plan.teir.axes import extent_at, stride_at

if TYPE_CHECKING:
    from teir_plan.frontend.contraction import Contraction
    from teir_plan.machine.params import MachineParams
    from teir_plan.planner.candidates import Choice
    from teir_plan.planner.pack import Pack
    from teir_plan.tilekinds.blas import BlasPlan


class GemmTile(NamedTuple):
    """One GEMM tile: C(m x n) += A(m x k) B(k x n), ``br`` times (a batch-reduce),
    with ``a`` = A's (M, K) strides, ``b`` = B's (K, N) strides, ``c`` = C's (M, N)
    strides, in elements of ``itemsize`` bytes.  An axis the primitive does not have
    is extent 1 and stride 0 here (teir_plan.teir.axes)."""

    m: int
    n: int
    k: int
    br: int
    a: tuple[int, int]
    b: tuple[int, int]
    c: tuple[int, int]
    itemsize: int

    @classmethod
    def of_axes(cls, extents: Sequence[int], strides: Sequence[Sequence[int]], m: int,
                n: int, k: int, br: int, itemsize: int) -> GemmTile:
        """The tile whose M, N, K and batch-reduce axes are these positions (NO_AXIS
        where absent) among axes of ``extents``, with ``strides`` each tensor's (in0,
        in1, out) along them: a TEIR schedule's, or a contraction's.

        >>> GemmTile.of_axes((8, 24), ((24, 1), (0, 1), (1, 0)), 0, -1, 1, -1, 4)
        GemmTile(m=8, n=1, k=24, br=1, a=(24, 1), b=(1, 0), c=(1, 0), itemsize=4)
        """
        s0, s1, s2 = strides
        return cls(extent_at(extents, m), extent_at(extents, n), extent_at(extents, k),
                   extent_at(extents, br), (stride_at(s0, m), stride_at(s0, k)),
                   (stride_at(s1, k), stride_at(s1, n)), (stride_at(s2, m), stride_at(s2, n)),
                   itemsize)


class Entries(Protocol):
    """The executor's compiled entry points for one dtype, by name (lower.py)."""

    def address(self, name: str) -> int: ...

    def gemm(self, three_m: bool = False) -> tuple[int, int]: ...


class Lowering(NamedTuple):
    """What a kind's encoder needs besides the tile: the dtype, whether out streams to
    memory (tiles.streams_out), and the executor's entry points."""

    dtype: np.dtype
    streamed: bool
    entries: Entries


class PriceArgs(NamedTuple):
    """What a kind's price needs besides the tile (planner/cost.py's tile_seconds)."""

    params: MachineParams
    dtype: np.dtype
    flops: int  # the tile's flops: 2 m n k br
    streamed: bool  # out streams to memory for this prim choice (cost.streamed)
    call: BlasPlan | None  # the prim choice's library call (tilekinds.library_call)


class Price(NamedTuple):
    """One call of a tile kind on one core, before the walker's bookkeeping."""

    seconds: float
    packed_bytes: int = 0  # operand bytes gathered into a buffer per call
    # Of ``seconds``: the vector operand's block repacked into the worker's buffer, which
    # the kernel skips when the worker's previous tile read the same block (the packed
    # vector tile's transpose, gemm_tiles.gemm_vec_packed; cost.py prices that reuse).
    repack_seconds: float = 0.0
    streams: bool = False  # out's lines stored non-temporally


class ScheduleArgs(NamedTuple):
    """What a kind's schedule terms see (planner/cost.py's estimate): the contraction, the
    candidate schedule whose tiles the kind runs, along which axis (``takes``), the
    machine, the threads, and one call's flops (2 m n k br, real or complex)."""

    c: Contraction
    ch: Choice
    axis: int
    params: MachineParams
    threads: int
    tile_flops: int


class Split(NamedTuple):
    """A program without parallel loops whose tiles the kind shares over the threads."""

    threads: int  # cores used
    speedup: float  # the tile's compute time is divided by this
    overhead: float  # seconds added (a parallel region's start)
    rereads: float  # bytes the parts read again (each the operand the split does not cut)


class OutTraffic(NamedTuple):
    """How a kind's output tiles move beyond being read and written once a tile."""

    resident_bytes: float  # an output tile at most this large stays in cache across loops
    refill: float  # times an output tile larger than that moves per tile
    slow: float  # times slower than streamed bytes its lines move


class Fold(NamedTuple):
    """A scalar tile whose innermost loop the executor folds into one call."""

    calls_divisor: int  # the loop's iterations, now one call
    per_call: float  # seconds of one folded call, bookkeeping included


class Reshapes(NamedTuple):
    """The planner's ways to reshape a contraction, which a kind's variants build on: the
    planner imports the kinds, so they reach these through this record (planner/search.py's
    RESHAPES), as an encoder reaches the executor's entry points through Lowering."""

    # (c, axis index, inner extent): the axis split into an outer part ``name^`` and an
    # inner part (candidates.split_axis), as the planner's splits are.
    split_axis: Callable[[Contraction, int, int], Contraction]
    # (extent, threads): the inner extent of an M or N axis in a part per thread, or None
    # (candidates.parallel_part).
    parallel_part: Callable[[int, int], int | None]
    # extent: the inner extents of an M or N axis split into cache-sized tiles
    # (candidates.cache_parts).
    cache_parts: Callable[[int], list[int]]
    # (c, input, params, threads, axis order): ``c`` with that input packed into a buffer
    # whose axes run in that order, and the pack, or None (pack.pack_variant).
    pack: Callable[[Contraction, int, MachineParams, int, list[int]],
                   tuple[Contraction, Pack] | None]


class VariantArgs(NamedTuple):
    """What a kind's variants see (planner/search.py's variants): the contraction (axes
    fused), the machine, the threads, and the planner's reshapes."""

    c: Contraction
    params: MachineParams
    threads: int
    reshapes: Reshapes


def no_variants(args: VariantArgs) -> list:
    return []


def no_splits(c: Contraction, axis: int) -> list[int]:
    return []


def no_split(args: ScheduleArgs) -> Split | None:
    return None


def no_read_factor(args: ScheduleArgs, operand: int) -> float:
    return 1.0


def out_in_l2(args: ScheduleArgs) -> OutTraffic:
    return OutTraffic(args.params.l2_bytes, 1.0, 1.0)


def no_fold(args: ScheduleArgs) -> Fold | None:
    return None


def no_floor(m: int, n: int, k: int, itemsize: int, params: MachineParams,
              dtype: np.dtype) -> float:
    return 0.0


def _never(tile: GemmTile) -> int:
    return 0


def _maybe(tile: GemmTile) -> bool:
    return True


@dataclass(frozen=True)
class TileKind:
    """A tile kind of the registry (see the package docstring)."""

    name: str
    # The kind's MODE in the tile table (tiles of other primitives, copy and relu,
    # have none: -1).
    mode: int
    # Whether this kind runs a lowered tile table (the registry asks each in turn).
    owns: Callable[[np.ndarray], bool]
    # The description of a lowered tile table of a dtype for explain (after
    # "executor: ").
    describe: Callable[[np.ndarray, np.dtype], str]
    # 0: the kind does not run this tile; else along which axis (1: M, 2: N), or 1.
    takes: Callable[[GemmTile], int] = _never
    # A quick necessary condition of ``takes``, for the cost model, which asks it of
    # every prim choice the search considers.
    may_take: Callable[[GemmTile], bool] = _maybe
    # Writes the tile's fields for this kind (``takes``' axis).
    encode: Callable[[np.ndarray, GemmTile, int, Lowering], None] | None = None
    # One call's cost on one core.
    price: Callable[[GemmTile, int, PriceArgs], Price] | None = None
    # An upper bound on the rate (flop/s) the kind reaches on any m x n x k tile
    # (0: none), for the search's floors (cost.floor_bounds).
    floor_rate: Callable[[int, int, int, int, MachineParams, np.dtype], float] = no_floor
    vector: bool = False  # a vector kernel: lower(vector_kernel=False) skips it
    # Its tiles run in the loop walker's own code (executor/walker.py), not through an
    # address: a program of them runs on the walker compiled with those kinds, a
    # program of any other kind on the one compiled without (a first call compiles
    # only the one it runs).
    in_walker: bool = False
    # The schedule's terms (see ScheduleArgs).  A program without parallel loops whose
    # tiles this kind splits over the threads, or None.
    split: Callable[[ScheduleArgs], Split | None] = no_split
    # How much more than its bytes operand 0 or 1 moves from memory under this kind.
    read_factor: Callable[[ScheduleArgs, int], float] = no_read_factor
    # How the output tiles move (see OutTraffic).
    out_traffic: Callable[[ScheduleArgs], OutTraffic] = out_in_l2
    # The scalar tiles this kind runs with the innermost loop folded in, or None.
    fold: Callable[[ScheduleArgs], Fold | None] = no_fold
    # The rate (flop/s) of a folded scalar tile (0: this kind folds none), for bounds.
    fold_rate: float = 0.0
    # The part of the smaller of compute and the operands' read time that does not
    # overlap the larger, beyond the model's OVERLAP_LOSS.
    read_overlap_loss: float = 0.0
    # Reshaped contractions this kind's tiles want offered besides the planner's own (the
    # search asks every GEMM kind in the registry's order, tilekinds.wanted_packs and
    # wanted_splits): with an input packed (where the search packs, after its own
    # packs), and with axes split (after its own splits).
    pack_variants: Callable[[VariantArgs], list[tuple[Contraction, Pack]]] = no_variants
    split_variants: Callable[[VariantArgs], list[Contraction]] = no_variants
    # (c, axis index): inner extents this kind's tiles want an M or N axis split at,
    # ahead of the planner's own splits of that axis (candidates.split_variants).
    axis_splits: Callable[[Contraction, int], list[int]] = no_splits
    # (c, K axis index): K blocks this kind's tiles of a short output take whole, offered
    # with the outer part of the split shared out to the threads (parallel_k).
    k_blocks: Callable[[Contraction, int], list[int]] = no_splits
