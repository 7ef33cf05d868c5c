"""The calibrations: measuring the cost model's parameters on this machine.

``tp.calibrate()`` (:mod:`~teir_plan.calibration.full`) measures fully (15-40 seconds, the
BLAS efficiency table included); the first-use calibration
(:func:`~teir_plan.calibration.quick.quick_calibrate`, about a second) measures what plans
depend on most when nothing is cached (see :mod:`teir_plan.machine` for the sources of
parameters, the cache and the parameters in force, which both set).  Calibration is
neither planning nor execution: it times programs on the executor to parameterise the
planner, so it sits above both, and nothing below it imports it (the first-use trigger is
:func:`teir_plan.schedule.in_force.machine_params`).
"""

from teir_plan.calibration.full import calibrate
from teir_plan.calibration.quick import QuickMeasurements, params_from_quick, quick_calibrate
from teir_plan.calibration.timing import best_seconds, calibration_program

__all__ = ["QuickMeasurements", "best_seconds", "calibrate", "calibration_program",
           "params_from_quick", "quick_calibrate"]
