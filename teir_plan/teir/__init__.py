"""The Tiled Execution IR: records, validation, text and JSON forms."""

from teir_plan.teir.enums import DataType, DimType, ExecType, Prim
from teir_plan.teir.records import TEIR, Primitives, Schedule

__all__ = ["DataType", "DimType", "ExecType", "Prim", "Primitives", "Schedule", "TEIR"]
