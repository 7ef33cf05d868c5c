"""A plan's scratch memory: its temporaries placed by lifetime, and its peak.

A plan's temporaries (intermediates of a tree, operands summed or cast first, a staged
result) each live from the step that first touches them to the last step that reads
them.  Two whose lifetimes do not overlap can share memory, so each temporary is
assigned a *slot*: in order of first use, the free slot that fits it most tightly (or,
none fitting, the largest free one, grown), else a new slot.  A call borrows one raw
buffer per slot from the workspace for its duration, and each temporary is a view into
its slot's buffer.  A step's packs (operands copied into a packed buffer just before
its program) are borrowed by the step itself, on top.  A slot is its largest
temporary's bytes plus a cache line, so that every view in it can start on one.
:attr:`MemoryPlan.peak_bytes` is therefore what a call borrows at once: every slot, plus
the largest step's packs; it does not count the operands, the result, nor the kernels'
per-worker tile buffers.

>>> from teir_plan.schedule.steps import BufferSpec, CopyStep
>>> f64 = np.dtype(np.float64)
>>> bufs = [BufferSpec("t1", (10,), f64, "temp"), BufferSpec("t2", (10,), f64, "temp"),
...         BufferSpec("t3", (10,), f64, "temp")]
>>> steps = [CopyStep(0, 2, ""), CopyStep(2, 3, ""), CopyStep(3, 4, ""), CopyStep(4, 1, "")]
>>> m = memory_plan(steps, bufs, 1)
>>> m.slot_of, m.slot_bytes  # t1 and t3 never live at once: one slot
((0, 1, 0), (144, 144))
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from teir_plan.schedule.steps import BufferSpec, Step, TEIRStep
from teir_plan.schedule.workspace import workspace

_ALIGN = 64  # bytes between views in a slot: a cache line


def step_buffers(step: Step) -> tuple[int, ...]:
    """The buffer table indices a step reads or writes."""
    ids = list(getattr(step, "inputs", ()))
    for name in ("src", "dst"):
        v = getattr(step, name, None)
        if v is not None:
            ids.append(v)
    return tuple(ids)


def pack_bytes(step: Step) -> int:
    """Bytes a step borrows for its packed operands while it runs."""
    if not isinstance(step, TEIRStep) or not step.chosen.packs:
        return 0
    return step.pack_bytes


@dataclass(frozen=True)
class MemoryPlan:
    """Where each temporary lives: ``slot_of[b]`` for buffer ``b`` of the plan's
    ``buffers`` (-1: a constant, not in a slot), each slot's bytes, and the peak."""

    slot_of: tuple[int, ...]
    slot_bytes: tuple[int, ...]
    peak_bytes: int
    naive_bytes: int  # every temporary in its own buffer, for reports
    # Per buffer: (slot, dtype, bytes, shape in memory order, the axes transposing that
    # back to the buffer's order or None), worked out once: a call only slices.
    views: tuple[tuple[int, np.dtype, int, tuple[int, ...], tuple[int, ...] | None], ...] = ()

    def borrow(self) -> tuple[list[np.ndarray], list[np.ndarray | None]]:
        """(the slots' raw buffers, borrowed from the workspace: give them back; each
        buffer's array, a view into its slot, None for constants)."""
        raws = [workspace.borrow((n,), np.uint8) for n in self.slot_bytes]
        starts = [-raw.__array_interface__["data"][0] % _ALIGN for raw in raws]
        arrays: list[np.ndarray | None] = []
        for slot, dtype, _size, mem_shape, axes in self.views:
            if slot < 0:
                arrays.append(None)
                continue
            # (the constructor: a slice's .view(dtype) costs 2-3x as much per call)
            arr = np.ndarray(mem_shape, dtype, raws[slot], starts[slot])
            arrays.append(arr if axes is None else arr.transpose(axes))
        return raws, arrays


def _view_of(spec: BufferSpec, slot: int
             ) -> tuple[int, np.dtype, int, tuple[int, ...], tuple[int, ...] | None]:
    order = list(range(len(spec.shape))) if spec.axis_order is None else \
        list(spec.axis_order)
    axes = None if order == sorted(order) else tuple(int(a) for a in np.argsort(order))
    return slot, spec.dtype, _nbytes(spec), tuple(spec.shape[a] for a in order), axes


def _nbytes(spec: BufferSpec) -> int:
    return math.prod(spec.shape) * spec.dtype.itemsize


def memory_plan(steps: Sequence[Step], buffers: Sequence[BufferSpec],
                num_operands: int) -> MemoryPlan:
    """Slots for the temporaries of a plan whose buffer table is the operands, out, then
    ``buffers`` (see :mod:`teir_plan.schedule.steps`)."""
    base = num_operands + 1
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for s, step in enumerate(steps):
        for b in step_buffers(step):
            if b >= base:
                first.setdefault(b - base, s)
                last[b - base] = s
    slot_of = [-1] * len(buffers)
    sizes: list[int] = []
    free_at: list[int] = []  # the step after which each slot is free again
    temps = [i for i, spec in enumerate(buffers) if spec.kind != "const"]
    for i in sorted(temps, key=lambda i: (first.get(i, -1), i)):
        need = _nbytes(buffers[i]) + _ALIGN
        start = first.get(i, -1)
        free = [k for k in range(len(sizes)) if free_at[k] < start]
        fits = [k for k in free if sizes[k] >= need]
        if fits:
            k = min(fits, key=lambda k: sizes[k])
        elif free:
            k = max(free, key=lambda k: sizes[k])
            sizes[k] = need
        else:
            k = len(sizes)
            sizes.append(need)
            free_at.append(-1)
        slot_of[i] = k
        # A buffer no step touches (none should exist) keeps its slot for the whole call.
        free_at[k] = last.get(i, len(steps))
    packs = max((pack_bytes(st) for st in steps), default=0)
    naive = sum(_nbytes(buffers[i]) for i in temps)
    return MemoryPlan(tuple(slot_of), tuple(sizes), sum(sizes) + packs, naive,
                      tuple(_view_of(spec, k) for spec, k in zip(buffers, slot_of)))
