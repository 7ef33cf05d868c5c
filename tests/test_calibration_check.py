"""tp.calibrate() cannot make plans worse: new parameters that choose slower plans for the
probe contractions than the parameters in force are neither saved nor used.  The decision
is tested with made-up times (timing on a shared machine is not a test's to assert)."""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import replace

import numpy as np
import pytest

import teir_plan as tp
from teir_plan.calibration.check import (
    PROBES,
    TOLERANCE,
    ProbeTimes,
    judge,
    robust_seconds,
)
from teir_plan.errors import CalibrationWarning, PlanError
from teir_plan.machine import MachineParams, machine_key, set_machine_params
from teir_plan.schedule import calibrate as checked


def _times(ratios: list[float]) -> list[ProbeTimes]:
    return [ProbeTimes(sub, 1e-3 * (i + 1), 1e-3 * (i + 1) * r)
            for i, ((sub, _), r) in enumerate(zip(PROBES, ratios))]


def test_parameters_whose_plans_run_slower_are_refused() -> None:
    n = len(PROBES)
    assert judge(_times([1.0] * n)).accepted
    assert judge(_times([0.8] + [1.0] * (n - 1))).accepted  # faster: kept
    # One probe twice as slow, the others unchanged: the mean ratio 2 ** (1 / n).
    worse = judge(_times([2.0] + [1.0] * (n - 1)))
    assert not worse.accepted and worse.ratio == pytest.approx(2 ** (1 / n))
    assert worse.worst.subscripts == PROBES[0][0]
    assert "refused" in worse.describe() and PROBES[0][0] in worse.describe()
    # Slower everywhere by less than the tolerance (timing noise): kept; by more: refused.
    assert judge(_times([1 + TOLERANCE / 2] * n)).accepted
    assert not judge(_times([1 + 2 * TOLERANCE] * n)).accepted
    # A faster probe does not hide a slower mean.
    assert not judge(_times([0.9] + [1.2] * (n - 1))).accepted


def test_the_check_refuses_what_it_cannot_judge() -> None:
    with pytest.raises(PlanError, match="no probe times"):
        judge([])
    for bad in (0.0, -1e-3, math.nan, math.inf):
        with pytest.raises(PlanError, match="new_seconds"):
            ProbeTimes("ij,jk->ik", 1e-3, bad)
    with pytest.raises(PlanError, match="tolerance"):
        judge(_times([1.0]), tolerance=math.nan)


def test_robust_readings_drop_the_slow_outliers() -> None:
    readings = [1.0e-3, 1.02e-3, 4.0e-3, 0.98e-3, 9.0e-3]
    kept = [r for r in readings if r <= 1.5 * min(readings)]
    assert robust_seconds(readings) == pytest.approx(float(np.median(kept)))
    assert robust_seconds([2.0]) == 2.0
    with pytest.raises(PlanError):
        robust_seconds([])


@pytest.fixture
def fresh(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    """An empty cache, the old parameters in force (a first-use estimate), the full
    measurement replaced by made-up parameters; restored afterwards."""
    saved = tp.machine_params()
    monkeypatch.setenv("TEIR_PLAN_CACHE_DIR", str(tmp_path))
    old = replace(MachineParams.reference(), gemm_flops_f32=90e9, source="first-use")
    new = replace(MachineParams.reference(), gemm_flops_f32=150e9, source="calibrated",
                  calibrated=True, machine=machine_key())
    set_machine_params(old)
    monkeypatch.setattr(checked, "measure_full", lambda: new)
    yield tmp_path, old, new
    set_machine_params(saved)


def test_calibrate_refuses_parameters_that_rank_worse(fresh, monkeypatch) -> None:
    cache, old, new = fresh
    seen = []

    def slower(before, after):  # type: ignore[no-untyped-def]
        seen.append((before, after))
        return tuple(_times([1.5] * len(PROBES)))

    monkeypatch.setattr(checked, "time_probes", slower)
    with pytest.warns(CalibrationWarning, match="neither saved nor used") as caught:
        got = tp.calibrate()
    assert seen == [(old, new)]  # judged against the parameters in force
    assert got is old and tp.machine_params() is old
    assert "refused" in str(caught[0].message)
    assert checked.last_check is not None and not checked.last_check.accepted
    assert not any(cache.iterdir())  # nothing saved
    # The plans made meanwhile use the old parameters: the result is numpy's.
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_allclose(tp.einsum("ij,kj->ik", a, a), np.einsum("ij,kj->ik", a, a))


def test_calibrate_keeps_parameters_that_rank_no_worse(fresh, monkeypatch) -> None:
    cache, old, new = fresh
    monkeypatch.setattr(checked, "time_probes",
                        lambda before, after: tuple(_times([0.9] * len(PROBES))))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = tp.calibrate()
    assert got is new and tp.machine_params() is new
    assert checked.last_check is not None and checked.last_check.accepted
    saved = json.loads((cache / "machine.json").read_text())[machine_key()]
    assert saved["gemm_flops_f32"] == 150e9 and saved["calibrated"]


def test_calibrate_without_the_check_keeps_what_it_measured(fresh, monkeypatch) -> None:
    cache, old, new = fresh

    def no_timing(before, after):  # type: ignore[no-untyped-def]
        raise AssertionError("timed the probes, but the check was off")

    monkeypatch.setattr(checked, "time_probes", no_timing)
    assert tp.calibrate(save=False, check=False) is new
    assert checked.last_check is None and not any(cache.iterdir())


def test_the_probes_run_and_give_a_time_for_each_plan() -> None:
    """One round of the real probes, the reference against itself (no timing
    asserted: each probe's two plans are the same, and each gives a positive time)."""
    ref = MachineParams.reference()
    times = checked.time_probes(ref, replace(ref), rounds=1)
    assert [t.subscripts for t in times] == [sub for sub, _ in PROBES]
    assert all(t.old_seconds > 0 and t.new_seconds > 0 for t in times)
