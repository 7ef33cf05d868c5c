"""The one-call runner's own pieces (teir_plan/executor/steps_runner.py); the runs of
whole plans through it, against numpy, are tests/test_one_call.py's."""

from __future__ import annotations

import numpy as np

from teir_plan.executor.steps_runner import GATHER, gather, steps_program


def test_gather_records_each_arrays_pointer_and_length() -> None:
    arrays = [np.zeros(n + 1, np.float32) for n in range(GATHER)]
    ptrs = np.full(2 * GATHER, -1, np.int64)
    sizes = np.full(2 * GATHER, -1, np.int64)
    gather(ptrs, sizes, 3, *arrays)
    assert ptrs[:3].tolist() == [-1] * 3 and ptrs[3 + GATHER:].tolist() == [-1] * (GATHER - 3)
    assert ptrs[3:3 + GATHER].tolist() == [a.ctypes.data for a in arrays]
    assert sizes[3:3 + GATHER].tolist() == [a.shape[0] for a in arrays]


def test_no_programs_make_no_table() -> None:
    assert steps_program([], np.zeros((0, 3), np.int64), np.zeros(0, np.int64)) is None
