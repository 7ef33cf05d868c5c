"""How a contraction over chunked operands is split into tasks
(teir_plan/distributed/chunks.py), pure Python, no dask: what a chunking costs (its grid,
blocks, bytes read, partial results, peak memory per task, predicted time), worked out by
hand for small cases; and what ``choose_chunks`` promises: tasks within the budget, the
given chunks kept when asked, refusals that name the problem, and a result that no
neighbouring chunking within the budget beats on predicted time.

(tests/test_dask.py runs the chosen chunkings on dask and checks joins of pieces and the
cluster's limits; here the accounting itself.)"""

from __future__ import annotations

import itertools
import re

import pytest

from teir_plan.distributed.chunks import (
    ChunkChoice,
    Contraction,
    Rates,
    choose_chunks,
    given_chunks,
    predicted_seconds,
)
from teir_plan.errors import PlanError

# ik,kj->ij with i 8, j 6, k 12 in float32 (4 bytes), chunks i 4, j 3, k 4.
MATMUL = Contraction(("ik", "kj"), "ij", {"i": 8, "j": 6, "k": 12}, 4)
CHUNKS = {"i": 4, "j": 3, "k": 4}
# Rates picked so that each term of the prediction is a round number (see below).
RATES = Rates(flops_per_second=96.0, bytes_per_second=112.0, threads=4,
              network_bytes_per_second=1152.0, task_seconds=0.5)


def test_what_a_chunking_costs_by_hand() -> None:
    ch = ChunkChoice(MATMUL, CHUNKS, 4, (), CHUNKS)
    assert ch.grid == {"i": 2, "k": 3, "j": 2}  # 8 / 4, 12 / 4, 6 / 3
    assert ch.tasks == 12 and ch.partials == 3  # k in 3 chunks: 3 partial sums per block
    assert ch.input_block_bytes == 4 * 4 * 4 + 4 * 3 * 4  # ik 4 x 4, kj 4 x 3
    assert ch.output_block_bytes == 4 * 3 * 4
    # Each operand read once per block of the index it lacks: ik (384 bytes) by j's 2,
    # kj (288 bytes) by i's 2.
    assert ch.read_bytes == 384 * 2 + 288 * 2
    # The result (192 bytes) written 3 times by the tasks and read by the reduction.
    assert ch.partial_bytes == 2 * 192 * 3
    assert ch.task_flops == 2 * 4 * 3 * 4
    assert ch.join_bytes == 0 and ch.rechunk_bytes == 0 and ch.pieces_bytes == 0
    # A contraction task holds 112 + 48 bytes; a reduction task min(4, 3) partials and
    # their sum, 4 x 48: the larger.
    assert ch.task_bytes == ch.own_bytes == max(112 + 48, 4 * 48) == 192


def test_the_predicted_time_by_hand() -> None:
    ch = ChunkChoice(MATMUL, CHUNKS, 4, (), CHUNKS)
    # Per task 96 flops / 96 + (1344 / 12 tasks) bytes / 112 = 2 s, in 12 / 4 = 3 rounds:
    # 6 s; 12 tasks x 0.5 s over 4 threads: 1.5 s; 1152 partial bytes at 1152 B/s: 1 s.
    assert predicted_seconds(ch, RATES, CHUNKS) == pytest.approx(8.5, rel=1e-12)
    # Given i in chunks of 2: ik is rechunked, copied (2 x 384 bytes more over the
    # network) by 2 x 3 more tasks; the tasks themselves are the same.
    given = {**CHUNKS, "i": 2}
    moved = ChunkChoice(MATMUL, CHUNKS, 4, (), given)
    assert predicted_seconds(moved, RATES, given) == pytest.approx(
        6 + (12 + 6) * 0.5 / 4 + (1152 + 768) / 1152, rel=1e-12)
    # The rechunked ik block (4 x 4 floats) stays with the task: 112 + 64 + 48.
    assert moved.rechunk_bytes == 64 and moved.task_bytes == 224
    # Chunks that divide the given ones are views: no bytes move, but the slicing tasks
    # are scheduled (k given as 12, taken in chunks of 4: 2 x 3 tasks for ik, 3 x 2 kj).
    given = {**CHUNKS, "k": 12}
    sliced = ChunkChoice(MATMUL, CHUNKS, 4, (), given)
    assert predicted_seconds(sliced, RATES, given) == pytest.approx(
        6 + (12 + 6 + 6) * 0.5 / 4 + 1, rel=1e-12)


