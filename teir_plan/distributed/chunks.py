"""How a contraction over chunked operands is split into tasks: one chunk size per index.

Each task contracts one block of every operand (``tp.einsum`` on the blocks); a summed
index split into several chunks leaves one partial result per chunk, which a tree
reduction adds up.  Two things bound the choice:

* **Memory.**  A task holds its input blocks and its output block; a reduction task holds
  ``split_every`` partial blocks and their sum.  The larger of the two must stay within
  the budget, or a worker runs out of memory (and with many partials alive at once, dask's
  scheduler can hold far more than that: summed indices are kept whole where they fit).
* **Task size.**  A task costs the scheduler about a millisecond whatever it does, so a
  block must carry enough work to hide that: ``min_task_seconds`` of it, priced with the
  cost model's per-core rates.

:func:`choose_chunks` starts from the operands' own chunks along the kept indices and
whole summed indices, halves the index whose split adds the least traffic until the
tasks fit the budget, then grows the kept indices while the tasks are too small.  It is
pure Python: planning a dask contraction runs no kernel.
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
                  split_every: int = SPLIT_EVERY, rechunk: bool = True,
                  min_task_seconds: float = MIN_TASK_SECONDS) -> ChunkChoice:
    """The chunk size per index for ``contraction``, from the operands' chunk sizes
    ``given`` (the largest chunk along each index).

    With ``rechunk=False`` the given chunks stand (the choice only reports their cost).
    Otherwise summed indices start whole and kept ones as given; while a task exceeds
    ``budget_bytes`` the index whose halving adds the least traffic (re-read operand
    blocks, partial results) is halved; while a task's predicted time is below
    ``min_task_seconds`` the kept index whose doubling keeps the traffic lowest is doubled,
    within the budget.  A problem whose smallest tasks exceed the budget is refused.

    >>> c = Contraction(("ik", "kj"), "ij", {"i": 4096, "j": 4096, "k": 65536}, 4)
    >>> ch = choose_chunks(c, {"i": 1024, "j": 1024, "k": 1024}, 256 << 20, 50e9, 10e9)
    >>> ch.chunks["k"] < 65536, ch.task_bytes <= 256 << 20
    (True, True)
    """
    ext = contraction.extents
    for c in contraction.indices:
        if ext[c] < 1:
            raise PlanError(f"index {c!r}: a dask contraction needs extents of at least 1, "
                            f"got {ext[c]}")
    if not rechunk:
        chunks = {c: max(1, min(given[c], ext[c])) for c in contraction.indices}
        return ChunkChoice(contraction, chunks, split_every, ("the operands' chunks, as given",))
    chunks = {c: max(1, min(given[c], ext[c])) for c in contraction.indices}
    reasons = []
    whole = [c for c in contraction.summed if chunks[c] < ext[c]]
    for c in contraction.summed:
        chunks[c] = ext[c]
    if whole:
        reasons.append(f"summed {', '.join(whole)} taken whole: no partial results")

    def cost(ch: dict[str, int]) -> tuple[int, int]:
        choice = ChunkChoice(contraction, ch, split_every, ())
        return choice.read_bytes + choice.partial_bytes, choice.task_bytes

    def current() -> ChunkChoice:
        return ChunkChoice(contraction, dict(chunks), split_every, ())

    halved: dict[str, int] = {}
    while current().task_bytes > budget_bytes:
        options = []
        for c in contraction.indices:
            if chunks[c] > 1:
                trial = dict(chunks)
                trial[c] = -(-chunks[c] // 2)
                options.append((cost(trial), c, trial[c]))
        if not options:
            raise PlanError(f"a dask contraction's smallest task needs "
                            f"{current().task_bytes} bytes, over the budget of "
                            f"{budget_bytes}: raise memory_budget")
        (_, _), c, size = min(options)
        chunks[c] = size
        halved[c] = size
    if halved:
        reasons.append(", ".join(f"{c} split to {n}" for c, n in halved.items())
                       + f": tasks within the budget of {_size(budget_bytes)}")
    grown: dict[str, int] = {}
    while task_seconds(current(), flops_per_second, bytes_per_second) < min_task_seconds:
        options = []
        for c in contraction.output:
            if chunks[c] < ext[c]:
                trial = dict(chunks)
                trial[c] = min(ext[c], 2 * chunks[c])
                traffic, peak = cost(trial)
                if peak <= budget_bytes:
                    options.append(((traffic, peak), c, trial[c]))
        if not options:
            break
        (_, _), c, size = min(options)
        chunks[c] = size
        grown[c] = size
    if grown:
        reasons.append(", ".join(f"{c} grown to {n}" for c, n in grown.items())
                       + f": tasks of at least {min_task_seconds * 1e3:.0f} ms where "
                       f"memory allows")
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
