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

from teir_plan.schedule.plan import Plan
from teir_plan.schedule.steps import CastStep, Step


def _consumed(step: Step) -> tuple[int, ...] | None:
    """The buffers a step contracts, sums or hands to numpy (None: a step that only
    converts, copies or fills one buffer, which is no step of a path)."""
    inputs = getattr(step, "inputs", None)
    return tuple(inputs) if inputs is not None else None


def _entries(plan: Plan) -> tuple[list[tuple[int, ...] | None], tuple[int, ...] | None]:
    """Each of the plan's steps as a path entry (None: not a step of the path), and the
    last entry for operands no step took (a view: ``ijk->kji``)."""
    live = list(range(len(plan.operands)))  # buffer ids, as numpy's list of operands
    entries: list[tuple[int, ...] | None] = []
    for step in plan.steps:
        entry = None
        if isinstance(step, CastStep):  # (and ExpandStep) the same operand, converted
            if step.src in live:
                live[live.index(step.src)] = step.dst
        elif (taken := _consumed(step)) is not None:
            positions = sorted({live.index(b) for b in taken if b in live})
            if positions:  # (not a step that reads only a pack or temporary of its own)
                entry = tuple(positions)
                for p in reversed(positions):
                    live.pop(p)
                live.append(step.dst)  # type: ignore[attr-defined]
        entries.append(entry)
    rest = None
    if all(e is None for e in entries) or len(live) > 1:
        rest = tuple(range(len(live)))
    return entries, rest


def path_of(plan: Plan) -> list[object]:
    """``plan``'s steps as numpy's path: ``['einsum_path', (i, j), ...]``."""
    entries, rest = _entries(plan)
    return ["einsum_path", *(e for e in entries if e is not None),
            *([rest] if rest is not None else [])]


def report_of(plan: Plan) -> str:
    """numpy's report in teir_plan's terms: the expression, the plan's predicted time and
    peak temporary memory, then one line per step with its path entry, what runs and its
    prediction."""
    entries, rest = _entries(plan)
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
