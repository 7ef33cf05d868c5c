"""``tp.einsum_path``: numpy.einsum_path's signature and return shape, read from the plan
``tp.einsum`` would run.

numpy returns ``(path, report)``: ``path`` is ``['einsum_path', step, ...]``, each step a
tuple of positions in the list of operands still to contract (the operands it takes
leave the list, its result joins the end), and ``report`` a text.  Here the steps are
the plan's own (its tree, each pairwise step's schedule chosen by the cost model), and
the report gives each step's program and predicted time.  The path can be handed back to
``numpy.einsum``, ``tp.einsum`` or opt_einsum as ``optimize=``.
"""

from __future__ import annotations

from teir_plan.schedule.numpy_path import entries_of, path_of
from teir_plan.schedule.plan import Plan

__all__ = ["einsum_path", "path_of", "report_of"]


def report_of(plan: Plan) -> str:
    """numpy's report in teir_plan's terms: the expression, the plan's predicted time and
    peak temporary memory, then one line per step with its path entry, what runs and its
    prediction."""
    entries, rest = entries_of(plan)
    lines = [
        f"  Complete contraction:  {plan.subscripts}",
        f"  Predicted time (teir_plan's cost model):  {plan.predicted_seconds * 1e6:.1f} us",
        f"  Temporaries at peak:  {plan.peak_bytes} bytes",
        "-" * 74,
        "path step   program",
        "-" * 74,
    ]
    for step, entry in zip(plan.steps, entries):
        lines.append(f"{str(entry) if entry is not None else '':11} {step.describe()}")
    if rest is not None:
        lines.append(f"{str(rest):11} (a view of the operand, or no step: nothing runs)")
    return "\n".join(lines)


def einsum_path(subscripts: object, *operands: object, optimize: object = "greedy"
                ) -> tuple[list[object], str]:
    """numpy.einsum_path for teir_plan: ``(path, report)`` of the plan ``tp.einsum``
    would run with this ``optimize`` (numpy's default ``'greedy'``; ``True``,
    ``'optimal'``, an explicit path, ...).  Operands are arrays (or shapes, as
    :func:`tp.plan` takes them).

    >>> import numpy as np, teir_plan as tp
    >>> a, b, c = np.ones((10, 20)), np.ones((20, 30)), np.ones((30, 5))
    >>> path, report = tp.einsum_path("ij,jk,kl->il", a, b, c)
    >>> path
    ['einsum_path', (1, 2), (0, 1)]
    >>> print(report.splitlines()[0])
      Complete contraction:  ij,jk,kl->il
    """
    from teir_plan.api import plan as make_plan

    plan = make_plan(subscripts, *operands, optimize=optimize)
    return path_of(plan), report_of(plan)
