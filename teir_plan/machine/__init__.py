"""What the cost model knows about the machine, at the bottom of the layers (it imports
no planner, schedule or executor module when imported): the parameters record
(:mod:`~teir_plan.machine.params`), BLAS' efficiency tables
(:mod:`~teir_plan.machine.tables`, package data), the defaults derived from the vector ISA
(:mod:`~teir_plan.machine.defaults`) and the parameters in force with their cache on disk
(:mod:`~teir_plan.machine.store`).  The calibrations that measure them are
:mod:`teir_plan.calibration`, above the executor and the planner.
"""

from teir_plan.machine.defaults import default_params
from teir_plan.machine.params import SOURCES, MachineParams
from teir_plan.machine.store import (
    cache_dir,
    cache_file,
    load_params,
    machine_key,
    params_without_measuring,
    save_params,
    set_machine_params,
)
from teir_plan.machine.tables import GEMM_FORMS, GEMM_GRID, GRID_MAX_FLOPS

__all__ = ["GEMM_FORMS", "GEMM_GRID", "GRID_MAX_FLOPS", "SOURCES", "MachineParams",
           "cache_dir", "cache_file", "default_params", "load_params", "machine_key",
           "params_without_measuring", "save_params", "set_machine_params"]
