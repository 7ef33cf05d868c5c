"""The tile-kernel registry: one module per tile kind, each owning in one place the rule
that says whether it runs a tile, its price for the cost model, its encoding into the
tile table (named fields, :mod:`teir_plan.tilekinds.table`), and its description for
explain; its jitted entry point is in the executor, found by the kind's name
(``executor/lower.py``'s entry points).

Lowering (``executor/lower.py``), the cost model (``planner/cost.py``), the search's
variants (``planner/search.py``, ``planner/candidates.py``, ``planner/parallel_k.py``:
:func:`wanted_packs`, :func:`wanted_splits`, :func:`wanted_axis_splits`,
:func:`wanted_k_blocks`) and the explain report (``render/report.py``) are loops over
:data:`GEMM_KINDS` / :data:`KINDS`; the walker (``executor/walker.py``) dispatches a tile
on its kind's ``mode``, and is compiled with the kinds whose kernels it contains
(``in_walker``) or without them, as a program's kind says.  Adding a tile
kind is adding a module here, its entry point in the executor, and its place in
:data:`GEMM_KINDS`.  Nothing here imports numba: the planner plans without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from teir_plan.tilekinds import blas, copy, dot, loops, row, vec, vec_p, vec_t
from teir_plan.tilekinds.kind import GemmTile, Reshapes, TileKind, VariantArgs

if TYPE_CHECKING:
    from teir_plan.frontend.contraction import Contraction
    from teir_plan.planner.pack import Pack

# The GEMM tile kinds in the order lowering asks them: the first whose rule takes a
# tile runs it (loops takes every tile).
GEMM_KINDS: tuple[TileKind, ...] = (
    vec.KIND, vec_t.KIND, vec_p.KIND, dot.KIND, blas.KIND, loops.KIND,
)
# Every kind, in the order a lowered tile table is matched against them: the unary
# kinds by the primitive, the row tile (a loops tile with a loop folded in) before the
# GEMM kinds.
KINDS: tuple[TileKind, ...] = (copy.COPY, copy.RELU, row.KIND, *GEMM_KINDS)
BY_NAME: dict[str, TileKind] = {k.name: k for k in KINDS}


def lowered_kind(table: np.ndarray) -> TileKind:
    """The kind a lowered tile table runs on.

    >>> from teir_plan.tilekinds.table import TILE_LEN, set_fields
    >>> t = np.zeros(TILE_LEN, np.int64)
    >>> set_fields(t, kind=2, mode=blas.MODE)
    >>> lowered_kind(t).name
    'blas'
    """
    return next(k for k in KINDS if k.owns(table))


def choose(tile: GemmTile, vector_kernel: bool = True,
           mapped: bool | None = None) -> tuple[TileKind, int]:
    """The kind that runs a GEMM tile, and its axis (see TileKind.takes): the first of
    GEMM_KINDS whose rule takes it; ``vector_kernel`` False skips the vector kernels.
    ``mapped``: the answer of MAPPED_PER_CHOICE's rule when the caller has it already
    (the search maps each prim choice's library call once, :func:`library_call`), on
    axis 1.

    >>> kind, axis = choose(GemmTile(432, 24, 36, 1, (1, 62208), (1, 36), (1, 20736), 4))
    >>> kind.name in ("vec", "blas")  # "vec" on a vector target
    True
    """
    for kind in GEMM_KINDS:
        if kind.vector and not vector_kernel:
            continue
        if mapped is not None and kind is MAPPED_PER_CHOICE:
            if mapped:
                return kind, 1
            continue
        # A quick necessary condition first: the cost model asks this of every prim
        # choice the search considers.
        if not kind.may_take(tile):
            continue
        axis = kind.takes(tile)
        if axis:
            return kind, axis
    raise AssertionError("the loops kind takes every tile")  # pragma: no cover


# The rate (flop/s) of the fastest folded scalar tile (TileKind.fold_rate), for bounds.
FOLD_RATE = max(k.fold_rate for k in GEMM_KINDS)
# The kind whose rule the search maps once per prim choice: the library call its tile
# makes (LibraryCall, by library_call), which the cost model and the kind's price read,
# so that the planner names no kind.
MAPPED_PER_CHOICE = blas.KIND
LibraryCall = blas.BlasPlan
library_call = blas.tile_call
forget_library_calls = blas.blas_plan.cache_clear


# The reshaped contractions the kinds' tiles want the search to offer (TileKind's
# pack_variants, split_variants, axis_splits and k_blocks), every GEMM kind's in
# GEMM_KINDS' order: the search keeps the first of candidates it prices alike, so the
# order is part of the plans.
def wanted_packs(args: VariantArgs) -> list[tuple[Contraction, Pack]]:
    """The contractions with an input packed that the kinds want offered, and the packs."""
    return [v for kind in GEMM_KINDS for v in kind.pack_variants(args)]


def wanted_splits(args: VariantArgs) -> list[Contraction]:
    """The contractions with axes split that the kinds want offered."""
    return [v for kind in GEMM_KINDS for v in kind.split_variants(args)]


def wanted_axis_splits(c: Contraction, axis: int) -> list[int]:
    """The inner extents the kinds want M or N axis ``axis`` of ``c`` split at."""
    return [d for kind in GEMM_KINDS for d in kind.axis_splits(c, axis)]


def wanted_k_blocks(c: Contraction, axis: int) -> list[int]:
    """The K blocks the kinds' tiles of a short output take whole along K axis ``axis``."""
    return [d for kind in GEMM_KINDS for d in kind.k_blocks(c, axis)]


__all__ = ["BY_NAME", "FOLD_RATE", "GEMM_KINDS", "KINDS", "MAPPED_PER_CHOICE", "GemmTile",
           "LibraryCall", "Reshapes", "TileKind", "VariantArgs", "choose",
           "forget_library_calls", "library_call", "lowered_kind", "wanted_axis_splits",
           "wanted_k_blocks", "wanted_packs", "wanted_splits"]
