"""What planning recorded about a plan (opt_einsum's ``PathInfo``): the options it was
made with and the choices the explain report shows.  The report renders this record; it
never plans again."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from teir_plan.frontend.convention import Casting, Optimize
    from teir_plan.schedule.alternatives import FreeLayout, LayoutOption
    from teir_plan.schedule.tree_plan import TreeLayouts


@dataclass(frozen=True)
class PlanInfo:
    """A plan's record of its own planning."""

    dtype: np.dtype  # the result's
    optimize: Optimize  # the optimize= option, normalized (its path, search, autotune)
    casting: Casting
    epilogue: str | None  # "relu", or None
    threads: int  # the threads it was planned for
    # Which machine parameters ranked the candidates (reference, ISA-derived, first-use
    # or calibrated: MachineParams.describe_source); "" for a view.
    machine_params: str = ""
    # order= as given, and each result layout it considered (None: the layout was fixed
    # by out= or an order other than "K", or the plan is a view).
    order: str | None = None
    result_layouts: tuple[LayoutOption, ...] = ()
    # With the layout fixed: the layout order="K" would have chosen, and its cost.
    free_layout: FreeLayout | None = None
    # A tree's layout choices per step (schedule/tree_plan.py), or None.
    tree_layouts: TreeLayouts | None = None
    # Chosen among its alternatives by timing them (optimize="autotune").
    autotuned: bool = False
