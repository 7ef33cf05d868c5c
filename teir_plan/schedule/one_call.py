"""Runs of a plan's steps in one compiled call each (executor/steps_runner.py).

Plans of many small steps (tensor networks, chains of small matrices) spend most of a
call between steps.  A step qualifies when it is a TEIR program (with its packs, if
any) that runs on the calling thread with nothing set around it (``Lowered.serial``),
in the plan's one dtype; each maximal run of two or more such steps becomes a
*segment*, run by one call.  :func:`one_call_program` builds the segments' tables once
per plan; :func:`run_one_call` runs a call: the other steps one by one as
:meth:`teir_plan.schedule.plan.Plan.run` does, and when every step is in one segment,
without making the temporaries' views at all.

Memory is borrowed as the steps themselves borrow it: the slots of
:class:`teir_plan.schedule.memory.MemoryPlan` for the call, and for a segment, one
buffer for its steps' packs (the largest step's, as ``TEIRStep.run`` borrows for one
step): a call's peak is the plan's ``peak_bytes`` either way.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from teir_plan.executor.checks import flat_view
from teir_plan.executor.lower import Lowered
from teir_plan.executor.steps_runner import StepsProgram, run_program, steps_program
from teir_plan.executor.tables import BUFFER_FIELDS
from teir_plan.schedule.memory import MemoryPlan
from teir_plan.schedule.steps import BufferSpec, Step, TEIRStep
from teir_plan.schedule.workspace import LINE, workspace
from teir_plan.tilekinds.table import named_rows

Layout = tuple[tuple[int, ...], tuple[int, ...], np.dtype]  # shape, element strides, dtype


@dataclass(frozen=True)
class Segment:
    """Steps ``start`` <= s < ``stop`` of a plan, run by ``program``; ``pack_bytes``: the
    buffer its steps' packs are cut from (0: none)."""

    start: int
    stop: int
    program: StepsProgram
    pack_bytes: int


@dataclass(frozen=True)
class OneCall:
    """A plan's segments and the flat views of its constants (gathered after the
    operands and out)."""

    segments: tuple[Segment, ...]
    const_views: tuple[np.ndarray, ...]
    whole: bool  # one segment holds every step


def _origin(shape: tuple[int, ...], strides: tuple[int, ...]) -> int:
    """The first element's index in the flat view of an array of these element strides
    (flat_view: the view starts at the lowest address the array spans)."""
    return -sum(min(0, (n - 1) * st) for n, st in zip(shape, strides))


def _qualifies(step: Step, dtype: np.dtype) -> bool:
    if type(step) is not TEIRStep:
        return False
    lows = [step.chosen.lowered, *step.chosen.lowered_packs]
    return all(low.serial and low.dtype == dtype for low in lows) and all(
        math.prod(p.shape) > 0 for p in step.chosen.packs)


def one_call_program(steps: Sequence[Step], specs: Sequence[Layout],
                     buffers: Sequence[BufferSpec], consts: dict[int, np.ndarray],
                     memory: MemoryPlan) -> OneCall | None:
    """The segments of ``steps`` (see the module's text), or None when there are none.
    ``specs``: the layouts the plan was made for, of its operands and then out."""
    dtype = specs[-1][2]
    if any(d != dtype or math.prod(shape) == 0 for shape, _, d in specs) or any(
            b.dtype != dtype or math.prod(b.shape) == 0 for b in buffers):
        return None
    base = len(specs)
    ndirect = base + sum(1 for b in buffers if b.kind == "const")
    # The buffer table (operands, out, the plan's buffers: executor/tables.py's
    # BUFFER_FIELDS), and each one's first element.  The gathered arrays: the operands,
    # out, the constants, then the slots.
    rows: list[dict[str, int]] = [_buffer(i) for i in range(base)]
    origins = [_origin(shape, strides) for shape, strides, _ in specs]
    const_views: list[np.ndarray] = []
    for i, spec in enumerate(buffers):
        if spec.kind == "const":
            flat, origin = flat_view(consts[i])
            rows.append(_buffer(base + len(const_views)))
            origins.append(origin)
            const_views.append(flat)
        else:
            rows.append(_buffer(ndirect + memory.slot_of[i], math.prod(spec.shape)))
            origins.append(0)
    pack_raw = ndirect + len(memory.slot_bytes)
    segments: list[Segment] = []
    s = 0
    while s < len(steps):
        stop = s
        while stop < len(steps) and _qualifies(steps[stop], dtype):
            stop += 1
        if stop - s >= 2:
            segments.append(_segment(steps, s, stop, rows, origins, pack_raw))
        s = max(stop, s + 1)
    if not segments:
        return None
    whole = len(segments) == 1 and segments[0].start == 0 and segments[0].stop == len(steps)
    return OneCall(tuple(segments), tuple(const_views), whole)