def test_a_summed_index_taken_whole_from_pieces_is_joined_in_the_task() -> None:
    # k given in pieces of 4, taken whole (12): no partial results and no rechunk; the
    # task either copies the pieces together (ik 4 x 12 and kj 12 x 3: 336 bytes) or
    # adds the pieces' contractions into a temporary output block (48): the less.
    whole = {**CHUNKS, "k": 12}
    ch = ChunkChoice(MATMUL, whole, 4, (), CHUNKS)
    assert ch.partials == 1 and ch.partial_bytes == 0
    assert ch.rechunk_bytes == 0 and ch.join_bytes == 48
    assert ch.task_bytes == (4 * 12 + 12 * 3) * 4 + 48 + 48
    # Nothing is rechunked, sliced or summed across tasks: 2 x 2 tasks in one round, each
    # 288 flops / 96 + (ik's 384 bytes x 2 + kj's 288 x 2) / 4 tasks / 112 = 3 + 3 s;
    # 4 x 0.5 s of scheduling over 4 threads.
    assert predicted_seconds(ch, RATES, CHUNKS) == pytest.approx(3 + 3 + 0.5, rel=1e-12)


def test_given_chunks_are_the_largest_per_index() -> None:
    chunks = (((4, 4), (6, 6)), ((5, 7), (3, 3)))  # ik: i 4+4, k 6+6; kj: k 5+7, j 3+3
    assert given_chunks(("ik", "kj"), chunks) == {"i": 4, "k": 7, "j": 3}


def test_the_given_chunks_stand_when_asked() -> None:
    ch = choose_chunks(MATMUL, {"i": 4, "j": 100, "k": 0}, 1, RATES, rechunk=False)
    # clipped to the extents, at least 1, whatever the budget
    assert dict(ch.chunks) == {"i": 4, "k": 1, "j": 6}
    assert ch.reasons == ("the operands' chunks, as given",)


def test_refusals_name_the_problem() -> None:
    empty = Contraction(("ik", "kj"), "ij", {"i": 8, "j": 0, "k": 12}, 4)
    with pytest.raises(PlanError, match="index 'j'.*at least 1, got 0"):
        choose_chunks(empty, CHUNKS, 1 << 20, RATES)
    # The smallest tasks: one element of each operand and of the result (12 bytes), and
    # reductions adding 4 of the 12 partial elements into a fifth (20 bytes).
    with pytest.raises(PlanError, match="smallest task needs 20 B, over the budget of 8 B"):
        choose_chunks(MATMUL, CHUNKS, 8, RATES)


CASES = [
    (MATMUL, CHUNKS),
    (Contraction(("abk", "kc"), "abc", {"a": 6, "b": 10, "c": 8, "k": 16}, 8),
     {"a": 3, "b": 5, "c": 8, "k": 4}),
    (Contraction(("bi", "bj"), "ij", {"b": 64, "i": 8, "j": 8}, 4),
     {"b": 8, "i": 8, "j": 8}),
]


@pytest.mark.parametrize(("budget", "rates"), [
    (200, RATES), (600, RATES), (2000, Rates(1e9, 1e9, threads=2)), (1 << 20, RATES),
])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_no_neighbouring_chunking_within_the_budget_predicts_less(case: int, budget: int,
                                                                  rates: Rates) -> None:
    c, given = CASES[case]
    try:
        chosen = choose_chunks(c, given, budget, rates)
    except PlanError:
        smallest = ChunkChoice(c, dict.fromkeys(c.indices, 1), 4, (), given)
        assert smallest.task_bytes > budget  # refused only when nothing fits
        return
    assert chosen.task_bytes <= budget
    best = predicted_seconds(chosen, rates, given)
    ext = c.extents
    for index, factor in itertools.product(c.indices, (0.5, 2, 4)):
        n = chosen.chunks[index]
        t = max(1, min(ext[index], -(-n // 2) if factor == 0.5 else n * int(factor)))
        other = ChunkChoice(c, {**chosen.chunks, index: t}, 4, (), given)
        if t != n and other.task_bytes <= budget:
            assert predicted_seconds(other, rates, given) >= best * (1 - 1e-9), (index, t)


def test_a_rechunk_after_a_split_is_weighed_against_the_split_chunking() -> None:
    # ik,kj with every index whole: tasks over 8 MiB, so i is split first; j's rechunk
    # then gains over that split chunking (not over the given one, which the budget
    # had already ruled out).
    c = Contraction(("ik", "kj"), "ij", {"i": 512, "j": 512, "k": 2048}, 4)
    ch = choose_chunks(c, {"i": 512, "j": 512, "k": 2048}, 8 << 20,
                       Rates(50e9, 10e9, threads=4))
    assert ch.reasons[0].startswith("split ")
    moved = re.fullmatch(r"rechunked .*: predicted (\S+) s against (\S+) s as split",
                         ch.reasons[1])
    assert moved is not None, ch.reasons
    assert float(moved[1]) < float(moved[2])
