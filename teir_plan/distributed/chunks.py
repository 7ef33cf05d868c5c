"""How a contraction over chunked operands is split into tasks: one chunk size per index.

Each task contracts one block of every operand (``tp.einsum`` on the blocks); a summed
index split into several chunks leaves one partial result per chunk, which a tree
reduction adds up.  What bounds the choice:

* **Memory.**  A task holds its input blocks and its output block; a reduction task holds
  ``split_every`` partial blocks and their sum.  The larger must stay within the budget,
  or a worker runs out of memory.
* **Parallelism.**  At least ``min_tasks`` tasks (two per dask thread of the cluster), so
  that every thread has work and a slow one does not hold up the rest.
* **Task size.**  A task costs the scheduler about a millisecond whatever it does, so a
  block must carry ``min_task_seconds`` of work, priced with the cost model's per-core
  rates.
* **Traffic.**  Each partial result is written and read again, and an operand is read
  once per block of the indices it lacks: fewer, larger blocks move less.

:func:`choose_chunks` starts from the operands' own chunks, splits what does not fit the
budget, then merges chunks of summed indices (fewer partial results) and grows tasks too
small to pay for themselves, as long as the budget and the parallelism allow, and splits
where the tasks are too few to occupy the cluster.  It is pure Python: planning a dask
contraction runs no kernel.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from math import prod

from teir_plan.errors import PlanError

SPLIT_EVERY = 4  # partial sums added per reduction task (dask's split_every)
MIN_TASK_SECONDS = 0.02  # a task's work against the scheduler's ~1 ms per task


@dataclass(frozen=True)
class Contraction:
    """One contraction as the chunk choice sees it: index strings of the operands and of
    the result, each index's extent, and the element size."""

    inputs: tuple[str, ...]
    output: str
    extents: Mapping[str, int]
    itemsize: int

    @property
    def summed(self) -> tuple[str, ...]:
        seen = dict.fromkeys("".join(self.inputs))
        return tuple(c for c in seen if c not in self.output)

    @property
    def indices(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys("".join(self.inputs) + self.output))


