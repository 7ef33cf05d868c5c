"""teir_plan: einsum as Tiled Execution IR (TEIR) programs, planned by a cost model.

The pipeline, one package per stage::

    expression --frontend--> contraction description --planner--> candidate TEIR programs
               --cost model--> chosen plan --executor--> result

>>> import numpy as np, teir_plan as tp
>>> a, b = np.ones((2, 3), np.float32), np.ones((3, 4), np.float32)
>>> tp.einsum("ij,jk->ik", a, b).tolist()[0]
[3.0, 3.0, 3.0, 3.0]
"""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

from teir_plan.api import einsum, plan, plan_cache
from teir_plan.errors import (
    CalibrationWarning,
    DTypeError,
    EinsumError,
    OperandTypeError,
    PlanError,
    TEIRError,
    TEIRPlanError,
)
from teir_plan.executor import execute, get_num_threads, set_num_threads
from teir_plan.explain import Report, explain
from teir_plan.plan.plan import Plan
from teir_plan.planner.machine import MachineParams, calibrate, machine_params
from teir_plan.teir import TEIR, DataType, DimType, ExecType, Prim, Primitives, Schedule

try:
    __version__ = _version("teir_plan")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "__version__",
    "explain",
    "Report",
    "einsum",
    "plan",
    "plan_cache",
    "Plan",
    "calibrate",
    "machine_params",
    "MachineParams",
    "execute",
    "get_num_threads",
    "set_num_threads",
    "TEIR",
    "DataType",
    "DimType",
    "ExecType",
    "Prim",
    "Primitives",
    "Schedule",
    "TEIRPlanError",
    "TEIRError",
    "EinsumError",
    "PlanError",
    "DTypeError",
    "OperandTypeError",
    "CalibrationWarning",
]
