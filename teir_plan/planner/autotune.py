"""Autotuning: time the top candidates on real data and keep the fastest.

The cost model ranks; measurement corrects it.  Used by ``optimize="autotune"``;
the result is remembered with the plan in the plan cache.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from teir_plan.errors import PlanError
from teir_plan.progress import seconds_text, working

if TYPE_CHECKING:  # plans are timed, not built, here: the planner does not import plans
    from teir_plan.schedule.operands import OperandSpec
    from teir_plan.schedule.plan import Plan

AUTOTUNE_CANDIDATES = 5
ANNOUNCE_SECONDS = 1.0  # timings predicted to take longer say so first (progress.py)
# optimize="autotune" on shapes (tp.plan) times the candidates on random arrays of them:
# at most this share of the machine's memory (shapes of 2**31 x 2 plan at once; filling
# them would take 32 GiB, or the process).
RANDOM_OPERANDS_MEMORY_SHARE = 0.25


def random_operands(specs: Sequence[OperandSpec]) -> list[np.ndarray]:
    """Random arrays of ``specs``' layouts, to autotune a plan made from shapes; a
    PlanError naming ``optimize`` when they would take more than
    RANDOM_OPERANDS_MEMORY_SHARE of the machine's memory."""
    need = sum(math.prod(s.shape) * s.dtype.itemsize for s in specs)
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        memory = 8 << 30
    message = (f"optimize: 'autotune' on shapes times the candidates on random arrays of "
               f"them, {need} bytes, more than {RANDOM_OPERANDS_MEMORY_SHARE:.0%} of this "
               f"machine's memory; pass the arrays, or plan with optimize=True")
    if need > RANDOM_OPERANDS_MEMORY_SHARE * memory:
        raise PlanError(message)
    rng = np.random.default_rng(0)
    try:
        return [s.random(rng) for s in specs]
    except MemoryError:
        raise PlanError(message) from None


def time_plan(plan: Plan, arrays: Sequence[np.ndarray], repeats: int = 3) -> float:
    """Best-of-``repeats`` seconds of ``plan`` on ``arrays`` (after one warm-up run),
    writing the plan's own :meth:`Plan.empty_out` (exactly the layout its programs are
    proven for: a contiguous stand-in is too small for an ``out=`` with gaps)."""
    return time_in_turns([plan], arrays, repeats)[0]


def time_in_turns(plans: Sequence[Plan], arrays: Sequence[np.ndarray],
                  repeats: int = 3, clock: Callable[[], float] = time.perf_counter
                  ) -> list[float]:
    """Best-of-``repeats`` seconds of each plan on ``arrays``: one warm-up run each, then
    ``repeats`` rounds of one run of each.  In turns, a busy spell of a shared machine
    slows every plan's run of that round instead of all the runs of whichever plan it
    fell on (timed one plan after another, the cost model's choice for adec,ebd->abc
    measured 1.40x slower than an alternative; in turns, the two within 3 %).  Each plan
    writes its own :meth:`Plan.empty_out`, one array per distinct layout.  ``clock``:
    seconds as a float (the tests give one of their own)."""
    expected = (repeats + 1) * sum(p.predicted_seconds for p in plans)
    if expected >= ANNOUNCE_SECONDS:
        with working(f"timing {len(plans)} candidate plans, {repeats + 1} runs each",
                     seconds_text(expected)):
            return _time_in_turns(plans, arrays, repeats, clock)
    return _time_in_turns(plans, arrays, repeats, clock)


def _time_in_turns(plans: Sequence[Plan], arrays: Sequence[np.ndarray], repeats: int,
                   clock: Callable[[], float]) -> list[float]:
    outs: dict[object, np.ndarray] = {}
    for plan in plans:
        if plan.out_spec not in outs:
            outs[plan.out_spec] = plan.empty_out()
    for plan in plans:
        plan.run(arrays, outs[plan.out_spec])
    best = [float("inf")] * len(plans)
    for _ in range(repeats):
        for i, plan in enumerate(plans):
            t = clock()
            plan.run(arrays, outs[plan.out_spec])
            best[i] = min(best[i], clock() - t)
    return best


def autotune(plan: Plan, arrays: Sequence[np.ndarray], top: int = AUTOTUNE_CANDIDATES,
             clock: Callable[[], float] = time.perf_counter) -> Plan:
    """The fastest of the plan's top ``top`` alternatives, measured on ``arrays`` in
    turns (:func:`time_in_turns`)."""
    alts = plan.alternatives[:top]
    for alt, seconds in zip(alts, time_in_turns(alts, arrays, clock=clock)):
        alt.measured_seconds = seconds
    best = min(alts, key=lambda p: p.measured_seconds or float("inf"))
    best.tuning = [(a.main_step.chosen if a.main_step else None, a.measured_seconds)  # type: ignore[attr-defined]
                   for a in alts]
    best.info = replace(best.info, autotuned=True)
    return best
