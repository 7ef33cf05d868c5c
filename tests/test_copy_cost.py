"""The copy planner's price of a permutation (planner/copy.py): a transposing copy from
memory into short runs of out costs SHORT_RUN_COPY_FACTOR times a copy of long runs of
the same bytes; from the LLC, or untransposed, it does not."""

from __future__ import annotations

import numpy as np

from teir_plan.machine import MachineParams
from teir_plan.planner.copy import SHORT_RUN_COPY_FACTOR, plan_copy

PARAMS = MachineParams()


def _axes(in_order: str, out_order: str, ext: dict[str, int]) -> list[tuple[str, int, int, int]]:
    """(name, extent, stride in, stride out) of a row-major input and output."""

    def strides(order: str) -> dict[str, int]:
        out, step = {}, 1
        for name in reversed(order):
            out[name] = step
            step *= ext[name]
        return out

    s_in, s_out = strides(in_order), strides(out_order)
    return [(n, ext[n], s_in[n], s_out[n]) for n in out_order]


def _seconds(in_order: str, out_order: str, ext: dict[str, int]) -> float:
    plans = plan_copy(_axes(in_order, out_order, ext), np.dtype(np.float32), PARAMS, 2)
    return plans[0].cost.seconds


def test_a_transposing_copy_into_short_runs_of_out_costs_more_from_memory() -> None:
    # dfbeac->abcdef: out's unit stride is f, 20 elements (80 bytes), far apart in the
    # input; measured 2.4-2.6x the model's price of long runs (369 MB, both cores).
    big = dict(a=24, b=20, c=20, d=24, e=20, f=20)
    short = _seconds("dfbeac", "abcdef", big)
    # The same bytes with out's unit stride along c, the input's own: long runs.
    long_ = _seconds("dfbeac", "abdefc", big)
    assert short >= 0.9 * SHORT_RUN_COPY_FACTOR * long_
    # The same transpose in the LLC: no gathering from memory, no factor.
    small = dict(a=6, b=5, c=20, d=6, e=5, f=20)
    assert PARAMS.llc_bytes >= 4 * 20 * 20 * 6 * 6 * 5 * 5
    assert _seconds("dfbeac", "abcdef", small) < SHORT_RUN_COPY_FACTOR * _seconds(
        "dfbeac", "abdefc", small)


def test_long_runs_of_out_pay_no_short_run_factor() -> None:
    # ba->ab, 8192^2: a transpose, but out's runs are 8192 elements long (measured within
    # 5% of the model without the factor).
    ext = dict(a=8192, b=8192)
    plain = _seconds("ab", "ab", ext)
    assert _seconds("ba", "ab", ext) < 2 * plain


def test_short_runs_gathered_from_one_block_of_the_input_pay_no_factor() -> None:
    # eacdfb->abcdef: out's unit stride f steps 80 bytes in the input (f and b are one
    # contiguous block there); measured at 23 GB/s, against 12 for dfbeac->abcdef.
    big = dict(a=24, b=20, c=20, d=24, e=20, f=20)
    near = _seconds("eacdfb", "abcdef", big)
    far = _seconds("dfbeac", "abcdef", big)
    assert far >= 0.9 * SHORT_RUN_COPY_FACTOR * near
