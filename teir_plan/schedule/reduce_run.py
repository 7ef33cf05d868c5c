"""Running a planned reduction: the planner's :class:`~teir_plan.planner.reduce.Reduction`
is a record (the planner loads no executor); a plan's reduce step holds it with its
kernel, here, where steps run."""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cached_property

import numpy as np

from teir_plan.executor.reduce import Prepared, prepare, run_reduction
from teir_plan.planner.reduce import Reduction


@dataclass(frozen=True)
class RunnableReduction(Reduction):
    """A planned reduction that runs on the executor's reduction kernels."""

    @cached_property
    def prepared(self) -> Prepared:
        """What every call needs besides its arrays, worked out on the first run."""
        return prepare(self.kind, *self.tables, self.weighted, self.dtype, self.cached,
                       self.operand)

    def run(self, x: np.ndarray, w: np.ndarray | None, y: np.ndarray) -> None:
        """Sum ``x`` (weighted by ``w``) into ``y``: arrays of the layouts it was planned
        for (the plan proved its tables stay inside them), x and w of ``operand``'s
        dtype when it is set (16-bit, read in place)."""
        kept, vec, summed = self.tables
        run_reduction(self.kind, kept, vec, summed, self.origins, self.weighted, self.split,
                      x, w, y, self.dtype, self.prepared)


def runnable(red: Reduction) -> RunnableReduction:
    """``red`` with its kernel."""
    if isinstance(red, RunnableReduction):
        return red
    return RunnableReduction(**{f.name: getattr(red, f.name) for f in fields(red)})
