"""What numpy would run in a plan's place: the plan's steps as numpy's path
(``['einsum_path', (i, j), ...]``), which ``tp.einsum_path`` returns and numpy's
contender of a plan's trials takes (schedule/trials.py), so that numpy contracts in the
plan's own order; and roughly how long numpy takes on a product of two operands."""

from __future__ import annotations

import math

import numpy as np

from teir_plan.frontend.expression import Expression
from teir_plan.machine.params import MachineParams
from teir_plan.planner.gemm_rate import gemm_efficiency
from teir_plan.schedule.plan import Plan
from teir_plan.schedule.steps import CastStep, Step
from teir_plan.tiles import flop_factor


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


def _matrix_order(letters: str, groups: tuple[str, ...]) -> bool:
    """Whether ``letters`` are ``groups`` in some order of the groups, each group's
    letters in its own order (a matrix, or a batch of them, BLAS takes without a copy;
    a group whose letters are all of extent 1 is placed anywhere)."""
    rest = letters
    for group in groups:
        if not group:
            continue
        if rest.startswith(group):
            rest = rest[len(group):]
        else:
            return False
    return not rest


def numpy_seconds(expr: Expression, dtype: np.dtype, params: MachineParams,
                  threads: int) -> float | None:
    """Roughly how long numpy.einsum(optimize=True) takes on a two-operand product: its
    BLAS call (batched through matmul) at the rate the machine's GEMM table gives, plus
    the copies into matrix order of each operand and of the result that are not already
    in it.  None for anything else (one operand, more than two: no estimate).

    The trials (schedule/trials.py) use it to decide when numpy's run is worth a trial:
    without it numpy's contender was assumed twice the model's time and, within a 5 %
    budget, waited some 20 calls for its first run, also where numpy was the faster
    (dfgb,geac->abcdef on an AVX2 Zen 3: 113 ms against the model's 168)."""
    if len(expr.inputs) != 2:
        return None
    a, b = expr.inputs
    out = expr.output
    ext = expr.extent_map
    if len(set(a)) != len(a) or len(set(b)) != len(b):
        return None  # a diagonal: numpy's own loops, not BLAS

    def size(letters: str | set[str]) -> int:
        return math.prod(ext[c] for c in letters)

    batch = "".join(c for c in a if c in b and c in out)
    k = "".join(c for c in a if c in b and c not in out)
    m = "".join(c for c in a if c not in b and c in out)
    n = "".join(c for c in b if c not in a and c in out)
    bs, ms, ns, ks = size(batch), size(m), size(n), size(k)
    flops = 2.0 * bs * ms * ns * ks * flop_factor(dtype)
    eff = max(gemm_efficiency(params, ms, ns, ks), 1e-3)
    rate = params.gemm_flops(dtype) * max(threads, 1) * eff
    item = np.dtype(dtype).itemsize
    copied = 0
    # An operand with summed letters of its own is summed first: read once, written
    # smaller; otherwise copied unless it is a (batch of) matrices already.
    if len(batch) + len(m) + len(k) != len(a) or not (
            _matrix_order(a, (batch, m, k)) or _matrix_order(a, (batch, k, m))):
        copied += 2 * size(a)
    if len(batch) + len(n) + len(k) != len(b) or not (
            _matrix_order(b, (batch, k, n)) or _matrix_order(b, (batch, n, k))):
        copied += 2 * size(b)
    if not _matrix_order(out, (batch, m, n)):
        copied += 2 * size(out)
    return flops / rate + copied * item / params.dram_bytes_per_second
