"""The calibrations: measuring the cost model's parameters on this machine.

``tp.calibrate()`` (:func:`~teir_plan.calibration.full.measure_full`) measures fully
(15-40 seconds, the BLAS efficiency table included), and keeps what it measured only if
it ranks a fixed set of probe contractions no worse than the parameters in force
(:mod:`~teir_plan.calibration.check`; :func:`teir_plan.schedule.calibrate.calibrate` times
them); the first-use calibration
(:func:`~teir_plan.calibration.quick.quick_calibrate`, about a second) measures what plans
depend on most when nothing is cached (see :mod:`teir_plan.machine` for the sources of
parameters, the cache and the parameters in force, which both set).  Calibration is
neither planning nor execution: it times programs on the executor to parameterise the
planner, so it sits above both, and nothing below it imports it (the first-use trigger is
:func:`teir_plan.schedule.in_force.machine_params`).
"""

from teir_plan.calibration.check import RankingCheck, judge
from teir_plan.calibration.full import measure_full
from teir_plan.calibration.quick import (
    QuickMeasurements,
    measure_vector_now,
    params_from_quick,
    quick_calibrate,
)
from teir_plan.calibration.timing import best_seconds, calibration_program

__all__ = ["QuickMeasurements", "RankingCheck", "best_seconds", "calibration_program", "judge",
           "measure_full", "measure_vector_now",
           "params_from_quick", "quick_calibrate"]
