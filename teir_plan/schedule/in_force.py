"""The machine parameters a call plans with, measured on first use when nothing is
cached: the trigger lives here, where plans are made for a call, so that the machine
layer (:mod:`teir_plan.machine`) never imports the calibrations.

The first-use measurement runs in the first planning call, not on a background thread
with the defaults meanwhile: the first plans are then ranked with this machine's numbers
(plans made with the defaults would stay in the plan cache, or be dropped and made
again); the outcome does not depend on thread timing; and a measurement that ran beside
the user's first einsum would compete with it for the cores (two here), reading both the
machine and the einsum slow.
"""

from __future__ import annotations

from teir_plan.machine import store
from teir_plan.machine.params import MachineParams


def machine_params() -> MachineParams:
    """The parameters in force: a cached calibration (full or first-use), else a first-use
    measurement, the ISA-derived defaults or the reference, by ``TEIR_PLAN_AUTOCALIBRATE``
    (see :mod:`teir_plan.machine.store`)."""
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

    return quick_calibrate()
