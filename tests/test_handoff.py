"""The lines a tree step reads that another core wrote (planner/handoff.py), and the
tree planner's use of them."""

from __future__ import annotations

import itertools
import math
import os
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import teir_plan as tp
from teir_plan.calibration import cores as calibrate
from teir_plan.machine import set_machine_params
from teir_plan.planner.handoff import (
    HANDOFF_IN_FLIGHT,
    PAGE_BYTES,
    handoff_seconds,
    remote_transfers,
    run_lines,
)
from teir_plan.schedule.in_force import machine_params
from teir_plan.teir.records import TEIR


def _program(sizes: list[int], exec_types: list[str], strides: list[list[int]]) -> TEIR:
    return TEIR.from_fields(data_type="float32", prim_first="zero", prim_main="gemm",
                            prim_last="none", dim_types=["c"] * (len(sizes) - 3) + ["m", "n", "k"],
                            exec_types=exec_types, dim_sizes=sizes, strides=strides)


def _touched(prog: TEIR, j: int, threads: int, lanes: int) -> set[tuple[int, int]]:
    """(worker, line) pairs of tensor ``j``, walked iteration by iteration in Python."""
    s = prog.schedule
    par = [i for i, e in enumerate(s.exec_types) if e.value == "parallel"]
    rest = [i for i in range(s.num_dims) if i not in par]
    total = math.prod(s.dim_sizes[i] for i in par)
    chunks = min(total, threads) if par else 1
    if j == len(s.strides) - 1 and any(s.strides[j][i] == 0 for i in par):
        chunks = 1
    out = set()
    for it, idx in enumerate(itertools.product(*(range(s.dim_sizes[i]) for i in par))):
        worker = next(c for c in range(chunks)
                      if c * total // chunks <= it < (c + 1) * total // chunks)
        base = sum(x * s.strides[j][i] for x, i in zip(idx, par))
        for inner in itertools.product(*(range(s.dim_sizes[i]) for i in rest)):
            off = base + sum(x * s.strides[j][i] for x, i in zip(inner, rest))
            out.add((worker, off // lanes))
    return out


def _reference(writer: TEIR, wt: int, reader: TEIR, j: int, rt: int, l2: int) -> float:
    lanes = 16
    owner = {}
    for worker, line in sorted(_touched(writer, 2, wt, lanes)):
        owner[line] = worker
    written = {w: sum(1 for v in owner.values() if v == w) for w in set(owner.values())}
    per_worker: dict[int, float] = {}
    for worker, line in _touched(reader, j, rt, lanes):
        by = owner.get(line)
        if by is not None and by != worker:
            per_worker[worker] = per_worker.get(worker, 0.0) + min(1.0, l2 / (written[by] * 64))
    run, paged = run_lines(reader, j, 4)
    return max(per_worker.values(), default=0.0) / (run if paged else PAGE_BYTES // 64)


# A 16 x 24 x 8 output (C order: rows of 8 floats, half a line) written by a program
# parallel over its first axis, then read as in0 by programs that split it otherwise.
WRITER = _program([16, 24, 8, 1, 1], ["parallel", "seq", "prim", "prim", "prim"],
                  [[0, 0, 0, 0, 1], [0, 0, 0, 1, 0], [192, 8, 1, 0, 0]])


@settings(max_examples=40, deadline=None)
@given(order=st.permutations([0, 1, 2]), npar=st.integers(0, 2),
       writer_threads=st.integers(1, 3), reader_threads=st.integers(1, 3),
       l2=st.sampled_from([256, 4096, 1 << 20]))
def test_remote_transfers_match_a_walk_of_every_iteration(order, npar, writer_threads,
                                                          reader_threads, l2):
    """Whatever the reader's loop order and split, the counted transfers are those of a
    walk of both programs' iterations in Python."""
    sizes, strides = [16, 24, 8], [192, 8, 1]
    dims = [sizes[a] for a in order]
    in0 = [strides[a] for a in order]
    reader = _program(dims + [1, 1, 1],
                      ["parallel"] * npar + ["seq"] * (3 - npar) + ["prim"] * 3,
                      [in0 + [0, 0, 1], [0, 0, 0, 0, 1, 0], [0, 0, 0, 1, 0, 0]])
    got = remote_transfers(WRITER, writer_threads, reader, 0, reader_threads, 4, l2)
    assert got == pytest.approx(_reference(WRITER, writer_threads, reader, 0,
                                           reader_threads, l2))


@pytest.mark.parametrize("writer_par", [0, 1])
@pytest.mark.parametrize("writer_threads", [1, 2])
def test_handoff_seconds_price_the_walked_transfers(writer_par, writer_threads):
    """handoff_seconds, which skips the count when one worker writes and reads every
    line, prices the transfers of the walk of both programs for every split: a serial
    or parallel writer and reader, on one thread or two."""
    writer = _program([16, 24, 8, 1, 1],
                      ["parallel" if writer_par else "seq", "seq", "prim", "prim", "prim"],
                      [[0, 0, 0, 0, 1], [0, 0, 0, 1, 0], [192, 8, 1, 0, 0]])
    sizes, strides = [16, 24, 8], [192, 8, 1]
    for order in itertools.permutations([0, 1, 2]):
        for npar in range(3):
            for reader_threads in (1, 2):
                reader = _program([sizes[a] for a in order] + [1, 1, 1],
                                  ["parallel"] * npar + ["seq"] * (3 - npar) + ["prim"] * 3,
                                  [[strides[a] for a in order] + [0, 0, 1],
                                   [0, 0, 0, 0, 1, 0], [0, 0, 0, 1, 0, 0]])
                got = handoff_seconds(writer, writer_threads, reader, 0, reader_threads,
                                      4, 4096, 1e-7)
                want = _reference(writer, writer_threads, reader, 0, reader_threads,
                                  4096) * 1e-7 / HANDOFF_IN_FLIGHT
                assert got == pytest.approx(want, abs=1e-18), (order, npar, reader_threads)


def test_reads_that_follow_the_writers_split_cost_nothing():
    reader = _program([16, 24, 8, 1, 1], ["parallel", "seq", "prim", "prim", "prim"],
                      [[192, 8, 1, 0, 0], [0, 0, 0, 0, 1], [0, 0, 0, 1, 0]])
    assert remote_transfers(WRITER, 2, reader, 0, 2, 4, 1 << 20) == 0.0
    # The same reader on one thread reads the other worker's half: 8 x 24 x 8 floats,
    # 96 lines, in rows 32 bytes apart (streamed: one exposed transfer a page).
    assert remote_transfers(WRITER, 2, reader, 0, 1, 4, 1 << 20) == 96 / 64


def test_short_runs_a_page_apart_each_pay_a_transfer():
    """A tile of 32 rows of 32 floats (two lines) 36 KiB apart, as a BLAS tile of the
    Tucker tree's last step reads it: one transfer per run."""
    writer = _program([96, 96, 32, 1, 1], ["parallel", "prim", "prim", "prim", "prim"],
                      [[0, 0, 0, 0, 1], [0, 0, 0, 1, 0], [3072, 32, 1, 0, 0]])
    reader = _program([288, 32, 1, 1, 32], ["parallel", "prim", "prim", "prim", "prim"],
                      [[32, 9216, 0, 0, 1], [0, 0, 0, 1, 0], [0, 0, 1, 0, 0]])
    assert run_lines(reader, 0, 4) == (2, True)
    # Worker 0 reads rows 0-143 of each 288: those of the second half were worker 1's.
    assert remote_transfers(writer, 2, reader, 0, 2, 4, 1 << 20) == 96 * 96 * 32 // 4 / 16 / 2


def test_a_parallel_k_split_is_written_by_the_caller():
    """A writer whose parallel axis carries K (stride 0 in out): the calling thread adds
    the partial sums, so a one-thread reader finds everything local."""
    writer = _program([4, 24, 8, 1, 16], ["parallel", "prim", "prim", "prim", "prim"],
                      [[16, 0, 0, 0, 1], [16, 0, 0, 1, 0], [0, 8, 1, 0, 0]])
    reader = _program([24, 8, 1, 1, 1], ["seq", "prim", "prim", "prim", "prim"],
                      [[8, 1, 0, 0, 0], [0, 0, 0, 0, 1], [0, 0, 0, 1, 0]])
    assert remote_transfers(writer, 2, reader, 0, 1, 4, 1 << 20) == 0.0


def _tucker():
    expr = "abc,ai,bj,ck->ijk"
    ext = dict(a=32, b=32, c=32, i=96, j=96, k=96)
    rng = np.random.default_rng(0)
    ops = [rng.standard_normal([ext[c] for c in t]).astype(np.float32)
           for t in expr.split("->")[0].split(",")]
    return expr, ops


@pytest.mark.parametrize("latency", [0.0, 1e-6])
def test_the_tree_planner_prices_what_its_steps_hand_over(latency):
    """With no cross-core latency no step waits; with a large one the layouts chosen
    wait no longer than opt_einsum's orders would, and every account adds up."""
    saved = machine_params()
    try:
        set_machine_params(replace(saved, handoff_seconds=latency))
        tp.plan_cache.clear()
        expr, ops = _tucker()
        plan = tp.plan(expr, *ops)
        layouts = plan.info.tree_layouts
        waits = sum(s.handoff for s in layouts.steps)
        default_waits = sum(s.default_handoff for s in layouts.steps)
        if latency == 0:
            assert waits == default_waits == 0
        else:
            assert waits <= default_waits
        assert layouts.predicted == pytest.approx(sum(s.seconds for s in layouts.steps))
        assert layouts.predicted_default == pytest.approx(
            sum(s.default_seconds for s in layouts.steps))
        want = np.einsum(expr, *[o.astype(np.float64) for o in ops], optimize=True)
        np.testing.assert_allclose(plan(*ops), want, rtol=1e-4, atol=1e-3)
    finally:
        set_machine_params(saved)
        tp.plan_cache.clear()


def test_the_handoff_latency_is_measured_between_two_cpus(monkeypatch):
    if len(os.sched_getaffinity(0)) >= 2:
        latency = calibrate.handoff_latency(rounds=2)
        assert 0 < latency < 1e-5
    monkeypatch.setattr(calibrate.os, "sched_getaffinity", lambda pid: {0})
    assert calibrate.handoff_latency() == 0.0  # one CPU: nothing is handed over


def test_threads_that_cannot_be_placed_measure_nothing(monkeypatch):
    """A container that refuses the CPUs: no latency, and nothing left waiting."""
    def refuse(pid, cpus):
        raise OSError("not permitted")

    monkeypatch.setattr(calibrate.os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(calibrate.os, "sched_setaffinity", refuse)
    assert calibrate.handoff_latency() == 0.0


def test_a_failing_call_on_a_placed_thread_is_raised_in_the_caller():
    pinned = calibrate._Pinned(sorted(os.sched_getaffinity(0))[0])
    try:
        assert pinned.call(lambda: 6 * 7) == 42
        with pytest.raises(ZeroDivisionError):
            pinned.call(lambda: 1 / 0)
        assert pinned.call(lambda: "still serving") == "still serving"
    finally:
        pinned.stop()
