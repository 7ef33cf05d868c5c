"""teir_plan: einsum as Tiled Execution IR (TEIR) programs, planned by a cost model.

The pipeline, one package per stage::

    expression --frontend--> contraction description --planner--> candidate TEIR programs
               --cost model--> chosen plan --executor--> result

>>> import numpy as np, teir_plan as tp
>>> a, b = np.ones((2, 3), np.float32), np.ones((3, 4), np.float32)
>>> tp.einsum("ij,jk->ik", a, b).tolist()[0]
[3.0, 3.0, 3.0, 3.0]
"""

import importlib
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version
from typing import TYPE_CHECKING

from teir_plan.backends import ArrayBackend, register_array_backend
from teir_plan.errors import (
    CalibrationWarning,
    DTypeError,
    EinsumError,
    MachineFileError,
    OperandTypeError,
    OptionTypeError,
    PlanError,
    TEIRError,
    TEIRPlanError,
)
from teir_plan.machine import MachineParams
from teir_plan.schedule.in_force import machine_params
from teir_plan.teir import TEIR, DataType, DimType, ExecType, Prim, Primitives, Schedule

if TYPE_CHECKING:
    from teir_plan.api import einsum, plan, plan_cache
    from teir_plan.executor import execute, get_num_threads, set_num_threads
    from teir_plan.interop import tensordot, transpose
    from teir_plan.path import einsum_path
    from teir_plan.render import Report, explain
    from teir_plan.render.pseudocode import pseudocode
    from teir_plan.schedule.calibrate import calibrate
    from teir_plan.schedule.plan import Plan

# Dask arrays (they carry a task graph) are contracted block by block by
# teir_plan/distributed/, which loads dask on the first such call.
register_array_backend(ArrayBackend("dask", "__dask_graph__", "teir_plan.distributed.contract"))

try:
    __version__ = _version("teir_plan")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"

# The names below load the executor (and with it numba and llvmlite) or modules that
# import it, so they are imported on first use (PEP 562): importing a submodule (the
# planner, the TEIR records) then runs this file without loading numba.
_LAZY = {
    "einsum": "teir_plan.api",
    "plan": "teir_plan.api",
    "plan_cache": "teir_plan.api",
    "einsum_path": "teir_plan.path",
    "execute": "teir_plan.executor",
    "get_num_threads": "teir_plan.executor",
    "set_num_threads": "teir_plan.executor",
    "Report": "teir_plan.render",
    "explain": "teir_plan.render",
    "pseudocode": "teir_plan.render.pseudocode",
    "Plan": "teir_plan.schedule.plan",
    "calibrate": "teir_plan.schedule.calibrate",
    # opt_einsum's backend="teir_plan" looks these up (with einsum): teir_plan/interop.py
    "tensordot": "teir_plan.interop",
    "transpose": "teir_plan.interop",
}


def __getattr__(name: str) -> object:
    if name == "distributed":  # tp.einsum on dask arrays (dask itself loads on first use)
        return importlib.import_module("teir_plan.distributed")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'teir_plan' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "__version__",
    "explain",
    "Report",
    "pseudocode",
    "einsum",
    "einsum_path",
    "plan",
    "plan_cache",
    "tensordot",
    "transpose",
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
    "MachineFileError",
    "OptionTypeError",
    "CalibrationWarning",
]
