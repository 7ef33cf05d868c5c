"""Long work says so before it starts (teir_plan/progress.py), unless silenced."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from teir_plan import progress
from teir_plan.planner import autotune


def test_the_line_comes_before_the_work(caplog: pytest.LogCaptureFixture,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TEIR_PLAN_QUIET", raising=False)
    seen: list[int] = []
    with caplog.at_level(logging.WARNING, logger="teir_plan"), \
            progress.working("measuring the moon", "about 3 s"):
        seen.append(len(caplog.records))
    assert seen == [1]
    assert "measuring the moon (about 3 s" in caplog.records[0].getMessage()


def test_quiet_silences_it(caplog: pytest.LogCaptureFixture,
                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEIR_PLAN_QUIET", "1")
    with caplog.at_level(logging.WARNING, logger="teir_plan"), \
            progress.working("measuring the moon", "about 3 s"):
        pass
    assert not caplog.records


def test_durations_read_roughly() -> None:
    assert progress.seconds_text(0.2) == "about 1 s"
    assert progress.seconds_text(42) == "about 42 s"
    assert progress.seconds_text(600) == "about 10 min"


class _Slow:
    """A plan predicted to take long, timed with a fake clock."""

    predicted_seconds = 2.0
    out_spec = "x"

    def empty_out(self) -> np.ndarray:
        return np.empty(1)

    def run(self, arrays, out) -> None:  # type: ignore[no-untyped-def]
        out[0] = 1.0


def test_timing_candidates_predicted_over_a_second_says_so(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TEIR_PLAN_QUIET", raising=False)
    ticks = iter(range(1000))
    with caplog.at_level(logging.WARNING, logger="teir_plan"):
        autotune.time_in_turns([_Slow(), _Slow()], [], repeats=2,  # type: ignore[list-item]
                               clock=lambda: float(next(ticks)))
    (record,) = caplog.records
    assert "timing 2 candidate plans, 3 runs each (about 12 s" in record.getMessage()
