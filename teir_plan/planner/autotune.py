"""Autotuning: time the top candidates on real data and keep the fastest.

The cost model ranks; measurement corrects it.  Used by ``optimize="autotune"``;
the result is remembered with the plan in the plan cache.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from teir_plan.plan.plan import Plan

AUTOTUNE_CANDIDATES = 5


def time_plan(plan: Plan, arrays: Sequence[np.ndarray], repeats: int = 3) -> float:
    """Best-of-``repeats`` seconds of ``plan`` on ``arrays`` (after one warm-up run),
    writing the plan's own :meth:`Plan.empty_out` (exactly the layout its programs are
    proven for: a contiguous stand-in is too small for an ``out=`` with gaps)."""
    out = plan.empty_out()
    plan.run(arrays, out)
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        plan.run(arrays, out)
        best = min(best, time.perf_counter() - t)
    return best


def autotune(plan: Plan, arrays: Sequence[np.ndarray], top: int = AUTOTUNE_CANDIDATES) -> Plan:
    """The fastest of the plan's top ``top`` alternatives, measured on ``arrays``."""
    alts = plan.alternatives[:top]
    timed = []
    for alt in alts:
        alt.measured_seconds = time_plan(alt, arrays)
        timed.append(alt)
    best = min(timed, key=lambda p: p.measured_seconds or float("inf"))
    best.tuning = [(a.main_step.chosen if a.main_step else None, a.measured_seconds)  # type: ignore[attr-defined]
                   for a in timed]
    return best
