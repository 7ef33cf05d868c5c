"""Every exception teir_plan raises, in one place.

All of them subclass ``TEIRPlanError`` and either ``ValueError`` (bad values:
malformed programs, expressions, shapes, layouts) or ``TypeError`` (bad types:
unsupported dtypes, non-array operands), so callers can catch them the way they
catch numpy's own errors.

>>> import teir_plan as tp
>>> issubclass(tp.TEIRError, ValueError)
True
"""

from __future__ import annotations


class TEIRPlanError(Exception):
    """Base class of every error raised by teir_plan."""


class TEIRError(TEIRPlanError, ValueError):
    """A TEIR program breaks a rule of the specification (section 10.1), or cannot
    run on the arrays it was given (bounds, dtype, overlap)."""


class EinsumError(TEIRPlanError, ValueError):
    """An einsum expression or its operands are malformed or disagree."""


class PlanError(TEIRPlanError, ValueError):
    """A plan was called with arrays it was not made for, or options are invalid."""


class OptionTypeError(PlanError, TypeError):
    """An option has a type it cannot take (``optimize=3``, a memory limit given as a
    string): a TypeError, as numpy raises for these, and a PlanError (invalid options)."""


class DTypeError(TEIRPlanError, TypeError):
    """An array has a dtype teir_plan does not support for the requested operation."""


class OperandTypeError(TEIRPlanError, TypeError):
    """An operand is not an array (or something numpy converts to a numeric array)."""


class MachineFileError(PlanError):
    """A machine-parameters file cannot be used: ``TEIR_PLAN_MACHINE``'s (an error, the
    user named it) or the cache's (a warning there, and the parameters are rebuilt). The
    message names the file and the field."""


class KernelNotCompiledError(TEIRPlanError, ValueError):
    """A plan's trial (schedule/trials.py) would have compiled executor kernels that are
    not in the compiled-code cache yet.  Raised before anything is compiled or written,
    and caught by the trial, which then runs the model's choice: it never reaches a
    caller."""


class CalibrationWarning(UserWarning):
    """teir_plan measured this machine on first use (a quick estimate, cached); shown once
    per machine, so that a user knows where the numbers came from and that
    ``tp.calibrate()`` measures them fully.  Filter it like any warning, or set
    ``TEIR_PLAN_AUTOCALIBRATE=0`` to plan with ISA-derived defaults instead."""