@dataclass(frozen=True)
class ChunkChoice:
    """The chunk size per index, and what it costs per task and in all.

    ``grid`` is the number of blocks along each index; ``tasks`` counts the contraction
    tasks (the reduction adds about ``tasks / split_every`` more); ``task_bytes`` is the
    peak memory of one task (contraction or reduction); ``read_bytes`` the bytes all
    contraction tasks read and ``partial_bytes`` the partial results written and summed.
    """

    contraction: Contraction
    chunks: Mapping[str, int]
    split_every: int
    reasons: tuple[str, ...]

    @property
    def grid(self) -> dict[str, int]:
        ext = self.contraction.extents
        return {c: -(-ext[c] // self.chunks[c]) for c in self.contraction.indices}

    @property
    def tasks(self) -> int:
        return prod(self.grid.values())

    @property
    def partials(self) -> int:
        """Partial results per output block (1: the summed indices are whole)."""
        return prod(self.grid[c] for c in self.contraction.summed)

    @property
    def input_block_bytes(self) -> int:
        ch, size = self.chunks, self.contraction.itemsize
        return sum(prod(ch[c] for c in op) * size for op in self.contraction.inputs)

    @property
    def output_block_bytes(self) -> int:
        return prod(self.chunks[c] for c in self.contraction.output) * self.contraction.itemsize

    @property
    def task_bytes(self) -> int:
        contract = self.input_block_bytes + self.output_block_bytes
        if self.partials == 1:
            return contract
        reduce = (min(self.split_every, self.partials) + 1) * self.output_block_bytes
        return max(contract, reduce)

    @property
    def read_bytes(self) -> int:
        ext, grid, size = self.contraction.extents, self.grid, self.contraction.itemsize
        total = 0
        for op in self.contraction.inputs:
            others = prod(grid[c] for c in self.contraction.indices if c not in op)
            total += prod(ext[c] for c in op) * size * others
        return total

    @property
    def partial_bytes(self) -> int:
        if self.partials == 1:
            return 0
        ext = self.contraction.extents
        out = prod(ext[c] for c in self.contraction.output) * self.contraction.itemsize
        return 2 * out * self.partials  # written by the tasks, read by the reduction

    @property
    def task_flops(self) -> int:
        block = prod(self.chunks[c] for c in self.contraction.indices)
        return block * (2 if len(self.contraction.inputs) > 1 else 1)


def task_seconds(choice: ChunkChoice, flops_per_second: float,
                 bytes_per_second: float) -> float:
    """A task's predicted time on one core: its flops at the GEMM rate plus its input and
    output blocks at the memory rate (the cost model's per-core figures)."""
    moved = choice.input_block_bytes + choice.output_block_bytes
    return choice.task_flops / flops_per_second + moved / bytes_per_second


def choose_chunks(contraction: Contraction, given: Mapping[str, int], budget_bytes: int,
                  flops_per_second: float, bytes_per_second: float,
                  split_every: int = SPLIT_EVERY, rechunk: bool = True, min_tasks: int = 1,
                  min_task_seconds: float = MIN_TASK_SECONDS) -> ChunkChoice:
    """The chunk size per index for ``contraction``, from the operands' chunk sizes
    ``given`` (the largest chunk along each index).

    With ``rechunk=False`` the given chunks stand (the choice only reports their cost).
    Otherwise, from the given chunks, each move the one that adds the least traffic:

    1. while a task exceeds ``budget_bytes``, halve an index (a problem whose smallest
       tasks exceed the budget is refused);
    2. while there are fewer than ``min_tasks`` tasks, halve an index whose tasks stay at
       least ``min_task_seconds`` long;
    3. double a summed index where that moves fewer bytes (the partial results it saves
       against the rechunk it costs) or, while a task is shorter than
       ``min_task_seconds``, any index, as long as the task stays within the budget and
       the tasks at least ``min_tasks``.

    >>> c = Contraction(("ik", "kj"), "ij", {"i": 4096, "j": 4096, "k": 65536}, 4)
    >>> ch = choose_chunks(c, {"i": 1024, "j": 1024, "k": 1024}, 256 << 20, 50e9, 10e9)
    >>> ch.chunks["k"] > 1024, ch.task_bytes <= 256 << 20
    (True, True)
    """
    ext = contraction.extents
    for c in contraction.indices:
        if ext[c] < 1:
            raise PlanError(f"index {c!r}: a dask contraction needs extents of at least 1, "
                            f"got {ext[c]}")
    chunks = {c: max(1, min(given[c], ext[c])) for c in contraction.indices}
    start = dict(chunks)
    if not rechunk:
        return ChunkChoice(contraction, chunks, split_every, ("the operands' chunks, as given",))

    def choice(ch: Mapping[str, int]) -> ChunkChoice:
        return ChunkChoice(contraction, dict(ch), split_every, ())

    def traffic(ch: Mapping[str, int]) -> int:
        """Bytes moved: the tasks' reads and partial results, and a rechunk's copy of
        every operand whose chunks change (dask reads and writes it once more)."""
        trial = choice(ch)
        moved = trial.read_bytes + trial.partial_bytes
        for op in contraction.inputs:
            if any(ch[c] != start[c] for c in op):
                moved += 2 * prod(ext[c] for c in op) * contraction.itemsize
        return moved

    def seconds(ch: Mapping[str, int]) -> float:
        return task_seconds(choice(ch), flops_per_second, bytes_per_second)

    def resized(c: str, factor: float) -> dict[str, int]:
        trial = dict(chunks)
        trial[c] = max(1, min(ext[c], -(-chunks[c] // 2) if factor < 1 else 2 * chunks[c]))
        return trial

    moves: dict[str, list[str]] = {"split": [], "parallel": [], "merged": []}
    while choice(chunks).task_bytes > budget_bytes:
        options = [(traffic(t), c, t) for c in contraction.indices if chunks[c] > 1
                   for t in [resized(c, 0.5)]]
        if not options:
            raise PlanError(f"a dask contraction's smallest task needs "
                            f"{_size(choice(chunks).task_bytes)}, over the budget of "
                            f"{_size(budget_bytes)}: raise memory_budget")
        _, c, chunks = min(options)
        moves["split"].append(c)
    while choice(chunks).tasks < min_tasks:
        options = [(traffic(t), c, t) for c in contraction.indices if chunks[c] > 1
                   for t in [resized(c, 0.5)] if seconds(t) >= min_task_seconds]
        if not options:
            break
        _, c, chunks = min(options)
        moves["parallel"].append(c)
    while True:
        # Each index's doublings all the way, not one at a time: a rechunk is paid once
        # and saves partial results at every doubling after it.
        short = seconds(chunks) < min_task_seconds
        now = traffic(chunks)
        options = []
        for c in contraction.indices:
            if c in contraction.output and not short:
                continue
            t = dict(chunks)
            while t[c] < ext[c]:
                t = {**t, c: min(ext[c], 2 * t[c])}
                trial = choice(t)
                if trial.task_bytes > budget_bytes or trial.tasks < min_tasks:
                    break
                if short or traffic(t) < now:
                    options.append((traffic(t), c, t))
                if short:
                    break  # growing for task size: one doubling, then look again
        if not options:
            break
        _, c, chunks = min(options)
        moves["merged"].append(c)
    reasons = []
    why = {"split": f"tasks within the budget of {_size(budget_bytes)}",
           "parallel": f"at least {min_tasks} tasks for the cluster's threads",
           "merged": "fewer partial results and tasks of at least "
                     f"{min_task_seconds * 1e3:.0f} ms, within the budget"}
    for move, indices in moves.items():
        if indices:
            sizes = ", ".join(f"{c}={chunks[c]}" for c in dict.fromkeys(indices))
            verb = "merged" if move == "merged" else "split"
            reasons.append(f"{verb} {sizes}: {why[move]}")
    return ChunkChoice(contraction, chunks, split_every, tuple(reasons) or ("as given",))


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.3g} {unit}"
    return f"{n} B"


def given_chunks(inputs: Sequence[str], chunks: Sequence[tuple[tuple[int, ...], ...]]
                 ) -> dict[str, int]:
    """The largest chunk along each index over the operands that have it."""
    out: dict[str, int] = {}
    for op, op_chunks in zip(inputs, chunks):
        for c, along in zip(op, op_chunks):
            out[c] = max(out.get(c, 0), max(along) if along else 0)
    return out
