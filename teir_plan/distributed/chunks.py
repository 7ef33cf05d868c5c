"""How a contraction over chunked operands is split into tasks: one chunk size per index.

Each task contracts one block of every operand (``tp.einsum`` on the blocks); a summed
index split into several chunks leaves one partial result per chunk, which a tree
reduction adds up.  The choice minimizes one predicted time (:meth:`ChunkChoice.seconds`)
under one bound:

* **Memory (the bound).**  A task holds its input blocks and its output block; a
  reduction task holds ``split_every`` partial blocks and their sum.  The larger must
  stay within the budget, or a worker runs out of memory.
* **Time.**  The tasks' flops at the cost model's per-core GEMM rate and their block
  reads at its per-core memory rate, spread over the cluster's threads (no more threads
  than tasks); the scheduler's ~1 ms per task; and the bytes that cross between workers:
  partial results, and a rechunk's copy of every operand whose chunks change.

:func:`choose_chunks` starts from the operands' own chunks, splits what does not fit the
budget, then moves to the neighbouring chunking (an index's chunks halved, or doubled
any number of times) that predicts the least time, until none predicts less.  It is
pure Python: planning a dask contraction runs no kernel.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from math import prod

from teir_plan.errors import PlanError

SPLIT_EVERY = 4  # partial sums added per reduction task (dask's split_every)
TASK_SECONDS = 1e-3  # the scheduler's cost per task (dask's documented order of magnitude)
# Bytes per second between worker processes (serialization and TCP): a conservative
# figure for processes on one machine, the order of a cluster's network.
NETWORK_BYTES_PER_SECOND = 1e9
# Bytes of pieces a task joins at a time when a kept index comes in pieces (tasks.py):
# a few MiB stay in cache and cost no page faults, and a slab's contraction is still a
# large TEIR problem (gram 2e6 x 64 in 8 x 8 pieces: 8192 rows of 64 at a time).
SLAB_BYTES = 4 << 20


@dataclass(frozen=True)
class Rates:
    """What a chunking's predicted time is made of: one core's GEMM and memory rates
    (the cost model's), the bytes per second between workers, the scheduler's time per
    task, and the cluster's dask threads."""

    flops_per_second: float
    bytes_per_second: float
    threads: int
    network_bytes_per_second: float = NETWORK_BYTES_PER_SECOND
    task_seconds: float = TASK_SECONDS


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
    # The operands' own chunk sizes: a summed index taken whole from several of them is
    # joined inside the task (a copy of the block, see ``join_bytes``).  Empty: none.
    given: Mapping[str, int] = field(default_factory=dict)

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
    def join_bytes(self) -> int:
        """What a task holds beyond its blocks when operands arrive in pieces (an index
        taken whole, one chunk, where the operands' own chunks split it), as
        teir_plan/distributed/tasks.py contracts them: along summed indices only, a copy
        of each such block joined or one temporary of the output block when the task
        adds the pieces' contractions up instead, whichever is less; along a kept index,
        a slab of the pieces joined at a time along a summed index they all have whole,
        and a temporary of the output block (else the copy of the blocks)."""
        c, ch = self.contraction, self.chunks
        pieced = [op for op in c.inputs if any(self._joined(i) for i in op)]
        joined = sum(prod(ch[i] for i in op) * c.itemsize for op in pieced)
        if not any(self._joined(i) for i in c.output):
            return min(joined, self.output_block_bytes)
        slabs = [i for i in c.summed if not self._joined(i)
                 and all(ix.count(i) <= 1 for ix in c.inputs)
                 and all(i in op for op in pieced) and ch[i] * SLAB_BYTES >= joined]
        if slabs and joined > SLAB_BYTES:
            return SLAB_BYTES + self.output_block_bytes
        return joined

    def _joined(self, index: str) -> bool:
        """Whether the tasks take ``index`` whole from pieces (contract.py's rule: an
        index in one chunk that no operand repeats, split by the given chunks)."""
        c = self.contraction
        return (self.grid[index] == 1
                and self.given.get(index, c.extents[index]) < c.extents[index]
                and all(ix.count(index) <= 1 for ix in c.inputs))

    @property
    def rechunk_bytes(self) -> int:
        """A copy of each input block whose chunks are larger than the given ones along
        an index not joined in the task: dask's rechunk makes it, and it stays on the
        worker while the tasks that read it wait, beside the operand's own pieces."""
        c, ch = self.contraction, self.chunks
        return sum(prod(ch[i] for i in op) * c.itemsize for op in c.inputs
                   if any(ch[i] > min(self.given.get(i, ch[i]), c.extents[i])
                          and not self._joined(i) for i in op))

    @property
    def task_bytes(self) -> int:
        contract = (self.input_block_bytes + self.join_bytes + self.rechunk_bytes
                    + self.output_block_bytes)
        if self.partials == 1:
            return contract
        reduce = (min(self.split_every, self.partials) + 1) * self.output_block_bytes
        return max(contract, reduce)

    @property
    def pieces_bytes(self) -> int:
        """The input blocks a task reads in place, in pieces: those of operands whose
        own chunks split an index of the result that the task takes whole (tasks.py
        joins them a slab at a time, a copy :attr:`join_bytes` counts).  They are the
        operands' blocks themselves, which the workers hold whatever the chunking.
        Pieces along summed indices only are not counted here: such a task adds one
        contraction per combination of pieces, or joins them whole, and held more than
        dask's tasks on the given chunks (abcd,dbea with a whole: a worker peak of 219
        MiB against 190)."""
        c, ch = self.contraction, self.chunks
        if not any(self._joined(i) for i in c.output):
            return 0
        return sum(prod(ch[i] for i in op) * c.itemsize for op in c.inputs
                   if any(self._joined(i) for i in op))

    @property
    def own_bytes(self) -> int:
        """What a task allocates or has copied for it: :attr:`task_bytes` less the
        operands' pieces it reads in place (:attr:`pieces_bytes`)."""
        contract = (self.input_block_bytes - self.pieces_bytes + self.join_bytes
                    + self.rechunk_bytes + self.output_block_bytes)
        if self.partials == 1:
            return contract
        return max(contract, (min(self.split_every, self.partials) + 1)
                   * self.output_block_bytes)

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


def predicted_seconds(choice: ChunkChoice, rates: Rates, given: Mapping[str, int]) -> float:
    """The chunking's predicted time: the tasks' work in rounds of the cluster's threads,
    the scheduler's time per task (a rechunk's tasks too), and the bytes crossing
    between workers (partial results; operands rechunked from the ``given`` chunks)."""
    c = choice.contraction
    tasks = choice.tasks
    per_task = (choice.task_flops / rates.flops_per_second
                + choice.read_bytes / tasks / rates.bytes_per_second)
    rounds = -(-tasks // rates.threads)  # the threads take the tasks a round at a time
    moved = choice.partial_bytes
    scheduled = tasks
    for op in c.inputs:
        # An index joined in the task is not rechunked, and a chunk that divides the
        # given one is a view of it (dask's rechunk slices the block where it is): only
        # larger chunks, or smaller ones across the given boundaries, move bytes.
        if any(_moves(choice.chunks[i], min(given[i], c.extents[i]))
               and not choice._joined(i) for i in op):
            moved += 2 * prod(c.extents[i] for i in op) * c.itemsize
        # A rechunk is a task per new block, slicing or joining (gram 2e6 x 64 split from
        # 8 to 128 chunks along k: 2,048 rechunk tasks for 128 contractions, measured
        # 2.7 times slower than dask's 512 contractions on the given chunks).
        if any(choice.chunks[i] != min(given[i], c.extents[i]) and not choice._joined(i)
               for i in op):
            scheduled += prod(-(-c.extents[i] // (given[i] if choice._joined(i)
                                                  else choice.chunks[i])) for i in op)
    return (rounds * per_task + scheduled * rates.task_seconds / rates.threads
            + moved / rates.network_bytes_per_second)


def _moves(chunk: int, given: int) -> bool:
    return chunk > given or given % chunk != 0


def choose_chunks(contraction: Contraction, given: Mapping[str, int], budget_bytes: int,
                  rates: Rates, split_every: int = SPLIT_EVERY, rechunk: bool = True,
                  read_limit: int | None = None, hold_limit: int | None = None,
                  loose_limit: int | None = None) -> ChunkChoice:
    """The chunk size per index for ``contraction``, from the operands' chunk sizes
    ``given`` (the largest chunk along each index).

    With ``rechunk=False`` the given chunks stand (the choice only reports their cost).
    Otherwise: while a task exceeds ``budget_bytes``, the index whose halving predicts
    the least time is halved (a problem whose smallest tasks exceed the budget is
    refused); then, while a neighbouring chunking within the budget predicts less time
    (:func:`predicted_seconds`), the best one is taken: an index's chunks halved, or
    doubled once or more (a rechunk costs once, so one doubling may not pay where two
    do), with other indices halved as far as the budget then needs.  ``read_limit``:
    the most bytes the tasks may read in all (:attr:`ChunkChoice.read_bytes`) for a move
    to be taken: an operand read by more tasks is copied to more workers, and each copy
    stays in a worker's memory while its tasks wait.  ``hold_limit``: with it, the
    budget bounds what a task allocates or has copied (:attr:`ChunkChoice.own_bytes`),
    and ``hold_limit`` what it holds with the operands' pieces it reads in place
    (:attr:`ChunkChoice.task_bytes`), if the chunking so found reads at most half as
    much as the one found with the budget bounding the latter; else that one.
    (``loose_limit``: that search alone, whatever it reads.)

    >>> c = Contraction(("ik", "kj"), "ij", {"i": 4096, "j": 4096, "k": 65536}, 4)
    >>> ch = choose_chunks(c, {"i": 1024, "j": 1024, "k": 1024}, 256 << 20,
    ...                    Rates(50e9, 10e9, threads=4))
    >>> ch.chunks["k"] > 1024, ch.task_bytes <= 256 << 20
    (True, True)
    """
    ext = contraction.extents
    for c in contraction.indices:
        if ext[c] < 1:
            raise PlanError(f"index {c!r}: a dask contraction needs extents of at least 1, "
                            f"got {ext[c]}")
    chunks = {c: max(1, min(given[c], ext[c])) for c in contraction.indices}
    if not rechunk:
        return ChunkChoice(contraction, chunks, split_every,
                           ("the operands' chunks, as given",), given)

    def choice(ch: Mapping[str, int]) -> ChunkChoice:
        return ChunkChoice(contraction, dict(ch), split_every, (), given)

    if hold_limit is not None and rechunk:
        # Pieces read in place escape the budget only where the chunking found so reads
        # at most half as much as the one found within the budget: each piece a task
        # reads from another worker is a copy held there, and a task holds all of its
        # pieces at once.  Measured worker peaks: gram and abcd,dbea read 1/8 and 1/4 as
        # much, 78 and 38 MiB against 466 and 238; abc,bda->dc in halves (a and c
        # whole, 2/3 as much) 81 against 25, ea,ebcd (a whole, 0.51) 777 against 768.
        loose = choose_chunks(contraction, given, budget_bytes, rates, split_every, rechunk,
                              read_limit, None, hold_limit)
        strict = choose_chunks(contraction, given, budget_bytes, rates, split_every,
                               rechunk, read_limit)
        return loose if 2 * loose.read_bytes <= strict.read_bytes else strict

    def over(ch: ChunkChoice) -> bool:
        if loose_limit is None:
            return ch.task_bytes > budget_bytes
        return ch.own_bytes > budget_bytes or ch.task_bytes > loose_limit

    def seconds(ch: Mapping[str, int]) -> float:
        return predicted_seconds(choice(ch), rates, given)

    def halved(c: str) -> dict[str, int]:
        return {**chunks, c: -(-chunks[c] // 2)}

    def fitted(ch: dict[str, int], keep: str) -> dict[str, int] | None:
        """``ch`` with other indices than ``keep`` halved, the one that predicts the
        least time each time, until a task fits the budget (None: it cannot)."""
        while over(choice(ch)):
            options = [(seconds(t), c, t) for c in contraction.indices
                       if c != keep and ch[c] > 1 for t in [{**ch, c: -(-ch[c] // 2)}]]
            if not options:
                return None
            ch = min(options, key=lambda o: o[:2])[2]
        return ch

    split: list[str] = []
    while over(choice(chunks)):
        options = [(seconds(t), c, t) for c in contraction.indices if chunks[c] > 1
                   for t in [halved(c)]]
        if not options:
            raise PlanError(f"a dask contraction's smallest task needs "
                            f"{_size(choice(chunks).task_bytes)}, over the budget of "
                            f"{_size(budget_bytes)}: raise memory_budget")
        _, c, chunks = min(options, key=lambda o: o[:2])
        split.append(c)
    def improved(start: dict[str, int], limit: int | None
                 ) -> tuple[dict[str, int], list[str]]:
        def reads_within(ch: Mapping[str, int]) -> bool:
            return limit is None or choice(ch).read_bytes <= limit

        chunks, moved = start, list[str]()
        while True:
            now = seconds(chunks)
            options = []
            for c in contraction.indices:
                t = {**chunks, c: -(-chunks[c] // 2)}
                # Halving a summed index adds partial results: a reduction task may
                # then hold more than the budget (bi,bj->ij, b from 5 to 3).
                if chunks[c] > 1 and reads_within(t) and not over(choice(t)):
                    options.append((seconds(t), c, t))
                t = dict(chunks)
                while t[c] < ext[c]:
                    t = {**t, c: min(ext[c], 2 * t[c])}
                    # Over the budget, other indices split to make room: taking a summed
                    # index whole (no partial results) may pay only with smaller blocks
                    # along the rest (ea,ebcd: e whole with b split).
                    f = fitted(t, c)
                    if f is None:
                        break
                    if reads_within(f):
                        options.append((seconds(f), c, f))
            best = min(options, key=lambda o: o[:2], default=None)
            if best is None or best[0] >= now * (1 - 1e-9):
                return chunks, moved
            _, c, chunks = best
            moved.append(c)

    # The read limit is met by the end, not at every move: taking two indices whole may
    # read less than the given chunks although either alone reads more (ea,ebcd: e and
    # a whole, b split).
    start = chunks
    chunks, moved = improved(start, None)
    if read_limit is not None and choice(chunks).read_bytes > read_limit:
        chunks, moved = improved(start, read_limit)
    reasons = []
    if split:
        reasons.append("split " + ", ".join(f"{c}={chunks[c]}" for c in dict.fromkeys(split))
                       + f": tasks within the budget of {_size(budget_bytes)}")
    if moved:
        reasons.append("rechunked " + ", ".join(f"{c}={chunks[c]}"
                                               for c in dict.fromkeys(moved))
                       + f": predicted {seconds(chunks):.3g} s against "
                       # (the chunking it moved from: the given one split to the budget)
                       f"{seconds(start):.3g} s " + ("as split" if split else "as given"))
    return ChunkChoice(contraction, chunks, split_every, tuple(reasons) or
                       ("as given: no other chunking predicts less time",), given)


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
