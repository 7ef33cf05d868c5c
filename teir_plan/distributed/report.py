"""Explain for a dask contraction: what the plan recorded, rendered (it plans nothing but
one block of the largest step, for that block's own report)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from teir_plan.distributed.contract import DaskPlan


def _mib(n: int) -> str:
    return f"{n / (1 << 20):,.1f} MiB"


@dataclass(frozen=True)
class DaskReport:
    """The block grid of each step, the tasks, the memory per task and per worker, and
    the plan teir_plan runs on one block (of the step with the most work per task)."""

    plan: DaskPlan
    block_report: Any  # teir_plan.render.report.Report of one block

    @classmethod
    def of(cls, dplan: DaskPlan) -> DaskReport:
        from teir_plan.api import plan as plan_block

        step = max(dplan.steps, key=lambda s: s.choice.task_flops)
        shapes = step.block_shapes()
        block = plan_block(step.subscripts, *shapes, dtype=dplan.dtype,
                           casting=dplan.casting)
        return cls(dplan, block.explain())

    def to_dict(self) -> dict[str, Any]:
        p = self.plan
        return {
            "subscripts": p.subscripts,
            "dtype": str(p.dtype),
            "cluster": {"workers": p.cluster.workers,
                        "threads_per_worker": p.cluster.threads_per_worker,
                        "memory_per_worker": p.cluster.memory_per_worker,
                        "distributed": p.cluster.distributed},
            "tasks": p.tasks,
            "peak_task_bytes": p.peak_task_bytes,
            "peak_worker_bytes": p.peak_worker_bytes,
            "steps": [{"subscripts": s.subscripts, "chunks": dict(s.choice.chunks),
                       "grid": s.choice.grid, "tasks": s.choice.tasks,
                       "budget_bytes": s.budget_bytes,
                       "partials": s.choice.partials, "task_bytes": s.choice.task_bytes,
                       "read_bytes": s.choice.read_bytes,
                       "partial_bytes": s.choice.partial_bytes,
                       "reasons": list(s.choice.reasons)} for s in p.steps],
        }

    def text(self) -> str:
        p = self.plan
        where = (f"{p.cluster.workers} workers x {p.cluster.threads_per_worker} threads, "
                 f"{_mib(p.cluster.memory_per_worker)} each" if p.cluster.distributed else
                 f"dask's threaded scheduler, {p.cluster.threads_per_worker} threads")
        lines = [f"== dask einsum {p.subscripts} ({p.dtype}) ==",
                 f"cluster: {where}",
                 f"tasks: {p.tasks:,} (contractions and partial-sum reductions); "
                 f"peak per task {_mib(p.peak_task_bytes)}, per worker "
                 f"{_mib(p.peak_worker_bytes)}", ""]
        for i, s in enumerate(p.steps):
            c = s.choice
            grid = " x ".join(f"{k}:{c.grid[k]}" for k in c.contraction.indices)
            chunks = ", ".join(f"{k}={c.chunks[k]}" for k in c.contraction.indices)
            lines += [f"step {i}: {s.subscripts}",
                      f"  chunks {chunks}",
                      f"  block grid {grid} = {c.tasks:,} tasks"
                      + (f", {c.partials} partial results per output block, summed "
                         f"{p.split_every} at a time" if c.partials > 1 else
                         ", summed indices whole (no partial results)"),
                      f"  per task {_mib(c.task_bytes)}; reads {_mib(c.read_bytes)} in all"
                      + (f", partials {_mib(c.partial_bytes)}" if c.partial_bytes else ""),
                      f"  task budget {_mib(s.budget_bytes)}; why: " + "; ".join(c.reasons)]
        lines += ["", "== one block (the step with the most work per task) ==",
                  self.block_report.text()]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()
