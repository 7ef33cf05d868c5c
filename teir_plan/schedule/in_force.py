"""The machine parameters a call plans with, measured on first use when nothing is
cached: the trigger lives here, where plans are made for a call, so that the machine
layer (:mod:`teir_plan.machine`) never imports the calibrations.

The first-use measurement runs in the first planning call, not on a background thread
with the defaults meanwhile: the first plans are then ranked with this machine's numbers
(plans made with the defaults would stay in the plan cache, or be dropped and made
again); the outcome does not depend on thread timing; and a measurement that ran beside
the user's first einsum would compete with it for the cores (two here), reading both the
machine and the einsum slow.

It runs in two parts, so that the first call compiles only what it runs: what needs no
vector kernel (BLAS' peaks called directly, memory, the copy rate, the call overhead on
the BLAS runner of the call's own dtype, the threads) in the first planning call, and the
vector kernel's rate when the first plan whose float32 tiles run on it is made: that
plan compiles the kernel anyway, and the caller (api) then plans the call again with the
rate measured.  Until then the rate is scaled from BLAS' peak, as the reference's is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from teir_plan.machine import store
from teir_plan.machine.params import MachineParams

if TYPE_CHECKING:
    from teir_plan.schedule.plan import Plan


def machine_params(dtype: np.dtype | None = None) -> MachineParams:
    """The parameters in force: a cached calibration (full or first-use), else a first-use
    measurement, the ISA-derived defaults or the reference, by ``TEIR_PLAN_AUTOCALIBRATE``
    (see :mod:`teir_plan.machine.store`).  ``dtype``: what the call that asks computes in,
    if known (the first-use measurement compiles the BLAS runner of its real dtype, which
    that call's BLAS tiles then use, instead of float32's)."""
    found = store.current  # one reference read: no lock needed on the cached path
    if found is not None:
        return found
    found = store.params_without_measuring()
    if found is not None:
        return found
    # Measuring times programs on the executor: imported only when nothing is cached, so
    # that planning with known parameters never loads it from here.
    if store.autocalibrate_mode() == "full":
        from teir_plan.schedule.calibrate import calibrate

        return calibrate()
    from teir_plan.calibration import quick_calibrate

    return quick_calibrate(vector=False, dtype=_real_name(dtype))


def _real_name(dtype: np.dtype | None) -> str:
    """float64 for a float64 or complex128 computation, else float32 (16-bit operands
    compute in float32)."""
    if dtype is not None and dtype.kind in "fc" and dtype.itemsize == (16 if dtype.kind == "c"
                                                                      else 8):
        return "float64"
    return "float32"


def owes_vector_measurement(params: MachineParams, plan: Plan) -> bool:
    """Whether ``plan``, made with a first-use estimate that left the vector kernel
    unmeasured, runs float32 tiles on a vector kernel: running it compiles that kernel
    and the loop walker, which the measurement times, so the measurement then costs
    about 0.1 s instead of a compile every first call would pay (a BLAS-only plan
    compiles neither).  The caller measures (:func:`with_vector_measured`) and plans
    again."""
    if params.vector_measured or params.source != "first-use" or params.loaded_from:
        return False
    # (Imported here: ``import teir_plan`` imports this module, and the steps the
    # executor.)
    from teir_plan.planner.cost import tile_kind
    from teir_plan.schedule.steps import TEIRStep

    for step in plan.steps:
        # The kind asked of the cost model's rule, not of the lowered program: lowering
        # compiles the kind it lowers onto, perhaps one the plan made again does not use.
        c = step.chosen.contraction if isinstance(step, TEIRStep) else None
        choice = step.chosen.choice if isinstance(step, TEIRStep) else None
        if c is not None and choice is not None and c.dtype == np.float32:
            kind, _, _ = tile_kind(c, choice.m, choice.n, choice.k, choice.br, choice.call)
            if kind.vector:
                return True
    return False


def with_vector_measured(params: MachineParams) -> MachineParams:
    """``params`` with the vector kernel measured, in force and cached."""
    from teir_plan.calibration import measure_vector_now

    return measure_vector_now(params)
