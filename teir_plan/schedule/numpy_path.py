"""A plan's steps as numpy's path (``['einsum_path', (i, j), ...]``): what
``tp.einsum_path`` returns, and the path numpy's contender of a plan's trials takes
(schedule/trials.py), so that numpy contracts in the plan's own order."""

from __future__ import annotations

from teir_plan.schedule.plan import Plan
from teir_plan.schedule.steps import CastStep, Step


def _consumed(step: Step) -> tuple[int, ...] | None:
    """The buffers a step contracts, sums or hands to numpy (None: a step that only
    converts, copies or fills one buffer, which is no step of a path)."""
    inputs = getattr(step, "inputs", None)
    return tuple(inputs) if inputs is not None else None


def entries_of(plan: Plan) -> tuple[list[tuple[int, ...] | None], tuple[int, ...] | None]:
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
    entries, rest = entries_of(plan)
    return ["einsum_path", *(e for e in entries if e is not None),
            *([rest] if rest is not None else [])]