def _buffer(array: int, elements: int = -1, offset: int = 0) -> dict[str, int]:
    """A row of the buffer table: gathered array ``array`` whole (``elements`` -1), or a
    temporary of ``elements`` at ``offset`` bytes in it."""
    return {"array": array, "elements": elements, "offset": offset}


def _segment(steps: Sequence[Step], start: int, stop: int, rows: list[dict[str, int]],
             origins: list[int], pack_raw: int) -> Segment:
    """Steps [start, stop) as one program; their packs' buffers appended to a copy of
    the buffer table."""
    rows, origins = list(rows), list(origins)
    programs: list[tuple[Lowered, tuple[int, ...], int]] = []
    most = 0
    for step in steps[start:stop]:
        assert isinstance(step, TEIRStep)
        inputs = list(step.inputs)
        at = 0
        isz = step.chosen.lowered.dtype.itemsize
        for pack, low in zip(step.chosen.packs, step.chosen.lowered_packs):
            n = math.prod(pack.shape)
            rows.append(_buffer(pack_raw, n, at))  # where schedule.workspace.carve puts it
            origins.append(0)
            programs.append((low, (inputs[pack.tensor],), len(rows) - 1))
            inputs[pack.tensor] = len(rows) - 1
            at += n * isz + (-n * isz) % LINE
        programs.append((step.chosen.lowered, tuple(inputs), step.dst))
        most = max(most, step.pack_bytes if step.chosen.packs else 0)
    program = steps_program(programs, named_rows(BUFFER_FIELDS, rows),
                            np.array(origins, np.int64))
    assert program is not None, "every step qualified"
    return Segment(start, stop, program, most)


def run_one_call(one: OneCall, steps: Sequence[Step], memory: MemoryPlan,
                 consts: dict[int, np.ndarray], arrays: Sequence[np.ndarray],
                 out: np.ndarray) -> None:
    """Run a plan's steps on checked ``arrays`` into ``out``."""
    direct = [flat_view(a)[0] for a in arrays]
    direct.append(flat_view(out)[0])
    direct += one.const_views
    if one.whole:
        raws = [workspace.borrow((n,), np.uint8) for n in memory.slot_bytes]
        try:
            _run_segment(one.segments[0], direct, raws)
        finally:
            for raw in raws:
                workspace.give_back(raw)
        return
    raws, views = memory.borrow()
    try:
        buffers: list[np.ndarray] = [*arrays, out]
        for i, view in enumerate(views):
            buffers.append(consts[i] if view is None else view)
        s = 0
        for seg in one.segments:
            for step in steps[s:seg.start]:
                step.run(buffers)
            _run_segment(seg, direct, raws)
            s = seg.stop
        for step in steps[s:]:
            step.run(buffers)
    finally:
        for raw in raws:
            workspace.give_back(raw)


def _run_segment(seg: Segment, direct: list[np.ndarray], raws: list[np.ndarray]) -> None:
    if not seg.pack_bytes:
        run_program(seg.program, direct, raws)
        return
    packs = workspace.borrow((seg.pack_bytes,), np.uint8)
    try:
        run_program(seg.program, direct, [*raws, packs])
    finally:
        workspace.give_back(packs)
